//! Connections to the target: a lean HTTP/1.1 client of our own (the request bytes are written
//! as they are, the response parsed with httparse and its body skipped without being kept), and
//! HTTP/2 through hyper; either over TCP or over TLS (rustls).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::target::Target;

/// Response heads larger than this are refused (a sane server sends far less).
const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 64;
/// Interim 1xx responses read before the final one; a server sending more is broken.
const MAX_INTERIM: usize = 16;

/// A connection to the target, kept alive across requests.
pub enum Connection {
    Http1(Http1),
    Http2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

/// What a request came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// The server asked to close, or the response ran to end of stream: reconnect.
    pub close: bool,
}

/// A connection's bytes: plain TCP, or TLS over it.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
        }
    }
}

impl Connection {
    /// Connects to the target; `tls` is the client configuration for an `https://` target.
    pub async fn open(
        target: &Target,
        http2: bool,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> io::Result<Connection> {
        let tcp = TcpStream::connect(target.address).await?;
        tcp.set_nodelay(true)?;
        let stream = match (target.tls, tls) {
            (false, _) => Stream::Plain(tcp),
            (true, Some(config)) => {
                let name = rustls::pki_types::ServerName::try_from(target.server_name.clone())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                let connector = tokio_rustls::TlsConnector::from(config.clone());
                Stream::Tls(Box::new(
                    connector.connect(name, tcp).await.map_err(tls_error)?,
                ))
            }
            (true, None) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an https target without a TLS configuration",
                ));
            }
        };
        if http2 {
            let (sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                    .await
                    .map_err(io::Error::other)?;
            tokio::spawn(connection);
            Ok(Connection::Http2(sender))
        } else {
            Ok(Connection::Http1(Http1 {
                stream,
                buffer: BytesMut::with_capacity(16 * 1024),
            }))
        }
    }

    /// Sends request `n` and reads its whole response.
    pub async fn send(
        &mut self,
        target: &Target,
        n: u64,
        scratch: &mut Scratch,
    ) -> io::Result<Answer> {
        match self {
            Connection::Http1(connection) => {
                if !target.is_fixed() || scratch.request.is_empty() {
                    target.http1_request(n, &mut scratch.path, &mut scratch.request);
                }
                connection
                    .exchange(&scratch.request, target.method == http::Method::HEAD)
                    .await
            }
            Connection::Http2(sender) => {
                target.path(n, &mut scratch.path);
                let mut request = http::Request::builder()
                    .method(target.method.clone())
                    .uri(format!("http://{}{}", target.authority, scratch.path));
                for (name, value) in &target.headers {
                    request = request.header(name, value);
                }
                let request = request
                    .body(Full::new(target.body.clone()))
                    .map_err(io::Error::other)?;
                sender.ready().await.map_err(http2_error)?;
                let response = sender.send_request(request).await.map_err(http2_error)?;
                let status = response.status().as_u16();
                let mut body = response.into_body();
                while let Some(frame) = body.frame().await {
                    frame.map_err(http2_error)?;
                }
                Ok(Answer {
                    status,
                    close: false,
                })
            }
        }
    }
}

/// Per-worker buffers reused across requests.
#[derive(Default)]
pub struct Scratch {
    path: String,
    request: Vec<u8>,
}

/// One HTTP/1.1 connection.
pub struct Http1 {
    stream: Stream,
    buffer: BytesMut,
}

/// How the body of a response is delimited.
enum Framing {
    Length(u64),
    Chunked,
    UntilClose,
}

impl Http1 {
    async fn exchange(&mut self, request: &[u8], head_only: bool) -> io::Result<Answer> {
        self.stream.write_all(request).await?;
        // TLS may keep the last record until flushed; for TCP this does nothing.
        self.stream.flush().await?;
        self.buffer.clear();
        // 1xx answers other than 101 are interim (RFC 9110 §15.2): the final one follows.
        let mut interim = 0;
        let (status, framing, close) = loop {
            let head = self.head(head_only).await?;
            if !(100..200).contains(&head.0) || head.0 == 101 {
                break head;
            }
            interim += 1;
            if interim > MAX_INTERIM {
                return Err(protocol_error(format!(
                    "more than {MAX_INTERIM} interim 1xx responses"
                )));
            }
        };
        match framing {
            Framing::Length(length) => self.skip(length).await?,
            Framing::Chunked => self.skip_chunked().await?,
            Framing::UntilClose => {
                while self.fill().await.is_ok() {
                    self.buffer.clear();
                }
                return Ok(Answer {
                    status,
                    close: true,
                });
            }
        }
        Ok(Answer { status, close })
    }

    /// Reads and consumes one response head.
    async fn head(&mut self, head_only: bool) -> io::Result<(u16, Framing, bool)> {
        loop {
            if let Some(parsed) = parse_head(&mut self.buffer, head_only)? {
                return Ok(parsed);
            }
            if self.buffer.len() > MAX_HEAD {
                return Err(protocol_error("response head too large".into()));
            }
            self.fill().await?;
        }
    }

    /// Reads more bytes; end of stream is an error mid-response.
    async fn fill(&mut self) -> io::Result<()> {
        self.buffer.reserve(16 * 1024);
        if self.stream.read_buf(&mut self.buffer).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        Ok(())
    }

    async fn skip(&mut self, mut remaining: u64) -> io::Result<()> {
        loop {
            let take = remaining.min(self.buffer.len() as u64) as usize;
            self.buffer.advance(take);
            remaining -= take as u64;
            if remaining == 0 {
                return Ok(());
            }
            self.fill().await?;
        }
    }

    async fn line(&mut self) -> io::Result<BytesMut> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\r\n") {
                let line = self.buffer.split_to(end);
                self.buffer.advance(2);
                return Ok(line);
            }
            if self.buffer.len() > MAX_HEAD {
                return Err(protocol_error("chunk line too long".into()));
            }
            self.fill().await?;
        }
    }

    async fn skip_chunked(&mut self) -> io::Result<()> {
        loop {
            let line = self.line().await?;
            let size = std::str::from_utf8(&line)
                .ok()
                .and_then(|l| u64::from_str_radix(l.split(';').next()?.trim(), 16).ok())
                .ok_or_else(|| protocol_error("bad chunk size".into()))?;
            if size == 0 {
                // Trailers, up to the empty line.
                while !self.line().await?.is_empty() {}
                return Ok(());
            }
            // The size is the server's word: one near u64::MAX must not overflow.
            let with_line_end = size
                .checked_add(2)
                .ok_or_else(|| protocol_error(format!("chunk size {size:#x} is too large")))?;
            self.skip(with_line_end).await?;
        }
    }
}

/// Parses a response head at the start of `buffer`, consuming it. `None`: need more bytes.
fn parse_head(buffer: &mut BytesMut, head_only: bool) -> io::Result<Option<(u16, Framing, bool)>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(buffer) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => return Err(protocol_error(error.to_string())),
    };
    let status = response.code.unwrap_or(0);
    let mut framing = Framing::UntilClose;
    let mut close = response.version == Some(0);
    for header in response.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse().ok());
            framing =
                Framing::Length(value.ok_or_else(|| protocol_error("bad content-length".into()))?);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding")
            && header.value.eq_ignore_ascii_case(b"chunked")
        {
            framing = Framing::Chunked;
        } else if header.name.eq_ignore_ascii_case("connection") {
            close = header.value.eq_ignore_ascii_case(b"close");
        }
    }
    if head_only || status == 204 || status == 304 || (100..200).contains(&status) {
        framing = Framing::Length(0);
    }
    // After 101 Switching Protocols the connection no longer speaks HTTP/1.1.
    close |= status == 101;
    buffer.advance(length);
    Ok(Some((status, framing, close)))
}

/// An HTTP/2 failure with the kind the runner counts it by: bytes hyper cannot parse are a
/// protocol error, a failed read or write keeps its I/O kind, anything else (a stream reset, a
/// GOAWAY) is a reset.
fn http2_error(error: hyper::Error) -> io::Error {
    let mut kind = io::ErrorKind::ConnectionReset;
    if error.is_parse() {
        kind = io::ErrorKind::InvalidData;
    } else {
        let mut cause = std::error::Error::source(&error);
        while let Some(inner) = cause {
            if let Some(io_error) = inner.downcast_ref::<io::Error>() {
                kind = io_error.kind();
                break;
            }
            cause = inner.source();
        }
    }
    io::Error::new(kind, error)
}

/// A failed TLS handshake: a certificate the client does not trust, no common version, … — the
/// server's fault as the runner counts it (a protocol error), with rustls' reason kept.
fn tls_error(error: io::Error) -> io::Error {
    if error
        .get_ref()
        .is_some_and(|inner| inner.is::<rustls::Error>())
    {
        io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {error}"))
    } else {
        error
    }
}

/// The server's bytes are not valid HTTP/1.1: the kind the runner counts as a protocol error.
fn protocol_error(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_parsed_with_their_framing() {
        let mut buffer =
            BytesMut::from(&b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nhello"[..]);
        let (status, framing, close) = parse_head(&mut buffer, false).unwrap().unwrap();
        assert_eq!(status, 201);
        assert!(matches!(framing, Framing::Length(5)));
        assert!(!close);
        assert_eq!(&buffer[..], b"hello");

        let mut buffer = BytesMut::from(
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"[..],
        );
        let (_, framing, close) = parse_head(&mut buffer, false).unwrap().unwrap();
        assert!(matches!(framing, Framing::Chunked));
        assert!(close);

        let mut partial = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-"[..]);
        assert!(parse_head(&mut partial, false).unwrap().is_none());
        let mut garbage = BytesMut::from(&b"NOT HTTP AT ALL\r\n\r\n"[..]);
        assert!(parse_head(&mut garbage, false).is_err());
    }
}
