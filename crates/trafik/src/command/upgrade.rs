//! Binary upgrade on SIGUSR2: `trafik serve` starts the binary at its own argv[0] with the same
//! arguments, hands it every listening socket ([`trafik_proxy::handover`]), and once the
//! successor says it serves, stops accepting and drains. Until then nothing changes here: a
//! successor that fails to start (a bad file, an address it cannot bind) leaves this process
//! serving.

use std::io::Read;
use std::time::Duration;

use trafik_proxy::Running;

/// How long the successor may take to start serving.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Starts the successor and waits for it to serve; its process id, or why not.
pub async fn replace(running: &Running) -> Result<u32, String> {
    let mut argv = std::env::args_os();
    let program = argv.next().ok_or("no argv[0] to start again")?;
    let args: Vec<_> = argv.collect();
    let sockets = running.handover_sockets();
    let (mut child, mut ready) = trafik_proxy::handover::spawn_successor(&program, &args, &sockets)
        .map_err(|e| format!("cannot start {}: {e}", program.to_string_lossy()))?;
    let pid = child.id();
    tracing::info!(pid, "upgrade: successor started");
    let answer = tokio::task::spawn_blocking(move || {
        ready.set_read_timeout(Some(READY_WITHIN))?;
        let mut line = [0u8; 6];
        ready.read_exact(&mut line).map(|()| line)
    })
    .await
    .map_err(|e| e.to_string())?;
    match answer {
        Ok(line) if &line == b"ready\n" => Ok(pid),
        outcome => {
            // Ours to end: it never took over.
            let _ = child.kill();
            let _ = tokio::task::spawn_blocking(move || child.wait()).await;
            Err(format!(
                "process {pid} did not say it serves ({})",
                outcome
                    .err()
                    .map_or("a wrong answer".into(), |e| e.to_string())
            ))
        }
    }
}
