//! The DNS lesson's models, on `trafik-dns`'s policy code: resolvers of unequal size cache the
//! authoritative answer for a TTL and send all their clients' requests to the region it named.
//! `trafik sim dns` compares the geo, latency and weighted policies (share per region, deviation
//! from the target shares, distance per request, queries reaching the authority) and sweeps the
//! weighted policy's TTL; `trafik sim failover` fails a region and measures, per TTL, how long
//! requests keep going to it and how many are lost.
//!
//! Each resolver stands for one client group (resolver `j` is in group `j mod groups`) and asks
//! from an address inside that group's prefix, so the policies find the group through the same
//! prefix table the server uses.

use std::net::{IpAddr, Ipv4Addr};

use serde::Serialize;
use trafik_dns::policy::{Client, Groups, Live, Policy, Prefix, Region, Weighted, WeightedChoice};

use crate::SimError;
use crate::table::Table;

/// The course's regions.
pub const REGIONS: [&str; 3] = ["b34", "b35", "b06"];
/// The course's client groups; group `g` is `10.<g+1>.0.0/16`.
pub const GROUPS: [&str; 4] = ["g1", "g2", "g3", "g4"];
/// Distance from each group to each region, in the course's abstract units.
pub const DISTANCE: [[f64; 3]; 4] = [
    [1.0, 3.0, 2.0],
    [3.0, 1.0, 2.0],
    [2.0, 4.0, 1.0],
    [2.0, 3.0, 4.0],
];
/// The geo policy's coarse table: each group's region.
pub const GEO: [Region; 4] = [0, 1, 0, 2];
/// Each region's fallback in the geo table.
pub const FALLBACK: [Region; 3] = [2, 0, 1];
/// The weighted policy's 10-slot pattern (b34 50 %, b35 30 %, b06 20 %).
pub const PATTERN: [Region; 10] = [0, 1, 2, 0, 1, 0, 1, 2, 0, 0];

/// The course's client groups as the policies' prefix table.
pub fn course_groups() -> Groups {
    Groups::new(
        (0..GROUPS.len())
            .map(|g| {
                let network = IpAddr::V4(Ipv4Addr::new(10, g as u8 + 1, 0, 0));
                (
                    Prefix {
                        network,
                        length: 16,
                    },
                    g,
                )
            })
            .collect(),
    )
}

/// A fresh policy of the course, by name (its weighted cursor at slot 0).
pub fn course_policy(name: &str) -> Option<Policy> {
    Some(match name {
        "geo" => Policy::Geo {
            region_of_group: GEO.to_vec(),
            default: 0,
            fallback: FALLBACK.iter().map(|r| Some(*r)).collect(),
        },
        "latency" => Policy::Latency {
            distance: DISTANCE.iter().map(|row| row.to_vec()).collect(),
            default_group: 0,
        },
        "weighted" => Policy::Weighted(Weighted::new(
            WeightedChoice::Pattern,
            PATTERN.to_vec(),
            None,
        )),
        _ => return None,
    })
}

/// Requests per second of each resolver: shares proportional to 1/(j+1), split by the largest
/// remainder so they sum to `rate`.
pub fn resolver_rates(resolvers: usize, rate: u64) -> Vec<u64> {
    let raw: Vec<f64> = (0..resolvers).map(|j| 1.0 / (j as f64 + 1.0)).collect();
    let total: f64 = raw.iter().sum();
    let exact: Vec<f64> = raw.iter().map(|p| p / total * rate as f64).collect();
    let mut rates: Vec<u64> = exact.iter().map(|e| e.floor() as u64).collect();
    let mut by_remainder: Vec<usize> = (0..resolvers).collect();
    by_remainder.sort_by(|a, b| (exact[*b] % 1.0).total_cmp(&(exact[*a] % 1.0)));
    let missing = rate.saturating_sub(rates.iter().sum());
    for j in by_remainder.into_iter().take(missing as usize) {
        rates[j] += 1;
    }
    rates
}

/// A region failing at a moment, known dead to the health checks `detection` seconds later.
#[derive(Clone, Copy, Debug)]
pub struct Failure {
    pub region: Region,
    pub at: i64,
    pub detection: i64,
}

/// One run's totals.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub served: u64,
    pub dropped: u64,
    pub upstream_queries: u64,
    pub per_region: Vec<u64>,
    pub distance: f64,
    /// Seconds from the failure to the last dropped request, inclusive.
    pub window: i64,
}

/// Runs `duration` seconds: each second every resolver whose cached answer expired asks the
/// policy again, then sends its requests to the region it holds. Cache expiries start spread
/// over one TTL (resolver `j` at phase `13 j mod ttl`); counting starts at second 1.
pub fn run_model(
    policy: &Policy,
    ttl: i64,
    duration: i64,
    rates: &[u64],
    failure: Option<Failure>,
) -> Outcome {
    let groups = course_groups();
    let resolvers = rates.len();
    let mut outcome = Outcome {
        per_region: vec![0; REGIONS.len()],
        ..Outcome::default()
    };
    let mut expires: Vec<i64> = (0..resolvers)
        .map(|j| 1 - ttl + (j as i64 * 13) % ttl)
        .collect();
    let mut held: Vec<Region> = vec![0; resolvers];
    let dead = |region: Region, t: i64| failure.is_some_and(|f| f.region == region && t >= f.at);
    for t in 1 - ttl..=duration {
        let live = match failure {
            Some(f) if t >= f.at + f.detection => Live::all(REGIONS.len()).with(f.region, false),
            _ => Live::all(REGIONS.len()),
        };
        for j in 0..resolvers {
            let group = j % GROUPS.len();
            if t >= expires[j] {
                let address = Ipv4Addr::new(10, group as u8 + 1, (j / 256) as u8, j as u8);
                let client = Client::from_source(IpAddr::V4(address));
                held[j] = policy.decide(client, &groups, live, 0).regions[0];
                expires[j] = t + ttl;
                if t >= 1 {
                    outcome.upstream_queries += 1;
                }
            }
            if t < 1 {
                continue;
            }
            let (requests, region) = (rates[j], held[j]);
            if dead(region, t) {
                outcome.dropped += requests;
                outcome.window = t - failure.map_or(0, |f| f.at) + 1;
                continue;
            }
            outcome.served += requests;
            outcome.distance += requests as f64 * DISTANCE[group][region];
            outcome.per_region[region] += requests;
        }
    }
    outcome
}

impl Outcome {
    pub fn shares(&self) -> Vec<f64> {
        self.per_region
            .iter()
            .map(|n| *n as f64 / self.served.max(1) as f64)
            .collect()
    }

    /// Half the summed distance between the shares and `target`: the share of traffic in the
    /// wrong place.
    pub fn deviation(&self, target: &[f64]) -> f64 {
        self.shares()
            .iter()
            .zip(target)
            .map(|(share, want)| (share - want).abs())
            .sum::<f64>()
            / 2.0
    }
}

/// Each region's share of the weighted pattern: the target shares.
pub fn target_shares() -> Vec<f64> {
    (0..REGIONS.len())
        .map(|r| PATTERN.iter().filter(|p| **p == r).count() as f64 / PATTERN.len() as f64)
        .collect()
}

#[derive(Clone, Debug)]
pub struct DnsOptions {
    pub resolvers: usize,
    pub rate: u64,
    pub ttls: Vec<u64>,
    pub ttl: u64,
    pub duration: u64,
}

impl Default for DnsOptions {
    fn default() -> Self {
        DnsOptions {
            resolvers: 40,
            rate: 514,
            ttls: vec![30, 60, 300, 900],
            ttl: 300,
            duration: 3600,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct DnsReport {
    pub resolvers: usize,
    pub rate: u64,
    pub ttl: u64,
    pub duration: u64,
    /// The largest resolver's share of all requests.
    pub largest_resolver_share: f64,
    pub target_shares: std::collections::BTreeMap<&'static str, f64>,
    pub policies: Vec<PolicyRow>,
    pub ttl_sweep: Vec<SweepRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PolicyRow {
    pub policy: &'static str,
    pub shares: std::collections::BTreeMap<&'static str, f64>,
    pub deviation: f64,
    pub distance: f64,
    pub upstream_queries: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SweepRow {
    pub ttl: u64,
    pub deviation: f64,
    pub upstream_queries: u64,
}

fn check_common(resolvers: usize, ttls: &[u64], ttl: u64, duration: u64) -> Result<(), SimError> {
    if resolvers == 0 {
        return Err(SimError::new("--resolvers must be at least 1"));
    }
    if ttl == 0 || ttls.contains(&0) {
        return Err(SimError::new("every TTL must be at least 1 second"));
    }
    if duration == 0 {
        return Err(SimError::new("--duration must be at least 1 second"));
    }
    Ok(())
}

fn by_region(values: &[f64]) -> std::collections::BTreeMap<&'static str, f64> {
    REGIONS
        .iter()
        .copied()
        .zip(values.iter().copied())
        .collect()
}

pub fn run_dns(options: &DnsOptions) -> Result<DnsReport, SimError> {
    check_common(
        options.resolvers,
        &options.ttls,
        options.ttl,
        options.duration,
    )?;
    let rates = resolver_rates(options.resolvers, options.rate);
    let target = target_shares();
    let run = |name: &str, ttl: u64| {
        let policy = course_policy(name).expect("a course policy");
        run_model(&policy, ttl as i64, options.duration as i64, &rates, None)
    };
    let policies = ["geo", "latency", "weighted"]
        .into_iter()
        .map(|name| {
            let outcome = run(name, options.ttl);
            PolicyRow {
                policy: name,
                shares: by_region(&outcome.shares()),
                deviation: outcome.deviation(&target),
                distance: outcome.distance / outcome.served.max(1) as f64,
                upstream_queries: outcome.upstream_queries,
            }
        })
        .collect();
    let ttl_sweep = options
        .ttls
        .iter()
        .map(|ttl| {
            let outcome = run("weighted", *ttl);
            SweepRow {
                ttl: *ttl,
                deviation: outcome.deviation(&target),
                upstream_queries: outcome.upstream_queries,
            }
        })
        .collect();
    Ok(DnsReport {
        resolvers: options.resolvers,
        rate: options.rate,
        ttl: options.ttl,
        duration: options.duration,
        largest_resolver_share: rates[0] as f64 / options.rate.max(1) as f64,
        target_shares: by_region(&target),
        policies,
        ttl_sweep,
    })
}

impl DnsReport {
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} s, {} requests/s, TTL {} s, largest resolver {:.2} % of requests\n\
             target shares: {}\n\n",
            self.duration,
            self.rate,
            self.ttl,
            self.largest_resolver_share * 100.0,
            percent_by_region(&self.target_shares, 0),
        );
        let mut table = Table::new(&[
            "policy",
            "b34",
            "b35",
            "b06",
            "deviation",
            "distance",
            "upstream queries",
        ]);
        for row in &self.policies {
            let mut cells = vec![row.policy.to_string()];
            cells.extend(
                REGIONS
                    .iter()
                    .map(|r| format!("{:.1} %", row.shares[r] * 100.0)),
            );
            cells.push(format!("{:.3}", row.deviation));
            cells.push(format!("{:.3}", row.distance));
            cells.push(row.upstream_queries.to_string());
            table.row(cells);
        }
        out.push_str(&table.render());
        out.push('\n');
        let mut sweep = Table::new(&["weighted, TTL", "deviation", "upstream queries"]);
        for row in &self.ttl_sweep {
            sweep.row(vec![
                format!("{} s", row.ttl),
                format!("{:.3}", row.deviation),
                row.upstream_queries.to_string(),
            ]);
        }
        out.push_str(&sweep.render());
        out
    }
}

fn percent_by_region(
    values: &std::collections::BTreeMap<&'static str, f64>,
    places: usize,
) -> String {
    REGIONS
        .iter()
        .map(|r| format!("{r} {:.places$} %", values[r] * 100.0))
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Clone, Debug)]
pub struct FailoverOptions {
    pub resolvers: usize,
    pub rate: u64,
    pub ttls: Vec<u64>,
    /// The TTL of the closing summary line.
    pub ttl: u64,
    pub fail_at: u64,
    pub detection: u64,
    pub duration: u64,
    /// The region that fails.
    pub region: String,
    /// The policy the names use.
    pub policy: String,
    /// The availability target whose monthly downtime budget the losses are measured against.
    pub availability: f64,
}

impl Default for FailoverOptions {
    fn default() -> Self {
        FailoverOptions {
            resolvers: 40,
            rate: 514,
            ttls: vec![30, 60, 300, 900],
            ttl: 300,
            fail_at: 100,
            detection: 10,
            duration: 1200,
            region: "b34".into(),
            policy: "geo".into(),
            availability: 99.9,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct FailoverReport {
    pub region: String,
    pub policy: String,
    pub fail_at: u64,
    pub detection: u64,
    /// The monthly downtime budget of the availability target, in seconds.
    pub monthly_budget_s: f64,
    pub rows: Vec<FailoverRow>,
    /// The row of `--ttl`, with the share of the window's traffic that was lost.
    pub summary: FailoverSummary,
}

#[derive(Clone, Debug, Serialize)]
pub struct FailoverSummary {
    #[serde(flatten)]
    pub row: FailoverRow,
    pub dropped_share_of_window: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct FailoverRow {
    pub ttl: u64,
    /// From the failure to the last request sent to the failed region.
    pub window_s: i64,
    pub dropped: u64,
    /// The dropped requests as seconds of full outage at the request rate.
    pub equivalent_outage_s: f64,
    /// That outage's share of the monthly budget.
    pub budget_share: f64,
    pub upstream_queries: u64,
}

pub fn run_failover(options: &FailoverOptions) -> Result<FailoverReport, SimError> {
    check_common(
        options.resolvers,
        &options.ttls,
        options.ttl,
        options.duration,
    )?;
    let region = REGIONS
        .iter()
        .position(|r| *r == options.region)
        .ok_or_else(|| {
            SimError::new(format!(
                "--region {:?}: expected one of {}",
                options.region,
                REGIONS.join(", ")
            ))
        })?;
    if course_policy(&options.policy).is_none() {
        return Err(SimError::new(format!(
            "--policy {:?}: expected geo, latency or weighted",
            options.policy
        )));
    }
    if !(0.0..100.0).contains(&options.availability) {
        return Err(SimError::new(
            "--availability must be a percentage below 100",
        ));
    }
    let rates = resolver_rates(options.resolvers, options.rate);
    let monthly_budget_s = (1.0 - options.availability / 100.0) * 30.0 * 24.0 * 3600.0;
    let failure = Failure {
        region,
        at: options.fail_at as i64,
        detection: options.detection as i64,
    };
    let row = |ttl: &u64| {
        let policy = course_policy(&options.policy).expect("checked above");
        let outcome = run_model(
            &policy,
            *ttl as i64,
            options.duration as i64,
            &rates,
            Some(failure),
        );
        let equivalent_outage_s = outcome.dropped as f64 / options.rate.max(1) as f64;
        FailoverRow {
            ttl: *ttl,
            window_s: outcome.window,
            dropped: outcome.dropped,
            equivalent_outage_s,
            budget_share: equivalent_outage_s / monthly_budget_s,
            upstream_queries: outcome.upstream_queries,
        }
    };
    let rows = options.ttls.iter().map(row).collect();
    let summary = row(&options.ttl);
    let window_requests = summary.window_s.max(1) as f64 * options.rate.max(1) as f64;
    Ok(FailoverReport {
        summary: FailoverSummary {
            dropped_share_of_window: summary.dropped as f64 / window_requests,
            row: summary,
        },
        region: options.region.clone(),
        policy: options.policy.clone(),
        fail_at: options.fail_at,
        detection: options.detection,
        monthly_budget_s,
        rows,
    })
}

impl FailoverReport {
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} fails at {} s, the health checks mark it dead {} s later; {} policy\n\
             monthly downtime budget {:.1} min\n\n",
            self.region,
            self.fail_at,
            self.detection,
            self.policy,
            self.monthly_budget_s / 60.0
        );
        let mut table = Table::new(&[
            "ttl",
            "window",
            "dropped",
            "equivalent outage",
            "budget share",
            "upstream queries",
        ]);
        for row in &self.rows {
            table.row(vec![
                row.ttl.to_string(),
                format!("{} s", row.window_s),
                row.dropped.to_string(),
                format!("{:.2} s", row.equivalent_outage_s),
                format!("{:.2} %", row.budget_share * 100.0),
                row.upstream_queries.to_string(),
            ]);
        }
        out.push_str(&table.render());
        let summary = &self.summary;
        out.push_str(&format!(
            "\nTTL {} s: window {} s, equivalent outage {:.2} s: {:.1} % of the window's requests lost\n",
            summary.row.ttl,
            summary.row.window_s,
            summary.row.equivalent_outage_s,
            summary.dropped_share_of_window * 100.0
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolver_rates_sum_to_the_rate_with_the_largest_first() {
        let rates = resolver_rates(40, 514);
        assert_eq!(rates.iter().sum::<u64>(), 514);
        assert_eq!(rates[0], 120);
        assert!(rates.windows(2).all(|w| w[0] >= w[1]));
    }

    #[test]
    fn the_course_tables_come_out_of_the_policy_code() {
        let report = run_dns(&DnsOptions::default()).unwrap();
        let rows: Vec<(String, String, u64)> = report
            .policies
            .iter()
            .map(|r| {
                (
                    format!("{:.3}", r.deviation),
                    format!("{:.3}", r.distance),
                    r.upstream_queries,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("0.076".into(), "1.710".into(), 480),
                ("0.051".into(), "1.171".into(), 480),
                ("0.022".into(), "2.144".into(), 480),
            ]
        );
        let sweep: Vec<(u64, String, u64)> = report
            .ttl_sweep
            .iter()
            .map(|r| (r.ttl, format!("{:.3}", r.deviation), r.upstream_queries))
            .collect();
        assert_eq!(
            sweep,
            vec![
                (30, "0.082".into(), 4800),
                (60, "0.195".into(), 2400),
                (300, "0.022".into(), 480),
                (900, "0.037".into(), 160),
            ]
        );
    }

    #[test]
    fn the_failover_table_is_the_courses() {
        let report = run_failover(&FailoverOptions::default()).unwrap();
        let rows: Vec<(u64, i64, u64, u64)> = report
            .rows
            .iter()
            .map(|r| (r.ttl, r.window_s, r.dropped, r.upstream_queries))
            .collect();
        assert_eq!(
            rows,
            vec![
                (30, 39, 6666, 1600),
                (60, 69, 9486, 800),
                (300, 305, 57906, 160),
                (900, 905, 190206, 64),
            ]
        );
        assert_eq!(
            format!("{:.2}", report.rows[2].equivalent_outage_s),
            "112.66"
        );
        assert_eq!(format!("{:.4}", report.rows[0].budget_share), "0.0050");
        assert_eq!(
            format!("{:.3}", report.summary.dropped_share_of_window),
            "0.369"
        );
    }

    #[test]
    fn a_shorter_detection_shortens_the_window() {
        let options = FailoverOptions {
            detection: 2,
            ttls: vec![30],
            ..FailoverOptions::default()
        };
        let report = run_failover(&options).unwrap();
        assert!(report.rows[0].window_s < 39);
    }
}
