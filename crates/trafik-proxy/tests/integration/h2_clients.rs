//! trafik's own HTTP/2 server against a client that writes its frames by hand (RFC 9113, RFC
//! 7541), over h2c with prior knowledge: malformed requests are reset and never reach a
//! backend, a head past the limits is answered 431, streams past trafik's limit are refused,
//! and a client that cancels request after request (rapid reset) loses its connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trafik_test_support::proxy::*;

use crate::h2_wire::*;
use crate::hostile::head_counting_backend;

const CANCEL: u32 = 0x8;
const REFUSED_STREAM: u32 = 0x7;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// `:method: GET`, `:scheme: http`, `:path: /` by their static-table entries, and
/// `:authority: kargo.test` (RFC 7541 Appendix A).
fn get_block() -> Vec<u8> {
    let mut block = vec![0x82, 0x86, 0x84, 0x01, 10];
    block.extend(b"kargo.test");
    block
}

fn code(payload: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(payload[at..at + 4].try_into().unwrap())
}

/// A client connection to trafik's plain listener: the preface and an empty SETTINGS sent.
async fn connect(address: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let mut opening = PREFACE.to_vec();
    opening.extend(frame(SETTINGS, 0, 0, &[]));
    stream.write_all(&opening).await.unwrap();
    stream
}

/// The next frame trafik sends; `None` once it closed the connection.
async fn next_frame(stream: &mut TcpStream) -> Option<Frame> {
    let mut head = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(20), stream.read_exact(&mut head))
        .await
        .expect("a frame within 20 s")
        .ok()?;
    let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0; length];
    stream.read_exact(&mut payload).await.ok()?;
    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
    Some((head[3], head[4], id, payload))
}

/// Reads frames until one `matching` comes; panics if the connection ends first.
async fn until(stream: &mut TcpStream, what: &str, matching: impl Fn(&Frame) -> bool) -> Frame {
    loop {
        let frame = next_frame(stream)
            .await
            .unwrap_or_else(|| panic!("closed before {what}"));
        if matching(&frame) {
            return frame;
        }
    }
}

/// A backend counting the requests that reach it, answering each with a 200.
async fn counting_backend() -> (SocketAddr, Arc<AtomicIsize>) {
    head_counting_backend(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nkargo").await
}

/// Requests malformed as RFC 9113 §8.1.1, §8.2 and §8.3 say are each reset with PROTOCOL_ERROR,
/// and none reaches the backend; the connection serves the next well-formed request.
#[tokio::test]
async fn malformed_requests_are_reset_and_never_forwarded() {
    let (backend, count) = counting_backend().await;
    let running = trafik_proxy::start(plan(&[backend])).unwrap();
    let mut stream = connect(web(&running)).await;
    let cases: [(&str, Vec<u8>, u8); 9] = [
        ("no :path", vec![0x82, 0x86], END_STREAM),
        (
            "a name in upper case",
            [get_block(), field("X-Kargo", "1")].concat(),
            END_STREAM,
        ),
        (
            "a pseudo-field after a field",
            [field("x-kargo", "1"), get_block()].concat(),
            END_STREAM,
        ),
        (
            "two :method",
            [vec![0x82], get_block()].concat(),
            END_STREAM,
        ),
        (
            "a :status in a request",
            [get_block(), vec![0x88]].concat(),
            END_STREAM,
        ),
        (
            "a connection-specific field",
            [get_block(), field("connection", "keep-alive")].concat(),
            END_STREAM,
        ),
        (
            "a value closing with a space",
            [get_block(), field("x-kargo", "1 ")].concat(),
            END_STREAM,
        ),
        (
            "a length and no body",
            [get_block(), field("content-length", "5")].concat(),
            END_STREAM,
        ),
        (
            "two lengths",
            [
                get_block(),
                field("content-length", "1"),
                field("content-length", "2"),
            ]
            .concat(),
            0,
        ),
    ];
    for (index, (case, block, end)) in cases.iter().enumerate() {
        let id = 1 + 2 * index as u32;
        stream
            .write_all(&frame(HEADERS, END_HEADERS | end, id, block))
            .await
            .unwrap();
        let (_, _, _, payload) = until(&mut stream, case, |(kind, _, on, _)| {
            (*kind == RST_STREAM || *kind == HEADERS) && *on == id
        })
        .await;
        assert_eq!(payload.len(), 4, "{case}: reset, not answered");
        assert_eq!(code(&payload, 0), PROTOCOL_ERROR, "{case}");
    }
    let id = 1 + 2 * cases.len() as u32;
    stream
        .write_all(&frame(HEADERS, END_HEADERS | END_STREAM, id, &get_block()))
        .await
        .unwrap();
    let (_, _, _, head) = until(&mut stream, "the answer", |(kind, _, on, _)| {
        *kind == HEADERS && *on == id
    })
    .await;
    assert_eq!(head[0], 0x88, "`:status: 200` by its index");
    let (_, flags, _, body) = until(&mut stream, "the body", |(kind, _, on, _)| {
        *kind == DATA && *on == id
    })
    .await;
    assert_eq!(
        (body.as_slice(), flags & END_STREAM),
        (&b"kargo"[..], END_STREAM)
    );
    assert_eq!(
        count.load(Ordering::SeqCst),
        1,
        "only the well-formed request"
    );
    running.stop();
}

/// A head with more fields than `[server.limits]` allows is answered 431 by trafik, as on
/// HTTP/1.1, and never forwarded.
#[tokio::test]
async fn a_head_past_the_limits_is_answered_431() {
    let (backend, count) = counting_backend().await;
    let mut plan = plan(&[backend]);
    plan.client.limits.headers = 8;
    let running = trafik_proxy::start(plan).unwrap();
    let mut stream = connect(web(&running)).await;
    let mut block = get_block();
    for index in 0..12 {
        block.extend(field(&format!("x-kargo-{index}"), "1"));
    }
    stream
        .write_all(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &block))
        .await
        .unwrap();
    let (_, _, _, head) = until(&mut stream, "the answer", |(kind, _, on, _)| {
        *kind == HEADERS && *on == 1
    })
    .await;
    // `:status` as a literal with the static table's name (entry 8): 431 has no entry.
    assert_eq!(&head[..5], b"\x08\x03431", "{head:?}");
    assert_eq!(count.load(Ordering::SeqCst), 0);
    running.stop();
}

/// With `[server.limits] streams = 2`, a third stream open at once is refused
/// (REFUSED_STREAM, RFC 9113 §5.1.2): the client may send it again later.
#[tokio::test]
async fn streams_past_the_limit_are_refused() {
    // A backend that reads requests and never answers: the streams stay open.
    let backend = raw_backend(|mut stream| async move {
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await.is_ok_and(|n| n > 0) {}
    })
    .await;
    let mut plan = plan(&[backend]);
    plan.client.limits.streams = 2;
    let running = trafik_proxy::start(plan).unwrap();
    let mut stream = connect(web(&running)).await;
    let mut requests = Vec::new();
    for id in [1, 3, 5] {
        // Without END_STREAM: a body is still to come, so each stream stays open.
        requests.extend(frame(HEADERS, END_HEADERS, id, &get_block()));
    }
    stream.write_all(&requests).await.unwrap();
    let (_, _, id, payload) =
        until(&mut stream, "a refusal", |(kind, ..)| *kind == RST_STREAM).await;
    assert_eq!((id, code(&payload, 0)), (5, REFUSED_STREAM));
    running.stop();
}

/// Requests opened and cancelled at once, again and again (CVE-2023-44487), end the
/// connection with ENHANCE_YOUR_CALM once the cancelled far outnumber the answered.
#[tokio::test]
async fn a_client_cancelling_request_after_request_loses_its_connection() {
    flood_ends_the_connection(|id| frame(RST_STREAM, 0, id, &CANCEL.to_be_bytes())).await;
}

/// Sends 200 requests in one write, each followed by the frame `ending` makes for its stream,
/// and expects the connection to end with ENHANCE_YOUR_CALM.
async fn flood_ends_the_connection(ending: fn(u32) -> Vec<u8>) {
    let (backend, _) = counting_backend().await;
    let running = trafik_proxy::start(plan(&[backend])).unwrap();
    let mut stream = connect(web(&running)).await;
    let mut flood = Vec::new();
    for index in 0..200u32 {
        let id = 1 + 2 * index;
        flood.extend(frame(HEADERS, END_HEADERS | END_STREAM, id, &get_block()));
        flood.extend(ending(id));
    }
    // trafik may close before it has read all of it.
    let _ = stream.write_all(&flood).await;
    let (_, _, _, payload) = until(&mut stream, "GOAWAY", |(kind, ..)| *kind == GOAWAY).await;
    assert_eq!(code(&payload, 4), ENHANCE_YOUR_CALM);
    running.stop();
}

/// A client that lets its requests finish may cancel some now and then: its connection stays.
#[tokio::test]
async fn cancelling_now_and_then_keeps_the_connection() {
    let (backend, _) = counting_backend().await;
    let running = trafik_proxy::start(plan(&[backend])).unwrap();
    let mut stream = connect(web(&running)).await;
    for index in 0..150u32 {
        let id = 1 + 4 * index;
        let mut pair = frame(HEADERS, END_HEADERS | END_STREAM, id, &get_block());
        pair.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            id + 2,
            &get_block(),
        ));
        pair.extend(frame(RST_STREAM, 0, id + 2, &CANCEL.to_be_bytes()));
        stream.write_all(&pair).await.unwrap();
        until(&mut stream, "the answer", |(kind, flags, on, _)| {
            assert_ne!(*kind, GOAWAY, "the connection ended");
            *kind == DATA && *on == id && flags & END_STREAM != 0
        })
        .await;
    }
    running.stop();
}

/// A backend that tells `heads` of every request head it reads and `closed` when trafik closes
/// the connection, and answers only once `answer` is notified.
async fn held_backend(
    heads: tokio::sync::mpsc::UnboundedSender<()>,
    closed: tokio::sync::mpsc::UnboundedSender<()>,
    answer: Arc<tokio::sync::Notify>,
) -> SocketAddr {
    raw_backend(move |mut stream| {
        let (heads, closed, answer) = (heads.clone(), closed.clone(), answer.clone());
        async move {
            if !read_head(&mut stream).await {
                return;
            }
            let _ = heads.send(());
            let mut sink = [0u8; 1024];
            tokio::select! {
                _ = async { while stream.read(&mut sink).await.is_ok_and(|n| n > 0) {} } => {
                    let _ = closed.send(());
                }
                () = answer.notified() => {
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nkargo";
                    let _ = stream.write_all(answer).await;
                }
            }
        }
    })
    .await
}

async fn told(channel: &mut tokio::sync::mpsc::UnboundedReceiver<()>, what: &str) {
    tokio::time::timeout(Duration::from_secs(20), channel.recv())
        .await
        .unwrap_or_else(|_| panic!("{what} within 20 s"));
}

/// A client's RST_STREAM stops its request's work: the exchange with the backend is dropped
/// (its connection closed) rather than left to run for nobody.
#[tokio::test]
async fn a_client_reset_stops_the_backend_exchange() {
    let (heads, mut headed) = tokio::sync::mpsc::unbounded_channel();
    let (closed, mut closing) = tokio::sync::mpsc::unbounded_channel();
    let backend = held_backend(heads, closed, Arc::new(tokio::sync::Notify::new())).await;
    let mut plan = plan(&[backend]);
    // Longer than the wait below: only the reset can end the exchange within it.
    plan.pools[0].response_timeout = Duration::from_secs(60);
    let running = trafik_proxy::start(plan).unwrap();
    let mut stream = connect(web(&running)).await;
    stream
        .write_all(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get_block()))
        .await
        .unwrap();
    told(&mut headed, "the request at the backend").await;
    stream
        .write_all(&frame(RST_STREAM, 0, 1, &CANCEL.to_be_bytes()))
        .await
        .unwrap();
    told(&mut closing, "the backend connection closed").await;
    running.stop();
}

/// A drain says GOAWAY naming the last request taken (RFC 9113 §6.8), answers it in full, then
/// closes the connection.
#[tokio::test]
async fn a_drain_says_goaway_and_finishes_the_request_under_way() {
    let (heads, mut headed) = tokio::sync::mpsc::unbounded_channel();
    let (closed, _closing) = tokio::sync::mpsc::unbounded_channel();
    let answer = Arc::new(tokio::sync::Notify::new());
    let backend = held_backend(heads, closed, answer.clone()).await;
    let running = trafik_proxy::start(plan(&[backend])).unwrap();
    let mut stream = connect(web(&running)).await;
    stream
        .write_all(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get_block()))
        .await
        .unwrap();
    told(&mut headed, "the request at the backend").await;
    running.stop();
    let (_, _, _, payload) = until(&mut stream, "GOAWAY", |(kind, ..)| *kind == GOAWAY).await;
    assert_eq!(
        (code(&payload, 0), code(&payload, 4)),
        (1, 0),
        "last stream 1, NO_ERROR"
    );
    answer.notify_one();
    let (_, _, _, body) = until(&mut stream, "the answer's body", |(kind, flags, on, _)| {
        *kind == DATA && *on == 1 && flags & END_STREAM != 0
    })
    .await;
    assert_eq!(body, b"kargo");
    while next_frame(&mut stream).await.is_some() {}
}

/// Stream errors a client provokes (here a WINDOW_UPDATE of 0 on each request, RFC 9113
/// §6.9) end its requests as cancels do, and count as cancels ("MadeYouReset",
/// CVE-2025-8671): the connection ends with ENHANCE_YOUR_CALM.
#[tokio::test]
async fn stream_errors_a_client_provokes_count_as_cancels() {
    flood_ends_the_connection(|id| frame(WINDOW_UPDATE, 0, id, &0u32.to_be_bytes())).await;
}

/// Refusals start no work and are not cancels: a burst of requests past the stream limit
/// (allowed before the client has read trafik's SETTINGS) has the excess refused, the rest
/// answered, and the connection kept.
#[tokio::test]
async fn a_burst_past_the_stream_limit_is_refused_in_part_and_keeps_the_connection() {
    let (backend, _) = counting_backend().await;
    let running = trafik_proxy::start(plan(&[backend])).unwrap();
    let mut stream = connect(web(&running)).await;
    let burst: Vec<u8> = (0..400u32)
        .flat_map(|index| {
            frame(
                HEADERS,
                END_HEADERS | END_STREAM,
                1 + 2 * index,
                &get_block(),
            )
        })
        .collect();
    stream.write_all(&burst).await.unwrap();
    let (mut answered, mut refused) = (0, 0);
    while answered + refused < 400 {
        let (kind, flags, _, payload) = next_frame(&mut stream).await.expect("the connection");
        match kind {
            GOAWAY => panic!("GOAWAY after {answered} answers and {refused} refusals"),
            RST_STREAM => {
                assert_eq!(code(&payload, 0), REFUSED_STREAM);
                refused += 1;
            }
            DATA if flags & END_STREAM != 0 => answered += 1,
            _ => {}
        }
    }
    assert!(
        refused > 0 && answered >= 100,
        "{answered} answered, {refused} refused"
    );
    running.stop();
}

/// A stream the client reset no longer counts against the limit, even before its work is
/// dropped: a new stream in the same write as the reset is taken.
#[tokio::test]
async fn a_reset_stream_makes_room_for_the_next_at_once() {
    let (heads, mut headed) = tokio::sync::mpsc::unbounded_channel();
    let (closed, _closing) = tokio::sync::mpsc::unbounded_channel();
    let backend = held_backend(heads, closed, Arc::new(tokio::sync::Notify::new())).await;
    let mut plan = plan(&[backend]);
    plan.client.limits.streams = 2;
    let running = trafik_proxy::start(plan).unwrap();
    let mut stream = connect(web(&running)).await;
    let mut two = frame(HEADERS, END_HEADERS | END_STREAM, 1, &get_block());
    two.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &get_block()));
    stream.write_all(&two).await.unwrap();
    told(&mut headed, "the first request at the backend").await;
    told(&mut headed, "the second request at the backend").await;
    let mut reset_and_open = frame(RST_STREAM, 0, 1, &CANCEL.to_be_bytes());
    reset_and_open.extend(frame(HEADERS, END_HEADERS | END_STREAM, 5, &get_block()));
    stream.write_all(&reset_and_open).await.unwrap();
    told(&mut headed, "the third request at the backend").await;
    running.stop();
}

/// Once a drain's GOAWAY named the last stream taken, a later GOAWAY (a connection error)
/// names no later one, though the client opened more (RFC 9113 §6.8: it never grows).
#[tokio::test]
async fn goaway_never_names_a_stream_it_did_not_take() {
    let (heads, mut headed) = tokio::sync::mpsc::unbounded_channel();
    let (closed, _closing) = tokio::sync::mpsc::unbounded_channel();
    let backend = held_backend(heads, closed, Arc::new(tokio::sync::Notify::new())).await;
    let running = trafik_proxy::start(plan(&[backend])).unwrap();
    let mut stream = connect(web(&running)).await;
    stream
        .write_all(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &get_block()))
        .await
        .unwrap();
    told(&mut headed, "the request at the backend").await;
    running.stop();
    let (_, _, _, first) = until(&mut stream, "GOAWAY", |(kind, ..)| *kind == GOAWAY).await;
    assert_eq!(code(&first, 0), 1);
    // A request the drain does not take, then DATA on stream 0: a connection error.
    let mut late = frame(HEADERS, END_HEADERS | END_STREAM, 3, &get_block());
    late.extend(frame(DATA, 0, 0, b"x"));
    stream.write_all(&late).await.unwrap();
    let (_, _, _, second) =
        until(&mut stream, "a second GOAWAY", |(kind, ..)| *kind == GOAWAY).await;
    assert_eq!((code(&second, 0), code(&second, 4)), (1, PROTOCOL_ERROR));
}

/// Frames after a client's END_STREAM find the stream half-closed (RFC 9113 §5.1): reset with
/// STREAM_CLOSED. A body shorter than its `content-length` is malformed (§8.1.1): reset with
/// PROTOCOL_ERROR, and never answered.
#[tokio::test]
async fn frames_after_the_end_and_short_bodies_are_reset_with_the_rfcs_codes() {
    let (heads, _headed) = tokio::sync::mpsc::unbounded_channel();
    let (closed, _closing) = tokio::sync::mpsc::unbounded_channel();
    let backend = held_backend(heads, closed, Arc::new(tokio::sync::Notify::new())).await;
    let mut plan = plan(&[backend]);
    // The answers are held: only the resets below end the streams.
    plan.pools[0].response_timeout = Duration::from_secs(60);
    let running = trafik_proxy::start(plan).unwrap();
    let mut stream = connect(web(&running)).await;
    let mut after_end = frame(HEADERS, END_HEADERS | END_STREAM, 1, &get_block());
    after_end.extend(frame(DATA, 0, 1, b"late"));
    stream.write_all(&after_end).await.unwrap();
    let (_, _, _, payload) = until(&mut stream, "a reset of stream 1", |(kind, _, on, _)| {
        *kind == RST_STREAM && *on == 1
    })
    .await;
    assert_eq!(code(&payload, 0), STREAM_CLOSED);
    let post = [get_block(), field("content-length", "10")].concat();
    // `:method: POST` is the static table's entry 3.
    let post = [vec![0x83], post[1..].to_vec()].concat();
    let mut short = frame(HEADERS, END_HEADERS, 3, &post);
    short.extend(frame(DATA, END_STREAM, 3, b"kargo"));
    stream.write_all(&short).await.unwrap();
    let (kind, _, _, payload) = until(&mut stream, "stream 3's fate", |(kind, _, on, _)| {
        (*kind == RST_STREAM || *kind == HEADERS) && *on == 3
    })
    .await;
    assert_eq!((kind, code(&payload, 0)), (RST_STREAM, PROTOCOL_ERROR));
    running.stop();
}
