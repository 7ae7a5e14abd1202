//! Requests whose route needs the full pipeline (configured filters, caches, static files,
//! gateway targets, the hop trace, no route at all): the own engine reads the request and
//! writes the answer, and the pipeline every engine shares decides ([`WorkerProxy::handle`]).
//! A request body is read here too, while the pipeline runs ([`Pump`]), and handed to it a
//! piece at a time through a [`Feed`]; after a relayed 101 the connection becomes the tunnel.

use std::cell::RefCell;
use std::future::{Future, poll_fn};
use std::io;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::body::{CONTINUE, Rest};
use super::chunked::{BadChunk, Chunked};
use super::head::{self, MAX_HEADERS, RequestHead};
use super::{Connection, Exchanged, date};
use crate::connections::Control;
use crate::error::ProxyError;
use crate::http::body::ErrorAnswer;
use crate::http::body::{Feed, FileRegion, HeldAnswer, ProxyBody, RequestBody};
use crate::http::service::{ClientConnection, WorkerProxy};
use crate::http::upgrade::OwnEngineConnection;
use crate::observed::SendFile;

/// Serves `request` through the pipeline, its body (if any) read while the pipeline runs; a
/// head `http` cannot hold is `Defer`, with nothing sent. On a draining
/// connection the answer says `Connection: close`.
pub(super) async fn exchange<S: AsyncRead + AsyncWrite + SendFile + Unpin>(
    proxy: &WorkerProxy,
    client: &ClientConnection,
    connection: &mut Connection<S>,
    request: &RequestHead,
    control: &Control,
) -> Exchanged {
    let Some(mut asked) = http_request(&connection.input, request) else {
        return Exchanged::Defer;
    };
    if request.upgrade {
        asked.extensions_mut().insert(OwnEngineConnection);
    }
    let head_request = request.method == Method::HEAD;
    // A client waiting for `100 Continue` with an empty body has nothing to send (an upgrade
    // has no body either).
    if request.body == 0 && !request.chunked {
        let answer = proxy.handle(client, asked).await;
        let switching = answer.status() == StatusCode::SWITCHING_PROTOCOLS;
        let written = write_answer(
            &mut connection.client,
            &mut connection.relay,
            answer,
            head_request,
            request.close || control.should_drain(),
        )
        .await;
        if switching && written.is_ok() {
            tunnel(client, connection, request.length).await;
            return Exchanged::Close;
        }
        if !matches!(written, Ok(true)) {
            return Exchanged::Close;
        }
        connection.input.drain(..request.length);
        return Exchanged::KeepAlive;
    }
    let feed = Rc::new(Feed::new((!request.chunked).then_some(request.body)));
    *asked.body_mut() = RequestBody::fed(feed.clone());
    // The head is in `asked` now: the input holds the body, and what may follow it.
    connection.input.drain(..request.length);
    let rest = match request.chunked {
        true => Rest::Chunked(Chunked::new(proxy.snapshot().client.limits.headers)),
        false => Rest::Length(request.body),
    };
    let mut pump = Pump {
        feed,
        rest,
        continue_left: if request.expect_continue {
            CONTINUE.len()
        } else {
            0
        },
        data: Vec::new(),
        pumped: None,
    };
    let Connection {
        client: stream,
        input,
        relay,
        ..
    } = connection;
    let stream = RefCell::new(stream);
    // The pipeline decides while the pump feeds it the body.
    let answer = {
        let mut handling = pin!(proxy.handle(client, asked));
        poll_fn(|cx| {
            pump.poll(cx, &mut Shared(&stream), input);
            handling.as_mut().poll(cx)
        })
        .await
    };
    // What the client already sent of a body nobody reads any more is read past, so that a
    // small body does not cost the connection.
    if pump.feed.is_gone() {
        pump.read_past(input);
    }
    // A body not read to its end leaves bytes the next request would be read from: the
    // connection closes after the answer.
    let whole = pump.pumped == Some(Pumped::Whole);
    let written = {
        let mut answering = Shared(&stream);
        let mut writing = pin!(write_answer(
            &mut answering,
            relay,
            answer,
            head_request,
            request.close || !whole || control.should_drain(),
        ));
        poll_fn(|cx| {
            pump.poll(cx, &mut Shared(&stream), input);
            writing.as_mut().poll(cx)
        })
        .await
    };
    if matches!(written, Ok(true)) && whole {
        return Exchanged::KeepAlive;
    }
    if written.is_ok() && pump.pumped != Some(Pumped::Whole) {
        linger(stream.into_inner()).await;
    }
    Exchanged::Close
}

/// After a relayed 101: the backend's side of the pipeline's tunnel spliced with this
/// connection, what the client sent after its head going first.
async fn tunnel<S: AsyncRead + AsyncWrite + Unpin>(
    client: &ClientConnection,
    connection: &mut Connection<S>,
    head_length: usize,
) {
    let Some(tunnel) = client.handover.take() else {
        return;
    };
    let Some((mut upstream, _in_flight)) = tunnel.into_upstream() else {
        return;
    };
    let early = &connection.input[head_length..];
    super::tunnel::run(&mut connection.client, &mut upstream, early).await;
}

/// The most of an unread body read (and dropped) after the answer, before the close: a
/// client still sending would otherwise have its answer cut by a reset.
const LINGER_BYTES: usize = 64 * 1024;
const LINGER_TIME: Duration = Duration::from_secs(1);

/// Ends the answer's side of the connection and reads what the client still sends, for a
/// bounded while and a bounded number of bytes, so the answer reaches it before the close.
async fn linger<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) {
    let _ = stream.shutdown().await;
    let mut dropped = [0u8; 4096];
    let mut read = 0;
    let _ = tokio::time::timeout(LINGER_TIME, async {
        while read < LINGER_BYTES {
            match stream.read(&mut dropped).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
        }
    })
    .await;
}

/// How pumping a body ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pumped {
    /// Read to its end: the input holds what followed it.
    Whole,
    /// The body was dropped before its end (the pipeline answered without it).
    Stopped,
    /// The client closed before its end (`UnexpectedEof`), or broke its framing
    /// (`InvalidData`).
    Failed(io::ErrorKind),
}

/// Reads a request body from the client connection into its [`Feed`]: first what came with
/// the head, then, each time the body asks for more, what the client sends (decoded when
/// chunked, by the strict decoder the fast path uses). `100 Continue` goes out before the
/// first read, when the client asked for it.
struct Pump {
    feed: Rc<Feed>,
    rest: Rest,
    /// Bytes of `100 Continue` still to write.
    continue_left: usize,
    /// A chunked piece's data.
    data: Vec<u8>,
    pumped: Option<Pumped>,
}

impl Pump {
    fn whole(&self) -> bool {
        self.rest.ended()
    }

    /// Pumps until the body has ended, or its next read waits: does nothing once it has
    /// ended.
    fn poll<C: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        client: &mut C,
        input: &mut Vec<u8>,
    ) {
        if self.pumped.is_none()
            && let Poll::Ready(pumped) = self.pump(cx, client, input)
        {
            match pumped {
                Pumped::Whole => self.feed.end(),
                Pumped::Failed(kind) => self.feed.fail(kind),
                Pumped::Stopped => {}
            }
            self.pumped = Some(pumped);
        }
    }

    fn pump<C: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        client: &mut C,
        input: &mut Vec<u8>,
    ) -> Poll<Pumped> {
        loop {
            if !input.is_empty() {
                if !ready!(self.feed.poll_free(cx)) {
                    return Poll::Ready(Pumped::Stopped);
                }
                let Ok(piece) = self.take(input) else {
                    return Poll::Ready(Pumped::Failed(io::ErrorKind::InvalidData));
                };
                if !piece.is_empty() {
                    self.feed.give(piece);
                }
                if self.whole() {
                    return Poll::Ready(Pumped::Whole);
                }
                continue;
            }
            if !ready!(self.feed.poll_wanted(cx)) {
                return Poll::Ready(Pumped::Stopped);
            }
            while self.continue_left > 0 {
                let unsent = &CONTINUE[CONTINUE.len() - self.continue_left..];
                match ready!(Pin::new(&mut *client).poll_write(cx, unsent)) {
                    Ok(0) | Err(_) => {
                        return Poll::Ready(Pumped::Failed(io::ErrorKind::UnexpectedEof));
                    }
                    Ok(written) => self.continue_left -= written,
                }
                if self.continue_left == 0 && ready!(Pin::new(&mut *client).poll_flush(cx)).is_err()
                {
                    return Poll::Ready(Pumped::Failed(io::ErrorKind::UnexpectedEof));
                }
            }
            match ready!(pin!(client.read_buf(&mut *input)).poll(cx)) {
                Ok(0) | Err(_) => return Poll::Ready(Pumped::Failed(io::ErrorKind::UnexpectedEof)),
                Ok(_) => {}
            }
        }
    }

    /// The body's next piece from the front of `input`, which keeps what follows the body.
    fn take(&mut self, input: &mut Vec<u8>) -> Result<Bytes, BadChunk> {
        let piece = match &mut self.rest {
            Rest::Length(rest) => {
                let take = (input.len() as u64).min(*rest) as usize;
                *rest -= take as u64;
                let piece = Bytes::copy_from_slice(&input[..take]);
                input.drain(..take);
                piece
            }
            Rest::Chunked(chunked) => {
                self.data.clear();
                let end = chunked.data(input, &mut self.data)?;
                input.drain(..end.unwrap_or(input.len()));
                Bytes::copy_from_slice(&self.data)
            }
        };
        Ok(piece)
    }

    /// Reads past the body bytes already in `input` when nobody reads the body any more: the
    /// body may end there, and the connection go on.
    fn read_past(&mut self, input: &mut Vec<u8>) {
        if self.pumped.is_some_and(|pumped| pumped != Pumped::Stopped) || input.is_empty() {
            return;
        }
        if self.take(input).is_ok() && self.whole() {
            self.pumped = Some(Pumped::Whole);
        }
    }
}

/// A body whose pump goes away before its end (its answer was written, or the connection
/// closed) breaks off, so a backend still sending it does not wait for the rest forever.
impl Drop for Pump {
    fn drop(&mut self) {
        self.feed.fail(io::ErrorKind::ConnectionAborted);
    }
}

/// The client connection, read by the body's pump and written with the answer by the same
/// task: each borrows it only for the length of one poll.
struct Shared<'a, S>(&'a RefCell<S>);

impl<S: AsyncRead + Unpin> AsyncRead for Shared<'_, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_read(cx, buf)
    }
}

impl<S: SendFile + Unpin> SendFile for Shared<'_, S> {
    fn sends_files(&self) -> bool {
        self.0.borrow().sends_files()
    }

    fn poll_send_file(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        file: &std::fs::File,
        offset: u64,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_send_file(cx, file, offset, len)
    }

    fn poll_write_more(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write_more(cx, bytes)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Shared<'_, S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write(cx, bytes)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_shutdown(cx)
    }
}

/// The request as the pipeline reads it: the head at the start of `input` (parsed once
/// already, so `None` only for a field `http` refuses, which hyper then answers).
/// The fields the pipeline's forwarding step adds to a request (`Forwarded`,
/// `X-Forwarded-For/-Proto/-Host`, `Via`).
const FORWARDING_FIELDS: usize = 5;

fn http_request(input: &[u8], request: &RequestHead) -> Option<http::Request<RequestBody>> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut fields);
    let Ok(httparse::Status::Complete(_)) = parsed.parse(&input[..request.length]) else {
        return None;
    };
    let mut asked = http::Request::new(RequestBody::empty());
    *asked.method_mut() = request.method.clone();
    *asked.uri_mut() = http::Uri::try_from(head::ascii(&input[request.target.clone()])).ok()?;
    let headers = asked.headers_mut();
    // Room for the forwarding step's five fields too, so that they do not grow the map.
    headers.reserve(parsed.headers.len() + FORWARDING_FIELDS);
    for field in parsed.headers.iter() {
        headers.append(
            HeaderName::from_bytes(field.name.as_bytes()).ok()?,
            HeaderValue::from_bytes(field.value).ok()?,
        );
    }
    Some(asked)
}

/// Writes `answer` as HTTP/1.1 framed as hyper's server frames it: by its length (its
/// `Content-Length`, else its body's exact size), else in chunks; no body (and no framing
/// field) after 204 or 304, no body after `HEAD`. An interim (1xx) answer cannot be final: it
/// becomes trafik's 502 (hyper's server makes it a 500) and closes the connection, as a 101
/// does. `Ok(true)` when the connection may carry another request. A body that breaks, or
/// that is longer or shorter than its length, leaves the client a cut answer (`Err`: the
/// connection closes).
///
/// The head is written into `out` at the call; the future writes it out with the body. Not an
/// `async fn` itself: each level of them holds its arguments twice, and this future is held
/// in every exchange's.
pub(super) fn write_answer<'a, W: AsyncWrite + SendFile + Unpin>(
    client: &'a mut W,
    out: &'a mut Vec<u8>,
    answer: Response<ProxyBody>,
    head_request: bool,
    close: bool,
) -> impl Future<Output = io::Result<bool>> + use<'a, W> {
    let interim =
        answer.status().is_informational() && answer.status() != StatusCode::SWITCHING_PROTOCOLS;
    let answer = match interim {
        true => ProxyError::UpstreamFailed.response(),
        false => answer,
    };
    let (parts, body) = answer.into_parts();
    let fields = parts
        .headers
        .iter()
        .map(|(name, value)| (name, value.as_bytes()));
    let exact = body.size_hint().exact();
    let framing = write_head(
        out,
        parts.status,
        fields,
        exact,
        head_request,
        close || interim,
    );
    write_body(client, out, framing, body)
}

/// Writes an answer trafik holds (a copy from the cache, a file) from its fields as they are
/// held, as [`write_answer`] would write its `Response`, with the listener's `Alt-Svc`
/// (`alt_svc`) in place of a held one. The head is written into `out` at the call, as there.
pub(super) fn write_held<'a, W: AsyncWrite + SendFile + Unpin, A: HeldAnswer>(
    client: &'a mut W,
    out: &'a mut Vec<u8>,
    held: A,
    alt_svc: Option<&HeaderValue>,
    head_request: bool,
    close: bool,
) -> impl Future<Output = io::Result<bool>> + use<'a, W, A> {
    let body = held.body();
    let fields = held
        .fields()
        .filter(|(name, _)| alt_svc.is_none() || *name != header::ALT_SVC)
        .chain(alt_svc.map(|value| (&ALT_SVC_NAME, value.as_bytes())));
    let exact = body.size_hint().exact();
    let framing = write_head(out, held.status(), fields, exact, head_request, close);
    write_body(client, out, framing, body)
}

/// `Alt-Svc`, for fields lent out by reference.
static ALT_SVC_NAME: HeaderName = header::ALT_SVC;

/// How an answer's body goes out, as its head says.
struct AnswerFraming {
    /// No body follows the head (204, 304, 101, or an answer to `HEAD`).
    bodiless: bool,
    length: Option<u64>,
    chunked: bool,
    close: bool,
}

/// Writes the head of an answer with `status` and `fields` into `out`. The framing fields are
/// read here and written once, as decided from them and from `exact` (the body's size when
/// known); `Date` is added when the fields have none.
fn write_head<'f>(
    out: &mut Vec<u8>,
    status: StatusCode,
    fields: impl Iterator<Item = (&'f HeaderName, &'f [u8])>,
    exact: Option<u64>,
    head_request: bool,
    close: bool,
) -> AnswerFraming {
    // A 101 says `Connection: upgrade` (kept by the pipeline) and the connection goes on as
    // the tunnel.
    let switching = status == StatusCode::SWITCHING_PROTOCOLS;
    let bodiless_status = status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || status == StatusCode::SWITCHING_PROTOCOLS;
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    let (mut declared, mut asks_close, mut dated) = (Declared::default(), false, false);
    for (name, value) in fields {
        if name == header::CONNECTION {
            asks_close |= has_token(value, b"close");
            if !switching {
                continue;
            }
        } else if name == header::CONTENT_LENGTH {
            declared.add(value);
            continue;
        } else if name == header::TRANSFER_ENCODING {
            continue;
        } else if name == header::DATE {
            dated = true;
        }
        head::write_field(out, name.as_str().as_bytes(), value);
    }
    let close = !switching && close || asks_close;
    let length = match bodiless_status {
        true => None,
        false => declared.length().or(exact),
    };
    let chunked = !bodiless_status && !head_request && length.is_none();
    if let Some(length) = length {
        head::write_field(
            out,
            b"content-length",
            itoa::Buffer::new().format(length).as_bytes(),
        );
    }
    if chunked {
        head::write_field(out, b"transfer-encoding", b"chunked");
    }
    if close {
        head::write_field(out, b"connection", b"close");
    }
    if !dated {
        date::field(out);
    }
    out.extend_from_slice(b"\r\n");
    AnswerFraming {
        bodiless: bodiless_status || head_request,
        length,
        chunked,
        close,
    }
}

/// Writes the head in `out` and then `body` as `framing` says; `Ok(true)` when the connection
/// may carry another request.
async fn write_body<W: AsyncWrite + SendFile + Unpin>(
    client: &mut W,
    out: &mut Vec<u8>,
    framing: AnswerFraming,
    mut body: ProxyBody,
) -> io::Result<bool> {
    let AnswerFraming {
        bodiless,
        length,
        chunked,
        close,
    } = framing;
    if bodiless {
        client.write_all(out).await?;
        client.flush().await?;
        return Ok(!close);
    }
    if let ProxyBody::File(region) = &body
        && client.sends_files()
        && !region.written_from_memory()
        && length == Some(region.len())
        && !region.is_empty()
    {
        send_file(client, out, region).await?;
        return Ok(!close);
    }
    let mut sent = 0u64;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(io::Error::other)?.into_data() else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        sent += data.len() as u64;
        if length.is_some_and(|length| sent > length) {
            return Err(io::ErrorKind::InvalidData.into());
        }
        if chunked {
            out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        }
        // The head goes out with the first data in one write: a little data copied behind
        // it, more beside it in a vectored write.
        if out.len() + data.len() <= COPIED_BEHIND_HEAD {
            out.extend_from_slice(&data);
            client.write_all(out).await?;
        } else {
            super::send(client, out, &data).await?;
        }
        out.clear();
        if chunked {
            out.extend_from_slice(b"\r\n");
        }
    }
    if chunked {
        out.extend_from_slice(b"0\r\n\r\n");
    } else if length.is_some_and(|length| sent < length) {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    client.write_all(out).await?;
    // Behind TLS, the answer's end may still sit in the session's buffer (a no-op on TCP).
    client.flush().await?;
    Ok(!close)
}

/// The most bytes written by copying a body's data behind the head: more go beside it.
const COPIED_BEHIND_HEAD: usize = 2 << 10;

/// The most one sendfile(2) call moves on Linux.
const SENDFILE_MOST: u64 = 0x7fff_f000;

/// Writes `head` and then the file's region from the page cache with sendfile(2): the head
/// with `MSG_MORE`, so that it leaves in one segment with the file's first bytes (one call
/// fewer each way than `TCP_CORK` on and off around them). A file cut shorter than the range
/// (sendfile sends nothing before its end) is a cut answer: `Err`, and the connection closes
/// rather than carrying on with a short body.
async fn send_file<W: AsyncWrite + SendFile + Unpin>(
    client: &mut W,
    head: &[u8],
    region: &FileRegion,
) -> io::Result<()> {
    let mut written = 0;
    while written < head.len() {
        let more = poll_fn(|cx| Pin::new(&mut *client).poll_write_more(cx, &head[written..]));
        match more.await? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            more => written += more,
        }
    }
    let (file, mut at, end) = region.file();
    while at < end {
        let most = (end - at).min(SENDFILE_MOST) as usize;
        let sent = poll_fn(|cx| Pin::new(&mut *client).poll_send_file(cx, file, at, most));
        match sent.await? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            sent => at += sent as u64,
        }
    }
    region.sent_by_sendfile();
    Ok(())
}

/// The answer's `Content-Length`, read one field at a time: the length its fields agree on
/// (`5, 5` included); none for no field, or for values that disagree or do not parse, and the
/// body's own size decides.
#[derive(Default)]
struct Declared {
    agreed: Option<u64>,
    broken: bool,
}

impl Declared {
    fn add(&mut self, value: &[u8]) {
        for part in value.split(|&b| b == b',') {
            let text = std::str::from_utf8(part.trim_ascii()).ok();
            match text.and_then(|text| text.parse::<u64>().ok()) {
                Some(length) if self.agreed.is_none_or(|agreed| agreed == length) => {
                    self.agreed = Some(length)
                }
                _ => self.broken = true,
            }
        }
    }

    fn length(&self) -> Option<u64> {
        self.agreed.filter(|_| !self.broken)
    }
}

/// Whether the comma-separated `value` lists `token`, in any case.
fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|part| part.trim_ascii().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the client reads for `answer`, and whether the connection may go on.
    fn written(answer: Response<ProxyBody>, head_request: bool) -> (String, io::Result<bool>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut client = Vec::new();
        let mut out = Vec::new();
        let kept = runtime.block_on(write_answer(
            &mut client,
            &mut out,
            answer,
            head_request,
            false,
        ));
        let text = String::from_utf8(client).unwrap();
        // The date changes; the rest reads as written.
        let text = text
            .lines()
            .filter(|line| !line.starts_with("date: "))
            .collect::<Vec<_>>()
            .join("\n");
        (text, kept)
    }

    fn answer(status: u16, headers: &[(&str, &str)], body: ProxyBody) -> Response<ProxyBody> {
        let mut answer = Response::new(body);
        *answer.status_mut() = StatusCode::from_u16(status).unwrap();
        for (name, value) in headers {
            answer.headers_mut().append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        answer
    }

    fn streamed(pieces: &[&'static str]) -> ProxyBody {
        let (sender, receiver) = tokio::sync::mpsc::channel(pieces.len().max(1));
        for piece in pieces {
            sender
                .try_send(bytes::Bytes::from_static(piece.as_bytes()))
                .unwrap();
        }
        ProxyBody::Chunks(receiver)
    }

    #[test]
    fn a_body_of_known_size_goes_with_its_length() {
        let (text, kept) = written(answer(200, &[], ProxyBody::local("merhaba")), false);
        assert_eq!(text, "HTTP/1.1 200 OK\ncontent-length: 7\n\nmerhaba");
        assert!(kept.unwrap());
    }

    #[test]
    fn a_body_of_unknown_size_goes_in_chunks() {
        let body = streamed(&["mer", "haba"]);
        let (text, kept) = written(answer(200, &[("transfer-encoding", "gzip")], body), false);
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\ntransfer-encoding: chunked\n\n3\nmer\n4\nhaba\n0\n"
        );
        assert!(kept.unwrap());
    }

    #[test]
    fn a_204_and_a_304_carry_no_framing_and_no_body() {
        for status in [204, 304] {
            let named = answer(
                status,
                &[("content-length", "5")],
                ProxyBody::local("12345"),
            );
            let (text, kept) = written(named, false);
            assert!(!text.contains("content-length"), "{text}");
            assert!(!text.contains("12345"), "{text}");
            assert!(kept.unwrap());
        }
    }

    #[test]
    fn an_interim_status_cannot_be_the_final_answer() {
        let (text, kept) = written(answer(103, &[], ProxyBody::local("")), false);
        assert!(text.starts_with("HTTP/1.1 502 Bad Gateway\n"), "{text}");
        assert!(text.contains("connection: close"), "{text}");
        assert!(!kept.unwrap());
    }

    #[test]
    fn lengths_that_agree_are_written_once_and_a_close_is_kept() {
        let doubled = answer(
            200,
            &[("content-length", "5, 5"), ("connection", "close")],
            ProxyBody::local("12345"),
        );
        let (text, kept) = written(doubled, false);
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\ncontent-length: 5\nconnection: close\n\n12345"
        );
        assert!(!kept.unwrap());
    }

    #[test]
    fn a_head_answer_names_the_length_and_sends_no_body() {
        let (text, kept) = written(answer(200, &[], ProxyBody::local("merhaba")), true);
        assert_eq!(text, "HTTP/1.1 200 OK\ncontent-length: 7\n");
        assert!(kept.unwrap());
    }

    #[test]
    fn a_body_shorter_or_longer_than_its_length_cuts_the_connection() {
        for (length, pieces) in [("9", &["mer", "haba"]), ("3", &["mer", "haba"])] {
            let body = streamed(pieces);
            let (_, kept) = written(answer(200, &[("content-length", length)], body), false);
            assert!(kept.is_err(), "{length}");
        }
    }
}
