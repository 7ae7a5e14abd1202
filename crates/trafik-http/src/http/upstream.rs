//! Upstream connections: one keep-alive stack per endpoint (backend address, and TLS settings
//! for a pool that speaks TLS) in every worker.
//!
//! A worker is a single-threaded runtime, so its stacks need no locks: a connection is taken
//! from a plain stack, used for one request and pushed back when the response body ends. Reuse
//! is what turns many client connections into a few upstream ones (the course's 6 → 4), and
//! keying by address lets pools that share a backend share its connections, across reloads too.

use std::cell::RefCell;
use std::collections::HashSet;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::body::{RequestBody, Upload, UploadState};
use crate::meter::Meter;
use crate::plan::AnswerLimits;
use crate::pool::keep_alive::{self, MAX_IDLE_PER_ENDPOINT};
use crate::pool::{Endpoint, InFlight, Pool};
use crate::snapshot::Snapshot;
use crate::transport;

type Sender = SendRequest<RequestBody>;

/// One endpoint's idle connections in one worker.
pub struct IdleList {
    senders: RefCell<Vec<Idle>>,
    endpoint: Arc<Endpoint>,
}

/// An idle connection, with the meter of its socket (the pool that uses it next is charged)
/// and the moment it came back, for the idle timeout.
struct Idle {
    sender: Sender,
    meter: Meter,
    since: Instant,
}

/// One worker's connection stacks, indexed by [`Endpoint::id`].
pub struct Upstreams {
    worker: usize,
    idle: RefCell<Vec<Option<Rc<IdleList>>>>,
}

/// A connection lent to one request. [`Lease::release`] returns it for reuse; dropping the
/// lease instead closes it, as must happen when a response ends early or broke.
pub struct Lease {
    sender: Sender,
    meter: Meter,
    home: Rc<IdleList>,
    /// The request body's progress: a connection still carrying an upload (the backend
    /// answered before reading it all) must not serve anyone else.
    upload: Option<Rc<Upload>>,
    in_flight: InFlight,
}

impl Lease {
    /// The answer's body has ended: the connection goes back for reuse.
    pub fn release(mut self) {
        self.in_flight.answer_ended();
        if self
            .upload
            .as_ref()
            .is_some_and(|upload| upload.state() != UploadState::Sent)
        {
            return;
        }
        let mut idle = self.home.senders.borrow_mut();
        if idle.len() < MAX_IDLE_PER_ENDPOINT {
            idle.push(Idle {
                sender: self.sender,
                meter: self.meter,
                since: Instant::now(),
            });
        }
    }

    /// The backend cut the answer's body short: counted against it, and the connection closes.
    pub fn cut(mut self) {
        self.in_flight.answer_cut();
    }
}

/// A connection ready to carry one request.
pub struct Checkout {
    pub sender: Sender,
    meter: Meter,
    home: Rc<IdleList>,
}

impl Checkout {
    /// Ties the connection to the request's in-flight mark and upload, for the response body
    /// to release.
    pub fn into_lease(self, in_flight: InFlight, upload: Option<Rc<Upload>>) -> Lease {
        Lease {
            sender: self.sender,
            meter: self.meter,
            home: self.home,
            upload,
            in_flight,
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

    /// Closes the idle connections to endpoints no pool of `snapshot` names any more (a reload
    /// removed them); their stacks stay, empty, should the address come back.
    pub fn keep_only(&self, snapshot: &Snapshot) {
        let named: HashSet<usize> = snapshot
            .pools
            .iter()
            .flat_map(|pool| pool.members.iter().map(|member| member.endpoint.id))
            .collect();
        for (id, stack) in self.idle.borrow().iter().enumerate() {
            if let Some(stack) = stack
                && !named.contains(&id)
            {
                stack.senders.borrow_mut().clear();
            }
        }
    }

    /// Closes the connections [`keep_alive::stale`] at `now`: a backend keeps no socket of
    /// trafik's open for longer than the idle timeout, and a burst's surplus goes sooner.
    pub fn close_idle(&self, now: Instant, idle_timeout: Duration) {
        for stack in self.idle.borrow().iter().flatten() {
            let mut senders = stack.senders.borrow_mut();
            let stale = keep_alive::stale(senders.iter().map(|idle| idle.since), now, idle_timeout);
            senders.drain(..stale);
        }
    }

    /// An idle connection to backend `backend` of `pool` if one is still open, or else a new
    /// one (always a new one when `fresh`, its answers' heads held to `limits`).
    pub async fn checkout(
        &self,
        pool: &Pool,
        backend: usize,
        fresh: bool,
        limits: AnswerLimits,
    ) -> io::Result<Checkout> {
        let member = &pool.members[backend];
        let home = self.home(&member.endpoint);
        if !fresh {
            loop {
                let Some(Idle {
                    mut sender, meter, ..
                }) = home.senders.borrow_mut().pop()
                else {
                    break;
                };
                if sender.is_closed() {
                    continue;
                }
                // An idle connection is ready at once; one that is not is given up, not waited on.
                let ready = tokio::time::timeout(pool.plan.connect_timeout, sender.ready()).await;
                if matches!(ready, Ok(Ok(()))) {
                    meter.charge(&member.counters);
                    return Ok(Checkout {
                        sender,
                        meter,
                        home,
                    });
                }
            }
        }
        let meter = Meter::new(&member.counters, self.worker);
        // Boxed: a TLS handshake's state is large, and every request's future would carry its
        // size (and copy it) though most requests find an idle connection.
        let sender = Box::pin(self.connect(&home.endpoint, meter.clone(), pool, limits)).await?;
        Ok(Checkout {
            sender,
            meter,
            home,
        })
    }

    /// Opens a new connection ([`transport::connect_upstream`], TLS too for a TLS pool) and
    /// starts its driver task.
    async fn connect(
        &self,
        endpoint: &Arc<Endpoint>,
        meter: Meter,
        pool: &Pool,
        limits: AnswerLimits,
    ) -> io::Result<Sender> {
        let timeout = pool.plan.connect_timeout;
        let tls = pool.plan.tls.as_ref();
        let stream =
            transport::connect_upstream(endpoint, tls, meter, timeout, self.worker).await?;
        start(stream, limits).await
    }
}

/// Starts HTTP/1.1 on a new upstream connection. The driver hands the socket over when the
/// backend switches protocols (a 101); the socket keeps its place in the endpoint's gauge
/// until it closes, whichever of them has it then. An answer head past `limits` is an error.
async fn start<S>(stream: S, limits: AnswerLimits) -> io::Result<Sender>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http1::Builder::new()
        .max_headers(limits.headers)
        .max_buf_size(limits.bytes)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(io::Error::other)?;
    tokio::task::spawn_local(async move {
        let _ = connection.with_upgrades().await;
    });
    Ok(sender)
}
