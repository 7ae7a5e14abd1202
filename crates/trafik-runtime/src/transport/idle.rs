//! Upstream streams (plain TCP, or TLS for a TLS pool) kept alive per endpoint in every worker,
//! for the own HTTP/1 engine: a client connection's task checks one out and runs its exchange
//! on it inline (the fast path's, or the pipeline's HTTP/1 client's), no channel, no driver
//! task.

use std::cell::RefCell;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::meter::Meter;
use crate::pool::Pool;
use crate::pool::keep_alive::{self, MAX_IDLE_PER_ENDPOINT};

pub type Stream = super::Upstream;

/// Idle longer than this, a stream is checked for a close before it is used.
const PROBE_AFTER: Duration = Duration::from_secs(1);

/// Whether the backend has neither closed `stream` nor sent anything unasked on it (a byte
/// found on the socket is taken: the stream is not to be used then).
pub fn open(stream: &mut Stream) -> bool {
    let mut probe = [0u8; 1];
    stream.holds_nothing_unread()
        && matches!(stream.socket().try_read(&mut probe), Err(error) if error.kind() == io::ErrorKind::WouldBlock)
}

/// One worker's idle streams, indexed by [`crate::pool::Endpoint::id`].
#[derive(Default)]
pub struct Streams {
    idle: RefCell<Vec<Vec<(Stream, Instant)>>>,
}

impl Streams {
    /// An idle stream to backend `index` of `pool` that is still open as of `reuse_at` (the
    /// caller's clock reading of now), or else a new one (always new without `reuse_at`);
    /// whether it was reused.
    pub async fn checkout(
        &self,
        pool: &Pool,
        index: usize,
        worker: usize,
        reuse_at: Option<Instant>,
    ) -> io::Result<(Stream, bool)> {
        let member = &pool.members[index];
        if let Some(now) = reuse_at {
            let mut idle = self.idle.borrow_mut();
            if let Some(stack) = idle.get_mut(member.endpoint.id) {
                while let Some((mut stream, since)) = stack.pop() {
                    // One idle for a while may have been closed by the backend: a peek finds
                    // out before a request is lost on it. One back within the second is taken
                    // as it is (a system call a request saved under load); should it be closed
                    // after all, the request is sent again if it may be.
                    if now.saturating_duration_since(since) < PROBE_AFTER || open(&mut stream) {
                        stream.charge(&member.counters);
                        return Ok((stream, true));
                    }
                }
            }
        }
        let meter = Meter::new(&member.counters, worker);
        let (tls, timeout) = (pool.plan.tls.as_ref(), pool.plan.connect_timeout);
        // Boxed: a TLS handshake's state is large, and every exchange's future would carry its
        // size though most find an idle stream.
        let stream = Box::pin(super::connect_upstream(
            &member.endpoint,
            tls,
            meter,
            timeout,
            worker,
        ))
        .await?;
        Ok((stream, false))
    }

    /// Keeps a stream whose exchange ended cleanly for the next request to its endpoint, idle
    /// since `since` (a clock reading the caller has: its answer's, a little early at most).
    pub fn release(&self, pool: &Pool, index: usize, stream: Stream, since: Instant) {
        self.keep(pool.members[index].endpoint.id, stream, since);
    }

    /// Keeps a stream to endpoint `id` (an [`crate::pool::Endpoint::id`]), idle since `since`.
    pub fn keep(&self, id: usize, stream: Stream, since: Instant) {
        let mut idle = self.idle.borrow_mut();
        if idle.len() <= id {
            idle.resize_with(id + 1, Vec::new);
        }
        if idle[id].len() < MAX_IDLE_PER_ENDPOINT {
            idle[id].push((stream, since));
        }
    }

    /// Closes the streams [`keep_alive::stale`] at `now`.
    pub fn close_idle(&self, now: Instant, idle_timeout: Duration) {
        for stack in self.idle.borrow_mut().iter_mut() {
            let stale = keep_alive::stale(stack.iter().map(|(_, since)| *since), now, idle_timeout);
            stack.drain(..stale);
        }
    }

    /// Closes the idle streams to endpoints none of `pools` (the configuration in force's)
    /// names any more.
    pub fn keep_only(&self, pools: &[Arc<Pool>]) {
        let mut idle = self.idle.borrow_mut();
        for (id, stack) in idle.iter_mut().enumerate() {
            let named = pools
                .iter()
                .any(|pool| pool.members.iter().any(|m| m.endpoint.id == id));
            if !named {
                stack.clear();
            }
        }
    }
}
