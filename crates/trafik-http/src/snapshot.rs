//! The configuration in force, as one immutable value. Workers, health checks and the admin API
//! read the newest [`Snapshot`]; a reload builds the next one beside it (carrying over what must
//! survive) and publishes it, while requests in flight finish on the one they started with.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use http::HeaderValue;
use tokio_rustls::TlsAcceptor;

pub use crate::connections::ListenerId;
use crate::http::cache::Jobs;
use crate::http::filter::{self, Trace};
use crate::http::mirror::Mirror;
use crate::http::policy::{self, GateStats, GlobalLimitStats};
use crate::http::route::{Route, RouteTable, StepKinds};
use crate::http::routing::RoutingStats;
use crate::http::target::Target;
use crate::plan::{ClientPlan, ListenerKind, Plan};
use crate::pool::{Endpoints, Pool, PoolSet};
use crate::resolve::{self, Stateful};
use trafik_l4::route::SniRoutes;
use trafik_l4::{Destination, Layer4Snapshot};

/// A worker's own handle on the snapshot it serves: cloning the `Rc` per request touches no
/// count shared with other workers, as cloning the `Arc` would.
pub struct WorkerSnapshot(pub Arc<Snapshot>);

impl std::ops::Deref for WorkerSnapshot {
    type Target = Snapshot;

    fn deref(&self) -> &Snapshot {
        &self.0
    }
}

impl PoolSet for WorkerSnapshot {
    fn pools(&self) -> &[Arc<Pool>] {
        &self.0.pools
    }
}

impl Layer4Snapshot for WorkerSnapshot {
    fn destination(&self, listener: ListenerId) -> Option<Destination<'_>> {
        match self.listener(listener)? {
            Listener::Tcp { pool } => Some(Destination::Pool(*pool)),
            Listener::TlsPassthrough { routes } => Some(Destination::ByServerName(routes)),
            Listener::Http { .. } | Listener::Https { .. } | Listener::H3 { .. } => None,
        }
    }

    fn header_read_timeout(&self) -> Duration {
        self.client.header_read_timeout
    }

    fn drain_timeout(&self) -> Duration {
        self.drain_timeout
    }

    fn access_log(&self) -> bool {
        self.client.access_log
    }
}

/// Everything the data plane serves, as of one load of the configuration.
pub struct Snapshot {
    /// 1 for the configuration trafik started with, one more for every reload.
    pub generation: u64,
    pub loaded_at: SystemTime,
    /// The file it came from, if any.
    pub file: Option<String>,
    pub name: String,
    pub pools: Vec<Arc<Pool>>,
    listeners: Vec<(ListenerId, Listener)>,
    pub client: ClientPlan,
    /// `1.1 NAME`, added to `Via` in both directions; a static value, so cloning it per request
    /// touches no shared counter.
    pub via: HeaderValue,
    /// The hop chain, when `[server] trace_header` is set (a step of every route, and the 404).
    pub trace: Option<Trace>,
    /// `2 NAME`, for requests received over HTTP/2 (`Via` names the protocol a hop received).
    pub via_http2: HeaderValue,
    pub via_http3: HeaderValue,
    pub drain_timeout: Duration,
    /// Edge caches and static sites of the routes, with their state, and the gateway routes'
    /// counters.
    pub stateful: Stateful,
    /// Origin fetches for the workers to run (preloads, refreshes); one queue for the life of
    /// the instance.
    pub jobs: Arc<Jobs>,
    /// The counters of every route's gate, for `/status` and `/metrics` (they start again at
    /// zero with each reload).
    pub gates: Vec<GateStats>,
    /// The counters of every route's CORS and compression steps, likewise.
    pub edge: policy::EdgeStats,
    /// The counters of every route's global rate limit (Redis answered, failed, or was not
    /// asked while it was down), likewise.
    pub global_limits: Vec<GlobalLimitStats>,
    /// The routing counters of every route with address rules, a mirror or a split, likewise.
    pub routing: Vec<RoutingStats>,
    /// The connection caps of the listeners that have any, by listener.
    connection_limits: Vec<(ListenerId, Arc<crate::admission::ConnectionLimit>)>,
    /// The listeners and routes with their golden metrics.
    pub metrics: crate::metrics::Registry,
    /// The trace-context step every route runs.
    pub trace_context: crate::http::trace::TraceContext,
    /// The admin API's token, which a request must carry to get its own explanation
    /// (`x-trafik-explain`); without one, no request gets any.
    pub admin_token: Option<crate::admin_token::AdminToken>,
}

/// What a listener does with its connections, resolved.
pub enum Listener {
    Http {
        routes: RouteTable,
    },
    /// TLS ends here, then the same HTTP as `Http`.
    Https {
        routes: RouteTable,
        tls: TlsAcceptor,
        /// With mutual TLS: the headers that carry a client certificate's identity.
        identity: Option<Arc<crate::tls::IdentityHeaders>>,
        /// `h3=":PORT"` when an h3 listener serves the same address: every answer says so,
        /// and browsers move to HTTP/3.
        alt_svc: Option<HeaderValue>,
    },
    /// HTTP/3 over QUIC, the same routes as `Http`.
    H3 {
        routes: RouteTable,
        quic: Arc<quinn::ServerConfig>,
        /// With mutual TLS: the headers that carry a client certificate's identity.
        identity: Option<Arc<crate::tls::IdentityHeaders>>,
    },
    /// Layer 4: every connection to the pool at this index of [`Snapshot::pools`].
    Tcp {
        pool: usize,
    },
    /// Layer 4 behind the ClientHello's server name, which chooses the pool.
    TlsPassthrough {
        routes: SniRoutes,
    },
}

impl Listener {
    /// The scheme its clients speak, for `X-Forwarded-Proto`.
    pub fn scheme(&self) -> &'static str {
        match self {
            Listener::Http { .. } => "http",
            Listener::Https { .. } | Listener::H3 { .. } => "https",
            Listener::Tcp { .. } => "tcp",
            Listener::TlsPassthrough { .. } => "tls",
        }
    }
}

impl PoolSet for Snapshot {
    fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }
}

impl Snapshot {
    /// Builds the snapshot for `plan`. `listeners` gives each plan listener's id, in plan order;
    /// `previous` is the snapshot in force, whose pools hand their state to the pools of the
    /// same name.
    pub fn build(
        plan: &Plan,
        listeners: &[ListenerId],
        previous: Option<&Snapshot>,
        endpoints: &Endpoints,
        generation: u64,
        file: Option<String>,
    ) -> Result<Snapshot, Vec<String>> {
        let mut errors = Vec::new();
        let via = static_via("1.1", &plan.name).unwrap_or_else(|message| {
            errors.push(message);
            HeaderValue::from_static("1.1 trafik")
        });
        let trace = match (&plan.trace_header, HeaderValue::from_str(&plan.name)) {
            (Some(header), Ok(name)) => Some(Trace::new(header.clone(), name)),
            // A name that cannot be a header value is reported with Via above.
            _ => None,
        };
        let via_http2 = static_via("2", &plan.name).unwrap_or(HeaderValue::from_static("2 trafik"));
        let via_http3 = static_via("3", &plan.name).unwrap_or(HeaderValue::from_static("3 trafik"));
        let pools: Vec<Arc<Pool>> = plan
            .pools
            .iter()
            .map(|pool| {
                let before = previous.and_then(|p| p.pool(&pool.name));
                match before {
                    // Unchanged: the same pool goes on, with its requests in flight, its rule's
                    // state (the round-robin turn, latency estimates) and everything else.
                    Some(before) if before.plan == *pool => before.clone(),
                    _ => Arc::new(Pool::new(pool.clone(), before.map(|p| &**p), endpoints)),
                }
            })
            .collect();
        let by_name: HashMap<&str, usize> = pools
            .iter()
            .enumerate()
            .map(|(index, pool)| (pool.plan.name.as_str(), index))
            .collect();
        let mut stateful = Stateful::default();
        let context = resolve::Context {
            pools: &by_name,
            previous: previous.map(|p| &p.stateful),
            workers: plan.workers.max(1),
        };
        let mut resolved = Vec::with_capacity(plan.listeners.len());
        let mut gates = Vec::new();
        let mut edge = policy::EdgeStats::default();
        let mut global_limits = Vec::new();
        let mut routing = Vec::new();
        let mut metrics = crate::metrics::Registry::default();
        let trace_context = crate::http::trace::TraceContext::new(
            &plan.tracing,
            previous.map(|p| &p.trace_context),
        )
        .unwrap_or_else(|error| {
            errors.push(error);
            crate::http::trace::TraceContext::default()
        });
        for (listener, &id) in plan.listeners.iter().zip(listeners) {
            metrics.add_listener(
                id,
                &listener.name,
                previous.map(|p| &p.metrics),
                plan.workers.max(1),
            );
            let routes = match &listener.kind {
                ListenerKind::Http { .. }
                | ListenerKind::Https { .. }
                | ListenerKind::H3 { .. } => listener.kind.routes(),
                ListenerKind::Tcp { pool } => {
                    match trafik_l4::tcp_listener(&listener.name, pool, &by_name) {
                        Ok(pool) => resolved.push((id, Listener::Tcp { pool })),
                        Err(error) => errors.push(error),
                    }
                    continue;
                }
                ListenerKind::TlsPassthrough { routes } => {
                    match trafik_l4::passthrough_listener(&listener.name, routes, &by_name) {
                        Ok(routes) => resolved.push((id, Listener::TlsPassthrough { routes })),
                        Err(error) => errors.push(error),
                    }
                    continue;
                }
            };
            let mut table = Vec::with_capacity(routes.len());
            for route in routes {
                let target = match resolve::target(
                    &route.target,
                    &listener.name,
                    route,
                    &context,
                    &mut stateful,
                ) {
                    Ok(target) => target,
                    Err(error) => {
                        errors.push(format!("listener {:?}: {error}", listener.name));
                        continue;
                    }
                };
                for unsettable in route.filters.iter().filter_map(filter::unsettable_header) {
                    errors.push(format!(
                        "listener {:?}: a route sets {unsettable}, which trafik manages itself",
                        listener.name
                    ));
                }
                let mut filters = filter::built_in(trace.as_ref());
                filters.push(Box::new(trace_context.clone()));
                let matched = route.matched_text();
                let label = format!("{} {matched}", listener.name);
                let mut stats = policy::Stats {
                    route: &label,
                    workers: plan.workers,
                    gates: &mut gates,
                    global_limits: &mut global_limits,
                    edge: &mut edge,
                };
                for (index, configured) in route.filters.iter().enumerate() {
                    match filter::build(configured, &route.filters[index + 1..], &mut stats) {
                        Ok(built) => filters.push(built),
                        Err(error) => errors.push(format!("route {label}: {error}")),
                    }
                }
                let traffic = metrics.add_route(
                    &listener.name,
                    matched,
                    previous.map(|p| &p.metrics),
                    plan.workers.max(1),
                );
                let uses_routing =
                    !route.routing.access.is_empty() || route.routing.mirror.is_some();
                let split = match &target {
                    Target::Split(split) => Some(split.stats.clone()),
                    _ => None,
                };
                let routing_counters = (uses_routing || split.is_some())
                    .then(|| Arc::new(crate::counters::PerWorker::new(plan.workers.max(1))));
                let mirror = route.routing.mirror.as_ref().and_then(|mirror| {
                    let Some(&pool) = by_name.get(mirror.pool.as_str()) else {
                        errors.push(format!(
                            "route {label}: its mirror names pool {:?}, which does not exist",
                            mirror.pool
                        ));
                        return None;
                    };
                    let counters = routing_counters.clone()?;
                    Some(Mirror::new(mirror, pool, plan.workers.max(1), counters))
                });
                if let Some(counters) = &routing_counters {
                    routing.push(RoutingStats {
                        route: label.clone(),
                        counters: counters.clone(),
                        mirror_pool: route.routing.mirror.as_ref().map(|m| m.pool.clone()),
                        split,
                    });
                }
                table.push(Route {
                    traffic,
                    host: route.host.clone(),
                    path_prefix: route.path_prefix.clone(),
                    path_template: route.path_template.clone(),
                    methods: route.methods.clone(),
                    steps: StepKinds::of(&filters),
                    filters,
                    target,
                    routing: route.routing.clone(),
                    mirror,
                    routing_counters: routing_counters.filter(|_| uses_routing),
                });
            }
            let routes = RouteTable::new(table);
            let resolved_listener = match &listener.kind {
                ListenerKind::Https {
                    certificates,
                    managed,
                    client_auth,
                    ..
                } => {
                    match crate::tls::server::acceptor(certificates, managed, client_auth.as_ref())
                    {
                        Ok(tls) => Listener::Https {
                            routes,
                            tls,
                            identity: client_auth.as_ref().map(|auth| auth.headers.clone()),
                            alt_svc: alt_svc(plan, listener.address),
                        },
                        Err(error) => {
                            errors.push(format!("listener {:?}: {error}", listener.name));
                            continue;
                        }
                    }
                }
                ListenerKind::H3 {
                    certificates,
                    managed,
                    client_auth,
                    ..
                } => {
                    match crate::tls::server::quic(
                        certificates,
                        managed,
                        client_auth.as_ref(),
                        (plan.client.idle_timeout, plan.client.limits.streams),
                    ) {
                        Ok(quic) => Listener::H3 {
                            routes,
                            quic,
                            identity: client_auth.as_ref().map(|auth| auth.headers.clone()),
                        },
                        Err(error) => {
                            errors.push(format!("listener {:?}: {error}", listener.name));
                            continue;
                        }
                    }
                }
                _ => Listener::Http { routes },
            };
            resolved.push((id, resolved_listener));
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let connection_limits = plan
            .listeners
            .iter()
            .zip(listeners)
            .filter_map(|(listener, &id)| {
                let kept = previous
                    .and_then(|p| p.connection_limit(id))
                    .filter(|limit| limit.limits == listener.connections)
                    .filter(|limit| limit.listener == listener.name);
                let limit = match kept {
                    Some(limit) => limit.clone(),
                    None => crate::admission::ConnectionLimit::new(
                        &listener.name,
                        listener.connections,
                    )?,
                };
                Some((id, limit))
            })
            .collect();
        Ok(Snapshot {
            generation,
            loaded_at: SystemTime::now(),
            file,
            name: plan.name.clone(),
            pools,
            listeners: resolved,
            client: plan.client.clone(),
            via,
            trace,
            via_http2,
            via_http3,
            drain_timeout: plan.drain_timeout,
            stateful,
            jobs: previous.map(|p| p.jobs.clone()).unwrap_or_default(),
            gates,
            edge,
            global_limits,
            routing,
            connection_limits,
            metrics,
            trace_context,
            admin_token: plan.admin_token.clone(),
        })
    }

    /// The connection caps of listener `id`, when it has any.
    pub fn connection_limit(
        &self,
        id: ListenerId,
    ) -> Option<&Arc<crate::admission::ConnectionLimit>> {
        self.connection_limits
            .iter()
            .find(|(known, _)| *known == id)
            .map(|(_, limit)| limit)
    }

    /// Every listener's connection caps, for the admin API.
    pub fn connection_limits(
        &self,
    ) -> impl Iterator<Item = &Arc<crate::admission::ConnectionLimit>> {
        self.connection_limits.iter().map(|(_, limit)| limit)
    }

    pub fn listener(&self, id: ListenerId) -> Option<&Listener> {
        self.listeners
            .iter()
            .find(|(known, _)| *known == id)
            .map(|(_, listener)| listener)
    }

    /// The `Alt-Svc` value an HTTPS listener's answers carry to advertise its h3 twin.
    pub fn alt_svc(&self, id: ListenerId) -> Option<&HeaderValue> {
        match self.listener(id)? {
            Listener::Https { alt_svc, .. } => alt_svc.as_ref(),
            _ => None,
        }
    }

    /// The ids of the listeners, in the order of the plan.
    pub fn listener_ids(&self) -> impl Iterator<Item = ListenerId> + '_ {
        self.listeners.iter().map(|(id, _)| *id)
    }

    /// The route table of HTTP listener `id`.
    pub fn http_routes(&self, id: ListenerId) -> Option<&RouteTable> {
        match self.listener(id)? {
            Listener::Http { routes }
            | Listener::Https { routes, .. }
            | Listener::H3 { routes, .. } => Some(routes),
            Listener::Tcp { .. } | Listener::TlsPassthrough { .. } => None,
        }
    }

    pub fn pool(&self, name: &str) -> Option<&Arc<Pool>> {
        self.pools.iter().find(|pool| pool.plan.name == name)
    }
}

/// What an https listener at `address` advertises when an h3 listener of `plan` serves the same
/// address on UDP: `h3=":PORT"` (the same host, RFC 7838), kept a day. Not with port 0, where
/// the two would be bound to different free ports.
fn alt_svc(plan: &Plan, address: std::net::SocketAddr) -> Option<HeaderValue> {
    plan.listeners
        .iter()
        .find(|other| other.kind.is_udp() && other.address == address && address.port() != 0)
        .and_then(|h3| {
            HeaderValue::from_str(&format!("h3=\":{}\"; ma=86400", h3.address.port())).ok()
        })
}

/// `PROTOCOL NAME` as a static header value. Each distinct value is leaked once per process (a
/// handful of bytes), so a clone is a plain copy rather than a shared reference count.
fn static_via(protocol: &str, name: &str) -> Result<HeaderValue, String> {
    static KNOWN: OnceLock<Mutex<HashMap<String, &'static str>>> = OnceLock::new();
    let text = format!("{protocol} {name}");
    HeaderValue::from_str(&text)
        .map_err(|_| format!("instance name {name:?} cannot be written in a Via header"))?;
    let mut known = KNOWN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let leaked: &'static str = known
        .entry(text)
        .or_insert_with_key(|text| Box::leak(text.clone().into_boxed_str()));
    Ok(HeaderValue::from_static(leaked))
}
