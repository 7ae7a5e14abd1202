//! The golden metrics: request durations as histograms, responses by status class, the last
//! minute of traffic per pool and backend, and listener connections. Everything is written in
//! per-worker shards ([`crate::counters::PerWorker`]) on the request path and merged when the
//! admin API is asked (the proxy's exposition writes Prometheus text and the `/status` figures).

pub mod counters;
pub mod histogram;
pub mod window;

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use histogram::Histogram;
use window::Recent;

use crate::connections::ListenerId;
use crate::counters::{PerWorker, bump, move_alone};

/// The status classes counted, in order: 1xx to 5xx.
pub const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// When the metrics clock started (the first time anything asked).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Time on the metrics clock now.
pub fn clock() -> Duration {
    epoch().elapsed()
}

/// The second of the metrics clock `at` falls in, counted from 1.
#[inline]
pub fn second(at: Duration) -> u64 {
    at.as_secs() + 1
}

/// The second of the metrics clock instant `at` falls in: no further clock reading.
#[inline]
pub fn second_of(at: Instant) -> u64 {
    second(at.saturating_duration_since(epoch()))
}

/// Microseconds since `started`, saturating.
#[inline]
pub fn micros_since(started: Instant) -> u64 {
    micros_between(started, Instant::now())
}

/// Microseconds from `start` to `end`, saturating.
#[inline]
pub fn micros_between(start: Instant, end: Instant) -> u64 {
    // In u64: `Duration::as_micros` works in u128.
    let took = end.saturating_duration_since(start);
    took.as_secs()
        .saturating_mul(1_000_000)
        .saturating_add(u64::from(took.subsec_micros()))
}

/// An answer's place on the metrics clock: how long it took and the second it ended in, read
/// once for every count that takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Took {
    pub micros: u64,
    pub second: u64,
}

impl Took {
    /// From `start` to `end`.
    #[inline]
    pub fn between(start: Instant, end: Instant) -> Took {
        Took {
            micros: micros_between(start, end),
            second: second_of(end),
        }
    }
}

/// Requests answered by one listener, route, pool or backend: durations and status classes.
#[derive(Debug, Default)]
pub struct Traffic {
    pub duration: Histogram,
    pub classes: [AtomicU64; 5],
}

impl Traffic {
    #[inline]
    pub fn record(&self, status: u16, micros: u64) {
        self.duration.record(micros);
        let class = usize::from((status / 100).clamp(1, 5)) - 1;
        bump(&self.classes[class]);
    }
}

/// A pool's or backend's traffic: since start, and second by second for the last minute.
#[derive(Debug, Default)]
pub struct Served {
    pub traffic: Traffic,
    pub recent: Recent,
}

impl Served {
    /// Counts an answer with `status` that took from `start` to `end`.
    #[inline]
    pub fn answered(&self, status: u16, start: Instant, end: Instant) {
        self.answered_in(status, Took::between(start, end));
    }

    /// Counts an answer with `status` that `took` as told: for a caller that has read it
    /// already.
    #[inline]
    pub fn answered_in(&self, status: u16, took: Took) {
        let Took { micros, second } = took;
        self.traffic.record(status, micros);
        self.recent.answered(second, micros, status >= 500);
    }

    /// Counts an attempt that got no answer from the backend.
    #[inline]
    pub fn unanswered(&self) {
        self.recent.unanswered(second(clock()));
    }
}

/// One listener's connections and requests.
#[derive(Debug, Default)]
pub struct ListenerStats {
    pub accepted: AtomicU64,
    /// Connections open now: +1 on accept, -1 when the connection ends, on the same worker.
    pub open: AtomicI64,
    pub tls_handshakes: AtomicU64,
    pub tls_failures: AtomicU64,
    /// Connections the own HTTP/1 engine handed to hyper's server for the rest of their life,
    /// at a request its fast path does not take.
    pub handed_to_hyper: AtomicU64,
    /// Requests the own HTTP/1 engine gave to the shared pipeline (steps that read bodies or
    /// wait, caches, static files, gateway targets); it serves the others inline.
    pub through_pipeline: AtomicU64,
    pub traffic: Traffic,
}

/// One open client connection in its listener's gauge, from accept to drop.
pub struct OpenClient {
    stats: Arc<PerWorker<ListenerStats>>,
    worker: usize,
}

impl OpenClient {
    /// Counts a connection accepted and open.
    pub fn new(stats: &Arc<PerWorker<ListenerStats>>, worker: usize) -> Self {
        let mine = stats.mine(worker);
        bump(&mine.accepted);
        move_alone(&mine.open, 1);
        OpenClient {
            stats: stats.clone(),
            worker,
        }
    }
}

impl OpenClient {
    /// Counts a TLS handshake on this connection, completed or failed.
    pub fn handshake(&self, completed: bool) {
        let mine = self.stats.mine(self.worker);
        bump(if completed {
            &mine.tls_handshakes
        } else {
            &mine.tls_failures
        });
    }
}

impl Drop for OpenClient {
    fn drop(&mut self) {
        move_alone(&self.stats.mine(self.worker).open, -1);
    }
}

/// A route's shards of [`Traffic`].
pub type RouteTraffic = Arc<PerWorker<Traffic>>;

/// The listeners and routes of a snapshot with their metrics. Built with the snapshot; each
/// takes over the shards of the previous snapshot's listener of the same id, or route of the
/// same listener and match, so counts survive a reload.
#[derive(Default)]
pub struct Registry {
    pub listeners: Vec<ListenerEntry>,
    pub routes: Vec<RouteEntry>,
}

pub struct ListenerEntry {
    pub id: ListenerId,
    pub name: String,
    pub stats: Arc<PerWorker<ListenerStats>>,
}

pub struct RouteEntry {
    pub listener: String,
    /// The host (when it has one) and path it matches, as `host/path` or `/path`.
    pub route: String,
    pub traffic: RouteTraffic,
}

impl Registry {
    /// Adds listener `id`, with the shards it had in `previous`.
    pub fn add_listener(
        &mut self,
        id: ListenerId,
        name: &str,
        previous: Option<&Registry>,
        workers: usize,
    ) {
        let stats = previous
            .and_then(|p| p.listener_stats(id))
            .cloned()
            .unwrap_or_else(|| Arc::new(PerWorker::new(workers)));
        self.listeners.push(ListenerEntry {
            id,
            name: name.to_owned(),
            stats,
        });
    }

    /// Adds a route and returns its shards, the ones it had in `previous` if it was there.
    pub fn add_route(
        &mut self,
        listener: &str,
        route: String,
        previous: Option<&Registry>,
        workers: usize,
    ) -> RouteTraffic {
        let traffic = previous
            .and_then(|p| {
                p.routes
                    .iter()
                    .find(|known| known.listener == listener && known.route == route)
            })
            .map(|known| known.traffic.clone())
            .unwrap_or_else(|| Arc::new(PerWorker::new(workers)));
        self.routes.push(RouteEntry {
            listener: listener.to_owned(),
            route,
            traffic: traffic.clone(),
        });
        traffic
    }

    pub fn listener_stats(&self, id: ListenerId) -> Option<&Arc<PerWorker<ListenerStats>>> {
        self.listeners
            .iter()
            .find(|entry| entry.id == id)
            .map(|entry| &entry.stats)
    }
}
