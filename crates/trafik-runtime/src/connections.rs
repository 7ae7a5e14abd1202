//! A worker's client connections, whatever they speak: one sweeper per worker closes those idle
//! past the limit and asks all of them (or those of one removed listener) to drain. Checking
//! each connection's idle time once a second here is cheaper than a timer per connection polled
//! on every wake-up.
//!
//! A drain (a stop, a binary upgrade, a removed listener) never closes an HTTP/1 connection
//! under a client that may be sending on it: a kept-alive client sends its next request
//! whenever it likes, and one that finds the connection closed after sending has lost that
//! request (it cannot know whether it was acted on). So a draining connection finishes what has
//! started and answers it, and every answer from then on carries `Connection: close`, after
//! which the client knows to open a new connection (to the successor). Only a connection that
//! stays between requests for [`DRAIN_IDLE_GRACE`] is closed as it is: its client is idle, and
//! the race of a request sent just as it closes is left to the rare client that waited that
//! long, as with any idle timeout.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Poll, Waker};
use std::time::Duration;

use tokio::sync::watch;

use crate::observed::{Observed, Observer};

/// A listener's identity while its socket stays open (across reloads that keep its address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenerId(pub u64);

/// How long a draining connection may stay between requests before it is closed: long enough
/// for a kept-alive client that is active to send its next request and be told to close.
pub const DRAIN_IDLE_GRACE: Duration = Duration::from_secs(1);

/// A worker's client connections, as its sweeper sees them.
pub struct Connections {
    /// Seconds since the worker started: a clock cheap enough to read on every read and write.
    /// Atomic (relaxed: a plain load and store) only so that a stream hyper hands over to an
    /// upgrade, which must be `Send`, can carry it.
    tick: Arc<AtomicU64>,
    /// Idle limit in whole seconds (at least 1); a reload may change it.
    idle_ticks: Cell<u64>,
    list: RefCell<Vec<Weak<Control>>>,
    /// The tick at which the worker began to drain.
    draining_since: Cell<Option<u64>>,
}

/// What the sweeper can ask of one connection.
pub struct Control {
    listener: ListenerId,
    /// The tick at which a byte last moved; shared with the connection's [`Watched`] stream.
    active_at: Arc<AtomicU64>,
    idle: Cell<bool>,
    /// The tick at which the connection was asked to drain.
    draining_since: Cell<Option<u64>>,
    /// Draining for longer than [`DRAIN_IDLE_GRACE`]: close it when it is between requests.
    drain_idle: Cell<bool>,
    /// Whether bytes came from the client since anything was written to it: a request has
    /// started to arrive or is being served. Shared with the connection's [`Watched`] stream.
    heard: Arc<AtomicBool>,
    waker: RefCell<Option<Waker>>,
    /// While the connection waits for a request head, the whole seconds it may wait (the own
    /// HTTP/1 engine's header timeout, kept by this sweeper instead of a timer per request);
    /// 0 otherwise.
    head_ticks: Cell<u64>,
}

impl Control {
    /// Whether the connection has been idle too long and must close now.
    pub fn is_idle(&self) -> bool {
        self.idle.get()
    }

    /// Marks the connection as waiting for a request head, for at most `limit`.
    pub fn await_head(&self, limit: Duration) {
        self.head_ticks.set(whole_seconds(limit));
    }

    /// Marks the wait for a head as over.
    pub fn head_arrived(&self) {
        self.head_ticks.set(0);
    }

    /// Whether the connection waits for a request head now.
    pub fn awaits_head(&self) -> bool {
        self.head_ticks.get() > 0
    }

    /// Whether the connection should finish what it is doing and close: an HTTP/1 answer says
    /// `Connection: close` and the connection closes after it.
    pub fn should_drain(&self) -> bool {
        self.draining_since.get().is_some()
    }

    /// Whether the connection has drained for longer than [`DRAIN_IDLE_GRACE`]: if it is
    /// between requests now, it closes.
    pub fn should_close_when_idle(&self) -> bool {
        self.drain_idle.get()
    }

    /// Whether the last bytes that moved were written to the client: no request has started
    /// to arrive since the last answer (or since the connection opened).
    pub fn between_requests(&self) -> bool {
        !self.heard.load(Ordering::Relaxed)
    }

    /// The waker to call when the sweeper changes the flags.
    pub fn remember(&self, waker: &Waker) {
        let mut stored = self.waker.borrow_mut();
        if !stored.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *stored = Some(waker.clone());
        }
    }

    fn wake(&self) {
        if let Some(waker) = self.waker.borrow().as_ref() {
            waker.wake_by_ref();
        }
    }
}

impl Connections {
    pub fn new(idle_timeout: Duration) -> Rc<Self> {
        Rc::new(Connections {
            tick: Arc::default(),
            idle_ticks: Cell::new(whole_seconds(idle_timeout)),
            list: RefCell::new(Vec::new()),
            draining_since: Cell::new(None),
        })
    }

    pub fn register(&self, listener: ListenerId) -> Rc<Control> {
        let control = Rc::new(Control {
            listener,
            active_at: Arc::new(AtomicU64::new(self.tick.load(Ordering::Relaxed))),
            idle: Cell::new(false),
            // A connection that hyper takes over during a drain keeps the drain's start.
            draining_since: Cell::new(self.draining_since.get()),
            drain_idle: Cell::new(false),
            heard: Arc::default(),
            waker: RefCell::new(None),
            head_ticks: Cell::new(0),
        });
        self.list.borrow_mut().push(Rc::downgrade(&control));
        control
    }

    /// Applies the idle limit of a new configuration.
    pub fn set_idle_timeout(&self, idle_timeout: Duration) {
        self.idle_ticks.set(whole_seconds(idle_timeout));
    }

    /// Asks the connections of a removed listener to finish their request and close.
    pub fn drain_listener(&self, listener: ListenerId) {
        let tick = self.tick.load(Ordering::Relaxed);
        for control in self.list.borrow().iter().filter_map(Weak::upgrade) {
            if control.listener == listener && control.draining_since.get().is_none() {
                control.draining_since.set(Some(tick));
                control.wake();
            }
        }
    }

    /// Once a second: closes connections idle past the limit, forgets finished ones and, after
    /// `shutdown`, asks every connection to drain (and those still between requests after the
    /// grace to close).
    pub async fn sweep(self: Rc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let grace_ticks = whole_seconds(DRAIN_IDLE_GRACE);
        loop {
            let draining = self.draining_since.get().is_some();
            tokio::select! {
                _ = ticker.tick() => {
                    self.tick.fetch_add(1, Ordering::Relaxed);
                }
                _ = shutdown.wait_for(|stopping| *stopping), if !draining => {
                    self.draining_since.set(Some(self.tick.load(Ordering::Relaxed)));
                }
            }
            let (tick, draining_since) =
                (self.tick.load(Ordering::Relaxed), self.draining_since.get());
            self.list.borrow_mut().retain(|weak| {
                let Some(control) = weak.upgrade() else {
                    return false;
                };
                // The stamps say only in which second the last byte moved (or the drain began):
                // waiting for strictly more ticks than a limit guarantees at least it has passed.
                let active_at = control.active_at.load(Ordering::Relaxed);
                let limit = match control.head_ticks.get() {
                    0 => self.idle_ticks.get(),
                    head => head.min(self.idle_ticks.get()),
                };
                let mut changed = false;
                if tick.saturating_sub(active_at) > limit && !control.idle.get() {
                    control.idle.set(true);
                    changed = true;
                }
                if control.draining_since.get().is_none() && draining_since.is_some() {
                    control.draining_since.set(draining_since);
                    changed = true;
                }
                if let Some(since) = control.draining_since.get()
                    && tick.saturating_sub(since) > grace_ticks
                    && !control.drain_idle.get()
                {
                    control.drain_idle.set(true);
                    changed = true;
                }
                if changed {
                    control.wake();
                }
                true
            });
        }
    }
}

fn whole_seconds(limit: Duration) -> u64 {
    limit.as_secs_f64().ceil().max(1.0) as u64
}

/// A client stream that notes when bytes last moved, for the idle timeout. It is `Send` when
/// the stream is, as hyper requires of a stream it hands over to an upgrade (a WebSocket
/// tunnel), which keeps noting its bytes.
pub type Watched<S> = Observed<S, Activity>;

/// When a connection's bytes last moved, and whether the client sent something not answered yet.
pub struct Activity {
    active_at: Arc<AtomicU64>,
    tick: Arc<AtomicU64>,
    heard: Arc<AtomicBool>,
}

impl<S> Watched<S> {
    pub fn new(stream: S, control: Rc<Control>, clock: Rc<Connections>) -> Self {
        Observed::with(
            stream,
            Activity {
                active_at: control.active_at.clone(),
                tick: clock.tick.clone(),
                heard: control.heard.clone(),
            },
        )
    }
}

impl Activity {
    fn touch<T>(&self, polled: &Poll<io::Result<T>>) {
        if polled.is_ready() {
            self.active_at
                .store(self.tick.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

impl Observer for Activity {
    fn read(&mut self, polled: &Poll<io::Result<()>>, read: usize) {
        self.touch(polled);
        if read > 0 {
            self.heard.store(true, Ordering::Relaxed);
        }
    }

    /// Bytes written to the client: what it sent is being answered.
    fn written(&mut self, polled: &Poll<io::Result<usize>>) {
        self.touch(polled);
        if matches!(polled, Poll::Ready(Ok(written)) if *written > 0) {
            self.heard.store(false, Ordering::Relaxed);
        }
    }
}
