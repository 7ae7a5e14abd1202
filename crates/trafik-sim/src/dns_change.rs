//! What a `[dns]` change does to each policy name (`trafik plan`): the share of each answer
//! before and after, from the policy's own decisions (`trafik-dns`) over sample queries, and
//! how long clients may still be sent to a failed region: its health detection time plus the
//! name's TTL.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use serde::Serialize;
use trafik_dns::policy::{Client, Live, Policy};
use trafik_dns::{Authority, DnsPlan};

/// One configuration's DNS (none without `[dns]`), with how soon each region (in `plan.regions` order) is known dead:
/// seconds from its failure to its health check marking it down, `None` when nothing checks it.
pub struct DnsShape<'a> {
    pub plan: Option<&'a DnsPlan>,
    pub detection: Vec<Option<f64>>,
}

/// What happens to one name.
#[derive(Clone, Debug, Serialize)]
pub struct NameChange {
    pub name: String,
    /// `same`, `changed`, `added` or `removed`.
    pub change: &'static str,
    pub policy_before: Option<&'static str>,
    pub policy_after: Option<&'static str>,
    /// Share of queries each answer (region) gets.
    pub share_before: BTreeMap<String, f64>,
    pub share_after: BTreeMap<String, f64>,
    /// The largest |after − before| over the answers.
    pub share_deviation: f64,
    /// A weighted name's share by its weights, and the largest |after − intended|.
    pub intended_after: Option<BTreeMap<String, f64>>,
    pub intended_deviation: Option<f64>,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub ttl_before: Option<u32>,
    pub ttl_after: Option<u32>,
    /// Seconds clients may still be sent to a failed answer: the slowest detection among the
    /// name's answers plus the TTL; `None` when one of them has no health check.
    pub failover_window_before: Option<f64>,
    pub failover_window_after: Option<f64>,
}

/// One name as one configuration answers it.
struct Answering {
    policy: &'static str,
    ttl: u32,
    share: BTreeMap<String, f64>,
    intended: Option<BTreeMap<String, f64>>,
    window: Option<f64>,
}

/// Compares every policy name of either configuration over `queries` sample queries each.
pub fn compare(
    before: &DnsShape,
    after: &DnsShape,
    queries: usize,
) -> Result<Vec<NameChange>, String> {
    let (old, new) = (answering(before, queries)?, answering(after, queries)?);
    let names: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    Ok(names
        .into_iter()
        .map(|name| change(name, old.get(name), new.get(name)))
        .collect())
}

fn change(name: &str, old: Option<&Answering>, new: Option<&Answering>) -> NameChange {
    let empty = BTreeMap::new();
    let share_before = old.map_or(&empty, |a| &a.share).clone();
    let share_after = new.map_or(&empty, |a| &a.share).clone();
    let largest_gap = |a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>| {
        a.keys()
            .chain(b.keys())
            .map(|k| (a.get(k).unwrap_or(&0.0) - b.get(k).unwrap_or(&0.0)).abs())
            .fold(0.0, f64::max)
    };
    let intended_after = new.and_then(|a| a.intended.clone());
    let intended_deviation = intended_after
        .as_ref()
        .map(|i| largest_gap(i, &share_after));
    let keys = |m: &BTreeMap<String, f64>| m.keys().cloned().collect::<BTreeSet<_>>();
    let (was, will) = (keys(&share_before), keys(&share_after));
    let change = match (old, new) {
        (None, _) => "added",
        (_, None) => "removed",
        (Some(o), Some(n)) if o.ttl == n.ttl && o.share == n.share && o.policy == n.policy => {
            "same"
        }
        _ => "changed",
    };
    NameChange {
        name: name.to_owned(),
        change,
        policy_before: old.map(|a| a.policy),
        policy_after: new.map(|a| a.policy),
        share_deviation: largest_gap(&share_before, &share_after),
        intended_after,
        intended_deviation,
        added: will.difference(&was).cloned().collect(),
        removed: was.difference(&will).cloned().collect(),
        ttl_before: old.map(|a| a.ttl),
        ttl_after: new.map(|a| a.ttl),
        failover_window_before: old.and_then(|a| a.window),
        failover_window_after: new.and_then(|a| a.window),
        share_before,
        share_after,
    }
}

/// Each policy name of a configuration, decided by the server's own authority with every region
/// live: query `i` comes from a client of group `i mod (groups + 1)` (the last: in no group).
fn answering(shape: &DnsShape, queries: usize) -> Result<BTreeMap<String, Answering>, String> {
    let Some(plan) = shape.plan else {
        return Ok(BTreeMap::new());
    };
    let authority = Authority::build(plan, None).map_err(|e| e.join("; "))?;
    let regions = &plan.regions;
    let live = Live::all(regions.len());
    let clients: Vec<Client> = plan
        .groups
        .iter()
        .filter_map(|(_, prefixes)| prefixes.first().map(|p| p.network))
        .chain([IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))])
        .map(Client::from_source)
        .collect();
    let mut names = BTreeMap::new();
    for name in authority.zones.iter().flat_map(|z| z.policy_names()) {
        let mut counts = vec![0u64; regions.len()];
        for i in 0..queries {
            let client = clients[i % clients.len()];
            let decision = name
                .policy
                .decide(client, &authority.groups, live, mix(i as u64));
            for region in decision.regions {
                counts[region] += 1;
            }
        }
        let share: BTreeMap<String, f64> = counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(r, c)| (regions[r].name.clone(), *c as f64 / queries as f64))
            .collect();
        let detection = counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(r, _)| shape.detection.get(r).copied().flatten())
            .try_fold(0.0, |slowest: f64, d| d.map(|d| slowest.max(d)));
        let intended = match &name.policy {
            Policy::Weighted(weighted) => {
                let mut by_region = BTreeMap::new();
                for region in &weighted.pattern {
                    *by_region
                        .entry(regions[*region].name.clone())
                        .or_insert(0.0) += 1.0 / weighted.pattern.len() as f64;
                }
                Some(by_region)
            }
            _ => None,
        };
        let answering = Answering {
            policy: name.policy.kind(),
            ttl: name.ttl,
            share,
            intended,
            window: detection.map(|d| d + f64::from(name.ttl)),
        };
        names.insert(name.name.to_string(), answering);
    }
    Ok(names)
}

/// SplitMix64: the weighted random choice's draws, spread evenly.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The text `trafik plan` prints for the names.
pub fn render(changes: &[NameChange]) -> String {
    let percent = |v: f64| format!("{:.1} %", v * 100.0);
    let shares = |m: &BTreeMap<String, f64>| {
        let list: Vec<String> = m
            .iter()
            .map(|(k, v)| format!("{k} {}", percent(*v)))
            .collect();
        if list.is_empty() {
            "-".to_owned()
        } else {
            list.join(", ")
        }
    };
    let seconds = |v: Option<f64>, ttl: Option<u32>| match (v, ttl) {
        (_, None) => "-".to_owned(),
        (Some(v), _) => format!("{v} s"),
        (None, _) => "unbounded (no health check)".to_owned(),
    };
    let ttl = |v: Option<u32>| v.map_or("-".to_owned(), |v| format!("{v} s"));
    let mut out = String::new();
    for name in changes {
        out.push_str(&format!(
            "\ndns {} ({}, {} → {})\n",
            name.name,
            name.change,
            name.policy_before.unwrap_or("-"),
            name.policy_after.unwrap_or("-")
        ));
        out.push_str(&format!("  share before: {}\n", shares(&name.share_before)));
        out.push_str(&format!("  share after:  {}\n", shares(&name.share_after)));
        out.push_str(&format!(
            "  share deviation: {}",
            percent(name.share_deviation)
        ));
        if let Some(d) = name.intended_deviation {
            out.push_str(&format!("   vs weights: {}", percent(d)));
        }
        out.push('\n');
        for (what, list) in [("added", &name.added), ("removed", &name.removed)] {
            if !list.is_empty() {
                out.push_str(&format!("  {what}: {}\n", list.join(", ")));
            }
        }
        out.push_str(&format!(
            "  ttl: {} → {}   failover window: {} → {}\n",
            ttl(name.ttl_before),
            ttl(name.ttl_after),
            seconds(name.failover_window_before, name.ttl_before),
            seconds(name.failover_window_after, name.ttl_after)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use trafik_dns::policy::{Weighted, WeightedChoice, pattern_from_weights};
    use trafik_dns::zone::{NamePlan, RegionPlan, SoaPlan, ZonePlan};

    fn plan(weights: &[u32], ttl: u32) -> DnsPlan {
        let regions = ["b34", "b35", "b06"];
        DnsPlan {
            regions: regions
                .iter()
                .enumerate()
                .map(|(i, name)| RegionPlan {
                    name: (*name).to_owned(),
                    addresses: vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1))],
                })
                .collect(),
            groups: Vec::new(),
            zones: vec![ZonePlan {
                origin: "kargo.test.".into(),
                ttl: 300,
                soa: SoaPlan {
                    mname: "ns1".into(),
                    rname: "admin".into(),
                    serial: 1,
                    refresh: 3600,
                    retry: 600,
                    expire: 86400,
                    minimum: 60,
                },
                name_servers: vec!["ns1".into()],
                records: Vec::new(),
                names: vec![NamePlan {
                    name: "api".into(),
                    ttl,
                    policy: Policy::Weighted(Weighted::new(
                        WeightedChoice::Pattern,
                        pattern_from_weights(weights),
                        None,
                    )),
                }],
                transfer: None,
                dnssec: None,
            }],
            ..DnsPlan::default()
        }
    }

    #[test]
    fn a_reweighted_name_with_a_shorter_ttl_shows_its_shares_and_failover_windows() {
        let (old, new) = (plan(&[5, 3, 2], 60), plan(&[5, 5, 0], 20));
        let detection = vec![Some(6.0), Some(6.0), None];
        let before = DnsShape {
            plan: Some(&old),
            detection: detection.clone(),
        };
        let after = DnsShape {
            plan: Some(&new),
            detection,
        };
        let changes = compare(&before, &after, 1000).unwrap();
        assert_eq!(changes.len(), 1);
        let name = &changes[0];
        assert_eq!(name.name, "api.kargo.test.");
        assert_eq!(name.change, "changed");
        assert!((name.share_before["b34"] - 0.5).abs() < 1e-9);
        assert!((name.share_after["b35"] - 0.5).abs() < 1e-9);
        assert!((name.share_deviation - 0.2).abs() < 1e-9);
        assert_eq!(name.intended_deviation, Some(0.0));
        assert_eq!(name.removed, ["b06"]);
        assert_eq!((name.ttl_before, name.ttl_after), (Some(60), Some(20)));
        // b06 had no health check: a client sent there before is never moved by health.
        assert_eq!(name.failover_window_before, None);
        assert_eq!(name.failover_window_after, Some(26.0));
    }
}

/// One query of trafik's DNS query log (`[dns] query_log = true`, target `trafik::dns`): the
/// client as the policy reads it — the client-subnet option's network when the query carried
/// one, else its source address — and the name asked.
#[derive(Clone, Debug, PartialEq)]
pub struct LoggedQuery {
    pub client: Client,
    pub name: String,
}

/// The query log's lines among a JSON log (`--log-format json`); other lines are passed over.
pub fn read_queries(text: &str) -> Vec<LoggedQuery> {
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|value| value["target"] == "trafik::dns" && value["fields"]["name"].is_string())
        .filter_map(|value| {
            let fields = &value["fields"];
            let source: std::net::SocketAddr = fields["client"].as_str()?.parse().ok()?;
            // Written as `Some("10.1.0.0/24")` or `None`.
            let subnet = fields["subnet"]
                .as_str()
                .and_then(|s| s.strip_prefix("Some(\"")?.strip_suffix("\")"))
                .and_then(|s| s.split_once('/'))
                .and_then(|(address, prefix)| Some((address.parse().ok()?, prefix.parse().ok()?)));
            let client = match subnet {
                Some((address, prefix)) => Client { address, prefix },
                None => Client::from_source(source.ip()),
            };
            Some(LoggedQuery {
                client,
                name: absolute(fields["name"].as_str()?),
            })
        })
        .collect()
}

fn absolute(name: &str) -> String {
    let mut name = name.to_ascii_lowercase();
    if !name.ends_with('.') {
        name.push('.');
    }
    name
}

/// A policy name's answers to the logged queries, decided again by both configurations.
#[derive(Debug, Serialize)]
pub struct NameShift {
    pub name: String,
    pub queries: u64,
    /// Region → share of the queries it answered.
    pub share_before: BTreeMap<String, f64>,
    pub share_after: BTreeMap<String, f64>,
    /// The largest |after − before| over the regions.
    pub share_deviation: f64,
    /// Queries answered by another set of regions.
    pub moved: u64,
}

/// Per name: queries, answers per region before and after, queries answered otherwise.
type Counted = (u64, BTreeMap<String, u64>, BTreeMap<String, u64>, u64);

/// Each logged query of a policy name of either configuration, decided by both authorities
/// (the server's code) with every region live; query `i`'s weighted draw is the same on both
/// sides, so only the configuration's change moves it.
pub fn replay(
    before: &DnsShape,
    after: &DnsShape,
    queries: &[LoggedQuery],
) -> Result<Vec<NameShift>, String> {
    let (old, new) = (authority(before.plan)?, authority(after.plan)?);
    let decide = |side: &Option<(Authority, &DnsPlan)>, query: &LoggedQuery, i: usize| {
        let (authority, plan) = side.as_ref()?;
        let name = authority
            .zones
            .iter()
            .flat_map(|z| z.policy_names())
            .find(|n| absolute(&n.name.to_string()) == query.name)?;
        let live = Live::all(plan.regions.len());
        let decision = name
            .policy
            .decide(query.client, &authority.groups, live, mix(i as u64));
        Some(
            decision
                .regions
                .iter()
                .map(|r| plan.regions[*r].name.clone())
                .collect::<Vec<String>>(),
        )
    };
    let mut shifts: BTreeMap<String, Counted> = BTreeMap::new();
    for (i, query) in queries.iter().enumerate() {
        let (was, will) = (decide(&old, query, i), decide(&new, query, i));
        if was.is_none() && will.is_none() {
            continue;
        }
        let entry = shifts.entry(query.name.clone()).or_default();
        entry.0 += 1;
        for region in was.iter().flatten() {
            *entry.1.entry(region.clone()).or_default() += 1;
        }
        for region in will.iter().flatten() {
            *entry.2.entry(region.clone()).or_default() += 1;
        }
        entry.3 += u64::from(was != will);
    }
    Ok(shifts
        .into_iter()
        .map(|(name, (queries, before, after, moved))| {
            let share = |counts: BTreeMap<String, u64>| -> BTreeMap<String, f64> {
                counts
                    .into_iter()
                    .map(|(region, n)| (region, n as f64 / queries as f64))
                    .collect()
            };
            let (share_before, share_after) = (share(before), share(after));
            let share_deviation = share_before
                .keys()
                .chain(share_after.keys())
                .map(|k| {
                    (share_before.get(k).unwrap_or(&0.0) - share_after.get(k).unwrap_or(&0.0)).abs()
                })
                .fold(0.0, f64::max);
            NameShift {
                name,
                queries,
                share_before,
                share_after,
                share_deviation,
                moved,
            }
        })
        .collect())
}

/// A configuration's DNS authority as the server builds it, with its plan.
fn authority(plan: Option<&DnsPlan>) -> Result<Option<(Authority, &DnsPlan)>, String> {
    plan.map(|plan| {
        Ok((
            Authority::build(plan, None).map_err(|e| e.join("; "))?,
            plan,
        ))
    })
    .transpose()
}

/// The text `trafik plan --replay` prints for the names the query log asked.
pub fn render_shifts(shifts: &[NameShift]) -> String {
    let shares = |m: &BTreeMap<String, f64>| {
        let list: Vec<String> = m
            .iter()
            .map(|(k, v)| format!("{k} {:.1} %", v * 100.0))
            .collect();
        if list.is_empty() {
            "-".to_owned()
        } else {
            list.join(", ")
        }
    };
    let mut out = String::new();
    for shift in shifts {
        out.push_str(&format!(
            "\ndns {}: {} logged queries, {} answered otherwise\n  share before: {}\n  share after:  {}\n  share deviation: {:.1} %\n",
            shift.name,
            shift.queries,
            shift.moved,
            shares(&shift.share_before),
            shares(&shift.share_after),
            shift.share_deviation * 100.0
        ));
    }
    out
}
