//! `trafik check`: validate a config and print the plan it resolves to.

use std::process::ExitCode;

use super::{load_config, say};
use crate::cli::CheckArgs;
use crate::describe;

pub fn run(args: CheckArgs) -> Result<ExitCode, String> {
    let loaded = load_config(args.config.as_deref())?;
    say(describe::plan(&loaded).trim_end());
    Ok(ExitCode::SUCCESS)
}
