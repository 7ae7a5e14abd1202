//! HTTP/2 to backends: a request is a stream of a shared [`Connection`], its HEADERS written
//! by the request's own task, its body pumped by a task of its own under the stream's flow
//! control, and the answer's body read from the stream as the client takes it.

use std::cell::RefCell;
use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::Reason;
use http::{HeaderMap, HeaderValue, Method, Request, Response, header};
use http_body::{Body, Frame, SizeHint};

use super::connection::{Connection, QUEUED_MOST, SETTINGS_WAIT, Stop, body_length};
use super::frame;
use crate::http::body::{BodyError, RequestBody};
use crate::http::upstream::{SendError, UpstreamBody};
use crate::plan::AnswerLimits;
use crate::transport;

/// The request side of one HTTP/2 connection to a backend, shared by the requests on it.
/// When the last copy goes, the connection closes once its streams are done.
#[derive(Clone)]
pub struct Http2Connection {
    owner: Rc<Owner>,
}

/// What the connection's handles hold; its end tells the driver no new stream will come.
struct Owner {
    connection: Rc<RefCell<Connection>>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Ok(mut connection) = self.connection.try_borrow_mut() {
            connection.abandoned = true;
            connection.wake_driver();
        }
    }
}

impl Http2Connection {
    /// Starts HTTP/2 on a new upstream connection (prior knowledge, or agreed by ALPN); its
    /// driver is a task of this worker. An answer head past `limits` is an error.
    pub async fn start(stream: transport::Upstream, limits: AnswerLimits) -> io::Result<Self> {
        let connection = Connection::start(stream, limits);
        let owner = Rc::new(Owner {
            connection: connection.clone(),
        });
        // A backend sends its SETTINGS first thing: waiting briefly for its stream limit keeps
        // a burst from piling onto a connection that would refuse it.
        let settled = poll_fn(|cx| {
            let mut connection = connection.borrow_mut();
            if connection.settings_seen || connection.closed {
                return Poll::Ready(());
            }
            connection.waiting.push(cx.waker().clone());
            Poll::Pending
        });
        let _ = tokio::time::timeout(SETTINGS_WAIT, settled).await;
        if connection.borrow().closed {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the backend closed the HTTP/2 connection before its SETTINGS",
            ));
        }
        Ok(Http2Connection { owner })
    }

    fn connection(&self) -> &Rc<RefCell<Connection>> {
        &self.owner.connection
    }

    /// The streams this connection takes: the backend's `SETTINGS_MAX_CONCURRENT_STREAMS`,
    /// at most [`MOST_STREAMS`].
    pub fn max_streams(&self) -> usize {
        self.connection().borrow().max_streams()
    }

    /// Whether the connection takes no more requests: it ended, or refuses new streams.
    pub fn is_closed(&self) -> bool {
        self.connection().borrow().refusing
    }

    /// Sends `request` on a new stream; one the connection can no longer take comes back
    /// unsent in the error.
    pub fn send(
        &self,
        request: Request<RequestBody>,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, SendError>> + use<> {
        let connection = self.connection().clone();
        async move {
            let open = poll_fn(|cx| {
                let mut shared = connection.borrow_mut();
                if shared.refusing {
                    return Poll::Ready(false);
                }
                // A backend allowing no stream at all is asked anyway: its refusal ends the
                // request, where waiting would never end.
                if shared.streams.len() >= shared.max_streams().max(1) {
                    shared.waiting.push(cx.waker().clone());
                    return Poll::Pending;
                }
                Poll::Ready(true)
            })
            .await;
            if !open {
                return Err(SendError::unsent(request));
            }
            let (mut head, body) = request.into_parts();
            let end = body.is_end_stream();
            // As hyper's client: a body of known length says so, unless the client did (an
            // empty one only for a method whose body means something).
            if let Some(length) = body.size_hint().exact()
                && (length > 0
                    || !matches!(
                        head.method,
                        Method::GET | Method::HEAD | Method::DELETE | Method::CONNECT
                    ))
                && !head.headers.contains_key(header::CONTENT_LENGTH)
            {
                head.headers
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
            }
            let id = connection.borrow_mut().open(&head, end);
            let stream = StreamRef {
                connection,
                id,
                reads: true,
            };
            // A bodiless request is sent whole with its head; a body goes up on a task of
            // its own.
            if !end {
                tokio::task::spawn_local(upload(body, stream.uploader()));
            }
            let answer = poll_fn(|cx| stream.poll_head(cx))
                .await
                .ok_or_else(SendError::lost)?;
            let length = body_length(
                head.method == Method::HEAD,
                answer.status(),
                answer.headers(),
            );
            Ok(answer.map(|()| UpstreamBody::Http2(Http2Body::new(stream, length))))
        }
    }
}

/// A hold on one stream: the request's (then its answer body's, `reads`) or the upload's.
/// When the reader's goes before the answer's end the stream is cancelled; when the last goes
/// the stream is forgotten, what it held unread given back to the connection's window.
struct StreamRef {
    connection: Rc<RefCell<Connection>>,
    id: u32,
    reads: bool,
}

impl StreamRef {
    fn uploader(&self) -> StreamRef {
        let mut connection = self.connection.borrow_mut();
        if let Some(stream) = connection.streams.get_mut(&self.id) {
            stream.handles += 1;
        }
        StreamRef {
            connection: self.connection.clone(),
            id: self.id,
            reads: false,
        }
    }

    /// The answer's head, or `None` when the stream ended without one.
    fn poll_head(&self, cx: &mut Context<'_>) -> Poll<Option<Response<()>>> {
        let mut connection = self.connection.borrow_mut();
        let Some(stream) = connection.streams.get_mut(&self.id) else {
            return Poll::Ready(None);
        };
        if let Some(head) = stream.head.take() {
            return Poll::Ready(Some(head));
        }
        if stream.stopped.is_some() {
            return Poll::Ready(None);
        }
        stream.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for StreamRef {
    fn drop(&mut self) {
        let Ok(mut connection) = self.connection.try_borrow_mut() else {
            return;
        };
        let connection = &mut *connection;
        let Some(stream) = connection.streams.get_mut(&self.id) else {
            return;
        };
        if self.reads && !stream.is_done() {
            // The answer's reader went away before its end: the backend may stop.
            connection.reset(self.id, Reason::CANCEL);
        }
        let Some(stream) = connection.streams.get_mut(&self.id) else {
            return;
        };
        stream.handles -= 1;
        if stream.handles > 0 {
            stream.wake();
            return;
        }
        if let Some(stream) = connection.streams.remove(&self.id) {
            connection.release(None, stream.unread());
        }
        if connection.abandoned && connection.streams.is_empty() {
            connection.wake_driver();
        }
        connection.wake_waiting();
    }
}

/// Pumps a request body onto its stream, each piece as the backend has room for it (flow
/// control), so a slow backend slows the client's upload. A body that fails (the client went
/// away, a limit) resets the stream; a stream that stopped (reset either way, the connection
/// gone) stops the upload.
async fn upload(mut body: RequestBody, stream: StreamRef) {
    if pump(&mut body, &stream).await.is_err() {
        stream
            .connection
            .borrow_mut()
            .reset(stream.id, Reason::INTERNAL_ERROR);
    }
}

/// What came first while a body's next frame was awaited.
enum Next {
    Frame(Option<Result<Frame<Bytes>, BodyError>>),
    Stopped,
}

/// Sends the body to its end, or until the stream stops; an error when the body failed.
async fn pump(body: &mut RequestBody, stream: &StreamRef) -> Result<(), BodyError> {
    loop {
        let next = poll_fn(|cx| {
            if stream.poll_stopped(cx) {
                return Poll::Ready(Next::Stopped);
            }
            Pin::new(&mut *body).poll_frame(cx).map(Next::Frame)
        })
        .await;
        let frame = match next {
            Next::Stopped => return Ok(()),
            // The end needs no window (RFC 9113 §6.9.1: an empty DATA frame).
            Next::Frame(None) => {
                stream.send_data(&[], true);
                return Ok(());
            }
            Next::Frame(Some(result)) => result?,
        };
        match frame.into_data() {
            Ok(mut data) => {
                let end = body.is_end_stream();
                while !data.is_empty() {
                    let Some(room) = poll_fn(|cx| stream.poll_room(cx)).await else {
                        return Ok(());
                    };
                    let piece = data.split_to(room.min(data.len()));
                    stream.send_data(&piece, end && data.is_empty());
                }
                if end {
                    // An empty last piece: the end still has to be said.
                    stream.send_data(&[], true);
                    return Ok(());
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    stream.send_trailers(&trailers);
                    return Ok(());
                }
            }
        }
    }
}

impl StreamRef {
    /// How much of a body the stream may send now (both windows, a frame at most), once the
    /// connection's queue has room; `None` once the stream takes no more.
    fn poll_room(&self, cx: &mut Context<'_>) -> Poll<Option<usize>> {
        let mut connection = self.connection.borrow_mut();
        let connection = &mut *connection;
        let Some(stream) = connection.streams.get_mut(&self.id) else {
            return Poll::Ready(None);
        };
        if stream.sending_closed {
            return Poll::Ready(None);
        }
        let room = stream.send_window.min(connection.send_window);
        if room > 0 && connection.out.len() < QUEUED_MOST {
            return Poll::Ready(Some((room as usize).min(connection.peer.max_frame)));
        }
        // Woken by the stream's window or its end; by the connection's window or room in
        // its queue.
        stream.sender = Some(cx.waker().clone());
        if stream.send_window > 0 {
            connection.waiting.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Whether the stream takes no more of the request; else the task is woken when so.
    fn poll_stopped(&self, cx: &mut Context<'_>) -> bool {
        let mut connection = self.connection.borrow_mut();
        match connection.streams.get_mut(&self.id) {
            Some(stream) if !stream.sending_closed => {
                stream.sender = Some(cx.waker().clone());
                false
            }
            _ => true,
        }
    }

    /// Queues a DATA frame the windows have room for; `end` closes the request's side.
    fn send_data(&self, data: &[u8], end: bool) {
        let mut connection = self.connection.borrow_mut();
        let connection = &mut *connection;
        if let Some(stream) = connection.streams.get_mut(&self.id)
            && !stream.sending_closed
        {
            stream.send_window -= data.len() as i64;
            stream.sending_closed = end;
            connection.send_window -= data.len() as i64;
            frame::data(&mut connection.out, self.id, data, end);
            connection.wake_driver();
        }
    }

    /// Ends the request with its trailers (HEADERS are not flow-controlled).
    fn send_trailers(&self, trailers: &HeaderMap) {
        let mut connection = self.connection.borrow_mut();
        let connection = &mut *connection;
        let Some(stream) = connection.streams.get_mut(&self.id) else {
            return;
        };
        if stream.sending_closed {
            return;
        }
        stream.sending_closed = true;
        let max_frame = connection.peer.max_frame;
        let block = connection.block.trailers(trailers);
        frame::headers(&mut connection.out, self.id, block, true, max_frame);
        connection.wake_driver();
    }
}

/// An answer's body as it comes on its stream: DATA, then the trailers, if any. What is read
/// is given back to the backend's windows as it is read: the client's pace holds the stream
/// back through the reads themselves. The body is whole only at the backend's END_STREAM with
/// all its `content-length`; a stream stopped before it (reset either way, the connection
/// lost) reaches the client as an error, never as a complete body (nor a gRPC answer without
/// its status).
pub struct Http2Body {
    stream: StreamRef,
    reading: Reading,
}

/// Where an answer's body is: its DATA (with what remains of the length the backend gave in
/// `content-length`), or the trailers after them.
enum Reading {
    Data { left: Option<u64> },
    Trailers,
}

impl Http2Body {
    fn new(stream: StreamRef, length: Option<u64>) -> Self {
        Http2Body {
            stream,
            reading: Reading::Data { left: length },
        }
    }

    fn length_left(&self) -> u64 {
        match self.reading {
            Reading::Data { left: Some(left) } => left,
            _ => 0,
        }
    }
}

impl Body for Http2Body {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = self.get_mut();
        let id = this.stream.id;
        let mut connection = this.stream.connection.borrow_mut();
        let connection = &mut *connection;
        let Some(stream) = connection.streams.get_mut(&id) else {
            return Poll::Ready(Some(Err(Reason::INTERNAL_ERROR.into())));
        };
        match stream.stopped {
            Some(Stop::Reset(reason) | Stop::Local(reason)) => {
                return Poll::Ready(Some(Err(reason.into())));
            }
            Some(Stop::Lost) => return Poll::Ready(Some(Err(Reason::INTERNAL_ERROR.into()))),
            None => {}
        }
        if let Some(data) = stream.take_data() {
            connection.release(Some(id), data.len());
            if let Reading::Data { left: Some(left) } = &mut this.reading {
                if data.len() as u64 > *left {
                    // More than the answer's length said (RFC 9113 §8.1.1).
                    connection.reset(id, Reason::PROTOCOL_ERROR);
                    return Poll::Ready(Some(Err(Reason::PROTOCOL_ERROR.into())));
                }
                *left -= data.len() as u64;
            }
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if stream.ended {
            if this.length_left() > 0 {
                // Less than the answer's length said.
                return Poll::Ready(Some(Err(Reason::PROTOCOL_ERROR.into())));
            }
            this.reading = Reading::Trailers;
            return Poll::Ready(stream.trailers.take().map(|t| Ok(Frame::trailers(t))));
        }
        if !stream
            .reader
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            stream.reader = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// True only when nothing is left to read and nothing is missing: a body short of its
    /// length is polled again, to fail.
    fn is_end_stream(&self) -> bool {
        let connection = self.stream.connection.borrow();
        let whole = |stream: &super::connection::Stream| {
            stream.ended
                && stream.stopped.is_none()
                && !stream.holds_data()
                && stream.trailers.is_none()
        };
        match connection.streams.get(&self.stream.id) {
            Some(stream) => whole(stream) && self.length_left() == 0,
            None => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self.reading {
            Reading::Data { left: Some(left) } => SizeHint::with_exact(left),
            Reading::Data { left: None } => SizeHint::default(),
            Reading::Trailers => SizeHint::with_exact(0),
        }
    }
}
