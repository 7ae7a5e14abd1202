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
use crate::http::field_maps;
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
            start_requests(&connection, &mut answers, |stream, request| {
                answer(proxy.clone(), client.clone(), stream, request)
            });
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
/// connection ended. Its future's box goes back to the worker's spares when it ends.
struct Answering<F> {
    connection: Rc<RefCell<Connection>>,
    id: u32,
    /// Taken when the answer ends.
    answer: Option<Pin<Box<Option<F>>>>,
}

impl<F: Future<Output = ()> + 'static> Future for Answering<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let cancelled = match this.connection.borrow_mut().streams.get_mut(&this.id) {
            Some(stream) if !stream.cancelled => {
                if !stream
                    .answer
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    stream.answer = Some(cx.waker().clone());
                }
                false
            }
            _ => true,
        };
        if !cancelled
            && let Some(answering) = this.answer.as_mut().and_then(|a| a.as_mut().as_pin_mut())
        {
            std::task::ready!(answering.poll(cx));
        }
        this.end();
        Poll::Ready(())
    }
}

impl<F: 'static> Answering<F> {
    /// Drops the answer's future where it is and gives its box back.
    fn end(&mut self) {
        if let Some(mut answer) = self.answer.take() {
            answer.set(None);
            spare_answers::give_back(answer);
        }
    }
}

/// Boxes for answer futures, kept by each worker for its next requests: an answer's future is
/// kilobytes (the whole pipeline's state), which glibc's allocator serves on its slow path, from
/// memory no longer in the cache, and a box of that size taken every request also makes it merge
/// its small free chunks every time.
mod spare_answers {
    use std::any::Any;
    use std::cell::OnceCell;
    use std::pin::Pin;

    use crate::spares::Spares;

    /// Boxes a worker keeps: as many answers as end together, up to this (about 670 KiB): a
    /// box taken new is written whole, kilobytes a request, where a kept one takes only the
    /// request.
    const KEPT: usize = 128;

    type Boxes<F> = Spares<Pin<Box<Option<F>>>>;

    thread_local! {
        /// Typed by the one answer future there is; `Any` as a thread-local cannot name it.
        static SPARES: OnceCell<Box<dyn Any>> = const { OnceCell::new() };
    }

    /// A spare box, empty, or a new one.
    pub(super) fn take<F: 'static>() -> Pin<Box<Option<F>>> {
        SPARES
            .with(|spares| {
                spares
                    .get()
                    .and_then(|spares| spares.downcast_ref::<Boxes<F>>())
                    .and_then(Spares::take)
            })
            .unwrap_or_else(|| Box::pin(None))
    }

    /// Keeps an emptied box for the next answer, unless enough are kept or the thread's own
    /// values are gone (a worker ending).
    pub(super) fn give_back<F: 'static>(answer: Pin<Box<Option<F>>>) {
        let _ = SPARES.try_with(|spares| {
            let spares = spares.get_or_init(|| Box::new(Boxes::<F>::new(KEPT)));
            if let Some(spares) = spares.downcast_ref::<Boxes<F>>() {
                spares.keep(answer);
            }
        });
    }
}

/// Starts answering each request whose head came, unless the client reset it already.
fn start_requests<F: Future<Output = ()> + 'static>(
    connection: &Rc<RefCell<Connection>>,
    answers: &mut FuturesUnordered<Answering<F>>,
    answer: impl Fn(StreamRef, Option<Request<RequestBody>>) -> F,
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
        let mut boxed = spare_answers::take();
        boxed.set(Some(answer(sender, request)));
        answers.push(Answering {
            connection: connection.clone(),
            id,
            answer: Some(boxed),
        });
    }
    // The list's room serves the next requests.
    if let Side::Server(serving) = &mut connection.borrow_mut().side {
        serving.accepted = accepted;
    }
}

/// Answers one request: through the pipeline, or 431 for a head past the limits.
#[allow(clippy::manual_async_fn)] // see the block below
fn answer(
    proxy: Rc<WorkerProxy>,
    client: Rc<ClientConnection>,
    stream: StreamRef,
    request: Option<Request<RequestBody>>,
) -> impl Future<Output = ()> {
    // A block that owns the arguments: an `async fn` keeps each one twice in its future.
    async move {
        let head_request = request.as_ref().is_some_and(|r| r.method() == Method::HEAD);
        let answer = match request {
            Some(request) => proxy.handle(&client, request).await,
            None => ProxyError::HeadTooLarge.response(),
        };
        // The head is written before the first await, so the answer is not kept in the future.
        if let Some(body) = send_head(&stream, answer, head_request) {
            let mut body = pin!(body);
            if let Err(error) = pump(&mut body, &stream).await {
                stream.reset(reset_reason(&error));
            }
        }
    }
}

/// Writes `answer`'s HEADERS on its stream (with `date`, and `content-length` when the body
/// knows its length and the answer did not say it, as hyper's server adds them); its body when
/// DATA is to follow, which [`answer`] pumps under both windows, trailers last. A body that
/// breaks resets the stream (with a backend's own reason when it was a reset), so the client
/// never takes a cut answer for a whole one.
fn send_head(
    stream: &StreamRef,
    answer: Response<ProxyBody>,
    head_request: bool,
) -> Option<ProxyBody> {
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
    field_maps::give_back(head.headers);
    (!end).then_some(body)
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

#[cfg(test)]
mod tests {
    use std::future::Ready;

    use super::spare_answers;

    #[test]
    fn an_answer_box_given_back_is_taken_again_empty() {
        let mut boxed = spare_answers::take::<Ready<()>>();
        boxed.set(Some(std::future::ready(())));
        boxed.set(None);
        let kept: *const Option<Ready<()>> = &*boxed;
        spare_answers::give_back(boxed);
        let again = spare_answers::take::<Ready<()>>();
        assert!(std::ptr::eq(&*again, kept), "the same box");
        assert!(again.is_none());
        let new = spare_answers::take::<Ready<()>>();
        assert!(!std::ptr::eq(&*new, kept), "none kept twice");
    }
}
