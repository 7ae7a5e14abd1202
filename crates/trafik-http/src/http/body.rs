//! The bodies that cross the proxy: [`RequestBody`] on its way to a backend (streamed, with an
//! optional limit) and [`ProxyBody`] on its way back to the client.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::io::{self, SeekFrom};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncSeekExt, AsyncWriteExt, ReadBuf};

use super::service::AccessLine;
use super::upstream::{Lease, UpstreamBody};
use crate::error::ProxyError;
use crate::http2::Http2Body;

/// A request body on its way upstream. It reports through [`Upload`] when it has been sent in
/// full (the response timeout starts then, not while a slow client uploads) and why it failed,
/// so a failure the client caused is not charged to the backend.
pub struct RequestBody {
    source: Source,
    /// Bytes passed so far, and the limit a filter set.
    passed: u64,
    limit: Option<u64>,
    /// `None` for a request without a body (most requests): nothing to watch, nothing
    /// allocated.
    upload: Option<Rc<Upload>>,
    /// The slowest upload allowed, once it has run for [`BODY_RATE_GRACE`].
    min_rate: Option<MinRate>,
    /// The bytes as they pass, for a mirror's copy ([`RequestBody::copy_up_to`]). Boxed, as
    /// the spilled source is: the few requests that have one pay for it, while every request
    /// is moved whole several times on its way (a `Request` was 464 bytes with both inline).
    copy: Option<Box<Tee>>,
}

/// A body's bytes collected as they pass, up to a limit; past it the copy is given up.
struct Tee {
    held: BytesMut,
    limit: u64,
    done: tokio::sync::oneshot::Sender<Bytes>,
}

/// A copy of a request body for a mirror: at hand, or coming once the body has passed.
pub enum BodyCopy {
    Ready(Option<Bytes>),
    Coming(tokio::sync::oneshot::Receiver<Bytes>),
}

impl BodyCopy {
    /// The whole body (`Some(None)` for none); `None` when it did not pass whole within the
    /// limit.
    pub async fn whole(self) -> Option<Option<Bytes>> {
        match self {
            BodyCopy::Ready(body) => Some(body),
            BodyCopy::Coming(coming) => coming
                .await
                .ok()
                .map(|body| (!body.is_empty()).then_some(body)),
        }
    }
}

/// How long an upload may go at any pace before its rate counts (a slow start, a pause).
const BODY_RATE_GRACE: Duration = Duration::from_secs(2);

/// A minimum upload rate, from when the body started: the one rule both engines' bodies keep.
pub struct MinRate {
    bytes_per_second: u64,
    started: Instant,
}

impl MinRate {
    /// A rate starting now; `None` for 0, which allows any pace.
    pub fn starting_now(bytes_per_second: u64) -> Option<MinRate> {
        (bytes_per_second > 0).then(|| MinRate {
            bytes_per_second,
            started: Instant::now(),
        })
    }

    /// Whether `passed` bytes, after [`BODY_RATE_GRACE`], fall below the rate on average.
    pub fn fell_behind(&self, passed: u64) -> bool {
        let elapsed = self.started.elapsed();
        elapsed > BODY_RATE_GRACE
            && (passed as f64) < self.bytes_per_second as f64 * elapsed.as_secs_f64()
    }
}

/// Where a request body's bytes come from.
enum Source {
    /// Streamed from the client by hyper's server.
    Client(Incoming),
    /// Streamed from the client by the own HTTP/1 engine, a piece at a time.
    Fed(Fed),
    /// Read whole by a step that had to see it (the gate's JSON Schema), sent as one frame; or
    /// `None` for a request trafik makes itself (a gateway's part, a preload), which has none.
    Read(Option<Bytes>),
    /// Read whole by request buffering, past its memory bound: sent from a temporary file.
    Spilled(Box<Spilled>),
    /// Streamed from an HTTP/3 client: DATA frames, then its trailers, if any.
    H3(Box<H3Body>),
    /// Streamed from an HTTP/2 client by the own server: its stream's DATA, then its
    /// trailers, if any.
    H2(Http2Body),
}

/// The receiving half of an HTTP/3 request stream, read as a body.
pub struct H3Body {
    stream: h3::server::RequestStream<h3_quinn::RecvStream, Bytes>,
    /// The first piece, read ahead by [`H3Body::start`].
    first: Option<Bytes>,
    /// The length the client gave (`content-length`), still to come.
    left: Option<u64>,
    /// The DATA frames have ended (the trailers are read next).
    data_done: bool,
    /// The trailers have been read too, or the stream failed.
    done: bool,
}

impl H3Body {
    /// The body of a request whose head came on `stream`. HTTP/3 marks a body's end only by
    /// closing the stream, so without a `content-length` (`length`) the first piece is awaited
    /// here: a bodiless request (a GET, its stream closed with its head) is then known as one,
    /// and goes upstream without a body rather than chunked.
    pub async fn start(
        stream: h3::server::RequestStream<h3_quinn::RecvStream, Bytes>,
        length: Option<u64>,
    ) -> io::Result<H3Body> {
        use bytes::Buf;
        let mut body = H3Body {
            stream,
            first: None,
            left: length,
            data_done: false,
            done: false,
        };
        if length.is_none() {
            match body.stream.recv_data().await.map_err(io::Error::other)? {
                Some(mut data) => body.first = Some(data.copy_to_bytes(data.remaining())),
                None => body.data_done = true,
            }
        }
        Ok(body)
    }

    /// Whether nothing more comes: known without waiting for a body known to be empty (no
    /// trailers are awaited after an empty body, as hyper does for HTTP/2).
    fn is_end_stream(&self) -> bool {
        self.first.is_none() && (self.done || self.data_done || self.left == Some(0))
    }

    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        use bytes::Buf;
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        if self.done {
            return Poll::Ready(None);
        }
        if !self.data_done {
            match std::task::ready!(self.stream.poll_recv_data(cx)) {
                Ok(Some(mut data)) => {
                    let data = data.copy_to_bytes(data.remaining());
                    if let Some(left) = &mut self.left {
                        *left = left.saturating_sub(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(None) => self.data_done = true,
                Err(error) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(io::Error::other(error))));
                }
            }
        }
        let trailers = std::task::ready!(self.stream.poll_recv_trailers(cx));
        self.done = true;
        match trailers {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(error) => Poll::Ready(Some(Err(io::Error::other(error)))),
        }
    }
}

/// A request body handed over a piece at a time by the engine that reads it from the client
/// (the own HTTP/1 engine's pump, in the same task): one slot, no queue. The pump reads the
/// client only when the body asks for more, so an unread body stays in the client's socket,
/// and it stops once the body is dropped.
#[derive(Default)]
pub struct Feed {
    piece: RefCell<Option<Bytes>>,
    end: Cell<FeedEnd>,
    /// The body asked for a piece and found the slot empty.
    wanted: Cell<bool>,
    /// The body was dropped: nobody reads further.
    gone: Cell<bool>,
    /// Bytes not yet taken by the body, when the client gave a length.
    left: Cell<Option<u64>>,
    /// The body's task, waiting for a piece; the pump's, waiting for demand.
    reader: RefCell<Option<Waker>>,
    pump: RefCell<Option<Waker>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum FeedEnd {
    #[default]
    Open,
    Ended,
    /// The client closed early or broke its body's framing.
    Failed(io::ErrorKind),
}

fn wake(waker: &RefCell<Option<Waker>>) {
    let waker = waker.borrow_mut().take();
    if let Some(waker) = waker {
        waker.wake();
    }
}

impl Feed {
    /// A feed for a body of `length` bytes, or of a length not known yet (chunked).
    pub fn new(length: Option<u64>) -> Self {
        Feed {
            left: Cell::new(length),
            ..Feed::default()
        }
    }

    /// Ready (true) once the body wants a piece, (false) once it is gone.
    pub fn poll_wanted(&self, cx: &mut Context<'_>) -> Poll<bool> {
        if self.gone.get() {
            return Poll::Ready(false);
        }
        if self.wanted.get() {
            return Poll::Ready(true);
        }
        *self.pump.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Ready (true) once the slot is free for a piece, (false) once the body is gone.
    pub fn poll_free(&self, cx: &mut Context<'_>) -> Poll<bool> {
        if self.gone.get() {
            return Poll::Ready(false);
        }
        if self.piece.borrow().is_none() {
            return Poll::Ready(true);
        }
        *self.pump.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Whether the body has been dropped.
    pub fn is_gone(&self) -> bool {
        self.gone.get()
    }

    /// Hands the body its next piece (the slot must be free: [`Feed::poll_free`]).
    pub fn give(&self, piece: Bytes) {
        *self.piece.borrow_mut() = Some(piece);
        self.wanted.set(false);
        wake(&self.reader);
    }

    /// The body has no more pieces than those given.
    pub fn end(&self) {
        self.finish(FeedEnd::Ended);
    }

    /// The body breaks off after the pieces given.
    pub fn fail(&self, kind: io::ErrorKind) {
        self.finish(FeedEnd::Failed(kind));
    }

    fn finish(&self, end: FeedEnd) {
        if self.end.get() == FeedEnd::Open {
            self.end.set(end);
        }
        wake(&self.reader);
    }

    fn poll_piece(&self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, io::Error>>> {
        let piece = self.piece.borrow_mut().take();
        if let Some(piece) = piece {
            if let Some(left) = self.left.get() {
                self.left.set(Some(left.saturating_sub(piece.len() as u64)));
            }
            wake(&self.pump);
            return Poll::Ready(Some(Ok(piece)));
        }
        match self.end.get() {
            FeedEnd::Ended => Poll::Ready(None),
            FeedEnd::Failed(kind) => Poll::Ready(Some(Err(kind.into()))),
            FeedEnd::Open => {
                *self.reader.borrow_mut() = Some(cx.waker().clone());
                self.wanted.set(true);
                wake(&self.pump);
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.end.get() == FeedEnd::Ended && self.piece.borrow().is_none()
    }
}

/// The body's end of a [`Feed`]: dropping it tells the pump to stop.
struct Fed(Rc<Feed>);

impl Drop for Fed {
    fn drop(&mut self) {
        self.0.gone.set(true);
        wake(&self.0.pump);
    }
}

/// A buffered body kept in a temporary file, read back a piece at a time.
struct Spilled {
    file: tokio::fs::File,
    /// Bytes still to send.
    left: u64,
    piece: Vec<u8>,
}

/// The most of a spilled body read back into memory at once.
const SPILLED_PIECE: u64 = 64 * 1024;

impl Spilled {
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        self.piece.resize(self.left.min(SPILLED_PIECE) as usize, 0);
        let mut read = ReadBuf::new(&mut self.piece);
        match Pin::new(&mut self.file).poll_read(cx, &mut read) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(error)) => Poll::Ready(Some(Err(BodyError::Spill(error)))),
            Poll::Ready(Ok(())) if read.filled().is_empty() => {
                let cut = io::Error::from(io::ErrorKind::UnexpectedEof);
                Poll::Ready(Some(Err(BodyError::Spill(cut))))
            }
            Poll::Ready(Ok(())) => {
                let piece = Bytes::copy_from_slice(read.filled());
                self.left -= piece.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(piece))))
            }
        }
    }
}

/// How far a request body has gone.
#[derive(Default)]
pub struct Upload {
    state: Cell<UploadState>,
    waker: RefCell<Option<Waker>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UploadState {
    #[default]
    Sending,
    Sent,
    ClientFailed,
    TooLarge,
    /// The client sent its body slower than the listener's minimum rate (slowloris on the body).
    TooSlow,
}

impl Upload {
    pub fn state(&self) -> UploadState {
        self.state.get()
    }

    fn set(&self, state: UploadState) {
        if self.state.get() == UploadState::Sending {
            self.state.set(state);
            if let Some(waker) = self.waker.borrow_mut().take() {
                waker.wake();
            }
        }
    }

    /// Waits until the body is no longer being sent.
    pub async fn finished(&self) {
        std::future::poll_fn(|cx| {
            if self.state.get() == UploadState::Sending {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await;
    }
}

/// Why a request body stopped before its end.
#[derive(Debug)]
pub enum BodyError {
    /// The client closed before its body's end, or broke its framing.
    Client(io::Error),
    TooLarge {
        limit: u64,
    },
    TooSlow {
        bytes_per_second: u64,
    },
    /// Request buffering's temporary file failed.
    Spill(io::Error),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Client(error) => write!(f, "client body: {error}"),
            BodyError::TooLarge { limit } => write!(f, "request body over {limit} bytes"),
            BodyError::TooSlow { bytes_per_second } => {
                write!(
                    f,
                    "request body slower than {bytes_per_second} bytes a second"
                )
            }
            BodyError::Spill(error) => write!(f, "request body buffer file: {error}"),
        }
    }
}

impl std::error::Error for BodyError {}

impl BodyError {
    /// trafik's answer to a request whose body stopped this way.
    pub fn refusal(&self) -> ProxyError {
        match self {
            BodyError::Client(_) => ProxyError::ClientAborted,
            BodyError::TooLarge { .. } => ProxyError::RequestBodyTooLarge,
            BodyError::TooSlow { .. } => ProxyError::BodyTooSlow,
            BodyError::Spill(_) => ProxyError::BodyNotBuffered,
        }
    }
}

/// Whether a request to a backend says its body's known `length` in `Content-Length` when its
/// client did not, as hyper's client does: any length but an empty one, which only a method
/// whose body means something says.
pub fn length_is_said(method: &http::Method, length: u64) -> bool {
    use http::Method;
    length > 0
        || !matches!(
            *method,
            Method::GET | Method::HEAD | Method::DELETE | Method::CONNECT
        )
}

impl RequestBody {
    /// The client's body, streamed as it arrives.
    pub fn streaming(body: Incoming) -> Self {
        let upload = (!body.is_end_stream()).then(Rc::default);
        RequestBody {
            source: Source::Client(body),
            passed: 0,
            limit: None,
            upload,
            min_rate: None,
            copy: None,
        }
    }

    /// An HTTP/3 client's body, read from its request stream.
    pub fn h3(body: H3Body) -> Self {
        let upload = (!body.is_end_stream()).then(Rc::default);
        RequestBody {
            source: Source::H3(Box::new(body)),
            passed: 0,
            limit: None,
            upload,
            min_rate: None,
            copy: None,
        }
    }

    /// An HTTP/2 client's body, read from its stream by the own server.
    pub fn h2(body: Http2Body) -> Self {
        let upload = (!body.is_end_stream()).then(Rc::default);
        RequestBody {
            source: Source::H2(body),
            passed: 0,
            limit: None,
            upload,
            min_rate: None,
            copy: None,
        }
    }

    /// The client's body, handed over by the own engine through `feed`.
    pub fn fed(feed: Rc<Feed>) -> Self {
        RequestBody {
            source: Source::Fed(Fed(feed)),
            passed: 0,
            limit: None,
            upload: Some(Rc::default()),
            min_rate: None,
            copy: None,
        }
    }

    /// Refuses (as a [`BodyError::TooSlow`]) a body that, after [`BODY_RATE_GRACE`], has come
    /// slower than `bytes_per_second` on average; 0 allows any pace.
    pub fn min_rate(&mut self, bytes_per_second: u64) {
        if self.upload.is_some() {
            self.min_rate = MinRate::starting_now(bytes_per_second);
        }
    }

    /// No body: for requests trafik makes itself, and a bodiless request sent again after a
    /// backend lost the first copy.
    pub fn empty() -> Self {
        Self::read(None)
    }

    /// A body at hand, for a request trafik makes itself (a mirror's copy).
    pub fn whole(body: Bytes) -> Self {
        Self::read(Some(body))
    }

    fn read(body: Option<Bytes>) -> Self {
        RequestBody {
            source: Source::Read(body),
            passed: 0,
            limit: None,
            upload: None,
            min_rate: None,
            copy: None,
        }
    }

    /// A copy of the body for a mirror, made as the body passes on its way; `None` when the
    /// body is longer than `limit` (as it says, or as it turns out: the copy then never comes).
    pub fn copy_up_to(&mut self, limit: u64) -> Option<BodyCopy> {
        if self.is_end_stream() {
            return Some(BodyCopy::Ready(None));
        }
        match &self.source {
            Source::Read(read) => {
                let read = read.as_ref().filter(|body| body.len() as u64 <= limit)?;
                Some(BodyCopy::Ready(Some(read.clone())))
            }
            Source::Spilled(_) => None,
            Source::Client(_) | Source::Fed(_) | Source::H3(_) | Source::H2(_) => {
                if self
                    .size_hint()
                    .exact()
                    .is_some_and(|length| length > limit)
                {
                    return None;
                }
                let (done, coming) = tokio::sync::oneshot::channel();
                self.copy = Some(Box::new(Tee {
                    held: BytesMut::new(),
                    limit,
                    done,
                }));
                Some(BodyCopy::Coming(coming))
            }
        }
    }

    /// Hands the copied body to the mirror, the body having ended.
    fn finish_copy(&mut self) {
        if let Some(tee) = self.copy.take() {
            let _ = tee.done.send(tee.held.freeze());
        }
    }

    /// Refuses (as a [`BodyError::TooLarge`]) a body that grows past `bytes`.
    pub fn limit(&mut self, bytes: u64) {
        self.limit = Some(self.limit.map_or(bytes, |l| l.min(bytes)));
    }

    /// Reads the whole body, refusing it ([`BodyError::TooLarge`]) once it passes `limit`
    /// bytes; the body then sends what was read. For steps that must see a body to judge it.
    pub async fn read_whole(&mut self, limit: u64) -> Result<Bytes, BodyError> {
        self.limit(limit);
        let mut read = bytes::BytesMut::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut *self).poll_frame(cx)).await
        {
            if let Ok(data) = frame?.into_data() {
                read.extend_from_slice(&data);
            }
        }
        let read = read.freeze();
        self.source = Source::Read((!read.is_empty()).then(|| read.clone()));
        Ok(read)
    }

    /// Reads the whole body before any of it goes on, so a backend gets it at once however
    /// slowly the client sent it: up to `memory` bytes in memory, a longer body in a temporary
    /// file, refused past `most` bytes in all. Trailers are not kept.
    pub async fn buffer(&mut self, memory: u64, most: u64) -> Result<(), BodyError> {
        let mut held = BytesMut::new();
        let mut spilled: Option<(tokio::fs::File, u64)> = None;
        let mut read: u64 = 0;
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut *self).poll_frame(cx)).await
        {
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            read += data.len() as u64;
            if read > most {
                return Err(BodyError::TooLarge { limit: most });
            }
            match &mut spilled {
                None if (held.len() + data.len()) as u64 <= memory => held.extend_from_slice(&data),
                None => {
                    // Creating the file touches the disk: off the worker's thread.
                    let file = tokio::task::spawn_blocking(tempfile::tempfile)
                        .await
                        .unwrap_or_else(|joined| Err(io::Error::other(joined)))
                        .map_err(BodyError::Spill)?;
                    let mut file = tokio::fs::File::from_std(file);
                    let length = (held.len() + data.len()) as u64;
                    file.write_all(&held).await.map_err(BodyError::Spill)?;
                    file.write_all(&data).await.map_err(BodyError::Spill)?;
                    held = BytesMut::new();
                    spilled = Some((file, length));
                }
                Some((file, length)) => {
                    file.write_all(&data).await.map_err(BodyError::Spill)?;
                    *length += data.len() as u64;
                }
            }
        }
        self.source = match spilled {
            None => Source::Read((!held.is_empty()).then(|| held.freeze())),
            Some((mut file, left)) => {
                file.flush().await.map_err(BodyError::Spill)?;
                file.seek(SeekFrom::Start(0))
                    .await
                    .map_err(BodyError::Spill)?;
                Source::Spilled(Box::new(Spilled {
                    file,
                    left,
                    piece: Vec::new(),
                }))
            }
        };
        Ok(())
    }

    /// What a target watches to learn how the upload went; `None` when there is no body.
    pub fn upload(&self) -> Option<Rc<Upload>> {
        self.upload.clone()
    }

    fn report(&self, state: UploadState) {
        if let Some(upload) = &self.upload {
            upload.set(state);
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let polled = match &mut this.source {
            Source::Client(source) => Pin::new(source)
                .poll_frame(cx)
                .map_err(|error| BodyError::Client(io::Error::other(error))),
            Source::Fed(fed) => fed
                .0
                .poll_piece(cx)
                .map(|piece| piece.map(|piece| piece.map(Frame::data).map_err(BodyError::Client))),
            Source::Read(read) => return Poll::Ready(read.take().map(|d| Ok(Frame::data(d)))),
            Source::Spilled(spilled) => return spilled.poll_frame(cx),
            Source::H3(stream) => stream
                .poll_frame(cx)
                .map(|frame| frame.map(|frame| frame.map_err(BodyError::Client))),
            Source::H2(stream) => Pin::new(stream).poll_frame(cx).map(|frame| {
                frame.map(|frame| frame.map_err(|e| BodyError::Client(io::Error::other(e))))
            }),
        };
        let frame = match polled {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(Ok(frame))) => frame,
            Poll::Ready(Some(Err(error))) => {
                this.report(UploadState::ClientFailed);
                return Poll::Ready(Some(Err(error)));
            }
            Poll::Ready(None) => {
                this.report(UploadState::Sent);
                this.finish_copy();
                return Poll::Ready(None);
            }
        };
        if let Some(data) = frame.data_ref() {
            if let Some(tee) = &mut this.copy {
                match (tee.held.len() + data.len()) as u64 <= tee.limit {
                    true => tee.held.extend_from_slice(data),
                    false => this.copy = None,
                }
            }
            this.passed += data.len() as u64;
            if let Some(limit) = this.limit
                && this.passed > limit
            {
                this.report(UploadState::TooLarge);
                return Poll::Ready(Some(Err(BodyError::TooLarge { limit })));
            }
        }
        if let Some(min) = &this.min_rate
            && min.fell_behind(this.passed)
        {
            let bytes_per_second = min.bytes_per_second;
            this.report(UploadState::TooSlow);
            return Poll::Ready(Some(Err(BodyError::TooSlow { bytes_per_second })));
        }
        if this.is_end_stream() {
            this.report(UploadState::Sent);
            this.finish_copy();
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        match &self.source {
            Source::Client(source) => source.is_end_stream(),
            Source::Fed(fed) => fed.0.is_end_stream(),
            Source::Read(read) => read.is_none(),
            Source::Spilled(spilled) => spilled.left == 0,
            Source::H3(stream) => stream.is_end_stream(),
            Source::H2(stream) => stream.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            Source::Client(source) => source.size_hint(),
            Source::Fed(fed) => match fed.0.left.get() {
                Some(left) => SizeHint::with_exact(left),
                None => SizeHint::default(),
            },
            Source::Read(read) => SizeHint::with_exact(read.as_ref().map_or(0, |d| d.len() as u64)),
            Source::Spilled(spilled) => SizeHint::with_exact(spilled.left),
            Source::H3(stream) if stream.is_end_stream() => SizeHint::with_exact(0),
            Source::H3(stream) => match stream.left {
                Some(left) => SizeHint::with_exact(left),
                None => SizeHint::default(),
            },
            Source::H2(stream) => stream.size_hint(),
        }
    }
}

/// An answer trafik gives from what it holds (a stored copy, a file), kept as its parts until
/// it is written: the own HTTP/1 engine writes the fields as they are held, the pipeline takes
/// a `Response` instead. A header map built per answer and dropped after it was written cost a
/// cache hit a third of its instructions.
pub trait HeldAnswer {
    fn status(&self) -> http::StatusCode;
    /// The answer's fields, in the order its `Response` has them.
    fn fields(&self) -> impl Iterator<Item = (&http::HeaderName, &[u8])>;
    fn body(&self) -> ProxyBody;
}

/// A response body: streamed from a backend, or written by trafik itself.
pub enum ProxyBody {
    /// Relayed frame by frame, but for its trailer fields, which reach no client on any
    /// version (as on the own engine: a `Set-Cookie` there would pass unseen by any head
    /// step) unless the answer is gRPC's, whose status is in them; the upstream connection
    /// goes back to its pool at the end.
    Upstream {
        body: UpstreamBody,
        /// The body's first piece, when it was read before the answer was given (to send the
        /// request elsewhere should the backend close first).
        first: Option<Bytes>,
        lease: Option<Lease>,
        /// Whether its trailer fields are relayed (a gRPC answer's `grpc-status`).
        trailers: bool,
    },
    /// A body trafik wrote (errors, admin answers, cached copies, small files).
    Local(Option<Bytes>),
    /// A body read in chunks by another task; it ends when the sender does.
    Chunks(tokio::sync::mpsc::Receiver<Bytes>),
    /// Part of an open file (a static file): sent with sendfile(2) by a writer on plain TCP,
    /// read as bytes by any other.
    File(FileRegion),
    /// Another body whose request is logged when it ends.
    Logged(Box<Logged>),
    /// Another body, compressed as it streams (a route's `compress`).
    Compressed(Box<super::compress::Compressing>),
}

/// Why an answer's body broke off: the backend cut it (hyper's error), or its compressor failed.
pub type BodyFailure = Box<dyn std::error::Error + Send + Sync>;

/// A body and the access-log line of its request, written when the body has ended (or is
/// dropped unfinished).
pub struct Logged {
    body: ProxyBody,
    line: Option<AccessLine>,
    ended: Option<Instant>,
}

impl Drop for Logged {
    fn drop(&mut self) {
        if let Some(line) = self.line.take() {
            line.write(self.ended);
        }
    }
}

impl ProxyBody {
    /// Wraps a backend's body, whose `first` piece may have been read already. A body that has
    /// ended releases its connection at once.
    pub fn upstream(
        body: UpstreamBody,
        first: Option<Bytes>,
        lease: Lease,
        trailers: bool,
    ) -> Self {
        let lease = if body.is_end_stream() {
            lease.release();
            None
        } else {
            Some(lease)
        };
        ProxyBody::Upstream {
            body,
            first,
            lease,
            trailers,
        }
    }

    pub fn local(text: impl Into<Bytes>) -> Self {
        ProxyBody::Local(Some(text.into()))
    }

    /// Whether this is a backend's answer (relayed, perhaps compressed on its way), as opposed
    /// to one trafik wrote: only relayed answers lose their hop-by-hop fields and gain `Via`.
    pub fn is_relayed(&self) -> bool {
        match self {
            ProxyBody::Upstream { .. } => true,
            ProxyBody::Compressed(compressed) => compressed.inner().is_relayed(),
            ProxyBody::Local(_)
            | ProxyBody::Chunks(_)
            | ProxyBody::File(_)
            | ProxyBody::Logged(_) => false,
        }
    }

    /// `body`, with `line` written to the access log once it has ended.
    pub(crate) fn logged(body: ProxyBody, line: AccessLine) -> Self {
        let ended = body.is_end_stream().then(Instant::now);
        ProxyBody::Logged(Box::new(Logged {
            body,
            line: Some(line),
            ended,
        }))
    }
}

/// What polling a body for a frame gave.
type Polled<B> = Poll<Option<Result<Frame<<B as Body>::Data>, <B as Body>::Error>>>;

/// Whether `polled` ends `body`: no frame is left, or the one it gave was the last (hyper polls
/// no further once `is_end_stream` says so).
fn ends<B: Body>(polled: &Polled<B>, body: &B) -> bool {
    match polled {
        Poll::Ready(None) => true,
        Poll::Ready(Some(Ok(_))) => body.is_end_stream(),
        Poll::Ready(Some(Err(_))) | Poll::Pending => false,
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BodyFailure;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFailure>>> {
        let this = self.get_mut();
        match this {
            ProxyBody::Upstream {
                body,
                first,
                lease,
                trailers,
            } => loop {
                let polled = match first.take() {
                    Some(data) => Poll::Ready(Some(Ok(Frame::data(data)))),
                    None => Pin::new(&mut *body).poll_frame(cx),
                };
                if let Poll::Ready(Some(Ok(frame))) = &polled
                    && frame.is_trailers()
                    && !*trailers
                {
                    continue;
                }
                // hyper stops polling once `is_end_stream` is true, so the connection is
                // released with the last frame rather than on a poll that may never come.
                if ends(&polled, &*body)
                    && let Some(lease) = lease.take()
                {
                    lease.release();
                }
                // An upstream body fails only when the backend cuts it short.
                if let Poll::Ready(Some(Err(_))) = &polled {
                    if let Some(lease) = lease.take() {
                        lease.cut();
                    }
                    // A gRPC call ends with a status its client can act on.
                    if *trailers {
                        *trailers = false;
                        return Poll::Ready(Some(Ok(super::grpc::lost_trailers())));
                    }
                }
                return polled.map_err(BodyFailure::from);
            },
            ProxyBody::Local(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            ProxyBody::Chunks(chunks) => {
                chunks.poll_recv(cx).map(|c| c.map(|d| Ok(Frame::data(d))))
            }
            ProxyBody::File(region) => {
                if let Some(kept) = region.take_kept() {
                    return Poll::Ready((!kept.is_empty()).then(|| Ok(Frame::data(kept))));
                }
                if region.is_empty() {
                    return Poll::Ready(None);
                }
                // Read from the descriptor from here on: a body fed by another task.
                *this = ProxyBody::Chunks(region.read_in_chunks());
                Pin::new(this).poll_frame(cx)
            }
            ProxyBody::Logged(logged) => {
                let polled = Pin::new(&mut logged.body).poll_frame(cx);
                if ends(&polled, &logged.body) {
                    logged.ended.get_or_insert_with(Instant::now);
                }
                polled
            }
            ProxyBody::Compressed(compressed) => compressed.poll(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Upstream { body, first, .. } => first.is_none() && body.is_end_stream(),
            ProxyBody::Local(data) => data.is_none(),
            ProxyBody::Chunks(chunks) => chunks.is_closed() && chunks.is_empty(),
            ProxyBody::File(region) => region.is_empty(),
            ProxyBody::Logged(logged) => logged.body.is_end_stream(),
            ProxyBody::Compressed(compressed) => compressed.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Upstream { body, first, .. } => {
                let hint = body.size_hint();
                let Some(first) = first else {
                    return hint;
                };
                // The body counts only what it has not given yet.
                let first = first.len() as u64;
                let mut with_first = SizeHint::new();
                with_first.set_lower(hint.lower() + first);
                if let Some(upper) = hint.upper() {
                    with_first.set_upper(upper + first);
                }
                with_first
            }
            ProxyBody::Local(Some(data)) => SizeHint::with_exact(data.len() as u64),
            ProxyBody::Local(None) => SizeHint::with_exact(0),
            ProxyBody::Chunks(_) => SizeHint::default(),
            ProxyBody::File(region) => SizeHint::with_exact(region.len()),
            ProxyBody::Logged(logged) => logged.body.size_hint(),
            ProxyBody::Compressed(compressed) => compressed.size_hint(),
        }
    }
}

/// Bytes `start..end` of an open file. A writer that sends files takes the file and the range
/// ([`FileRegion::file`]) and sends it from the page cache; any other reads its bytes as
/// frames: the file's copy in memory when one is kept, else chunks read from the descriptor on
/// the blocking pool as the client takes them (the body turns into [`ProxyBody::Chunks`]). A
/// file cut shorter than the range ends the body early, which its writer reports as a cut
/// answer.
pub struct FileRegion {
    file: Arc<std::fs::File>,
    start: u64,
    end: u64,
    /// The range's bytes, when the whole file is kept in memory.
    kept: Option<Bytes>,
    /// Where the range's bytes are counted if they leave by sendfile(2), and for which worker.
    counted: Option<(Arc<dyn SendfileCount>, usize)>,
}

/// Counts the bytes of regions sent by sendfile(2). Only the writer knows whether a region
/// goes that way (a plain TCP client, a body no step replaced on the way out), whichever
/// engine and path brought it there.
pub trait SendfileCount: Send + Sync {
    fn sent_by_sendfile(&self, worker: usize, bytes: u64);
}

/// The largest region written from memory, beside its head in one `writev`, rather than sent
/// from the file with a second call. Measured as trafik's CPU per request serving one file
/// (two builds, interleaved rounds): 10.8 KB took 15 % less from memory, 30 KB 10–25 % more.
const SMALL_REGION: usize = 16 << 10;

/// The most of a file read into memory at once for a writer that cannot send files.
const FILE_CHUNK: u64 = 64 << 10;

impl FileRegion {
    /// Bytes `start..end` of `file`; `kept`, when given, holds exactly those bytes.
    pub fn new(file: Arc<std::fs::File>, start: u64, end: u64, kept: Option<Bytes>) -> Self {
        FileRegion {
            file,
            start,
            end,
            kept,
            counted: None,
        }
    }

    /// Counts the range's bytes with `counter`, for `worker`, if they are sent by sendfile(2).
    pub fn count_sendfile_with(&mut self, counter: Arc<dyn SendfileCount>, worker: usize) {
        self.counted = Some((counter, worker));
    }

    /// Tells the region's counter that its bytes went by sendfile(2).
    pub fn sent_by_sendfile(&self) {
        if let Some((counter, worker)) = &self.counted {
            counter.sent_by_sendfile(*worker, self.len());
        }
    }

    /// The file and the bytes of it still to send (`start..end`), for a writer that sends
    /// files itself.
    pub fn file(&self) -> (&std::fs::File, u64, u64) {
        (&self.file, self.start, self.end)
    }

    /// Whether the region is better written from its copy in memory than sent from the file:
    /// a body this small goes in one write with its head, where sendfile(2) costs a second
    /// call.
    pub fn written_from_memory(&self) -> bool {
        Self::fits_beside_head(self.kept.as_ref())
    }

    /// Whether a region whose bytes are `kept` is written from memory.
    pub fn fits_beside_head(kept: Option<&Bytes>) -> bool {
        kept.is_some_and(|kept| kept.len() <= SMALL_REGION)
    }

    /// Bytes still to send.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// The range's bytes kept in memory, taken once: the region is then sent.
    fn take_kept(&mut self) -> Option<Bytes> {
        let kept = self.kept.take()?;
        self.start = self.end;
        Some(kept)
    }

    /// Reads the range on the blocking pool, a chunk at a time as the receiver takes them; it
    /// stops where the file ends.
    fn read_in_chunks(&self) -> tokio::sync::mpsc::Receiver<Bytes> {
        use std::os::unix::fs::FileExt;
        let (chunks, receiver) = tokio::sync::mpsc::channel(4);
        let (file, mut at, end) = (self.file.clone(), self.start, self.end);
        tokio::task::spawn_blocking(move || {
            while at < end {
                let mut chunk = vec![0; (end - at).min(FILE_CHUNK) as usize];
                match file.read_at(&mut chunk, at) {
                    Ok(0) | Err(_) => return,
                    Ok(read) => {
                        chunk.truncate(read);
                        at += read as u64;
                        if chunks.blocking_send(Bytes::from(chunk)).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        receiver
    }
}

/// trafik's own answer for a failure, as the HTTP pipeline sends it.
pub trait ErrorAnswer {
    /// The status, the one-line body and the headers of the failure. The answer carries the
    /// error in its extensions, which marks it as trafik's own for the steps it passes on the
    /// way out (the hop trace writes the reason).
    fn response(self) -> http::Response<ProxyBody>;

    /// The same answer, its body naming the backend to blame when there is one.
    fn response_blaming(self, blame: Option<&crate::error::Blame>) -> http::Response<ProxyBody>;
}

impl ErrorAnswer for ProxyError {
    fn response(self) -> http::Response<ProxyBody> {
        self.response_blaming(None)
    }

    fn response_blaming(self, blame: Option<&crate::error::Blame>) -> http::Response<ProxyBody> {
        let body = match self.body_blaming(blame) {
            std::borrow::Cow::Borrowed(text) => Bytes::from_static(text.as_bytes()),
            std::borrow::Cow::Owned(text) => Bytes::from(text),
        };
        let mut response = http::Response::new(ProxyBody::local(body));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        for (name, value) in self.headers() {
            headers.insert(name.clone(), http::HeaderValue::from_static(value));
        }
        response.extensions_mut().insert(self);
        response
    }
}
