//! Upstream connections: one keep-alive stack per endpoint (backend address, and TLS settings
//! for a pool that speaks TLS) in every worker.
//!
//! A worker is a single-threaded runtime, so its stacks need no locks: a connection is taken
//! from a plain stack, used for one request and pushed back when the response body ends. Reuse
//! is what turns many client connections into a few upstream ones (the course's 6 → 4), and
//! keying by address lets pools that share a backend share its connections, across reloads too.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use super::body::RequestBody;
use crate::pool::{Endpoint, Pool};
use crate::snapshot::WorkerSnapshot;
use crate::transport::{self, OpenConnection};

/// Idle connections kept per endpoint in one worker; more are closed when they come back.
const MAX_IDLE_PER_ENDPOINT: usize = 512;

type Sender = SendRequest<RequestBody>;

/// One endpoint's idle connections in one worker.
pub struct IdleList {
    senders: RefCell<Vec<Sender>>,
    endpoint: Arc<Endpoint>,
}

/// One worker's connection stacks, indexed by [`Endpoint::id`].
pub struct Upstreams {
    worker: usize,
    idle: RefCell<Vec<Option<Rc<IdleList>>>>,
}

/// Marks a request in flight to one backend of one pool for as long as it lives.
pub struct InFlight {
    snapshot: Rc<WorkerSnapshot>,
    pool: usize,
    backend: usize,
    worker: usize,
}

impl InFlight {
    pub fn start(
        snapshot: &Rc<WorkerSnapshot>,
        pool: usize,
        backend: usize,
        worker: usize,
    ) -> Self {
        let target = &snapshot.pools[pool];
        target.members[backend]
            .counters
            .mine(worker)
            .in_flight
            .fetch_add(1, Ordering::Relaxed);
        if target.tracks_in_flight {
            target.backends.start(backend);
        }
        InFlight {
            snapshot: snapshot.clone(),
            pool,
            backend,
            worker,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let pool = &self.snapshot.pools[self.pool];
        pool.members[self.backend]
            .counters
            .mine(self.worker)
            .in_flight
            .fetch_sub(1, Ordering::Relaxed);
        if pool.tracks_in_flight {
            pool.backends.finish(self.backend);
        }
    }
}

/// A connection lent to one request. [`Lease::release`] returns it for reuse; dropping the
/// lease instead closes it, as must happen when a response ends early or broke.
pub struct Lease {
    sender: Sender,
    home: Rc<IdleList>,
    _in_flight: InFlight,
}

impl Lease {
    pub fn release(self) {
        let mut idle = self.home.senders.borrow_mut();
        if idle.len() < MAX_IDLE_PER_ENDPOINT {
            idle.push(self.sender);
        }
    }
}

/// A connection ready to carry one request.
pub struct Checkout {
    pub sender: Sender,
    home: Rc<IdleList>,
}

impl Checkout {
    /// Ties the connection to the request's in-flight mark, for the response body to release.
    pub fn into_lease(self, in_flight: InFlight) -> Lease {
        Lease {
            sender: self.sender,
            home: self.home,
            _in_flight: in_flight,
        }
    }
}

impl Upstreams {
    pub fn new(worker: usize) -> Self {
        Upstreams {
            worker,
            idle: RefCell::default(),
        }
    }

    fn home(&self, endpoint: &Arc<Endpoint>) -> Rc<IdleList> {
        let mut idle = self.idle.borrow_mut();
        if idle.len() <= endpoint.id {
            idle.resize(endpoint.id + 1, None);
        }
        idle[endpoint.id]
            .get_or_insert_with(|| {
                Rc::new(IdleList {
                    senders: RefCell::default(),
                    endpoint: endpoint.clone(),
                })
            })
            .clone()
    }

    /// An idle connection to backend `backend` of `pool` if one is still open, or else a new
    /// one (always a new one when `fresh`).
    pub async fn checkout(&self, pool: &Pool, backend: usize, fresh: bool) -> io::Result<Checkout> {
        let home = self.home(&pool.members[backend].endpoint);
        if !fresh {
            loop {
                let Some(mut sender) = home.senders.borrow_mut().pop() else {
                    break;
                };
                if sender.is_closed() {
                    continue;
                }
                if sender.ready().await.is_ok() {
                    return Ok(Checkout { sender, home });
                }
            }
        }
        // Boxed: a TLS handshake's state is large, and every request's future would carry its
        // size (and copy it) though most requests find an idle connection.
        let sender = Box::pin(self.connect(&home.endpoint, pool)).await?;
        Ok(Checkout { sender, home })
    }

    /// Opens a new connection (the TLS handshake too, for a TLS pool, within the same connect
    /// timeout) and starts its driver task, which holds the connection's place in the
    /// endpoint's gauge until it ends.
    async fn connect(&self, endpoint: &Arc<Endpoint>, pool: &Pool) -> io::Result<Sender> {
        let started = Instant::now();
        let timeout = pool.plan.connect_timeout;
        let (stream, open) = transport::connect(endpoint, timeout, self.worker).await?;
        match &pool.plan.tls {
            None => start(stream, open).await,
            Some(tls) => {
                let handshake = tls.connect(endpoint.address, stream);
                let stream = tokio::time::timeout_at(started + timeout, handshake)
                    .await
                    .map_err(|_| {
                        io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")
                    })??;
                start(stream, open).await
            }
        }
    }
}

/// Starts HTTP/1.1 on a new upstream connection.
async fn start<S>(stream: S, open: OpenConnection) -> io::Result<Sender>
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let (sender, connection) = http1::Builder::new()
        .handshake(TokioIo::new(stream))
        .await
        .map_err(io::Error::other)?;
    tokio::task::spawn_local(async move {
        let _ = connection.await;
        drop(open);
    });
    Ok(sender)
}
