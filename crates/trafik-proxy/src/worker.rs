//! Data-plane workers: one thread per core, each with a single-threaded tokio runtime that
//! accepts on its own `SO_REUSEPORT` copy of every listener and keeps its own upstream
//! connections. Nothing on the request path crosses threads except per-worker counter shards;
//! a reload reaches a worker as a new snapshot and, when listeners change, as sockets to add and
//! listeners to remove.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::accept;
use crate::connections::Connections;
use crate::http::service::WorkerProxy;
use crate::snapshot::{ListenerId, Snapshot};

/// One worker's socket of a listener: TCP, or UDP for an `h3` listener's QUIC endpoint.
pub enum Socket {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

/// A change of listeners, sent to every worker by a reload.
pub enum ListenerChange {
    /// Start accepting on this worker's socket of a new listener.
    Add(ListenerId, Socket),
    /// Stop accepting and drain that listener's connections.
    Remove(ListenerId),
}

/// What one worker thread starts with.
pub struct WorkerStart {
    pub id: usize,
    pub listeners: Vec<(ListenerId, Socket)>,
    pub changes: mpsc::UnboundedReceiver<ListenerChange>,
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    pub shutdown: watch::Receiver<bool>,
    pub epoch: Instant,
    /// Client connections all workers may hold together (see [`crate::descriptors`]).
    pub budget: Arc<Semaphore>,
}

/// Runs one worker until `shutdown` turns true and its connections drain (or the drain timeout
/// passes, when the remaining connections are dropped with the runtime).
pub async fn run(start: WorkerStart) {
    let WorkerStart {
        id,
        listeners,
        mut changes,
        mut snapshots,
        mut shutdown,
        epoch,
        budget,
    } = start;
    let snapshot = snapshots.borrow_and_update().clone();
    let proxy = Rc::new(WorkerProxy::new(id, snapshot.clone(), epoch));
    // Every accept loop and connection holds a clone of `alive`; when all are dropped the
    // receiver sees the channel close, which is how the worker knows it has drained.
    let (alive, mut drained) = mpsc::channel::<()>(1);
    let connections = Connections::new(snapshot.client.idle_timeout);
    tokio::task::spawn_local(connections.clone().sweep(shutdown.clone()));
    tokio::task::spawn_local(crate::http::cache::run_jobs(proxy.clone()));
    tokio::task::spawn_local(crate::http::mirror::run(proxy.clone()));
    let mut accepting: HashMap<ListenerId, watch::Sender<bool>> = HashMap::new();
    let add = |id: ListenerId,
               socket: Socket,
               accepting: &mut HashMap<ListenerId, watch::Sender<bool>>| {
        let (stop, stopped) = watch::channel(false);
        let socket = match socket {
            Socket::Tcp(socket) => socket,
            Socket::Udp(socket) => {
                match accept::quic_endpoint(&proxy, id, socket) {
                    Ok(endpoint) => {
                        accepting.insert(id, stop);
                        tokio::task::spawn_local(accept::quic_accept_loop(
                            proxy.clone(),
                            id,
                            endpoint,
                            connections.clone(),
                            stopped,
                            alive.clone(),
                        ));
                    }
                    Err(error) => tracing::error!(%error, "QUIC endpoint could not start"),
                }
                return;
            }
        };
        let listener = match TcpListener::from_std(socket) {
            Ok(listener) => listener,
            Err(error) => {
                tracing::error!(%error, "listener could not join the worker's runtime");
                return;
            }
        };
        accepting.insert(id, stop);
        tokio::task::spawn_local(accept::accept_loop(
            proxy.clone(),
            id,
            listener,
            connections.clone(),
            stopped,
            alive.clone(),
            budget.clone(),
        ));
    };
    for (listener, socket) in listeners {
        add(listener, socket, &mut accepting);
    }
    // Puts a reload's snapshot in force on this worker.
    let follow = |snapshot: Arc<Snapshot>| {
        connections.set_idle_timeout(snapshot.client.idle_timeout);
        proxy.upstreams.keep_only(&snapshot);
        proxy.raw.keep_only(&snapshot.pools);
        proxy.publish(snapshot);
    };
    let mut every_second = tokio::time::interval(Duration::from_secs(1));
    every_second.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stopping| *stopping) => break,
            _ = every_second.tick() => {
                let (now, idle_timeout) = (Instant::now(), proxy.snapshot().client.idle_timeout);
                proxy.upstreams.close_idle(now, idle_timeout);
                proxy.raw.close_idle(now, idle_timeout);
            }
            changed = snapshots.changed() => {
                if changed.is_err() {
                    break;
                }
                follow(snapshots.borrow_and_update().clone());
            }
            Some(change) = changes.recv() => match change {
                ListenerChange::Add(listener, socket) => {
                    // A reload publishes its snapshot before it sends the new listener's
                    // sockets, but `select!` may take the sockets first: an h3 listener's
                    // endpoint needs its QUIC settings from the snapshot, and one that failed
                    // to start would leave its socket bound (the handover's copy holds it) and
                    // unread, a sink for the clients the kernel hashes to it.
                    if snapshots.has_changed().unwrap_or(false) {
                        follow(snapshots.borrow_and_update().clone());
                    }
                    add(listener, socket, &mut accepting)
                }
                ListenerChange::Remove(listener) => {
                    if let Some(stop) = accepting.remove(&listener) {
                        let _ = stop.send(true);
                    }
                    connections.drain_listener(listener);
                }
            },
        }
    }
    for stop in accepting.values() {
        let _ = stop.send(true);
    }
    drop(alive);
    let drain_timeout = proxy.snapshot().drain_timeout;
    let _ = tokio::time::timeout(drain_timeout, drained.recv()).await;
}
