//! Active health checks: one probe loop per backend of the configuration in force, feeding the rise/fall state machine of
//! `trafik-balance` and publishing its verdict into the pool's backend set.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use trafik_balance::{Health, HealthThresholds, Transition};

use crate::plan::{HealthCheck, HealthPlan};
use crate::pool::Pool;
use crate::snapshot::Snapshot;
use crate::tls::backend::BackendTls;

/// Runs the probe loops of the configuration in force: on every new snapshot the loops of the
/// previous one stop and the new pools' loops start, each from the verdict its backend carried
/// over, so a reload neither forgets a down backend nor waits `rise` probes to trust an up one.
pub async fn supervise(
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let snapshot = snapshots.borrow_and_update().clone();
        let (retire, retired) = watch::channel(false);
        for pool in &snapshot.pools {
            let Some(plan) = &pool.plan.health else {
                continue;
            };
            for index in 0..pool.backends.len() {
                tokio::spawn(probe_loop(
                    pool.clone(),
                    index,
                    plan.clone(),
                    retired.clone(),
                ));
            }
        }
        tokio::select! {
            _ = shutdown.wait_for(|stopping| *stopping) => {
                let _ = retire.send(true);
                return;
            }
            changed = snapshots.changed() => {
                let _ = retire.send(true);
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

async fn probe_loop(
    pool: Arc<Pool>,
    index: usize,
    plan: HealthPlan,
    mut retired: watch::Receiver<bool>,
) {
    let thresholds = HealthThresholds {
        fall: plan.fall,
        rise: plan.rise,
    };
    let mut health = Health::starting(thresholds, pool.backends.is_up(index));
    let address = pool.address(index);
    let mut ticker = tokio::time::interval(plan.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = retired.wait_for(|retired| *retired) => return,
        }
        let probing = probe(address, &plan.check, pool.plan.tls.as_ref());
        let passed = tokio::time::timeout(plan.timeout, probing)
            .await
            .unwrap_or(false);
        match health.record(passed) {
            Transition::Unchanged => {}
            Transition::WentDown => {
                pool.backends.set_up(index, false);
                tracing::warn!(pool = %pool.plan.name, backend = %address, "backend marked down");
            }
            Transition::WentUp => {
                pool.backends.set_up(index, true);
                tracing::info!(pool = %pool.plan.name, backend = %address, "backend marked up");
            }
        }
    }
}

/// One probe; true when the backend passed. A TLS pool's probes speak TLS too, with the pool's
/// settings, so a backend whose certificate the pool would refuse is down: the check sees what
/// requests would meet.
async fn probe(address: SocketAddr, check: &HealthCheck, tls: Option<&BackendTls>) -> bool {
    let Ok(stream) = TcpStream::connect(address).await else {
        return false;
    };
    match tls {
        None => ask(stream, address, check).await,
        Some(tls) => match tls.connect(address, stream).await {
            Ok(stream) => ask(stream, address, check).await,
            Err(_) => false,
        },
    }
}

/// The check itself, on a connected stream: a `tcp` check has passed by now.
async fn ask<S>(mut stream: S, address: SocketAddr, check: &HealthCheck) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let path = match check {
        HealthCheck::Tcp => return true,
        HealthCheck::Http { path } => path,
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nUser-Agent: trafik-health\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    // "HTTP/1.1 200" is 12 bytes; read until the status code is in.
    let mut head = [0u8; 12];
    let mut filled = 0;
    while filled < head.len() {
        match stream.read(&mut head[filled..]).await {
            Ok(0) | Err(_) => return false,
            Ok(read) => filled += read,
        }
    }
    passes(&head)
}

/// Whether a status line starts with a 2xx or 3xx status.
fn passes(status_line: &[u8; 12]) -> bool {
    status_line.starts_with(b"HTTP/1.") && matches!(status_line[9], b'2' | b'3')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_and_three_hundreds_pass() {
        assert!(passes(b"HTTP/1.1 200"));
        assert!(passes(b"HTTP/1.0 302"));
        assert!(!passes(b"HTTP/1.1 503"));
        assert!(!passes(b"HTTP/1.1 404"));
        assert!(!passes(b"SSH-2.0-Open"));
    }
}
