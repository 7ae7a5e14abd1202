//! Upstream connections: one keep-alive pool per backend in every worker.
//!
//! A worker is a single-threaded runtime, so its pools need no locks: a connection is taken from
//! a plain stack, used for one request and pushed back when the response body ends. Reuse is
//! what turns many client connections into a few upstream ones (the course's 6 → 4).

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::pool::Pool;

/// Idle connections kept per backend in one worker; more are closed when they come back.
const MAX_IDLE_PER_BACKEND: usize = 512;

/// One backend as one worker sees it: its idle connections, and its pool for counting.
pub struct IdleList {
    senders: RefCell<Vec<SendRequest<Incoming>>>,
    pool: Arc<Pool>,
    backend: usize,
}

/// One worker's connection pools, indexed by pool then backend.
pub struct Upstreams {
    idle: Vec<Vec<Rc<IdleList>>>,
}

/// Marks a request in flight to a backend for as long as it lives.
pub struct InFlight {
    home: Rc<IdleList>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.home.pool.backends.finish(self.home.backend);
    }
}

/// A connection lent to one request. [`Lease::release`] returns it for reuse; dropping the
/// lease instead closes it, as must happen when a response ends early or broke.
pub struct Lease {
    sender: SendRequest<Incoming>,
    home: Rc<IdleList>,
    _in_flight: InFlight,
}

impl Lease {
    pub fn release(self) {
        let mut idle = self.home.senders.borrow_mut();
        if idle.len() < MAX_IDLE_PER_BACKEND {
            idle.push(self.sender);
        }
    }
}

/// A connection ready to carry one request.
pub struct Checkout {
    pub sender: SendRequest<Incoming>,
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
    pub fn new(pools: &[Arc<Pool>]) -> Self {
        let idle = pools
            .iter()
            .map(|pool| {
                (0..pool.backends.len())
                    .map(|backend| {
                        Rc::new(IdleList {
                            senders: RefCell::default(),
                            pool: pool.clone(),
                            backend,
                        })
                    })
                    .collect()
            })
            .collect();
        Upstreams { idle }
    }

    /// Marks one more request in flight to `backend` of pool `pool_index` until the guard drops.
    pub fn start(&self, pool_index: usize, backend: usize) -> InFlight {
        let home = self.idle[pool_index][backend].clone();
        home.pool.backends.start(backend);
        InFlight { home }
    }

    /// An idle connection to the backend if one is still open, or else a new one.
    pub async fn checkout(
        &self,
        pool_index: usize,
        pool: &Arc<Pool>,
        backend: usize,
        fresh: bool,
    ) -> io::Result<Checkout> {
        let home = self.idle[pool_index][backend].clone();
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
        let sender = connect(pool, backend).await?;
        Ok(Checkout { sender, home })
    }
}

/// Opens a new connection within the pool's connect timeout and starts its driver task.
async fn connect(pool: &Arc<Pool>, backend: usize) -> io::Result<SendRequest<Incoming>> {
    let address = pool.address(backend);
    let stream = tokio::time::timeout(pool.plan.connect_timeout, TcpStream::connect(address))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::Builder::new()
        .handshake(TokioIo::new(stream))
        .await
        .map_err(io::Error::other)?;
    let stats_pool = pool.clone();
    stats_pool.stats[backend]
        .connections
        .fetch_add(1, Ordering::Relaxed);
    tokio::task::spawn_local(async move {
        let _ = connection.await;
        stats_pool.stats[backend]
            .connections
            .fetch_sub(1, Ordering::Relaxed);
    });
    Ok(sender)
}
