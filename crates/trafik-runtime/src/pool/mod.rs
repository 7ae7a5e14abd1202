//! A pool at run time: its backends' shared state, its selection rule and its counters.
//!
//! A pool is rebuilt on every reload; what must survive (health, drain state, counters,
//! sticky sessions) is matched by pool name and backend address and carried into the new one.

mod call;
pub mod concurrency;
pub mod explain;
pub mod keep_alive;
pub mod key;
pub mod outlier;
pub mod retry;
pub mod sticky;
pub mod timeline;
pub mod view;

pub use call::{Attempt, Call, InFlight};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::{Arc, Mutex};

use trafik_balance::{BackendSet, PickContext, Selector};

use crate::counters::{BackendCounters, PerWorker};
use crate::outlier::{PassiveHealth, SlowStart};
use crate::plan::{PoolPlan, UpstreamProtocol};
use crate::sticky::Sticky;
use crate::tls::backend::BackendTls;
use retry::Retrying;

/// The pools of one configuration in force, as the layer above holds them (its snapshot): a
/// request's in-flight mark keeps them alive by an `Rc` of the worker's own, which touches no
/// count shared with other workers.
pub trait PoolSet {
    fn pools(&self) -> &[Arc<Pool>];
}

/// One upstream address, whatever pools name it, and how it is spoken to (plain, or TLS with
/// given settings). Idle connections are kept per endpoint, so a backend shared by two pools
/// shares its kept-alive connections too, unless their TLS settings differ.
#[derive(Debug)]
pub struct Endpoint {
    /// Dense and never reused: workers index their idle lists by it.
    pub id: usize,
    pub address: SocketAddr,
    /// Upstream TCP connections open to it.
    pub open_connections: PerWorker<AtomicI64>,
}

/// Every endpoint this process has connected to, by [`EndpointKey`]. It only grows: an id stays
/// valid for connections of an old configuration still in flight.
pub struct Endpoints {
    workers: usize,
    by_address: Mutex<HashMap<EndpointKey, Arc<Endpoint>>>,
}

/// An address, the HTTP spoken to it, and the [`BackendTls::identity`] of the TLS spoken to it
/// (none for plain): an h2c connection must not serve an HTTP/1.1 pool.
type EndpointKey = (SocketAddr, UpstreamProtocol, Option<String>);

impl Endpoints {
    pub fn new(workers: usize) -> Self {
        Endpoints {
            workers,
            by_address: Mutex::default(),
        }
    }

    /// The endpoint for `address` spoken to with `protocol` and `tls`, created on first use.
    pub fn get(
        &self,
        address: SocketAddr,
        protocol: UpstreamProtocol,
        tls: Option<&BackendTls>,
    ) -> Arc<Endpoint> {
        let mut known = self.by_address.lock().unwrap_or_else(|p| p.into_inner());
        let next = known.len();
        known
            .entry((address, protocol, tls.map(BackendTls::identity)))
            .or_insert_with(|| {
                Arc::new(Endpoint {
                    id: next,
                    address,
                    open_connections: PerWorker::new(self.workers),
                })
            })
            .clone()
    }
}

/// One backend of a pool.
pub struct Backend {
    pub endpoint: Arc<Endpoint>,
    pub name: Option<String>,
    pub counters: Arc<PerWorker<BackendCounters>>,
    /// Its changes of state, for the admin API.
    pub timeline: Arc<timeline::Timeline>,
}

/// trafik's own 5xx answers for a pool, by why: where a pool's errors came from when its
/// backends did not send them.
#[derive(Debug, Default)]
pub struct OwnErrors {
    counts: [AtomicU64; OwnErrors::REASONS.len()],
}

impl OwnErrors {
    /// The reasons counted, as `/status` names them.
    pub const REASONS: [&'static str; 6] = [
        "unreachable",
        "no-healthy-backend",
        "timeout",
        "no-answer",
        "limit",
        "other",
    ];

    /// Counts trafik's own answer for `error`, when it is a 5xx.
    pub fn count(&self, error: crate::error::ProxyError) {
        use crate::error::ProxyError as E;
        if !error.status().is_server_error() {
            return;
        }
        let slot = match error {
            E::ConnectFailed => 0,
            E::NoHealthyBackend => 1,
            E::UpstreamTimeout => 2,
            E::UpstreamFailed => 3,
            E::BackendsAtLimit | E::QueueFull | E::QueueTimeout | E::ConcurrencyLimited => 4,
            _ => 5,
        };
        self.counts[slot].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Each reason with its count.
    pub fn counts(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Self::REASONS
            .iter()
            .zip(&self.counts)
            .map(|(reason, count)| (*reason, count.load(std::sync::atomic::Ordering::Relaxed)))
    }
}

/// A pick decided before the pool's rule ([`Pool::preset`]).
pub enum Preset<T> {
    /// The request's cookie binds it to this backend.
    Bound(usize),
    /// Key stickiness: the key's home, or the next available backend.
    ByKey(T),
}

/// One pool, shared by every worker, the health checker and the admin API.
pub struct Pool {
    pub plan: PoolPlan,
    pub backends: BackendSet,
    pub members: Box<[Backend]>,
    pub selector: Box<dyn Selector>,
    /// Present when the pool binds clients to backends.
    pub sticky: Option<Sticky>,
    /// Requests answered 502/503 because no backend could be reached.
    pub unreachable: Arc<PerWorker<AtomicU64>>,
    /// Whether the rule reads requests in flight, so the set's counts must be kept.
    pub tracks_in_flight: bool,
    /// Outlier ejection, unless the pool turned it off.
    pub passive: Option<PassiveHealth>,
    /// The retry budget and its counters.
    pub retrying: Retrying,
    /// Requests answered 503 because every backend was at `max_requests_per_backend`.
    pub at_limit: Arc<PerWorker<AtomicU64>>,
    /// trafik's own 5xx answers, by why.
    pub own_errors: Arc<OwnErrors>,
    /// Backends ramping up after coming back.
    pub slow_start: SlowStart,
    /// Requests waiting for a backend below its request limit.
    pub pending: crate::queue::PendingQueue,
    /// The adaptive concurrency limit, when the pool has one.
    pub concurrency: Option<crate::concurrency::Concurrency>,
    /// The pool's answers (retries and trafik's own 502/503 included): durations, status
    /// classes and the last minute.
    pub served: Arc<PerWorker<crate::metrics::Served>>,
}

impl Pool {
    /// Builds a pool, carrying over from `previous` (the pool of the same name in the running
    /// configuration, changed) the state of every backend it still has: counters, drain state,
    /// health (while the pool is health-checked) and sessions. Requests in flight stay counted in
    /// the previous pool, where they finish.
    pub fn new(plan: PoolPlan, previous: Option<&Pool>, endpoints: &Endpoints) -> Self {
        let backends = BackendSet::new(plan.backend_specs());
        let workers = endpoints.workers;
        let members: Box<[Backend]> = plan
            .backends
            .iter()
            .enumerate()
            .map(|(index, backend)| {
                let before = previous.and_then(|p| {
                    p.index_of(backend.address)
                        .map(|i| (i, &p.members[i], &p.backends))
                });
                let timeline =
                    before.map_or_else(Arc::default, |(_, member, _)| member.timeline.clone());
                let counters = match before {
                    Some((old, member, set)) => {
                        // A verdict only health checks can revise: without them, a backend
                        // starts up again rather than staying down for good.
                        if plan.health.is_some() {
                            backends.set_up(index, set.is_up(old));
                        }
                        backends.set_draining(index, set.is_draining(old));
                        backends.set_ejected(index, set.is_ejected(old));
                        member.counters.clone()
                    }
                    None => Arc::new(PerWorker::new(workers)),
                };
                Backend {
                    endpoint: endpoints.get(backend.address, plan.protocol, plan.tls.as_ref()),
                    name: backend.name.clone(),
                    counters,
                    timeline,
                }
            })
            .collect();
        let passive = plan.outlier.clone().map(|rules| {
            let carried = plan.backends.iter().map(|backend| {
                let previous = previous?;
                let old = previous.index_of(backend.address)?;
                Some(previous.passive.as_ref()?.state(old))
            });
            PassiveHealth::new(rules, carried)
        });
        if passive.is_none() {
            // Without passive health nothing would bring an ejected backend back.
            for index in 0..backends.len() {
                backends.set_ejected(index, false);
            }
        }
        let slow_start = SlowStart::new(plan.slow_start, plan.backends.len());
        let retrying = Retrying::new(&plan.retry, previous.map(|p| &p.retrying), workers);
        let selector = plan.algorithm.build(&backends, &plan.selector_options);
        let sticky = plan.sticky.as_ref().map(|sticky| {
            Sticky::new(
                sticky,
                &plan.name,
                &backends,
                previous.and_then(|p| p.sticky.as_ref()),
            )
        });
        let unreachable = previous.map_or_else(
            || Arc::new(PerWorker::new(workers)),
            |p| p.unreachable.clone(),
        );
        let at_limit =
            previous.map_or_else(|| Arc::new(PerWorker::new(workers)), |p| p.at_limit.clone());
        let own_errors = previous.map_or_else(Arc::default, |p| p.own_errors.clone());
        let pending = crate::queue::PendingQueue::new(
            plan.max_pending,
            plan.queue_timeout,
            previous.map(|p| &p.pending),
        );
        let concurrency = plan.adaptive_concurrency.clone().map(|rules| {
            crate::concurrency::Concurrency::new(
                rules,
                previous.and_then(|p| p.concurrency.as_ref()),
            )
        });
        let served =
            previous.map_or_else(|| Arc::new(PerWorker::new(workers)), |p| p.served.clone());
        Pool {
            concurrency,
            served,
            pending,
            tracks_in_flight: plan.algorithm.reads_in_flight(),
            plan,
            backends,
            members,
            selector,
            sticky,
            unreachable,
            passive,
            retrying,
            at_limit,
            own_errors,
            slow_start,
        }
    }

    pub fn address(&self, index: usize) -> SocketAddr {
        self.members[index].endpoint.address
    }

    /// The backend's configured name, or its address when it has none.
    pub fn display_name(&self, index: usize) -> String {
        let member = &self.members[index];
        member
            .name
            .clone()
            .unwrap_or_else(|| member.endpoint.address.to_string())
    }

    /// Backend `index` named for a client whose request it failed with `cause`: its name and
    /// address, or its address alone.
    pub fn blame(&self, index: usize, cause: crate::error::Cause) -> crate::error::Blame {
        let member = &self.members[index];
        let address = member.endpoint.address;
        let backend = match &member.name {
            Some(name) => format!("{name} ({address})"),
            None => address.to_string(),
        };
        crate::error::Blame { backend, cause }
    }

    /// Whether requests to this pool need a hash key computed.
    pub fn needs_key(&self) -> bool {
        self.plan.hash_key.is_some()
            && (self.plan.algorithm.uses_key()
                || self.sticky.as_ref().is_some_and(|s| !s.uses_cookie()))
    }

    /// The backend at `address`.
    pub fn index_of(&self, address: SocketAddr) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.endpoint.address == address)
    }

    /// Whether backend `index` has as many requests in flight as the pool allows one backend.
    pub fn at_request_limit(&self, index: usize) -> bool {
        let limit = self.plan.max_requests_per_backend;
        limit > 0
            && self.members[index]
                .counters
                .sum(|c| crate::counters::read_gauge(&c.in_flight))
                >= i64::from(limit)
    }

    /// Whether every backend a request could go to is at the request limit: the queue waits
    /// for this to end.
    pub fn saturated(&self, context: &PickContext) -> bool {
        let mut available = (0..self.members.len())
            .filter(|&index| self.backends.is_available(index, context))
            .peekable();
        self.plan.max_requests_per_backend > 0
            && available.peek().is_some()
            && available.all(|index| self.at_request_limit(index))
    }

    /// What decides a pick before the pool's rule, in the order a pick asks: the backend the
    /// request is bound to (a cookie's), else a key's home under key stickiness. `None`: the
    /// rule picks. [`Call`] picks with it (`by_key` takes the key's pick) and [`explain`]
    /// tells (`by_key` explains it).
    pub fn preset<T>(
        &self,
        bound: Option<usize>,
        by_key: impl FnOnce(&Sticky) -> Option<T>,
    ) -> Option<Preset<T>> {
        if let Some(index) = bound {
            return Some(Preset::Bound(index));
        }
        self.sticky.as_ref().and_then(by_key).map(Preset::ByKey)
    }

    /// The pick a request bound to `bound` (by its cookie) with `context` gets, before slow
    /// start: the bound backend, else a key's home under key stickiness, else the rule's pick
    /// (which moves a stateful rule's turn). [`Call`] sends with it; `trafik plan --replay`
    /// places logged requests with it.
    pub fn pick(&self, bound: Option<usize>, context: &PickContext) -> Option<usize> {
        match self.preset(bound, |s| s.pick_by_key(&self.backends, context)) {
            Some(Preset::Bound(index)) => Some(index),
            Some(Preset::ByKey(home)) => home,
            None => self.selector.pick(&self.backends, context),
        }
    }

    /// The backend to send to after the rule picked `index`: another one (not tried) now and
    /// then while `index` is in its slow start, so its share ramps up.
    pub fn warmed(&self, index: usize, context: &PickContext) -> usize {
        if !self.slow_start.passes_over(index) {
            return index;
        }
        let mut others = *context;
        others.tried.insert(index);
        self.selector.pick(&self.backends, &others).unwrap_or(index)
    }

    /// Tells passive health what a request to backend `index` came to.
    pub fn report(&self, index: usize, outcome: trafik_balance::Outcome) {
        if let Some(passive) = &self.passive
            && let Some(reason) = passive.report(&self.backends, index, outcome, &self.plan.name)
        {
            self.changed(index, format!("ejected: {}", reason.name()));
        }
    }

    /// Backend `index`'s state as the dashboard names it.
    pub fn state(&self, index: usize) -> timeline::State {
        let set = &self.backends;
        if !set.is_up(index) {
            timeline::State::Down
        } else if set.is_draining(index) {
            timeline::State::Draining
        } else if set.is_ejected(index) {
            timeline::State::Ejected
        } else {
            timeline::State::Up
        }
    }

    /// Notes backend `index`'s state, just changed because of `reason`, in its timeline.
    pub fn changed(&self, index: usize, reason: impl Into<String>) {
        self.members[index]
            .timeline
            .record(self.state(index), reason);
    }

    /// The backend whose address is written `address`, for the admin API.
    pub fn backend_by_address(&self, address: &str) -> Option<usize> {
        address.parse().ok().and_then(|a| self.index_of(a))
    }
}
