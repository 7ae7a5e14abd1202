//! `trafik serve`: run what a config file describes (or the embedded demo) until Ctrl-C or
//! SIGTERM, then drain. Quick mode and `trafik upstream` run through here too.

use std::net::SocketAddr;
use std::process::ExitCode;

use trafik_upstream::{ReplicaConfig, RunningReplica};

use super::{load_config, say};
use crate::cli::ServeArgs;
use crate::config::Loaded;
use crate::describe;

pub fn run(args: ServeArgs) -> Result<ExitCode, String> {
    let mut loaded = load_config(args.config.as_deref())?;
    loaded.plan.client.access_log |= args.access_log;
    serve(loaded)?;
    Ok(ExitCode::SUCCESS)
}

/// Starts the built-in replicas, then the proxy; drains on Ctrl-C or SIGTERM.
pub fn serve(loaded: Loaded) -> Result<(), String> {
    let runtime = control_runtime()?;
    runtime.block_on(async move {
        let stop_signal = StopSignal::install()?;
        let replicas = start_replicas(loaded.upstreams).await?;
        let running = trafik_proxy::start(loaded.plan.clone()).map_err(|e| e.to_string())?;
        say(&describe::running(&loaded.plan, &running));
        stop_signal.wait().await;
        tracing::info!(timeout = ?loaded.plan.drain_timeout, "draining");
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
        say(&format!("upstream {name} on http://{}", replica.address()));
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

    pub async fn wait(mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
