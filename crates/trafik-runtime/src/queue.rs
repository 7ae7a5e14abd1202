//! A pool's bounded queue of pending requests (HAProxy's backend queue with `timeout queue`):
//! when every backend has `max_requests_per_backend` in flight, a request waits here, at most
//! `max_pending` of them, each up to `queue_timeout`, for one to finish, instead of getting 503
//! at once. A finished request wakes one waiter, on whichever worker it waits.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::ProxyError;

pub struct PendingQueue {
    max_pending: usize,
    timeout: Duration,
    waiting: AtomicUsize,
    freed: Notify,
    /// Plain atomics rather than per-worker shards: they move only while the pool is overloaded.
    pub counters: std::sync::Arc<QueueCounters>,
}

/// What the queue did, carried across reloads with the pool.
#[derive(Default)]
pub struct QueueCounters {
    /// Waits in the queue (whatever came of them).
    pub queued: AtomicU64,
    /// Requests answered 503 because the queue was full.
    pub full: AtomicU64,
    /// Requests answered 503 because their `queue_timeout` passed.
    pub timed_out: AtomicU64,
}

impl PendingQueue {
    pub fn new(
        max_pending: u32,
        timeout: Duration,
        previous: Option<&PendingQueue>,
    ) -> PendingQueue {
        PendingQueue {
            max_pending: max_pending as usize,
            timeout,
            waiting: AtomicUsize::new(0),
            freed: Notify::new(),
            counters: previous.map(|p| p.counters.clone()).unwrap_or_default(),
        }
    }

    /// Requests waiting now.
    pub fn pending(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// A request to this pool finished: a slot may be free for a waiter.
    pub fn released(&self) {
        if self.waiting.load(Ordering::Relaxed) > 0 {
            self.freed.notify_one();
        }
    }

    /// When a request entering the queue now must have left it.
    pub fn deadline(&self) -> tokio::time::Instant {
        let now = tokio::time::Instant::now();
        // A timeout of years is as good as one of a day, and cannot overflow the clock.
        now.checked_add(self.timeout)
            .unwrap_or(now + Duration::from_secs(86_400))
    }

    /// Waits until `saturated` turns false (a backend has room); `Err` with the reason for the
    /// client when the queue is full or off, or `deadline` passes first. A request that lost
    /// the freed slot to another comes back with the same deadline.
    pub async fn wait(
        &self,
        saturated: impl Fn() -> bool,
        deadline: tokio::time::Instant,
    ) -> Result<(), ProxyError> {
        let before = self.waiting.fetch_add(1, Ordering::Relaxed);
        let _leave = Leave(&self.waiting);
        if before >= self.max_pending {
            self.counters.full.fetch_add(1, Ordering::Relaxed);
            return Err(ProxyError::QueueFull);
        }
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        loop {
            // Registered before looking, so a release between the look and the wait is seen.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if !saturated() {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                self.counters.timed_out.fetch_add(1, Ordering::Relaxed);
                return Err(ProxyError::QueueTimeout);
            }
        }
    }
}

/// Takes a waiter off the count however its wait ends (the client may go away meanwhile).
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[tokio::test]
    async fn a_waiter_gets_the_freed_slot_and_the_rest_are_bounded_by_size_and_time() {
        let queue = Arc::new(PendingQueue::new(1, Duration::from_millis(50), None));
        let busy = Arc::new(AtomicBool::new(true));
        let waiter = {
            let (queue, busy) = (queue.clone(), busy.clone());
            tokio::spawn(async move {
                queue
                    .wait(|| busy.load(Ordering::Relaxed), queue.deadline())
                    .await
            })
        };
        tokio::task::yield_now().await;
        assert_eq!(queue.pending(), 1);
        assert_eq!(
            queue.wait(|| true, queue.deadline()).await,
            Err(ProxyError::QueueFull)
        );
        busy.store(false, Ordering::Relaxed);
        queue.released();
        assert_eq!(waiter.await.unwrap(), Ok(()));
        assert_eq!(
            queue.wait(|| true, queue.deadline()).await,
            Err(ProxyError::QueueTimeout)
        );
        let counters = &queue.counters;
        assert_eq!(counters.queued.load(Ordering::Relaxed), 2);
        assert_eq!(counters.full.load(Ordering::Relaxed), 1);
        assert_eq!(counters.timed_out.load(Ordering::Relaxed), 1);
        assert_eq!(queue.pending(), 0);
    }
}
