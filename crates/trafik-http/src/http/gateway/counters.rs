//! Counters of the gateway's routes and parts, per worker, for `/status` and `/metrics`.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use trafik_gateway::jq::{Expression, Value};

use crate::counters::{PerWorker, add, bump, read};

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
    /// Time spent: answering (a route), in the upstream call (a part), running (a jq filter).
    pub nanos: AtomicU64,
}

impl CallCounters {
    pub fn time(&self, spent: Duration) {
        add(&self.nanos, spent.as_nanos() as usize);
    }
}

/// One gateway route's counters, its parts' and its jq filters' (`merge`, `view mobil`,
/// `answer`, `status`: runs in `calls`, errors in `failures`).
#[derive(Debug)]
pub struct GatewayCounters {
    /// `LISTENER PATH`, the route's name in reports.
    pub route: String,
    /// `aggregate` or `ambassador`.
    pub kind: &'static str,
    pub total: PerWorker<CallCounters>,
    pub parts: Vec<(String, PerWorker<CallCounters>)>,
    pub filters: Vec<(String, PerWorker<CallCounters>)>,
}

impl GatewayCounters {
    pub fn new(
        route: String,
        kind: &'static str,
        parts: &[String],
        filters: &[String],
        workers: usize,
    ) -> Self {
        let shards = |names: &[String]| {
            names
                .iter()
                .map(|name| (name.clone(), PerWorker::new(workers)))
                .collect()
        };
        GatewayCounters {
            route,
            kind,
            total: PerWorker::new(workers),
            parts: shards(parts),
            filters: shards(filters),
        }
    }

    pub fn route(&self, worker: usize) -> &CallCounters {
        self.total.mine(worker)
    }

    pub fn part(&self, part: usize, worker: usize) -> &CallCounters {
        self.parts[part].1.mine(worker)
    }

    /// Runs the route's jq filter at `filter` (its place in `filters`), counted.
    pub fn run(
        &self,
        filter: usize,
        worker: usize,
        expression: &Expression,
        input: Value,
        values: impl IntoIterator<Item = Value>,
    ) -> Result<Value, String> {
        let counters = self.filters[filter].1.mine(worker);
        bump(&counters.calls);
        let started = Instant::now();
        let result = expression.run(input, values);
        counters.time(started.elapsed());
        if result.is_err() {
            bump(&counters.failures);
        }
        result
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
