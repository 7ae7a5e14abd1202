//! trafik's data plane.
//!
//! [`start`] takes a [`Plan`] and runs it: data-plane workers (one thread per core, see
//! [`worker`]) accept on the listeners ([`transport`]) and serve them through the HTTP proxy in
//! [`http`] or the layer-4 relay in [`tcp`]; a control thread runs the [`health`] checks and the
//! [`admin`] API, and gives the memory of floods back to the system. What they serve
//! is one immutable [`snapshot::Snapshot`], replaced whole by [`Running::reload`]. Backend
//! selection is never implemented here: every pool asks its `trafik_balance::Selector`.

pub mod accept;
pub mod admin;
pub mod certificates;
pub mod dns;
pub mod health;
pub mod metrics;
pub mod names;
pub mod worker;

// HTTP and the configuration in force, under the names the modules above use.
pub use trafik_http::{explain, h1, http, http2, replay, route_change, snapshot};

// The layer below any protocol, under the names the modules above use.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
use trafik_runtime::memory;
pub use trafik_runtime::{
    admission, concurrency, connections, counters, descriptors, error, handover, key, meter,
    outlier, plan, pool, proxy_protocol, queue, sticky, tls, transport, view,
};

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::{mpsc, watch};

pub use error::ProxyError;
pub use http::trace::otlp::OtlpPlan;
pub use plan::ConnectionLimits;
pub use plan::Engine;
pub use plan::TracingPlan;
pub use plan::{
    AggregatePlan, AmbassadorPlan, BatchPlan, ClientChooser, PartPlan, PathTemplate, ServiceChoice,
    UpstreamTemplate, ViewPlan, ViewsPlan,
};
pub use plan::{
    AnswerLimits, BackendPlan, CacheHeader, CachePlan, ClientPlan, FilterPlan, HashKey, HeadLimits,
    HealthCheck, HealthPlan, ListenerKind, ListenerPlan, Plan, PoolPlan, ProxyProtocol, RetryPlan,
    RoutePlan, ServerNamePattern, SniRoutePlan, StickyPlan, TargetPlan,
};
pub use plan::{Discover, ResolverPlan};
pub use plan::{MirrorPlan, RedirectPlan, RoutingPlan, SplitSticky};
pub use pool::Pool;
pub use snapshot::Snapshot;

use crate::pool::Endpoints;
use crate::snapshot::ListenerId;
use crate::worker::{ListenerChange, Socket, WorkerStart};
use trafik_http::explain::ListenerAddress;

/// Where a reload reads the configuration from: the file's name (shown in `/status`) and a
/// function that reads and checks it anew, returning every error when it is not valid.
pub struct Reloader {
    pub file: String,
    #[allow(clippy::type_complexity)]
    pub load: Box<dyn Fn() -> Result<Plan, Vec<String>> + Send + Sync>,
}

/// A running instance. Dropping it does not stop it; call [`Running::stop`] then
/// [`Running::wait`].
pub struct Running {
    instance: Arc<Instance>,
    threads: Vec<JoinHandle<()>>,
}

/// What a running instance shares between its control thread, the admin API and its owner.
pub struct Instance {
    snapshots: watch::Sender<Arc<Snapshot>>,
    /// One channel per worker, for listener changes.
    workers: Vec<mpsc::UnboundedSender<ListenerChange>>,
    endpoints: Endpoints,
    /// The listeners with open sockets, by address; held while a reload runs, so reloads
    /// never interleave.
    listeners: Mutex<Vec<OpenListener>>,
    next_listener: std::sync::atomic::AtomicU64,
    reloader: Option<Reloader>,
    /// Held from reading the file to publishing its snapshot, so two reloads never interleave
    /// (an older file applied after a newer one).
    reloading: Mutex<()>,
    admin: Option<SocketAddr>,
    admin_token: Option<admin::AdminToken>,
    /// A copy of the admin socket, to hand to a successor binary.
    admin_socket: Mutex<Option<std::net::TcpListener>>,
    stop: watch::Sender<bool>,
    /// The DNS server, when the plan it started from has one.
    dns: Option<dns::DnsService>,
    /// The plan in force as configured, backend names unexpanded; guarded by `listeners`'
    /// lock for writes like the rest of a reload.
    configured: Mutex<Plan>,
    /// What the pools' backend names resolve to.
    names: Arc<names::Names>,
    /// The pools' clock origin, the workers' too: explanations read latencies on it.
    epoch: Instant,
}

struct OpenListener {
    id: ListenerId,
    name: String,
    /// As configured (port 0 stays 0), for matching the next plan's listeners.
    configured: SocketAddr,
    /// As bound.
    address: SocketAddr,
    /// Copies of its sockets, to hand to a successor binary ([`handover`]).
    sockets: Vec<std::os::fd::OwnedFd>,
    /// QUIC on UDP: it may share its address with a TCP listener.
    udp: bool,
}

impl OpenListener {
    /// Whether `listener` of a new plan is this one: the address it holds, or the same
    /// configured address (with port 0, any free port, the same name too).
    fn is(&self, listener: &ListenerPlan) -> bool {
        self.udp == listener.kind.is_udp()
            && (listener.address == self.address
                || (listener.address == self.configured
                    && (listener.address.port() != 0 || listener.name == self.name)))
    }
}

/// A listener's sockets, one per worker (TCP, or UDP for QUIC), with its bound address and the
/// copies kept for a successor binary.
fn bind(
    listener: &ListenerPlan,
    workers: usize,
) -> io::Result<(SocketAddr, Vec<Socket>, Vec<std::os::fd::OwnedFd>)> {
    if listener.kind.is_udp() {
        let sockets = transport::bind_shared_udp(listener.address, workers)?;
        let address = sockets[0].local_addr()?;
        let copies = handover::copies(&sockets);
        return Ok((
            address,
            sockets.into_iter().map(Socket::Udp).collect(),
            copies,
        ));
    }
    let sockets = transport::bind_shared(listener.address, workers)?;
    let address = sockets[0].local_addr()?;
    let copies = handover::copies(&sockets);
    Ok((
        address,
        sockets.into_iter().map(Socket::Tcp).collect(),
        copies,
    ))
}

impl Running {
    /// The bound address of every listener, in the order of the plan in force (useful with
    /// port 0).
    pub fn listener_addresses(&self) -> Vec<SocketAddr> {
        self.instance.listener_addresses()
    }

    /// Every listening socket (the admin API's too) by address, for a successor binary to
    /// inherit ([`handover`]); valid while this instance runs.
    pub fn handover_sockets(&self) -> Vec<handover::Handed> {
        let open = self
            .instance
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut sockets: Vec<_> = open
            .iter()
            .map(|listener| {
                let transport = match listener.udp {
                    true => handover::Transport::Udp,
                    false => handover::Transport::Tcp,
                };
                let fds = handover::raw(&listener.sockets);
                (transport, listener.address, fds)
            })
            .collect();
        let admin = self
            .instance
            .admin_socket
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let (Some(address), Some(socket)) = (self.instance.admin, admin.as_ref()) {
            let fds = handover::raw(std::slice::from_ref(socket));
            sockets.push((handover::Transport::Tcp, address, fds));
        }
        sockets
    }

    /// The bound admin address, when the plan has an admin listener.
    pub fn admin_address(&self) -> Option<SocketAddr> {
        self.instance.admin
    }

    /// The bound DNS address (UDP and TCP), when the plan has a DNS server.
    pub fn dns_address(&self) -> Option<SocketAddr> {
        self.instance.dns.as_ref().map(dns::DnsService::address)
    }

    /// The configuration in force.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.instance.snapshot()
    }

    /// A handle for reloading from another task or thread.
    pub fn instance(&self) -> Arc<Instance> {
        self.instance.clone()
    }

    /// Reads the configuration anew through the [`Reloader`] and applies it.
    pub fn reload(&self) -> Result<u64, Vec<String>> {
        self.instance.reload()
    }

    /// Applies `plan` in place of the configuration in force; see [`Instance::apply`].
    pub fn apply(&self, plan: Plan) -> Result<u64, Vec<String>> {
        self.instance.apply(plan)
    }

    /// Starts draining: stop accepting, let in-flight requests finish (up to the drain timeout).
    pub fn stop(&self) {
        // The copies kept for a successor would keep the sockets listening after the workers
        // close theirs: new clients must be refused from now on.
        let mut open = self
            .instance
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for listener in open.iter_mut() {
            listener.sockets.clear();
        }
        drop(open);
        *self
            .instance
            .admin_socket
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        let _ = self.instance.stop.send(true);
    }

    /// Blocks until every thread has finished draining.
    pub fn wait(self) {
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

impl Instance {
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshots.borrow().clone()
    }

    /// What this instance would do with `question` now: the live snapshot and live state.
    pub fn explain(&self, question: &trafik_http::explain::Question) -> serde_json::Value {
        let listeners: Vec<ListenerAddress> = self
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|open| ListenerAddress {
                id: open.id,
                name: open.name.clone(),
                address: open.address,
            })
            .collect();
        let now = self.epoch.elapsed().as_nanos() as trafik_balance::Nanos;
        trafik_http::explain::explain(&self.snapshot(), &listeners, question, now)
    }

    /// What this instance's DNS server answers `question` now, with the regions live now;
    /// `None` when it serves no DNS.
    pub fn explain_dns(
        &self,
        question: &trafik_dns::zone::explain::Question,
    ) -> Option<serde_json::Value> {
        self.dns.as_ref().map(|dns| dns.explain(question))
    }

    /// A receiver that sees every snapshot published from now on.
    pub fn watch(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.snapshots.subscribe()
    }

    /// The DNS server's counters and regions (the `dns` block of `/status`).
    pub fn dns_status(&self) -> Option<serde_json::Value> {
        self.dns.as_ref().map(dns::DnsService::status)
    }

    /// The plan in force as configured (backend names not expanded).
    pub fn configured(&self) -> Plan {
        self.configured
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Every backend name with its addresses and lookups (the `names` block of `/status`).
    pub fn names(&self) -> Vec<(String, names::Found)> {
        self.names.snapshot()
    }

    /// Rebuilds the snapshot from the plan in force with the names' current addresses: the
    /// path of a reload ([`Snapshot::build`] carrying pools by name and backends by address),
    /// with the listeners and the DNS server as they are.
    pub fn follow_names(&self) -> Result<u64, Vec<String>> {
        let _one_at_a_time = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        let previous = self.snapshot();
        let ids: Vec<ListenerId> = previous.listener_ids().collect();
        let generation = self.publish(&self.configured(), &ids, &previous)?;
        tracing::info!(generation, "pools follow their backend names");
        Ok(generation)
    }

    /// Builds the next snapshot from `plan` (its backend names expanded) beside `previous`,
    /// which hands over its state, and publishes it; returns its generation.
    fn publish(
        &self,
        plan: &Plan,
        ids: &[ListenerId],
        previous: &Snapshot,
    ) -> Result<u64, Vec<String>> {
        let generation = previous.generation + 1;
        let snapshot = Snapshot::build(
            &self.names.expand(plan),
            ids,
            Some(previous),
            &self.endpoints,
            generation,
            previous.file.clone(),
        )?;
        self.snapshots.send_replace(Arc::new(snapshot));
        Ok(generation)
    }

    /// The DNS server's families, written to `exposition`; none without one.
    pub fn dns_metrics(&self, exposition: &mut trafik_metrics_text::Exposition) {
        if let Some(dns) = &self.dns {
            dns.metrics(exposition);
        }
    }

    fn listener_addresses(&self) -> Vec<SocketAddr> {
        let open = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        let snapshot = self.snapshot();
        snapshot
            .listener_ids()
            .filter_map(|id| open.iter().find(|l| l.id == id).map(|l| l.address))
            .collect()
    }

    /// Reads the configuration anew and applies it. Without a [`Reloader`] (an instance
    /// started from a plan alone) there is nothing to read.
    pub fn reload(&self) -> Result<u64, Vec<String>> {
        let Some(reloader) = &self.reloader else {
            return Err(vec![
                "this instance was not started from a configuration file, so there is nothing to reload".into(),
            ]);
        };
        let _one_at_a_time = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        let plan = (reloader.load)()?;
        self.apply(plan)
    }

    /// Replaces the configuration in force with `plan`, or changes nothing and returns why not.
    ///
    /// Listeners are matched by address: one whose address stays keeps its sockets, a new one
    /// is bound on every worker (an address in use fails the reload), a removed one stops
    /// accepting and drains. Pools are matched by name and backends by address, and keep their
    /// health, drain state, counters and sessions. Requests in flight finish on the snapshot
    /// they started with. The worker count and the admin address need a restart.
    pub fn apply(&self, mut plan: Plan) -> Result<u64, Vec<String>> {
        let mut open = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        let previous = self.snapshot();
        let mut errors = Vec::new();
        if plan.workers != self.workers.len() {
            tracing::warn!(
                running = self.workers.len(),
                configured = plan.workers,
                "the number of workers changes only on restart"
            );
            // The snapshot is built for the workers that run: each writes a counter shard of
            // its own, which no other thread may share.
            plan.workers = self.workers.len();
        }
        if plan.admin != self.admin && plan.admin.is_none_or(|a| a.port() != 0) {
            tracing::warn!("the admin address changes only on restart");
        }
        if plan.resolver != self.configured().resolver {
            tracing::warn!("the resolver and its bounds change only on restart");
        }
        let mut ids = Vec::with_capacity(plan.listeners.len());
        let mut added = Vec::new();
        for (index, listener) in plan.listeners.iter().enumerate() {
            let twice = plan.listeners[..index].iter().any(|other| {
                other.address == listener.address
                    && other.kind.is_udp() == listener.kind.is_udp()
                    && listener.address.port() != 0
            });
            if twice {
                errors.push(format!(
                    "listener {:?}: another listener already has the address {}",
                    listener.name, listener.address
                ));
                continue;
            }
            if let Some(kept) = open.iter().find(|open| open.is(listener)) {
                ids.push(kept.id);
                continue;
            }
            match bind(listener, self.workers.len()) {
                Ok((address, sockets, copies)) => {
                    let id = self.new_listener_id();
                    ids.push(id);
                    added.push((id, listener, address, sockets, copies));
                }
                Err(error) => errors.push(format!(
                    "listener {:?} cannot bind {}: {error}",
                    listener.name, listener.address
                )),
            }
        }
        let dns = match (&self.dns, &plan.dns) {
            (Some(service), Some(dns)) => match service.prepare(dns) {
                Ok(authority) => Some((service, dns, authority)),
                Err(mut more) => {
                    errors.append(&mut more);
                    None
                }
            },
            (None, None) => None,
            _ => {
                tracing::warn!("a dns server starts or stops only on restart");
                None
            }
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        let generation = self.publish(&plan, &ids, &previous)?;
        keep_certificates_of(&plan);
        *self.configured.lock().unwrap_or_else(|p| p.into_inner()) = plan.clone();
        if let Some((service, dns, authority)) = dns {
            service.install(dns, authority);
        }
        for (id, listener, address, sockets, copies) in added {
            for (worker, socket) in self.workers.iter().zip(sockets) {
                let _ = worker.send(ListenerChange::Add(id, socket));
            }
            open.push(OpenListener {
                id,
                name: listener.name.clone(),
                configured: listener.address,
                address,
                sockets: copies,
                udp: listener.kind.is_udp(),
            });
            tracing::info!(%address, "listener added");
        }
        open.retain(|listener| {
            let kept = ids.contains(&listener.id);
            if !kept {
                for worker in &self.workers {
                    let _ = worker.send(ListenerChange::Remove(listener.id));
                }
                tracing::info!(address = %listener.address, "listener removed; draining");
            }
            kept
        });
        tracing::info!(generation, "configuration reloaded");
        Ok(generation)
    }

    fn new_listener_id(&self) -> ListenerId {
        ListenerId(
            self.next_listener
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        )
    }
}

/// Makes `plan`'s ACME certificates the ones ordered, renewed and shown; those of an earlier
/// configuration (or of a refused reload's check) are forgotten, their managers stopped.
fn keep_certificates_of(plan: &Plan) {
    let in_force: Vec<_> = plan
        .listeners
        .iter()
        .flat_map(|listener| listener.kind.managed().iter().cloned())
        .collect();
    crate::tls::acme::registry().keep_only(&in_force);
}

/// Binds every listener and starts the workers and the control thread. Errors (an address in
/// use, a bad name) are returned before anything runs.
pub fn start(plan: Plan) -> io::Result<Running> {
    start_with(plan, None)
}

/// [`start`], with a way to read the configuration anew for [`Running::reload`] and the admin
/// API's `POST /reload`.
pub fn start_with(plan: Plan, reloader: Option<Reloader>) -> io::Result<Running> {
    let workers = plan.workers.max(1);
    let mut sockets = Vec::with_capacity(plan.listeners.len());
    let mut open = Vec::with_capacity(plan.listeners.len());
    for (index, listener) in plan.listeners.iter().enumerate() {
        let (address, bound, copies) = bind(listener, workers).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "listener {:?} cannot bind {}: {error}",
                    listener.name, listener.address
                ),
            )
        })?;
        let id = ListenerId(index as u64);
        open.push(OpenListener {
            id,
            name: listener.name.clone(),
            configured: listener.address,
            address,
            sockets: copies,
            udp: listener.kind.is_udp(),
        });
        sockets.push((id, bound));
    }
    let admin_listener = match plan.admin {
        Some(address) => {
            let inherited = handover::take(address).and_then(|mut sockets| sockets.pop());
            let listener = inherited
                .map_or_else(|| std::net::TcpListener::bind(address), Ok)
                .map_err(|error| {
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

    let budget = descriptors::client_connection_budget();
    let endpoints = Endpoints::new(workers);
    let ids: Vec<ListenerId> = open.iter().map(|l| l.id).collect();
    let file = reloader.as_ref().map(|r| r.file.clone());
    // Names resolve on the control thread once it runs (the DNS server they ask may be this
    // instance's own): until the first answer, their pools have only their written addresses.
    let names = Arc::new(names::Names::new(plan.resolver.clone()));
    let snapshot = Snapshot::build(&names.expand(&plan), &ids, None, &endpoints, 1, file)
        .map_err(|errors| io::Error::new(io::ErrorKind::InvalidInput, errors.join("; ")))?;
    keep_certificates_of(&plan);
    let (snapshots, _) = watch::channel(Arc::new(snapshot));
    let (stop, shutdown) = watch::channel(false);
    let mut changes = Vec::with_capacity(workers);
    let mut starts = Vec::with_capacity(workers);
    let epoch = Instant::now();
    for id in 0..workers {
        let (sender, receiver) = mpsc::unbounded_channel();
        changes.push(sender);
        let listeners = sockets
            .iter_mut()
            .map(|(listener, bound)| (*listener, bound.remove(0)))
            .collect();
        starts.push(WorkerStart {
            id,
            listeners,
            changes: receiver,
            snapshots: snapshots.subscribe(),
            shutdown: shutdown.clone(),
            epoch,
            budget: budget.clone(),
        });
    }
    let mut threads = Vec::with_capacity(workers + 3);
    let dns = match &plan.dns {
        Some(dns) => {
            let (service, dns_threads) =
                dns::DnsService::start(dns, workers, snapshots.subscribe(), shutdown.clone())?;
            threads.extend(dns_threads);
            Some(service)
        }
        None => None,
    };
    let instance = Arc::new(Instance {
        snapshots,
        workers: changes,
        endpoints,
        next_listener: std::sync::atomic::AtomicU64::new(open.len() as u64),
        listeners: Mutex::new(open),
        reloader,
        reloading: Mutex::new(()),
        admin,
        admin_token: plan.admin_token.clone(),
        admin_socket: Mutex::new(admin_listener.as_ref().and_then(|l| l.try_clone().ok())),
        stop,
        dns,
        configured: Mutex::new(plan.clone()),
        names,
        epoch,
    });
    // Runtimes are built here, so running out of descriptors is an error from `start`, not
    // a thread that dies alone.
    for start in starts {
        let runtime = single_thread_runtime()?;
        let thread = std::thread::Builder::new()
            .name(format!("trafik-worker-{}", start.id))
            .spawn(move || {
                let local = tokio::task::LocalSet::new();
                local.block_on(&runtime, worker::run(start));
            })?;
        threads.push(thread);
    }
    // Health probes get a thread of their own: on the control thread a slow admin answer (a
    // dashboard's /status) delayed them past their timeout and marked healthy backends down.
    let runtime = single_thread_runtime()?;
    let (snapshots, stopping) = (instance.watch(), shutdown.clone());
    threads.push(
        std::thread::Builder::new()
            .name("trafik-health".into())
            .spawn(move || runtime.block_on(health::supervise(snapshots, stopping)))?,
    );
    let control = instance.clone();
    let runtime = single_thread_runtime()?;
    let thread = std::thread::Builder::new()
        .name("trafik-control".into())
        .spawn(move || {
            runtime.block_on(async move {
                tokio::spawn(outlier::sweep(control.watch(), shutdown.clone()));
                tokio::spawn(names::follow(control.clone(), shutdown.clone()));
                #[cfg(all(target_os = "linux", target_env = "gnu"))]
                tokio::spawn(memory::give_back(shutdown.clone()));
                if let Some(listener) = admin_listener {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => admin::serve(listener, control, shutdown).await,
                        Err(error) => tracing::error!(%error, "admin listener failed"),
                    }
                } else {
                    let mut shutdown = shutdown;
                    let _ = shutdown.wait_for(|stopping| *stopping).await;
                }
            });
        })?;
    threads.push(thread);
    handover::close_unclaimed();
    Ok(Running { instance, threads })
}

fn single_thread_runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// What a configuration would do with `question` on a fresh start (`trafik explain -c FILE`).
pub fn explain_offline(
    plan: &Plan,
    question: &trafik_http::explain::Question,
) -> Result<serde_json::Value, Vec<String>> {
    let (snapshot, listeners) = fresh_start(plan)?;
    Ok(trafik_http::explain::explain(
        &snapshot, &listeners, question, 0,
    ))
}

/// An access log's requests played through two configurations, each on a fresh start
/// (`trafik plan OLD NEW --replay LOG`).
pub fn replay_offline(
    old: &Plan,
    new: &Plan,
    records: &[trafik_http::replay::Record],
) -> Result<serde_json::Value, Vec<String>> {
    let (old_snapshot, old_listeners) = fresh_start(old)?;
    let (new_snapshot, new_listeners) = fresh_start(new)?;
    Ok(trafik_http::replay::replay(
        &trafik_http::replay::Side {
            snapshot: &old_snapshot,
            listeners: &old_listeners,
        },
        &trafik_http::replay::Side {
            snapshot: &new_snapshot,
            listeners: &new_listeners,
        },
        records,
    ))
}

/// The snapshot `serve` would build from `plan`, every backend up and nothing counted yet, and
/// its listeners; nothing is bound.
fn fresh_start(plan: &Plan) -> Result<(Snapshot, Vec<ListenerAddress>), Vec<String>> {
    let listeners: Vec<ListenerAddress> = plan
        .listeners
        .iter()
        .enumerate()
        .map(|(index, listener)| ListenerAddress {
            id: ListenerId(index as u64),
            name: listener.name.clone(),
            address: listener.address,
        })
        .collect();
    let ids: Vec<ListenerId> = listeners.iter().map(|l| l.id).collect();
    let endpoints = Endpoints::new(1);
    let snapshot = Snapshot::build(plan, &ids, None, &endpoints, 1, None)?;
    Ok((snapshot, listeners))
}

/// What a configuration's DNS server would answer `question` (`trafik explain dns -c FILE`):
/// every region live except those named in `down`. An error when the file has no `[dns]`.
pub fn explain_dns_offline(
    plan: &Plan,
    question: &trafik_dns::zone::explain::Question,
    down: &[String],
) -> Result<serde_json::Value, Vec<String>> {
    let Some(dns) = &plan.dns else {
        return Err(vec!["this configuration has no [dns]".into()]);
    };
    let authority = trafik_dns::Authority::build(&dns.zones, None)?;
    let mut live = trafik_dns::policy::Live::all(authority.regions.len());
    for name in down {
        match authority
            .regions
            .iter()
            .position(|region| region.name == *name)
        {
            Some(index) => live = live.with(index, false),
            None => return Err(vec![format!("--down {name}: no region of that name")]),
        }
    }
    let random = trafik_balance::hash::mix64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    Ok(authority.explain(question, live, random))
}
