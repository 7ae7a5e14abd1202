//! `trafik serve`: run what a config file describes (or the embedded demo) until Ctrl-C or
//! SIGTERM, then drain. Quick mode and `trafik upstream` run through here too.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use trafik_proxy::Reloader;
use trafik_proxy::tls::acme::manager::{self as acme_manager, Store as AcmeStore};
use trafik_upstream::{ReplicaConfig, RunningReplica};

use super::{load_config, say_status};
use crate::cli::ServeArgs;
use crate::config::{self, Loaded};
use crate::describe;

pub fn run(args: ServeArgs) -> Result<ExitCode, String> {
    if args.etcd.etcd.is_some() {
        return super::fleet::run(args);
    }
    let mut loaded = load_config(args.config.as_deref())?;
    loaded.plan.client.access_log |= args.access_log;
    override_addresses(&mut loaded, &args).map_err(|errors| config::render_errors(&errors))?;
    let reloader = args.config.clone().map(|path| reloader(path, args));
    serve(loaded, reloader)?;
    Ok(ExitCode::SUCCESS)
}

/// Reads and checks `path` again for a reload, with the same messages `trafik check` prints.
/// Built-in replicas (`[[upstream]]`) are started once; a reload does not change them.
fn reloader(path: PathBuf, args: ServeArgs) -> Reloader {
    Reloader {
        file: path.display().to_string(),
        load: Box::new(move || {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(&path)
                .map_err(|e| vec![format!("cannot read config file {name}: {e}")])?;
            load_text(&name, &text, &args).map(|loaded| loaded.plan)
        }),
    }
}

/// Checks a configuration's text as `trafik check` does, then applies this instance's flags.
pub fn load_text(name: &str, text: &str, args: &ServeArgs) -> Result<Loaded, Vec<String>> {
    let mut loaded = config::load(name, text)
        .map_err(|errors| errors.iter().map(ToString::to_string).collect::<Vec<_>>())?;
    loaded.plan.client.access_log |= args.access_log;
    override_addresses(&mut loaded, args)?;
    Ok(loaded)
}

/// `--listen NAME=ADDR` and `--admin ADDR`: one configuration, several instances on one
/// machine. `dns` names the DNS server when no listener has that name.
fn override_addresses(loaded: &mut Loaded, args: &ServeArgs) -> Result<(), Vec<String>> {
    let plan = &mut loaded.plan;
    let mut errors = Vec::new();
    for (name, address) in &args.listen {
        if let Some(listener) = plan.listeners.iter_mut().find(|l| &l.name == name) {
            listener.address = *address;
        } else if let (Some(dns), "dns") = (plan.dns.as_mut(), name.as_str()) {
            dns.listen = *address;
        } else {
            let known: Vec<&str> = plan.listeners.iter().map(|l| l.name.as_str()).collect();
            errors.push(format!(
                "--listen {name}={address}: the configuration has no listener {name:?} (it has {known:?})"
            ));
        }
    }
    if let Some(admin) = args.admin {
        plan.admin = Some(admin);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Starts the built-in replicas, then the proxy; reloads on SIGHUP; drains on Ctrl-C or
/// SIGTERM.
pub fn serve(loaded: Loaded, reloader: Option<Reloader>) -> Result<(), String> {
    serve_with(loaded, reloader, None, AcmeStore::Folder)
}

/// Work that runs beside a serving instance on the control runtime (the etcd watch); it is
/// started once the proxy runs and ends with the runtime.
pub type Companion = Box<dyn FnOnce(&trafik_proxy::Running) + Send>;

/// [`serve`], with a companion started once the proxy runs, and ACME certificates kept in
/// `acme`.
pub fn serve_with(
    loaded: Loaded,
    reloader: Option<Reloader>,
    companion: Option<Companion>,
    acme: AcmeStore,
) -> Result<(), String> {
    let runtime = control_runtime()?;
    runtime.block_on(async move {
        let mut stop_signal = StopSignal::install()?;
        let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| format!("cannot catch signals: {e}"))?;
        let mut upgrade =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2())
                .map_err(|e| format!("cannot catch signals: {e}"))?;
        let replicas = start_replicas(loaded.upstreams).await?;
        let running =
            trafik_proxy::start_with(loaded.plan.clone(), reloader).map_err(|e| e.to_string())?;
        say_status(&describe::running(&loaded.plan, &running));
        if let Some(companion) = companion {
            companion(&running);
        }
        tokio::spawn(acme_manager::supervise(acme));
        trafik_proxy::handover::tell_ready();
        loop {
            tokio::select! {
                () = stop_signal.wait() => break,
                _ = upgrade.recv() => match super::upgrade::replace(&running).await {
                    Ok(pid) => {
                        say_status(&format!("upgrade: process {pid} serves now; draining"));
                        break;
                    }
                    Err(error) => tracing::error!("upgrade failed, this process serves on: {error}"),
                },
                _ = hangup.recv() => {
                    let instance = running.instance();
                    match tokio::task::spawn_blocking(move || instance.reload()).await {
                        Ok(Ok(generation)) => tracing::info!(generation, "reloaded on SIGHUP"),
                        Ok(Err(errors)) => {
                            for error in errors {
                                tracing::error!("reload refused, nothing changed: {error}");
                            }
                        }
                        Err(error) => tracing::error!(%error, "reload stopped unexpectedly"),
                    }
                }
            }
        }
        tracing::info!(timeout = ?running.snapshot().drain_timeout, "draining");
        running.stop();
        let _ = tokio::task::spawn_blocking(move || running.wait()).await;
        for replica in replicas {
            replica.stop().await;
        }
        Ok(())
    })
}

pub async fn start_replicas(
    replicas: Vec<(SocketAddr, ReplicaConfig)>,
) -> Result<Vec<RunningReplica>, String> {
    let mut running = Vec::with_capacity(replicas.len());
    for (address, config) in replicas {
        let name = config.name.clone();
        let replica = trafik_upstream::spawn(address, config)
            .await
            .map_err(|e| format!("upstream {name:?} cannot listen on {address}: {e}"))?;
        say_status(&format!("upstream {name} on http://{}", replica.address()));
        running.push(replica);
    }
    Ok(running)
}

/// The runtime for replicas and signals; the proxy's workers run their own.
pub fn control_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// Ctrl-C and SIGTERM, caught from before anything starts so an early signal still drains
/// instead of killing the process.
pub struct StopSignal {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignal {
    pub fn install() -> Result<Self, String> {
        use tokio::signal::unix::{SignalKind, signal};
        let install = |kind| signal(kind).map_err(|e| format!("cannot catch signals: {e}"));
        Ok(StopSignal {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
        })
    }

    pub async fn wait(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
