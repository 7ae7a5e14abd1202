//! The golden metrics in the Prometheus text format: histograms of request durations per
//! listener, route, pool and backend (cumulative `le` buckets in seconds, `_sum`, `_count`),
//! responses by status class, upstream connect time and listener connections.

use std::fmt::Write as _;

use super::histogram::{BOUNDS_MICROS, Histogram, Merged};
use super::{CLASSES, Traffic};
use crate::admin::escape;
use crate::counters::{PerWorker, read, read_gauge};
use crate::snapshot::Snapshot;

/// Every shard's `histogram` merged.
pub fn merged<T>(shards: &PerWorker<T>, histogram: impl Fn(&T) -> &Histogram) -> Merged {
    let mut merged = Merged::default();
    for shard in shards.shards() {
        histogram(shard).add_to(&mut merged);
    }
    merged
}

/// Every shard's responses by status class, summed.
pub fn classes<T>(shards: &PerWorker<T>, traffic: impl Fn(&T) -> &Traffic) -> [u64; 5] {
    let mut totals = [0; 5];
    for shard in shards.shards() {
        for (total, count) in totals.iter_mut().zip(&traffic(shard).classes) {
            *total += read(count) as u64;
        }
    }
    totals
}

/// One series: its labels (already escaped, without braces) and its shards.
type Series = (String, Merged, [u64; 5]);

/// The text for `snapshot`'s listeners, routes, pools and backends.
pub fn text(snapshot: &Snapshot) -> String {
    let mut out = String::with_capacity(8192);
    let listeners: Vec<Series> = snapshot
        .metrics
        .listeners
        .iter()
        .map(|entry| {
            (
                format!("listener=\"{}\"", escape(&entry.name)),
                merged(&entry.stats, |s| &s.traffic.duration),
                classes(&entry.stats, |s| &s.traffic),
            )
        })
        .collect();
    let routes: Vec<Series> = snapshot
        .metrics
        .routes
        .iter()
        .map(|entry| {
            (
                format!(
                    "listener=\"{}\",route=\"{}\"",
                    escape(&entry.listener),
                    escape(&entry.route)
                ),
                merged(&entry.traffic, |t| &t.duration),
                classes(&entry.traffic, |t| t),
            )
        })
        .collect();
    let pools: Vec<Series> = snapshot
        .pools
        .iter()
        .map(|pool| {
            (
                format!("pool=\"{}\"", escape(&pool.plan.name)),
                merged(&pool.served, |s| &s.traffic.duration),
                classes(&pool.served, |s| &s.traffic),
            )
        })
        .collect();
    let mut backends: Vec<Series> = Vec::new();
    let mut connects: Vec<(String, Merged)> = Vec::new();
    for pool in &snapshot.pools {
        for (index, member) in pool.members.iter().enumerate() {
            let labels = format!(
                "pool=\"{}\",backend=\"{}\",name=\"{}\"",
                escape(&pool.plan.name),
                pool.address(index),
                escape(&pool.display_name(index))
            );
            connects.push((labels.clone(), merged(&member.counters, |c| &c.connect)));
            backends.push((
                labels,
                merged(&member.counters, |c| &c.served.traffic.duration),
                classes(&member.counters, |c| &c.served.traffic),
            ));
        }
    }
    for (level, series, what) in [
        (
            "listener",
            &listeners,
            "from request received to response headers sent",
        ),
        (
            "route",
            &routes,
            "from request received to response headers sent",
        ),
        (
            "pool",
            &pools,
            "from the pool's first pick to its answer, retries included",
        ),
        (
            "backend",
            &backends,
            "from the request sent to the backend to its response headers",
        ),
    ] {
        let name = format!("trafik_{level}_request_duration_seconds");
        let help = format!("Request duration per {level}, {what}.");
        histogram(
            &mut out,
            &name,
            &help,
            series.iter().map(|(l, m, _)| (l, m)),
        );
        let name = format!("trafik_{level}_responses_total");
        let _ = writeln!(
            out,
            "# HELP {name} Responses per {level} by status class.\n# TYPE {name} counter"
        );
        for (labels, _, counts) in series.iter() {
            for (class, count) in CLASSES.iter().zip(counts) {
                let _ = writeln!(out, "{name}{{{labels},class=\"{class}\"}} {count}");
            }
        }
    }
    histogram(
        &mut out,
        "trafik_backend_connect_duration_seconds",
        "Time to open a TCP connection to the backend.",
        connects.iter().map(|(l, m)| (l, m)),
    );
    type Read = fn(&super::ListenerStats) -> i64;
    let counters: [(&str, &str, &str, Read); 5] = [
        (
            "trafik_listener_connections_accepted_total",
            "counter",
            "Client connections accepted.",
            |s| read(&s.accepted),
        ),
        (
            "trafik_listener_connections_open",
            "gauge",
            "Client connections open now.",
            |s| read_gauge(&s.open),
        ),
        (
            "trafik_listener_tls_handshakes_total",
            "counter",
            "TLS handshakes completed with clients.",
            |s| read(&s.tls_handshakes),
        ),
        (
            "trafik_listener_tls_handshake_failures_total",
            "counter",
            "TLS handshakes with clients that failed or timed out.",
            |s| read(&s.tls_failures),
        ),
        (
            "trafik_listener_handed_to_hyper_total",
            "counter",
            "Connections the own HTTP/1 engine handed to hyper's server.",
            |s| read(&s.handed_to_hyper),
        ),
    ];
    for (name, kind, help, value) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for entry in &snapshot.metrics.listeners {
            let _ = writeln!(
                out,
                "{name}{{listener=\"{}\"}} {}",
                escape(&entry.name),
                entry.stats.sum(value)
            );
        }
    }
    out
}

/// One histogram family: cumulative buckets, `_sum` and `_count` per series.
fn histogram<'a>(
    out: &mut String,
    name: &str,
    help: &str,
    series: impl Iterator<Item = (&'a String, &'a Merged)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (labels, merged) in series {
        let mut cumulative = 0;
        for (index, count) in merged.counts.iter().enumerate() {
            cumulative += count;
            let le = BOUNDS_MICROS
                .get(index)
                .map_or_else(|| "+Inf".to_owned(), |&micros| seconds(micros));
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(
            out,
            "{name}_sum{{{labels}}} {}\n{name}_count{{{labels}}} {cumulative}",
            seconds(merged.sum_micros)
        );
    }
}

fn seconds(micros: u64) -> String {
    (micros as f64 / 1e6).to_string()
}
