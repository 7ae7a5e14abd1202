//! `trafik dns ds ZONE`: the DS record of a signed zone's KSK, for the parent zone.

use std::process::ExitCode;

use trafik_dns::zone::parse_name;

use super::{load_config, say};
use crate::cli::DsArgs;

/// Reads the config (making the zone's keys when absent, as `serve` would) and prints the DS
/// record in master-file form, ready for the parent's zone or the registrar's form.
pub fn ds(args: DsArgs) -> Result<ExitCode, String> {
    let loaded = load_config(args.config.as_deref())?;
    let zone =
        parse_name(&args.zone, None).map_err(|error| format!("zone {:?}: {error}", args.zone))?;
    let dns = loaded.plan.dns.ok_or("the config has no [dns] section")?;
    let plan = dns
        .zones
        .zones
        .iter()
        .find(|plan| parse_name(&plan.origin, None).is_ok_and(|origin| origin == zone))
        .ok_or_else(|| format!("the config has no zone {zone}"))?;
    let keys = plan.dnssec.as_ref().ok_or_else(|| {
        format!("zone {zone} is not signed: add [dns.zone.dnssec] keys = \"dns-keys/\"")
    })?;
    let ds = keys.ds(&zone)?;
    say(&format!("{zone} IN DS {ds}"));
    Ok(ExitCode::SUCCESS)
}
