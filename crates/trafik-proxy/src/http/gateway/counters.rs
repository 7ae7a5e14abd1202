//! Counters of the gateway's routes and parts, per worker, for `/status` and `/metrics`.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crate::counters::{PerWorker, add, read};

/// What one route or one part did.
#[derive(Debug, Default)]
pub struct CallCounters {
    /// Requests (for a route) or upstream calls (for a part).
    pub calls: AtomicU64,
    /// Answers that failed: trafik's own error, or a `fail` part's error passed on.
    pub failures: AtomicU64,
    /// Answers that lacked a part (a route's partial answers; a part's times missing).
    pub missing: AtomicU64,
    /// Body bytes: read from upstream (a part), written to clients (a route).
    pub bytes: AtomicU64,
    /// Time spent: in the upstream call (a part), in jq (a route).
    pub nanos: AtomicU64,
}

impl CallCounters {
    pub fn time(&self, spent: Duration) {
        add(&self.nanos, spent.as_nanos() as usize);
    }
}

/// One gateway route's counters and its parts'.
#[derive(Debug)]
pub struct GatewayCounters {
    /// `LISTENER PATH`, the route's name in reports.
    pub route: String,
    /// `aggregate` or `ambassador`.
    pub kind: &'static str,
    pub total: PerWorker<CallCounters>,
    pub parts: Vec<(String, PerWorker<CallCounters>)>,
}

impl GatewayCounters {
    pub fn new(route: String, kind: &'static str, parts: &[String], workers: usize) -> Self {
        GatewayCounters {
            route,
            kind,
            total: PerWorker::new(workers),
            parts: parts
                .iter()
                .map(|name| (name.clone(), PerWorker::new(workers)))
                .collect(),
        }
    }

    pub fn route(&self, worker: usize) -> &CallCounters {
        self.total.mine(worker)
    }

    pub fn part(&self, part: usize, worker: usize) -> &CallCounters {
        self.parts[part].1.mine(worker)
    }
}

/// Sums of one set of shards.
pub fn totals(shards: &PerWorker<CallCounters>) -> [(&'static str, i64); 5] {
    [
        ("calls", shards.sum(|c| read(&c.calls))),
        ("failures", shards.sum(|c| read(&c.failures))),
        ("missing", shards.sum(|c| read(&c.missing))),
        ("bytes", shards.sum(|c| read(&c.bytes))),
        ("nanos", shards.sum(|c| read(&c.nanos))),
    ]
}
