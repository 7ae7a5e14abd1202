//! `trafik`: wires the command line and configuration to the data plane. Everything that
//! decides or moves traffic lives in the library crates; this binary parses the command line
//! and hands each command to its module in [`command`].

mod cli;
mod command;
mod config;
mod describe;
mod load;
mod suggest;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use cli::{Cli, Command, LogFormat};
use command::{
    cert, check, dns, explain, fleet, plan, proxy, reload, say, serve, sim, token, top, upstream,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(cli.log_format);
    command::JSON_LINES.store(
        matches!(cli.log_format, LogFormat::Json),
        std::sync::atomic::Ordering::Relaxed,
    );
    match run(cli.command) {
        Ok(code) => code,
        Err(message) => {
            // Every line is marked, so a report of several problems reads (and greps) as one.
            let mut stderr = std::io::stderr().lock();
            for line in message.lines() {
                let _ = writeln!(stderr, "error: {line}");
            }
            ExitCode::from(2)
        }
    }
}

/// Runs one command; its verdict is the exit status (`trafik load` has its own).
fn run(command: Command) -> Result<ExitCode, String> {
    match command {
        Command::Serve(args) => serve::run(args),
        Command::Check(args) => check::run(args),
        Command::Reload(args) => reload::run(args),
        Command::Proxy(args) => proxy::run(*args),
        Command::Sim(model) => sim::run(model),
        Command::Upstream(args) => upstream::run(args),
        Command::Load(args) => load::run(*args),
        Command::Top(args) => top::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Status(args) => fleet::status(args),
        Command::Config(cli::ConfigCommand::Push(args)) => fleet::push(args),
        Command::Dns(cli::DnsCommand::Ds(args)) => dns::ds(args),
        Command::Cert(cli::CertCommand::Renew(args)) => cert::renew(args),
        Command::Token(args) => token::run(args),
        Command::Explain(args) => explain::run(args),
    }
}

/// Log lines go to stderr, coloured only when a person is likely reading it there: escape codes
/// in a file or a pipe are noise.
fn init_logs(format: LogFormat) {
    // hickory's server code logs at info per request; trafik's own query log is `dns.query_log`.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,hickory_server=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
