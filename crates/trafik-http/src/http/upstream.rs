//! Upstream connections for the pipeline's pool target: HTTP/1.1 streams from the worker's
//! keep-alive stacks (the own engine's, [`crate::transport::idle::Streams`], one per endpoint:
//! backend address, and TLS settings for a pool that speaks TLS) spoken by the own HTTP/1
//! client ([`crate::h1::client`]), and for HTTP/2 backends the worker's shared connections,
//! each carrying up to the backend's `SETTINGS_MAX_CONCURRENT_STREAMS` requests at once
//! (another is opened when all are full).
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

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::Either;
use http::Response;
use http::request::Parts;
use http_body::{Body, Frame, SizeHint};

use super::body::{BodyFailure, RequestBody, Upload, UploadState};
use crate::h1::client::{self, Http1Body, Returned};
use crate::http2::Http2Body;
use crate::http2::client::Http2Connection;
use crate::meter::Meter;
use crate::plan::{AnswerLimits, UpstreamProtocol};
use crate::pool::{Endpoint, InFlight, Pool};
use crate::snapshot::Snapshot;
use crate::transport;
use crate::transport::idle::{Stream, Streams};

/// A connection's request side: HTTP/1.1 (one request at a time, lent out) or HTTP/2
/// (shared: each request a stream).
pub enum Sender {
    /// Boxed: a stream and its state are large beside an HTTP/2 connection's handle, and the
    /// sender is in every answer's lease, moved whole at each level an answer passes.
    Http1(Box<Http1Sender>),
    Http2(Http2Connection),
}

/// An HTTP/1.1 stream lent to one request.
pub struct Http1Sender {
    /// Until the request is sent on it.
    stream: Option<Stream>,
    /// It came from the idle stack.
    reused: bool,
    /// Where the answer's body leaves the stream at its clean end.
    returned: Returned,
    limits: AnswerLimits,
}

/// A request that got no answer: its body handed back unsent when the connection could not
/// take the request (it may go on a new one), or lost. The head stays with the caller all along.
pub struct SendError(Option<RequestBody>);

impl SendError {
    pub fn unsent(body: RequestBody) -> Self {
        SendError(Some(body))
    }

    pub fn lost() -> Self {
        SendError(None)
    }

    /// The body, when the request was never sent.
    pub fn take_unsent(&mut self) -> Option<RequestBody> {
        self.0.take()
    }
}

impl Sender {
    /// Sends the request `head` and `body` make. The head is lent, not given: a request that
    /// may be sent again goes elsewhere with the same head, no copy kept aside. One the
    /// connection could not take comes back in the error.
    pub fn try_send_request<'h>(
        &mut self,
        head: &'h mut Parts,
        body: RequestBody,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, SendError>> + use<'h> {
        match self {
            Sender::Http1(sender) => Either::Left(match sender.stream.take() {
                Some(stream) => Either::Left(client::send(
                    stream,
                    sender.reused,
                    sender.returned.clone(),
                    head,
                    body,
                    sender.limits,
                )),
                None => Either::Right(std::future::ready(Err(SendError::unsent(body)))),
            }),
            Sender::Http2(connection) => Either::Right(connection.send(head, body)),
        }
    }

    pub fn is_http2(&self) -> bool {
        matches!(self, Sender::Http2(_))
    }
}

/// One endpoint's HTTP/2 connections in one worker, shared by the requests in flight (its
/// HTTP/1.1 ones wait in the worker's [`Streams`]).
pub struct IdleList {
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
    streams: Rc<OpenStreams>,
}

/// The streams a worker's requests hold on a shared connection, and since when it has had none.
struct OpenStreams {
    open: Cell<usize>,
    idle_since: Cell<Instant>,
}

impl OpenStreams {
    fn new() -> Rc<Self> {
        Rc::new(OpenStreams {
            open: Cell::new(0),
            idle_since: Cell::new(Instant::now()),
        })
    }
}

/// A stream of a shared HTTP/2 connection, given back when its request is done.
struct StreamSlot(Rc<OpenStreams>);

impl StreamSlot {
    fn take(streams: &Rc<OpenStreams>) -> Self {
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

/// One worker's HTTP/2 connections, indexed by [`Endpoint::id`], and its idle HTTP/1.1
/// streams (shared with the own engine's fast path).
pub struct Upstreams {
    worker: usize,
    idle: RefCell<Vec<Option<Rc<IdleList>>>>,
    raw: Rc<Streams>,
}

/// A connection lent to one request. [`Lease::release`] returns it for reuse; dropping the
/// lease instead closes it, as must happen when a response ends early or broke.
pub struct Lease {
    sender: Sender,
    home: Rc<IdleList>,
    raw: Rc<Streams>,
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
        let Sender::Http1(sender) = &self.sender else {
            return;
        };
        let Some(stream) = sender.returned.take() else {
            return;
        };
        if self
            .upload
            .as_ref()
            .is_some_and(|upload| upload.state() != UploadState::Sent)
        {
            return;
        }
        self.raw.keep(self.home.endpoint.id, stream, Instant::now());
    }

    /// The backend cut the answer's body short: counted against it, and the connection closes.
    pub fn cut(mut self) {
        self.in_flight.answer_cut();
    }
}

/// A connection ready to carry one request.
pub struct Checkout {
    pub sender: Sender,
    home: Rc<IdleList>,
    raw: Rc<Streams>,
    stream: Option<StreamSlot>,
}

impl Checkout {
    /// Ties the connection to the request's in-flight mark and upload, for the response body
    /// to release.
    pub fn into_lease(self, in_flight: InFlight, upload: Option<Rc<Upload>>) -> Lease {
        Lease {
            sender: self.sender,
            home: self.home,
            raw: self.raw,
            upload,
            in_flight,
            _stream: self.stream,
        }
    }
}

impl Upstreams {
    pub fn new(worker: usize, raw: Rc<Streams>) -> Self {
        Upstreams {
            worker,
            idle: RefCell::default(),
            raw,
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
                    multiplexed: RefCell::default(),
                    connecting: Cell::new(false),
                    connected: tokio::sync::Notify::new(),
                    endpoint: endpoint.clone(),
                })
            })
            .clone()
    }

    /// Closes the HTTP/2 connections to endpoints no pool of `snapshot` names any more (a
    /// reload removed them); their stacks stay, empty, should the address come back.
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
                stack.multiplexed.borrow_mut().clear();
            }
        }
    }

    /// Closes the HTTP/2 connections no request used for the idle timeout.
    pub fn close_idle(&self, now: Instant, idle_timeout: Duration) {
        for stack in self.idle.borrow().iter().flatten() {
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
                return Ok(shared.checkout(home.clone(), self.raw.clone()));
            }
            if !(multiplexed && home.connecting.get()) {
                break;
            }
            home.connected.notified().await;
        }
        let http1 = |stream, reused| Checkout {
            sender: Sender::Http1(Box::new(Http1Sender {
                stream: Some(stream),
                reused,
                returned: Returned::default(),
                limits,
            })),
            home: home.clone(),
            raw: self.raw.clone(),
            stream: None,
        };
        if !multiplexed {
            let reuse_at = (!fresh).then(Instant::now);
            // Boxed: a TLS handshake's state is large, and every request's future would carry
            // its size (and copy it) though most requests find an idle connection.
            let (stream, reused) =
                Box::pin(self.raw.checkout(pool, backend, self.worker, reuse_at)).await?;
            // A TLS backend that chose HTTP/2 by ALPN (an `auto` pool) is shared from now on.
            if reused || pool.plan.protocol != UpstreamProtocol::Auto || !stream.agreed_http2() {
                return Ok(http1(stream, reused));
            }
            let meter = stream.meter().clone();
            let sender = Http2Connection::start(stream, limits).await?;
            return Ok(home.share(sender, meter, self.raw.clone()));
        }
        let _connecting = Connecting::start(&home);
        let meter = Meter::new(&member.counters, self.worker);
        let timeout = pool.plan.connect_timeout;
        let tls = pool.plan.tls.as_ref();
        let connecting =
            transport::connect_upstream(&home.endpoint, tls, meter.clone(), timeout, self.worker);
        let stream = Box::pin(connecting).await?;
        let sender = Http2Connection::start(stream, limits).await?;
        Ok(home.share(sender, meter, self.raw.clone()))
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

    /// Keeps a new HTTP/2 connection for the requests to come, and lends a stream of it.
    fn share(self: &Rc<Self>, sender: Http2Connection, meter: Meter, raw: Rc<Streams>) -> Checkout {
        let shared = Multiplexed {
            sender,
            meter,
            streams: OpenStreams::new(),
        };
        let checkout = shared.checkout(self.clone(), raw);
        self.multiplexed.borrow_mut().push(shared);
        checkout
    }
}

impl Multiplexed {
    fn checkout(&self, home: Rc<IdleList>, raw: Rc<Streams>) -> Checkout {
        Checkout {
            sender: Sender::Http2(self.sender.clone()),
            home,
            raw,
            stream: Some(StreamSlot::take(&self.streams)),
        }
    }
}

/// A backend's answer body, as the connection's protocol gives it: read by the own HTTP/1
/// client, or a stream of an HTTP/2 connection; either fails with a [`BodyFailure`].
pub enum UpstreamBody {
    /// Boxed: its stream and decoder are large beside an HTTP/2 stream's handle, and every
    /// answer's body is moved several times on its way.
    Http1(Box<Http1Body>),
    Http2(Http2Body),
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BodyFailure;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyFailure>>> {
        match self.get_mut() {
            UpstreamBody::Http1(body) => Pin::new(&mut **body).poll_frame(cx),
            UpstreamBody::Http2(body) => Pin::new(body).poll_frame(cx).map_err(BodyFailure::from),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Http1(body) => body.is_end_stream(),
            UpstreamBody::Http2(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Http1(body) => body.size_hint(),
            UpstreamBody::Http2(body) => body.size_hint(),
        }
    }
}
