//! Data-plane workers: one thread per core, each with a single-threaded tokio runtime that
//! accepts on its own `SO_REUSEPORT` copy of every listener and keeps its own upstream pools.
//! Nothing on the request path crosses threads except the atomic counters.

use std::cell::{Cell, RefCell};
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::http::service::{ClientConnection, WorkerProxy};

/// Binds `count` sockets to `address` with `SO_REUSEPORT`, so the kernel spreads new
/// connections over the workers. A port of 0 is resolved by the first bind and reused.
pub fn bind_shared(address: SocketAddr, count: usize) -> io::Result<Vec<std::net::TcpListener>> {
    let mut sockets = Vec::with_capacity(count);
    let mut address = address;
    for _ in 0..count.max(1) {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(address),
            socket2::Type::STREAM,
            None,
        )?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&address.into())?;
        socket.listen(4096)?;
        let listener: std::net::TcpListener = socket.into();
        address = listener.local_addr()?;
        sockets.push(listener);
    }
    Ok(sockets)
}

/// Runs one worker until `shutdown` turns true and its connections drain (or `drain_timeout`
/// passes, when the remaining connections are dropped with the runtime).
pub async fn run(
    proxy: Rc<WorkerProxy>,
    listeners: Vec<std::net::TcpListener>,
    shutdown: watch::Receiver<bool>,
    drain_timeout: Duration,
) {
    // Every accept loop and connection holds a clone of `alive`; when all are dropped the
    // receiver sees the channel close, which is how the worker knows it has drained.
    let (alive, mut drained) = mpsc::channel::<()>(1);
    let connections = Connections::new(proxy.shared.client.idle_timeout);
    tokio::task::spawn_local(connections.clone().sweep(shutdown.clone()));
    for (index, listener) in listeners.into_iter().enumerate() {
        let listener = match TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(error) => {
                tracing::error!(%error, "listener could not join the worker's runtime");
                continue;
            }
        };
        tokio::task::spawn_local(accept_loop(
            proxy.clone(),
            index,
            listener,
            connections.clone(),
            shutdown.clone(),
            alive.clone(),
        ));
    }
    drop(alive);
    let mut stop = shutdown.clone();
    let _ = stop.wait_for(|stopping| *stopping).await;
    let _ = tokio::time::timeout(drain_timeout, drained.recv()).await;
}

async fn accept_loop(
    proxy: Rc<WorkerProxy>,
    index: usize,
    listener: TcpListener,
    connections: Rc<Connections>,
    mut shutdown: watch::Receiver<bool>,
    alive: mpsc::Sender<()>,
) {
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stopping| *stopping) => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::task::spawn_local(serve_connection(
                        proxy.clone(), index, stream, peer, connections.clone(), alive.clone(),
                    ));
                }
                Err(error) => {
                    // Out of descriptors or a reset before accept: back off a moment.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
}

async fn serve_connection(
    proxy: Rc<WorkerProxy>,
    listener: usize,
    stream: TcpStream,
    peer: SocketAddr,
    connections: Rc<Connections>,
    _alive: mpsc::Sender<()>,
) {
    let control = connections.register();
    let io = TokioIo::new(Watched {
        stream,
        control: control.clone(),
        clock: connections,
    });
    let handler = proxy.clone();
    let connection = Rc::new(ClientConnection::new(listener, peer));
    let service = service_fn(move |request| {
        let (handler, connection) = (handler.clone(), connection.clone());
        async move { Ok::<_, Infallible>(handler.handle(connection, request).await) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(proxy.shared.client.header_read_timeout)
        .serve_connection(io, service);
    tokio::pin!(connection);
    let mut draining = false;
    std::future::poll_fn(|cx| {
        control.remember(cx.waker());
        if control.idle.get() {
            tracing::debug!(%peer, "closing idle connection");
            return Poll::Ready(());
        }
        if control.drain.get() && !draining {
            draining = true;
            connection.as_mut().graceful_shutdown();
        }
        connection.as_mut().poll(cx).map(|_| ())
    })
    .await;
}

/// A worker's client connections, as its sweeper sees them. Checking each connection's idle
/// time once a second here is cheaper than a timer per connection polled on every wake-up.
pub struct Connections {
    /// Seconds since the worker started: a clock cheap enough to read on every read and write.
    tick: Cell<u64>,
    /// Idle limit in whole seconds (at least 1).
    idle_ticks: u64,
    list: RefCell<Vec<Weak<Control>>>,
    draining: Cell<bool>,
}

/// What the sweeper can ask of one connection.
struct Control {
    /// The tick at which a byte last moved.
    active_at: Cell<u64>,
    idle: Cell<bool>,
    drain: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Control {
    fn remember(&self, waker: &Waker) {
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
            tick: Cell::new(0),
            idle_ticks: idle_timeout.as_secs_f64().ceil().max(1.0) as u64,
            list: RefCell::new(Vec::new()),
            draining: Cell::new(false),
        })
    }

    fn register(&self) -> Rc<Control> {
        let control = Rc::new(Control {
            active_at: Cell::new(self.tick.get()),
            idle: Cell::new(false),
            drain: Cell::new(self.draining.get()),
            waker: RefCell::new(None),
        });
        self.list.borrow_mut().push(Rc::downgrade(&control));
        control
    }

    /// Once a second: closes connections idle past the limit, forgets finished ones and, after
    /// `shutdown`, asks every connection to drain.
    pub async fn sweep(self: Rc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => self.tick.set(self.tick.get() + 1),
                _ = shutdown.wait_for(|stopping| *stopping), if !self.draining.get() => {
                    self.draining.set(true);
                }
            }
            let (tick, draining) = (self.tick.get(), self.draining.get());
            self.list.borrow_mut().retain(|weak| {
                let Some(control) = weak.upgrade() else {
                    return false;
                };
                // The stamp says only in which second the last byte moved: waiting for strictly
                // more ticks than the limit guarantees at least the limit has passed.
                let idle = tick.saturating_sub(control.active_at.get()) > self.idle_ticks;
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

/// A client socket that notes when bytes last moved, for the idle timeout.
struct Watched {
    stream: TcpStream,
    control: Rc<Control>,
    clock: Rc<Connections>,
}

impl Watched {
    fn touch<T>(&self, polled: &Poll<io::Result<T>>) {
        if polled.is_ready() {
            self.control.active_at.set(self.clock.tick.get());
        }
    }
}

impl AsyncRead for Watched {
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

impl AsyncWrite for Watched {
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
