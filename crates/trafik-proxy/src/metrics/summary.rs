//! What `/status` adds for a person: per pool and backend, the request rate, p50 and p99 and
//! the error rate over the last 10 and 60 seconds; per listener, its connections and requests,
//! and its request durations since start (so a reader can take two readings and subtract them:
//! `trafik config push --canary` judges its window that way).

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::export::{classes, merged};
use super::histogram::{BOUNDS_MICROS, Merged};
use super::window::Window;
use super::{CLASSES, clock, second};
use crate::counters::{PerWorker, read, read_gauge};
use crate::snapshot::Snapshot;

/// The windows shown, in seconds.
const SPANS: [u64; 2] = [10, 60];

/// Adds `recent` to every pool and backend of `document` (the status document of `snapshot`),
/// and the listeners and routes.
pub fn add(snapshot: &Snapshot, document: &mut Value) {
    let now = clock();
    for (pool, entry) in snapshot.pools.iter().zip(pool_entries(document)) {
        entry["recent"] = recent(&pool.served, |s| &s.recent, now);
        let backends = entry["backends"].as_array_mut();
        for (member, backend) in pool.members.iter().zip(backends.into_iter().flatten()) {
            backend["recent"] = recent(&member.counters, |c| &c.served.recent, now);
        }
    }
    let by_class = |counts: [u64; 5]| -> Value {
        CLASSES
            .iter()
            .zip(counts)
            .map(|(class, count)| (class.to_string(), Value::from(count)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    document["listeners"] = snapshot
        .metrics
        .listeners
        .iter()
        .map(|entry| {
            json!({
                "name": entry.name,
                "accepted": entry.stats.sum(|s| read(&s.accepted)),
                "open": entry.stats.sum(|s| read_gauge(&s.open)),
                "tls_handshakes": entry.stats.sum(|s| read(&s.tls_handshakes)),
                "tls_failures": entry.stats.sum(|s| read(&s.tls_failures)),
                "handed_to_hyper": entry.stats.sum(|s| read(&s.handed_to_hyper)),
                "through_pipeline": entry.stats.sum(|s| read(&s.through_pipeline)),
                "responses": by_class(classes(&entry.stats, |s| &s.traffic)),
                "durations": durations(&merged(&entry.stats, |s| &s.traffic.duration)),
            })
        })
        .collect();
    document["routes"] = snapshot
        .metrics
        .routes
        .iter()
        .map(|entry| {
            json!({
                "listener": entry.listener,
                "route": entry.route,
                "responses": by_class(classes(&entry.traffic, |t| t)),
            })
        })
        .collect();
}

/// A histogram as `/status` shows it: per bucket (not cumulative) counts, the last above every
/// bound.
fn durations(histogram: &Merged) -> Value {
    json!({ "bounds_us": BOUNDS_MICROS, "counts": histogram.counts })
}

fn pool_entries(document: &mut Value) -> impl Iterator<Item = &mut Value> {
    document["pools"].as_array_mut().into_iter().flatten()
}

/// `{"10s": {...}, "60s": {...}}` for one pool or backend.
fn recent<T>(
    shards: &PerWorker<T>,
    ring: impl Fn(&T) -> &super::window::Recent,
    now: std::time::Duration,
) -> Value {
    let current = second(now);
    SPANS
        .iter()
        .map(|&span| {
            let mut window = Window::default();
            for shard in shards.shards() {
                ring(shard).add_to(current, span, &mut window);
            }
            // The current second has only begun, and the process may be younger than the span.
            let covered = (span - 1).min(current - 1) as f64 + now.subsec_nanos() as f64 / 1e9;
            (format!("{span}s"), summarize(&window, covered))
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn summarize(window: &Window, covered_seconds: f64) -> Value {
    let millis = |q| window.answered.quantile(q).map(|micros| micros / 1000.0);
    let attempts = window.attempts();
    json!({
        "requests": attempts,
        "rate": if covered_seconds > 0.0 { attempts as f64 / covered_seconds } else { 0.0 },
        "p50_ms": millis(0.5),
        "p99_ms": millis(0.99),
        "error_rate": window.error_rate(),
    })
}

/// Adds what the caps are and what they did to the capped listeners' entries of `/status`
/// (`listeners`, which already counts every listener's open and accepted connections).
pub fn add_connection_limits(snapshot: &Snapshot, listeners: &mut serde_json::Value) {
    let Some(entries) = listeners.as_array_mut() else {
        return;
    };
    for limit in snapshot.connection_limits() {
        let Some(entry) = entries.iter_mut().find(|e| e["name"] == *limit.listener) else {
            continue;
        };
        entry["max_connections"] = limit.limits.max_connections.into();
        entry["max_connections_per_client"] = limit.limits.max_connections_per_client.into();
        entry["waited"] = limit.waited.load(Ordering::Relaxed).into();
        entry["refused_per_client"] = limit.refused_per_client.load(Ordering::Relaxed).into();
        entry["refused_at_max"] = limit.refused_at_max.load(Ordering::Relaxed).into();
    }
}
