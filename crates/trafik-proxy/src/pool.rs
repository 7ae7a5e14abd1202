//! A pool at run time: its backends' shared state, its selection rule and its counters.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use trafik_balance::{BackendSet, BackendSpec, Selector};

use crate::plan::PoolPlan;

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
        let selector = plan.algorithm.build(&backends);
        let stats = plan
            .backends
            .iter()
            .map(|_| BackendStats::default())
            .collect();
        Pool {
            plan,
            backends,
            selector,
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
}
