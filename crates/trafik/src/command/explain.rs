//! `trafik explain`: why a request goes where it goes — offline from a config file, or from a
//! running instance's `POST /explain`. Both answer with the same JSON, from the code that
//! serves requests (`trafik_http::explain`).

use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};

use super::admin_client::send;
use super::{load_config, say};
use crate::cli::{ExplainArgs, ExplainDnsArgs, ExplainWhat};

pub fn run(args: ExplainArgs) -> Result<ExitCode, String> {
    if let Some(ExplainWhat::Dns(args)) = args.what {
        return run_dns(args);
    }
    let (Some(method), Some(url)) = (args.method, args.url) else {
        return Err("explain needs METHOD URL, or dns NAME".into());
    };
    let headers = args
        .headers
        .iter()
        .map(|line| {
            line.split_once(':')
                .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
                .ok_or_else(|| format!("-H {line:?}: write a header as 'Name: value'"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let document = match args.admin {
        Some(admin) => {
            let body = json!({
                "method": method,
                "url": url,
                "headers": headers
                    .iter()
                    .map(|(name, value)| (name.clone(), Value::from(value.as_str())))
                    .collect::<serde_json::Map<String, Value>>(),
                "client": args.client,
            });
            ask(admin, "/explain", &body)?
        }
        None => {
            let loaded = load_config(args.config.as_deref())?;
            let question = trafik_proxy::explain::Question::new(
                &method,
                &url,
                &headers,
                args.client.as_deref(),
            )?;
            trafik_proxy::explain_offline(&loaded.plan, &question)
                .map_err(|errors| errors.join("\n"))?
        }
    };
    show(&document, args.json, trafik_proxy::explain::render)
}

/// `trafik explain dns NAME`: offline from the file's `[dns]`, or the instance's
/// `POST /explain/dns`.
fn run_dns(args: ExplainDnsArgs) -> Result<ExitCode, String> {
    let document = match args.admin {
        Some(admin) => {
            let body = json!({
                "name": args.name,
                "type": args.kind,
                "client_subnet": args.client_subnet,
                "client": args.client,
            });
            ask(admin, "/explain/dns", &body)?
        }
        None => {
            let loaded = load_config(args.config.as_deref())?;
            let question = trafik_dns::zone::explain::Question::new(
                &args.name,
                &args.kind,
                args.client_subnet.as_deref(),
                args.client.as_deref(),
            )?;
            trafik_proxy::explain_dns_offline(&loaded.plan, &question, &args.down)
                .map_err(|errors| errors.join("\n"))?
        }
    };
    show(&document, args.json, trafik_dns::zone::explain::render)
}

/// `POST path` with `body` to the admin API at `admin`: the explanation, or why not.
fn ask(admin: std::net::SocketAddr, path: &str, body: &Value) -> Result<Value, String> {
    let (status, document) = send(
        admin,
        "POST",
        path,
        &body.to_string(),
        Duration::from_secs(10),
    )?;
    if status != 200 {
        return Err(format!("{admin} answered {status}: {document}"));
    }
    Ok(document)
}

/// Prints the explanation: its JSON, or `render`'s text for people.
fn show(document: &Value, json: bool, render: fn(&Value) -> String) -> Result<ExitCode, String> {
    if json {
        say(&serde_json::to_string_pretty(document).unwrap_or_default());
    } else {
        say(render(document).trim_end());
    }
    Ok(ExitCode::SUCCESS)
}
