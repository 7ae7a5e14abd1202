//! One module per `trafik` command; each turns its parsed flags into a run.

pub mod admin_client;
pub mod canary;
pub mod cert;
pub mod check;
pub mod dns;
pub mod explain;
pub mod fleet;
pub mod plan;
pub mod proxy;
pub mod push_gate;
pub mod reload;
pub mod serve;
pub mod sim;
pub mod token;
pub mod top;
pub mod upgrade;
pub mod upstream;

use std::path::Path;

use crate::config::{self, Loaded};

/// Reads and checks a config file, or the embedded default when there is none.
fn load_config(path: Option<&Path>) -> Result<Loaded, String> {
    let (name, text) = match path {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                config::render_errors(&[format!("cannot read config file {}: {e}", path.display())])
            })?;
            (path.display().to_string(), text)
        }
        None => (
            "<embedded default>".to_owned(),
            config::EMBEDDED_DEFAULT.to_owned(),
        ),
    };
    config::load(&name, &text).map_err(|errors| config::render_errors(&errors))
}

/// Whether `--log-format json` is in force: `trafik serve`'s startup lines are then JSON too.
pub static JSON_LINES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Prints a line for the user. A closed stdout (`trafik serve | head -1`) must not stop a
/// server, so write errors are ignored.
pub fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// Prints `trafik serve`'s startup lines: as they are, or under `--log-format json` one JSON
/// object each, shaped as the log lines are (`timestamp`, `level`, `fields.message`, `target`),
/// so a log collector reads every line of the run.
pub fn say_status(text: &str) {
    if !JSON_LINES.load(std::sync::atomic::Ordering::Relaxed) {
        return say(text);
    }
    let timestamp = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    for line in text.lines() {
        let object = serde_json::json!({
            "timestamp": timestamp,
            "level": "INFO",
            "fields": {"message": line},
            "target": "trafik",
        });
        say(&object.to_string());
    }
}
