//! `trafik upstream`: one replica of the course's tracking service, alone, until a stop signal.

use std::net::SocketAddr;
use std::process::ExitCode;
use trafik_upstream::ReplicaConfig;

use super::serve::{StopSignal, control_runtime, start_replicas};
use crate::cli::UpstreamArgs;

pub fn run(args: UpstreamArgs) -> Result<ExitCode, String> {
    let replica = ReplicaConfig {
        load_lesson: args.lesson.load_lesson(),
        name: args.name,
        delay: args.delay.unwrap_or_default(),
        role: args.role.into(),
    };
    serve_replicas(vec![(args.listen, replica)])?;
    Ok(ExitCode::SUCCESS)
}

/// Runs replicas alone until a stop signal. With the load lesson's CPU work or maintenance
/// passes on, the replica runs on one thread, as the lesson's Node.js server does: a pass then
/// holds up every request, which is the behaviour the soak test exposes.
fn serve_replicas(replicas: Vec<(SocketAddr, ReplicaConfig)>) -> Result<(), String> {
    let single_threaded = replicas
        .iter()
        .any(|(_, c)| c.load_lesson.maintenance_every > 0 || !c.load_lesson.work.is_zero());
    let runtime = if single_threaded {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the runtime: {e}"))?
    } else {
        control_runtime()?
    };
    runtime.block_on(async move {
        let mut stop_signal = StopSignal::install()?;
        let replicas = start_replicas(replicas).await?;
        stop_signal.wait().await;
        for replica in replicas {
            replica.stop().await;
        }
        Ok(())
    })
}
