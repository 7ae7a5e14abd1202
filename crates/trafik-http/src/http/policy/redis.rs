//! Global rate limits in Redis: the GCRA script (`trafik_policy::gcra::REDIS_SCRIPT`) run
//! atomically per request. Each worker keeps its own multiplexed connection (the `redis` crate's
//! `ConnectionManager`, which reconnects by itself), so requests of one worker share one
//! connection and no request waits on another worker. A round trip or connect that takes longer
//! than the timeout counts as Redis being down.
//!
//! Each worker also keeps a [`Breaker`]: once Redis has failed, the worker's requests are
//! decided by the fail-open/closed setting at once, without waiting for a timeout each, and one
//! request every probe interval asks Redis again.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::Mutex;

use super::GlobalLimitStats;
use crate::counters::{PerWorker, bump, read};
use crate::plan::GlobalLimit;
use trafik_metrics_text::{Exposition, Kind};
use trafik_policy::breaker::{Admission, Breaker};
use trafik_policy::gcra::{Decision, Gcra, REDIS_SCRIPT};

pub struct RedisGcra {
    client: redis::Client,
    script: redis::Script,
    prefix: Vec<u8>,
    timeout: Duration,
    /// One per worker, indexed by worker id (and wrapping, like `PerWorker`).
    connections: Box<[Mutex<Option<ConnectionManager>>]>,
    /// One per worker, like the connections; a plain lock, never held across an await.
    breakers: Box<[std::sync::Mutex<Breaker>]>,
    /// The breakers' clock starts here.
    epoch: Instant,
    counters: Arc<PerWorker<RedisCounters>>,
}

/// Why Redis gave no decision.
pub enum Unavailable {
    /// It was asked and refused, broke or did not answer in time.
    Failed(String),
    /// It failed before and the breaker is open: it was not asked.
    Remembered,
}

/// One worker's counts of a global limit's decisions.
#[derive(Debug, Default)]
pub struct RedisCounters {
    /// Decided by Redis.
    answered: AtomicU64,
    /// Redis was asked and failed.
    failed: AtomicU64,
    /// Decided by the fail-open/closed setting without asking Redis (the breaker open).
    fast_failed: AtomicU64,
    /// Requests that asked Redis again after it had failed.
    probes: AtomicU64,
}

/// Reads one of the counters.
type Counter = fn(&RedisCounters) -> &AtomicU64;

/// The counters by name, as `/status` and `/metrics` show them.
const COUNTERS: [(&str, Counter); 4] = [
    ("answered", |c| &c.answered),
    ("failed", |c| &c.failed),
    ("fast_failed", |c| &c.fast_failed),
    ("probes", |c| &c.probes),
];

/// Each global limit's counts in `/status`: by route, summed over the workers.
pub fn status(limits: &[GlobalLimitStats]) -> serde_json::Value {
    let limits = limits
        .iter()
        .map(|limit| {
            let counts: serde_json::Map<String, serde_json::Value> = COUNTERS
                .iter()
                .map(|(name, counter)| {
                    let sum = limit.counters.sum(|c| read(counter(c)));
                    ((*name).to_owned(), sum.into())
                })
                .collect();
            serde_json::json!({"route": limit.route, "redis": counts})
        })
        .collect();
    serde_json::Value::Array(limits)
}

/// The same counts in Prometheus text; nothing without a global limit.
pub fn metrics(limits: &[GlobalLimitStats], exposition: &mut Exposition) {
    if limits.is_empty() {
        return;
    }
    let mut decisions = exposition.family(
        "trafik_rate_limit_redis_decisions_total",
        Kind::Counter,
        "Global rate-limit decisions: by Redis (answered), by on_redis_error after Redis failed \
         (failed), or by on_redis_error at once while Redis is remembered down (fast_failed).",
    );
    for limit in limits {
        for (outcome, counter) in &COUNTERS[..3] {
            let labels = [("route", limit.route.as_str()), ("outcome", outcome)];
            decisions.sample(&labels, limit.counters.sum(|c| read(counter(c))));
        }
    }
    let mut probes = exposition.family(
        "trafik_rate_limit_redis_probes_total",
        Kind::Counter,
        "Requests that asked Redis again after it had failed.",
    );
    for limit in limits {
        probes.sample(
            &[("route", limit.route.as_str())],
            limit.counters.sum(|c| read(&c.probes)),
        );
    }
}

impl RedisGcra {
    pub fn new(
        plan: &GlobalLimit,
        workers: usize,
        counters: Arc<PerWorker<RedisCounters>>,
    ) -> Result<RedisGcra, String> {
        let client = redis::Client::open(plan.redis.as_str())
            .map_err(|e| format!("redis address {:?}: {e}", plan.redis))?;
        let probe_interval = plan.probe_interval.as_nanos().min(u64::MAX.into()) as u64;
        let workers = workers.max(1);
        Ok(RedisGcra {
            client,
            script: redis::Script::new(REDIS_SCRIPT),
            prefix: plan.prefix.as_bytes().to_vec(),
            timeout: plan.timeout,
            connections: (0..workers).map(|_| Mutex::default()).collect(),
            breakers: (0..workers)
                .map(|_| std::sync::Mutex::new(Breaker::new(probe_interval)))
                .collect(),
            epoch: Instant::now(),
            counters,
        })
    }

    /// This worker's connection, connecting when it has none. Requests of the worker that
    /// arrive during a connect wait for it (the lock is async and held only by this worker's
    /// tasks) rather than count Redis as down.
    async fn connection(&self, worker: usize) -> Result<ConnectionManager, String> {
        let mut slot = self.connections[worker % self.connections.len()]
            .lock()
            .await;
        if let Some(connection) = &*slot {
            return Ok(connection.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1);
        let connected = tokio::time::timeout(
            self.timeout,
            ConnectionManager::new_with_config(self.client.clone(), config),
        )
        .await;
        match connected {
            Ok(Ok(connection)) => Ok(slot.insert(connection).clone()),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err("redis connect timed out".into()),
        }
    }

    fn breaker(&self, worker: usize) -> std::sync::MutexGuard<'_, Breaker> {
        self.breakers[worker % self.breakers.len()]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Decides one request for `key` in Redis, unless the worker's breaker remembers that
    /// Redis is down.
    pub async fn decide(
        &self,
        worker: usize,
        key: &[u8],
        gcra: &Gcra,
    ) -> Result<Decision, Unavailable> {
        let counters = self.counters.mine(worker);
        let admission = self.breaker(worker).admit(self.now());
        match admission {
            Admission::Skip => {
                bump(&counters.fast_failed);
                return Err(Unavailable::Remembered);
            }
            Admission::Probe => bump(&counters.probes),
            Admission::Ask => {}
        }
        match self.ask(worker, key, gcra).await {
            Ok(decision) => {
                self.breaker(worker).succeeded();
                bump(&counters.answered);
                Ok(decision)
            }
            Err(error) => {
                self.breaker(worker).failed(self.now());
                bump(&counters.failed);
                Err(Unavailable::Failed(error))
            }
        }
    }

    /// Runs the script for `key` on this worker's connection.
    async fn ask(&self, worker: usize, key: &[u8], gcra: &Gcra) -> Result<Decision, String> {
        let mut connection = self.connection(worker).await?;
        let mut full_key = Vec::with_capacity(self.prefix.len() + key.len());
        full_key.extend_from_slice(&self.prefix);
        full_key.extend_from_slice(key);
        let interval = (gcra.interval() / 1_000).max(1);
        let tolerance = gcra.tolerance() / 1_000;
        let mut invocation = self.script.key(full_key);
        invocation.arg(interval).arg(tolerance);
        let reply: (u8, u32, u64, u64) =
            tokio::time::timeout(self.timeout, invocation.invoke_async(&mut connection))
                .await
                .map_err(|_| "redis did not answer in time".to_owned())?
                .map_err(|e| e.to_string())?;
        Ok(decision(reply, interval, tolerance))
    }
}

/// The script's reply `(allowed, remaining, retry_after, reset)`, its times in microseconds,
/// as a [`Decision`] in nanoseconds. What Redis holds is not trusted: a key set by hand to a
/// huge value saturates instead of overflowing.
fn decision(reply: (u8, u32, u64, u64), interval: u64, tolerance: u64) -> Decision {
    let (allowed, remaining, retry_after, reset) = reply;
    Decision {
        allowed: allowed == 1,
        limit: u32::try_from(tolerance / interval.max(1)).unwrap_or(u32::MAX),
        remaining,
        retry_after: retry_after.saturating_mul(1_000),
        reset: reset.saturating_mul(1_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Probe finding: times from Redis were multiplied unchecked, so a key set by hand to a huge
    /// value overflowed (a panic with overflow checks, a wrapped small `Retry-After` without).
    #[test]
    fn a_reply_past_any_clock_saturates_instead_of_overflowing() {
        let refused = decision((0, 0, u64::MAX, u64::MAX / 2), 100_000, 1_000_000);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after, u64::MAX);
        assert_eq!(refused.reset, u64::MAX);
        assert_eq!(refused.limit, 10);
        let allowed = decision((1, 9, 0, 100_000), 100_000, 1_000_000);
        assert_eq!((allowed.retry_after, allowed.reset), (0, 100_000_000));
    }
}
