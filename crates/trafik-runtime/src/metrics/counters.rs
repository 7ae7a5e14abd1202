//! Counters written on the request path. Each worker writes its own cache-line-padded shard,
//! so no two workers ever write the same line; the admin API sums the shards when asked.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

/// One `T` per worker.
#[derive(Debug)]
pub struct PerWorker<T> {
    shards: Box<[CachePadded<T>]>,
}

impl<T: Default> PerWorker<T> {
    pub fn new(workers: usize) -> Self {
        PerWorker {
            shards: (0..workers.max(1))
                .map(|_| CachePadded::new(T::default()))
                .collect(),
        }
    }
}

impl<T> PerWorker<T> {
    /// The shard worker `worker` writes.
    #[inline]
    pub fn mine(&self, worker: usize) -> &T {
        &self.shards[worker % self.shards.len()]
    }

    /// Every worker's shard, for merging more than one number (histograms).
    pub fn shards(&self) -> impl Iterator<Item = &T> {
        self.shards.iter().map(|shard| &**shard)
    }

    /// The sum over all workers of what `read` reads from a shard.
    pub fn sum(&self, read: impl Fn(&T) -> i64) -> i64 {
        self.shards.iter().map(|shard| read(shard)).sum()
    }
}

/// What happened to one backend of one pool, kept across reloads while the pool keeps it.
#[derive(Debug, Default)]
pub struct BackendCounters {
    /// Times the selection rule (or a sticky binding) chose this backend.
    pub decisions: AtomicU64,
    /// Responses this backend sent (any status).
    pub requests: AtomicU64,
    /// Failed connects, timeouts and broken connections to this backend.
    pub failures: AtomicU64,
    /// Connections it switched to another protocol (a relayed 101, such as a WebSocket).
    pub upgrades: AtomicU64,
    /// Requests in flight to it: +1 on one worker, -1 on the same one.
    pub in_flight: AtomicI64,
    /// TCP connections opened to it: upstream connections of HTTP pools (kept alive, so fewer
    /// than requests), one per client connection for layer-4 pools.
    pub connections: AtomicU64,
    /// Bytes read from it, counted on the socket (headers, bodies, TLS records alike).
    pub bytes_in: AtomicU64,
    /// Bytes written to it, counted on the socket.
    pub bytes_out: AtomicU64,
    /// Its answers' durations (request sent to response headers) and status classes, and the
    /// last minute of attempts.
    pub served: crate::metrics::Served,
    /// How long opening a TCP connection to it took.
    pub connect: crate::metrics::histogram::Histogram,
    /// The latest connect to it from this worker failed and nothing has answered since: the
    /// passive view of its health, for pools without active checks (and their one warning).
    pub unreachable: AtomicBool,
}

/// Adds one to a counter only its own worker writes.
#[inline]
pub fn bump(counter: &AtomicU64) {
    add_alone(counter, 1);
}

/// Adds `bytes` to a counter only its own worker writes.
#[inline]
pub fn add(counter: &AtomicU64, bytes: usize) {
    add_alone(counter, bytes as u64);
}

/// Adds `amount` to a number of a worker's shard, which no other thread writes (readers only
/// sum): a load and a store. A locked add would first wait for every store before it to leave
/// the core, tens of cycles a count, and a request counts about twenty things.
#[inline]
pub fn add_alone(counter: &AtomicU64, amount: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(amount),
        Ordering::Relaxed,
    );
}

/// Moves a gauge of a worker's shard by `amount`, as [`add_alone`] does a counter.
#[inline]
pub fn move_alone(gauge: &AtomicI64, amount: i64) {
    gauge.store(
        gauge.load(Ordering::Relaxed).wrapping_add(amount),
        Ordering::Relaxed,
    );
}

/// Reads a counter for summing.
pub fn read(counter: &AtomicU64) -> i64 {
    counter.load(Ordering::Relaxed) as i64
}

/// Reads a gauge for summing.
pub fn read_gauge(gauge: &AtomicI64) -> i64 {
    gauge.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_summed_and_each_worker_writes_its_own() {
        let counters: PerWorker<BackendCounters> = PerWorker::new(3);
        for worker in 0..3 {
            for _ in 0..=worker {
                bump(&counters.mine(worker).requests);
            }
        }
        assert_eq!(counters.sum(|c| read(&c.requests)), 1 + 2 + 3);
        assert_eq!(read(&counters.mine(2).requests), 3);
        let line = std::mem::align_of::<CachePadded<BackendCounters>>();
        assert!(line >= 64, "shards sit on separate cache lines");
    }
}
