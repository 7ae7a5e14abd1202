//! Request bodies and response framings on both HTTP/1 engines, over real sockets: a body in
//! pieces, a chunked upload, a client that waits for `100 Continue`, a backend that answers
//! before the upload ends, a close-delimited answer to a client that stays, the `Date` field.
//! Every case runs on `engine = "trafik"` and on `engine = "hyper"` and must come out the same.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trafik_proxy::Engine;
use trafik_test_support::proxy::*;

const ENGINES: [Engine; 2] = [Engine::Trafik, Engine::Hyper];

/// Reads from `stream` until `answers` complete answers (by their framing) are in, or the
/// stream ends, or 10 s pass.
async fn answers(stream: &mut TcpStream, answers: usize) -> String {
    let mut read = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while complete(&read) < answers {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Ok(Ok(n)) if n > 0 => read.extend_from_slice(&buffer[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&read).into_owned()
}

/// How many whole final answers `bytes` holds.
fn complete(mut bytes: &[u8]) -> usize {
    let mut count = 0;
    loop {
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut fields);
        let Ok(httparse::Status::Complete(length)) = response.parse(bytes) else {
            return count;
        };
        let informational = response.code.is_some_and(|c| c < 200);
        let header = |name: &str| {
            response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| String::from_utf8_lossy(h.value).into_owned())
        };
        let rest = &bytes[length..];
        let body = if informational {
            0
        } else if header("transfer-encoding").is_some() {
            match rest.windows(5).position(|w| w == b"0\r\n\r\n") {
                Some(end) => end + 5,
                None => return count,
            }
        } else {
            let n: usize = header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if rest.len() < n {
                return count;
            }
            n
        };
        if !informational {
            count += 1;
        }
        bytes = &rest[body..];
    }
}

/// The bodies of the final answers in `text`, unchunked.
fn bodies(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for answer in text.split("HTTP/1.1 ").skip(1) {
        if answer.starts_with("100") {
            continue;
        }
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            let mut data = String::new();
            let mut rest = body;
            while let Some((size, after)) = rest.split_once("\r\n") {
                let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
                if size == 0 {
                    break;
                }
                data.push_str(&after[..size]);
                rest = &after[size + 2..];
            }
            found.push(data);
        } else {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            found.push(body.get(..length).unwrap_or(body).to_owned());
        }
    }
    found
}

/// A backend that keeps every byte it received and answers each request (read by its framing,
/// chunked bodies too) with `answer`, then closes when `close` (the answer is close-delimited).
async fn recording(answer: &'static str, close: bool) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let recording = received.clone();
    let address = raw_backend(move |mut stream| {
        let recording = recording.clone();
        async move {
            let mut pending = Vec::new();
            let mut buffer = [0u8; 16 * 1024];
            loop {
                while let Some(length) = request_length(&pending) {
                    pending.drain(..length);
                    if stream.write_all(answer.as_bytes()).await.is_err() || close {
                        return;
                    }
                }
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        recording.lock().unwrap().extend_from_slice(&buffer[..n]);
                        pending.extend_from_slice(&buffer[..n]);
                    }
                }
            }
        }
    })
    .await;
    (address, received)
}

/// The length of the whole request at the start of `bytes`, once it is all there.
fn request_length(bytes: &[u8]) -> Option<usize> {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut fields);
    let httparse::Status::Complete(head) = request.parse(bytes).ok()? else {
        return None;
    };
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    let rest = &bytes[head..];
    if header("transfer-encoding").is_some() {
        let end = rest.windows(5).position(|w| w == b"0\r\n\r\n")?;
        return Some(head + end + 5);
    }
    let length: usize = header("content-length").map_or(0, |v| v.parse().unwrap_or(0));
    (rest.len() >= length).then_some(head + length)
}

fn text(bytes: &Mutex<Vec<u8>>) -> String {
    String::from_utf8_lossy(&bytes.lock().unwrap()).into_owned()
}

/// A proxy on `engine` in front of `backend`, and a client connection to it.
async fn proxy(engine: Engine, backend: SocketAddr) -> (trafik_proxy::Running, TcpStream) {
    let running = trafik_proxy::start(plan_on(engine, &[backend])).unwrap();
    let stream = TcpStream::connect(web(&running)).await.unwrap();
    (running, stream)
}

/// Stops `running`; on the own engine, first checks that it served every connection itself,
/// none handed to hyper's server.
async fn finish(engine: Engine, running: trafik_proxy::Running) {
    if engine == Engine::Trafik {
        assert_eq!(
            handed_to_hyper(&running).await,
            0,
            "the own engine served it"
        );
    }
    stop(running).await;
}

/// Writes `pieces` 200 ms apart: a request whose parts arrive one by one.
async fn pieces(stream: &mut TcpStream, pieces: &[&[u8]]) {
    for (n, piece) in pieces.iter().enumerate() {
        if n > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        stream.write_all(piece).await.unwrap();
    }
}

/// The failures counted against the only backend.
async fn failures(running: &trafik_proxy::Running) -> serde_json::Value {
    status(running).await["pools"][0]["backends"][0]["failures"].clone()
}

/// A body in pieces, sent well after its head, a large one, and a request pipelined after
/// each: every byte reaches the backend, the answers come in order on one connection.
#[tokio::test]
async fn a_body_in_pieces_streams_whole_and_the_next_request_follows() {
    for engine in ENGINES {
        let backend = body_reading_server().await;
        let (running, mut stream) = proxy(engine, backend).await;
        // The body's end and the next request in one write.
        let parts: [&[u8]; 3] = [
            b"POST /parca HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc",
            b"defg",
            b"hijGET /sonra HTTP/1.1\r\nHost: a\r\n\r\n",
        ];
        pieces(&mut stream, &parts).await;
        let got = answers(&mut stream, 2).await;
        assert_eq!(bodies(&got), ["/parca 10", "/sonra 0"], "{engine:?}: {got}");
        // A megabyte, written in 64 KiB pieces: relayed through bounded buffers.
        let megabyte = 1024 * 1024;
        pieces(
            &mut stream,
            &[
                format!("PUT /buyuk HTTP/1.1\r\nHost: a\r\nContent-Length: {megabyte}\r\n\r\n")
                    .as_bytes(),
            ],
        )
        .await;
        for _ in 0..16 {
            stream.write_all(&[b'x'; 64 * 1024]).await.unwrap();
        }
        let got = answers(&mut stream, 1).await;
        assert_eq!(bodies(&got), [format!("/buyuk {megabyte}")], "{engine:?}");
        assert!(got.contains("date: "), "{engine:?}: {got}");
        finish(engine, running).await;
    }
}

/// A chunked upload in pieces, with an extension and a trailer: it reaches the backend chunked,
/// its data whole, without either; the request pipelined after it is answered next.
#[tokio::test]
async fn a_chunked_upload_is_framed_anew_and_the_next_request_follows() {
    for engine in ENGINES {
        let (backend, received) =
            recording("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", false).await;
        let (running, mut stream) = proxy(engine, backend).await;
        pieces(
            &mut stream,
            &[
                b"POST /olay HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n4;x=1\r\nwi",
                b"ki\r\n5\r\npedia\r\n0\r\nX-Son: 1\r\n\r\nGET /sonra HTTP/1.1\r\nHost: a\r\n\r\n",
            ],
        )
        .await;
        let got = answers(&mut stream, 2).await;
        assert_eq!(bodies(&got), ["ok", "ok"], "{engine:?}: {got}");
        let sent = text(&received);
        let (head, rest) = sent.split_once("\r\n\r\n").unwrap();
        assert!(
            head.to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "{engine:?}: {sent}"
        );
        let (body, next) = rest.split_once("0\r\n\r\n").unwrap();
        let data: String = body
            .split("\r\n")
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, d)| d)
            .collect();
        assert_eq!(data, "wikipedia", "{engine:?}: {sent}");
        assert!(
            !sent.contains("x=1") && !sent.contains("X-Son"),
            "{engine:?}: {sent}"
        );
        assert!(next.starts_with("GET /sonra"), "{engine:?}: {sent}");
        finish(engine, running).await;
    }
}

/// A chunked upload may end with as many trailer lines as a head may have fields (hyper's
/// server takes as many), and no more: one past them is a 400 on both engines.
#[tokio::test]
async fn a_chunked_upload_ends_with_as_many_trailer_lines_as_a_head_has_fields() {
    let fields = plan_on(Engine::Trafik, &[]).client.limits.headers;
    for engine in ENGINES {
        for (lines, status) in [(fields, "200"), (fields + 1, "400")] {
            let (backend, _) =
                recording("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", false).await;
            let (running, mut stream) = proxy(engine, backend).await;
            let request = format!(
                "POST /olay HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n{}\r\n",
                "t: 1\r\n".repeat(lines)
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            let (got, _) = until_closed(&mut stream).await;
            let expected = format!("HTTP/1.1 {status}");
            assert!(
                got.starts_with(&expected),
                "{engine:?}, {lines} lines: {got}"
            );
            finish(engine, running).await;
        }
    }
}

/// A chunk that breaks the framing after the upload began: the client gets 400 (dated), the
/// connection closes, the backend is not blamed, and nothing after the broken chunk reaches it.
#[tokio::test]
async fn a_chunk_broken_mid_upload_is_a_400_not_charged_to_the_backend() {
    for engine in ENGINES {
        let (backend, received) =
            recording("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", false).await;
        let (running, mut stream) = proxy(engine, backend).await;
        pieces(
            &mut stream,
            &[
                b"POST /olay HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
                b"zz\r\nGET /kacak HTTP/1.1\r\nHost: a\r\n\r\n",
            ],
        )
        .await;
        let mut got = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut got)).await;
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with("HTTP/1.1 400"), "{engine:?}: {got}");
        assert_eq!(got.matches("HTTP/1.1").count(), 1, "{engine:?}: {got}");
        assert!(
            got.contains("date: "),
            "trafik's own answers are dated too: {got}"
        );
        assert!(!text(&received).contains("kacak"), "{engine:?}");
        assert_eq!(failures(&running).await, 0, "{engine:?}");
        finish(engine, running).await;
    }
}

/// A chunked body already broken in its first read is refused before any backend is asked,
/// and that 400 is counted at the listener like every other answer.
#[tokio::test]
async fn a_chunk_broken_in_the_first_read_is_a_counted_400() {
    for engine in ENGINES {
        let (backend, received) =
            recording("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", false).await;
        let (running, mut stream) = proxy(engine, backend).await;
        stream
            .write_all(
                b"POST /olay HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            )
            .await
            .unwrap();
        let mut got = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut got)).await;
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with("HTTP/1.1 400"), "{engine:?}: {got}");
        assert!(text(&received).is_empty(), "{engine:?}");
        let status = status(&running).await;
        let web = &status["listeners"][0];
        assert_eq!(web["responses"]["4xx"], 1, "{engine:?}: {web}");
        finish(engine, running).await;
    }
}

/// A client that waits for `100 Continue` gets it from trafik once the request is on its way,
/// and `Expect` reaches the backend; a bodiless request with `Expect` gets no `100`.
#[tokio::test]
async fn a_client_waiting_for_100_continue_gets_it() {
    for engine in ENGINES {
        // A backend that reads the body before it answers, as one that uses it does (hyper's
        // server then sends its own `100 Continue` first). One that answers first makes this
        // an early answer, whose connection hyper's server keeps or closes depending on
        // whether the rest of the body had come (`an_answer_before_the_upload_ends_is_relayed`).
        let backend = hyper_backend(|request: http::Request<hyper::body::Incoming>| async move {
            use http_body_util::BodyExt;
            let echoed = echo_json(&request);
            request.into_body().collect().await?;
            Ok::<_, hyper::Error>(http::Response::new(http_body_util::Full::new(
                bytes::Bytes::from(echoed.to_string()),
            )))
        })
        .await;
        let (running, mut stream) = proxy(engine, backend).await;
        pieces(&mut stream, &[b"POST /olay HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"]).await;
        // Exactly the interim answer's bytes: the backend may answer before reading the body,
        // and its answer may already follow in the socket.
        let mut first = [0u8; b"HTTP/1.1 100 Continue\r\n\r\n".len()];
        tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut first))
            .await
            .expect("100 Continue before the body")
            .unwrap();
        assert_eq!(&first, b"HTTP/1.1 100 Continue\r\n\r\n", "{engine:?}");
        // The body after the backend's own `100 Continue` has reached trafik: that interim
        // head must not stop the body on its way (the own engine took it for the answer, sent
        // no body, and the backend waited for one until the response timeout: a 504).
        tokio::time::sleep(Duration::from_millis(300)).await;
        pieces(&mut stream, &[b"hello"]).await;
        let got = answers(&mut stream, 1).await;
        let echoed: serde_json::Value = serde_json::from_str(&bodies(&got)[0])
            .unwrap_or_else(|error| panic!("{engine:?}: {error}: {got:?}"));
        assert_eq!(echoed["headers"]["expect"], "100-continue", "{engine:?}");
        assert_eq!(echoed["headers"]["content-length"], "5", "{engine:?}");
        // No body, no 100.
        pieces(&mut stream, &[b"POST /bos HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n"]).await;
        let got = answers(&mut stream, 1).await;
        assert!(got.starts_with("HTTP/1.1 200"), "{engine:?}: {got}");
        finish(engine, running).await;
    }
}

/// A backend that answers before the upload ends (a 413 after the head): the client gets that
/// answer at once, the rest of the body is still read (as hyper does), the connection carries
/// the next request, and the backend is not blamed.
#[tokio::test]
async fn an_answer_before_the_upload_ends_is_relayed() {
    for engine in ENGINES {
        let listener = tokio::net::TcpListener::bind(LOOPBACK_ANY_PORT)
            .await
            .unwrap();
        let backend = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buffer = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buffer[..n]),
                        }
                    }
                    let answer = b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 3\r\nconnection: close\r\n\r\nbig";
                    let _ = stream.write_all(answer).await;
                    // Read on, as a backend that drains before it closes.
                    while let Ok(n) = stream.read(&mut buffer).await {
                        if n == 0 {
                            return;
                        }
                    }
                });
            }
        });
        let (running, mut stream) = proxy(engine, backend).await;
        let head = b"POST /buyuk HTTP/1.1\r\nHost: a\r\nContent-Length: 200005\r\n\r\nstart";
        pieces(&mut stream, &[head]).await;
        let got = answers(&mut stream, 1).await;
        assert!(got.starts_with("HTTP/1.1 413"), "{engine:?}: {got}");
        assert_eq!(bodies(&got), ["big"], "{engine:?}");
        stream.write_all(&[b'x'; 200_000]).await.unwrap();
        pieces(&mut stream, &[b"GET /sonra HTTP/1.1\r\nHost: a\r\n\r\n"]).await;
        let got = answers(&mut stream, 1).await;
        assert!(got.starts_with("HTTP/1.1 413"), "{engine:?}: {got}");
        assert_eq!(failures(&running).await, 0, "{engine:?}");
        finish(engine, running).await;
    }
}

/// A close-delimited answer reaches a client that stays as chunks, and the connection carries
/// the next request; `Date` is added when the backend sent none and kept when it sent one.
#[tokio::test]
async fn a_close_delimited_answer_is_chunked_to_a_client_that_stays() {
    for engine in ENGINES {
        let (backend, _) =
            recording("HTTP/1.1 200 OK\r\nx-a: 1\r\n\r\nuntil the close", true).await;
        let (running, mut stream) = proxy(engine, backend).await;
        for path in ["/bir", "/iki"] {
            pieces(
                &mut stream,
                &[format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes()],
            )
            .await;
            let got = answers(&mut stream, 1).await;
            let head = got.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
            assert!(
                head.contains("transfer-encoding: chunked"),
                "{engine:?}: {got}"
            );
            assert!(!head.contains("connection: close"), "{engine:?}: {got}");
            assert_eq!(head.matches("date: ").count(), 1, "{engine:?}: {got}");
            assert_eq!(bodies(&got), ["until the close"], "{engine:?}: {got}");
        }
        finish(engine, running).await;
        let (dated, _) = recording(
            "HTTP/1.1 200 OK\r\ndate: Sun, 06 Nov 1994 08:49:37 GMT\r\ncontent-length: 2\r\n\r\nok",
            false,
        )
        .await;
        let (running, mut stream) = proxy(engine, dated).await;
        pieces(&mut stream, &[b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"]).await;
        let got = answers(&mut stream, 1).await.to_ascii_lowercase();
        assert_eq!(got.matches("date: ").count(), 1, "{engine:?}: {got}");
        assert!(
            got.contains("date: sun, 06 nov 1994 08:49:37 gmt"),
            "{engine:?}: {got}"
        );
        finish(engine, running).await;
    }
}

/// Reads from `stream` until the proxy closes it (or 5 s pass): what came, and whether it closed.
async fn until_closed(stream: &mut TcpStream) -> (String, bool) {
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut got)).await;
    (String::from_utf8_lossy(&got).into_owned(), read.is_ok())
}

/// The end of `text`, for messages about long answers.
fn tail(text: &str) -> &str {
    let start = text.len().saturating_sub(120);
    text.get(start..).unwrap_or(text)
}

/// A GET through `engine` to a backend that answers `answer`: what the client got, and whether
/// the connection then closed.
async fn get_through_a_backend_answering(engine: Engine, answer: String) -> (String, bool) {
    let (backend, _) = recording(answer.leak(), true).await;
    let (running, mut stream) = proxy(engine, backend).await;
    stream
        .write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let got = until_closed(&mut stream).await;
    finish(engine, running).await;
    got
}

/// A chunked answer whose framing breaks after its first data (a size line with a word after
/// it, an extension or a trailer section past hyper's 16 KiB, more trailer lines than hyper's
/// 100, a trailer line that is no field) is broken on both engines, as hyper's client finds
/// it: the data before the break reaches the client, the body never ends, the connection
/// closes.
#[tokio::test]
async fn a_chunked_answer_that_breaks_its_framing_is_cut_after_the_data_before_the_break() {
    let long = "x".repeat(16 * 1024);
    let breaks = [
        "4 x\r\nwiki\r\n0\r\n\r\n".to_owned(),
        format!("4;{long}\r\nwiki\r\n0\r\n\r\n"),
        format!("0\r\nx-long: {long}\r\n\r\n"),
        format!("0\r\n{}\r\n", "t: 1\r\n".repeat(101)),
        "0\r\nno colon\r\n\r\n".to_owned(),
    ];
    for engine in ENGINES {
        for broken in &breaks {
            let answer = format!(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n{broken}"
            );
            let (got, closed) = get_through_a_backend_answering(engine, answer).await;
            let case = format!("{engine:?}, {:?}", &broken[..broken.len().min(24)]);
            assert!(
                closed,
                "{case}: the connection stayed open after {}",
                tail(&got)
            );
            assert!(got.starts_with("HTTP/1.1 200"), "{case}: {}", tail(&got));
            assert_eq!(bodies(&got), ["abc"], "{case}");
            assert!(
                !got.ends_with("\r\n\r\n"),
                "{case}: the body ended: {}",
                tail(&got)
            );
        }
        // Broken before any data, in the read that brought the head: nothing reaches the
        // client, as with hyper, whose server has not flushed the head when the body fails at
        // once.
        for broken in ["4 x\r\nwiki\r\n0\r\n\r\n", "0\r\nno colon\r\n\r\n"] {
            let answer = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{broken}");
            let (got, closed) = get_through_a_backend_answering(engine, answer).await;
            assert!(
                closed,
                "{engine:?}, {broken:?}: the connection stayed open after {got}"
            );
            assert_eq!(got, "", "{engine:?}, {broken:?}");
        }
    }
}

/// The control for [`finish`]: a request the own engine leaves to hyper (HTTP/1.0) is counted
/// as a connection handed over, and still answered.
#[tokio::test]
async fn a_connection_the_fast_path_leaves_to_hyper_is_counted() {
    let (backend, _) = recording("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", false).await;
    let (running, mut stream) = proxy(Engine::Trafik, backend).await;
    stream
        .write_all(b"GET /a HTTP/1.0\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let got = answers(&mut stream, 1).await;
    assert!(got.starts_with("HTTP/1.0 200 "), "{got}");
    assert_eq!(handed_to_hyper(&running).await, 1);
    stop(running).await;
}

/// A chunked answer reaches the client framed anew on both engines: its data whole, without
/// chunk extensions, and without its trailer fields (a `Set-Cookie` there must not reach a
/// client), even for a client that says it takes trailers (`TE: trailers`); the connection
/// carries the next request.
#[tokio::test]
async fn a_chunked_answer_reaches_the_client_without_extensions_or_trailer_fields() {
    let answer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: x-son\r\n\r\n\
                  4;ad=deger\r\nwiki\r\n005 \r\npedia\r\n0;son\r\nx-son: 1\r\nSet-Cookie: oturum=ele\r\n\r\n";
    for engine in ENGINES {
        for te in ["", "TE: trailers\r\n"] {
            let backend = answering(answer).await;
            let (running, mut stream) = proxy(engine, backend).await;
            let requests = format!(
                "GET /a HTTP/1.1\r\nHost: a\r\n{te}\r\nGET /b HTTP/1.1\r\nHost: a\r\n{te}Connection: close\r\n\r\n"
            );
            stream.write_all(requests.as_bytes()).await.unwrap();
            let (got, closed) = until_closed(&mut stream).await;
            let case = format!("{engine:?}, {te:?}");
            assert!(closed, "{case}: {got}");
            assert_eq!(bodies(&got), ["wikipedia", "wikipedia"], "{case}: {got}");
            let lower = got.to_ascii_lowercase();
            for gone in ["ad=deger", ";son", "x-son", "set-cookie", "oturum"] {
                assert!(
                    !lower.contains(gone),
                    "{case}: {gone} reached the client: {got}"
                );
            }
            assert!(got.ends_with("\r\n0\r\n\r\n"), "{case}: {got}");
            finish(engine, running).await;
        }
    }
}

/// A 204 or a 304 reaches the client without `Content-Length`, `Transfer-Encoding` or a body on
/// both engines, whatever framing fields the backend gave it (hyper's server drops them), and
/// the connection carries the next request.
#[tokio::test]
async fn a_204_or_304_reaches_the_client_without_framing_fields_or_body() {
    let answers = [
        "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nx-a: 1\r\n\r\n",
        "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\nx-a: 1\r\n\r\n",
        "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\nx-a: 1\r\n\r\n",
    ];
    for engine in ENGINES {
        for answer in answers {
            let backend = answering(answer).await;
            let (running, mut stream) = proxy(engine, backend).await;
            let requests = "GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
            stream.write_all(requests.as_bytes()).await.unwrap();
            let (got, closed) = until_closed(&mut stream).await;
            let case = format!("{engine:?}, {answer:?}");
            assert!(closed, "{case}: {got}");
            assert_eq!(got.matches("HTTP/1.1 ").count(), 2, "{case}: {got}");
            assert_eq!(got.matches("x-a: 1\r\n").count(), 2, "{case}: {got}");
            let lower = got.to_ascii_lowercase();
            assert!(!lower.contains("content-length"), "{case}: {got}");
            assert!(!lower.contains("transfer-encoding"), "{case}: {got}");
            // Each head ends where the next begins, and the last one ends the stream.
            assert!(got.ends_with("\r\n\r\n"), "{case}: {got}");
            assert_eq!(got.split("\r\n\r\n").count(), 3, "{case}: {got}");
            finish(engine, running).await;
        }
    }
}

/// Probe finding (issue 23): a GET or HEAD with a chunked body reached the backend without it
/// (hyper's client sends a GET or HEAD of unknown length bodiless), while the client's bytes
/// were read and dropped. It is forwarded, chunked, as nginx and HAProxy do.
#[tokio::test]
async fn a_get_or_head_with_a_chunked_body_reaches_the_backend_with_it() {
    for engine in ENGINES {
        let (backend, received) = recording("HTTP/1.1 204 No Content\r\n\r\n", false).await;
        let (running, mut stream) = proxy(engine, backend).await;
        stream
            .write_all(
                b"GET /govde HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n\
                  HEAD /bas HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            )
            .await
            .unwrap();
        let got = answers(&mut stream, 2).await;
        assert_eq!(got.matches("HTTP/1.1 204").count(), 2, "{engine:?}: {got}");
        let sent = text(&received);
        let get = sent.find("GET /govde").expect(&sent);
        let head = sent.find("HEAD /bas").expect(&sent);
        let (get_request, head_request) = (&sent[get..head], &sent[head..]);
        for (request, data) in [(get_request, "hello"), (head_request, "abc")] {
            let (fields, body) = request.split_once("\r\n\r\n").unwrap();
            assert!(
                fields
                    .to_ascii_lowercase()
                    .contains("transfer-encoding: chunked"),
                "{engine:?}: {request}"
            );
            assert_eq!(
                body,
                format!("{:x}\r\n{data}\r\n0\r\n\r\n", data.len()),
                "{engine:?}: {sent}"
            );
        }
        stop(running).await;
    }
}

/// A backend that answers every request with its body (read whole by hyper's server).
async fn echoing_bodies() -> SocketAddr {
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    raw_backend(move |stream| async move {
        let service = service_fn(|request: http::Request<hyper::body::Incoming>| async move {
            let body = request.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>(http::Response::new(Full::new(body)))
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
            .await;
    })
    .await
}

/// A proxy on `engine` whose one route runs `filters` (so the full pipeline serves it, not the
/// fast path), in front of `backend`, and a client connection to it.
async fn pipeline_proxy(
    engine: Engine,
    backend: SocketAddr,
    filters: Vec<trafik_proxy::FilterPlan>,
) -> (trafik_proxy::Running, TcpStream) {
    let mut plan = plan_on(engine, &[backend]);
    routes(&mut plan)[0].filters = filters;
    let running = trafik_proxy::start(plan).unwrap();
    let stream = TcpStream::connect(web(&running)).await.unwrap();
    (running, stream)
}

/// Filters that are not head steps: a body limit, and request buffering.
fn body_filters() -> [Vec<trafik_proxy::FilterPlan>; 2] {
    use trafik_proxy::FilterPlan;
    [
        vec![FilterPlan::RequestBodyLimit { bytes: 1000 }],
        vec![FilterPlan::RequestBuffering {
            memory: 16,
            most: u64::MAX,
        }],
    ]
}

/// On a route the pipeline serves, a `Content-Length` body in pieces and a chunked one after
/// it on the same connection (the second one's head right behind the first body) reach the
/// backend whole; the own engine reads both itself, handing nothing to hyper.
#[tokio::test]
async fn bodies_on_a_pipeline_route_reach_the_backend_and_the_connection_goes_on() {
    for engine in ENGINES {
        for filters in body_filters() {
            let backend = echoing_bodies().await;
            let case = format!("{engine:?}, {filters:?}");
            let (running, mut stream) = pipeline_proxy(engine, backend, filters).await;
            pieces(
                &mut stream,
                &[
                    b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 26\r\n\r\nabcdefghij",
                    b"klmnopqrst",
                    b"uvwxyzPOST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nmerha",
                    b"\r\n3\r\nba!\r\n0\r\n\r\n",
                    b"POST /c HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nson.",
                ],
            )
            .await;
            let got = answers(&mut stream, 3).await;
            assert_eq!(
                bodies(&got),
                ["abcdefghijklmnopqrstuvwxyz", "merhaba!", "son."],
                "{case}: {got}"
            );
            assert!(!got.contains("connection: close"), "{case}: {got}");
            finish(engine, running).await;
        }
    }
}

/// On a route the pipeline serves, a client waiting for `100 Continue` gets it once the body
/// is wanted, and its body then goes through.
#[tokio::test]
async fn a_client_waiting_for_100_continue_on_a_pipeline_route_gets_it() {
    for engine in ENGINES {
        let backend = echoing_bodies().await;
        let filters = body_filters()[0].clone();
        let (running, mut stream) = pipeline_proxy(engine, backend, filters).await;
        stream
            .write_all(
                b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
            )
            .await
            .unwrap();
        let mut interim = vec![0u8; 25];
        tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut interim))
            .await
            .expect("100 Continue in time")
            .unwrap();
        assert_eq!(interim, b"HTTP/1.1 100 Continue\r\n\r\n", "{engine:?}");
        stream.write_all(b"hello").await.unwrap();
        let got = answers(&mut stream, 1).await;
        assert_eq!(bodies(&got), ["hello"], "{engine:?}: {got}");
        finish(engine, running).await;
    }
}

/// A body over a route's limit is refused with 413 (which closes the connection): whether it
/// came whole or is still on its way, its bytes are never read as a request, and the answer
/// reaches the client before the close.
#[tokio::test]
async fn a_body_over_the_limit_is_a_413_and_its_bytes_are_never_a_request() {
    for engine in ENGINES {
        let backend = echoing_bodies().await;
        let filters = body_filters()[0].clone();
        let (running, mut stream) = pipeline_proxy(engine, backend, filters.clone()).await;
        let mut whole = b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 2000\r\n\r\n".to_vec();
        whole.extend_from_slice(&[b'x'; 2000]);
        whole.extend_from_slice(b"POST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nok");
        stream.write_all(&whole).await.unwrap();
        let (got, closed) = until_closed(&mut stream).await;
        assert!(got.starts_with("HTTP/1.1 413"), "{engine:?}: {got}");
        assert!(closed, "{engine:?}: the connection stayed open after {got}");
        let answered = bodies(&got);
        assert!(
            answered.len() == 1 || answered[1] == "ok",
            "{engine:?}: {got}"
        );
        finish(engine, running).await;

        let backend = echoing_bodies().await;
        let (running, mut stream) = pipeline_proxy(engine, backend, filters).await;
        let mut partial = b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n".to_vec();
        partial.extend_from_slice(&[b'x'; 1500]);
        partial.extend_from_slice(b"GET /body-bytes HTTP/1.1\r\nHost: a\r\n\r\n");
        stream.write_all(&partial).await.unwrap();
        let (got, closed) = until_closed(&mut stream).await;
        assert!(got.starts_with("HTTP/1.1 413"), "{engine:?}: {got}");
        assert!(closed, "{engine:?}: the connection stayed open after {got}");
        assert_eq!(complete(got.as_bytes()), 1, "{engine:?}: {got}");
        finish(engine, running).await;
    }
}

/// A backend that answers each connection's request as soon as its head is in, then reads
/// on until the proxy closes the connection: the flag says it did.
async fn answering_early() -> (SocketAddr, Arc<std::sync::atomic::AtomicBool>) {
    let listener = tokio::net::TcpListener::bind(LOOPBACK_ANY_PORT)
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = closed.clone();
    tokio::spawn(async move {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let mut buffer = [0u8; 16 * 1024];
        let _ = stream.read(&mut buffer).await;
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await;
        while let Ok(n) = stream.read(&mut buffer).await {
            if n == 0 {
                break;
            }
        }
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    (address, closed)
}

/// A backend that answers before the body ends gets its answer to the client; when the client
/// then leaves without the rest of its body, the upload breaks off and the backend connection
/// closes, rather than waiting for the rest forever.
#[tokio::test]
async fn an_upload_the_client_leaves_unfinished_after_an_early_answer_breaks_off() {
    for engine in ENGINES {
        let (backend, closed) = answering_early().await;
        let filters = vec![trafik_proxy::FilterPlan::RequestBodyLimit { bytes: 1 << 20 }];
        let (running, mut stream) = pipeline_proxy(engine, backend, filters).await;
        stream
            .write_all(b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\nbasla")
            .await
            .unwrap();
        let got = answers(&mut stream, 1).await;
        assert_eq!(bodies(&got), ["ok"], "{engine:?}: {got}");
        drop(stream);
        let mut waited = 0;
        while !closed.load(std::sync::atomic::Ordering::SeqCst) && waited < 100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            waited += 1;
        }
        assert!(
            closed.load(std::sync::atomic::Ordering::SeqCst),
            "{engine:?}: the backend connection stayed open"
        );
        finish(engine, running).await;
    }
}

/// An answer to `HEAD` that says `Transfer-Encoding: chunked` reaches the client without it on
/// both engines (hyper's server drops it; the own engine relayed it), and no body follows.
#[tokio::test]
async fn an_answer_to_head_reaches_the_client_without_a_transfer_coding() {
    for engine in ENGINES {
        let backend =
            answering("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nx-a: 1\r\n\r\n").await;
        let (running, mut stream) = proxy(engine, backend).await;
        let requests = "HEAD /a HTTP/1.1\r\nHost: a\r\n\r\nHEAD /b HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
        stream.write_all(requests.as_bytes()).await.unwrap();
        let (got, closed) = until_closed(&mut stream).await;
        assert!(closed, "{engine:?}: {got}");
        assert_eq!(got.matches("HTTP/1.1 200").count(), 2, "{engine:?}: {got}");
        assert_eq!(got.matches("x-a: 1\r\n").count(), 2, "{engine:?}: {got}");
        let lower = got.to_ascii_lowercase();
        assert!(!lower.contains("transfer-encoding"), "{engine:?}: {got}");
        assert_eq!(got.split("\r\n\r\n").count(), 3, "{engine:?}: {got}");
        finish(engine, running).await;
    }
}
