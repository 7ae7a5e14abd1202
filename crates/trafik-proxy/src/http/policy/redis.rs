//! Global rate limits in Redis: the GCRA script (`trafik_policy::gcra::REDIS_SCRIPT`) run
//! atomically per request. Each worker keeps its own multiplexed connection (the `redis` crate's
//! `ConnectionManager`, which reconnects by itself), so requests of one worker share one
//! connection and no request waits on another worker. A round trip or connect that takes longer
//! than the timeout counts as Redis being down; after a failed connect a worker waits a second
//! before trying again, answering by the fail-open/closed setting meanwhile.

use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::Mutex;

use crate::plan::GlobalLimit;
use trafik_policy::gcra::{Decision, Gcra, REDIS_SCRIPT};

pub struct RedisGcra {
    client: redis::Client,
    script: redis::Script,
    prefix: Vec<u8>,
    timeout: Duration,
    /// One per worker, indexed by worker id (and wrapping, like `PerWorker`).
    slots: Box<[Mutex<Slot>]>,
}

#[derive(Default)]
struct Slot {
    connection: Option<ConnectionManager>,
    /// No connect before this instant (one just failed).
    quiet_until: Option<Instant>,
}

const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

impl RedisGcra {
    pub fn new(plan: &GlobalLimit, workers: usize) -> Result<RedisGcra, String> {
        let client = redis::Client::open(plan.redis.as_str())
            .map_err(|e| format!("redis address {:?}: {e}", plan.redis))?;
        Ok(RedisGcra {
            client,
            script: redis::Script::new(REDIS_SCRIPT),
            prefix: plan.prefix.as_bytes().to_vec(),
            timeout: plan.timeout,
            slots: (0..workers.max(1)).map(|_| Mutex::default()).collect(),
        })
    }

    /// This worker's connection, connecting when it has none and may try. Requests of the
    /// worker that arrive during a connect wait for it (the slot's lock is async and held only
    /// by this worker's tasks) rather than count Redis as down.
    async fn connection(&self, worker: usize) -> Result<ConnectionManager, String> {
        let mut slot = self.slots[worker % self.slots.len()].lock().await;
        if let Some(connection) = &slot.connection {
            return Ok(connection.clone());
        }
        if slot.quiet_until.is_some_and(|until| Instant::now() < until) {
            return Err("redis unreachable (waiting before reconnecting)".into());
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
            Ok(Ok(connection)) => {
                slot.connection = Some(connection.clone());
                slot.quiet_until = None;
                Ok(connection)
            }
            Ok(Err(error)) => {
                slot.quiet_until = Some(Instant::now() + RECONNECT_PAUSE);
                Err(error.to_string())
            }
            Err(_) => {
                slot.quiet_until = Some(Instant::now() + RECONNECT_PAUSE);
                Err("redis connect timed out".into())
            }
        }
    }

    /// Decides one request for `key` in Redis.
    pub async fn decide(&self, worker: usize, key: &[u8], gcra: &Gcra) -> Result<Decision, String> {
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
        let (allowed, remaining, retry_after, reset) = reply;
        Ok(Decision {
            allowed: allowed == 1,
            limit: (tolerance / interval) as u32,
            remaining,
            retry_after: retry_after * 1_000,
            reset: reset * 1_000,
        })
    }
}
