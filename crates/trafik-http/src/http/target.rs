//! Where a route sends what it matched: a pool, or one of the gateway's targets; static content
//! comes as a further variant of [`Target`].

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::FutureExt;
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::Body;
use http_body_util::BodyExt;

use super::body::{ProxyBody, RequestBody, Upload, UploadState};
use super::gateway::aggregate::AggregateTarget;
use super::gateway::ambassador::AmbassadorTarget;
use super::gateway::service::ServiceTarget;
use super::retry;
use super::service::{ClientConnection, Picked, WorkerProxy};
use super::upgrade::{ClientUpgrade, Tunnel};
use super::upstream::{Checkout, UpstreamBody};
use crate::counters::{BackendCounters, bump};
use crate::error::{Cause, ProxyError};
use crate::http::body::ErrorAnswer;
use crate::plan::AnswerLimits;
use crate::pool::InFlight;
use crate::pool::Pool;
use crate::snapshot::WorkerSnapshot;
use crate::view::Selection;

/// A route's destination.
pub enum Target {
    Pool(PoolTarget),
    /// The gateway's: a service of the map, an aggregate, an ambassador ([`super::gateway`]).
    Service(ServiceTarget),
    Aggregate(AggregateTarget),
    Ambassador(AmbassadorTarget),
    /// Files under a directory.
    Static(Arc<super::files::Site>),
    /// Another target behind an edge cache.
    Cached(super::cache::CachedTarget),
    /// Pools by weight (a canary).
    Split(super::routing::SplitTarget),
    /// An answer sending the client elsewhere.
    Redirect(super::routing::RedirectTarget),
}

impl Target {
    /// Serves the request; the address is the backend that answered, for the access log.
    #[allow(clippy::manual_async_fn)] // see the block below
    pub fn serve(
        &self,
        worker: &WorkerProxy,
        snapshot: &Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        request: Request<RequestBody>,
    ) -> impl Future<Output = (Response<ProxyBody>, Option<SocketAddr>)> {
        // A block that owns the arguments: an `async fn` keeps each one twice in its future (as
        // given and as its own binding), a request's size at every level above.
        async move {
            // The targets whose futures are larger than a pool's are boxed: every request's future
            // carries the size of the largest, and an HTTP/2 request's is copied whole once.
            match self {
                Target::Pool(pool) => pool.serve(worker, snapshot, connection, request).await,
                Target::Service(service) => {
                    Box::pin(service.serve(worker, snapshot, connection, request)).await
                }
                Target::Aggregate(aggregate) => {
                    Box::pin(aggregate.serve(worker, snapshot, connection, request)).await
                }
                Target::Ambassador(ambassador) => {
                    Box::pin(ambassador.serve(worker, snapshot, connection, request)).await
                }
                Target::Static(site) => {
                    let path = request.uri().path();
                    let answer = site.serve(worker.id, request.method(), path, request.headers());
                    (answer.await.into_response(), None)
                }
                Target::Cached(cached) => {
                    Box::pin(cached.serve(worker, snapshot, connection, request)).await
                }
                Target::Split(split) => {
                    Box::pin(split.serve(worker, snapshot, connection, request)).await
                }
                Target::Redirect(redirect) => (redirect.serve(connection, &request), None),
            }
        }
    }
}

/// A pool of backends: stickiness, then the pool's rule, then connect and relay, with retries
/// elsewhere when connecting fails.
pub struct PoolTarget {
    /// Index into [`Snapshot::pools`].
    pub pool: usize,
    pub retry_non_idempotent: bool,
}

/// Why sending to one backend did not produce a response to relay.
enum Failure {
    /// No connection could be made (why); the untouched body comes back for a retry.
    Connect(RequestBody, Cause),
    /// The backend was reached, or the client gave up; the client gets this error.
    Answered(ProxyError),
}

impl PoolTarget {
    /// Also the way the gateway's targets call a pool ([`super::gateway::fetch`]). The pool's
    /// rules run in its [`Call`]; the pool's golden metrics count every answer, trafik's own
    /// 502/503 included.
    #[allow(clippy::manual_async_fn)] // see the block below
    pub(crate) fn serve(
        &self,
        worker: &WorkerProxy,
        snapshot: &Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        mut request: Request<RequestBody>,
    ) -> impl Future<Output = (Response<ProxyBody>, Option<SocketAddr>)> {
        // A block that owns the arguments: an `async fn` keeps each one twice in its future (as
        // given and as its own binding), a request's size at every level above.
        async move {
            let began = Instant::now();
            let pool = &snapshot.pools[self.pool];
            // Every return goes through this: the pool's metrics (an inner async fn would cost a
            // move of its whole future per request).
            let mut selection = Selection::of(pool, &request, connection.peer);
            // What the access log writes of the pick, carried to it on the answer.
            let picked = snapshot.client.access_log.then(|| Picked {
                key: selection.context.key,
                sticky: selection.bound.map(|index| pool.address(index)),
            });
            // `ended`: the clock reading the answer came at, when one was taken.
            let answered = |mut response: Response<ProxyBody>, backend, ended: Option<Instant>| {
                if let Some(picked) = picked {
                    response.extensions_mut().insert(picked);
                }
                let status = response.status().as_u16();
                let served = pool.served.mine(worker.id);
                served.answered(status, began, ended.unwrap_or_else(Instant::now));
                (response, backend)
            };
            let mut call = match worker.call(
                snapshot,
                self.pool,
                began,
                selection.context,
                selection.bound,
            ) {
                Ok(call) => call,
                Err(refused) => return answered(refused.response(), None, None),
            };
            // A failed connect sent nothing, so any request may go elsewhere; one a backend lost
            // after receiving it only if it may be repeated.
            let replayable =
                retry::replayable(&request, pool.plan.retries, self.retry_non_idempotent);
            let upload = request.body().upload();
            // A gRPC call's deadline bounds the wait for its answer on every attempt.
            let call_deadline = super::grpc::timeout(request.headers())
                .map(|timeout| tokio::time::Instant::from_std(began) + timeout);
            // Set aside before sending: the request carries only what the next hop reads.
            let mut client_upgrade = request.extensions_mut().remove::<ClientUpgrade>();
            // The head is lent to each attempt and stays here: a request sent again is sent
            // with it and an empty body.
            let (head, mut body) = request.into_parts();
            let mut head = LentHead(head);
            while let Some(mut attempt) = call.next().await {
                let address = pool.address(attempt.index);
                let limits = snapshot.client.upstream_limits;
                let sent = send(
                    worker,
                    pool,
                    attempt.index,
                    (&mut head.0, body),
                    upload.as_ref(),
                    replayable,
                    (limits, call_deadline),
                );
                match sent.await {
                    Ok(Answered {
                        answer,
                        checkout,
                        first,
                    }) => {
                        let status = answer.status().as_u16();
                        let answered_at = Instant::now();
                        call.answered(&mut attempt, status, answered_at);
                        let retried = call.retry_answer(
                            &mut attempt,
                            status,
                            answer.headers().contains_key(header::RETRY_AFTER),
                            replayable.then_some(()),
                        );
                        if retried.is_some() {
                            drop((answer, checkout, attempt));
                            body = RequestBody::empty();
                            continue;
                        }
                        let (index, counters, sent_at) =
                            (attempt.index, attempt.counters, attempt.sent_at);
                        let relayed = relay(
                            Answered {
                                answer,
                                checkout,
                                first,
                            },
                            attempt.in_flight,
                            upload.clone(),
                            client_upgrade.take(),
                            connection,
                            counters,
                        );
                        let mut response = match relayed {
                            Ok(response) => response,
                            Err(error) => {
                                bump(&counters.failures);
                                let blame = error.cause().map(|cause| pool.blame(index, cause));
                                return answered(
                                    error.response_blaming(blame.as_ref()),
                                    Some(address),
                                    Some(answered_at),
                                );
                            }
                        };
                        call.settled(index, sent_at, answered_at);
                        if let Some(cookie) = selection.cookie(pool, index) {
                            response.headers_mut().append(header::SET_COOKIE, cookie);
                        }
                        return answered(response, Some(address), Some(answered_at));
                    }
                    Err(Failure::Connect(returned, cause)) => {
                        selection.connect_failed(pool);
                        call.connect_failed(attempt, cause);
                        body = returned;
                    }
                    Err(Failure::Answered(error)) => {
                        match call.lost(attempt, error, replayable.then_some(())) {
                            Ok(()) => body = RequestBody::empty(),
                            Err(error) => {
                                let blame = call.blame();
                                return answered(
                                    error.response_blaming(blame.as_ref()),
                                    Some(address),
                                    None,
                                );
                            }
                        }
                    }
                }
            }
            let blame = call.blame();
            answered(call.failure().response_blaming(blame.as_ref()), None, None)
        }
    }
}

/// A request's head, lent to each attempt, whose field map goes back to the worker's spares
/// once the call has ended, whichever way it did.
struct LentHead(Parts);

impl Drop for LentHead {
    fn drop(&mut self) {
        super::field_maps::give_back(std::mem::take(&mut self.0.headers));
    }
}

/// A backend's answer, with the connection it came on and, when it was waited for, the first
/// piece of its body.
struct Answered {
    answer: Response<UpstreamBody>,
    checkout: Checkout,
    first: Option<Bytes>,
}

/// Turns a backend's answer into the client's: its body streams back on the connection, which
/// returns to the idle stack at its end; a 101 to a request that asked to switch protocols
/// hands both connections to a [`Tunnel`] instead, for the client connection to run.
fn relay(
    answered: Answered,
    mut in_flight: InFlight,
    upload: Option<Rc<Upload>>,
    client_upgrade: Option<ClientUpgrade>,
    connection: &ClientConnection,
    counters: &BackendCounters,
) -> Result<Response<ProxyBody>, ProxyError> {
    let Answered {
        mut answer,
        checkout,
        first,
    } = answered;
    if answer.status() != StatusCode::SWITCHING_PROTOCOLS {
        let lease = checkout.into_lease(in_flight, upload);
        let trailers = super::grpc::is_grpc(answer.headers());
        return Ok(answer.map(|body| ProxyBody::upstream(body, first, lease, trailers)));
    }
    let client = client_upgrade.ok_or(ProxyError::UnexpectedUpgrade)?;
    // A switch has no body to wait for the end of.
    in_flight.answer_ended();
    connection
        .handover
        .put(Tunnel::new(client, &mut answer, in_flight));
    bump(&counters.upgrades);
    Ok(answer.map(|body| ProxyBody::Upstream {
        body,
        first: None,
        lease: None,
        trailers: false,
    }))
}

/// Says `Transfer-Encoding: chunked` for a body whose length is not known (one the client sent
/// chunked): hyper's client frames such a body chunked on its own, except for GET, HEAD and
/// CONNECT, which it sends with no body at all, while the client's bytes were read and dropped.
/// Forwarded as nginx and HAProxy do, the backend judges the body it was sent.
fn frame_a_body_of_unknown_length(head: &mut Parts, body: &RequestBody) {
    if body.is_end_stream()
        || body.size_hint().exact().is_some()
        || head.headers.contains_key(header::CONTENT_LENGTH)
    {
        return;
    }
    head.headers.insert(
        header::TRANSFER_ENCODING,
        HeaderValue::from_static("chunked"),
    );
}

/// Makes a request fit an HTTP/2 backend: its version, and `te: trailers` kept for gRPC, which
/// needs it (the only `TE` HTTP/2 allows; the hop-by-hop step removed the client's). The
/// HTTP/2 client writes the rest as its request block: `:authority` from `Host`, the pool's
/// scheme, no connection-specific field.
fn for_http2(head: &mut Parts) {
    head.version = http::Version::HTTP_2;
    if super::grpc::is_grpc(&head.headers) {
        head.headers
            .insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// Sends the request to backend `index` on a pooled or new connection, its head lent (it stays
/// the caller's, to send again) and its body given; the answer comes back with the connection
/// it arrived on. For a request that may be sent again (`replayable`,
/// which is bodiless), an answer whose body has a length comes only with the first piece of
/// that body, within the same response timeout: a backend that closes before it lost the
/// request, which may go elsewhere, for its client has seen nothing yet (as on the own engine).
#[allow(clippy::manual_async_fn)] // see the block below
fn send(
    worker: &WorkerProxy,
    pool: &Pool,
    index: usize,
    (head, mut body): (&mut Parts, RequestBody),
    upload: Option<&Rc<Upload>>,
    replayable: bool,
    (limits, call_deadline): (AnswerLimits, Option<tokio::time::Instant>),
) -> impl Future<Output = Result<Answered, Failure>> {
    // A block that owns the arguments: an `async fn` keeps each one twice in its future (as
    // given and as its own binding), a request's size at every level above.
    async move {
        frame_a_body_of_unknown_length(head, &body);
        // An HTTP/3 request goes on as HTTP/1.1 (an h2 pool's connection makes it HTTP/2 below);
        // hyper's HTTP/1 client writes an HTTP/2 request as 1.1 but refuses HTTP/3.
        if head.version == http::Version::HTTP_3 {
            head.version = http::Version::HTTP_11;
        }
        // A pooled connection the backend closed while idle hands the request back unsent, as an
        // HTTP/2 backend does one it never processed; that is no failure of the backend, so it is
        // tried once more (on a new connection, or on an HTTP/2 one that takes streams).
        let mut fresh = false;
        loop {
            let mut checkout = match worker.upstreams.checkout(pool, index, fresh, limits).await {
                Ok(checkout) => checkout,
                Err(error) => {
                    return Err(Failure::Connect(body, Cause::of_connect(&error)));
                }
            };
            if checkout.sender.is_http2() {
                for_http2(head);
            }
            let sending = checkout.sender.try_send_request(head, body);
            tokio::pin!(sending);
            // The response timeout counts from when the request has been sent in full: a slow
            // upload is the client's time, not the backend's.
            let mut deadline = tokio::time::Instant::now() + pool.plan.response_timeout;
            // A gRPC call's deadline also bounds a slow upload (a client stream).
            let call_deadline = call_deadline.unwrap_or(deadline + pool.plan.response_timeout);
            deadline = deadline.min(call_deadline);
            // One timer per request that has no body to upload: `deadline` already ends by the
            // call's.
            let answered = match upload {
                None => tokio::time::timeout_at(deadline, &mut sending).await.ok(),
                Some(upload) => {
                    let answering = async {
                        tokio::select! {
                            biased;
                            answered = &mut sending => Some(answered),
                            () = upload.finished() => {
                                let deadline = (tokio::time::Instant::now()
                                    + pool.plan.response_timeout)
                                    .min(call_deadline);
                                tokio::time::timeout_at(deadline, &mut sending).await.ok()
                            }
                        }
                    };
                    tokio::time::timeout_at(call_deadline, answering)
                        .await
                        .ok()
                        .flatten()
                }
            };
            match answered {
                None => return Err(Failure::Answered(ProxyError::UpstreamTimeout)),
                Some(Ok(mut answer)) => {
                    let body_to_wait_for = replayable
                        && answer
                            .body()
                            .size_hint()
                            .exact()
                            .is_some_and(|length| length > 0);
                    let first = match body_to_wait_for {
                        false => None,
                        true => {
                            // Most often the piece came with the head: no timer for it then.
                            let ready = answer.body_mut().frame().now_or_never();
                            let frame = match ready {
                                Some(frame) => Ok(frame),
                                None => {
                                    tokio::time::timeout_at(deadline, answer.body_mut().frame())
                                        .await
                                }
                            };
                            match frame {
                                Err(_elapsed) => {
                                    return Err(Failure::Answered(ProxyError::UpstreamTimeout));
                                }
                                // A trailer frame cannot come first in a body with a length.
                                Ok(Some(Ok(frame))) => frame.into_data().ok(),
                                Ok(_) => return Err(Failure::Answered(ProxyError::UpstreamFailed)),
                            }
                        }
                    };
                    return Ok(Answered {
                        answer,
                        checkout,
                        first,
                    });
                }
                Some(Err(mut error)) => match error.take_unsent() {
                    Some(unsent) if !fresh => {
                        fresh = true;
                        body = unsent;
                    }
                    _ => {
                        return Err(Failure::Answered(match upload.map(|u| u.state()) {
                            Some(UploadState::ClientFailed) => ProxyError::ClientAborted,
                            Some(UploadState::TooLarge) => ProxyError::RequestBodyTooLarge,
                            Some(UploadState::TooSlow) => ProxyError::BodyTooSlow,
                            _ => ProxyError::UpstreamFailed,
                        }));
                    }
                },
            }
        }
    }
}
