//! Sockets, below any protocol: listening sockets shared by the workers, and the upstream
//! connect that HTTP and layer-4 targets share. (The accept loop, which hands connections to
//! their listener's kind, is the proxy's.)

pub mod idle;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::counters::{BackendCounters, PerWorker};
use crate::meter::{Meter, Metered, OpenConnection};
use crate::pool::Endpoint;
use crate::tls;

/// Binds `count` sockets to `address` with `SO_REUSEPORT`, so the kernel spreads new
/// connections over the workers. A port of 0 is resolved by the first bind and reused.
///
/// `SO_REUSEPORT` lets any socket of the same user join the group, so a second trafik could
/// silently take a share of the first one's clients; an exclusive bind first makes an address
/// in use an error.
pub fn bind_shared(address: SocketAddr, count: usize) -> io::Result<Vec<std::net::TcpListener>> {
    // A predecessor's sockets: the same backlog, so no waiting connection is refused.
    if let Some(mut inherited) = crate::handover::take(address) {
        // Of a predecessor with more workers, those no worker takes are closed here, not
        // kept in the port's group (by the copies kept for the next successor) with nobody
        // accepting the connections the kernel gives them.
        inherited.truncate(count.max(1));
        while inherited.len() < count {
            let socket = socket(address)?;
            socket.set_reuse_port(true)?;
            socket.bind(&address.into())?;
            socket.listen(4096)?;
            inherited.push(socket.into());
        }
        for listener in &inherited {
            socket2::SockRef::from(listener).set_tcp_nodelay(true)?;
        }
        return Ok(inherited);
    }
    let address = {
        let probe = socket(address)?;
        probe.bind(&address.into())?;
        probe
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("a TCP socket without an IP address"))?
    };
    let mut sockets = Vec::with_capacity(count);
    for _ in 0..count.max(1) {
        let socket = socket(address)?;
        socket.set_reuse_port(true)?;
        socket.bind(&address.into())?;
        socket.listen(4096)?;
        sockets.push(socket.into());
    }
    Ok(sockets)
}

/// Binds `count` UDP sockets to `address` with `SO_REUSEPORT`, one per worker, for QUIC: the
/// kernel hashes each datagram's source address and port to one socket, so a client's
/// connection stays with one worker's endpoint (as long as the client keeps its address: see
/// `tls::server::quic` on migration). Exclusive first, as [`bind_shared`]; a predecessor's
/// sockets are taken as they are (see [`crate::handover`] on why not bound anew).
pub fn bind_shared_udp(address: SocketAddr, count: usize) -> io::Result<Vec<std::net::UdpSocket>> {
    let udp = || {
        socket2::Socket::new(
            socket2::Domain::for_address(address),
            socket2::Type::DGRAM,
            None,
        )
    };
    if let Some(mut inherited) = crate::handover::take_udp(address) {
        // As in [`bind_shared`]: a socket no endpoint reads would swallow its clients.
        inherited.truncate(count.max(1));
        while inherited.len() < count {
            let socket = udp()?;
            socket.set_reuse_port(true)?;
            socket.set_nonblocking(true)?;
            socket.bind(&address.into())?;
            inherited.push(socket.into());
        }
        return Ok(inherited);
    }
    let address = {
        let probe = udp()?;
        probe.bind(&address.into())?;
        probe
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("a UDP socket without an IP address"))?
    };
    let mut sockets = Vec::with_capacity(count);
    for _ in 0..count.max(1) {
        let socket = udp()?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&address.into())?;
        sockets.push(socket.into());
    }
    Ok(sockets)
}

fn socket(address: SocketAddr) -> io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(address),
        socket2::Type::STREAM,
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    // Accepted connections inherit it (on Linux): a system call per connection saved.
    socket.set_tcp_nodelay(true)?;
    Ok(socket)
}

/// Connects worker `worker` to an upstream within `timeout`, with Nagle's algorithm off. The
/// stream counts in the endpoint's gauge of open connections for as long as it lives, whichever
/// protocol then runs over it (in the pool, a tunnel or a layer-4 relay); it is counted as
/// opened, and its bytes are counted, in the backend counters `meter` charges.
pub async fn connect(
    endpoint: &Arc<Endpoint>,
    meter: Meter,
    timeout: Duration,
    worker: usize,
) -> io::Result<Metered<TcpStream>> {
    let started = std::time::Instant::now();
    let stream = tokio::time::timeout(timeout, TcpStream::connect(endpoint.address))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    meter.connected(started.elapsed());
    stream.set_nodelay(true)?;
    meter.opened();
    let open = OpenConnection::new(endpoint, worker);
    Ok(Metered::new(stream, meter, open))
}

/// A connection to a backend as an HTTP pool speaks to it: plain TCP, or TLS over it for a
/// pool with `tls` (the handshake within the same connect timeout). Either way metered below
/// the TLS, as the socket's bytes.
pub enum Upstream {
    Plain(Metered<TcpStream>),
    Tls(Box<tokio_rustls::client::TlsStream<Metered<TcpStream>>>),
}

/// Connects to `endpoint` as [`connect`] does, then speaks `tls` over it when the pool asks.
pub async fn connect_upstream(
    endpoint: &Arc<Endpoint>,
    tls: Option<&tls::backend::BackendTls>,
    meter: Meter,
    timeout: Duration,
    worker: usize,
) -> io::Result<Upstream> {
    let started = tokio::time::Instant::now();
    let stream = connect(endpoint, meter, timeout, worker).await?;
    let Some(tls) = tls else {
        return Ok(Upstream::Plain(stream));
    };
    let handshake = tls.connect(endpoint.address, stream);
    let stream = tokio::time::timeout_at(started + timeout, handshake)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    Ok(Upstream::Tls(Box::new(stream)))
}

impl Upstream {
    /// Whether TLS agreed on HTTP/2 by ALPN (an `h2` or `auto` pool's backend).
    pub fn agreed_http2(&self) -> bool {
        match self {
            Upstream::Plain(_) => false,
            Upstream::Tls(stream) => stream.get_ref().1.alpn_protocol() == Some(b"h2"),
        }
    }

    fn metered(&self) -> &Metered<TcpStream> {
        match self {
            Upstream::Plain(stream) => stream,
            Upstream::Tls(stream) => stream.get_ref().0,
        }
    }

    /// The socket below, to look for a close while the connection is idle.
    pub fn socket(&self) -> &TcpStream {
        self.metered().get_ref()
    }

    /// Whether nothing the backend sent is waiting unread above the socket: behind TLS, the
    /// session may hold records already received (bytes past an answer's end, or the
    /// backend's close) that no look at the socket can see. Such a stream must not carry
    /// another request.
    pub fn holds_nothing_unread(&mut self) -> bool {
        match self {
            Upstream::Plain(_) => true,
            Upstream::Tls(stream) => match stream.get_mut().1.process_new_packets() {
                Ok(state) => state.plaintext_bytes_to_read() == 0 && !state.peer_has_closed(),
                Err(_) => false,
            },
        }
    }

    pub fn meter(&self) -> &Meter {
        self.metered().meter()
    }

    /// See [`Metered::charge`].
    pub fn charge(&mut self, counters: &Arc<PerWorker<BackendCounters>>) {
        match self {
            Upstream::Plain(stream) => stream.charge(counters),
            Upstream::Tls(stream) => stream.get_mut().0.charge(counters),
        }
    }
}

impl tokio::io::AsyncRead for Upstream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Plain(stream) => std::pin::Pin::new(stream).poll_read(cx, buf),
            Upstream::Tls(stream) => std::pin::Pin::new(&mut **stream).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Upstream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        match self.get_mut() {
            Upstream::Plain(stream) => std::pin::Pin::new(stream).poll_write(cx, buf),
            Upstream::Tls(stream) => std::pin::Pin::new(&mut **stream).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        match self.get_mut() {
            Upstream::Plain(stream) => std::pin::Pin::new(stream).poll_write_vectored(cx, bufs),
            Upstream::Tls(stream) => {
                std::pin::Pin::new(&mut **stream).poll_write_vectored(cx, bufs)
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Upstream::Plain(stream) => stream.is_write_vectored(),
            Upstream::Tls(stream) => stream.is_write_vectored(),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Plain(stream) => std::pin::Pin::new(stream).poll_flush(cx),
            Upstream::Tls(stream) => std::pin::Pin::new(&mut **stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Plain(stream) => std::pin::Pin::new(stream).poll_shutdown(cx),
            Upstream::Tls(stream) => std::pin::Pin::new(&mut **stream).poll_shutdown(cx),
        }
    }
}
