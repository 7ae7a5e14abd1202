//! A pool at run time: its backends' shared state, its selection rule and its counters.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use trafik_balance::{BackendSet, BackendSpec, Selector};

use crate::plan::PoolPlan;
use crate::sticky::Sticky;

/// Counters of one backend, shared by all workers.
#[derive(Debug, Default)]
pub struct BackendStats {
    /// Times the selection rule chose this backend.
    pub decisions: AtomicU64,
    /// Responses this backend sent (any status).
    pub requests: AtomicU64,
    /// Failed connects, timeouts and broken connections to this backend.
    pub failures: AtomicU64,
    /// Upstream TCP connections open to it, across workers.
    pub connections: AtomicU64,
}

/// One pool, shared by every worker, the health checker and the admin API.
pub struct Pool {
    pub plan: PoolPlan,
    pub backends: BackendSet,
    pub selector: Box<dyn Selector>,
    /// Present when the pool binds clients to backends.
    pub sticky: Option<Sticky>,
    pub stats: Box<[BackendStats]>,
    /// Requests answered 502/503 because no backend could be reached.
    pub unreachable: AtomicU64,
}

impl Pool {
    pub fn new(plan: PoolPlan) -> Self {
        let backends = BackendSet::new(plan.backends.iter().map(|b| BackendSpec {
            id: b.address.to_string(),
            weight: b.weight.max(1),
        }));
        let selector = plan.algorithm.build(&backends, &plan.selector_options);
        let sticky = plan
            .sticky
            .as_ref()
            .map(|sticky| Sticky::new(sticky, &plan.name, &backends));
        let stats = plan
            .backends
            .iter()
            .map(|_| BackendStats::default())
            .collect();
        Pool {
            plan,
            backends,
            selector,
            sticky,
            stats,
            unreachable: AtomicU64::new(0),
        }
    }

    pub fn address(&self, index: usize) -> SocketAddr {
        self.plan.backends[index].address
    }

    /// The backend's configured name, or its address when it has none.
    pub fn display_name(&self, index: usize) -> String {
        let backend = &self.plan.backends[index];
        backend
            .name
            .clone()
            .unwrap_or_else(|| backend.address.to_string())
    }

    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether requests to this pool need a hash key computed.
    pub fn needs_key(&self) -> bool {
        self.plan.hash_key.is_some()
            && (self.plan.algorithm.uses_key()
                || self.sticky.as_ref().is_some_and(|s| !s.uses_cookie()))
    }

    /// The backend whose address is written `address`, for the admin API.
    pub fn backend_by_address(&self, address: &str) -> Option<usize> {
        self.plan
            .backends
            .iter()
            .position(|b| b.address.to_string() == address)
    }
}
