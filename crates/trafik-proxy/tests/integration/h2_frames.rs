//! trafik's HTTP/2 client against a backend that writes its frames by hand (RFC 9113, RFC 7541):
//! what a well-behaved server may send (an interim answer, padding, priority) is read past, and
//! what no server may (malformed answers, undecodable header blocks, endless CONTINUATION
//! frames) never reaches a client as an answer: the stream or the connection is ended with the
//! error code the RFC names, and the client gets a 502. A request the backend never processed
//! (past its GOAWAY's last stream, or on a stream it refused) is sent again instead.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trafik_proxy::plan::UpstreamProtocol;
use trafik_test_support::proxy::*;

use crate::h2_wire::*;

/// What a backend writes when a request comes on a stream: bytes of frames.
type Answer = fn(u32) -> Vec<u8>;

/// An h2c backend writing frames by hand: an empty SETTINGS, then for every request's HEADERS
/// the bytes `answer` makes for its stream. What trafik sent it is kept in the list returned.
async fn frame_backend(answer: Answer) -> (SocketAddr, Arc<Mutex<Vec<Frame>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let address = raw_backend(move |mut stream| {
        let seen = kept.clone();
        async move {
            if !greet(&mut stream).await {
                return;
            }
            while let Some(sent) = next_frame(&mut stream).await {
                let (kind, id) = (sent.0, sent.2);
                seen.lock().unwrap().push(sent);
                if kind == HEADERS && stream.write_all(&answer(id)).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    (address, seen)
}

/// Reads trafik's preface and says an empty SETTINGS; false when trafik left first.
async fn greet(stream: &mut TcpStream) -> bool {
    let mut preface = [0; 24];
    stream.read_exact(&mut preface).await.is_ok()
        && stream.write_all(&frame(SETTINGS, 0, 0, &[])).await.is_ok()
}

/// The next frame trafik sends, or `None` once it has gone.
async fn next_frame(stream: &mut TcpStream) -> Option<Frame> {
    let mut header = [0; 9];
    stream.read_exact(&mut header).await.ok()?;
    let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    let id = u32::from_be_bytes([header[5], header[6], header[7], header[8]]);
    let mut payload = vec![0; length];
    stream.read_exact(&mut payload).await.ok()?;
    Some((header[3], header[4], id, payload))
}

/// trafik in front of `backend`, its pool speaking h2c without retries.
fn h2c_pool(backend: SocketAddr) -> trafik_proxy::Running {
    let mut plan = plan(&[backend]);
    plan.pools[0].protocol = UpstreamProtocol::H2c;
    plan.pools[0].retries = 0;
    trafik_proxy::start(plan).unwrap()
}

async fn get_once(running: &trafik_proxy::Running) -> String {
    raw_exchange(
        web(running),
        b"GET /takip/TR-1 HTTP/1.1\r\nHost: kargo.test\r\nConnection: close\r\n\r\n",
    )
    .await
}

/// Asks trafik in front of a backend answering `answer` for a page: the client must get a 502,
/// and the backend a frame `matching` from trafik.
async fn refused(case: &str, answer: Answer, matching: impl Fn(&Frame) -> bool) {
    let (backend, seen) = frame_backend(answer).await;
    let running = h2c_pool(backend);
    let answer = get_once(&running).await;
    assert!(answer.starts_with("HTTP/1.1 502"), "{case}: {answer}");
    // The frame left trafik before its 502 did; the backend's task may lag on a loaded
    // machine, so the wait is bounded by turns far past any need, not by a tight time.
    let mut told = false;
    for _ in 0..3000 {
        told = seen.lock().unwrap().iter().any(&matching);
        if told {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(told, "{case}: the backend was not told");
    running.stop();
}

fn error_code(payload: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(payload[at..at + 4].try_into().unwrap())
}

/// A 103 before the answer, a HEADERS frame with padding and a priority, DATA with padding
/// (RFC 9113 §6.1, §6.2, §8.1): the client gets the answer and exactly its body.
#[tokio::test]
async fn interim_answers_padding_and_priority_are_read_past() {
    let (backend, _) = frame_backend(|stream| {
        let early = [vec![0x08, 3], b"103".to_vec()].concat(); // `:status` literal, "103"
        let mut head = vec![3]; // pad length
        head.extend([0, 0, 0, 0, 16]); // depends on nothing, weight 16
        head.push(STATUS_200);
        head.extend(field("content-length", "5"));
        head.extend([0; 3]);
        let mut body = vec![4];
        body.extend(b"kargo");
        body.extend([0; 4]);
        [
            frame(HEADERS, END_HEADERS, stream, &early),
            frame(HEADERS, END_HEADERS | PADDED | PRIORITY, stream, &head),
            frame(DATA, END_STREAM | PADDED, stream, &body),
        ]
        .concat()
    })
    .await;
    let running = h2c_pool(backend);
    let answer = get_once(&running).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nkargo"), "{answer}");
    running.stop();
}

/// Answers HTTP/2 calls malformed (RFC 9113 §8.1.1, §8.2): each is reset with PROTOCOL_ERROR and
/// its client gets a 502, never the answer.
#[tokio::test]
async fn malformed_answers_are_reset_and_never_relayed() {
    let cases: [(&str, Answer); 7] = [
        ("two lengths", |stream| {
            let block = [
                vec![STATUS_200],
                field("content-length", "5"),
                field("content-length", "6"),
            ]
            .concat();
            [
                frame(HEADERS, END_HEADERS, stream, &block),
                frame(DATA, END_STREAM, stream, b"kargo"),
            ]
            .concat()
        }),
        ("a length and no DATA", |stream| {
            let block = [vec![STATUS_200], field("content-length", "5")].concat();
            frame(HEADERS, END_HEADERS | END_STREAM, stream, &block)
        }),
        ("a value opening with a space", |stream| {
            let block = [vec![STATUS_200], field("x-kargo", " 1")].concat();
            frame(HEADERS, END_HEADERS | END_STREAM, stream, &block)
        }),
        ("a name in upper case", |stream| {
            let block = [vec![STATUS_200], field("X-Kargo", "1")].concat();
            frame(HEADERS, END_HEADERS | END_STREAM, stream, &block)
        }),
        ("a connection-specific field", |stream| {
            let block = [vec![STATUS_200], field("connection", "close")].concat();
            frame(HEADERS, END_HEADERS | END_STREAM, stream, &block)
        }),
        ("no status", |stream| {
            frame(
                HEADERS,
                END_HEADERS | END_STREAM,
                stream,
                &field("x-kargo", "1"),
            )
        }),
        ("DATA before the head", |stream| {
            [
                frame(DATA, 0, stream, b"kargo"),
                frame(HEADERS, END_HEADERS | END_STREAM, stream, &[STATUS_200]),
            ]
            .concat()
        }),
    ];
    for (case, answer) in cases {
        refused(case, answer, |(kind, _, stream, payload)| {
            *kind == RST_STREAM && *stream == 1 && error_code(payload, 0) == PROTOCOL_ERROR
        })
        .await;
    }
}

/// A server may stop a request it has answered in full with RST_STREAM(NO_ERROR) (RFC 9113 §8.1):
/// the answer, whole with its END_STREAM, reaches the client whole, trailers and all.
#[tokio::test]
async fn a_reset_after_a_whole_answer_leaves_it_whole() {
    let (backend, _) = frame_backend(|stream| {
        [
            frame(HEADERS, END_HEADERS, stream, &[STATUS_200]),
            frame(DATA, 0, stream, b"kargo"),
            frame(
                HEADERS,
                END_HEADERS | END_STREAM,
                stream,
                &field("x-son", "1"),
            ),
            frame(RST_STREAM, 0, stream, &0u32.to_be_bytes()),
        ]
        .concat()
    })
    .await;
    let running = h2c_pool(backend);
    let answer = get_once(&running).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("\r\n\r\n5\r\nkargo\r\n0\r\n"),
        "not whole: {answer}"
    );
    running.stop();
}

/// A server may never ask for pushes (RFC 9113 §6.5.2): SETTINGS_ENABLE_PUSH = 1 ends the
/// connection with PROTOCOL_ERROR.
#[tokio::test]
async fn a_server_enabling_push_ends_the_connection() {
    let answer: Answer = |_| frame(SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 1]);
    refused("GOAWAY(PROTOCOL_ERROR)", answer, |(kind, _, _, payload)| {
        *kind == GOAWAY && error_code(payload, 4) == PROTOCOL_ERROR
    })
    .await;
}

/// A header block that names no table entry cannot be decoded, and the decoder's state, which
/// is the connection's, is lost with it (RFC 9113 §4.3): GOAWAY(COMPRESSION_ERROR).
#[tokio::test]
async fn an_undecodable_header_block_ends_the_connection() {
    // Index 62 of an empty dynamic table.
    let answer: Answer = |stream| frame(HEADERS, END_HEADERS | END_STREAM, stream, &[0xbe]);
    refused(
        "GOAWAY(COMPRESSION_ERROR)",
        answer,
        |(kind, _, _, payload)| *kind == GOAWAY && error_code(payload, 4) == COMPRESSION_ERROR,
    )
    .await;
}

/// A header block that goes on in CONTINUATION frames without end (the "CONTINUATION flood")
/// ends the connection: one past any head trafik would take, before it is all held, and one in
/// more frames than a head of the largest size needs in 1 KiB pieces (8 + 32 for the default
/// 32 KiB), for empty frames hold no memory but each costs a turn. Each sends exactly one frame
/// too many: trafik reads all it was sent before it closes, so its close is a FIN after the
/// GOAWAY, never a reset that could overtake it.
#[tokio::test]
async fn continuation_floods_end_the_connection() {
    let cases: [(&str, Answer); 2] = [
        (
            "four frames of 15,400 bytes: past 32 KiB and a frame",
            |stream| {
                let filler = field("x-kargo", &"k".repeat(100)).repeat(140);
                let mut frames = frame(HEADERS, 0, stream, &[STATUS_200]);
                for _ in 0..4 {
                    frames.extend(frame(CONTINUATION, 0, stream, &filler));
                }
                frames
            },
        ),
        ("41 empty frames", |stream| {
            let mut frames = frame(HEADERS, 0, stream, &[STATUS_200]);
            for _ in 0..41 {
                frames.extend(frame(CONTINUATION, 0, stream, &[]));
            }
            frames
        }),
    ];
    for (case, answer) in cases {
        refused(case, answer, |(kind, _, _, payload)| {
            *kind == GOAWAY && error_code(payload, 4) == ENHANCE_YOUR_CALM
        })
        .await;
    }
}

/// A backend that says GOAWAY with streams under way, as nginx does past `keepalive_requests`:
/// on its first connection it waits for two requests, answers the first and names it as the
/// last stream it processes; every later connection answers each request at once. The list
/// returned counts the requests each connection was sent.
async fn goaway_after_one() -> (SocketAddr, Arc<Mutex<Vec<usize>>>) {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let counted = sent.clone();
    let address = raw_backend(move |mut stream| {
        let sent = counted.clone();
        async move {
            let connection = {
                let mut sent = sent.lock().unwrap();
                sent.push(0);
                sent.len() - 1
            };
            if !greet(&mut stream).await {
                return;
            }
            let mut waiting = Vec::new();
            while let Some((kind, _, id, _)) = next_frame(&mut stream).await {
                if kind != HEADERS {
                    continue;
                }
                sent.lock().unwrap()[connection] += 1;
                let answer = frame(HEADERS, END_HEADERS | END_STREAM, id, &[STATUS_200]);
                if connection > 0 {
                    let _ = stream.write_all(&answer).await;
                    continue;
                }
                waiting.push(id);
                if let [answered, _] = waiting[..] {
                    let mut goaway = answered.to_be_bytes().to_vec();
                    goaway.extend(0u32.to_be_bytes());
                    let answer = frame(HEADERS, END_HEADERS | END_STREAM, answered, &[STATUS_200]);
                    let _ = stream
                        .write_all(&[answer, frame(GOAWAY, 0, 0, &goaway)].concat())
                        .await;
                }
            }
        }
    })
    .await;
    (address, sent)
}

/// A request on a stream past the one a backend's GOAWAY names as its last was never processed
/// (RFC 9113 §6.8): it goes again on a new connection, even from a pool without retries, and
/// its client gets the answer instead of a 502; the one the backend processed is not sent
/// again.
#[tokio::test]
async fn a_request_a_goaway_left_unprocessed_goes_again_on_a_new_connection() {
    let (backend, sent) = goaway_after_one().await;
    let running = h2c_pool(backend);
    // One client connection: both requests reach the same worker and its one connection to
    // the backend.
    let client = trafik_test_support::proxy::tls::h2c(web(&running)).await;
    let get = |path: &str| {
        let mut client = client.clone();
        let request = http::Request::get(format!("http://kargo.test{path}"))
            .body(http_body_util::Full::default())
            .unwrap();
        async move {
            client
                .send_request(request)
                .await
                .map(|answer| answer.status())
        }
    };
    let (first, second) = tokio::join!(get("/takip/TR-1"), get("/takip/TR-2"));
    assert_eq!(first.expect("an answer").as_u16(), 200);
    assert_eq!(second.expect("an answer").as_u16(), 200);
    assert_eq!(
        *sent.lock().unwrap(),
        [2, 1],
        "both on the first connection, the unprocessed one alone again on a second"
    );
    running.stop();
}

/// A stream the backend refuses (REFUSED_STREAM) was not processed either (RFC 9113 §8.7): the
/// request goes again, and its client gets the answer.
#[tokio::test]
async fn a_request_on_a_refused_stream_goes_again() {
    let (backend, seen) = frame_backend(|stream| match stream {
        1 => frame(RST_STREAM, 0, stream, &REFUSED_STREAM.to_be_bytes()),
        _ => frame(HEADERS, END_HEADERS | END_STREAM, stream, &[STATUS_200]),
    })
    .await;
    let running = h2c_pool(backend);
    let answer = get_once(&running).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let requests = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(kind, ..)| *kind == HEADERS)
        .count();
    assert_eq!(requests, 2, "asked once, then again");
    running.stop();
}
