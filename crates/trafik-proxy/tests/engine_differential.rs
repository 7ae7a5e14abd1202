//! The own HTTP/1 engine against hyper's: the same generated request heads (and, from a raw
//! backend, the same generated response heads) go through two proxies that differ only in
//! `[server] engine`, and the client must see the same verdict — status, the head the backend
//! received (echoed back), the response's headers and body. A seeded short pass runs with the
//! tests; `TRAFIK_FUZZ_CASES=20000 cargo test -p trafik-proxy --test engine_differential --
//! --ignored` a long one (a target of `fuzz/run.sh`).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trafik_balance::random::SharedRng;
use trafik_proxy::Engine;
use trafik_test_support::proxy::*;

/// Request heads, each with the body that follows it.
const REQUESTS: [(&str, &str); 10] = [
    (
        "GET /takip/TR-1?x=1 HTTP/1.1\r\nHost: kargo.test\r\nAccept: */*\r\n",
        "hello",
    ),
    (
        "POST /olay HTTP/1.1\r\nHost: a:8080\r\nContent-Length: 5\r\n",
        "hello",
    ),
    (
        "HEAD /x HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 6.6.6.6\r\nKeep-Alive: 5\r\n",
        "hello",
    ),
    (
        "DELETE /y/%41b HTTP/1.1\r\nHost: [::1]:80\r\nTE: trailers\r\nProxy-Authorization: x\r\n",
        "hello",
    ),
    (
        "GET /z HTTP/1.1\r\nhost: B.Test\r\nForwarded: for=1.2.3.4\r\nConnection: keep-alive\r\n",
        "hello",
    ),
    (
        "PUT /u HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nUser-Agent: wrk\r\n",
        "hello",
    ),
    (
        "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n",
        "5;x=y\r\nhello\r\n3\r\n, w\r\n0\r\nT: 1\r\n\r\n",
    ),
    (
        "PUT /e HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 11\r\n",
        "hello world",
    ),
    (
        "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 300\r\n",
        "0123456789",
    ),
    (
        "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n",
        "hello",
    ),
];

/// Pieces spliced into heads: the bytes framing and validation turn on.
const PIECES: [&str; 24] = [
    "\r\n",
    "\n",
    "\r",
    ":",
    " ",
    "\t",
    ",",
    "\0",
    "chunked",
    "Transfer-Encoding: chunked\r\n",
    "Content-Length: 5\r\n",
    "Content-Length: ",
    "Host: b\r\n",
    "Via: 1.1 x\r\n",
    "Expect: 100-continue\r\n",
    "Upgrade: h2c\r\n",
    "Connection: x-a\r\n",
    "0",
    "-1",
    "%2f",
    "/..",
    "@",
    "\u{7f}",
    "\u{e9}",
];

/// A chunked message body, its first data ahead of each way it may break or run to a limit:
/// blanks and an extension after a size, a word after it, an extension and a trailer section
/// at hyper's 16 KiB limits and one byte past them, 100 trailer lines and 101, a trailer line
/// that is no field.
fn chunked_bodies() -> Vec<String> {
    let long = |bytes: usize| "x".repeat(bytes);
    [
        "4 \t;a=b\r\nwiki\r\n0\r\nT: 1\r\nU:\r\n\r\n".to_owned(),
        "4 x\r\nwiki\r\n0\r\n\r\n".to_owned(),
        format!("4;{}\r\nwiki\r\n0\r\n\r\n", long(16383)),
        format!("4;{}\r\nwiki\r\n0\r\n\r\n", long(16384)),
        format!("0\r\nx: {}\r\n\r\n", long(16376)),
        format!("0\r\nx: {}\r\n\r\n", long(16377)),
        format!("0\r\n{}\r\n", "t: 1\r\n".repeat(100)),
        format!("0\r\n{}\r\n", "t: 1\r\n".repeat(101)),
        "0\r\nno colon\r\n\r\n".to_owned(),
    ]
    .into_iter()
    .map(|rest| format!("3\r\nabc\r\n{rest}"))
    .collect()
}

/// Request seeds: [`REQUESTS`], and a chunked upload of each of [`chunked_bodies`].
fn request_seeds() -> Vec<(String, String)> {
    let upload = "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n";
    REQUESTS
        .iter()
        .map(|&(head, body)| (head.to_owned(), body.to_owned()))
        .chain(
            chunked_bodies()
                .into_iter()
                .map(|body| (upload.to_owned(), body)),
        )
        .collect()
}

fn mutate(seed: &str, random: &SharedRng, edits: usize) -> Vec<u8> {
    let mut bytes = seed.as_bytes().to_vec();
    for _ in 0..edits {
        let at = random.below(bytes.len() + 1);
        if random.below(3) == 0 {
            let end = (at + random.below(6)).min(bytes.len());
            bytes.drain(at..end);
        } else {
            let piece = PIECES[random.below(PIECES.len())].as_bytes();
            bytes.splice(at..at, piece.iter().copied());
        }
    }
    bytes
}

/// A request head, mutated or not, closed with `Connection: close` and its seed's body; and
/// where to split it in two writes (a body that comes after its head), if anywhere.
fn request_case(seeds: &[(String, String)], random: &SharedRng) -> (Vec<u8>, Option<usize>) {
    let (seed, body) = &seeds[random.below(seeds.len())];
    let mut bytes = mutate(seed, random, random.below(3));
    bytes.extend_from_slice(b"Connection: close\r\n\r\n");
    let split = (random.below(4) == 0).then(|| bytes.len() + random.below(body.len()));
    bytes.extend_from_slice(body.as_bytes());
    if seed.contains("300") {
        // The rest of a 300-byte body, in pieces of its own.
        bytes.extend(std::iter::repeat_n(b'x', 290));
    }
    (bytes, split)
}

/// Sends `bytes` (in two writes 20 ms apart when split), reads until the proxy closes (or 5 s
/// pass).
async fn exchange(address: SocketAddr, bytes: &[u8], split: Option<usize>) -> Vec<u8> {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let split = split.unwrap_or(bytes.len()).min(bytes.len());
    let _ = stream.write_all(&bytes[..split]).await;
    if split < bytes.len() {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _ = stream.write_all(&bytes[split..]).await;
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    answer
}

/// What the client saw, without what differs by nature: the date, the order and case of
/// header names, how a body was framed.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    status: String,
    headers: BTreeSet<String>,
    body: String,
}

fn seen(answer: &[u8]) -> Seen {
    let text = String::from_utf8_lossy(answer);
    // Both send it to a client that waits for it; what follows is the answer.
    let text = text
        .strip_prefix("HTTP/1.1 100 Continue\r\n\r\n")
        .unwrap_or(&text);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text, ""));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap_or("")
        .get(..12)
        .unwrap_or("")
        .to_owned();
    let mut headers = BTreeSet::new();
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let name = name.to_ascii_lowercase();
        match name.as_str() {
            "content-length" => length = value.trim().parse::<usize>().ok(),
            "date" | "connection" => continue,
            "transfer-encoding" => chunked = true,
            _ => {
                headers.insert(format!("{name}: {}", value.trim()));
            }
        }
    }
    let mut body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    // A pipelined answer after a framed one: its status (which engine's words it carries
    // after a hand-over may differ: hyper's bare 400 mid-connection, trafik's with a line).
    if let Some(length) = length.filter(|&n| n < body.len()) {
        let next = body[length..].get(..12).unwrap_or("").to_owned();
        body.truncate(length);
        body.push_str(&next);
    }
    // The same after an answer without a body (to HEAD).
    if body.starts_with("HTTP/1.1 ") {
        body.truncate(12);
    }
    // The echo's JSON, re-serialized: its headers map has one order whatever the engine.
    let body = match serde_json::from_str::<serde_json::Value>(&body) {
        Ok(json) => json.to_string(),
        Err(_) => body,
    };
    Seen {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size =
            usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// The echo server's answer (the request's method, target and headers as JSON), given once
/// the body has been read: a backend that answers before a body ends closes its connection, and
/// which proxy then reuses it in time is a race, not a verdict. A body that does not end within
/// 200 ms is answered anyway, with `Connection: close`, so neither proxy reuses the connection.
async fn reading_echo() -> SocketAddr {
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    raw_backend(move |stream| async move {
        let service = service_fn(|request: http::Request<hyper::body::Incoming>| async move {
            let answer = echo_json(&request);
            let body = request.into_body().collect();
            let read = tokio::time::timeout(Duration::from_millis(200), body).await;
            let mut response = http::Response::builder()
                .header("connection", "x-upstream-secret")
                .header("x-upstream-secret", "1")
                .header("keep-alive", "timeout=5");
            if !matches!(read, Ok(Ok(_))) {
                response = response.header("connection", "close");
            }
            response.body(Full::new(bytes::Bytes::from(answer.to_string())))
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
            .await;
    })
    .await
}

async fn both(backend: SocketAddr) -> [trafik_proxy::Running; 2] {
    [Engine::Hyper, Engine::Trafik].map(|engine| {
        let mut plan = plan(&[backend]);
        plan.client.engine = engine;
        plan.client.header_read_timeout = Duration::from_secs(2);
        trafik_proxy::start(plan).unwrap()
    })
}

async fn requests(cases: u64, seed: u64) {
    let echo = reading_echo().await;
    let [hyper, own] = both(echo).await;
    let random = SharedRng::new(seed);
    let seeds = request_seeds();
    for _ in 0..cases {
        let (request, split) = request_case(&seeds, &random);
        let shown = String::from_utf8_lossy(&request).into_owned();
        let by_hyper = seen(&exchange(web(&hyper), &request, split).await);
        let by_own = seen(&exchange(web(&own), &request, split).await);
        assert_eq!(by_hyper, by_own, "{shown:?}");
    }
    stop(hyper).await;
    stop(own).await;
}

const RESPONSES: [&str; 5] = [
    "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: 1\r\n\r\nabc",
    "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nVia: 1.0 edge\r\n\r\n",
    "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end",
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
];

/// Response seeds: [`RESPONSES`], and a chunked answer with each of [`chunked_bodies`].
fn response_seeds() -> Vec<String> {
    let head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    RESPONSES
        .iter()
        .map(|&answer| answer.to_owned())
        .chain(
            chunked_bodies()
                .into_iter()
                .map(|body| format!("{head}{body}")),
        )
        .collect()
}

async fn responses(cases: u64, seed: u64) {
    let random = SharedRng::new(seed);
    let seeds = response_seeds();
    for _ in 0..cases {
        let seed = &seeds[random.below(seeds.len())];
        // Mutations after the status line only: a broken status line is a 502 either way.
        let line = seed.find("\r\n").unwrap() + 2;
        let mut answer = seed.as_bytes()[..line].to_vec();
        answer.extend(mutate(&seed[line..], &random, random.below(3)));
        let shown = String::from_utf8_lossy(&answer).into_owned();
        let backend = answering_then_closing(answer).await;
        let [hyper, own] = both(backend).await;
        let request = b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
        let by_hyper = seen(&exchange(web(&hyper), request, None).await);
        let by_own = seen(&exchange(web(&own), request, None).await);
        assert_eq!(by_hyper.status, by_own.status, "{shown:?}");
        if by_hyper.status.ends_with("200") || by_hyper.status.ends_with("201") {
            assert_eq!(by_hyper, by_own, "{shown:?}");
        }
        stop(hyper).await;
        stop(own).await;
    }
}

#[tokio::test]
async fn both_engines_give_the_same_verdicts_on_generated_request_heads() {
    requests(400, 14).await;
}

#[tokio::test]
async fn both_engines_relay_generated_response_heads_alike() {
    responses(60, 14).await;
}

fn long_cases() -> (u64, u64) {
    let cases = std::env::var("TRAFIK_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let seed = std::env::var("TRAFIK_FUZZ_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_secs())
        });
    eprintln!("engine differential: {cases} cases, seed {seed}");
    (cases, seed)
}

#[tokio::test]
#[ignore = "a long run by hand: TRAFIK_FUZZ_CASES sets the count"]
async fn engine_differential_long_run() {
    let (cases, seed) = long_cases();
    requests(cases, seed).await;
    responses(cases / 20, seed).await;
}
