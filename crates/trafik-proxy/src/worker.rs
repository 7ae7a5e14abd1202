//! Data-plane workers: one thread per core, each with a single-threaded tokio runtime that
//! accepts on its own `SO_REUSEPORT` copy of every listener and keeps its own upstream pools.
//! Nothing on the request path crosses threads except the atomic counters.

use std::cell::Cell;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

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
    mut shutdown: watch::Receiver<bool>,
    alive: mpsc::Sender<()>,
) {
    let for_connections = shutdown.clone();
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stopping| *stopping) => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::task::spawn_local(serve_connection(
                        proxy.clone(), index, stream, peer, for_connections.clone(), alive.clone(),
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
    mut shutdown: watch::Receiver<bool>,
    _alive: mpsc::Sender<()>,
) {
    let client = &proxy.shared.client;
    let idle = client.idle_timeout;
    let activity = Rc::new(Cell::new(Instant::now()));
    let io = TokioIo::new(Watched {
        stream,
        activity: activity.clone(),
    });
    let handler = proxy.clone();
    let connection = Rc::new(ClientConnection::new(listener, peer));
    let service = service_fn(move |request| {
        let (handler, connection) = (handler.clone(), connection.clone());
        async move { Ok::<_, Infallible>(handler.handle(connection, request).await) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(client.header_read_timeout)
        .serve_connection(io, service);
    tokio::pin!(connection);
    let mut draining = false;
    loop {
        let idle_deadline = activity.get() + idle;
        tokio::select! {
            _ = connection.as_mut() => return,
            _ = shutdown.wait_for(|stopping| *stopping), if !draining => {
                draining = true;
                connection.as_mut().graceful_shutdown();
            }
            _ = tokio::time::sleep_until(idle_deadline) => {
                if activity.get() + idle <= Instant::now() {
                    tracing::debug!(%peer, "closing idle connection");
                    return;
                }
            }
        }
    }
}

/// A client socket that notes when bytes last moved, for the idle timeout.
struct Watched {
    stream: TcpStream,
    activity: Rc<Cell<Instant>>,
}

impl Watched {
    fn touch<T>(&self, polled: &Poll<io::Result<T>>) {
        if polled.is_ready() {
            self.activity.set(Instant::now());
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
