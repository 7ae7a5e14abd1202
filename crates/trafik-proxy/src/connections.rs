//! A worker's client connections, whatever they speak: one sweeper per worker closes those idle
//! past the limit and asks all of them (or those of one removed listener) to drain. Checking
//! each connection's idle time once a second here is cheaper than a timer per connection polled
//! on every wake-up.

use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

use crate::snapshot::ListenerId;

/// A worker's client connections, as its sweeper sees them.
pub struct Connections {
    /// Seconds since the worker started: a clock cheap enough to read on every read and write.
    /// Atomic (relaxed: a plain load and store) only so that a stream hyper hands over to an
    /// upgrade, which must be `Send`, can carry it.
    tick: Arc<AtomicU64>,
    /// Idle limit in whole seconds (at least 1); a reload may change it.
    idle_ticks: Cell<u64>,
    list: RefCell<Vec<Weak<Control>>>,
    draining: Cell<bool>,
}

/// What the sweeper can ask of one connection.
pub struct Control {
    listener: ListenerId,
    /// The tick at which a byte last moved; shared with the connection's [`Watched`] stream.
    active_at: Arc<AtomicU64>,
    idle: Cell<bool>,
    drain: Cell<bool>,
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

    /// Whether the connection should finish what it is doing and close.
    pub fn should_drain(&self) -> bool {
        self.drain.get()
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
            draining: Cell::new(false),
        })
    }

    pub fn register(&self, listener: ListenerId) -> Rc<Control> {
        let control = Rc::new(Control {
            listener,
            active_at: Arc::new(AtomicU64::new(self.tick.load(Ordering::Relaxed))),
            idle: Cell::new(false),
            drain: Cell::new(self.draining.get()),
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
        for control in self.list.borrow().iter().filter_map(Weak::upgrade) {
            if control.listener == listener {
                control.drain.set(true);
                control.wake();
            }
        }
    }

    /// Once a second: closes connections idle past the limit, forgets finished ones and, after
    /// `shutdown`, asks every connection to drain.
    pub async fn sweep(self: Rc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    self.tick.fetch_add(1, Ordering::Relaxed);
                }
                _ = shutdown.wait_for(|stopping| *stopping), if !self.draining.get() => {
                    self.draining.set(true);
                }
            }
            let (tick, draining) = (self.tick.load(Ordering::Relaxed), self.draining.get());
            self.list.borrow_mut().retain(|weak| {
                let Some(control) = weak.upgrade() else {
                    return false;
                };
                // The stamp says only in which second the last byte moved: waiting for strictly
                // more ticks than the limit guarantees at least the limit has passed.
                let active_at = control.active_at.load(Ordering::Relaxed);
                let limit = match control.head_ticks.get() {
                    0 => self.idle_ticks.get(),
                    head => head.min(self.idle_ticks.get()),
                };
                let idle = tick.saturating_sub(active_at) > limit;
                if idle || (draining && !control.drain.get()) {
                    control.idle.set(control.idle.get() || idle);
                    control.drain.set(draining);
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
pub struct Watched<S> {
    stream: S,
    active_at: Arc<AtomicU64>,
    tick: Arc<AtomicU64>,
}

impl<S> Watched<S> {
    /// The stream, for a serving loop that hands the connection on (the own HTTP/1 engine to
    /// hyper).
    pub fn into_inner(self) -> S {
        self.stream
    }

    pub fn new(stream: S, control: Rc<Control>, clock: Rc<Connections>) -> Self {
        Watched {
            stream,
            active_at: control.active_at.clone(),
            tick: clock.tick.clone(),
        }
    }

    fn touch<T>(&self, polled: &Poll<io::Result<T>>) {
        if polled.is_ready() {
            self.active_at
                .store(self.tick.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        this.touch(&polled);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.touch(&polled);
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.touch(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
