//! `trafik upstream`: one replica of the course's tracking service, alone, until a stop signal.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use trafik_upstream::{LoadLesson, ReplicaConfig};

use super::serve::{StopSignal, control_runtime, start_replicas};
use crate::cli::Command;

/// `command` is the parsed `trafik upstream` command.
pub fn run(command: Command) -> Result<ExitCode, String> {
    let Command::Upstream {
        listen,
        name,
        delay,
        wait_ms,
        work_ms,
        maintenance_every,
        maintenance_scan,
    } = command
    else {
        unreachable!("main hands only `trafik upstream` to this module");
    };
    let millis = |ms: f64, flag: &str| {
        Duration::try_from_secs_f64(ms / 1000.0)
            .map_err(|_| format!("--{flag} must be a number of milliseconds of at least 0"))
    };
    let load_lesson = LoadLesson {
        wait: millis(wait_ms, "wait-ms")?,
        work: millis(work_ms, "work-ms")?,
        maintenance_every,
        maintenance_scan,
    };
    let replica = ReplicaConfig {
        name,
        delay: delay.unwrap_or_default(),
        load_lesson,
    };
    serve_replicas(vec![(listen, replica)])?;
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
        let stop_signal = StopSignal::install()?;
        let replicas = start_replicas(replicas).await?;
        stop_signal.wait().await;
        for replica in replicas {
            replica.stop().await;
        }
        Ok(())
    })
}
