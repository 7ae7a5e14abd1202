//! One request's way through a worker: the snapshot of the moment, the route, its pipeline,
//! its target, the access log.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use http::uri::PathAndQuery;
use http::{Request, Response, Uri};
use hyper::body::Incoming;

use super::body::{ProxyBody, RequestBody};
use super::filter::{Exchange, Step};
use super::headers::ClientForwarding;
use super::upgrade::Handover;
use super::upstream::Upstreams;
use super::{path, validate};
use crate::error::ProxyError;
use crate::snapshot::{ListenerId, Snapshot, WorkerSnapshot};

/// What the proxy knows of one client connection.
pub struct ClientConnection {
    /// The listener it arrived on.
    pub listener: ListenerId,
    pub peer: SocketAddr,
    pub forwarding: ClientForwarding,
    /// The tunnel of a relayed 101, once there is one.
    pub handover: Handover,
}

impl ClientConnection {
    /// `scheme` is what the client spoke (`http`, or `https` behind TLS), for `X-Forwarded-Proto`.
    pub fn new(listener: ListenerId, peer: SocketAddr, scheme: &'static str) -> Self {
        ClientConnection {
            listener,
            peer,
            forwarding: ClientForwarding::new(peer, scheme),
            handover: Handover::default(),
        }
    }
}

/// One worker's proxy: the configuration it serves now and its own upstream connections.
pub struct WorkerProxy {
    /// Which shard of every per-worker counter this worker writes.
    pub id: usize,
    pub upstreams: Upstreams,
    /// The own HTTP/1 engine's kept-alive upstream streams.
    pub raw: crate::h1::upstream::Streams,
    /// The snapshot new requests use; requests in flight keep the one they started with.
    current: RefCell<Rc<WorkerSnapshot>>,
    /// Time zero of the clock given to latency-aware rules.
    epoch: Instant,
}

impl WorkerProxy {
    pub fn new(id: usize, snapshot: Arc<Snapshot>, epoch: Instant) -> Self {
        WorkerProxy {
            id,
            upstreams: Upstreams::new(id),
            raw: Default::default(),
            current: RefCell::new(Rc::new(WorkerSnapshot(snapshot))),
            epoch,
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

    /// Answers one client request.
    pub async fn handle(
        self: Rc<Self>,
        connection: Rc<ClientConnection>,
        request: Request<Incoming>,
    ) -> Response<ProxyBody> {
        let snapshot = self.snapshot();
        let began = Instant::now();
        let method = snapshot
            .client
            .access_log
            .then(|| (request.method().clone(), request.uri().clone()));
        let (response, backend, route) = self.pipeline(&snapshot, &connection, request).await;
        // One clock reading for the listener's and the route's metrics and the access log.
        let micros = crate::metrics::micros_since(began);
        let status = response.status().as_u16();
        if let Some(route) = route {
            route.mine(self.id).record(status, micros);
        }
        if let Some(stats) = snapshot.metrics.listener_stats(connection.listener) {
            stats.mine(self.id).traffic.record(status, micros);
        }
        if let Some((method, uri)) = method {
            let trace_id = response.extensions().get::<super::trace::TraceId>();
            log_access(
                connection.peer,
                &method,
                &uri,
                status,
                backend,
                trace_id,
                micros,
            );
        }
        response
    }

    /// The answer, the backend that gave it, and the route's metrics when a route took it.
    async fn pipeline<'s>(
        &self,
        snapshot: &'s Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        mut request: Request<Incoming>,
    ) -> (
        Response<ProxyBody>,
        Option<SocketAddr>,
        Option<&'s crate::metrics::RouteTraffic>,
    ) {
        let Some(routes) = snapshot.http_routes(connection.listener) else {
            return (no_route(snapshot, &request), None, None);
        };
        if let Some(refusal) = validate::refusal(&request) {
            return (refuse(refusal, snapshot, &request), None, None);
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
            Ok(Some(normal)) => normalize_uri(request.uri_mut(), &normal),
            Err(path::Ambiguous) => {
                return (
                    refuse(ProxyError::AmbiguousPath, snapshot, &request),
                    None,
                    None,
                );
            }
        }
        let Some((route, captures)) = routes.find(&request) else {
            return (no_route(snapshot, &request), None, None);
        };
        let mut request = request.map(RequestBody::streaming);
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
                route
                    .target
                    .serve(self, snapshot, connection, request)
                    .await
            }
        };
        for filter in route.filters[..ran].iter().rev() {
            filter.on_response(&mut response, &exchange);
        }
        (response, backend, Some(&route.traffic))
    }
}

/// trafik's 404. No route means no pipeline, so the hop trace, when on, is written here.
fn no_route(snapshot: &Snapshot, request: &Request<Incoming>) -> Response<ProxyBody> {
    refuse(ProxyError::NoRoute, snapshot, request)
}

/// trafik's answer to a request no route saw, with the hop chain when tracing is on.
fn refuse(
    error: ProxyError,
    snapshot: &Snapshot,
    request: &Request<Incoming>,
) -> Response<ProxyBody> {
    let mut response = error.response();
    if let Some(trace) = &snapshot.trace {
        trace.mark_own_answer(&mut response, &trace.extend(request.headers()));
    }
    response
}

/// Replaces the URI's path with its normal form, keeping the query (and the authority of an
/// absolute-form URI).
fn normalize_uri(uri: &mut Uri, normal: &str) {
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

/// One access-log line (target `trafik::access`), the same from either HTTP/1 engine.
pub(crate) fn log_access(
    client: SocketAddr,
    method: &dyn std::fmt::Display,
    uri: &dyn std::fmt::Display,
    status: u16,
    backend: Option<SocketAddr>,
    trace_id: Option<&super::trace::TraceId>,
    micros: u64,
) {
    tracing::info!(
        target: "trafik::access",
        client = %client,
        method = %method,
        uri = %uri,
        status,
        backend = backend.map(|b| b.to_string()).unwrap_or_default(),
        trace_id = trace_id.map(ToString::to_string).unwrap_or_default(),
        micros,
    );
}
