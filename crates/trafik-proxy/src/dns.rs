//! The instance's authoritative DNS server (`[dns]`): `trafik-dns` answers, and this module
//! feeds it which regions are live — from the same active checks the pools use
//! ([`health::watch_target`]) or from a named pool's backends — and applies reloads.
//!
//! The server runs beside the workers on threads of its own, one per data-plane worker, each a
//! single-threaded runtime with its own UDP socket on the port; its listening address changes
//! only on restart, everything else on reload.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::watch;
use trafik_dns::policy::Live;
use trafik_dns::server::{Bound, DnsControl};
use trafik_dns::{Authority, DnsServer, Liveness};

use crate::health;
pub use crate::plan::{DnsServicePlan, HealthPlan, RegionHealth};
use crate::snapshot::Snapshot;

/// One region's running check, kept across reloads while its target and settings stay.
struct RunningCheck {
    plan: HealthPlan,
    live: Arc<AtomicBool>,
    retire: watch::Sender<bool>,
}

/// The running DNS server of an instance.
pub struct DnsService {
    control: DnsControl,
    listen: SocketAddr,
    runtime: tokio::runtime::Handle,
    /// Checks by region name and target address.
    checks: Mutex<HashMap<(String, SocketAddr), RunningCheck>>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
}

/// Liveness of the regions of one configuration, in its region order.
struct RegionLiveness {
    regions: Vec<RegionState>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
}

enum RegionState {
    Always,
    Checked(Arc<AtomicBool>),
    Pool(String),
}

impl Liveness for RegionLiveness {
    fn live(&self) -> Live {
        let mut live = Live::none();
        let mut snapshot = None;
        for (index, state) in self.regions.iter().enumerate() {
            let up = match state {
                RegionState::Always => true,
                RegionState::Checked(flag) => flag.load(Ordering::Relaxed),
                RegionState::Pool(name) => {
                    let snapshot = snapshot.get_or_insert_with(|| self.snapshots.borrow().clone());
                    snapshot.pool(name).is_some_and(|pool| {
                        (0..pool.backends.len()).any(|i| pool.backends.is_up(i))
                    })
                }
            };
            live = live.with(index, up);
        }
        live
    }
}

impl DnsService {
    /// Binds the server's sockets and starts one thread per UDP socket (`threads` of them),
    /// each with a single-threaded runtime like the proxy's workers, all answering from one
    /// [`DnsControl`]; the first also accepts TCP and runs the regions' checks. They end when
    /// `shutdown` turns true.
    pub fn start(
        plan: &DnsServicePlan,
        threads: usize,
        snapshots: watch::Receiver<Arc<Snapshot>>,
        shutdown: watch::Receiver<bool>,
    ) -> io::Result<(DnsService, Vec<JoinHandle<()>>)> {
        let authority = Authority::build(&plan.zones, None)
            .map_err(|errors| io::Error::new(io::ErrorKind::InvalidInput, errors.join("; ")))?;
        let bound = Bound::bind(plan.listen, threads).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("dns cannot listen on {}: {error}", plan.listen),
            )
        })?;
        let runtimes = (0..bound.udp.len())
            .map(|_| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
            })
            .collect::<io::Result<Vec<_>>>()?;
        let initial: Arc<dyn Liveness> = Arc::new(trafik_dns::server::AllLive);
        let control = DnsControl::new(bound.address, authority, initial);
        let service = DnsService {
            control: control.clone(),
            listen: plan.listen,
            runtime: runtimes[0].handle().clone(),
            checks: Mutex::new(HashMap::new()),
            snapshots,
        };
        service.control.set_liveness(service.liveness(plan));
        let mut tcp = Some(bound.tcp);
        let mut handles = Vec::with_capacity(runtimes.len());
        for (index, (runtime, udp)) in runtimes.into_iter().zip(bound.udp).enumerate() {
            let control = control.clone();
            let tcp = tcp.take();
            let mut shutdown = shutdown.clone();
            let thread = std::thread::Builder::new()
                .name(format!("trafik-dns-{index}"))
                .spawn(move || {
                    runtime.block_on(async move {
                        match DnsServer::serve(&control, vec![udp], tcp) {
                            Ok(server) => {
                                let _ = shutdown.wait_for(|stopping| *stopping).await;
                                server.stop().await;
                            }
                            Err(error) => tracing::error!(%error, "dns socket failed"),
                        }
                    });
                })?;
            handles.push(thread);
        }
        // `trafik serve` says where the DNS server listens, once, with the other listeners.
        tracing::debug!(address = %bound.address, "dns listening (udp and tcp)");
        Ok((service, handles))
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.control.address()
    }

    /// Checks that `plan` builds, keeping the counters of what stays.
    pub fn prepare(&self, plan: &DnsServicePlan) -> Result<Authority, Vec<String>> {
        if plan.listen != self.listen {
            tracing::warn!(
                running = %self.listen,
                configured = %plan.listen,
                "the dns address changes only on restart"
            );
        }
        self.control.build(&plan.zones)
    }

    /// Answers from `authority` (made by [`DnsService::prepare`] from `plan`) from now on,
    /// with the checks `plan` asks for.
    pub fn install(&self, plan: &DnsServicePlan, authority: Authority) {
        let liveness = self.liveness(plan);
        self.control.replace(authority, liveness);
    }

    /// What the server answers `question` now, and why (`POST /explain/dns`).
    pub fn explain(&self, question: &trafik_dns::zone::explain::Question) -> serde_json::Value {
        self.control.explain(question)
    }

    pub fn status(&self) -> serde_json::Value {
        self.control.status()
    }

    pub fn metrics(&self, exposition: &mut trafik_metrics_text::Exposition) {
        self.control.metrics(exposition);
    }

    /// The regions' liveness for `plan`, starting the checks it needs and retiring the ones
    /// it no longer has.
    fn liveness(&self, plan: &DnsServicePlan) -> Arc<dyn Liveness> {
        let mut checks = self.checks.lock().unwrap_or_else(|p| p.into_inner());
        let mut wanted = Vec::new();
        let regions = plan
            .zones
            .regions
            .iter()
            .zip(&plan.health)
            .map(|(region, health)| match health {
                RegionHealth::Always => RegionState::Always,
                RegionHealth::Pool(pool) => RegionState::Pool(pool.clone()),
                RegionHealth::Check { address, plan } => {
                    let key = (region.name.clone(), *address);
                    wanted.push(key.clone());
                    let running = checks.get(&key).filter(|c| c.plan == *plan);
                    let live = match running {
                        Some(check) => check.live.clone(),
                        None => {
                            let up = checks
                                .get(&key)
                                .is_none_or(|c| c.live.load(Ordering::Relaxed));
                            let check = self.spawn_check(&region.name, *address, plan, up);
                            let live = check.live.clone();
                            if let Some(replaced) = checks.insert(key, check) {
                                let _ = replaced.retire.send(true);
                            }
                            live
                        }
                    };
                    RegionState::Checked(live)
                }
            })
            .collect();
        checks.retain(|key, check| {
            let keep = wanted.contains(key);
            if !keep {
                let _ = check.retire.send(true);
            }
            keep
        });
        Arc::new(RegionLiveness {
            regions,
            snapshots: self.snapshots.clone(),
        })
    }

    fn spawn_check(
        &self,
        region: &str,
        address: SocketAddr,
        plan: &HealthPlan,
        up: bool,
    ) -> RunningCheck {
        let live = Arc::new(AtomicBool::new(up));
        let (retire, retired) = watch::channel(false);
        let flag = live.clone();
        let region = region.to_owned();
        let check = plan.clone();
        self.runtime.spawn(async move {
            health::watch_target(
                address,
                &check,
                (None, crate::plan::UpstreamProtocol::Http1),
                up,
                retired,
                |up, _| {
                    flag.store(up, Ordering::Relaxed);
                    if up {
                        tracing::info!(%region, target = %address, "dns region marked live");
                    } else {
                        tracing::warn!(%region, target = %address, "dns region marked dead");
                    }
                },
            )
            .await;
        });
        RunningCheck {
            plan: plan.clone(),
            live,
            retire,
        }
    }
}
