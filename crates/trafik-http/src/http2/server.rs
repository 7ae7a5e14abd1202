//! trafik's own HTTP/2 server (`[server] engine = "trafik"`): a client's connection, agreed by
//! ALPN behind TLS or told by its preface on plain TCP (h2c with prior knowledge), read and
//! written by one driver ([`super::connection`]); every request answered within the
//! connection's own task (no task spawned per stream) through the same [`WorkerProxy::handle`]
//! as every other version, its body read from its stream ([`Http2Body`]), its answer written
//! back under the client's flow control.
//!
//! What a client may make trafik hold is bounded: open streams by
//! `SETTINGS_MAX_CONCURRENT_STREAMS` (`[server.limits] streams`; more are refused), a head by
//! `[server.limits]` (431 past it), a header block's CONTINUATION frames, the bytes owed to a
//! client that does not read, and requests cancelled far beyond those answered (rapid reset).

use std::cell::RefCell;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::BytesMut;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use h2::Reason;
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use tokio::io::{AsyncRead, AsyncWrite};

use super::connection::{
    Accepted, Connection, Reader, Side, Stage, close, content_length, poll_drive,
};
use super::stream::{Http2Body, StreamRef, pump};
use crate::connections::{Connections, Watched};
use crate::error::ProxyError;
use crate::http::body::{BodyFailure, ErrorAnswer, ProxyBody, RequestBody};
use crate::http::server::Client;
use crate::http::service::{ClientConnection, WorkerProxy};
use crate::plan::AnswerLimits;
use crate::snapshot::ListenerId;

/// Serves HTTP/2 on a client's connection until the client leaves, the connection idles out,
/// breaks the protocol, or drains: then GOAWAY names the last request taken, those under way
/// finish, and the connection closes. `read` holds what was read of it already (h2c's
/// preface, read while telling HTTP/1.1 from HTTP/2).
pub async fn serve<S>(
    proxy: Rc<WorkerProxy>,
    listener: ListenerId,
    scheme: &'static str,
    stream: S,
    read: BytesMut,
    Client { peer, identity }: Client,
    connections: Rc<Connections>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let control = connections.register(listener);
    let mut io = Watched::new(stream, control.clone(), connections);
    let limits = proxy.snapshot().client.limits;
    let head_limits = AnswerLimits {
        headers: limits.headers,
        bytes: limits.bytes,
    };
    let connection = Rc::new(RefCell::new(Connection::serve(head_limits, limits.streams)));
    let client = Rc::new(ClientConnection::new(listener, peer, scheme, identity));
    let mut reader = Reader::new(Stage::Preface, read);
    let mut answers = FuturesUnordered::new();
    let mut draining = false;
    poll_fn(|cx| {
        loop {
            control.remember(cx.waker());
            if control.is_idle() {
                tracing::debug!(%peer, "closing idle HTTP/2 connection");
                return Poll::Ready(());
            }
            if control.should_drain() && !draining {
                draining = true;
                connection.borrow_mut().go_away();
            }
            let polled = poll_drive(cx, &mut io, &connection, &mut reader);
            start_requests(&proxy, &client, &connection, &mut answers);
            let queued = connection.borrow().out.len();
            while let Poll::Ready(Some(())) = answers.poll_next_unpin(cx) {}
            if polled.is_ready() {
                return Poll::Ready(());
            }
            // Answers that queued frames have them written now, not on the next wake.
            if connection.borrow().out.len() == queued {
                return Poll::Pending;
            }
        }
    })
    .await;
    close(&mut io, &connection).await;
}

/// A request's answer as the connection's task runs it. It ends early, its work (the backend
/// exchange among it) dropped, once its stream is cancelled: the client reset it, or the
/// connection ended.
struct Answering {
    connection: Rc<RefCell<Connection>>,
    id: u32,
    answer: Pin<Box<dyn Future<Output = ()>>>,
}

impl Future for Answering {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        {
            let mut connection = self.connection.borrow_mut();
            let Some(stream) = connection.streams.get_mut(&self.id) else {
                return Poll::Ready(());
            };
            if stream.cancelled {
                return Poll::Ready(());
            }
            if !stream
                .answer
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                stream.answer = Some(cx.waker().clone());
            }
        }
        self.answer.as_mut().poll(cx)
    }
}

/// Starts answering each request whose head came, unless the client reset it already.
fn start_requests(
    proxy: &Rc<WorkerProxy>,
    client: &Rc<ClientConnection>,
    connection: &Rc<RefCell<Connection>>,
    answers: &mut FuturesUnordered<Answering>,
) {
    let mut accepted = match &mut connection.borrow_mut().side {
        Side::Server(serving) if !serving.accepted.is_empty() => {
            std::mem::take(&mut serving.accepted)
        }
        _ => return,
    };
    for Accepted { id, head, body } in accepted.drain(..) {
        let sender = StreamRef::sending(connection.clone(), id);
        if sender.is_stopped() {
            continue;
        }
        let request = head.map(|head| {
            let body = match body {
                true => {
                    let length = content_length(head.headers());
                    RequestBody::h2(Http2Body::new(sender.reader(), length))
                }
                false => RequestBody::empty(),
            };
            head.map(|()| body)
        });
        // Boxed: the pipeline's future is kilobytes, and a box is moved as one pointer.
        answers.push(Answering {
            connection: connection.clone(),
            id,
            answer: Box::pin(answer(proxy.clone(), client.clone(), sender, request)),
        });
    }
    // The list's room serves the next requests.
    if let Side::Server(serving) = &mut connection.borrow_mut().side {
        serving.accepted = accepted;
    }
}

/// Answers one request: through the pipeline, or 431 for a head past the limits.
async fn answer(
    proxy: Rc<WorkerProxy>,
    client: Rc<ClientConnection>,
    stream: StreamRef,
    request: Option<Request<RequestBody>>,
) {
    let head_request = request.as_ref().is_some_and(|r| r.method() == Method::HEAD);
    let answer = match request {
        Some(request) => proxy.handle(&client, request).await,
        None => ProxyError::HeadTooLarge.response(),
    };
    respond(&stream, answer, head_request).await;
}

/// Writes `answer` on its stream: its HEADERS (with `date`, and `content-length` when the body
/// knows its length and the answer did not say it, as hyper's server adds them), its body as
/// DATA under both windows, its trailers. A body that breaks resets the stream (with a
/// backend's own reason when it was a reset), so the client never takes a cut answer for a
/// whole one.
async fn respond(stream: &StreamRef, answer: Response<ProxyBody>, head_request: bool) {
    let (head, body) = answer.into_parts();
    let bodiless = head_request
        || matches!(
            head.status,
            StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED
        );
    let end = bodiless || body.is_end_stream();
    let length = match bodiless {
        true => None,
        false => body.size_hint().exact(),
    };
    let date = crate::h1::date::now();
    stream.send_head(end, |block| {
        block.response(head.status, &head.headers, Some(&date), length)
    });
    if end {
        return;
    }
    let mut body = pin!(body);
    if let Err(error) = pump(&mut body, stream).await {
        stream.reset(reset_reason(&error));
    }
}

/// The code a stream whose answer broke is reset with: a backend's own, when its reset broke
/// it, else INTERNAL_ERROR.
fn reset_reason(error: &BodyFailure) -> Reason {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error.as_ref());
    while let Some(error) = source {
        if let Some(reason) = error
            .downcast_ref::<h2::Error>()
            .and_then(h2::Error::reason)
        {
            return reason;
        }
        source = error.source();
    }
    Reason::INTERNAL_ERROR
}
