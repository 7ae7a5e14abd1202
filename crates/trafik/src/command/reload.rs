//! `trafik reload`: `POST /reload` to a running instance's admin API, and its verdict.

use std::process::ExitCode;
use std::time::Duration;

use super::admin_client::exchange;
use super::say;
use crate::cli::ReloadArgs;

pub fn run(args: ReloadArgs) -> Result<ExitCode, String> {
    let admin = args.admin;
    // A reload reads and checks a file and may bind listeners: seconds at most.
    let (status, json) = exchange(admin, "POST", "/reload", Duration::from_secs(30))?;
    match (
        status,
        json["generation"].as_u64(),
        json["errors"].as_array(),
    ) {
        (200, Some(generation), _) => {
            say(&format!("reloaded: configuration generation {generation}"));
            Ok(ExitCode::SUCCESS)
        }
        (_, _, Some(errors)) => {
            let mut lines: Vec<String> = errors
                .iter()
                .map(|e| e.as_str().unwrap_or_default().to_owned())
                .collect();
            lines.push("the reload was refused; the running configuration is unchanged".into());
            Err(lines.join("\n"))
        }
        _ => Err(format!("{admin} answered {status}: {json}")),
    }
}
