//! `trafik reload`: `POST /reload` to a running instance's admin API, and its verdict.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::Duration;

use super::say;
use crate::cli::ReloadArgs;

pub fn run(args: ReloadArgs) -> Result<ExitCode, String> {
    let admin = args.admin;
    let unreachable = |e: std::io::Error| {
        format!(
            "no admin API answers on {admin}: {e}; is `trafik serve` running with an [admin] section (or pass --admin)?"
        )
    };
    let mut stream =
        TcpStream::connect_timeout(&admin, Duration::from_secs(5)).map_err(unreachable)?;
    // A reload reads and checks a file and may bind listeners: seconds at most.
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(unreachable)?;
    // An admin API beyond loopback requires its bearer token; it comes from the environment so
    // it shows in no process listing.
    let authorization = std::env::var("TRAFIK_ADMIN_TOKEN")
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "POST /reload HTTP/1.1\r\nHost: {admin}\r\n{authorization}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .map_err(unreachable)?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).map_err(unreachable)?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{admin} did not answer with HTTP"))?;
    let status = head.split(' ').nth(1).unwrap_or("");
    let json: serde_json::Value = serde_json::from_str(body)
        .map_err(|_| format!("{admin} answered {status} without JSON: {body}"))?;
    match (
        status,
        json["generation"].as_u64(),
        json["errors"].as_array(),
    ) {
        ("200", Some(generation), _) => {
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
        _ => Err(format!("{admin} answered {status}: {body}")),
    }
}
