//! `trafik plan OLD NEW`: both configurations checked as `trafik check` would, their pools
//! compared on the proxy's selection code (`trafik_sim::change`), their DNS names on the
//! policies' own decisions (`trafik_sim::dns_change`), their routes on the proxy's route table
//! (`trafik_proxy::route_change`): targets, and every setting of the routes that take each
//! example request.

use std::process::ExitCode;

use trafik_balance::Algorithm;
use trafik_proxy::dns::RegionHealth;
use trafik_proxy::plan::failover::{self, Budget};
use trafik_proxy::plan::{Discover, HealthPlan, PoolPlan, StickyPlan};
use trafik_proxy::route_change::{self, RouteChange};
use trafik_sim::change::{self, KeySample, PoolShape};
use trafik_sim::dns_change::{self, DnsShape};

use super::{load_config, say};
use crate::cli::PlanArgs;
use crate::config::Loaded;

pub fn run(args: PlanArgs) -> Result<ExitCode, String> {
    let (before, after) = match (args.files.as_slice(), args.etcd.etcd.is_some()) {
        ([old, new], false) => (load_config(Some(old))?, load_config(Some(new))?),
        ([new], true) => (super::fleet::current(&args.etcd)?, load_config(Some(new))?),
        _ => {
            return Err(
                "give OLD and NEW files, or --etcd URL and the NEW file to compare with the fleet's configuration"
                    .into(),
            );
        }
    };
    if let Some(log) = &args.replay {
        return replay(&before, &after, log, args.fail_if.as_deref(), args.json);
    }
    let sample = KeySample {
        prefix: args.key_prefix,
        count: args.keys,
    };
    let report = change::compare(&pools(&before), &pools(&after), &sample);
    let dns = dns_change::compare(&dns(&before), &dns(&after), DNS_QUERIES)?;
    let routes = route_change::changed_routes(&before.plan.listeners, &after.plan.listeners);
    let budgets = failover_changes(
        &failover::budgets(&before.plan),
        &failover::budgets(&after.plan),
    );
    if args.json {
        let mut json = serde_json::to_value(&report).map_err(|e| e.to_string())?;
        json["dns"] = serde_json::to_value(&dns).map_err(|e| e.to_string())?;
        json["routes"] = routes.iter().map(route_json).collect();
        json["failover"] = budgets.iter().map(FailoverChange::json).collect();
        say(&serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?);
    } else {
        let mut text = report.render();
        text.push_str(&dns_change::render(&dns));
        text.push_str(&render_routes(&routes));
        text.push_str(&render_failover(&budgets));
        say(text.trim_end());
    }
    Ok(ExitCode::SUCCESS)
}

/// `--replay LOG`: the log's requests through both configurations (`trafik_http::replay`);
/// exit 1 when a `--fail-if` condition holds, naming its figure. DNS names are compared on the
/// queries of the DNS query log when the file holds them, else on sample queries.
fn replay(
    before: &Loaded,
    after: &Loaded,
    log: &std::path::Path,
    fail_if: Option<&str>,
    json: bool,
) -> Result<ExitCode, String> {
    let thresholds = trafik_proxy::replay::parse_thresholds(fail_if.unwrap_or_default())
        .map_err(|error| format!("--fail-if {error}"))?;
    let text =
        std::fs::read_to_string(log).map_err(|error| format!("{}: {error}", log.display()))?;
    let (records, unreadable) = trafik_proxy::replay::read_log(&text);
    if records.is_empty() {
        return Err(format!(
            "{}: no access lines (write them with `trafik serve --access-log --log-format json`)",
            log.display()
        ));
    }
    let mut report = trafik_proxy::replay_offline(&before.plan, &after.plan, &records)
        .map_err(|errors| errors.join("\n"))?;
    report["unreadable_lines"] = unreadable.into();
    // DNS: the query log's lines in the same file (`[dns] query_log = true`), else sample
    // queries from a client of each group, as without a log.
    let queries = dns_change::read_queries(&text);
    let (shifts, samples) = match queries.is_empty() {
        false => (
            dns_change::replay(&dns(before), &dns(after), &queries)?,
            Vec::new(),
        ),
        true => (
            Vec::new(),
            dns_change::compare(&dns(before), &dns(after), DNS_QUERIES)?,
        ),
    };
    report["dns_queries"] = queries.len().into();
    report["dns"] = match queries.is_empty() {
        false => serde_json::to_value(&shifts),
        true => serde_json::to_value(&samples),
    }
    .map_err(|e| e.to_string())?;
    let failed = trafik_proxy::replay::failing(&report, &thresholds);
    report["failed"] = failed.clone().into();
    if json {
        say(&serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
    } else {
        let mut text = trafik_proxy::replay::render(&report);
        if unreadable > 0 {
            text.push_str(&format!("\n{unreadable} access lines could not be read\n"));
        }
        if !shifts.is_empty() {
            text.push_str(&dns_change::render_shifts(&shifts));
        }
        if !samples.is_empty() {
            text.push_str("\nDNS, on sample queries (the log holds no DNS queries):");
            text.push_str(&dns_change::render(&samples));
        }
        say(text.trim_end());
    }
    if failed.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for failure in &failed {
        eprintln!("trafik plan: fails: {failure}");
    }
    Ok(ExitCode::from(1))
}

/// Sample queries per DNS name.
const DNS_QUERIES: usize = 10_000;

/// A configuration's DNS, each region's detection time from its health source: its own checks
/// or its pool's (the failover budget's `fall × max(interval, timeout) + timeout`); none when it
/// is always live.
fn dns(loaded: &Loaded) -> DnsShape<'_> {
    let Some(service) = &loaded.plan.dns else {
        return DnsShape {
            plan: None,
            detection: Vec::new(),
        };
    };
    let detection_of =
        |health: &HealthPlan| Some(failover::checks(health).detection().as_secs_f64());
    let detection = service
        .health
        .iter()
        .map(|source| match source {
            RegionHealth::Always => None,
            RegionHealth::Check { plan, .. } => detection_of(plan),
            RegionHealth::Pool(name) => loaded
                .plan
                .pools
                .iter()
                .find(|p| &p.name == name)
                .and_then(|p| p.health.as_ref())
                .and_then(detection_of),
        })
        .collect();
    DnsShape {
        plan: Some(&service.zones),
        detection,
    }
}

/// A pool's, route's or DNS name's failover budget that a change moves: its text before and
/// after (`None` where it is not in that configuration).
struct FailoverChange {
    kind: &'static str,
    name: String,
    before: Option<Budget>,
    after: Option<Budget>,
}

impl FailoverChange {
    fn json(&self) -> serde_json::Value {
        let side = |budget: &Option<Budget>| {
            budget
                .as_ref()
                .map(|b| serde_json::json!({ "seconds": b.seconds(), "text": b.to_string() }))
        };
        serde_json::json!({
            "kind": self.kind,
            "name": self.name,
            "before": side(&self.before),
            "after": side(&self.after),
        })
    }
}

/// Every budget whose figure or terms differ between the two configurations: pools and DNS
/// names with their terms, routes by their pool's figure.
fn failover_changes(before: &failover::Budgets, after: &failover::Budgets) -> Vec<FailoverChange> {
    /// Every entry of a configuration, by kind: (kind, name, budget).
    fn entries(budgets: &failover::Budgets) -> Vec<(&'static str, &str, &Budget)> {
        let pools = budgets.pools.iter().map(|(n, b)| ("pool", n.as_str(), b));
        let routes = budgets
            .routes
            .iter()
            .map(|r| ("route", r.route.as_str(), &r.budget));
        let names = budgets
            .names
            .iter()
            .map(|(n, b)| ("dns name", n.as_str(), b));
        pools.chain(routes).chain(names).collect()
    }
    let (old, new) = (entries(before), entries(after));
    let find = |side: &[(&str, &str, &Budget)], kind: &str, name: &str| {
        side.iter()
            .find(|(k, n, _)| *k == kind && *n == name)
            .map(|(_, _, budget)| (*budget).clone())
    };
    let added = new
        .iter()
        .filter(|(kind, name, _)| find(&old, kind, name).is_none());
    old.iter()
        .chain(added)
        .filter_map(|(kind, name, _)| {
            let before = find(&old, kind, name);
            let after = find(&new, kind, name);
            (before != after).then(|| FailoverChange {
                kind,
                name: (*name).to_owned(),
                before,
                after,
            })
        })
        .collect()
}

fn render_failover(changes: &[FailoverChange]) -> String {
    if changes.is_empty() {
        return "\nfailover budgets: unchanged\n".to_owned();
    }
    let mut out = "\nfailover budgets that change (before → after)\n".to_owned();
    for change in changes {
        let text = |budget: &Option<Budget>| match (budget, change.kind) {
            (None, _) => "(none)".to_owned(),
            (Some(budget), "route") => budget.summary(),
            (Some(budget), _) => budget.to_string(),
        };
        out.push_str(&format!(
            "  {} {}: {} → {}\n",
            change.kind,
            change.name,
            text(&change.before),
            text(&change.after)
        ));
    }
    out
}

fn route_json(change: &RouteChange) -> serde_json::Value {
    serde_json::json!({
        "listener": change.listener,
        "method": change.method,
        "host": change.host,
        "path": change.path,
        "asking": change.asking,
        "before": change.before,
        "after": change.after,
        "fields": change.fields.iter().map(|f| serde_json::json!({
            "field": f.field,
            "before": f.before,
            "after": f.after,
        })).collect::<Vec<_>>(),
    })
}

fn render_routes(changes: &[RouteChange]) -> String {
    if changes.is_empty() {
        return "\nroutes: no example request changes target or route settings\n".to_owned();
    }
    let mut out = "\nroutes: example requests that change target or route settings\n".to_owned();
    for c in changes {
        let asking = match c.asking.is_empty() {
            true => String::new(),
            false => format!(" ({})", c.asking),
        };
        let target = match c.before == c.after {
            true => c.before.clone(),
            false => format!("{} → {}", c.before, c.after),
        };
        out.push_str(&format!(
            "  {} {} {}{}{asking}: {target}\n",
            c.listener,
            c.method,
            c.host.as_deref().unwrap_or("*"),
            c.path,
        ));
        let absent = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_owned());
        for field in &c.fields {
            out.push_str(&format!(
                "    {}: {} → {}\n",
                field.field,
                absent(&field.before),
                absent(&field.after)
            ));
        }
    }
    out
}

fn pools(loaded: &Loaded) -> Vec<PoolShape> {
    loaded.plan.pools.iter().map(shape).collect()
}

/// What placement depends on in a pool, as the proxy builds it: key stickiness places by its
/// own modulo or ring (`trafik_proxy::sticky`), otherwise the pool's algorithm does.
pub fn shape(pool: &PoolPlan) -> PoolShape {
    let mut options = pool.selector_options.clone();
    let keyed = pool.hash_key.is_some();
    let algorithm = match &pool.sticky {
        Some(StickyPlan::Modulo) if keyed => Algorithm::Modulo,
        Some(StickyPlan::Consistent { virtual_nodes }) if keyed => {
            options.virtual_nodes = *virtual_nodes;
            Algorithm::ConsistentHash
        }
        _ => pool.algorithm,
    };
    // A name's addresses are known only at run time: it is placed as one backend, by the name
    // as written, so adding or removing a name shows as a backend added or removed.
    let names = pool
        .discover
        .iter()
        .map(|discover| trafik_balance::BackendSpec {
            id: discover.to_string(),
            weight: match discover {
                Discover::Name { weight, .. } => (*weight).max(1),
                Discover::Srv { .. } => 1,
            },
        });
    PoolShape {
        name: pool.name.clone(),
        algorithm,
        options,
        backends: pool.backend_specs().chain(names).collect(),
        labels: pool
            .backends
            .iter()
            .map(|b| b.name.clone().unwrap_or_else(|| b.address.to_string()))
            .chain(pool.discover.iter().map(ToString::to_string))
            .collect(),
        sticky_clients: matches!(pool.sticky, Some(StickyPlan::Cookie { .. })),
    }
}
