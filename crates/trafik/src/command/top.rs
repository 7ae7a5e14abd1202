//! `trafik top`: the dashboard's view in a terminal, from a running instance's `/status`:
//! every pool with its rate, p50/p99, error rate and skews, each backend with its state (as a
//! word), and the listeners and routes. It only reads, so it needs no key handling: a frame is
//! text, redrawn every `--interval` (or printed once with `--once`, for scripts).

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use serde_json::Value;

use super::admin_client::exchange;
use crate::cli::TopArgs;

pub fn run(args: TopArgs) -> Result<ExitCode, String> {
    loop {
        let (status, document) = exchange(
            args.admin,
            "GET",
            "/status",
            std::time::Duration::from_secs(5),
        )?;
        if status != 200 {
            return Err(format!("{} answered {status}: {document}", args.admin));
        }
        let frame = render(&document, &args.admin.to_string());
        let mut stdout = std::io::stdout().lock();
        if args.once {
            let _ = stdout.write_all(frame.as_bytes());
            return Ok(ExitCode::SUCCESS);
        }
        // Home and clear, then the frame: the terminal shows one frame at a time.
        let _ = write!(stdout, "\x1b[H\x1b[2J{frame}");
        let _ = stdout.flush();
        std::thread::sleep(args.interval);
    }
}

/// One frame of text for a status document.
pub fn render(status: &Value, admin: &str) -> String {
    let mut out = String::new();
    let config = &status["config"];
    let _ = writeln!(
        out,
        "trafik top  {admin}  generation {}  loaded {}",
        config["generation"],
        text(&config["loaded_at"])
    );
    for pool in status["pools"].as_array().into_iter().flatten() {
        let ten = &pool["recent"]["10s"];
        let sixty = &pool["recent"]["60s"];
        let _ = writeln!(
            out,
            "\nPOOL {} ({})  req/s {}  p50 {} ms  p99 {} ms  p99(60s) {} ms  errors {}  request skew {}  connection skew {}  retries {}",
            text(&pool["name"]),
            text(&pool["algorithm"]),
            number(&ten["rate"], 1),
            number(&ten["p50_ms"], 2),
            number(&ten["p99_ms"], 2),
            number(&sixty["p99_ms"], 2),
            percent(&ten["error_rate"]),
            number(&pool["request_skew"], 2),
            number(&pool["connection_skew"], 2),
            pool["retries"],
        );
        let _ = writeln!(
            out,
            "  {:<9} {:<12} {:<22} {:>9} {:>7} {:>8} {:>8} {:>7}",
            "STATE", "NAME", "ADDRESS", "DECISIONS", "REQ/S", "P50 MS", "P99 MS", "ERRORS"
        );
        for backend in pool["backends"].as_array().into_iter().flatten() {
            let recent = &backend["recent"]["10s"];
            let _ = writeln!(
                out,
                "  {:<9} {:<12} {:<22} {:>9} {:>7} {:>8} {:>8} {:>7}",
                state(backend),
                text(&backend["name"]),
                text(&backend["address"]),
                backend["decisions"],
                number(&recent["rate"], 1),
                number(&recent["p50_ms"], 2),
                number(&recent["p99_ms"], 2),
                percent(&recent["error_rate"]),
            );
        }
    }
    let classes = |responses: &Value| {
        ["2xx", "3xx", "4xx", "5xx"]
            .iter()
            .map(|class| format!("{class} {}", responses[class]))
            .collect::<Vec<_>>()
            .join("  ")
    };
    for listener in status["listeners"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "\nLISTENER {}  open {}  accepted {}  {}",
            text(&listener["name"]),
            listener["open"],
            listener["accepted"],
            classes(&listener["responses"])
        );
    }
    for route in status["routes"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "ROUTE {} {}  {}",
            text(&route["listener"]),
            text(&route["route"]),
            classes(&route["responses"])
        );
    }
    out
}

/// A backend's state as a word, as the dashboard writes it.
fn state(backend: &Value) -> &'static str {
    if backend["healthy"] == false {
        "DOWN"
    } else if backend["draining"] == true {
        "DRAINING"
    } else if backend["ejected"] == true {
        "EJECTED"
    } else {
        "UP"
    }
}

fn text(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

fn number(value: &Value, digits: usize) -> String {
    value
        .as_f64()
        .map_or_else(|| "-".to_owned(), |n| format!("{n:.digits$}"))
}

fn percent(value: &Value) -> String {
    value
        .as_f64()
        .map_or_else(|| "-".to_owned(), |share| format!("{:.1}%", share * 100.0))
}
