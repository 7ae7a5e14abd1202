//! One layer-4 connection: a backend chosen once, a connect retried elsewhere when it fails,
//! then bytes copied both ways until both sides have finished sending.

use std::net::SocketAddr;
use std::pin::pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use trafik_balance::{Outcome, PickContext};

use trafik_runtime::connections::{Control, Watched};
use trafik_runtime::counters::bump;
use trafik_runtime::key::client_ip_key;
use trafik_runtime::meter::{Meter, Metered};
use trafik_runtime::plan::HashKey;
use trafik_runtime::pool::{Call, InFlight};
use trafik_runtime::transport;

use crate::copy::copy_both_ways;
use crate::{Layer4Snapshot, Worker};

/// A client connection on its way to a backend.
pub struct Client {
    pub stream: Watched<TcpStream>,
    pub peer: SocketAddr,
    /// What the client sent before the backend was chosen (a ClientHello), sent on first.
    pub read_ahead: Vec<u8>,
}

/// A connected backend, counted as in use until dropped.
struct Connected {
    stream: Metered<TcpStream>,
    index: usize,
    _in_flight: InFlight,
}

/// How a relay ended.
enum End {
    /// Both sides finished sending (or one broke the connection).
    Finished(std::io::Result<(u64, u64)>),
    /// No byte moved either way for the idle timeout.
    Idle,
    /// Draining, and the drain timeout passed.
    Drained,
}

/// Relays `client` to a backend of pool `pool` (an index into the snapshot's pools) until both
/// sides finish, the connection idles out, or it drains and the drain timeout passes.
pub async fn relay<S: Layer4Snapshot>(
    worker: Worker,
    snapshot: &Rc<S>,
    pool: usize,
    mut client: Client,
    control: &Control,
) {
    let started = Instant::now();
    let Some(mut backend) = connect(worker, snapshot, pool, client.peer).await else {
        return;
    };
    let target = &snapshot.pools()[pool];
    // The address the client connected to is asked of the kernel only for a PROXY header.
    let mut preface = match target.plan.proxy_protocol {
        Some(version) => match client.stream.get_ref().local_addr() {
            Ok(local) => version.header(client.peer, local),
            Err(_) => return,
        },
        None => Vec::new(),
    };
    preface.append(&mut client.read_ahead);
    if !preface.is_empty() && backend.stream.write_all(&preface).await.is_err() {
        bump(
            &target.members[backend.index]
                .counters
                .mine(worker.id)
                .failures,
        );
        return;
    }
    let end = relay_until_done(
        &mut client.stream,
        &mut backend.stream,
        control,
        snapshot.drain_timeout(),
    )
    .await;
    if snapshot.access_log() {
        let (sent, received) = match &end {
            End::Finished(Ok(counts)) => *counts,
            _ => (0, 0),
        };
        tracing::info!(
            target: "trafik::access",
            client = %client.peer,
            pool = %target.plan.name,
            backend = %target.address(backend.index),
            sent,
            received,
            end = match end {
                End::Finished(Ok(_)) => "closed",
                End::Finished(Err(_)) => "broken",
                End::Idle => "idle",
                End::Drained => "drained",
            },
            micros = started.elapsed().as_micros() as u64,
        );
    }
}

/// Chooses a backend and connects to it through the pool's [`Call`], which tries others as
/// its retries and budget allow when a connect fails. `None` when no backend could be reached:
/// the client's connection is closed.
async fn connect<S: Layer4Snapshot>(
    worker: Worker,
    snapshot: &Rc<S>,
    pool_index: usize,
    peer: SocketAddr,
) -> Option<Connected> {
    let pool = &snapshot.pools()[pool_index];
    let me = worker.id;
    let mut context = PickContext::default();
    if pool.needs_key() && pool.plan.hash_key == Some(HashKey::ClientIp) {
        context.key = Some(client_ip_key(peer.ip()));
    }
    // A layer-4 pool has no adaptive limit (refused by the configuration's check).
    let now = Instant::now();
    let mut call = Call::start(snapshot, pool_index, me, worker.epoch, now, context, None)
        .ok()?
        .for_connections();
    while let Some(attempt) = call.next().await {
        let member = &pool.members[attempt.index];
        let meter = Meter::new(&member.counters, me);
        match transport::connect(&member.endpoint, meter, pool.plan.connect_timeout, me).await {
            Ok(stream) => {
                // A connection made is a success to passive health; latency-aware rules learn
                // each backend's connect time, as Sozu's do.
                call.settled(attempt.index, attempt.sent_at, Instant::now());
                pool.report(attempt.index, Outcome::Success);
                return Some(Connected {
                    stream,
                    index: attempt.index,
                    _in_flight: attempt.in_flight,
                });
            }
            Err(error) => {
                tracing::debug!(pool = %pool.plan.name, backend = %member.endpoint.address, %error, "connect failed");
                call.connect_failed(attempt, trafik_runtime::Cause::of_connect(&error));
            }
        }
    }
    call.failure();
    None
}

/// Copies both ways ([`crate::copy`]) until done, idle, or drained and past the drain timeout.
async fn relay_until_done(
    client: &mut Watched<TcpStream>,
    backend: &mut Metered<TcpStream>,
    control: &Control,
    drain_timeout: Duration,
) -> End {
    let mut copying = pin!(copy_both_ways(client, backend));
    // A byte stream has no request boundary to stop at, so a draining connection gets the drain
    // timeout to finish on its own.
    let mut grace = None;
    std::future::poll_fn(|cx| {
        control.remember(cx.waker());
        if control.is_idle() {
            return Poll::Ready(End::Idle);
        }
        if control.should_drain() {
            let deadline = grace.get_or_insert_with(|| Box::pin(tokio::time::sleep(drain_timeout)));
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(End::Drained);
            }
        }
        copying.as_mut().poll(cx).map(End::Finished)
    })
    .await
}
