//! A stream's handles, on either side: what trafik sends on it (a request's body to a backend,
//! an answer to a client: DATA under both flow-control windows, trailers) and what it reads
//! from it ([`Http2Body`]: a backend's answer, a client's request body).

use std::cell::RefCell;
use std::future::poll_fn;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::Reason;
use http::{HeaderMap, Response};
use http_body::{Body, Frame, SizeHint};

use super::connection::{Connection, QUEUED_MOST, Side, Stop};
use super::frame;

/// A hold on one stream: its reader's (`reads`: a backend's answer, a client's request body)
/// or its sender's (an upload to a backend, an answer to a client). When a backend answer's
/// reader goes before its end the stream is cancelled; when the last hold goes the stream is
/// forgotten, what it held unread given back to the connection's window, and a client is told
/// its answer ended unsaid (RST_STREAM INTERNAL_ERROR), or, still sending a request whose
/// answer is whole, to stop (NO_ERROR, RFC 9113 §8.1).
pub(super) struct StreamRef {
    connection: Rc<RefCell<Connection>>,
    id: u32,
    reads: bool,
}

impl StreamRef {
    /// The first hold on stream `id`, its reader's.
    pub(super) fn reading(connection: Rc<RefCell<Connection>>, id: u32) -> StreamRef {
        StreamRef {
            connection,
            id,
            reads: true,
        }
    }

    /// The first hold on stream `id`, its sender's.
    pub(super) fn sending(connection: Rc<RefCell<Connection>>, id: u32) -> StreamRef {
        StreamRef {
            connection,
            id,
            reads: false,
        }
    }

    /// Ends the stream with RST_STREAM.
    pub(super) fn reset(&self, reason: Reason) {
        self.connection.borrow_mut().reset(self.id, reason);
    }

    /// Whether the stream was reset or lost before anything was sent on it.
    pub(super) fn is_stopped(&self) -> bool {
        let connection = self.connection.borrow();
        connection
            .streams
            .get(&self.id)
            .is_none_or(|stream| stream.sending_closed)
    }

    /// A second hold, for the reader.
    pub(super) fn reader(&self) -> StreamRef {
        let mut second = self.uploader();
        second.reads = true;
        second
    }

    /// A second hold, for the sender.
    pub(super) fn uploader(&self) -> StreamRef {
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
    pub(super) fn poll_head(&self, cx: &mut Context<'_>) -> Poll<Option<Response<()>>> {
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

    /// Whether the backend never processed this stream's request, which may then go again
    /// (RFC 9113 §8.7): its GOAWAY named an earlier stream as its last, or it refused the
    /// stream (REFUSED_STREAM).
    pub(super) fn unprocessed(&self) -> bool {
        let connection = self.connection.borrow();
        connection.streams.get(&self.id).is_some_and(|stream| {
            matches!(
                stream.stopped,
                Some(Stop::Unprocessed | Stop::Reset(Reason::REFUSED_STREAM))
            )
        })
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
        let client = matches!(connection.side, Side::Client { .. });
        if client && self.reads && !stream.is_done() {
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
        if !client && !stream.reset {
            if !stream.sending_closed {
                // The answer ended unsaid (its work dropped): the client must not wait for it.
                connection.reset(self.id, Reason::INTERNAL_ERROR);
            } else if !stream.is_done() {
                // The answer is over, the request is not: the client may stop sending it.
                connection.reset(self.id, Reason::NO_ERROR);
            }
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

/// What came first while a body's next frame was awaited.
enum Next<E> {
    Frame(Option<Result<Frame<Bytes>, E>>),
    Stopped,
}

/// Sends a body (a request's to a backend, an answer's to a client) to its end, or until the
/// stream stops; an error when the body failed.
pub(super) async fn pump<B>(body: &mut B, stream: &StreamRef) -> Result<(), B::Error>
where
    B: Body<Data = Bytes> + Unpin,
{
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
            connection.wait(cx.waker());
        }
        Poll::Pending
    }

    /// Whether the stream takes no more of what trafik sends; else the task is woken when so.
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

    /// Queues a DATA frame the windows have room for; `end` closes trafik's side.
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
            if end {
                connection.answered();
            }
            connection.wake_driver();
        }
    }

    /// Ends what trafik sends with its trailers (HEADERS are not flow-controlled).
    fn send_trailers(&self, trailers: &HeaderMap) {
        self.send_head(true, |block| block.trailers(trailers));
    }

    /// Queues a HEADERS frame (an answer's head, or trailers) written by `write`, a block
    /// writer on the connection's reused bytes; `end` when nothing follows it.
    pub(super) fn send_head(
        &self,
        end: bool,
        write: impl FnOnce(&mut frame::HeaderBlock) -> &[u8],
    ) {
        let mut connection = self.connection.borrow_mut();
        let connection = &mut *connection;
        let Some(stream) = connection.streams.get_mut(&self.id) else {
            return;
        };
        if stream.sending_closed {
            return;
        }
        stream.sending_closed = end;
        let max_frame = connection.peer.max_frame;
        let block = write(&mut connection.block);
        frame::headers(&mut connection.out, self.id, block, end, max_frame);
        if end {
            connection.answered();
        }
        connection.wake_driver();
    }
}

/// A body as it comes on its stream (a backend's answer, a client's request): DATA, then the
/// trailers, if any. What is read is given back to the peer's windows as it is read: the
/// reader's pace holds the stream back through the reads themselves. The body is whole only at
/// the peer's END_STREAM with all its `content-length`; a stream stopped before it (reset
/// either way, the connection lost) reaches the reader as an error, never as a complete body
/// (nor a gRPC answer without its status).
pub struct Http2Body {
    stream: StreamRef,
    reading: Reading,
}

/// Where a body is: its DATA (with what remains of the length its head gave in
/// `content-length`), or the trailers after them.
enum Reading {
    Data { left: Option<u64> },
    Trailers,
}

impl Http2Body {
    /// The body on `stream`, `length` bytes when its head said so.
    pub(super) fn new(stream: StreamRef, length: Option<u64>) -> Self {
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
            Some(Stop::Lost | Stop::Unprocessed) => {
                return Poll::Ready(Some(Err(Reason::INTERNAL_ERROR.into())));
            }
            None => {}
        }
        if let Some(data) = stream.take_data() {
            connection.release(Some(id), data.len());
            if let Reading::Data { left: Some(left) } = &mut this.reading {
                if data.len() as u64 > *left {
                    // More than the answer's length said (RFC 9113 §8.1.1).
                    connection.stream_error(id, Reason::PROTOCOL_ERROR);
                    return Poll::Ready(Some(Err(Reason::PROTOCOL_ERROR.into())));
                }
                *left -= data.len() as u64;
            }
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if stream.ended {
            if this.length_left() > 0 {
                // Less than the head's length said: malformed (RFC 9113 §8.1.1).
                connection.stream_error(id, Reason::PROTOCOL_ERROR);
                return Poll::Ready(Some(Err(Reason::PROTOCOL_ERROR.into())));
            }
            this.reading = Reading::Trailers;
            return Poll::Ready(stream.trailers.take().map(|t| Ok(Frame::trailers(*t))));
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
