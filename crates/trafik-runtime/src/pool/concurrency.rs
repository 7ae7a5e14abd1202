//! A pool's adaptive concurrency limit (`[pool.adaptive_concurrency]`): requests in flight to
//! the whole pool are capped by a limit that follows the latency of its answers
//! ([`trafik_balance::AdaptiveLimit`]); one over it gets the fast 503 the fixed limits give,
//! with `x-trafik-reason: concurrency-limit`. A request counts from its admission until its
//! response head arrives (or it fails).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};
use trafik_balance::{AdaptiveLimit, ConcurrencyRules, Nanos};
use trafik_metrics_text::{Exposition, Kind};

use crate::pool::Pool;

/// The limit of one pool, shared by every worker.
pub struct Concurrency {
    rules: ConcurrencyRules,
    shared: Arc<Shared>,
}

/// Plain atomics and a lock rather than per-worker shards: the limit is one number for all
/// workers, and a sample's update is a few float operations.
struct Shared {
    limit: Mutex<AdaptiveLimit>,
    /// The limit as of the latest sample, read without the lock on admission.
    current: AtomicU32,
    in_flight: AtomicU32,
    /// Requests answered 503 because the pool was at its limit.
    rejected: AtomicU64,
}

/// One request let in: counted in flight until dropped.
pub struct Slot {
    shared: Arc<Shared>,
    in_flight: u32,
    since: Instant,
}

impl Concurrency {
    /// Carries the running limit, its counters and requests in flight across a reload that
    /// keeps the rules.
    pub fn new(rules: ConcurrencyRules, previous: Option<&Concurrency>) -> Self {
        let shared = match previous.filter(|p| p.rules == rules) {
            Some(previous) => previous.shared.clone(),
            None => {
                let limit = AdaptiveLimit::new(rules.clone());
                Arc::new(Shared {
                    current: AtomicU32::new(limit.limit()),
                    limit: Mutex::new(limit),
                    in_flight: AtomicU32::new(0),
                    rejected: AtomicU64::new(0),
                })
            }
        };
        Concurrency { rules, shared }
    }

    /// Lets a request in, or `None` (counted) when the pool has its limit in flight.
    pub fn admit(&self) -> Option<Slot> {
        let shared = &self.shared;
        let before = shared.in_flight.fetch_add(1, Ordering::Relaxed);
        if before >= shared.current.load(Ordering::Relaxed) {
            shared.in_flight.fetch_sub(1, Ordering::Relaxed);
            shared.rejected.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(Slot {
            shared: shared.clone(),
            in_flight: before + 1,
            since: Instant::now(),
        })
    }

    pub fn limit(&self) -> u32 {
        self.shared.current.load(Ordering::Relaxed)
    }

    pub fn in_flight(&self) -> u32 {
        self.shared.in_flight.load(Ordering::Relaxed)
    }

    pub fn rejected(&self) -> u64 {
        self.shared.rejected.load(Ordering::Relaxed)
    }
}

impl Slot {
    /// An answer (or a timeout) arrived at `now`: its latency since admission moves the limit.
    pub fn answered(&self, now: Nanos) {
        let mut limit = self.shared.limit.lock().unwrap_or_else(|e| e.into_inner());
        let updated = limit.sample(now, self.since.elapsed(), self.in_flight);
        self.shared.current.store(updated, Ordering::Relaxed);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The pool's entry in `/status`, when it has the limit.
pub fn status(pool: &Pool) -> Option<Value> {
    let concurrency = pool.concurrency.as_ref()?;
    Some(json!({
        "limit": concurrency.limit(),
        "in_flight": concurrency.in_flight(),
        "rejected": concurrency.rejected(),
        "min_limit": concurrency.rules.min_limit,
        "max_limit": concurrency.rules.max_limit,
    }))
}

/// The limits in the Prometheus text format; nothing while no pool has one.
pub fn metrics(pools: &[Arc<Pool>], exposition: &mut Exposition) {
    type Read = fn(&Concurrency) -> u64;
    let families: [(&str, Kind, &str, Read); 3] = [
        (
            "trafik_pool_concurrency_limit",
            Kind::Gauge,
            "The pool's adaptive concurrency limit now.",
            |c| u64::from(c.limit()),
        ),
        (
            "trafik_pool_concurrency_in_flight",
            Kind::Gauge,
            "Requests counted against the pool's adaptive concurrency limit.",
            |c| u64::from(c.in_flight()),
        ),
        (
            "trafik_pool_concurrency_rejected_total",
            Kind::Counter,
            "Requests answered 503 because the pool was at its adaptive concurrency limit.",
            Concurrency::rejected,
        ),
    ];
    let limited = || {
        pools
            .iter()
            .filter_map(|p| Some((p, p.concurrency.as_ref()?)))
    };
    if limited().next().is_none() {
        return;
    }
    for (name, kind, help, read) in families {
        let mut family = exposition.family(name, kind, help);
        for (pool, concurrency) in limited() {
            family.sample(&[("pool", &pool.plan.name)], read(concurrency));
        }
    }
}
