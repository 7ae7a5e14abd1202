//! One request's way through a worker: the snapshot of the moment, the route, its pipeline,
//! its target, the access log.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use http::uri::PathAndQuery;
use http::{Request, Response, Uri, Version};

use super::body::{ProxyBody, RequestBody};
use super::filter::{Exchange, Step};
use super::headers::ClientForwarding;
use super::upgrade::Handover;
use super::upstream::Upstreams;
use super::{path, validate};
use crate::error::ProxyError;
use crate::http::body::ErrorAnswer;
use crate::pool::Call;
use crate::snapshot::{ListenerId, Snapshot, WorkerSnapshot};
use crate::tls::ClientIdentity;
use crate::tls::acme;

/// What the proxy knows of one client connection.
pub struct ClientConnection {
    /// The listener it arrived on.
    pub listener: ListenerId,
    pub peer: SocketAddr,
    pub forwarding: ClientForwarding,
    /// On a listener with mutual TLS: what the client's certificate proved, written on each
    /// request by the forwarding step.
    pub identity: Option<Arc<ClientIdentity>>,
    /// The tunnel of a relayed 101, once there is one.
    pub handover: Handover,
}

impl ClientConnection {
    /// `scheme` is what the client spoke (`http`, or `https` behind TLS), for `X-Forwarded-Proto`.
    pub fn new(
        listener: ListenerId,
        peer: SocketAddr,
        scheme: &'static str,
        identity: Option<Arc<ClientIdentity>>,
    ) -> Self {
        ClientConnection {
            listener,
            peer,
            forwarding: ClientForwarding::new(peer, scheme),
            identity,
            handover: Handover::default(),
        }
    }
}

/// One worker's proxy: the configuration it serves now and its own upstream connections.
pub struct WorkerProxy {
    /// Which shard of every per-worker counter this worker writes.
    pub id: usize,
    pub upstreams: Upstreams,
    /// The kept-alive HTTP/1.1 upstream streams, the fast path's and the pipeline's.
    pub raw: Rc<crate::transport::idle::Streams>,
    /// Mirrored copies waiting for the worker's mirror task ([`super::mirror::run`]).
    pub mirrors: super::mirror::Outbox,
    /// The snapshot new requests use; requests in flight keep the one they started with.
    current: RefCell<Rc<WorkerSnapshot>>,
    /// Time zero of the clock given to latency-aware rules.
    epoch: Instant,
}

impl WorkerProxy {
    pub fn new(id: usize, snapshot: Arc<Snapshot>, epoch: Instant) -> Self {
        let raw = Rc::new(crate::transport::idle::Streams::default());
        WorkerProxy {
            id,
            upstreams: Upstreams::new(id, raw.clone()),
            raw,
            mirrors: Default::default(),
            current: RefCell::new(Rc::new(WorkerSnapshot(snapshot))),
            epoch,
        }
    }

    /// This worker as the layer-4 path knows it.
    pub fn worker(&self) -> trafik_l4::Worker {
        trafik_l4::Worker {
            id: self.id,
            epoch: self.epoch,
        }
    }

    /// The snapshot for a new request.
    pub fn snapshot(&self) -> Rc<WorkerSnapshot> {
        self.current.borrow().clone()
    }

    /// Serves new requests from `snapshot` on.
    pub fn publish(&self, snapshot: Arc<Snapshot>) {
        *self.current.borrow_mut() = Rc::new(WorkerSnapshot(snapshot));
    }

    pub fn now(&self) -> trafik_balance::Nanos {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Starts a request's way through the pool at `pool` of `snapshot` ([`Call`]), its clock
    /// started at `began`, with what the request gives the rules and the backend it is bound to.
    pub fn call<'s>(
        &self,
        snapshot: &'s Rc<WorkerSnapshot>,
        pool: usize,
        began: Instant,
        context: trafik_balance::PickContext,
        bound: Option<usize>,
    ) -> Result<Call<'s>, ProxyError> {
        Call::start(snapshot, pool, self.id, self.epoch, began, context, bound)
    }

    /// Answers one client request, whichever engine read it.
    #[allow(clippy::manual_async_fn)] // see the block below
    pub fn handle(
        &self,
        connection: &ClientConnection,
        mut request: Request<RequestBody>,
    ) -> impl Future<Output = Response<ProxyBody>> {
        // A block that owns the arguments: an `async fn` keeps each one twice in its future (as
        // given and as its own binding), a request's size at every level above.
        async move {
            let snapshot = self.snapshot();
            let began = Instant::now();
            // Told before the request is served, so the pick told is the pick about to be taken
            // (the clock is read only for a request that asks).
            let explanation = crate::explain::asked_for(
                &snapshot,
                connection.listener,
                &mut request,
                connection.peer,
                || self.now(),
            );
            let method = snapshot.client.access_log.then(|| {
                let host = super::route::request_authority(&request).map(str::to_owned);
                (request.method().clone(), request.uri().clone(), host)
            });
            let grpc = super::grpc::is_grpc(request.headers());
            let (mut response, backend, route) =
                self.pipeline(&snapshot, connection, request).await;
            if let Some(alt_svc) = snapshot.alt_svc(connection.listener) {
                response
                    .headers_mut()
                    .insert(http::header::ALT_SVC, alt_svc.clone());
            }
            // One clock reading for the listener's and the route's metrics and the access log.
            let micros = crate::metrics::micros_since(began);
            let status = response.status().as_u16();
            if let Some(route) = route {
                route.mine(self.id).record(status, micros);
            }
            if let Some(stats) = snapshot.metrics.listener_stats(connection.listener) {
                stats.mine(self.id).traffic.record(status, micros);
            }
            let mut response = match grpc {
                true => super::grpc::own_answer(response),
                false => response,
            };
            if let Some(explanation) = explanation {
                response
                    .headers_mut()
                    .insert(crate::explain::EXPLAIN_HEADER, explanation);
            }
            match method {
                Some((method, uri, host)) => {
                    let line = AccessLine {
                        client: connection.peer,
                        method,
                        host,
                        uri: uri.to_string(),
                        status,
                        backend,
                        picked: response.extensions().get::<Picked>().copied(),
                        trace_id: response
                            .extensions()
                            .get::<super::trace::TraceId>()
                            .copied(),
                        began,
                        micros,
                    };
                    response.map(|body| ProxyBody::logged(body, line))
                }
                None => response,
            }
        }
    }

    /// The answer, the backend that gave it, and the route's metrics when a route took it.
    #[allow(clippy::manual_async_fn)] // see the block below
    fn pipeline<'s>(
        &self,
        snapshot: &'s Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        mut request: Request<RequestBody>,
    ) -> impl Future<
        Output = (
            Response<ProxyBody>,
            Option<SocketAddr>,
            Option<&'s crate::metrics::RouteTraffic>,
        ),
    > {
        // A block that owns the arguments: an `async fn` keeps each one twice in its future (as
        // given and as its own binding), a request's size at every level above.
        async move {
            let Some(routes) = snapshot.http_routes(connection.listener) else {
                return (no_route(snapshot, &request), None, None);
            };
            if let Some(refusal) = validate::refusal(&request) {
                return (refuse(refusal, snapshot, &request), None, None);
            }
            // hyper's HTTP/2 server (engine = "hyper") and h3 bound a head in bytes only: its
            // fields are counted here, against the limit HTTP/1.1's parser applies.
            if request.version() >= Version::HTTP_2
                && request.headers().len() > snapshot.client.limits.headers
            {
                return (
                    refuse(ProxyError::HeadTooLarge, snapshot, &request),
                    None,
                    None,
                );
            }
            if validate::loops_back(request.headers(), &snapshot.name) {
                return (
                    refuse(ProxyError::LoopDetected, snapshot, &request),
                    None,
                    None,
                );
            }
            match path::normalize(request.uri().path()) {
                Ok(None) => {}
                Ok(Some(normal)) => replace_path(request.uri_mut(), &normal),
                Err(path::Ambiguous) => {
                    return (
                        refuse(ProxyError::AmbiguousPath, snapshot, &request),
                        None,
                        None,
                    );
                }
            }
            // The listener's own step before routing: a CA's HTTP-01 check of a name trafik orders a
            // certificate for (RFC 8555 §8.3) is answered whatever the routes say.
            if let Some(answer) = acme_challenge(&request).await {
                return (answer, None, None);
            }
            // A verified client certificate's headers replace whatever the client sent under their
            // names before routing: a route matching them reads the verified identity, never a
            // forged one.
            if let Some(identity) = &connection.identity {
                identity.apply(request.headers_mut());
            }
            let client = super::route::client_address(
                connection.peer,
                request.headers(),
                snapshot.client.trust_forwarded,
            );
            let Some((route, captures)) = routes.find(&request, client) else {
                return (no_route(snapshot, &request), None, None);
            };
            if let Some(counters) = &route.routing_counters
                && !super::routing::admitted(&route.routing.access, client, counters, self.id)
            {
                let refusal = super::policy::refusal(
                    http::StatusCode::FORBIDDEN,
                    "this client may not use this route",
                );
                return (refusal, None, Some(&route.traffic));
            }
            if let Some(captures) = captures {
                request.extensions_mut().insert(captures);
            }
            request
                .body_mut()
                .min_rate(snapshot.client.limits.min_body_rate);
            let exchange = Exchange {
                connection,
                snapshot,
                worker: self.id,
                notes: RefCell::default(),
            };
            let mut ran = route.filters.len();
            let mut answer = None;
            for (index, filter) in route.filters.iter().enumerate() {
                let mut step = filter.on_request(&mut request, &exchange);
                if let Step::Wait = step {
                    step = filter.wait(&mut request, &exchange).await;
                }
                if let Step::Respond(response) = step {
                    (ran, answer) = (index, Some(*response));
                    break;
                }
            }
            let (mut response, backend) = match answer {
                Some(response) => (response, None),
                None => {
                    if let Some(mirror) = &route.mirror {
                        mirror.copy(self, snapshot, connection, &mut request);
                    }
                    route
                        .target
                        .serve(self, snapshot, connection, request)
                        .await
                }
            };
            super::filter::answer_back(&route.filters, ran, &mut response, &exchange);
            (response, backend, Some(&route.traffic))
        }
    }
}

/// The key authorization of a pending HTTP-01 challenge the request asks for.
async fn acme_challenge(request: &Request<RequestBody>) -> Option<Response<ProxyBody>> {
    let path = request.uri().path();
    if !path.starts_with(acme::CHALLENGE_PATH) || request.method() != http::Method::GET {
        return None;
    }
    let key_authorization = acme::registry().answer_http_anywhere(path).await?;
    let mut response = Response::new(ProxyBody::local(bytes::Bytes::from(key_authorization)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/octet-stream"),
    );
    Some(response)
}

/// trafik's 404. No route means no pipeline, so the hop trace, when on, is written here.
fn no_route(snapshot: &Snapshot, request: &Request<RequestBody>) -> Response<ProxyBody> {
    refuse(ProxyError::NoRoute, snapshot, request)
}

/// trafik's answer to a request no route saw, with the hop chain when tracing is on.
fn refuse(
    error: ProxyError,
    snapshot: &Snapshot,
    request: &Request<RequestBody>,
) -> Response<ProxyBody> {
    let mut response = error.response();
    if let Some(trace) = &snapshot.trace {
        trace.mark_own_answer(&mut response, &trace.extend(request.headers()));
    }
    response
}

/// Replaces the URI's path, keeping the query (and the authority of an absolute-form URI).
pub(crate) fn replace_path(uri: &mut Uri, normal: &str) {
    let with_query = match uri.query() {
        Some(query) => format!("{normal}?{query}"),
        None => normal.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = PathAndQuery::try_from(with_query).ok();
    if let Ok(rebuilt) = Uri::from_parts(parts) {
        *uri = rebuilt;
    }
}

/// What a pool's rules read of a request, for its access-log line: the hash key the rule
/// placed it by and the backend its sticky cookie bound it to — what `trafik plan --replay`
/// needs to place the request again.
#[derive(Clone, Copy, Default)]
pub(crate) struct Picked {
    pub key: Option<u64>,
    pub sticky: Option<SocketAddr>,
}

/// One request's access-log line (target `trafik::access`), the same on every engine. It is
/// written when the answer's body has ended, or was dropped unfinished, so it carries both
/// durations: `micros` to the answer's head, `micros_to_last_byte` to its last byte (absent when
/// the body never finished: the client went away, or the backend broke it).
pub(crate) struct AccessLine {
    pub client: SocketAddr,
    pub method: http::Method,
    /// The `Host` the request named (with its port), or its URI's authority.
    pub host: Option<String>,
    pub uri: String,
    pub status: u16,
    pub backend: Option<SocketAddr>,
    pub picked: Option<Picked>,
    pub trace_id: Option<super::trace::TraceId>,
    pub began: Instant,
    pub micros: u64,
}

impl AccessLine {
    /// Writes the line; `ended` is when the body's last byte went out, if it did. The hash key
    /// is written as the rule's 64-bit key (`0x…`, the value `trafik explain` shows), never the
    /// header, cookie or query value it came from: a token used as a key stays out of the log,
    /// and the key is all a replay needs to place the request on another ring.
    pub fn write(self, ended: Option<Instant>) {
        let micros_to_last_byte =
            ended.map(|ended| crate::metrics::micros_between(self.began, ended));
        let picked = self.picked.unwrap_or_default();
        let started = std::time::SystemTime::now()
            .checked_sub(self.began.elapsed())
            .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |since| since.as_micros() as u64);
        tracing::info!(
            target: "trafik::access",
            client = %self.client,
            method = %self.method,
            host = self.host.as_deref().unwrap_or_default(),
            uri = %self.uri,
            status = self.status,
            backend = self.backend.map(|b| b.to_string()).unwrap_or_default(),
            key = picked.key.map(|key| format!("{key:#018x}")).unwrap_or_default(),
            sticky = picked.sticky.map(|b| b.to_string()).unwrap_or_default(),
            started_unix_micros = started,
            trace_id = self.trace_id.map(|t| t.to_string()).unwrap_or_default(),
            micros = self.micros,
            micros_to_last_byte,
        );
    }
}
