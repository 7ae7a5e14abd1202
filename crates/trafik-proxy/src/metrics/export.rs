//! The golden metrics in the Prometheus text format: histograms of request durations per
//! listener, route, pool and backend (cumulative `le` buckets in seconds, `_sum`, `_count`),
//! responses by status class, upstream connect time and listener connections.

use std::sync::atomic::Ordering;

use trafik_metrics_text::{Exposition, Kind};

use super::histogram::{BOUNDS_MICROS, Histogram, Merged};
use super::{CLASSES, Traffic};
use crate::counters::{PerWorker, read, read_gauge};
use crate::pool::Pool;
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

/// A series' labels: (name, value) pairs.
type Labels = Vec<(&'static str, String)>;

/// One series: its labels, its request durations and its responses by status class.
type Series = (Labels, Merged, [u64; 5]);

/// The families of `snapshot`'s listeners, routes, pools and backends.
pub fn write(snapshot: &Snapshot, exposition: &mut Exposition) {
    let listeners: Vec<Series> = snapshot
        .metrics
        .listeners
        .iter()
        .map(|entry| {
            (
                vec![("listener", entry.name.clone())],
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
                vec![
                    ("listener", entry.listener.clone()),
                    ("route", entry.route.clone()),
                ],
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
                vec![("pool", pool.plan.name.clone())],
                merged(&pool.served, |s| &s.traffic.duration),
                classes(&pool.served, |s| &s.traffic),
            )
        })
        .collect();
    let mut backends: Vec<Series> = Vec::new();
    let mut connects: Vec<(Labels, Merged)> = Vec::new();
    for pool in &snapshot.pools {
        for (index, member) in pool.members.iter().enumerate() {
            let labels = backend_labels(pool, index).to_vec();
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
            exposition,
            &name,
            &help,
            series.iter().map(|(labels, merged, _)| (labels, merged)),
        );
        let name = format!("trafik_{level}_responses_total");
        let help = format!("Responses per {level} by status class.");
        let mut family = exposition.family(&name, Kind::Counter, &help);
        for (labels, _, counts) in series.iter() {
            for (class, count) in CLASSES.iter().zip(counts) {
                let mut labels = labels.clone();
                labels.push(("class", (*class).to_owned()));
                family.sample(&labels, count);
            }
        }
    }
    histogram(
        exposition,
        "trafik_backend_connect_duration_seconds",
        "Time to open a TCP connection to the backend.",
        connects.iter().map(|(labels, merged)| (labels, merged)),
    );
    type Read = fn(&super::ListenerStats) -> i64;
    let counters: [(&str, Kind, &str, Read); 6] = [
        (
            "trafik_listener_connections_accepted_total",
            Kind::Counter,
            "Client connections accepted.",
            |s| read(&s.accepted),
        ),
        (
            "trafik_listener_connections_open",
            Kind::Gauge,
            "Client connections open now.",
            |s| read_gauge(&s.open),
        ),
        (
            "trafik_listener_tls_handshakes_total",
            Kind::Counter,
            "TLS handshakes completed with clients.",
            |s| read(&s.tls_handshakes),
        ),
        (
            "trafik_listener_tls_handshake_failures_total",
            Kind::Counter,
            "TLS handshakes with clients that failed or timed out.",
            |s| read(&s.tls_failures),
        ),
        (
            "trafik_listener_handed_to_hyper_total",
            Kind::Counter,
            "Connections the own HTTP/1 engine handed to hyper's server.",
            |s| read(&s.handed_to_hyper),
        ),
        (
            "trafik_listener_pipeline_requests_total",
            Kind::Counter,
            "Requests the own HTTP/1 engine gave to the shared pipeline instead of serving them inline.",
            |s| read(&s.through_pipeline),
        ),
    ];
    for (name, kind, help, value) in counters {
        let mut family = exposition.family(name, kind, help);
        for entry in &snapshot.metrics.listeners {
            family.sample(&[("listener", &entry.name)], entry.stats.sum(value));
        }
    }
}

/// One histogram family in seconds: a series per labels, from its merged shards.
fn histogram<'a>(
    exposition: &mut Exposition,
    name: &str,
    help: &str,
    series: impl Iterator<Item = (&'a Labels, &'a Merged)>,
) {
    let mut family = exposition.family(name, Kind::Histogram, help);
    for (labels, merged) in series {
        let bounds = BOUNDS_MICROS
            .iter()
            .map(|&micros| seconds(micros))
            .chain([f64::INFINITY]);
        let buckets = bounds.zip(merged.counts.iter().copied());
        family.histogram(labels, buckets, seconds(merged.sum_micros));
    }
}

fn seconds(micros: u64) -> f64 {
    micros as f64 / 1e6
}

/// A backend's labels in every family about it: its pool, address and name.
pub(crate) fn backend_labels(pool: &Pool, index: usize) -> [(&'static str, String); 3] {
    [
        ("pool", pool.plan.name.clone()),
        ("backend", pool.address(index).to_string()),
        ("name", pool.display_name(index)),
    ]
}

/// The listeners' connection caps ([`add_connection_limits`](super::summary::add_connection_limits))
/// in the Prometheus text format; nothing without a limited listener.
pub fn write_connection_limits(snapshot: &Snapshot, exposition: &mut Exposition) {
    type Read = fn(&crate::admission::ConnectionLimit) -> u64;
    let families: [(&str, &str, Read); 3] = [
        (
            "trafik_listener_waited_total",
            "Connections that found max_connections open and waited for one to close.",
            |l| l.waited.load(Ordering::Relaxed),
        ),
        (
            "trafik_listener_refused_per_client_total",
            "Connections closed at once: their client had max_connections_per_client open.",
            |l| l.refused_per_client.load(Ordering::Relaxed),
        ),
        (
            "trafik_listener_refused_at_max_total",
            "QUIC connections refused at once: max_connections were open (QUIC has no backlog to wait in).",
            |l| l.refused_at_max.load(Ordering::Relaxed),
        ),
    ];
    if snapshot.connection_limits().next().is_none() {
        return;
    }
    for (name, help, read) in families {
        let mut family = exposition.family(name, Kind::Counter, help);
        for limit in snapshot.connection_limits() {
            family.sample(&[("listener", &limit.listener)], read(limit));
        }
    }
}
