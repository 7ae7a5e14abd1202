//! trafik's own HTTP/1.1 engine (`[server] engine = "trafik"`), on plain TCP and behind TLS.
//!
//! One task per client connection reads a request head into a reused buffer and parses it with
//! `httparse` ([`head`]). A plainly valid request whose route is a pool target with only the
//! built-in head steps takes the fast path: the pool's call ([`crate::pool::Call`]) picks the
//! backend, a worker-local kept-alive stream is checked out ([`upstream`]) and the exchange runs
//! inline — the rewritten head and the body in one `writev` (a body still on its way, a chunked
//! one, or one held back for `100 Continue` streams through [`body`]), the response head parsed
//! and rewritten the same way (with a [`date`] when it has none), the body relayed by its
//! framing (a chunked one framed anew, without extensions or trailer fields, by the same
//! [`chunked`] decoder as a chunked request body).
//! A 101 to a request that asked for it opens a [`tunnel`]. A request for any other route
//! (filters, caches, static files, gateway targets, the hop trace, no route) goes through the
//! shared pipeline, its body (`Content-Length`, chunked, after `100 Continue`) read here while
//! the pipeline runs and its answer written here ([`pipeline`]). Anything else (such a request
//! asking for an upgrade, a head in pieces, anything doubtful) hands the connection to hyper
//! for the rest of its life over a [`rewind::Rewind`] stream, which replays the bytes already
//! read: such requests are served exactly as with `engine = "hyper"`.

pub mod body;
mod buffers;
mod chunked;
pub mod client;
pub(crate) mod date;
mod deadline;
mod fields;
pub mod head;
mod pipeline;
mod rewind;
mod scan;
mod tunnel;
pub use crate::transport::idle as upstream;

use std::borrow::Cow;
use std::cell::RefCell;
use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use http::{HeaderValue, Method};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use self::body::{Failed, Upload};
use self::buffers::Exchange;
use self::chunked::{ANSWER_TRAILER_LINES, BadChunk, Chunked};
use self::deadline::Deadline;
use self::fields::{AnswerFields, Steps};
use self::head::{
    Forwarding, Framing, HeadBytes, HeadView, Request, RequestHead, Response, ResponseHead,
};
use self::rewind::rewind;
use self::upstream::Stream;
use crate::connections::{Connections, Control, Watched};
use crate::counters::bump;
use crate::error::{Blame, Cause, ProxyError};
use crate::http::body::{ErrorAnswer, HeldAnswer, ProxyBody};
use crate::http::cache::Hit;
use crate::http::files::{FileAnswer, WholeFile};
use crate::http::filter;
use crate::http::route::Asking;
use crate::http::server::{self, Client, Protocol};
use crate::http::service::{AccessLine, ClientConnection, Picked, WorkerProxy};
use crate::http::target::Target;
use crate::http2::PREFACE;
use crate::metrics::Took;
use crate::observed::SendFile;
use crate::plan::UpstreamProtocol;
use crate::pool::Pool;
use crate::snapshot::{ListenerId, WorkerSnapshot};
use crate::tls::ClientIdentity;
use crate::view::Selection;

/// How serving a connection on the own engine ended.
enum End {
    Close,
    /// hyper serves the rest; `first` when nothing was served yet (HTTP/2 may still start).
    HandOver {
        first: bool,
    },
}

/// How one exchange ended.
enum Exchanged {
    KeepAlive,
    Close,
    /// Not for the fast path: nothing was sent anywhere.
    Defer,
}

/// The reused state of one client connection.
struct Connection<S> {
    client: S,
    /// Bytes from the client not yet consumed: the next request head and what follows.
    input: Vec<u8>,
    /// A head rewritten for the next hop, either way; taken with `relay` once the first bytes
    /// arrive ([`Connection::hold_exchange_buffers`]).
    head: Vec<u8>,
    /// Bytes from the upstream, or request body bytes on their way to it.
    relay: Vec<u8>,
    forwarding: Forwarding,
    peer: SocketAddr,
    /// `http`, or `https` behind TLS.
    scheme: &'static str,
    /// On a listener with mutual TLS, its client's certificate: every request then takes the
    /// pipeline, whose forwarding step writes the identity headers.
    identity: Option<Arc<ClientIdentity>>,
    /// The connection as the pipeline and its steps know it, once a request needed it.
    pipeline_client: Option<Rc<ClientConnection>>,
    /// The response timeout.
    deadline: Deadline,
}

impl<S> Connection<S> {
    /// Takes the buffers of an exchange, unless the connection holds them already.
    fn hold_exchange_buffers(&mut self) {
        if self.relay.capacity() == 0 {
            let Exchange { head, relay } = Exchange::take();
            (self.head, self.relay) = (head, relay);
        }
    }

    /// Gives the buffers of an exchange back to the worker's spares, if the connection took
    /// them.
    fn release_exchange_buffers(&mut self) {
        if self.relay.capacity() > 0 {
            let (head, relay) = (
                std::mem::take(&mut self.head),
                std::mem::take(&mut self.relay),
            );
            Exchange { head, relay }.give_back();
        }
    }

    /// The connection as the pipeline and its steps know it, made when first needed.
    fn pipeline_client(&mut self, listener: ListenerId) -> Rc<ClientConnection> {
        self.pipeline_client
            .get_or_insert_with(|| {
                Rc::new(ClientConnection::new(
                    listener,
                    self.peer,
                    self.scheme,
                    self.identity.clone(),
                ))
            })
            .clone()
    }

    /// Parses the request head at the start of the input and writes it for the next hop into
    /// the head buffer.
    fn rewrite_head(&mut self, snapshot: &WorkerSnapshot) -> Request {
        head::request(
            &self.input,
            snapshot.client.limits,
            &self.forwarding,
            snapshot.client.trust_forwarded,
            snapshot.via.as_bytes(),
            &mut self.head,
        )
    }
}

/// Serves HTTP/1.1 on a client connection with the own engine: plain TCP, or the plaintext side
/// of TLS whose client chose HTTP/1.1. `protocol` is what the connection may speak, for hyper
/// when it takes the connection over: HTTP/2 too by its preface on plain TCP (`Detect`), only
/// HTTP/1.1 behind TLS.
pub async fn serve<S>(
    proxy: Rc<WorkerProxy>,
    listener: ListenerId,
    scheme: &'static str,
    protocol: Protocol,
    stream: S,
    Client { peer, identity }: Client,
    connections: Rc<Connections>,
) where
    S: AsyncRead + AsyncWrite + SendFile + Unpin + Send + 'static,
{
    let control = connections.register(listener);
    let mut connection = Connection {
        client: Watched::new(stream, control.clone(), connections.clone()),
        input: buffers::take_input(),
        head: Vec::new(),
        relay: Vec::new(),
        forwarding: Forwarding::new(peer, scheme),
        peer,
        scheme,
        identity,
        pipeline_client: None,
        deadline: Deadline::default(),
    };
    let end = {
        let run = run(&proxy, listener, &mut connection, &control);
        tokio::pin!(run);
        std::future::poll_fn(|cx| {
            control.remember(cx.waker());
            // Idle past the limit (or the header timeout).
            if control.is_idle() {
                return Poll::Ready(End::Close);
            }
            // Or draining past the grace while the read of a next request's head, just
            // polled, has found nothing (see `connections`).
            match run.as_mut().poll(cx) {
                Poll::Pending
                    if control.is_idle()
                        || (control.should_close_when_idle() && control.awaits_head()) =>
                {
                    Poll::Ready(End::Close)
                }
                polled => polled,
            }
        })
        .await
    };
    connection.release_exchange_buffers();
    let End::HandOver { first } = end else {
        buffers::give_back_input(connection.input);
        return;
    };
    drop(control);
    // h2c with prior knowledge, told by its preface (whole, or as much as came): the own
    // HTTP/2 server takes it, with what was read of it.
    let preface = connection
        .input
        .iter()
        .zip(PREFACE)
        .all(|(read, preface)| read == preface);
    if first && protocol == Protocol::Detect && preface {
        let read = bytes::BytesMut::from(&connection.input[..]);
        buffers::give_back_input(connection.input);
        let identity = connection.identity.take();
        Box::pin(crate::http2::server::serve(
            proxy,
            listener,
            scheme,
            connection.client.into_inner(),
            read,
            Client { peer, identity },
            connections,
        ))
        .await;
        return;
    }
    if let Some(stats) = proxy.snapshot().metrics.listener_stats(listener) {
        bump(&stats.mine(proxy.id).handed_to_hyper);
    }
    // Once a request was served, the connection speaks HTTP/1.1 for good.
    let protocol = if first { protocol } else { Protocol::Http1 };
    let identity = connection.identity.take();
    let stream = rewind(connection.input, connection.client.into_inner());
    // Boxed: the rare handover would otherwise make every connection's task as big as hyper's,
    // a size copied several times as a task is spawned and finished.
    Box::pin(server::serve(
        proxy,
        listener,
        scheme,
        protocol,
        stream,
        Client { peer, identity },
        connections,
    ))
    .await;
}

async fn run<S: AsyncRead + AsyncWrite + SendFile + Unpin>(
    proxy: &WorkerProxy,
    listener: ListenerId,
    connection: &mut Connection<S>,
    control: &Control,
) -> End {
    let mut first = true;
    loop {
        if connection.input.is_empty() {
            control.await_head(proxy.snapshot().client.header_read_timeout);
            let read = connection.client.read_buf(&mut connection.input).await;
            control.head_arrived();
            match read {
                Ok(0) | Err(_) => return End::Close,
                Ok(_) => {}
            }
        }
        connection.hold_exchange_buffers();
        let snapshot = proxy.snapshot();
        let mut head_deadline = None;
        let request = loop {
            match connection.rewrite_head(&snapshot) {
                Request::Ready(request) => break request,
                // The rest of a head that came in pieces, by the header timeout counted from
                // its first piece (a client trickling header lines is cut then, whatever it
                // sends); past the head's byte limit, hyper answers 431.
                Request::Partial if connection.input.len() < snapshot.client.limits.bytes => {
                    let deadline = *head_deadline.get_or_insert_with(|| {
                        tokio::time::Instant::now() + snapshot.client.header_read_timeout
                    });
                    // A trickling client holds no exchange buffers while it trickles.
                    connection.release_exchange_buffers();
                    let more = connection.client.read_buf(&mut connection.input);
                    match tokio::time::timeout_at(deadline, more).await {
                        Ok(Ok(1..)) => connection.hold_exchange_buffers(),
                        _ => return End::Close,
                    }
                }
                Request::Malformed => {
                    refuse_malformed(connection).await;
                    return End::Close;
                }
                Request::Partial | Request::Defer => return End::HandOver { first },
            }
        };
        match exchange(proxy, &snapshot, listener, connection, &request, control).await {
            Exchanged::KeepAlive => first = false,
            Exchanged::Close => return End::Close,
            Exchanged::Defer => return End::HandOver { first },
        }
    }
}

/// Answers a head that is not HTTP (a broken field or request line) with trafik's 400, as
/// hyper's server would answer it, and leaves the connection to close: nothing after it can be
/// told apart.
async fn refuse_malformed<S: AsyncWrite + SendFile + Unpin>(connection: &mut Connection<S>) {
    let _ = pipeline::write_answer(
        &mut connection.client,
        &mut connection.relay,
        ProxyError::MalformedRequest.response(),
        false,
        true,
    )
    .await;
}

/// One request on the fast path, with the pool's retry rules: a failed connect goes to another
/// backend, and so does a bodiless request the backend lost while the budget allows. On a
/// draining connection the answer says `Connection: close` and the connection closes after it.
async fn exchange<S: AsyncRead + AsyncWrite + SendFile + Unpin>(
    proxy: &WorkerProxy,
    snapshot: &Rc<WorkerSnapshot>,
    listener: ListenerId,
    connection: &mut Connection<S>,
    request: &RequestHead,
    control: &Control,
) -> Exchanged {
    let Some(routes) = snapshot.http_routes(listener) else {
        return Exchanged::Defer;
    };
    let streamed = body::streams(request, connection.input.len() - request.length);
    let text = |range: &std::ops::Range<usize>| head::ascii(&connection.input[range.clone()]);
    // A pool with only the built-in head steps is served inline; anything else (filters,
    // other targets, the hop trace, no route, a head only the pipeline takes) goes through
    // the pipeline.
    let find = |view: &HeadView<'_>| {
        let asking = Asking {
            view,
            client: connection.peer.ip(),
        };
        let (host, path) = (Some(text(&request.host)), text(&request.path));
        routes.find_parts(host, path, &request.method, &asking)
    };
    // An ACME HTTP-01 check is the pipeline's listener step.
    let challenge = text(&request.path).starts_with(crate::tls::acme::CHALLENGE_PATH);
    let found = match (
        &snapshot.trace,
        request.pipeline || connection.identity.is_some() || challenge,
    ) {
        // Conditions read the head's fields, parsed again only for a table with any.
        (None, false) if routes.asks_more() => {
            let mut fields = [httparse::EMPTY_HEADER; head::MAX_HEADERS];
            find(&HeadView::parse(&connection.input, request, &mut fields))
        }
        (None, false) => find(&HeadView::empty()),
        _ => None,
    };
    // Address rules and mirrors are the pipeline's.
    let inline = found.and_then(|(route, _)| {
        match &route.target {
            _ if !route.steps.inline || route.routing_counters.is_some() => None,
            // The inline relay speaks HTTP/1.1 upstream: a pool that speaks HTTP/2 (or may, by
            // ALPN) takes the pipeline's transport. A pool that reads the request to pick reads
            // it as the client sent it here, so fields-only steps that edit it are the pipeline's.
            Target::Pool(target)
                if snapshot.pools[target.pool].plan.protocol == UpstreamProtocol::Http1
                    && !(route.steps.edits_fields
                        && Selection::reads_request(&snapshot.pools[target.pool])) =>
            {
                Some((route, Inline::Pool(target)))
            }
            Target::Static(site) => Some((route, Inline::Files(site))),
            // A hit needs nothing of the pipeline; the rest of a cached route (misses and
            // their coalescing, revalidation, fields-only steps before the cache) does.
            Target::Cached(cached)
                if !route.steps.edits_fields && request.body == 0 && !streamed =>
            {
                Some((route, Inline::Cached(cached)))
            }
            _ => None,
        }
    });
    // The pipeline's future is boxed where it is taken: inline it made every connection's
    // future (its task's allocation, copied whole as the task is spawned) 9.7 KB where the
    // fast path needs a third of that.
    let Some((route, target)) = inline else {
        let piped = through_pipeline(proxy, snapshot, listener, connection, request, control);
        return Box::pin(piped).await;
    };
    // Fields-only steps (JWT, local rate limits, header edits) read and edit the head being
    // forwarded, and see the answer's; their request edits are kept for a head written anew.
    let stepping = route
        .steps
        .edits_fields
        .then(|| connection.pipeline_client(listener));
    // Read again past the borrow above.
    let text = |range: &std::ops::Range<usize>| head::ascii(&connection.input[range.clone()]);
    // The route's path rewrites, written into the head to send (and again into a head
    // written anew for a retry).
    let path = text(&request.path);
    let rewritten = route
        .filters
        .iter()
        .fold(None, |rewritten: Option<String>, filter| {
            filter
                .upstream_path(rewritten.as_deref().unwrap_or(path))
                .or(rewritten)
        });
    if let Some(path) = &rewritten {
        head::replace_path(&mut connection.head, path.as_bytes());
    }
    let mut edits = Vec::new();
    // The pipeline's answers advertise an h3 twin in `WorkerProxy::handle`; this relay writes
    // the same field into the head it relays.
    let alt_svc = snapshot.alt_svc(listener);
    let me = proxy.id;
    let mut metrics = Answers {
        began: Instant::now(),
        pool: None,
        route: route.traffic.mine(me),
        listener: snapshot
            .metrics
            .listener_stats(listener)
            .map(|stats| &stats.mine(me).traffic),
        // Copied now: a streamed body reuses the buffer the head is in.
        logged: snapshot.client.access_log.then(|| {
            let uri = String::from_utf8_lossy(&connection.input[request.target.clone()]);
            let host = (!request.host.is_empty()).then(|| text(&request.host).to_owned());
            (connection.peer, &request.method, uri.into_owned(), host)
        }),
        picked: None,
        steps: stepping.as_deref().map(|client| Steps {
            filters: &route.filters,
            exchange: filter::Exchange {
                connection: client,
                snapshot: &snapshot.0,
                worker: me,
                notes: RefCell::default(),
            },
        }),
    };
    let consumed = request.length + request.body as usize;
    let head_request = request.method == Method::HEAD;
    // A streamed body may be left unread by a refusal: the connection closes after it, as it
    // does when the answer is written during a drain.
    let keep = || !request.close && !streamed && !control.should_drain();
    if let Some(steps) = &metrics.steps
        && let Some((mut answer, ran)) = steps.on_request(&mut connection.head, &mut edits)
    {
        steps.on_response(&mut answer, ran);
        let logged = metrics.answered(answer.status().as_u16(), None, Instant::now());
        let answer = OwnAnswer::Built(*answer);
        return answer_own(connection, logged, answer, consumed, keep(), head_request).await;
    }
    let target = match target {
        Inline::Pool(target) => target,
        Inline::Cached(cached) => {
            let path_and_query = match &rewritten {
                Some(path) => Cow::Owned(format!(
                    "{path}{}",
                    text(&(request.path.end..request.target.end))
                )),
                None => Cow::Borrowed(text(&request.target)),
            };
            let fields = AnswerFields::new(&mut connection.head, request.cache_fields);
            let Some(hit) = cached.hit(me, snapshot, &request.method, &path_and_query, &fields)
            else {
                let piped =
                    through_pipeline(proxy, snapshot, listener, connection, request, control);
                return Box::pin(piped).await;
            };
            let answer = OwnAnswer::Stored(hit, alt_svc);
            let logged = metrics.answered(answer.status().as_u16(), None, Instant::now());
            return answer_own(connection, logged, answer, consumed, keep(), head_request).await;
        }
        Inline::Files(site) => {
            let path = rewritten.as_deref().unwrap_or(path);
            let fields = AnswerFields::new(&mut connection.head, request.cache_fields);
            let answer = match site.serve(me, &request.method, path, &fields).await {
                FileAnswer::Whole(whole) if metrics.steps.is_none() => {
                    OwnAnswer::File(whole, alt_svc)
                }
                answer => {
                    let mut answer = answer.into_response();
                    if let Some(alt_svc) = alt_svc {
                        answer
                            .headers_mut()
                            .insert(http::header::ALT_SVC, alt_svc.clone());
                    }
                    if let Some(steps) = &metrics.steps {
                        steps.on_response(&mut answer, steps.filters.len());
                    }
                    OwnAnswer::Built(answer)
                }
            };
            let logged = metrics.answered(answer.status().as_u16(), None, Instant::now());
            return answer_own(connection, logged, answer, consumed, keep(), head_request).await;
        }
    };
    let pool = &snapshot.pools[target.pool];
    metrics.pool = Some(pool.served.mine(me));
    let alt_svc = alt_svc.map_or(&b""[..], |alt_svc| alt_svc.as_bytes());
    // A bodiless request is its head, kept in the connection's buffer: sending it again needs
    // no copy, so its replay is nothing. Kept, as on hyper's path, only when the pool retries.
    let replay = (pool.plan.retries > 0
        && request.body == 0
        && !streamed
        && (request.method.is_idempotent() || target.retry_non_idempotent))
        .then_some(());
    let mut upload = match streamed {
        false => None,
        true => match Upload::new(&connection.input, request, snapshot.client.limits) {
            Ok(upload) => Some(upload),
            Err(error) => {
                return refuse(
                    connection,
                    &mut metrics,
                    None,
                    (error, None),
                    consumed,
                    false,
                    head_request,
                )
                .await;
            }
        },
    };
    let mut selection = match Selection::reads_request(pool) {
        false => Selection::default(),
        true => {
            let mut fields = [httparse::EMPTY_HEADER; head::MAX_HEADERS];
            let view = HeadView::parse(&connection.input, request, &mut fields);
            Selection::of(pool, &view, connection.peer)
        }
    };
    let (context, bound) = (selection.context, selection.bound);
    if metrics.logged.is_some() {
        metrics.picked = Some(Picked {
            key: context.key,
            sticky: bound.map(|index| pool.address(index)),
        });
    }
    let mut call = match proxy.call(snapshot, target.pool, metrics.began, context, bound) {
        Ok(call) => call,
        Err(refused) => {
            return refuse(
                connection,
                &mut metrics,
                None,
                (refused, None),
                consumed,
                keep(),
                head_request,
            )
            .await;
        }
    };
    while let Some(mut attempt) = call.next().await {
        let index = attempt.index;
        let mut upstream = match proxy
            .raw
            .checkout(pool, index, me, Some(attempt.sent_at))
            .await
        {
            Ok(checked_out) => checked_out,
            Err(error) => {
                selection.connect_failed(pool);
                call.connect_failed(attempt, Cause::of_connect(&error));
                continue;
            }
        };
        let answered = ask(
            proxy,
            pool,
            index,
            &mut upstream,
            connection,
            request,
            upload.as_mut(),
            replay.is_some(),
            (snapshot, alt_svc),
        )
        .await;
        let answer = match answered {
            Ok(answer) => answer,
            Err(error) => match call.lost(attempt, error, replay) {
                Ok(()) => {
                    // The head buffer may hold an answer's head by now: it gets the
                    // request's again.
                    connection.rewrite_head(snapshot);
                    if let Some(path) = &rewritten {
                        head::replace_path(&mut connection.head, path.as_bytes());
                    }
                    fields::apply(&mut connection.head, &edits);
                    continue;
                }
                Err(error) => {
                    let backend = Some(pool.address(index));
                    return refuse(
                        connection,
                        &mut metrics,
                        backend,
                        (error, call.blame()),
                        consumed,
                        keep(),
                        head_request,
                    )
                    .await;
                }
            },
        };
        let answered_at = Instant::now();
        let took = call.answered(&mut attempt, answer.status, answered_at);
        let retried = call.retry_answer(&mut attempt, answer.status, answer.retry_after, replay);
        if retried.is_some() {
            // The answer's body is left unread: its stream closes rather than going back, and
            // the head buffer, which holds the answer's head now, gets the request's again.
            drop((upstream, attempt));
            connection.rewrite_head(snapshot);
            if let Some(path) = &rewritten {
                head::replace_path(&mut connection.head, path.as_bytes());
            }
            fields::apply(&mut connection.head, &edits);
            continue;
        }
        // The request's time is its first attempt's, which was sent as it began.
        let took = match attempt.sent_at == metrics.began {
            true => took,
            false => Took::between(metrics.began, answered_at),
        };
        call.settled(index, attempt.sent_at, answered_at);
        let backend = Some(pool.address(index));
        let logged = metrics.answered_in(answer.status, backend, took);
        connection
            .input
            .drain(..upload.as_ref().map_or(consumed, Upload::consumed));
        if !answer.dated {
            date::add(&mut connection.head);
        }
        if let Some(cookie) = selection.cookie(pool, index) {
            head::add_field(&mut connection.head, b"set-cookie", cookie.as_bytes());
        }
        if let Some(steps) = &metrics.steps {
            steps.on_response_fields(&mut connection.head);
        }
        // A drain begun while the request was on its way is told to the client now; the body
        // keeps the framing the head was written with.
        let closing = request.close || control.should_drain();
        if closing && !request.close && answer.framing != Framing::Switched {
            head::add_field(&mut connection.head, b"connection", b"close");
        }
        let early = upload.as_ref().is_some_and(|upload| !upload.whole());
        let upgrades = &attempt.counters.upgrades;
        // The backend is no longer busy once its answer has ended: the request leaves its
        // in-flight count then, before the last bytes reach the client, so a client's next
        // request never sees its previous one still counted (bounded load, least requests).
        let mut in_flight = Some(attempt);
        let relayed = relay(
            &mut upstream.0,
            &mut connection.client,
            &connection.head,
            &mut connection.relay,
            &answer,
            request.close,
            || {
                if let Some(mut attempt) = in_flight.take() {
                    attempt.in_flight.answer_ended();
                }
            },
        )
        .await;
        // A switch has no end to wait for; a body the backend cut short fails it.
        if let Some(attempt) = in_flight.as_mut() {
            match relayed {
                Ok(_) => attempt.in_flight.answer_ended(),
                Err(Broken::Backend) => attempt.in_flight.answer_cut(),
                Err(Broken::Client) => {}
            }
        }
        // Behind TLS, the answer's end may still sit in the session's buffer (a no-op on TCP).
        let relayed = match relayed {
            Ok(clean) => connection
                .client
                .flush()
                .await
                .map(|()| clean)
                .map_err(Broken::client),
            failed => failed,
        };
        if let Some(line) = logged {
            line.write(relayed.is_ok().then(Instant::now));
        }
        if answer.framing == Framing::Switched {
            if relayed.is_ok() {
                bump(upgrades);
                tunnel::run(&mut connection.client, &mut upstream.0, &connection.input).await;
            }
            return Exchanged::Close;
        }
        drop(in_flight);
        if early
            && relayed.is_ok()
            && !request.close
            && let Some(upload) = upload.as_mut()
            && upload
                .finish(
                    &mut upstream.0,
                    &mut connection.input,
                    &mut connection.client,
                )
                .await
                .is_err()
        {
            return Exchanged::Close;
        }
        match relayed {
            Ok(true) if answer.reusable && !early && upstream.0.holds_nothing_unread() => {
                proxy.raw.release(pool, index, upstream.0, answered_at)
            }
            Ok(_) => {}
            Err(_) => return Exchanged::Close,
        }
        // The connection closes as its task ends, sending the FIN then.
        if closing {
            return Exchanged::Close;
        }
        return Exchanged::KeepAlive;
    }
    let blame = call.blame();
    let failure = call.failure();
    refuse(
        connection,
        &mut metrics,
        None,
        (failure, blame),
        consumed,
        keep(),
        head_request,
    )
    .await
}

/// What the fast path serves a route's requests with.
enum Inline<'r> {
    Pool(&'r crate::http::target::PoolTarget),
    Files(&'r Arc<crate::http::files::Site>),
    /// Its hits; anything else goes through the pipeline.
    Cached(&'r crate::http::cache::CachedTarget),
}

/// A request the fast path does not serve itself, served by the pipeline and counted so.
async fn through_pipeline<S: AsyncRead + AsyncWrite + SendFile + Unpin>(
    proxy: &WorkerProxy,
    snapshot: &Rc<WorkerSnapshot>,
    listener: ListenerId,
    connection: &mut Connection<S>,
    request: &RequestHead,
    control: &Control,
) -> Exchanged {
    let client = connection.pipeline_client(listener);
    let exchanged = pipeline::exchange(proxy, &client, connection, request, control).await;
    if !matches!(exchanged, Exchanged::Defer)
        && let Some(stats) = snapshot.metrics.listener_stats(listener)
    {
        bump(&stats.mine(proxy.id).through_pipeline);
    }
    exchanged
}

/// Where one fast-path answer is counted: the same golden metrics the full pipeline keeps for
/// its pool, route and listener, and its access-log line when the log is on.
struct Answers<'s> {
    began: Instant,
    /// The pool's, once a pool is asked: a step's own answer before it, or a file's, is not
    /// the pool's to count.
    pool: Option<&'s crate::metrics::Served>,
    route: &'s crate::metrics::Traffic,
    listener: Option<&'s crate::metrics::Traffic>,
    /// The client, method, target and host, when every request is logged.
    logged: Option<(SocketAddr, &'s Method, String, Option<String>)>,
    /// What the pool's rules read of the request, for its log line.
    picked: Option<Picked>,
    /// The route's fields-only steps, when it has any: they see every answer.
    steps: Option<Steps<'s>>,
}

impl Answers<'_> {
    /// Counts an answer with `status` from `backend` at `now`; its access-log line comes back,
    /// to be written when the answer's last byte is out.
    fn answered(
        &mut self,
        status: u16,
        backend: Option<SocketAddr>,
        now: Instant,
    ) -> Option<AccessLine> {
        self.answered_in(status, backend, Took::between(self.began, now))
    }

    /// As [`Answers::answered`], with the request's time and second read already.
    fn answered_in(
        &mut self,
        status: u16,
        backend: Option<SocketAddr>,
        took: Took,
    ) -> Option<AccessLine> {
        if let Some(pool) = self.pool {
            pool.answered_in(status, took);
        }
        let micros = took.micros;
        self.route.record(status, micros);
        if let Some(listener) = self.listener {
            listener.record(status, micros);
        }
        let (client, method, uri, host) = self.logged.take()?;
        Some(AccessLine {
            client,
            method: method.clone(),
            host,
            uri,
            status,
            backend,
            picked: self.picked,
            trace_id: None,
            began: self.began,
            micros,
        })
    }
}

/// Sends the request on `upstream` (a checked-out stream, and whether it was reused) and
/// reads the response head, within the pool's response timeout (from when the body is out);
/// for a request that may be sent again (`replayable`), also the first byte of a body with a
/// length ([`response_head`]). A reused stream the backend closed while it was idle gets one
/// more try on a new stream.
#[allow(clippy::too_many_arguments)]
async fn ask<S: AsyncRead + AsyncWrite + Unpin>(
    proxy: &WorkerProxy,
    pool: &Pool,
    index: usize,
    upstream: &mut (Stream, bool),
    connection: &mut Connection<S>,
    request: &RequestHead,
    mut upload: Option<&mut Upload>,
    replayable: bool,
    (snapshot, alt_svc): (&WorkerSnapshot, &[u8]),
) -> Result<ResponseHead, ProxyError> {
    // One that could not be sent again if the stream turned out closed goes on one seen open
    // just now (a backend may close after an answer that left a body unread).
    let once =
        !request.method.is_idempotent() || upload.as_deref().is_some_and(|u| !u.replayable());
    loop {
        let (stream, reused) = upstream;
        if *reused && once && !upstream::open(stream) {
            let fresh = proxy.raw.checkout(pool, index, proxy.id, None).await;
            *upstream = fresh.map_err(|_| ProxyError::UpstreamFailed)?;
            continue;
        }
        connection.relay.clear();
        let sent = match upload.as_deref_mut() {
            None => {
                let body =
                    &connection.input[request.length..request.length + request.body as usize];
                send(stream, &connection.head, body)
                    .await
                    .map_err(|_| Failed::Unsent)
            }
            Some(upload) => {
                let Connection {
                    client,
                    input,
                    head,
                    relay,
                    ..
                } = connection;
                upload.send(stream, head, input, client, relay).await
            }
        };
        // Behind TLS, the request's end may still sit in the session's buffer (a no-op on TCP).
        let sent = match sent {
            Ok(()) => stream.flush().await.map_err(|_| Failed::Upstream),
            failed => failed,
        };
        let answered = match sent {
            Ok(()) => {
                let waited = connection
                    .deadline
                    .within(
                        pool.plan.response_timeout,
                        // Pinned here: the deadline's future holds a reference, not a copy.
                        std::pin::pin!(response_head(
                            stream,
                            &mut connection.relay,
                            Asked {
                                head_request: request.method == Method::HEAD,
                                closing: request.close,
                                upgrading: request.upgrade,
                                replayable,
                                alt_svc,
                            },
                            snapshot,
                            &mut connection.head,
                        )),
                    )
                    .await;
                match waited {
                    None => return Err(ProxyError::UpstreamTimeout),
                    Some(answered) => answered,
                }
            }
            Err(Failed::Unsent) => Err(Lost::Unsent),
            Err(Failed::Client(error)) => return Err(error),
            Err(Failed::Upstream) => return Err(ProxyError::UpstreamFailed),
        };
        match answered {
            Ok(answer) => return Ok(answer),
            // A backend may have acted on a request it closed on without answering: only one
            // that may be repeated is sent again (hyper's pool finds such streams before sending).
            Err(Lost::Unsent) if *reused => {
                let fresh = proxy.raw.checkout(pool, index, proxy.id, None).await;
                *upstream = fresh.map_err(|_| ProxyError::UpstreamFailed)?;
            }
            Err(Lost::Closed)
                if *reused
                    && request.method.is_idempotent()
                    && upload.as_deref().is_none_or(Upload::replayable) =>
            {
                let fresh = proxy.raw.checkout(pool, index, proxy.id, None).await;
                *upstream = fresh.map_err(|_| ProxyError::UpstreamFailed)?;
            }
            Err(Lost::Switched) => return Err(ProxyError::UnexpectedUpgrade),
            Err(_) => return Err(ProxyError::UpstreamFailed),
        }
    }
}

/// Answers with trafik's own error, written as every answer of the pipeline is (no body after
/// `HEAD`) and counted in `metrics` like every answer (against `backend` when one was asked);
/// the connection goes on when `keep` (the request's bytes, `consumed` of the input, are all
/// read) and the error allows it. Its body names the backend to blame, if there is one.
async fn refuse<S: AsyncWrite + SendFile + Unpin>(
    connection: &mut Connection<S>,
    metrics: &mut Answers<'_>,
    backend: Option<SocketAddr>,
    (error, blame): (ProxyError, Option<Blame>),
    consumed: usize,
    keep: bool,
    head_request: bool,
) -> Exchanged {
    let logged = metrics.answered(error.status().as_u16(), backend, Instant::now());
    let mut answer = error.response_blaming(blame.as_ref());
    if let Some(steps) = &metrics.steps {
        steps.on_response(&mut answer, steps.filters.len());
    }
    // Boxed: trafik's own errors are rare, and inline this future was more than half of every
    // exchange's (and so of every connection's) size.
    Box::pin(answer_own(
        connection,
        logged,
        OwnAnswer::Built(answer),
        consumed,
        keep,
        head_request,
    ))
    .await
}

/// An answer the own engine gives without a backend.
// Made and moved into its writer once: boxing the built answers would cost each an allocation.
#[allow(clippy::large_enum_variant)]
enum OwnAnswer<'a> {
    /// Built as a `Response`: trafik's own errors, a filter's answer, a site's answer other
    /// than a whole file's 200 (a range, a 304, a refusal), and any file's when steps edit it.
    Built(http::Response<ProxyBody>),
    /// A copy from the cache, written as it is stored, with the listener's `Alt-Svc`.
    Stored(Hit<'a>, Option<&'a HeaderValue>),
    /// A whole file, written from the fields made when it was read, with the `Alt-Svc`.
    File(WholeFile, Option<&'a HeaderValue>),
}

impl OwnAnswer<'_> {
    fn status(&self) -> http::StatusCode {
        match self {
            OwnAnswer::Built(answer) => answer.status(),
            OwnAnswer::Stored(hit, _) => hit.status(),
            OwnAnswer::File(file, _) => file.status(),
        }
    }
}

/// Writes trafik's own `answer`, counted already (its log line `logged`), as every answer of the
/// pipeline is written; the connection goes on when `keep` and the answer allow it.
async fn answer_own<S: AsyncWrite + SendFile + Unpin>(
    connection: &mut Connection<S>,
    logged: Option<AccessLine>,
    answer: OwnAnswer<'_>,
    consumed: usize,
    keep: bool,
    head_request: bool,
) -> Exchanged {
    let (client, out) = (&mut connection.client, &mut connection.relay);
    let written = match answer {
        OwnAnswer::Built(answer) => {
            pipeline::write_answer(client, out, answer, head_request, !keep).await
        }
        OwnAnswer::Stored(hit, alt_svc) => {
            pipeline::write_held(client, out, hit, alt_svc, head_request, !keep).await
        }
        OwnAnswer::File(file, alt_svc) => {
            pipeline::write_held(client, out, file, alt_svc, head_request, !keep).await
        }
    };
    if let Some(line) = logged {
        line.write(written.is_ok().then(Instant::now));
    }
    if !matches!(written, Ok(true)) {
        return Exchanged::Close;
    }
    connection.input.drain(..consumed);
    Exchanged::KeepAlive
}

/// Writes a head and the body bytes that came with it in one `writev` (more only if the
/// socket takes less).
async fn send<W: AsyncWrite + Unpin>(out: &mut W, head: &[u8], body: &[u8]) -> io::Result<()> {
    let written = out
        .write_vectored(&[IoSlice::new(head), IoSlice::new(body)])
        .await?;
    if written < head.len() {
        out.write_all(&head[written..]).await?;
        out.write_all(body).await?;
    } else if written < head.len() + body.len() {
        out.write_all(&body[written - head.len()..]).await?;
    }
    Ok(())
}

/// Why no response head came.
enum Lost {
    /// The request could not be written: the stream was closed.
    Unsent,
    /// The backend closed before sending a byte.
    Closed,
    /// It closed mid-head, or sent one no peer could agree on.
    Broken,
    /// It switched protocols unasked.
    Switched,
}

/// What an answer is read for.
struct Asked<'a> {
    head_request: bool,
    closing: bool,
    upgrading: bool,
    /// The request may be sent again.
    replayable: bool,
    /// The listener's `Alt-Svc` (an https listener with an h3 twin), else empty.
    alt_svc: &'a [u8],
}

/// Reads the upstream's response head into `buffer`, skipping informational ones, and writes
/// the client's version into `out`. For a request that may be sent again, an answer whose body
/// has a length is in hand only with a byte of that body: a backend that closes before it has
/// lost the request (`Broken`), which may go elsewhere, for its client has seen nothing yet.
/// A head past the snapshot's upstream limits is `Broken` too.
async fn response_head(
    upstream: &mut Stream,
    buffer: &mut Vec<u8>,
    asked: Asked<'_>,
    snapshot: &WorkerSnapshot,
    out: &mut Vec<u8>,
) -> Result<ResponseHead, Lost> {
    let Asked {
        head_request,
        closing,
        upgrading,
        replayable,
        alt_svc,
    } = asked;
    let limits = snapshot.client.upstream_limits;
    let mut head_budget = HeadBytes::new(limits.bytes);
    loop {
        if !buffer.is_empty() {
            match head::response(
                buffer,
                head_request,
                closing,
                upgrading,
                snapshot.via.as_bytes(),
                alt_svc,
                limits.headers,
                out,
            ) {
                Response::Ready(head) if head_budget.fits(head.length) => {
                    let body_to_wait_for = replayable
                        && matches!(head.framing, Framing::Length(length) if length > 0)
                        && buffer.len() == head.length;
                    if body_to_wait_for {
                        match upstream.read_buf(buffer).await {
                            Ok(0) | Err(_) => return Err(Lost::Broken),
                            Ok(_) => {}
                        }
                    }
                    return Ok(head);
                }
                Response::Interim(length) => {
                    head_budget.skip(length);
                    buffer.drain(..length);
                    continue;
                }
                Response::Switched => return Err(Lost::Switched),
                Response::Partial if head_budget.may_grow(buffer.len()) => {}
                Response::Ready(_) | Response::Partial | Response::Bad => {
                    return Err(Lost::Broken);
                }
            }
        }
        match upstream.read_buf(buffer).await {
            // After an interim answer the backend has the request: losing it now is no close.
            Ok(0) | Err(_) if buffer.is_empty() && !head_budget.skipped_any() => {
                return Err(Lost::Closed);
            }
            Ok(0) | Err(_) => return Err(Lost::Broken),
            Ok(_) => {}
        }
    }
}

/// Which side broke off an answer's relay.
#[derive(Debug, PartialEq, Eq)]
enum Broken {
    /// The backend cut the body short: it closed or failed before the body's end, or broke its
    /// framing.
    Backend,
    /// The client could not be written to.
    Client,
}

impl Broken {
    fn client(_: io::Error) -> Self {
        Broken::Client
    }
}

/// Reads the next piece of an answer's body into `buffer`: how many bytes came, none at the
/// backend's close; a read that fails is the backend's.
async fn read_more<U: AsyncRead + Unpin>(
    upstream: &mut U,
    buffer: &mut Vec<u8>,
) -> Result<usize, Broken> {
    buffer.clear();
    upstream.read_buf(buffer).await.map_err(|_| Broken::Backend)
}

/// Relays the response: its head and the body bytes read with it in one `writev`, then the
/// rest as it comes (a chunked body framed anew in the buffer it was read into). True when the
/// body ended where its framing says, with nothing after it. A body that ends at the backend's
/// close goes as chunks to a client that stays (not `closing`), as hyper's server sends a body
/// of unknown length. `upstream_done` runs once the backend's answer has ended, before its last
/// bytes are written (never for a switch).
async fn relay<U: AsyncRead + Unpin, C: AsyncWrite + Unpin>(
    upstream: &mut U,
    client: &mut C,
    head: &[u8],
    buffer: &mut Vec<u8>,
    answer: &ResponseHead,
    closing: bool,
    upstream_done: impl FnOnce(),
) -> Result<bool, Broken> {
    let after = &buffer[answer.length..];
    match answer.framing {
        Framing::Empty => {
            upstream_done();
            send(client, head, &[]).await.map_err(Broken::client)?;
            Ok(after.is_empty())
        }
        // The bytes after a 101 are the new protocol's.
        Framing::Switched => {
            send(client, head, after).await.map_err(Broken::client)?;
            Ok(false)
        }
        Framing::Length(length) => {
            let take = (after.len() as u64).min(length) as usize;
            let mut rest = length - take as u64;
            let mut upstream_done = Some(upstream_done);
            let mut ended = |rest: u64| {
                if rest == 0
                    && let Some(done) = upstream_done.take()
                {
                    done();
                }
            };
            ended(rest);
            send(client, head, &after[..take])
                .await
                .map_err(Broken::client)?;
            let clean = after.len() == take;
            while rest > 0 {
                if read_more(upstream, buffer).await? == 0 {
                    return Err(Broken::Backend);
                }
                let take = (buffer.len() as u64).min(rest) as usize;
                rest -= take as u64;
                ended(rest);
                client
                    .write_all(&buffer[..take])
                    .await
                    .map_err(Broken::client)?;
                if take < buffer.len() {
                    return Ok(false);
                }
            }
            Ok(clean)
        }
        Framing::Chunked => {
            let mut chunked = Chunked::new(ANSWER_TRAILER_LINES);
            // Each read is framed anew where it lies (no extensions, no trailer fields). As
            // hyper: what came before a break in the framing goes out, then the connection
            // closes; the head too, unless the body broke before any data in this first read.
            let start = answer.length;
            let relayed = chunked.relay(&mut buffer[start..]);
            let framed = &buffer[start..start + relayed.framed];
            match relayed.end {
                Err(BadChunk { .. }) => {
                    if chunked.carried_data() {
                        send(client, head, framed).await.map_err(Broken::client)?;
                    }
                    return Err(Broken::Backend);
                }
                Ok(Some(end)) => {
                    upstream_done();
                    send(client, head, framed).await.map_err(Broken::client)?;
                    return Ok(start + end == buffer.len());
                }
                Ok(None) => send(client, head, framed).await.map_err(Broken::client)?,
            }
            loop {
                if read_more(upstream, buffer).await? == 0 {
                    return Err(Broken::Backend);
                }
                let relayed = chunked.relay(buffer);
                let framed = &buffer[..relayed.framed];
                match relayed.end {
                    Err(BadChunk { .. }) => {
                        client.write_all(framed).await.map_err(Broken::client)?;
                        return Err(Broken::Backend);
                    }
                    Ok(Some(end)) => {
                        upstream_done();
                        client.write_all(framed).await.map_err(Broken::client)?;
                        return Ok(end == buffer.len());
                    }
                    Ok(None) => client.write_all(framed).await.map_err(Broken::client)?,
                }
            }
        }
        Framing::Close if !closing => {
            chunked::send_chunk(client, head, after)
                .await
                .map_err(Broken::client)?;
            loop {
                if read_more(upstream, buffer).await? == 0 {
                    upstream_done();
                    client
                        .write_all(chunked::LAST_CHUNK)
                        .await
                        .map_err(Broken::client)?;
                    return Ok(false);
                }
                chunked::send_chunk(client, &[], buffer)
                    .await
                    .map_err(Broken::client)?;
            }
        }
        Framing::Close => {
            send(client, head, after).await.map_err(Broken::client)?;
            loop {
                if read_more(upstream, buffer).await? == 0 {
                    upstream_done();
                    return Ok(false);
                }
                client.write_all(buffer).await.map_err(Broken::client)?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::pin::Pin;
    use std::rc::Rc;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncWrite, AsyncWriteExt};

    use super::head::{Framing, ResponseHead};
    use super::{Broken, relay};

    /// A client that records what reached it, shared with the test.
    #[derive(Clone, Default)]
    struct Recorded(Rc<RefCell<Vec<u8>>>);

    impl AsyncWrite for Recorded {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bytes: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.0.borrow_mut().extend_from_slice(bytes);
            Poll::Ready(Ok(bytes.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// An answer's head, parsed, whose body follows in the buffer.
    fn answer(framing: Framing) -> ResponseHead {
        ResponseHead {
            length: 0,
            status: 200,
            framing,
            reusable: true,
            dated: true,
            retry_after: false,
        }
    }

    /// Relays an answer whose first `read` bytes came with its head and whose rest the backend
    /// sends after; returns what the client got and how much of it it had when the backend's
    /// part was declared done.
    async fn relayed(framing: Framing, read: &[u8], rest: &[u8]) -> (Vec<u8>, Option<usize>) {
        let (mut backend, mut upstream) = tokio::io::duplex(64);
        let rest = rest.to_vec();
        let sending = tokio::spawn(async move {
            backend.write_all(&rest).await.unwrap();
            backend
        });
        let client = Recorded::default();
        let done_at = Cell::new(None);
        let mut buffer = read.to_vec();
        let seen = client.clone();
        let clean = relay(
            &mut upstream,
            &mut client.clone(),
            b"HTTP/1.1 200 OK\r\n\r\n",
            &mut buffer,
            &answer(framing),
            false,
            || done_at.set(Some(seen.0.borrow().len())),
        )
        .await
        .unwrap();
        assert!(clean);
        drop(sending.await.unwrap());
        (client.0.take(), done_at.get())
    }

    /// The backend leaves its in-flight count when its answer has ended, before the client
    /// has the last byte: a client that sends its next request as soon as it has the answer
    /// must not find the previous one still counted on that backend.
    #[tokio::test]
    async fn the_backend_is_done_before_the_answers_last_byte_reaches_the_client() {
        let cases = [
            (Framing::Length(10), &b"01234"[..], &b"56789"[..]),
            (Framing::Length(4), b"0123", b""),
            (Framing::Chunked, b"5\r\n01234\r\n", b"0\r\n\r\n"),
            (Framing::Chunked, b"1\r\nx\r\n0\r\n\r\n", b""),
            (Framing::Empty, b"", b""),
        ];
        for (framing, read, rest) in cases {
            let (got, done_at) = relayed(framing, read, rest).await;
            let done_at = done_at.unwrap_or_else(|| panic!("{framing:?}: never done"));
            assert!(
                done_at < got.len(),
                "{framing:?}: done after all {} bytes reached the client",
                got.len()
            );
        }
    }

    /// A client that can no longer be written to.
    struct Gone;

    impl AsyncWrite for Gone {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A body that ends before its framing says, or breaks it, is the backend's fault (it is
    /// counted against it); a client that cannot take the answer is not.
    #[tokio::test]
    async fn a_body_cut_short_is_the_backends_break_and_a_gone_client_the_clients() {
        let cut = [
            (Framing::Length(10), &b"01234"[..]),
            (Framing::Chunked, b"5\r\n012"),
            (Framing::Chunked, b"3\r\nabc\r\n4 x\r\n"),
        ];
        for (framing, read) in cut {
            let (backend, mut upstream) = tokio::io::duplex(64);
            drop(backend);
            let relayed = relay(
                &mut upstream,
                &mut Recorded::default(),
                b"HTTP/1.1 200 OK\r\n\r\n",
                &mut read.to_vec(),
                &answer(framing),
                false,
                || {},
            )
            .await;
            assert_eq!(relayed, Err(Broken::Backend), "{framing:?}, {read:?}");
        }
        let (_backend, mut upstream) = tokio::io::duplex(64);
        let relayed = relay(
            &mut upstream,
            &mut Gone,
            b"HTTP/1.1 200 OK\r\n\r\n",
            &mut b"0123".to_vec(),
            &answer(Framing::Length(4)),
            false,
            || {},
        )
        .await;
        assert_eq!(relayed, Err(Broken::Client));
    }

    /// A worker serving one plain-HTTP listener with no routes, and its connections.
    fn worker() -> (Rc<super::WorkerProxy>, Rc<super::Connections>) {
        use std::time::Duration;

        use crate::plan::{ClientPlan, ListenerKind, ListenerPlan, Plan};
        let plan = Plan {
            name: "trafik-test".into(),
            trace_header: None,
            workers: 1,
            listeners: vec![ListenerPlan {
                name: "web".into(),
                address: "127.0.0.1:0".parse().unwrap(),
                kind: ListenerKind::Http { routes: Vec::new() },
                connections: Default::default(),
            }],
            pools: Vec::new(),
            admin: None,
            client: ClientPlan {
                header_read_timeout: Duration::from_secs(10),
                idle_timeout: Duration::from_secs(30),
                trust_forwarded: false,
                access_log: false,
                limits: Default::default(),
                upstream_limits: Default::default(),
                engine: Default::default(),
            },
            drain_timeout: Duration::from_secs(1),
            dns: None,
            admin_token: None,
            tracing: Default::default(),
            resolver: Default::default(),
        };
        let endpoints = crate::pool::Endpoints::new(1);
        let snapshot = crate::snapshot::Snapshot::build(
            &plan,
            &[super::ListenerId(0)],
            None,
            &endpoints,
            1,
            None,
        )
        .unwrap();
        let proxy =
            super::WorkerProxy::new(0, std::sync::Arc::new(snapshot), std::time::Instant::now());
        (
            Rc::new(proxy),
            super::Connections::new(Duration::from_secs(30)),
        )
    }

    #[tokio::test(flavor = "current_thread")]
    async fn idle_and_trickling_connections_hold_no_exchange_buffers() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let (proxy, connections) = worker();
                super::buffers::Exchange::take().give_back();
                let settle = || async {
                    for _ in 0..16 {
                        tokio::task::yield_now().await;
                    }
                };
                let mut clients = Vec::new();
                for _ in 0..2 {
                    let (client, server) = tokio::io::duplex(64 * 1024);
                    tokio::task::spawn_local(super::serve(
                        proxy.clone(),
                        super::ListenerId(0),
                        "http",
                        super::Protocol::Http1,
                        server,
                        super::Client::at("127.0.0.1:40000".parse().unwrap()),
                        connections.clone(),
                    ));
                    clients.push(client);
                }
                settle().await;
                // Two idle connections: each took an input buffer, neither the exchange set.
                assert_eq!(super::buffers::spares().1, 1);

                // A head in pieces (slowloris): the connection waits for the rest, the exchange
                // buffers back in the spares while it does.
                clients[0]
                    .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n")
                    .await
                    .unwrap();
                settle().await;
                assert_eq!(super::buffers::spares().1, 1);
                drop(clients);
                settle().await;
                // Both gave their input back when their clients left.
                assert_eq!(super::buffers::spares(), (2, 1));
            })
            .await;
    }
}
