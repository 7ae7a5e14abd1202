//! Runs one client connection as an HTTP server, over any byte stream (plain TCP, or the
//! plaintext side of TLS): HTTP/1.1, HTTP/2, or either, told apart by the HTTP/2 preface; then
//! the tunnel of an upgrade. Whatever the version, every request goes through the same
//! [`WorkerProxy::handle`].

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use http::{HeaderValue, StatusCode, Version, header};
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::service::{ClientConnection, WorkerProxy};
use crate::connections::{Connections, Control, Watched};
use crate::error::ProxyError;
use crate::plan::HeadLimits;
use crate::snapshot::ListenerId;
use crate::tls::ClientIdentity;
pub use crate::tls::server::Protocol;

/// Who is at the other end of a client connection: its address, and on a listener with
/// mutual TLS what its certificate proved.
pub struct Client {
    pub peer: SocketAddr,
    pub identity: Option<Arc<ClientIdentity>>,
}

impl Client {
    pub fn at(peer: SocketAddr) -> Self {
        Client {
            peer,
            identity: None,
        }
    }
}

/// Serves HTTP on `stream` until the client leaves, the connection idles out or drains, or
/// until the tunnel of an upgrade closes. The stream is `Send` because hyper hands an upgraded
/// connection over as a `Send` object; it stays on this worker all the same.
pub async fn serve<S>(
    proxy: Rc<WorkerProxy>,
    listener: ListenerId,
    scheme: &'static str,
    protocol: Protocol,
    stream: S,
    Client { peer, identity }: Client,
    connections: Rc<Connections>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let control = connections.register(listener);
    let header_read_timeout = proxy.snapshot().client.header_read_timeout;
    let limits = proxy.snapshot().client.limits;
    // hyper panics below its minimum; the checker refuses such limits, a plan built in code is
    // raised to it.
    let head_bytes = limits.bytes.max(HeadLimits::MIN_BYTES);
    let served = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(MalformedAnswer {
        stream: Watched::new(stream, control.clone(), connections),
        served: served.clone(),
        replacing: None,
    });
    let handler = proxy.clone();
    let client = Rc::new(ClientConnection::new(listener, peer, scheme, identity));
    let serving = client.clone();
    let draining = control.clone();
    let service = service_fn(move |request| {
        served.store(true, Ordering::Relaxed);
        let (handler, connection, draining) = (handler.clone(), serving.clone(), draining.clone());
        let http1 = request.version() < Version::HTTP_2;
        let request = request.map(super::body::RequestBody::streaming);
        async move {
            // Boxed: an HTTP/2 stream is a task of its own, whose future is moved (copied whole)
            // several times as it is spawned and completes; a box is one pointer of it.
            let mut answer = Box::pin(handler.handle(&connection, request)).await;
            // hyper closes the connection after an answer that says so.
            if http1
                && draining.should_drain()
                && answer.status() != StatusCode::SWITCHING_PROTOCOLS
            {
                answer
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok::<_, Infallible>(answer)
        }
    });
    match protocol {
        Protocol::Http1 => {
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout)
                .max_headers(limits.headers)
                .max_buf_size(head_bytes)
                // A client may close its sending side once its request is out (`nc -N`,
                // HTTP/1.0 tools) and still wait for the answer.
                .half_close(true)
                .serve_connection(io, service)
                .with_upgrades();
            drive(connection, |c| c.graceful_shutdown(), &control, peer, false).await;
        }
        Protocol::Http2 => {
            let connection = http2::Builder::new(LocalExecutor)
                .max_concurrent_streams(limits.streams)
                .serve_connection(io, service);
            drive(connection, |c| c.graceful_shutdown(), &control, peer, true).await;
        }
        Protocol::Detect => {
            let mut builder = auto::Builder::new(LocalExecutor);
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout)
                .max_headers(limits.headers)
                .max_buf_size(head_bytes)
                .half_close(true);
            builder.http2().max_concurrent_streams(limits.streams);
            let connection = builder.serve_connection_with_upgrades(io, service);
            drive(connection, |c| c.graceful_shutdown(), &control, peer, false).await;
        }
    }
    // After a relayed 101 hyper has let go of the socket, and the tunnel runs here: under the
    // idle timeout, and holding the worker's drain until it closes. A drain does not cut it
    // short (a tunnel has no request boundary to stop at); the drain timeout does.
    if let Some(tunnel) = client.handover.take() {
        let splice = tunnel.splice();
        tokio::pin!(splice);
        std::future::poll_fn(|cx| {
            control.remember(cx.waker());
            if control.is_idle() {
                tracing::debug!(%peer, "closing idle tunnel");
                return Poll::Ready(());
            }
            splice.as_mut().poll(cx)
        })
        .await;
    }
}

/// Runs HTTP/2 streams as tasks of the worker's own thread: the proxy's futures hold `Rc`s,
/// which never cross threads.
#[derive(Clone, Copy)]
pub(crate) struct LocalExecutor;

impl<F> hyper::rt::Executor<F> for LocalExecutor
where
    F: Future + 'static,
{
    fn execute(&self, future: F) {
        tokio::task::spawn_local(future);
    }
}

/// Polls a connection to its end, closing it when the sweeper finds it idle and shutting it
/// down gracefully (finish the requests under way, take no new ones) when it must drain:
/// HTTP/2 at once (`goaway_at_once`: its GOAWAY names the last stream served, so a client
/// knows which to send again); HTTP/1 only between requests and after the drain's grace (see
/// `connections`): hyper's graceful shutdown closes an HTTP/1 connection whose next request
/// head is only partly read as if it were idle. Meanwhile the service's answers say
/// `Connection: close`.
async fn drive<C: Future>(
    connection: C,
    graceful_shutdown: impl Fn(Pin<&mut C>),
    control: &Control,
    peer: SocketAddr,
    goaway_at_once: bool,
) {
    tokio::pin!(connection);
    let mut shut_down = false;
    std::future::poll_fn(|cx| {
        control.remember(cx.waker());
        if control.is_idle() {
            tracing::debug!(%peer, "closing idle connection");
            return Poll::Ready(());
        }
        if connection.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        let shut_down_now = match goaway_at_once {
            true => control.should_drain(),
            false => control.should_close_when_idle() && control.between_requests(),
        };
        if shut_down_now && !shut_down {
            shut_down = true;
            graceful_shutdown(connection.as_mut());
            return connection.as_mut().poll(cx).map(|_| ());
        }
        Poll::Pending
    })
    .await;
}

/// hyper answers a request it cannot parse by itself, with an empty 400 (or 414, 431) before
/// trafik sees anything. This stream recognises that answer as it is written and writes
/// trafik's instead: the same status with a one-line body, like every answer trafik makes.
///
/// Only while the connection has served nothing: then every byte written is hyper's own, so a
/// relayed body can never be mistaken for that answer. A malformed request later on a kept-alive
/// connection gets hyper's answer as it is (the right status, without the line).
struct MalformedAnswer<S> {
    stream: S,
    /// Set when the first request reaches the service (atomic only because an upgraded stream
    /// must be `Send`).
    served: Arc<AtomicBool>,
    /// trafik's answer while it is being written, and how much of it is out.
    replacing: Option<(Vec<u8>, usize)>,
}

/// trafik's answer if `head` is hyper's own parse-error answer: a status line of 400, 414 or
/// 431 followed by no header but `connection: close`, `content-length: 0` and `date`, and
/// nothing after the head.
fn replacement_for(head: &[u8]) -> Option<Vec<u8>> {
    if !head.starts_with(b"HTTP/1.1 4") || !head.ends_with(b"\r\n\r\n") || head.len() > 160 {
        return None;
    }
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let status = lines.next()?.get(9..12)?;
    let only_hypers_headers = lines.filter(|line| !line.is_empty()).all(|line| {
        line == "content-length: 0" || line == "connection: close" || line.starts_with("date: ")
    });
    let (error, reason) = match status {
        "400" => (ProxyError::MalformedRequest, "Bad Request"),
        "414" => (ProxyError::UriTooLong, "URI Too Long"),
        "431" => (ProxyError::HeadTooLarge, "Request Header Fields Too Large"),
        _ => return None,
    };
    if !only_hypers_headers {
        return None;
    }
    let body = error.body();
    Some(
        format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<S: AsyncWrite + Unpin> MalformedAnswer<S> {
    /// Writes the rest of trafik's answer; ready once all of it is out.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.replacing {
            if *written == bytes.len() {
                self.replacing = None;
                break;
            }
            match Pin::new(&mut self.stream).poll_write(cx, &bytes[*written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for MalformedAnswer<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for MalformedAnswer<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.replacing.is_none()
            && !this.served.load(Ordering::Relaxed)
            && let Some(answer) = replacement_for(buf)
        {
            this.replacing = Some((answer, 0));
        }
        if this.replacing.is_some() {
            return this.poll_replacement(cx).map_ok(|()| buf.len());
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mut written = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (written.next(), written.next())
            && (this.replacing.is_some()
                || (!this.served.load(Ordering::Relaxed) && replacement_for(only).is_some()))
        {
            return Pin::new(this).poll_write(cx, only);
        }
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_replacement(cx))?;
        Pin::new(&mut this.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::replacement_for;

    #[test]
    fn only_hypers_own_empty_error_answers_are_replaced() {
        let hyper = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Mon, 30 Nov 2026 18:00:00 GMT\r\n\r\n";
        let ours = String::from_utf8(replacement_for(hyper).unwrap()).unwrap();
        assert!(ours.starts_with("HTTP/1.1 400 Bad Request\r\n"));
        assert!(ours.ends_with("\r\n\r\nmalformed request\n"));
        let too_large =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert!(replacement_for(too_large).is_some());
        // A relayed 400 carries the backend's headers and Via; it is never touched.
        let relayed = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nvia: 1.1 trafik\r\n\r\n";
        assert!(replacement_for(relayed).is_none());
        assert!(replacement_for(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_none());
        assert!(replacement_for(b"HTTP/1.1 4").is_none());
    }
}
