//! trafik's data plane.
//!
//! [`start`] takes a [`Plan`] and runs it: data-plane workers (one thread per core, see
//! [`worker`]) serve the listeners through the HTTP proxy in [`http`]; a control thread runs
//! the [`health`] checks and the [`admin`] API. Backend selection is never implemented here:
//! every pool asks its `trafik_balance::Selector`.

pub mod admin;
pub mod error;
pub mod health;
pub mod http;
pub mod plan;
pub mod pool;
pub mod sticky;
pub mod worker;

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;

use ::http::HeaderValue;
use tokio::sync::watch;

pub use error::ProxyError;
pub use plan::{
    BackendPlan, ClientPlan, HashKey, HealthCheck, HealthPlan, ListenerPlan, Plan, PoolPlan,
    RoutePlan, StickyPlan,
};
pub use pool::Pool;

use crate::http::route::RouteTable;
use crate::http::service::{Shared, WorkerProxy};
use crate::http::upstream::Upstreams;

/// A running instance. Dropping it does not stop it; call [`Running::stop`] then
/// [`Running::wait`].
pub struct Running {
    listeners: Vec<SocketAddr>,
    admin: Option<SocketAddr>,
    pools: Arc<[Arc<Pool>]>,
    stop: watch::Sender<bool>,
    threads: Vec<JoinHandle<()>>,
}

impl Running {
    /// The bound address of every listener, in plan order (useful with port 0).
    pub fn listener_addresses(&self) -> &[SocketAddr] {
        &self.listeners
    }

    /// The bound admin address, when the plan has an admin listener.
    pub fn admin_address(&self) -> Option<SocketAddr> {
        self.admin
    }

    /// The pools, for callers that read counters in process.
    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }

    /// Starts draining: stop accepting, let in-flight requests finish (up to the drain timeout).
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Blocks until every thread has finished draining.
    pub fn wait(self) {
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

/// Binds every listener and starts the workers and the control thread. Errors (an address in
/// use, a bad name) are returned before anything runs.
pub fn start(plan: Plan) -> io::Result<Running> {
    let workers = plan.workers.max(1);
    let via = HeaderValue::from_str(&format!("1.1 {}", plan.name)).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "instance name {:?} cannot be written in a Via header",
                plan.name
            ),
        )
    })?;
    // sockets[listener][worker]
    let mut sockets = Vec::with_capacity(plan.listeners.len());
    let mut listeners = Vec::with_capacity(plan.listeners.len());
    for listener in &plan.listeners {
        let bound = worker::bind_shared(listener.address, workers).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "listener {:?} cannot bind {}: {error}",
                    listener.name, listener.address
                ),
            )
        })?;
        listeners.push(bound[0].local_addr()?);
        sockets.push(bound);
    }
    let admin_listener = match plan.admin {
        Some(address) => {
            let listener = std::net::TcpListener::bind(address).map_err(|error| {
                io::Error::new(
                    error.kind(),
                    format!("admin cannot bind {address}: {error}"),
                )
            })?;
            listener.set_nonblocking(true)?;
            Some(listener)
        }
        None => None,
    };
    let admin = admin_listener
        .as_ref()
        .map(std::net::TcpListener::local_addr)
        .transpose()?;

    let pools: Arc<[Arc<Pool>]> = plan
        .pools
        .iter()
        .cloned()
        .map(|p| Arc::new(Pool::new(p)))
        .collect();
    let shared = Arc::new(Shared {
        pools: pools.to_vec(),
        routes: plan
            .listeners
            .iter()
            .map(|l| RouteTable::new(l.routes.clone()))
            .collect(),
        client: plan.client.clone(),
        via,
        epoch: std::time::Instant::now(),
    });
    let (stop, shutdown) = watch::channel(false);
    let mut threads = Vec::with_capacity(workers + 1);
    for id in 0..workers {
        let mine: Vec<_> = sockets.iter_mut().map(|s| s.remove(0)).collect();
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        let drain = plan.drain_timeout;
        let thread = std::thread::Builder::new()
            .name(format!("trafik-worker-{id}"))
            .spawn(move || {
                let runtime = single_thread_runtime();
                let local = tokio::task::LocalSet::new();
                local.block_on(&runtime, async move {
                    let proxy = Rc::new(WorkerProxy {
                        upstreams: Upstreams::new(&shared.pools),
                        shared,
                    });
                    worker::run(proxy, mine, shutdown, drain).await;
                });
            })?;
        threads.push(thread);
    }
    let control_pools = pools.clone();
    let control = std::thread::Builder::new()
        .name("trafik-control".into())
        .spawn(move || {
            single_thread_runtime().block_on(async move {
                health::spawn_checks(&control_pools, &shutdown);
                if let Some(listener) = admin_listener {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => admin::serve(listener, control_pools, shutdown).await,
                        Err(error) => tracing::error!(%error, "admin listener failed"),
                    }
                } else {
                    let mut shutdown = shutdown;
                    let _ = shutdown.wait_for(|stopping| *stopping).await;
                }
            });
        })?;
    threads.push(control);
    Ok(Running {
        listeners,
        admin,
        pools,
        stop,
        threads,
    })
}

fn single_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime needs only a timer and an I/O driver")
}
