//! HTTP/2 to backends: a request is a stream of a shared [`Connection`], its HEADERS written
//! by the request's own task, its body pumped by a task of its own under the stream's flow
//! control, and the answer's body read from the stream as the client takes it.

use std::cell::RefCell;
use std::future::{Future, poll_fn};
use std::io;
use std::rc::Rc;
use std::task::Poll;

use h2::Reason;
use http::request::Parts;
use http::{HeaderValue, Method, Response, header};
use http_body::Body;

use super::connection::{Connection, SETTINGS_WAIT, body_length};
use super::stream::{Http2Body, StreamRef, pump};
use crate::http::body::{RequestBody, length_is_said};
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
            connection.wait(cx.waker());
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

    /// Sends the request `head` and `body` make on a new stream; one the connection can no
    /// longer take, or a bodiless one the backend never processed (its GOAWAY named an earlier
    /// stream, or it refused the stream), comes back unsent in the error.
    pub fn send<'h>(
        &self,
        head: &'h mut Parts,
        body: RequestBody,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, SendError>> + use<'h> {
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
                    shared.wait(cx.waker());
                    return Poll::Pending;
                }
                Poll::Ready(true)
            })
            .await;
            if !open {
                return Err(SendError::unsent(body));
            }
            let end = body.is_end_stream();
            // As hyper's client: a body of known length says so, unless the client did (an
            // empty one only for a method whose body means something).
            if let Some(length) = body.size_hint().exact()
                && length_is_said(&head.method, length)
                && !head.headers.contains_key(header::CONTENT_LENGTH)
            {
                head.headers
                    .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
            }
            let id = connection.borrow_mut().open(head, end);
            let stream = StreamRef::reading(connection, id);
            // A bodiless request is sent whole with its head, and its body kept; a body goes
            // up on a task of its own.
            let kept = match end {
                true => Some(body),
                false => {
                    tokio::task::spawn_local(upload(body, stream.uploader()));
                    None
                }
            };
            let Some(answer) = poll_fn(|cx| stream.poll_head(cx)).await else {
                // One the backend never processed goes again (nginx says GOAWAY after
                // `keepalive_requests` with streams under way): on a connection that still
                // takes streams, the same one after a refused stream.
                return Err(match kept {
                    Some(body) if stream.unprocessed() => SendError::unsent(body),
                    _ => SendError::lost(),
                });
            };
            let length = body_length(
                head.method == Method::HEAD,
                answer.status(),
                answer.headers(),
            );
            Ok(answer.map(|()| UpstreamBody::Http2(Http2Body::new(stream, length))))
        }
    }
}

/// Pumps a request body onto its stream, each piece as the backend has room for it (flow
/// control), so a slow backend slows the client's upload. A body that fails (the client went
/// away, a limit) resets the stream; a stream that stopped (reset either way, the connection
/// gone) stops the upload.
async fn upload(mut body: RequestBody, stream: StreamRef) {
    if pump(&mut body, &stream).await.is_err() {
        stream.reset(Reason::INTERNAL_ERROR);
    }
}
