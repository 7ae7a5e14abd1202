//! HTTP/2 to backends on the `h2` crate's client, driven directly: a request is a stream opened
//! by the request's own task, its body pumped by a task of its own under the stream's flow
//! control, and the answer's body read from the stream as the client takes it. (hyper's client
//! over the same crate hands every request to its connection task through a channel and back
//! through another: a hop per request that this spares.)

use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderValue, Request, Response, header};
use http_body::{Body, Frame, SizeHint};

use super::body::{BodyError, RequestBody};
use super::upstream::{SendError, UpstreamBody};
use crate::plan::AnswerLimits;
use crate::transport;

/// What a backend may send on one stream before trafik has read it: a stream whose client
/// stops reading holds at most this much (haproxy's grant too).
const STREAM_WINDOW: u32 = 64 * 1024;
/// The most streams trafik opens on one connection, whatever the backend allows; more
/// requests open another connection.
const MOST_STREAMS: usize = 128;
/// Room for every stream's window at once: streams whose clients stop reading hold only their
/// own windows, never the connection's, which the other streams need (RFC 9113 §5.2: streams
/// "do not destructively interfere"). hyper's 5 MiB here let three stalled 2 MiB streams stop
/// every answer on the connection.
const CONNECTION_WINDOW: u32 = STREAM_WINDOW * MOST_STREAMS as u32;
/// At most this much of a request body buffered per stream (hyper's client default).
const SEND_BUFFER: usize = 1024 * 1024;
/// The streams assumed until the backend's SETTINGS say otherwise (the least RFC 9113 §6.5.2
/// recommends a server allow).
const ASSUMED_STREAMS: usize = 100;
/// How long a new connection waits for its backend's stream limit.
const SETTINGS_WAIT: Duration = Duration::from_millis(50);

/// The request side of one HTTP/2 connection to a backend, shared by the requests on it.
#[derive(Clone)]
pub struct Http2Connection {
    requests: SendRequest<Bytes>,
    /// The connection ended, or refused a new stream (a GOAWAY): it takes no more requests.
    gone: Rc<Cell<bool>>,
}

impl Http2Connection {
    /// Starts HTTP/2 on a new upstream connection (prior knowledge, or agreed by ALPN); the
    /// connection is a task of this worker. An answer head past `limits` is an error.
    pub async fn start(stream: transport::Upstream, limits: AnswerLimits) -> io::Result<Self> {
        let (requests, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .max_send_buffer_size(SEND_BUFFER)
            .initial_max_send_streams(ASSUMED_STREAMS)
            .enable_push(false)
            .max_header_list_size(u32::try_from(limits.bytes).unwrap_or(u32::MAX))
            .handshake::<_, Bytes>(stream)
            .await
            .map_err(io::Error::other)?;
        let gone = Rc::new(Cell::new(false));
        let ended = gone.clone();
        tokio::task::spawn_local(async move {
            let _ = connection.await;
            ended.set(true);
        });
        let shared = Http2Connection { requests, gone };
        // A backend sends its SETTINGS first thing: waiting briefly for its stream limit keeps
        // a burst from piling onto a connection that would queue it. One that states no limit
        // (grpcio does not) costs this wait once per connection, to its first request.
        let waited = tokio::time::Instant::now() + SETTINGS_WAIT;
        while shared.max_streams() == ASSUMED_STREAMS && tokio::time::Instant::now() < waited {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(shared)
    }

    /// The streams this connection takes: the backend's `SETTINGS_MAX_CONCURRENT_STREAMS` as
    /// the connection knows it now, at most [`MOST_STREAMS`].
    pub fn max_streams(&self) -> usize {
        self.requests.current_max_send_streams().min(MOST_STREAMS)
    }

    pub fn is_closed(&self) -> bool {
        self.gone.get()
    }

    /// Sends `request` on a new stream; one the connection can no longer take comes back
    /// unsent in the error.
    pub fn send(
        &self,
        request: Request<RequestBody>,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, SendError>> + use<> {
        let requests = self.requests.clone();
        let gone = self.gone.clone();
        async move {
            let mut requests = match requests.ready().await {
                Ok(requests) => requests,
                Err(_) => {
                    gone.set(true);
                    return Err(SendError::unsent(request));
                }
            };
            let (mut head, body) = request.into_parts();
            let end = body.is_end_stream();
            // As hyper's client: a body of known length says so, unless the client did (an
            // empty one only for a method whose body means something).
            if let Some(length) = body.size_hint().exact()
                && (length > 0
                    || !matches!(
                        head.method,
                        http::Method::GET
                            | http::Method::HEAD
                            | http::Method::DELETE
                            | http::Method::CONNECT
                    ))
                && !head.headers.contains_key(header::CONTENT_LENGTH)
            {
                head.headers
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
            }
            let (answer, stream) = requests
                .send_request(Request::from_parts(head, ()), end)
                .map_err(|_| SendError::lost())?;
            // A bodiless request is sent whole with its head; one with a body when its task
            // says so.
            let sent_whole = (!end).then(|| {
                let sent_whole = Rc::new(Cell::new(false));
                tokio::task::spawn_local(upload(body, stream, sent_whole.clone()));
                sent_whole
            });
            let answer = answer.await.map_err(|_| SendError::lost())?;
            let length = answer
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|value| value.to_str().ok()?.parse().ok());
            Ok(
                answer
                    .map(|stream| UpstreamBody::Http2(Http2Body::new(stream, length, sent_whole))),
            )
        }
    }
}

/// Pumps a request body onto its stream, a frame at a time and only while the backend has
/// room for more (flow control), so a slow backend slows the client's upload. A body that
/// fails (the client went away, a limit) resets the stream. `sent_whole` turns true once the
/// body's end is sent, not when the backend stopped it.
async fn upload(mut body: RequestBody, mut stream: SendStream<Bytes>, sent_whole: Rc<Cell<bool>>) {
    match pump(&mut body, &mut stream).await {
        Ok(Pumped::Whole) => sent_whole.set(true),
        Ok(Pumped::Stopped) => {}
        Err(()) => stream.send_reset(Reason::INTERNAL_ERROR),
    }
}

/// How a request body's pumping ended.
enum Pumped {
    /// Its end (END_STREAM, or the trailers) is sent.
    Whole,
    /// The backend reset the stream: it wants no more of the body (RFC 9113 §8.1).
    Stopped,
}

/// What came first while a body's next frame was awaited.
enum Next {
    Frame(Option<Result<Frame<Bytes>, BodyError>>),
    /// The backend reset the stream: it wants no more of the body.
    Reset,
}

async fn pump(body: &mut RequestBody, stream: &mut SendStream<Bytes>) -> Result<Pumped, ()> {
    loop {
        room(stream).await?;
        let next = poll_fn(|cx| {
            if stream.poll_reset(cx).is_ready() {
                return Poll::Ready(Next::Reset);
            }
            Pin::new(&mut *body).poll_frame(cx).map(Next::Frame)
        })
        .await;
        let frame = match next {
            Next::Reset => return Ok(Pumped::Stopped),
            Next::Frame(None) => {
                return stream
                    .send_data(Bytes::new(), true)
                    .map(|()| Pumped::Whole)
                    .map_err(drop);
            }
            Next::Frame(Some(Err(_))) => return Err(()),
            Next::Frame(Some(Ok(frame))) => frame,
        };
        match frame.into_data() {
            Ok(data) => {
                let end = body.is_end_stream();
                stream.send_data(data, end).map_err(drop)?;
                if end {
                    return Ok(Pumped::Whole);
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    return stream
                        .send_trailers(trailers)
                        .map(|()| Pumped::Whole)
                        .map_err(drop);
                }
            }
        }
    }
}

/// Waits until the stream may send more: what was sent before has left its buffer.
async fn room(stream: &mut SendStream<Bytes>) -> Result<(), ()> {
    stream.reserve_capacity(1);
    while stream.capacity() == 0 {
        match poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return Err(()),
        }
    }
    Ok(())
}

/// An answer's body as it comes on its stream: DATA, then the trailers, if any. What is read
/// is released to the backend's window at once: the client's pace holds the stream back
/// through the reads themselves.
pub struct Http2Body {
    stream: RecvStream,
    reading: Reading,
    /// Whether the request's body has been sent to its end; `None` for a bodiless request,
    /// sent whole with its head.
    sent_whole: Option<Rc<Cell<bool>>>,
}

/// Where an answer's body is: its DATA (with what remains of the length the backend gave in
/// `content-length`), or the trailers after them.
enum Reading {
    Data { left: Option<u64> },
    Trailers,
}

impl Http2Body {
    fn new(stream: RecvStream, length: Option<u64>, sent_whole: Option<Rc<Cell<bool>>>) -> Self {
        let left = match stream.is_end_stream() {
            true => Some(0),
            false => length,
        };
        Http2Body {
            stream,
            reading: Reading::Data { left },
            sent_whole,
        }
    }

    /// Whether a reset the backend sent ends the answer cleanly. An answer whose length has
    /// all come is complete, whatever follows; one with some of its length missing is cut.
    /// Without a length: `NO_ERROR` (or `CANCEL`) is how a server that answered in full asks
    /// the client to stop sending its request (RFC 9113 §8.1), so it ends the body while the
    /// request is still going up; once the request has been sent whole there is nothing left
    /// to stop, and a reset cuts the answer short. A cut answer reaches the client as an
    /// error, never as a complete body (nor a gRPC answer without its status).
    fn ended_or(&self, error: h2::Error) -> Option<Result<Frame<Bytes>, h2::Error>> {
        let stop_only = matches!(error.reason(), Some(Reason::NO_ERROR | Reason::CANCEL));
        let complete = match self.reading {
            Reading::Data { left: Some(left) } => stop_only && left == 0,
            _ => stop_only && self.sent_whole.as_ref().is_some_and(|sent| !sent.get()),
        };
        match complete {
            true => None,
            false => Some(Err(error)),
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
        if let Reading::Data { left } = &mut this.reading {
            match ready!(this.stream.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = this.stream.flow_control().release_capacity(data.len());
                    if let Some(left) = left {
                        *left = left.saturating_sub(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(error)) => return Poll::Ready(this.ended_or(error)),
                None => this.reading = Reading::Trailers,
            }
        }
        match ready!(this.stream.poll_trailers(cx)) {
            Ok(trailers) => Poll::Ready(trailers.map(|trailers| Ok(Frame::trailers(trailers)))),
            Err(error) => Poll::Ready(Some(Err(error))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.stream.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match self.reading {
            Reading::Data { left: Some(left) } => SizeHint::with_exact(left),
            Reading::Data { left: None } => SizeHint::default(),
            Reading::Trailers => SizeHint::with_exact(0),
        }
    }
}
