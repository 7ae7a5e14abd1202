//! Requests and backends that try to confuse the proxy: each gets a clear answer, and none can
//! hold up another client or make trafik say something it did not mean.

use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trafik_proxy::{AnswerLimits, Engine};
use trafik_test_support::proxy::*;

/// A raw backend: reads a request head, then writes `answer` and keeps the connection open
/// (reading whatever comes) — the way a server that refuses an upload early behaves.
pub(crate) async fn head_counting_backend(
    answer: &'static [u8],
) -> (std::net::SocketAddr, Arc<AtomicIsize>) {
    let heads = Arc::new(AtomicIsize::new(0));
    let counted = heads.clone();
    let address = raw_backend(move |mut stream| {
        let counted = counted.clone();
        async move {
            let mut buffer = [0u8; 4096];
            let mut seen = Vec::new();
            loop {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buffer[..n]),
                }
                while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                    seen.drain(..end + 4);
                    counted.fetch_add(1, Ordering::SeqCst);
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await;
    (address, heads)
}

#[tokio::test]
async fn a_connection_still_carrying_an_upload_never_serves_another_client() {
    let (backend, _) =
        head_counting_backend(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 3\r\n\r\nno\n").await;
    let mut plan = plan(&[backend]);
    plan.workers = 1;
    // Long enough that waiting for the busy connection would show.
    plan.pools[0].connect_timeout = Duration::from_secs(30);
    let running = trafik_proxy::start(plan).unwrap();
    // An upload the backend refuses at once, while the client goes on sending slowly.
    let mut uploader = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    uploader
        .write_all(b"POST /yukle HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\nx")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    uploader.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 401");
    // Another client's request must not wait behind that upload.
    let answer = tokio::time::timeout(Duration::from_secs(5), get(web(&running), "/takip/1"))
        .await
        .expect("a request was queued behind someone else's upload");
    assert_eq!(answer.status, 401);
    uploader.write_all(b"more").await.unwrap();
    stop(running).await;
}

#[tokio::test]
async fn requests_a_proxy_must_not_pass_on_are_answered_with_their_status() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        requests_a_proxy_must_not_pass_on_are_answered_with_their_status_on(engine).await;
    }
}

async fn requests_a_proxy_must_not_pass_on_are_answered_with_their_status_on(engine: Engine) {
    let echo = echo_server(Duration::ZERO).await;
    let running = trafik_proxy::start(plan_on(engine, &[echo])).unwrap();
    let cases: [(&[u8], &str); 9] = [
        (
            b"CONNECT kargo.test:443 HTTP/1.1\r\nHost: kargo.test:443\r\n\r\n",
            "501",
        ),
        (b"GET * HTTP/1.1\r\nHost: a\r\n\r\n", "400"),
        (b"GET http://u:p@a/x HTTP/1.1\r\nHost: a\r\n\r\n", "400"),
        (b"GET /x HTTP/1.1\r\n\r\n", "400"),
        (b"GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "400"),
        (b"GET /x HTTP/1.1\r\nHost: a,for=6.6.6.6\r\n\r\n", "400"),
        (
            b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
            "501",
        ),
        (
            b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
            "400",
        ),
        (
            b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n",
            "400",
        ),
    ];
    for (request, status) in cases {
        let answer = raw_exchange(web(&running), request).await;
        let shown = String::from_utf8_lossy(request);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{shown:?} → {answer}"
        );
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        assert!(
            body.ends_with('\n') && body.lines().count() == 1,
            "{shown:?} → {answer}"
        );
    }
    // `Connection: host` cannot strip Host from what the backend receives.
    let answer = raw_exchange(
        web(&running),
        b"GET /x HTTP/1.1\r\nHost: kargo.test\r\nConnection: host, close\r\n\r\n",
    )
    .await;
    assert!(answer.contains("\"host\":\"kargo.test\""), "{answer}");
    stop(running).await;
}

#[tokio::test]
async fn a_backend_answer_framed_twice_is_relayed_by_its_transfer_coding() {
    let (backend, _) = head_counting_backend(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    )
    .await;
    let running = trafik_proxy::start(plan(&[backend])).unwrap();
    let answer = get(web(&running), "/x").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.text(), "abc");
    stop(running).await;
}

#[tokio::test]
async fn a_client_that_half_closes_after_its_request_still_gets_the_answer() {
    let echo = echo_server(Duration::ZERO).await;
    let running = trafik_proxy::start(plan(&[echo])).unwrap();
    let mut stream = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    stream.write_all(b"GET /x HTTP/1.0\r\n\r\n").await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    assert!(
        answer.starts_with(b"HTTP/1.0 200"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    stop(running).await;
}

#[tokio::test]
async fn a_route_cannot_set_a_header_that_frames_the_message() {
    let echo = echo_server(Duration::ZERO).await;
    let mut plan = plan(&[echo]);
    routes(&mut plan)[0].filters = vec![trafik_proxy::FilterPlan::SetResponseHeader {
        name: http::header::CONTENT_LENGTH,
        value: http::HeaderValue::from_static("5"),
    }];
    let Err(error) = trafik_proxy::start(plan) else {
        panic!("a plan setting Content-Length started");
    };
    assert!(error.to_string().contains("content-length"), "{error}");
}

#[tokio::test]
async fn a_page_of_another_origin_cannot_drain_through_the_admin_api() {
    let echo = echo_server(Duration::ZERO).await;
    let running = trafik_proxy::start(plan(&[echo])).unwrap();
    let admin = running.admin_address().unwrap();
    let path = format!("/pools/takip/backends/{echo}/drain");
    let foreign = format!(
        "POST {path} HTTP/1.1\r\nHost: {admin}\r\nOrigin: http://evil.example\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    assert!(
        raw_exchange(admin, foreign.as_bytes())
            .await
            .starts_with("HTTP/1.1 403")
    );
    assert_eq!(
        status(&running).await["pools"][0]["backends"][0]["draining"],
        false
    );
    let own = format!(
        "POST {path} HTTP/1.1\r\nHost: {admin}\r\nOrigin: http://{admin}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    assert!(
        raw_exchange(admin, own.as_bytes())
            .await
            .starts_with("HTTP/1.1 200")
    );
    stop(running).await;
}

#[tokio::test]
async fn the_admin_api_refuses_a_malformed_escape_instead_of_reading_it_as_a_byte() {
    let echo = echo_server(Duration::ZERO).await;
    let running = trafik_proxy::start(plan(&[echo])).unwrap();
    let admin = running.admin_address().unwrap();
    let ask = |path: String| async move {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {admin}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        raw_exchange(admin, request.as_bytes()).await
    };
    for path in [
        "/pools/takip%+f/backends/x/drain".to_owned(),
        format!("/pools/takip/backends/{echo}%+f/drain"),
        "/pools/takip%4/backends/x/drain".to_owned(),
    ] {
        let answer = ask(path.clone()).await;
        assert!(answer.starts_with("HTTP/1.1 404"), "{path}: {answer}");
        assert!(answer.contains("unknown admin path"), "{path}: {answer}");
    }
    let answer = ask("/caches/%+f/purge?prefix=/".to_owned()).await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert!(answer.contains("not valid percent-encoding"), "{answer}");
    stop(running).await;
}

#[tokio::test]
async fn kept_alive_upstream_connections_close_after_the_idle_timeout() {
    let (backend, _) =
        head_counting_backend(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let mut plan = plan(&[backend]);
    plan.workers = 1;
    plan.client.idle_timeout = Duration::from_secs(1);
    let running = trafik_proxy::start(plan).unwrap();
    assert_eq!(get(web(&running), "/x").await.status, 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let open = status(&running).await["pools"][0]["backends"][0]["open_connections"].clone();
        if open == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still {open} open");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(running).await;
}

#[tokio::test]
async fn an_admin_api_beyond_loopback_answers_only_with_its_bearer_token() {
    let echo = echo_server(Duration::ZERO).await;
    let mut plan = plan(&[echo]);
    plan.admin = Some("0.0.0.0:0".parse().unwrap());
    plan.admin_token = Some(trafik_proxy::admin::AdminToken::new(ADMIN_TOKEN).unwrap());
    let running = trafik_proxy::start(plan).unwrap();
    let port = running.admin_address().unwrap().port();
    let admin: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let ask = |authorization: &str| {
        format!("GET /status HTTP/1.1\r\nHost: {admin}\r\n{authorization}Connection: close\r\n\r\n")
    };
    for refused in [
        "",
        format!(
            "Authorization: Bearer {}X\r\n",
            &ADMIN_TOKEN[..ADMIN_TOKEN.len() - 1]
        )
        .as_str(),
        format!("Authorization: Basic {ADMIN_TOKEN}\r\n").as_str(),
    ] {
        let answer = raw_exchange(admin, ask(refused).as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{refused:?}: {answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("www-authenticate: bearer"),
            "{answer}"
        );
    }
    let drain = format!(
        "POST /pools/takip/backends/{echo}/drain HTTP/1.1\r\nHost: {admin}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    assert!(
        raw_exchange(admin, drain.as_bytes())
            .await
            .starts_with("HTTP/1.1 401")
    );
    let answer = raw_exchange(
        admin,
        ask(&format!("Authorization: Bearer {ADMIN_TOKEN}\r\n")).as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"draining\":false"), "{answer}");
    stop(running).await;
}

/// A token `check` accepts: 32 random hex digits.
const ADMIN_TOKEN: &str = "3f9c2a7e41b08d65c1e9a4f7023b6d8e";

/// Sends `request` from the loopback address `source` and reads the whole answer.
async fn exchange_from(
    source: std::net::IpAddr,
    to: std::net::SocketAddr,
    request: &str,
) -> String {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((source, 0).into()).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// Probe finding (issue 23): wrong admin tokens were answered at once, as fast as a client
/// could send them (7,700 a second on one connection). Now a client that spent its budget of
/// wrong guesses gets 429 whatever it sends, the right token included (or guessing would go
/// on at full speed), while another client is served. The budget refills once an hour here, so
/// nothing depends on how fast the test runs.
#[tokio::test]
async fn a_client_that_spent_its_wrong_admin_tokens_is_not_heard_while_others_are() {
    let echo = echo_server(Duration::ZERO).await;
    let mut plan = plan(&[echo]);
    plan.admin_token = Some(
        trafik_proxy::admin::AdminToken::with_failure_budget(
            ADMIN_TOKEN,
            3,
            Duration::from_secs(3600),
        )
        .unwrap(),
    );
    let running = trafik_proxy::start(plan).unwrap();
    let admin = running.admin_address().unwrap();
    let ask = |token: &str| {
        format!(
            "GET /status HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        )
    };
    let guesser: std::net::IpAddr = [127, 0, 0, 1].into();
    let wrong = ADMIN_TOKEN.to_uppercase();
    let mut statuses = Vec::new();
    for token in [&wrong, &wrong, &wrong, &wrong, ADMIN_TOKEN] {
        let answer = exchange_from(guesser, admin, &ask(token)).await;
        statuses.push(answer.get(9..12).unwrap_or("").to_owned());
        if statuses.len() == 4 {
            assert!(
                answer.to_ascii_lowercase().contains("retry-after: 3600"),
                "{answer}"
            );
        }
    }
    assert_eq!(statuses, ["401", "401", "401", "429", "429"]);
    let other = exchange_from([127, 0, 0, 2].into(), admin, &ask(ADMIN_TOKEN)).await;
    assert!(other.starts_with("HTTP/1.1 200"), "{other}");
    stop(running).await;
}

/// Found by the admin fuzz target: the admin API dropped the answer of a client that half-closed
/// after its request, when the close was read before the answer was written.
#[tokio::test]
async fn an_admin_client_that_half_closes_after_its_request_still_gets_the_answer() {
    let echo = echo_server(Duration::ZERO).await;
    let running = trafik_proxy::start(plan(&[echo])).unwrap();
    let admin = running.admin_address().unwrap();
    for n in 0..50 {
        let mut stream = tokio::net::TcpStream::connect(admin).await.unwrap();
        let request = format!("GET /status HTTP/1.1\r\nHost: {admin}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        stream.shutdown().await.unwrap();
        let mut answer = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
        assert!(
            answer.starts_with(b"HTTP/1.1 200"),
            "request {n}: {:?}",
            String::from_utf8_lossy(&answer)
        );
    }
    stop(running).await;
}

/// A kept-alive client that sends no next request is closed after the header timeout, well
/// before the idle timeout, on either engine (the own engine's wait is kept by the sweeper).
#[tokio::test]
async fn a_silent_kept_alive_client_is_closed_after_the_header_timeout() {
    let echo = echo_server(Duration::ZERO).await;
    for engine in [Engine::Trafik, Engine::Hyper] {
        let mut plan = plan_on(engine, &[echo]);
        plan.client.header_read_timeout = Duration::from_secs(1);
        plan.client.idle_timeout = Duration::from_secs(60);
        let running = trafik_proxy::start(plan).unwrap();
        let mut client = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
        client
            .write_all(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
            .await
            .unwrap();
        let mut answer = vec![0u8; 4096];
        let n = client.read(&mut answer).await.unwrap();
        assert!(answer[..n].starts_with(b"HTTP/1.1 200"), "{engine:?}");
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(20), client.read_to_end(&mut rest));
        assert!(closed.await.is_ok(), "{engine:?}: still open after 20 s");
        stop(running).await;
    }
}

/// A backend that switches to HTTP/2 for any request offering `Upgrade: h2c` (answering 101,
/// then the server preface) and answers `200 duz` otherwise; it records every request head.
async fn h2c_backend() -> (std::net::SocketAddr, Arc<std::sync::Mutex<Vec<String>>>) {
    let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recording = heads.clone();
    let address = raw_backend(move |mut stream| {
        let recording = recording.clone();
        async move {
            let mut buffer = [0u8; 4096];
            let mut seen = Vec::new();
            loop {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buffer[..n]),
                }
                while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&seen[..end]).to_ascii_lowercase();
                    seen.drain(..end + 4);
                    let switch = head.contains("\r\nupgrade:") && head.contains("h2c");
                    recording.lock().unwrap().push(head);
                    let answer: &[u8] = if switch {
                        // 101, then an empty SETTINGS frame: HTTP/2 from here on.
                        b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n\0\0\0\x04\0\0\0\0\0"
                    } else {
                        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nduz"
                    };
                    if stream.write_all(answer).await.is_err() || switch {
                        return;
                    }
                }
            }
        }
    })
    .await;
    (address, heads)
}

/// Probe finding (issue 23): a backend that accepts an h2c upgrade opened an HTTP/2 connection
/// between client and backend, whose requests then passed no route, gate or token check. An
/// h2c offer is now dropped before the request goes on: the backend answers it as the plain
/// HTTP/1.1 request it also is. Both engines, the usual h2c head and one the own engine would
/// otherwise keep (only `upgrade` in `Connection`).
#[tokio::test]
async fn an_h2c_upgrade_never_reaches_a_backend() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        let (backend, heads) = h2c_backend().await;
        let running = trafik_proxy::start(plan_on(engine, &[backend])).unwrap();
        for connection in ["Upgrade, HTTP2-Settings", "upgrade"] {
            let request = format!(
                "GET /takip HTTP/1.1\r\nHost: a\r\nConnection: {connection}\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
            );
            let mut stream = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut answer = vec![0u8; 4096];
            let read = stream.read(&mut answer).await.unwrap();
            let answer = String::from_utf8_lossy(&answer[..read]).into_owned();
            assert!(
                answer.starts_with("HTTP/1.1 200") && answer.ends_with("duz"),
                "{engine:?}, {connection}: {answer:?}"
            );
        }
        let heads = heads.lock().unwrap().clone();
        assert_eq!(heads.len(), 2, "{engine:?}: {heads:?}");
        for head in &heads {
            assert!(
                !head.contains("upgrade") && !head.contains("http2-settings"),
                "{engine:?}: {head}"
            );
        }
        stop(running).await;
    }
}

/// A backend that starts an answer head and never ends it: `X-E: ` then `filler` header bytes
/// (or until the proxy stops reading), then it holds the connection open.
async fn unfinished_head_backend(filler: usize) -> std::net::SocketAddr {
    raw_backend(move |mut stream| async move {
        let mut buffer = [0u8; 4096];
        if !read_head(&mut stream).await {
            return;
        }
        if stream.write_all(UNFINISHED_HEAD).await.is_err() {
            return;
        }
        let chunk = [b'e'; 64 * 1024];
        let mut left = filler;
        while left > 0 {
            let piece = left.min(chunk.len());
            if stream.write_all(&chunk[..piece]).await.is_err() {
                return;
            }
            left -= piece;
        }
        let _ = stream.read(&mut buffer).await;
    })
    .await
}

const UNFINISHED_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nX-E: ";

/// A head that goes on past the limit, and one that stops unfinished at it (it cannot end
/// within the limit either): both engines' readers of answers refuse them at once, rather than
/// wait for the rest until the response timeout.
#[tokio::test]
async fn an_answer_head_past_the_upstream_limits_is_the_backends_failure() {
    const LIMIT: usize = 200;
    let cases = [
        ("endless", 64 << 20, AnswerLimits::default().bytes),
        ("at the limit", LIMIT - UNFINISHED_HEAD.len(), LIMIT),
    ];
    for (case, filler, limit) in cases {
        for engine in [Engine::Trafik, Engine::Hyper] {
            let backend = unfinished_head_backend(filler).await;
            let mut plan = plan_on(engine, &[backend]);
            plan.client.upstream_limits.bytes = limit;
            // Long enough that a proxy waiting for the head's end would answer 504, not 502.
            plan.pools[0].response_timeout = Duration::from_secs(30);
            plan.pools[0].retries = 0;
            let running = trafik_proxy::start(plan).unwrap();
            let answer = raw_exchange(
                web(&running),
                b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            )
            .await;
            assert!(
                answer.starts_with("HTTP/1.1 502"),
                "{case}, {engine:?}: {answer}"
            );
            let status = status(&running).await;
            let k1 = &status["pools"][0]["backends"][0];
            assert_eq!(k1["failures"], 1, "{case}, {engine:?}: {k1}");
            stop(running).await;
        }
    }
}

#[tokio::test]
async fn an_answer_with_more_fields_than_the_upstream_limit_is_the_backends_failure() {
    let many: String = (0..101).map(|i| format!("x-{i}: v\r\n")).collect();
    let within: String = (0..90).map(|i| format!("x-{i}: v\r\n")).collect();
    for engine in [Engine::Trafik, Engine::Hyper] {
        let over = answering(format!(
            "HTTP/1.1 200 OK\r\n{many}content-length: 2\r\n\r\nok"
        ))
        .await;
        let under = answering(format!(
            "HTTP/1.1 200 OK\r\n{within}content-length: 2\r\n\r\nok"
        ))
        .await;
        let mut plan = plan_on(engine, &[over, under]);
        plan.pools[0].retries = 0;
        let running = trafik_proxy::start(plan).unwrap();
        let mut statuses = Vec::new();
        for _ in 0..2 {
            let answer = raw_exchange(
                web(&running),
                b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            )
            .await;
            statuses.push(answer[9..12].to_owned());
        }
        statuses.sort();
        assert_eq!(statuses, ["200", "502"], "{engine:?}");
        stop(running).await;
    }
}

/// An h2c backend whose every answer is `200` with a body that never ends (a kilobyte every
/// 20 ms); it counts the requests it was sent.
async fn endless_h2c_backend() -> (std::net::SocketAddr, Arc<AtomicIsize>) {
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let asked = Arc::new(AtomicIsize::new(0));
    let counting = asked.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counting = counting.clone();
            tokio::spawn(async move {
                let service = service_fn(move |_: http::Request<hyper::body::Incoming>| {
                    counting.fetch_add(1, Ordering::SeqCst);
                    let endless = futures_util::stream::unfold((), |()| async {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let chunk = hyper::body::Frame::data(bytes::Bytes::from(vec![b'x'; 1024]));
                        Some((Ok::<_, std::convert::Infallible>(chunk), ()))
                    });
                    let answer = http::Response::new(http_body_util::StreamBody::new(endless));
                    async move { Ok::<_, std::convert::Infallible>(answer) }
                });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
            });
        }
    });
    (address, asked)
}

/// Probe finding: an HTTP health check over HTTP/2 read the whole answer body, with no bound,
/// before judging its status, so a backend whose health page streams was down at every probe's
/// timeout (and a fast one filled memory meanwhile). The status decides, as it does over
/// HTTP/1.1.
#[tokio::test]
async fn an_http2_health_probe_judges_the_status_without_reading_an_endless_body() {
    let (backend, asked) = endless_h2c_backend().await;
    let mut plan = plan(&[backend]);
    plan.pools[0].protocol = trafik_proxy::plan::UpstreamProtocol::H2c;
    plan.pools[0].health = Some(trafik_proxy::HealthPlan {
        timeout: Duration::from_secs(1),
        ..course_health_check()
    });
    let running = trafik_proxy::start(plan).unwrap();
    // Probes go one after another: when the third arrives, two have been judged.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while asked.load(Ordering::SeqCst) < 3 {
        assert!(std::time::Instant::now() < deadline, "no third probe");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(running.snapshot().pools[0].backends.is_up(0));
    stop(running).await;
}

/// An HTTP/2 client may have open at once only the streams `[server.limits] streams` allows
/// (its SETTINGS_MAX_CONCURRENT_STREAMS): each stream may hold a backend connection, so one
/// client connection with hyper's default 200 held 200 of them.
#[tokio::test]
async fn an_http2_client_may_open_only_the_streams_the_limits_allow() {
    let (backend, _) = counting_server().await;
    let mut plan = plan(&[backend]);
    plan.client.limits.streams = 7;
    let running = trafik_proxy::start(plan).unwrap();
    let stream = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    let (client, connection) = h2::client::handshake(stream).await.unwrap();
    tokio::spawn(connection);
    // Once an answer has come, the server's SETTINGS have been read.
    let request = http::Request::get("http://kargo.test/takip/TR-1")
        .body(())
        .unwrap();
    let mut ready = client.ready().await.unwrap();
    let (answer, _) = ready.send_request(request, true).unwrap();
    assert_eq!(answer.await.unwrap().status(), 200);
    assert_eq!(ready.current_max_send_streams(), 7);
    running.stop();
}
