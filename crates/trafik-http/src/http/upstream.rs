//! Upstream connections: one keep-alive stack per endpoint (backend address, and TLS settings
//! for a pool that speaks TLS) in every worker, and for HTTP/2 backends the worker's shared
//! connections, each carrying up to the backend's `SETTINGS_MAX_CONCURRENT_STREAMS` requests
//! at once (another is opened when all are full).
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

use std::cell::Cell;
use std::future::Future;

use futures_util::FutureExt;
use futures_util::future::Either;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::body::{RequestBody, Upload, UploadState};
use super::upstream_h2::{Http2Body, Http2Connection};
use crate::meter::Meter;
use crate::plan::{AnswerLimits, UpstreamProtocol};
use crate::pool::keep_alive::{self, MAX_IDLE_PER_ENDPOINT};
use crate::pool::{Endpoint, InFlight, Pool};
use crate::snapshot::Snapshot;
use crate::transport;

/// A connection's request side: HTTP/1.1 (one request at a time, lent out) or HTTP/2
/// (shared: each request a stream).
pub enum Sender {
    Http1(http1::SendRequest<RequestBody>),
    Http2(Http2Connection),
}

/// A request that got no answer: handed back unsent when the connection could not take it
/// (it may go on a new one), or lost. Boxed: the error is rare, and a result carries its size.
pub struct SendError(Option<Box<Request<RequestBody>>>);

impl SendError {
    pub fn unsent(request: Request<RequestBody>) -> Self {
        SendError(Some(Box::new(request)))
    }

    pub fn lost() -> Self {
        SendError(None)
    }

    /// The request, when it was never sent.
    pub fn take_unsent(&mut self) -> Option<Request<RequestBody>> {
        self.0.take().map(|request| *request)
    }
}

impl Sender {
    /// Sends `request`; one the connection could not take comes back in the error.
    pub fn try_send_request(
        &mut self,
        request: Request<RequestBody>,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, SendError>> + use<> {
        match self {
            // Mapped, not awaited in an async block: the block would hold hyper's future twice
            // over (before and while it runs), and every level above carries that size.
            Sender::Http1(sender) => {
                Either::Left(sender.try_send_request(request).map(|sent| match sent {
                    Ok(answer) => Ok(answer.map(UpstreamBody::Left)),
                    Err(mut error) => Err(SendError(error.take_message().map(Box::new))),
                }))
            }
            Sender::Http2(connection) => Either::Right(connection.send(request)),
        }
    }

    pub fn is_http2(&self) -> bool {
        matches!(self, Sender::Http2(_))
    }
}

/// One endpoint's connections in one worker: HTTP/1.1 ones idle between requests, HTTP/2 ones
/// shared by the requests in flight.
pub struct IdleList {
    senders: RefCell<Vec<Idle>>,
    multiplexed: RefCell<Vec<Multiplexed>>,
    /// A new HTTP/2 connection is being made, and its end is told here.
    connecting: Cell<bool>,
    connected: tokio::sync::Notify,
    endpoint: Arc<Endpoint>,
}

/// An HTTP/2 connection and how many of its streams this worker's requests hold.
/// Marks a new HTTP/2 connection under way to an endpoint; its end (made, failed or given up)
/// wakes the requests waiting for it.
struct Connecting(Rc<IdleList>);

impl Connecting {
    fn start(home: &Rc<IdleList>) -> Self {
        home.connecting.set(true);
        Connecting(home.clone())
    }
}

impl Drop for Connecting {
    fn drop(&mut self) {
        self.0.connecting.set(false);
        self.0.connected.notify_waiters();
    }
}

struct Multiplexed {
    sender: Http2Connection,
    meter: Meter,
    streams: Rc<Streams>,
}

/// The streams a worker's requests hold on a shared connection, and since when it has had none.
struct Streams {
    open: Cell<usize>,
    idle_since: Cell<Instant>,
}

impl Streams {
    fn new() -> Rc<Self> {
        Rc::new(Streams {
            open: Cell::new(0),
            idle_since: Cell::new(Instant::now()),
        })
    }
}

/// A stream of a shared HTTP/2 connection, given back when its request is done.
struct StreamSlot(Rc<Streams>);

impl StreamSlot {
    fn take(streams: &Rc<Streams>) -> Self {
        streams.open.set(streams.open.get() + 1);
        StreamSlot(streams.clone())
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let open = self.0.open.get().saturating_sub(1);
        self.0.open.set(open);
        if open == 0 {
            self.0.idle_since.set(Instant::now());
        }
    }
}

/// An idle connection, with the meter of its socket (the pool that uses it next is charged)
/// and the moment it came back, for the idle timeout.
struct Idle {
    sender: http1::SendRequest<RequestBody>,
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
    _stream: Option<StreamSlot>,
}

impl Lease {
    /// The answer's body has ended: the connection goes back for reuse (an HTTP/2 one never
    /// left: its stream is given back).
    pub fn release(mut self) {
        self.in_flight.answer_ended();
        let Sender::Http1(sender) = self.sender else {
            return;
        };
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
                sender,
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
    stream: Option<StreamSlot>,
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
            _stream: self.stream,
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
                    multiplexed: RefCell::default(),
                    connecting: Cell::new(false),
                    connected: tokio::sync::Notify::new(),
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
                stack.multiplexed.borrow_mut().clear();
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
            // An HTTP/2 connection no request used for the idle timeout is closed as an idle
            // HTTP/1.1 one would be; its backend's GOAWAY or a reset closes it sooner.
            stack.multiplexed.borrow_mut().retain(|shared| {
                let streams = &shared.streams;
                !shared.sender.is_closed()
                    && (streams.open.get() > 0
                        || now.saturating_duration_since(streams.idle_since.get()) < idle_timeout)
            });
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
        // An HTTP/2 backend gets one new connection at a time from this worker: requests that
        // find every stream taken wait for it rather than each opening one.
        let multiplexed = matches!(
            pool.plan.protocol,
            UpstreamProtocol::H2 | UpstreamProtocol::H2c
        );
        loop {
            if let Some(shared) = home.shared_with_room() {
                shared.meter.charge(&member.counters);
                return Ok(shared.checkout(home.clone()));
            }
            if !(multiplexed && home.connecting.get()) {
                break;
            }
            home.connected.notified().await;
        }
        let _connecting = multiplexed.then(|| Connecting::start(&home));
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
                        sender: Sender::Http1(sender),
                        meter,
                        home,
                        stream: None,
                    });
                }
            }
        }
        let meter = Meter::new(&member.counters, self.worker);
        // Boxed: a TLS handshake's state is large, and every request's future would carry its
        // size (and copy it) though most requests find an idle connection.
        let sender = Box::pin(self.connect(&home.endpoint, meter.clone(), pool, limits)).await?;
        Ok(match sender {
            Connected::Http2(sender) => {
                let shared = Multiplexed {
                    sender,
                    meter,
                    streams: Streams::new(),
                };
                let checkout = shared.checkout(home.clone());
                home.multiplexed.borrow_mut().push(shared);
                checkout
            }
            Connected::Http1(sender) => Checkout {
                sender: Sender::Http1(sender),
                meter,
                home,
                stream: None,
            },
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
    ) -> io::Result<Connected> {
        let timeout = pool.plan.connect_timeout;
        let tls = pool.plan.tls.as_ref();
        let stream =
            transport::connect_upstream(endpoint, tls, meter, timeout, self.worker).await?;
        let http2 = match pool.plan.protocol {
            UpstreamProtocol::Http1 => false,
            UpstreamProtocol::H2 | UpstreamProtocol::H2c => true,
            UpstreamProtocol::Auto => stream.agreed_http2(),
        };
        match http2 {
            true => Http2Connection::start(stream, limits)
                .await
                .map(Connected::Http2),
            false => start(stream, limits).await.map(Connected::Http1),
        }
    }
}

impl IdleList {
    /// A shared HTTP/2 connection with a stream to spare, dropping those that closed.
    fn shared_with_room(&self) -> Option<std::cell::RefMut<'_, Multiplexed>> {
        let mut multiplexed = self.multiplexed.borrow_mut();
        multiplexed.retain(|shared| !shared.sender.is_closed());
        let room = multiplexed
            .iter()
            .position(|shared| shared.streams.open.get() < shared.sender.max_streams())?;
        Some(std::cell::RefMut::map(multiplexed, |all| &mut all[room]))
    }
}

impl Multiplexed {
    fn checkout(&self, home: Rc<IdleList>) -> Checkout {
        Checkout {
            sender: Sender::Http2(self.sender.clone()),
            meter: self.meter.clone(),
            home,
            stream: Some(StreamSlot::take(&self.streams)),
        }
    }
}

/// A new connection, as the protocol spoken on it makes it: lent out, or shared.
enum Connected {
    Http1(http1::SendRequest<RequestBody>),
    Http2(Http2Connection),
}

/// Starts HTTP/1.1 on a new upstream connection. The driver hands the socket over when the
/// backend switches protocols (a 101); the socket keeps its place in the endpoint's gauge
/// until it closes, whichever of them has it then. An answer head past `limits` is an error.
async fn start<S>(stream: S, limits: AnswerLimits) -> io::Result<http1::SendRequest<RequestBody>>
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

/// A backend's answer body, as the connection's protocol gives it: hyper's HTTP/1.1 one
/// (`Left`) or a stream of an HTTP/2 connection (`Right`); either fails with a
/// [`BodyFailure`](super::body::BodyFailure).
pub type UpstreamBody = http_body_util::Either<Incoming, Http2Body>;
