//! trafik's own HTTP/1.1 engine for plain-HTTP listeners (`[server] engine = "trafik"`).
//!
//! One task per client connection reads a request head into a reused buffer and parses it with
//! `httparse` ([`head`]). A plainly valid request whose route is a pool target with only the
//! built-in head steps takes the fast path: the pool's own rule picks the backend, a
//! worker-local kept-alive stream is checked out ([`upstream`]) and the exchange runs inline —
//! the rewritten head and the body in one `writev`, the response head parsed and rewritten the
//! same way, the body relayed by its framing. Anything else (filters, other targets, upgrades,
//! `Expect`, chunked uploads, a head in pieces, anything doubtful) hands the connection to
//! hyper for the rest of its life over a [`rewind::Rewind`] stream, which replays the bytes
//! already read: such requests are served exactly as with `engine = "hyper"`.

mod buffers;
mod deadline;
pub mod head;
mod rewind;
pub mod upstream;

use std::future::Future;
use std::io::{self, IoSlice, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::Poll;
use std::time::Instant;

use http::Method;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use trafik_balance::{Outcome, PickContext};

use self::buffers::Buffers;
use self::deadline::Deadline;
use self::head::{Chunks, Forwarding, Framing, Request, RequestHead, Response, ResponseHead};
use self::rewind::Rewind;
use self::upstream::Stream;
use crate::connections::{Connections, Control, Watched};
use crate::counters::bump;
use crate::error::ProxyError;
use crate::http::server::{self, Protocol};
use crate::http::service::WorkerProxy;
use crate::http::target::{Target, others_left};
use crate::http::upstream::InFlight;
use crate::pool::Pool;
use crate::snapshot::{ListenerId, WorkerSnapshot};

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
    /// A head rewritten for the next hop, either way.
    head: Vec<u8>,
    /// Bytes from the upstream, or request body bytes on their way to it.
    relay: Vec<u8>,
    forwarding: Forwarding,
    /// The response timeout.
    deadline: Deadline,
}

/// Serves HTTP/1.1 on a plain-TCP client connection with the own engine.
pub async fn serve(
    proxy: Rc<WorkerProxy>,
    listener: ListenerId,
    scheme: &'static str,
    stream: TcpStream,
    peer: SocketAddr,
    connections: Rc<Connections>,
) {
    let control = connections.register(listener);
    let Buffers { input, head, relay } = Buffers::take();
    let mut connection = Connection {
        client: Watched::new(stream, control.clone(), connections.clone()),
        input,
        head,
        relay,
        forwarding: Forwarding::new(peer, scheme),
        deadline: Deadline::default(),
    };
    let end = {
        let run = run(&proxy, listener, &mut connection, &control);
        tokio::pin!(run);
        std::future::poll_fn(|cx| {
            control.remember(cx.waker());
            // Idle past the limit (or the header timeout), or draining between requests.
            let over = || control.is_idle() || (control.should_drain() && control.awaits_head());
            if over() {
                return Poll::Ready(End::Close);
            }
            match run.as_mut().poll(cx) {
                Poll::Pending if over() => Poll::Ready(End::Close),
                polled => polled,
            }
        })
        .await
    };
    let End::HandOver { first } = end else {
        let Connection {
            input, head, relay, ..
        } = connection;
        Buffers { input, head, relay }.give_back();
        return;
    };
    drop(control);
    let protocol = if first {
        Protocol::Detect
    } else {
        Protocol::Http1
    };
    let stream = Rewind::new(connection.input, connection.client.into_inner());
    // Boxed: the rare handover would otherwise make every connection's task as big as hyper's,
    // a size copied several times as a task is spawned and finished.
    Box::pin(server::serve(
        proxy,
        listener,
        scheme,
        protocol,
        stream,
        peer,
        connections,
    ))
    .await;
}

async fn run<S: AsyncRead + AsyncWrite + Unpin>(
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
        let snapshot = proxy.snapshot();
        let parsed = head::request(
            &connection.input,
            snapshot.client.limits,
            &connection.forwarding,
            snapshot.client.trust_forwarded,
            snapshot.via.as_bytes(),
            &mut connection.head,
        );
        let Request::Ready(request) = parsed else {
            return End::HandOver { first };
        };
        match exchange(proxy, &snapshot, listener, connection, &request).await {
            Exchanged::KeepAlive => first = false,
            Exchanged::Close => return End::Close,
            Exchanged::Defer => return End::HandOver { first },
        }
    }
}

/// Whether a pool's requests can go the fast path: nothing of it needs the parsed request
/// (stickiness, hash keys, answer retries with a replay, limits that queue) or another
/// transport (TLS).
fn plain(pool: &Pool) -> bool {
    pool.sticky.is_none()
        && !pool.needs_key()
        && pool.concurrency.is_none()
        && pool.plan.tls.is_none()
        && pool.plan.max_requests_per_backend == 0
        && !pool.retrying.retries_any_answer()
}

/// One request on the fast path, with the pool's retry rules: a failed connect goes to another
/// backend, and so does a bodiless request the backend lost while the budget allows.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    proxy: &WorkerProxy,
    snapshot: &Rc<WorkerSnapshot>,
    listener: ListenerId,
    connection: &mut Connection<S>,
    request: &RequestHead,
) -> Exchanged {
    let Some(routes) = snapshot.http_routes(listener) else {
        return Exchanged::Defer;
    };
    // A body still on its way streams through hyper, which reads an early answer while the
    // upload goes on.
    if ((connection.input.len() - request.length) as u64) < request.body
        || snapshot.client.access_log
        || snapshot.trace.is_some()
    {
        return Exchanged::Defer;
    }
    let text = |range: &std::ops::Range<usize>| head::ascii(&connection.input[range.clone()]);
    let found = routes.find_parts(
        Some(text(&request.host)),
        text(&request.path),
        &request.method,
    );
    let Some((route, _)) = found else {
        return Exchanged::Defer;
    };
    let Target::Pool(target) = &route.target else {
        return Exchanged::Defer;
    };
    let pool = &snapshot.pools[target.pool];
    if !route.filters.iter().all(|filter| filter.head_only()) || !plain(pool) {
        return Exchanged::Defer;
    }
    let timed = pool.plan.algorithm.uses_latency();
    let mut context = PickContext::default();
    if timed {
        context.now = proxy.now();
    }
    // No backend at all: the full pipeline gives the answer, with nothing yet charged.
    let Some(mut index) = pick(pool, &context) else {
        return Exchanged::Defer;
    };
    let me = proxy.id;
    let retries = pool.plan.retries;
    let replayable = retries > 0
        && request.body == 0
        && (request.method.is_idempotent() || target.retry_non_idempotent);
    let consumed = request.length + request.body as usize;
    let keep = !request.close;
    pool.retrying.first_try(proxy.now());
    let mut failure = ProxyError::NoHealthyBackend;
    for attempt in 0..=retries {
        if attempt > 0 {
            if timed {
                context.now = proxy.now();
            }
            match pick(pool, &context) {
                Some(next) => index = next,
                None => break,
            }
        }
        let counters = pool.members[index].counters.mine(me);
        bump(&counters.decisions);
        let in_flight = InFlight::start(snapshot, target.pool, index, me);
        let sent_at = timed.then(Instant::now);
        let mut upstream = match proxy.raw.checkout(pool, index, me, false).await {
            Ok(checked_out) => checked_out,
            Err(_) => {
                bump(&counters.failures);
                pool.report(index, Outcome::ConnectFailure);
                context.tried.insert(index);
                failure = ProxyError::ConnectFailed;
                if pool.retrying.another(attempt, retries, me, proxy.now()) {
                    continue;
                }
                break;
            }
        };
        let answered = ask(
            proxy,
            pool,
            index,
            &mut upstream,
            connection,
            request,
            snapshot,
        )
        .await;
        let answer = match answered {
            Ok(answer) => answer,
            Err(error) => {
                bump(&counters.failures);
                pool.report(index, Outcome::Error);
                drop(in_flight);
                if replayable
                    && error.is_lost_request()
                    && others_left(pool, &context, index)
                    && pool.retrying.another(attempt, retries, me, proxy.now())
                {
                    context.tried.insert(index);
                    failure = error;
                    pool.retrying.back_off(attempt + 1).await;
                    continue;
                }
                return refuse(connection, error, consumed, keep).await;
            }
        };
        bump(&counters.requests);
        pool.report(index, Outcome::of_status(answer.status));
        if let Some(sent_at) = sent_at {
            pool.selector.observe(index, sent_at.elapsed(), proxy.now());
        }
        connection.input.drain(..consumed);
        let relayed = relay(
            &mut upstream.0,
            &mut connection.client,
            &connection.head,
            &mut connection.relay,
            &answer,
        )
        .await;
        drop(in_flight);
        match relayed {
            Ok(true) if answer.reusable => proxy.raw.release(pool, index, upstream.0),
            Ok(_) => {}
            Err(_) => return Exchanged::Close,
        }
        // The connection closes as its task ends, sending the FIN then.
        if request.close || answer.framing == Framing::Close {
            return Exchanged::Close;
        }
        return Exchanged::KeepAlive;
    }
    if failure.is_unreachable() {
        bump(pool.unreachable.mine(me));
    }
    refuse(connection, failure, consumed, keep).await
}

/// The pool's rule, then its slow start.
fn pick(pool: &Pool, context: &PickContext) -> Option<usize> {
    let picked = pool.selector.pick(&pool.backends, context);
    picked.map(|index| pool.warmed(index, context))
}

/// Sends the request on `upstream` (a checked-out stream, and whether it was reused) and
/// reads the response head, within the pool's response timeout. A reused stream the backend
/// closed while it was idle gets one more try on a new stream.
async fn ask<S>(
    proxy: &WorkerProxy,
    pool: &Pool,
    index: usize,
    upstream: &mut (Stream, bool),
    connection: &mut Connection<S>,
    request: &RequestHead,
    snapshot: &WorkerSnapshot,
) -> Result<ResponseHead, ProxyError> {
    let body = &connection.input[request.length..request.length + request.body as usize];
    loop {
        let (stream, reused) = upstream;
        let sent = send(stream, &connection.head, body).await;
        let answered = match sent {
            Ok(()) => {
                connection.relay.clear();
                let waited = connection
                    .deadline
                    .within(
                        pool.plan.response_timeout,
                        response_head(
                            stream,
                            &mut connection.relay,
                            request.method == Method::HEAD,
                            request.close,
                            snapshot.via.as_bytes(),
                            &mut connection.head,
                        ),
                    )
                    .await;
                match waited {
                    None => return Err(ProxyError::UpstreamTimeout),
                    Some(answered) => answered,
                }
            }
            Err(_) => Err(Lost::Unsent),
        };
        match answered {
            Ok(answer) => return Ok(answer),
            // A backend may have acted on a request it closed on without answering: only one
            // that may be repeated is sent again (hyper's pool finds such streams before sending).
            Err(Lost::Unsent) if *reused => {
                let fresh = proxy.raw.checkout(pool, index, proxy.id, true).await;
                *upstream = fresh.map_err(|_| ProxyError::UpstreamFailed)?;
            }
            Err(Lost::Closed) if *reused && request.method.is_idempotent() => {
                let fresh = proxy.raw.checkout(pool, index, proxy.id, true).await;
                *upstream = fresh.map_err(|_| ProxyError::UpstreamFailed)?;
            }
            Err(Lost::Switched) => return Err(ProxyError::UnexpectedUpgrade),
            Err(_) => return Err(ProxyError::UpstreamFailed),
        }
    }
}

/// Answers with trafik's own error; the connection goes on when `keep` (the request's bytes,
/// `consumed` of the input, are all read).
async fn refuse<S: AsyncWrite + Unpin>(
    connection: &mut Connection<S>,
    error: ProxyError,
    consumed: usize,
    keep: bool,
) -> Exchanged {
    let answer = &mut connection.relay;
    answer.clear();
    let status = error.status();
    let body = error.body();
    let _ = write!(
        answer,
        "HTTP/1.1 {} {}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    );
    for (name, value) in error.headers() {
        let _ = write!(answer, "{name}: {value}\r\n");
    }
    if !keep {
        answer.extend_from_slice(b"connection: close\r\n");
    }
    answer.extend_from_slice(b"\r\n");
    answer.extend_from_slice(body.as_bytes());
    if connection.client.write_all(answer).await.is_err() || !keep {
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
        out.write_all(body).await
    } else {
        out.write_all(&body[written - head.len()..]).await
    }
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

/// Reads the upstream's response head into `buffer`, skipping informational ones, and writes
/// the client's version into `out`.
async fn response_head(
    upstream: &mut Stream,
    buffer: &mut Vec<u8>,
    head_request: bool,
    closing: bool,
    via: &[u8],
    out: &mut Vec<u8>,
) -> Result<ResponseHead, Lost> {
    loop {
        if !buffer.is_empty() {
            match head::response(buffer, head_request, closing, via, out) {
                Response::Ready(head) => return Ok(head),
                Response::Interim(length) => {
                    buffer.drain(..length);
                    continue;
                }
                Response::Bad => return Err(Lost::Broken),
                Response::Switched => return Err(Lost::Switched),
                Response::Partial => {}
            }
        }
        match upstream.read_buf(buffer).await {
            Ok(0) | Err(_) if buffer.is_empty() => return Err(Lost::Closed),
            Ok(0) | Err(_) => return Err(Lost::Broken),
            Ok(_) => {}
        }
    }
}

/// Relays the response: its head and the body bytes read with it in one `writev`, then the
/// rest as it comes. True when the body ended where its framing says, with nothing after it.
async fn relay<C: AsyncWrite + Unpin>(
    upstream: &mut Stream,
    client: &mut C,
    head: &[u8],
    buffer: &mut Vec<u8>,
    answer: &ResponseHead,
) -> io::Result<bool> {
    let after = &buffer[answer.length..];
    match answer.framing {
        Framing::Empty => {
            send(client, head, &[]).await?;
            Ok(after.is_empty())
        }
        Framing::Length(length) => {
            let take = (after.len() as u64).min(length) as usize;
            send(client, head, &after[..take]).await?;
            let clean = after.len() == take;
            let mut rest = length - take as u64;
            while rest > 0 {
                buffer.clear();
                if upstream.read_buf(buffer).await? == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                let take = (buffer.len() as u64).min(rest) as usize;
                client.write_all(&buffer[..take]).await?;
                rest -= take as u64;
                if take < buffer.len() {
                    return Ok(false);
                }
            }
            Ok(clean)
        }
        Framing::Chunked => {
            let mut chunks = Chunks::default();
            let end = chunks.feed(after).map_err(|_| io::ErrorKind::InvalidData)?;
            let take = end.unwrap_or(after.len());
            send(client, head, &after[..take]).await?;
            if let Some(end) = end {
                return Ok(end == after.len());
            }
            loop {
                buffer.clear();
                if upstream.read_buf(buffer).await? == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                let end = chunks
                    .feed(buffer)
                    .map_err(|_| io::ErrorKind::InvalidData)?;
                client
                    .write_all(&buffer[..end.unwrap_or(buffer.len())])
                    .await?;
                if let Some(end) = end {
                    return Ok(end == buffer.len());
                }
            }
        }
        Framing::Close => {
            send(client, head, after).await?;
            loop {
                buffer.clear();
                if upstream.read_buf(buffer).await? == 0 {
                    return Ok(false);
                }
                client.write_all(buffer).await?;
            }
        }
    }
}
