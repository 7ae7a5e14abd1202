//! One request's way through a worker: route, pick, connect (retrying elsewhere on connect
//! failure), relay, count.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use http::header::{self, HeaderValue};
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use trafik_balance::PickContext;

use super::body::ProxyBody;
use super::headers::{ClientForwarding, append_via, remove_hop_by_hop};
use super::key::request_key;
use super::route::RouteTable;
use super::upstream::{InFlight, Lease, Upstreams};
use crate::error::ProxyError;
use crate::plan::ClientPlan;
use crate::pool::Pool;
use crate::sticky::Decision;

/// What every worker shares: the pools, each listener's routes and the client settings.
pub struct Shared {
    pub pools: Vec<Arc<Pool>>,
    pub routes: Vec<RouteTable>,
    pub client: ClientPlan,
    /// `1.1 NAME`, added to `Via` in both directions.
    pub via: HeaderValue,
    /// Time zero of the clock given to latency-aware rules.
    pub epoch: Instant,
}

/// What the proxy knows of one client connection.
pub struct ClientConnection {
    /// Index of the listener it arrived on.
    pub listener: usize,
    pub peer: SocketAddr,
    pub forwarding: ClientForwarding,
}

impl ClientConnection {
    pub fn new(listener: usize, peer: SocketAddr) -> Self {
        ClientConnection {
            listener,
            peer,
            forwarding: ClientForwarding::new(peer),
        }
    }
}

/// A worker's proxy: the shared state plus the worker's own upstream connections.
pub struct WorkerProxy {
    pub shared: Arc<Shared>,
    pub upstreams: Upstreams,
}

/// The response for a failure, with the status and text [`ProxyError`] gives it.
pub fn error_response(error: ProxyError) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::local(error.body()));
    *response.status_mut() = error.status();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

impl WorkerProxy {
    /// Answers one client request on listener `listener`.
    pub async fn handle(
        self: Rc<Self>,
        connection: Rc<ClientConnection>,
        request: Request<Incoming>,
    ) -> Response<ProxyBody> {
        let client = connection.peer;
        let started = self.shared.client.access_log.then(Instant::now);
        let method = started.map(|_| (request.method().clone(), request.uri().clone()));
        let (response, backend) = self.proxy(&connection, request).await;
        if let (Some(started), Some((method, uri))) = (started, method) {
            tracing::info!(
                target: "trafik::access",
                client = %client,
                method = %method,
                uri = %uri,
                status = response.status().as_u16(),
                backend = backend.map(|b| b.to_string()).unwrap_or_default(),
                micros = started.elapsed().as_micros() as u64,
            );
        }
        response
    }

    async fn proxy(
        &self,
        connection: &ClientConnection,
        mut request: Request<Incoming>,
    ) -> (Response<ProxyBody>, Option<SocketAddr>) {
        let shared = &self.shared;
        let client = connection.peer;
        let Some(route) = shared.routes[connection.listener].find(&request) else {
            return (error_response(ProxyError::NoRoute), None);
        };
        let pool_index = route.pool;
        let pool = &shared.pools[pool_index];
        let retries = if request.method().is_idempotent() || route.retry_non_idempotent {
            pool.plan.retries
        } else {
            0
        };
        let mut context = PickContext::default();
        if pool.needs_key()
            && let Some(key) = &pool.plan.hash_key
        {
            context.key = request_key(key, &request, client);
        }
        let timed = pool.plan.algorithm.uses_latency();
        // Cookie stickiness: a bound client skips the rule; an unbound one gets a cookie.
        let (mut bound, mut bind) = match &pool.sticky {
            Some(sticky) => match sticky.decide(request.headers(), &pool.backends, &context) {
                Decision::Bound(index) => (Some(index), false),
                Decision::Bind => (None, sticky.uses_cookie()),
            },
            None => (None, false),
        };
        self.prepare(connection, &mut request);

        let mut failure = ProxyError::NoHealthyBackend;
        for _attempt in 0..=retries {
            if timed {
                context.now = self.now();
            }
            let picked = match bound.take() {
                Some(index) => Some(index),
                None => match pool
                    .sticky
                    .as_ref()
                    .and_then(|s| s.pick_by_key(&pool.backends, &context))
                {
                    Some(by_key) => by_key,
                    None => pool.selector.pick(&pool.backends, &context),
                },
            };
            let Some(index) = picked else {
                break;
            };
            Pool::count(&pool.stats[index].decisions);
            let in_flight = self.upstreams.start(pool_index, index);
            let address = pool.address(index);
            let sent_at = timed.then(Instant::now);
            match self.send(pool_index, pool, index, in_flight, request).await {
                Ok(mut response) => {
                    if let Some(sent_at) = sent_at {
                        pool.selector.observe(index, sent_at.elapsed(), self.now());
                    }
                    if bind
                        && let Some(cookie) = pool.sticky.as_ref().and_then(|s| s.cookie_for(index))
                    {
                        response.headers_mut().append(header::SET_COOKIE, cookie);
                    }
                    return (response, Some(address));
                }
                Err(Failure::Connect(returned)) => {
                    if !bind && let Some(sticky) = &pool.sticky {
                        // The bound backend cannot be reached: its session is lost.
                        bind = sticky.lose_session();
                    }
                    Pool::count(&pool.stats[index].failures);
                    tracing::debug!(pool = %pool.plan.name, backend = %address, "connect failed");
                    context.tried.insert(index);
                    failure = ProxyError::ConnectFailed;
                    request = *returned;
                }
                Err(Failure::Answered(error)) => {
                    Pool::count(&pool.stats[index].failures);
                    return (error_response(error), Some(address));
                }
            }
        }
        if failure.is_unreachable() {
            Pool::count(&pool.unreachable);
        }
        (error_response(failure), None)
    }

    fn now(&self) -> trafik_balance::Nanos {
        self.shared.epoch.elapsed().as_nanos() as u64
    }

    /// Rewrites a client request into the one sent upstream.
    fn prepare(&self, connection: &ClientConnection, request: &mut Request<Incoming>) {
        // Upstream requests use origin form; the authority moves to `Host` if it was absent.
        if request.uri().scheme().is_some() {
            let authority = request.uri().authority().map(|a| a.as_str().to_owned());
            let path = request
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned();
            if let Ok(uri) = path.parse::<Uri>() {
                *request.uri_mut() = uri;
            }
            if let (Some(authority), false) =
                (authority, request.headers().contains_key(header::HOST))
                && let Ok(value) = HeaderValue::from_str(&authority)
            {
                request.headers_mut().insert(header::HOST, value);
            }
        }
        let headers = request.headers_mut();
        remove_hop_by_hop(headers);
        connection.forwarding.apply(
            headers,
            self.shared.client.trust_forwarded,
            &self.shared.via,
        );
    }

    /// Sends the request to backend `index` on a pooled or new connection.
    async fn send(
        &self,
        pool_index: usize,
        pool: &Arc<Pool>,
        index: usize,
        in_flight: InFlight,
        mut request: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, Failure> {
        // A pooled connection the backend closed while idle hands the request back unsent;
        // that is no failure of the backend, so it is tried once more on a new connection.
        let mut fresh = false;
        loop {
            let mut checkout = match self
                .upstreams
                .checkout(pool_index, pool, index, fresh)
                .await
            {
                Ok(checkout) => checkout,
                Err(_) => return Err(Failure::Connect(Box::new(request))),
            };
            let sent = tokio::time::timeout(
                pool.plan.response_timeout,
                checkout.sender.try_send_request(request),
            )
            .await;
            match sent {
                Err(_elapsed) => return Err(Failure::Answered(ProxyError::UpstreamTimeout)),
                Ok(Ok(response)) => {
                    Pool::count(&pool.stats[index].requests);
                    let lease = checkout.into_lease(in_flight);
                    return Ok(self.relay(response, lease));
                }
                Ok(Err(mut error)) => match error.take_message() {
                    Some(unsent) if !fresh => {
                        fresh = true;
                        request = unsent;
                    }
                    _ => return Err(Failure::Answered(ProxyError::UpstreamFailed)),
                },
            }
        }
    }

    fn relay(&self, response: Response<Incoming>, lease: Lease) -> Response<ProxyBody> {
        let (mut parts, body) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers);
        append_via(&mut parts.headers, &self.shared.via);
        Response::from_parts(parts, ProxyBody::upstream(body, lease))
    }
}

/// Why sending to one backend did not produce a response to relay.
enum Failure {
    /// No connection could be made; the untouched request comes back for a retry.
    Connect(Box<Request<Incoming>>),
    /// The backend was reached but failed; the client gets this error.
    Answered(ProxyError),
}
