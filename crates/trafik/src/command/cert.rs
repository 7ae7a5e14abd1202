//! `trafik cert renew`: `POST /certificates/renew` to a running instance, then its `/status`
//! read until each asked certificate was renewed or its order failed.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::admin_client::exchange;
use super::say;
use crate::cli::CertRenewArgs;

const CALL: Duration = Duration::from_secs(10);

/// The certificate entries of `/status`, by their domains.
fn certificates(args: &CertRenewArgs) -> Result<Vec<Value>, String> {
    let (status, json) = exchange(args.admin, "GET", "/status", CALL)?;
    match (status, json["certificates"].as_array()) {
        (200, Some(entries)) => Ok(entries.clone()),
        _ => Err(format!("{} answered {status} to /status", args.admin)),
    }
}

fn count(entry: &Value, field: &str) -> u64 {
    entry[field].as_u64().unwrap_or(0)
}

pub fn renew(args: CertRenewArgs) -> Result<ExitCode, String> {
    let before = certificates(&args)?;
    let path = match &args.domain {
        Some(domain) => format!("/certificates/renew?domain={domain}"),
        None => "/certificates/renew".into(),
    };
    let (status, json) = exchange(args.admin, "POST", &path, CALL)?;
    let asked: Vec<Value> = match (status, json["renewing"].as_array()) {
        (202, Some(asked)) => asked.clone(),
        (404, _) => {
            return Err(match &args.domain {
                Some(domain) => format!("no ACME certificate names {domain}"),
                None => "this instance has no ACME certificate ([[listener.tls]] acme)".into(),
            });
        }
        _ => return Err(format!("{} answered {status}: {json}", args.admin)),
    };
    let deadline = Instant::now() + args.wait;
    let mut failed = false;
    for domains in &asked {
        let was = before.iter().find(|e| e["domains"] == *domains);
        let (renewals, failures) =
            was.map_or((0, 0), |e| (count(e, "renewals"), count(e, "failures")));
        loop {
            let now = certificates(&args)?;
            let entry = now.iter().find(|e| e["domains"] == *domains).cloned();
            let entry = entry.unwrap_or_default();
            if count(&entry, "renewals") > renewals {
                say(&format!(
                    "renewed {domains}: served until {} (Unix time), renewed again at {}",
                    entry["not_after"], entry["renew_at"]
                ));
                break;
            }
            if count(&entry, "failures") > failures {
                say(&format!(
                    "renewal of {domains} failed, the old certificate stays: {}",
                    entry["last_error"].as_str().unwrap_or("unknown error")
                ));
                failed = true;
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("{domains}: no outcome within {:?}", args.wait));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
