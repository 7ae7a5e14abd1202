//! The pipeline's HTTP/1.1 to backends, on the own engine's codec: a request the pipeline
//! built (`http::Request`, a [`RequestBody`]) is written on a raw upstream stream by the
//! request's own task, its answer's head read by [`head::read_response`] (the reader the fast
//! path's rewrite uses) and its body decoded from the same stream as the client takes it. No
//! driver task, no channel: the stream goes back to the worker's idle stack
//! ([`crate::transport::idle::Streams`], the fast path's) when the body has ended cleanly.
//!
//! A body still being uploaded when the answer comes (an early answer) is sent on while the
//! answer's body is read, as hyper's client does; a connection that did not finish both is
//! never reused.

use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::io;
use std::ops::Range;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::chunked::{ANSWER_TRAILER_LINES, Chunked, LAST_CHUNK};
use super::head::{self, Framing, HeadBytes, MAX_HEADERS};
use super::rewind::{Rewind, rewind};
use crate::http::body::{BodyError, BodyFailure, RequestBody, length_is_said};
use crate::http::upstream::{SendError, UpstreamBody};
use crate::plan::AnswerLimits;
use crate::transport::idle::Stream;

/// Where a stream whose answer ended cleanly is left for the lease to return to the idle
/// stack.
pub type Returned = Rc<Cell<Option<Stream>>>;

/// A stream switched to another protocol by a `101`, with what the backend sent after it.
pub type Switched = Rewind<Stream>;

/// Bytes read from a backend at a time, at least.
const READ_BYTES: usize = 8 * 1024;

/// Sends the request (its head lent, its body given) on `stream` and reads its answer's head.
/// A request the stream could not take (the head could not be written), or whose reused
/// stream closed before a byte of answer when it had no body, comes back unsent: it may go
/// on a new connection.
pub async fn send(
    mut stream: Stream,
    reused: bool,
    returned: Returned,
    request: &mut Parts,
    mut body: RequestBody,
    limits: AnswerLimits,
) -> Result<Response<UpstreamBody>, SendError> {
    let bodiless = body.is_end_stream();
    let mut out = Vec::with_capacity(512);
    let coding = write_head(&mut out, request, &body).ok_or_else(SendError::lost)?;
    // A bodiless request whose head promises a body would leave the backend waiting for it.
    if bodiless && matches!(coding, Coding::Length(1..)) {
        return Err(SendError::lost());
    }
    let mut upload = Upload {
        coding,
        pending: Bytes::new(),
        started: false,
        unflushed: false,
        ended: bodiless,
        complete: bodiless,
        broken: false,
    };
    // A body whose first piece is in hand goes out with the head, in one write.
    if !bodiless && let Some(first) = ready_piece(&mut body) {
        let first = first.map_err(|_| SendError::lost())?;
        if !upload.frame(&mut out, first) {
            return Err(SendError::lost());
        }
    }
    if stream.write_all(&out).await.is_err() || stream.flush().await.is_err() {
        return Err(match upload.untouched() {
            true => SendError::unsent(body),
            false => SendError::lost(),
        });
    }
    let head_request = request.method == Method::HEAD;
    let mut buffer = BytesMut::with_capacity(READ_BYTES);
    let mut head_budget = HeadBytes::new(limits.bytes);
    let read = poll_fn(|cx| {
        loop {
            // A body the client broke fails the exchange; a backend that stopped reading it
            // may still answer.
            if let Poll::Ready(Err(Broke::Client)) = upload.poll_send(cx, &mut stream, &mut body) {
                return Poll::Ready(Err(Lost::Lost));
            }
            if !buffer.is_empty() {
                let mut fields = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
                let mut many = Vec::new();
                // Any 101 is read as a switch: whether the request asked for it is the pool
                // target's to judge (a 502 that says so when it did not).
                match head::read_response(
                    &buffer,
                    head_request,
                    true,
                    limits.headers,
                    &mut fields,
                    &mut many,
                ) {
                    Ok(read) if head_budget.fits(read.head.length) => {
                        let places = read
                            .fields
                            .iter()
                            .map(|field| {
                                (
                                    place(&buffer, field.name.as_bytes()),
                                    place(&buffer, field.value),
                                )
                            })
                            .collect::<Vec<_>>();
                        return Poll::Ready(Ok((read.head, places)));
                    }
                    Err(head::Response::Interim(length)) => {
                        head_budget.skip(length);
                        buffer.advance(length);
                        continue;
                    }
                    Err(head::Response::Partial) if head_budget.may_grow(buffer.len()) => {}
                    _ => return Poll::Ready(Err(Lost::Lost)),
                }
            }
            match ready!(poll_read_into(&mut stream, &mut buffer, cx)) {
                Ok(0) | Err(_) if buffer.is_empty() && !head_budget.skipped_any() => {
                    return Poll::Ready(Err(Lost::Closed));
                }
                Ok(0) | Err(_) => return Poll::Ready(Err(Lost::Lost)),
                Ok(_) => {}
            }
        }
    })
    .await;
    let (head, places) = match read {
        Ok(read) => read,
        // A backend may have acted on a request it closed on without answering: only one that
        // may be repeated goes again, on a new connection (as on the fast path).
        Err(Lost::Closed) if reused && bodiless && request.method.is_idempotent() => {
            return Err(SendError::unsent(body));
        }
        Err(_) => return Err(SendError::lost()),
    };
    let head_bytes = buffer.split_to(head.length).freeze();
    let answer = answer_of(head.status, &head_bytes, &places).map_err(|_| SendError::lost())?;
    let framing = match head.framing {
        Framing::Empty | Framing::Length(0) => Reading::Done,
        Framing::Length(length) => Reading::Length(length),
        Framing::Chunked => Reading::Chunked(Chunked::new(ANSWER_TRAILER_LINES), Vec::new()),
        Framing::Close => Reading::Close,
        Framing::Switched => Reading::Switched,
    };
    let mut answer_body = Http1Body {
        stream: Some(stream),
        buffer,
        reading: framing,
        upload: (!upload.complete).then_some((upload, body)),
        reusable: head.reusable,
        returned,
        shown: false,
    };
    if matches!(answer_body.reading, Reading::Done) {
        answer_body.finish();
    }
    Ok(answer.map(|()| UpstreamBody::Http1(Box::new(answer_body))))
}

/// Why no answer head came.
enum Lost {
    /// The backend closed before sending a byte.
    Closed,
    /// Anything else: a broken or oversized head, a close mid-head, the client's body broke.
    Lost,
}

/// Reads what the backend sent next into `buffer`, with room made for a read of [`READ_BYTES`]:
/// the bytes read, 0 at its close.
fn poll_read_into(
    stream: &mut Stream,
    buffer: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    if buffer.capacity() - buffer.len() < READ_BYTES / 2 {
        buffer.reserve(READ_BYTES);
    }
    pin!(stream.read_buf(buffer)).poll(cx)
}

/// Where `part` (a slice of `buffer`) lies in it.
fn place(buffer: &[u8], part: &[u8]) -> Range<usize> {
    let start = (part.as_ptr() as usize).wrapping_sub(buffer.as_ptr() as usize);
    start..start + part.len()
}

/// The client's version of a head [`head::read_response`] read: every field as the backend
/// sent it (the pipeline's response steps take off what is not the client's), its values
/// sharing the head's bytes rather than copied; `Lost` for a field http's types refuse.
fn answer_of(
    status: u16,
    head: &Bytes,
    places: &[(Range<usize>, Range<usize>)],
) -> Result<Response<()>, Lost> {
    let mut answer = Response::new(());
    *answer.status_mut() = StatusCode::from_u16(status).map_err(|_| Lost::Lost)?;
    *answer.version_mut() = Version::HTTP_11;
    let headers = answer.headers_mut();
    headers.reserve(places.len());
    for (name, value) in places {
        let (Some(name), Some(_)) = (head.get(name.clone()), head.get(value.clone())) else {
            return Err(Lost::Lost);
        };
        let name = HeaderName::from_bytes(name).map_err(|_| Lost::Lost)?;
        let value =
            HeaderValue::from_maybe_shared(head.slice(value.clone())).map_err(|_| Lost::Lost)?;
        headers.append(name, value);
    }
    Ok(answer)
}

/// How a request's body is framed on the wire.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Coding {
    /// By its length: the bytes still to send.
    Length(u64),
    Chunked,
}

/// Writes the request's head, in origin form, and says how its body goes: as hyper's client
/// does, the fields the request has are written as they are; a body of known length says so
/// (an empty one only for a method whose body means something), one of unknown length goes
/// chunked. `None` for a `Content-Length` that is no length.
fn write_head(out: &mut Vec<u8>, request: &mut Parts, body: &RequestBody) -> Option<Coding> {
    let end = body.is_end_stream();
    let exact = body.size_hint().exact();
    let headers = &mut request.headers;
    let coding = if headers.contains_key(header::TRANSFER_ENCODING) {
        Coding::Chunked
    } else if let Some(declared) = headers.get(header::CONTENT_LENGTH) {
        Coding::Length(declared.to_str().ok()?.trim().parse().ok()?)
    } else if end {
        Coding::Length(0)
    } else if let Some(length) = exact {
        if length_is_said(&request.method, length) {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        }
        Coding::Length(length)
    } else {
        headers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        Coding::Chunked
    };
    let uri = &request.uri;
    let target = match (uri.path_and_query(), uri.authority()) {
        (Some(path), _) => path.as_str(),
        (None, Some(authority)) if request.method == Method::CONNECT => authority.as_str(),
        (None, _) => "/",
    };
    for part in [
        request.method.as_str().as_bytes(),
        b" ",
        target.as_bytes(),
        b" HTTP/1.1\r\n",
    ] {
        out.extend_from_slice(part);
    }
    for (name, value) in &request.headers {
        head::write_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    Some(coding)
}

/// The body's next piece when it is in hand already.
fn ready_piece(body: &mut RequestBody) -> Option<Result<Option<Bytes>, BodyError>> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match Pin::new(body).poll_frame(&mut cx) {
        Poll::Pending => None,
        Poll::Ready(None) => Some(Ok(None)),
        Poll::Ready(Some(Err(error))) => Some(Err(error)),
        // Trailer fields do not go on (as on the fast path); the end comes next.
        Poll::Ready(Some(Ok(frame))) => frame.into_data().ok().map(|data| Ok(Some(data))),
    }
}

/// A request body on its way up while the answer is awaited or read.
struct Upload {
    coding: Coding,
    /// Framed bytes of the last piece not yet written.
    pending: Bytes,
    /// A piece of the body was taken from the client's.
    started: bool,
    /// A piece was written since the last flush (behind TLS it may sit in the session).
    unflushed: bool,
    /// The body's end is framed (perhaps not yet written).
    ended: bool,
    /// All of the body is written and flushed.
    complete: bool,
    /// The backend stopped taking the body: what is left of it is not sent.
    broken: bool,
}

/// Why an upload stopped.
enum Broke {
    /// The client's body failed (it went away, or a limit stopped it).
    Client,
    /// The backend's stream would take no more.
    Backend,
}

impl Upload {
    /// Nothing of the body was read yet: the request is whole.
    fn untouched(&self) -> bool {
        !self.started
    }

    /// Frames `piece` (`None`: the body's end) onto `out`; false when the body breaks the
    /// length its head declared (more bytes, or fewer by its end): nothing of it may go then,
    /// or the backend would read the rest as another request, or the next one as this body.
    fn frame(&mut self, out: &mut Vec<u8>, piece: Option<Bytes>) -> bool {
        self.started = true;
        match (piece, &mut self.coding) {
            (Some(data), _) if data.is_empty() => {}
            (Some(data), Coding::Length(left)) => {
                let Some(rest) = left.checked_sub(data.len() as u64) else {
                    return false;
                };
                *left = rest;
                out.extend_from_slice(&data);
            }
            (Some(data), Coding::Chunked) => {
                out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                out.extend_from_slice(&data);
                out.extend_from_slice(b"\r\n");
            }
            (None, Coding::Length(left)) => {
                if *left > 0 {
                    return false;
                }
                self.ended = true;
            }
            (None, Coding::Chunked) => {
                out.extend_from_slice(LAST_CHUNK);
                self.ended = true;
            }
        }
        true
    }

    /// Sends what it can of the body: `Ready(Ok)` once all of it is written, `Ready(Err)` once
    /// it broke (at once on every later call).
    fn poll_send(
        &mut self,
        cx: &mut Context<'_>,
        stream: &mut Stream,
        body: &mut RequestBody,
    ) -> Poll<Result<(), Broke>> {
        if self.broken {
            return Poll::Ready(Err(Broke::Backend));
        }
        if self.complete {
            return Poll::Ready(Ok(()));
        }
        loop {
            while !self.pending.is_empty() {
                match ready!(Pin::new(&mut *stream).poll_write(cx, &self.pending)) {
                    Ok(0) | Err(_) => {
                        self.broken = true;
                        return Poll::Ready(Err(Broke::Backend));
                    }
                    Ok(written) => self.pending.advance(written),
                }
            }
            // Behind TLS, what was written may still sit in the session's buffer: it goes out
            // before the next piece is waited for.
            if std::mem::take(&mut self.unflushed)
                && ready!(Pin::new(&mut *stream).poll_flush(cx)).is_err()
            {
                self.broken = true;
                return Poll::Ready(Err(Broke::Backend));
            }
            if self.ended {
                self.complete = true;
                return Poll::Ready(Ok(()));
            }
            let piece = match ready!(Pin::new(&mut *body).poll_frame(cx)) {
                None => None,
                Some(Err(_)) => {
                    self.broken = true;
                    return Poll::Ready(Err(Broke::Client));
                }
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => Some(data),
                    // Trailer fields do not go on (as on the fast path); the end comes next.
                    Err(_) => continue,
                },
            };
            let mut framed = Vec::new();
            if !self.frame(&mut framed, piece) {
                self.broken = true;
                return Poll::Ready(Err(Broke::Client));
            }
            self.pending = Bytes::from(framed);
            self.unflushed = true;
        }
    }
}

/// Where an answer's body stands.
enum Reading {
    /// Bytes of the body still to come.
    Length(u64),
    /// The decoder, and the data it decoded that is not handed out yet.
    Chunked(Chunked, Vec<u8>),
    /// To the backend's close.
    Close,
    /// A `101`: the stream is the new protocol's, for the tunnel to take.
    Switched,
    /// The framing broke after the data handed out: the cut is told next.
    Broken {
        waited: bool,
    },
    Done,
}

/// An answer's body, read from the backend's stream as it is polled; the stream goes back for
/// reuse at its clean end.
pub struct Http1Body {
    stream: Option<Stream>,
    /// Bytes read past what was handed out.
    buffer: BytesMut,
    reading: Reading,
    /// A body still to send (an early answer).
    upload: Option<(Upload, RequestBody)>,
    /// The backend lets the connection carry another request.
    reusable: bool,
    returned: Returned,
    /// The body gave data, or waited: its writer may have sent the head.
    shown: bool,
}

impl Http1Body {
    /// The stream of a `101`'s new protocol, with what the backend sent after the head.
    pub fn switched(&mut self) -> Option<Switched> {
        if !matches!(self.reading, Reading::Switched) {
            return None;
        }
        self.reading = Reading::Done;
        let stream = self.stream.take()?;
        Some(rewind(self.buffer.split().to_vec(), stream))
    }

    /// The body has ended: the stream goes back when nothing else is owed on it.
    fn finish(&mut self) {
        self.reading = Reading::Done;
        let uploaded = self
            .upload
            .as_ref()
            .is_none_or(|(upload, _)| upload.complete);
        if self.reusable
            && uploaded
            && self.buffer.is_empty()
            && let Some(stream) = self.stream.take()
        {
            self.returned.set(Some(stream));
        }
    }

    /// Reads more of the body into the buffer: the bytes read, 0 at the backend's close.
    fn poll_read_more(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some(stream) = self.stream.as_mut() else {
            return Poll::Ready(Ok(0));
        };
        if let Some((upload, body)) = &mut self.upload {
            let _ = upload.poll_send(cx, stream, body);
        }
        poll_read_into(stream, &mut self.buffer, cx)
    }
}

impl Drop for Http1Body {
    /// A body the backend answered before reading all of it is sent on, or read and dropped
    /// once the backend takes no more, so the client's connection can carry its next request
    /// (as hyper's client and server do between them).
    fn drop(&mut self) {
        if let Some((upload, body)) = self.upload.take()
            && !upload.complete
        {
            tokio::task::spawn_local(send_rest(upload, body, self.stream.take()));
        }
    }
}

async fn send_rest(mut upload: Upload, mut body: RequestBody, stream: Option<Stream>) {
    if let Some(mut stream) = stream
        && poll_fn(|cx| upload.poll_send(cx, &mut stream, &mut body))
            .await
            .is_ok()
    {
        return;
    }
    while let Some(Ok(_)) = http_body_util::BodyExt::frame(&mut body).await {}
}

fn cut() -> BodyFailure {
    Box::new(io::Error::from(io::ErrorKind::UnexpectedEof))
}

impl Body for Http1Body {
    type Data = Bytes;
    type Error = BodyFailure;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFailure>>> {
        let this = self.get_mut();
        let polled = this.poll_body(cx);
        if matches!(polled, Poll::Pending | Poll::Ready(Some(Ok(_)))) {
            this.shown = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.reading, Reading::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.reading {
            Reading::Length(left) => SizeHint::with_exact(left),
            Reading::Done | Reading::Switched => SizeHint::with_exact(0),
            Reading::Chunked(..) | Reading::Close | Reading::Broken { .. } => SizeHint::default(),
        }
    }
}

impl Http1Body {
    fn poll_body(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFailure>>> {
        let this = self;
        loop {
            match &mut this.reading {
                Reading::Done | Reading::Switched => return Poll::Ready(None),
                Reading::Length(left) => {
                    if !this.buffer.is_empty() {
                        let take = (this.buffer.len() as u64).min(*left) as usize;
                        *left -= take as u64;
                        let data = this.buffer.split_to(take).freeze();
                        if *left == 0 {
                            this.finish();
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
                // The body waits once before its cut: a writer that gathers frames (hyper's
                // server) sends what it has when the body waits, so the data before the break
                // reaches the client before the connection closes, as on the own engine.
                Reading::Broken { waited: false } => {
                    this.reading = Reading::Broken { waited: true };
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Reading::Broken { waited: true } => {
                    this.reading = Reading::Done;
                    return Poll::Ready(Some(Err(cut())));
                }
                Reading::Chunked(chunked, decoded) => {
                    if !this.buffer.is_empty() {
                        let Ok(end) = chunked.data(&this.buffer, decoded) else {
                            // What came before the break is the client's, then the cut; a
                            // break before the body gave anything or waited is cut at once
                            // (hyper's server then has not sent the head either).
                            let data = Bytes::from(std::mem::take(decoded));
                            this.reading = Reading::Broken {
                                waited: data.is_empty() && !this.shown,
                            };
                            this.stream = None;
                            if data.is_empty() {
                                continue;
                            }
                            return Poll::Ready(Some(Ok(Frame::data(data))));
                        };
                        this.buffer.advance(end.unwrap_or(this.buffer.len()));
                        let data = Bytes::from(std::mem::take(decoded));
                        if end.is_some() {
                            this.finish();
                        }
                        if !data.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(data))));
                        }
                        continue;
                    }
                }
                Reading::Close => {
                    if !this.buffer.is_empty() {
                        let data = this.buffer.split().freeze();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
            }
            match ready!(this.poll_read_more(cx)) {
                // Only a close ends such a body: a reset (or a TLS backend closing without
                // close_notify) cuts it.
                Ok(0) if matches!(this.reading, Reading::Close) => {
                    this.reading = Reading::Done;
                    this.stream = None;
                    return Poll::Ready(None);
                }
                Ok(0) | Err(_) => {
                    this.reading = Reading::Done;
                    this.stream = None;
                    return Poll::Ready(Some(Err(cut())));
                }
                Ok(_) => {}
            }
        }
    }
}
