//! A route's pipeline end to end: path normalization before matching, configured filters, and
//! failures charged to whoever caused them.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request};
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trafik_proxy::FilterPlan;
use trafik_test_support::proxy::*;

#[tokio::test]
async fn a_dot_segment_cannot_reach_a_route_it_does_not_name() {
    let public = body_reading_server().await;
    let mut plan = plan(&[public]);
    // Only /public is routed; everything else is 404.
    *routes(&mut plan) = vec![route("/public", "takip")];
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = Client::connect(web(&running)).await;
    assert_eq!(client.get("/public/../admin").await.status, 404);
    assert_eq!(client.get("/public/%2e%2e/admin").await.status, 404);
    let answer = client.get("//public/./a/../b?x=1").await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.text(),
        "/public/b?x=1 0",
        "the backend sees the normal form"
    );
    stop(running).await;
}

#[tokio::test]
async fn configured_filters_limit_bodies_and_set_headers() {
    let echo = echo_server(Duration::ZERO).await;
    let mut plan = plan(&[echo]);
    routes(&mut plan)[0].filters = vec![
        FilterPlan::SetResponseHeader {
            name: HeaderName::from_static("x-cevap"),
            value: HeaderValue::from_static("1"),
        },
        FilterPlan::RequestBodyLimit { bytes: 8 },
        FilterPlan::SetRequestHeader {
            name: HeaderName::from_static("x-kaynak"),
            value: HeaderValue::from_static("trafik"),
        },
    ];
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = Client::connect(web(&running)).await;
    let answer = client.get("/takip/1").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["headers"]["x-kaynak"], "trafik");
    assert_eq!(answer.header("x-cevap"), Some("1"));
    let too_long = Request::post("/olay")
        .header("host", "kargo.test")
        .body(Full::new(Bytes::from_static(b"0123456789")))
        .unwrap();
    let answer = Client::connect(web(&running)).await.send(too_long).await;
    assert_eq!(answer.status, 413);
    assert_eq!(
        answer.text(),
        "the request body is larger than this route allows\n"
    );
    assert_eq!(
        answer.header("x-cevap"),
        Some("1"),
        "steps that ran see the answer"
    );
    let echoed = Client::connect(web(&running)).await.get("/takip/2").await;
    assert!(echoed.json()["headers"].get("x-kaynak").is_some());
    // The own engine ran the filters of every request, the one with a body too.
    assert_eq!(handed_to_hyper(&running).await, 0);
    stop(running).await;
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_cut_off_with_413() {
    let reader = body_reading_server().await;
    let mut plan = plan(&[reader]);
    routes(&mut plan)[0].filters = vec![FilterPlan::RequestBodyLimit { bytes: 8 }];
    let running = trafik_proxy::start(plan).unwrap();
    let mut stream = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    stream
        .write_all(
            b"POST /olay HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n012345\r\n6\r\n678901\r\n0\r\n\r\n",
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let status = status(&running).await;
    assert_eq!(status["pools"][0]["backends"][0]["failures"], 0);
    stop(running).await;
}

#[tokio::test]
async fn the_response_timeout_starts_when_the_upload_is_done() {
    // The client takes about a second to upload; the backend answers at once after that. A
    // response timeout of 300 ms must not count the upload.
    let reader = body_reading_server().await;
    let mut plan = plan(&[reader]);
    plan.pools[0].response_timeout = Duration::from_millis(300);
    let running = trafik_proxy::start(plan).unwrap();
    let mut stream = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    stream
        .write_all(b"POST /olay HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n")
        .await
        .unwrap();
    for byte in b"abcde" {
        tokio::time::sleep(Duration::from_millis(200)).await;
        stream.write_all(&[*byte]).await.unwrap();
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    stop(running).await;
}

#[tokio::test]
async fn an_aborted_upload_is_not_charged_to_the_backend() {
    let reader = body_reading_server().await;
    let running = trafik_proxy::start(plan(&[reader])).unwrap();
    for _ in 0..3 {
        let mut stream = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
        stream
            .write_all(b"POST /olay HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\nonly part")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(stream);
    }
    wait_for_status(&running, |s| {
        s["pools"][0]["backends"][0]["active_connections"] == 0
    })
    .await;
    let status = status(&running).await;
    let backend = &status["pools"][0]["backends"][0];
    assert_eq!(backend["failures"], 0, "{backend}");
    assert_eq!(status["pools"][0]["unreachable"], 0);
    stop(running).await;
}

#[tokio::test]
async fn spellings_a_backend_could_resolve_outside_the_prefix_are_refused() {
    let echo = echo_server(Duration::ZERO).await;
    let mut plan = plan(&[echo]);
    *routes(&mut plan) = vec![route("/public", "takip")];
    let running = trafik_proxy::start(plan).unwrap();
    for path in [
        "/public/..;/admin",
        "/public/%2e%2e%2fadmin",
        "/public/..%5cadmin",
        "/public\\..\\admin",
    ] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let answer = raw_exchange(web(&running), request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{path}: {answer}");
        assert!(
            answer.ends_with("dot segment with parameters\n"),
            "{answer}"
        );
    }
    stop(running).await;
}

#[tokio::test]
async fn malformed_escapes_are_refused_before_routing() {
    let echo = echo_server(Duration::ZERO).await;
    let mut plan = plan(&[echo]);
    *routes(&mut plan) = vec![route("/public", "takip")];
    let running = trafik_proxy::start(plan).unwrap();
    for path in [
        "/public/%+f",
        "/public/a%zz",
        "/public/a%4",
        // Decoding `%32` and `%65` after a stray `%` would hand the backend `%2e%2e`.
        "/public/%%32%65%%32%65/admin",
    ] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let answer = raw_exchange(web(&running), request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{path}: {answer}");
        assert!(answer.contains("malformed escape"), "{path}: {answer}");
    }
    stop(running).await;
}

#[tokio::test]
async fn an_absolute_form_request_reaches_the_backend_with_the_host_it_was_routed_by() {
    let echo = echo_server(Duration::ZERO).await;
    let mut plan = plan(&[echo]);
    let mut public = route("/", "takip");
    public.host = Some("public.test".into());
    *routes(&mut plan) = vec![public];
    let running = trafik_proxy::start(plan).unwrap();
    let answer = raw_exchange(
        web(&running),
        b"GET http://public.test/x HTTP/1.1\r\nHost: internal.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.contains("\"host\":\"public.test\""), "{answer}");
    assert!(!answer.contains("internal.test"), "{answer}");
    stop(running).await;
}

#[tokio::test]
async fn options_asterisk_is_relayed_as_an_asterisk() {
    let echo = echo_server(Duration::ZERO).await;
    let running = trafik_proxy::start(plan(&[echo])).unwrap();
    let answer = raw_exchange(
        web(&running),
        b"OPTIONS * HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.contains("\"uri\":\"*\""), "{answer}");
    stop(running).await;
}

/// A raw upstream that sends a 200 head, waits, then sends `body` in a write of its own.
async fn late_body_server(body: &'static [u8]) -> std::net::SocketAddr {
    raw_backend(move |mut stream| async move {
        let mut buffer = [0u8; 4096];
        if !read_head(&mut stream).await {
            return;
        }
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: message/http\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        stream.write_all(body).await.unwrap();
        let _ = stream.read(&mut buffer).await;
    })
    .await
}

#[tokio::test]
async fn a_relayed_body_that_looks_like_an_error_answer_is_relayed_byte_for_byte() {
    const BODY: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
    let backend = late_body_server(BODY).await;
    let running = trafik_proxy::start(plan(&[backend])).unwrap();
    let answer = raw_exchange(
        web(&running),
        b"GET /raw HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    let (_, body) = answer.split_once("\r\n\r\n").unwrap();
    assert_eq!(body.as_bytes(), BODY);
    stop(running).await;
}

/// A backend that counts the connections it accepted and answers each request with its body's
/// length and a checksum of its bytes (FNV-1a).
async fn checksumming_backend() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use http_body_util::BodyExt;
    use hyper::service::service_fn;
    use std::sync::atomic::Ordering;
    let listener = tokio::net::TcpListener::bind(LOOPBACK_ANY_PORT)
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counting = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counting.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let service = service_fn(|request: Request<hyper::body::Incoming>| async move {
                    let body = request.into_body().collect().await?.to_bytes();
                    Ok::<_, hyper::Error>(http::Response::new(Full::new(Bytes::from(format!(
                        "{} {:x}",
                        body.len(),
                        fnv1a(&body)
                    )))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (address, accepted)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The pipeline's HTTP/1 client and the own engine's fast path keep their backend connections
/// in one idle stack per worker: requests on a route with a filter (the pipeline) and on a
/// plain route (the fast path) to the same backend, one after another on one client
/// connection, all go on one backend connection.
#[tokio::test]
async fn a_filtered_route_and_a_plain_one_share_their_backend_connections() {
    use std::sync::atomic::Ordering;
    let (backend, accepted) = checksumming_backend().await;
    let mut plan = plan(&[backend]);
    // A step that reads the whole body first takes the pipeline (a header edit would not).
    let mut filtered = route("/suzgec", "takip");
    filtered.filters = vec![FilterPlan::RequestBuffering {
        memory: 1024,
        most: u64::MAX,
    }];
    *routes(&mut plan) = vec![filtered, route("/", "takip")];
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = Client::connect(web(&running)).await;
    for path in ["/suzgec/1", "/takip/2", "/suzgec/3", "/takip/4"] {
        let answer = client.get(path).await;
        assert_eq!(answer.status, 200, "{path}");
        assert_eq!(answer.text(), format!("0 {:x}", fnv1a(b"")), "{path}");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "both ways to the backend took the one idle connection"
    );
    stop(running).await;
}

/// Probe finding: request buffering wrote whatever a client sent to its temporary file, with
/// no bound when the route set no body limit (the disk filled). A buffered body past the
/// filter's bound is refused with 413 and never reaches the backend.
#[tokio::test]
async fn a_buffered_body_past_its_bound_is_refused_not_spilled_without_end() {
    use std::sync::atomic::Ordering;
    let (backend, accepted) = checksumming_backend().await;
    let mut plan = plan(&[backend]);
    routes(&mut plan)[0].filters = vec![FilterPlan::RequestBuffering {
        memory: 1024,
        most: 64 * 1024,
    }];
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = Client::connect(web(&running)).await;
    let upload = |length: usize| {
        Request::post("/yukle")
            .header("host", "a")
            .body(Full::new(Bytes::from(vec![b'y'; length])))
            .unwrap()
    };
    assert_eq!(client.send(upload(64 * 1024)).await.status, 200);
    let mut client = Client::connect(web(&running)).await;
    assert_eq!(client.send(upload(64 * 1024 + 1)).await.status, 413);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "only the first reached the backend"
    );
    stop(running).await;
}

/// Behind `request_buffering`, a client still sending its body holds no backend connection;
/// the body reaches the backend whole, from memory or, past the memory bound, from a file.
#[tokio::test]
async fn a_buffered_route_holds_no_backend_connection_while_a_body_trickles_in() {
    use std::sync::atomic::Ordering;
    let (backend, accepted) = checksumming_backend().await;
    let mut plan = plan(&[backend]);
    routes(&mut plan)[0].filters = vec![FilterPlan::RequestBuffering {
        memory: 16 * 1024,
        most: u64::MAX,
    }];
    let running = trafik_proxy::start(plan).unwrap();
    // Ten uploads that have sent their head and a tenth of their body.
    let mut trickling = Vec::new();
    for _ in 0..10 {
        let mut client = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
        client
            .write_all(b"POST /yukle HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n0123456789")
            .await
            .unwrap();
        trickling.push(client);
    }
    // A whole upload past the memory bound, sent after them, is answered: it went through.
    let body: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut client = Client::connect(web(&running)).await;
    let answer = client
        .send(
            Request::post("/yukle")
                .header("host", "a")
                .body(Full::new(Bytes::from(body.clone())))
                .unwrap(),
        )
        .await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.text(), format!("{} {:x}", body.len(), fnv1a(&body)));
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "only the finished upload reached the backend"
    );
    // One trickling upload finishes: its body arrives whole, from memory.
    let mut finishing = trickling.pop().unwrap();
    let rest: Vec<u8> = (0..90).map(|i| b'a' + (i % 26) as u8).collect();
    finishing.write_all(&rest).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let read = finishing.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]).into_owned();
    let mut whole = b"0123456789".to_vec();
    whole.extend_from_slice(&rest);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.ends_with(&format!("100 {:x}", fnv1a(&whole))),
        "{answer}"
    );
    // Every upload was read by the own engine, none handed to hyper.
    assert_eq!(handed_to_hyper(&running).await, 0);
    stop(running).await;
}

/// With the default minimum body rate, a body trickling at a few bytes a second is refused with
/// 408 once its grace has passed, instead of holding trafik and a backend for as long as the
/// client likes: on the fast path, and on a route the full pipeline serves (whose body the own
/// engine feeds it).
#[tokio::test]
async fn a_body_trickling_below_the_default_rate_gets_408() {
    for filters in [
        vec![],
        vec![FilterPlan::RequestBodyLimit { bytes: 1 << 20 }],
    ] {
        let backend = body_reading_server().await;
        let mut plan = plan(&[backend]);
        plan.client.limits = trafik_proxy::HeadLimits::default();
        let piped = !filters.is_empty();
        routes(&mut plan)[0].filters = filters;
        let running = trafik_proxy::start(plan).unwrap();
        let mut client = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
        client
            .write_all(b"POST /yukle HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        // A byte every 250 ms: well under 1 KiB a second, and the answer comes within 100
        // bytes when the rate is enforced (after its two seconds of grace).
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if client.write_all(b"x").await.is_err() {
                // Refused and closed: the answer is what is left to read.
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut answer))
                        .await;
                break;
            }
            let mut buffer = [0u8; 1024];
            match tokio::time::timeout(Duration::from_millis(1), client.read(&mut buffer)).await {
                Ok(Ok(n)) if n > 0 => {
                    answer.extend_from_slice(&buffer[..n]);
                    break;
                }
                _ => {}
            }
        }
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 408"),
            "piped {piped}: {answer:?}"
        );
        assert_eq!(handed_to_hyper(&running).await, 0, "piped {piped}");
        stop(running).await;
    }
}

/// Heads the fast path does not rewrite itself — a `Via` from a proxy before this one, a trace
/// context, a path to normalize, an h2c offer, a chunked `GET` — are served by the own engine's pipeline, each
/// as the pipeline answers it, and never handed to hyper.
#[tokio::test]
async fn heads_the_fast_path_does_not_rewrite_stay_on_the_own_engine() {
    let echo = echo_server(Duration::ZERO).await;
    let running = trafik_proxy::start(plan(&[echo])).unwrap();
    let mut client = Client::connect(web(&running)).await;
    let get = |path: &str, name: &str, value: &str| {
        Request::get(path)
            .header("host", "kargo.test")
            .header(name, value)
            .body(Full::new(Bytes::new()))
            .unwrap()
    };

    let answer = client.send(get("/takip/1", "via", "1.1 onceki")).await;
    assert_eq!(answer.status, 200);
    let via = answer.json()["headers"]["via"].as_str().unwrap().to_owned();
    assert!(
        via.starts_with("1.1 onceki,") && via.ends_with("trafik-test"),
        "{via}"
    );

    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let answer = client.send(get("/takip/2", "traceparent", parent)).await;
    let sent = answer.json()["headers"]["traceparent"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        sent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && sent != parent,
        "the trace goes on with a span of trafik's: {sent}"
    );

    let answer = client.get("//takip/./3").await;
    assert_eq!(answer.json()["uri"], "/takip/3");

    let h2c = Request::get("/takip/h2c")
        .header("host", "kargo.test")
        .header("upgrade", "h2c")
        .header("connection", "Upgrade, HTTP2-Settings")
        .header("http2-settings", "AAMAAABkAARAAAAAAAIAAAAA")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let answer = client.send(h2c).await;
    assert_eq!(answer.status, 200);
    let seen = &answer.json()["headers"];
    assert!(
        seen.get("upgrade").is_none() && seen.get("http2-settings").is_none(),
        "the h2c offer is dropped: {seen}"
    );

    let looped = get("/takip/4", "via", "1.1 trafik-test, 1.1 trafik-test");
    assert_eq!(client.send(looped).await.status, 508);

    let mut raw = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    raw.write_all(
        b"GET /takip/5 HTTP/1.1\r\nhost: kargo.test\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    )
    .await
    .unwrap();
    let mut answer = String::new();
    raw.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    assert_eq!(handed_to_hyper(&running).await, 0);
    stop(running).await;
}

/// A head that arrives in pieces is read whole by the own engine (its header timeout counted
/// from the first piece), and a head that is not HTTP gets trafik's 400 from it: neither
/// connection is handed to hyper.
#[tokio::test]
async fn a_head_in_pieces_and_a_broken_head_stay_on_the_own_engine() {
    let echo = echo_server(Duration::ZERO).await;
    let running = trafik_proxy::start(plan(&[echo])).unwrap();

    let mut stream = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    for piece in [
        &b"GET /takip/parca HTTP/1.1\r\nHo"[..],
        b"st: kargo.test\r\nX-Uzun: ",
        b"deger\r\nconnection: close\r\n\r\n",
    ] {
        stream.write_all(piece).await.unwrap();
        stream.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"x-uzun\":\"deger\""), "{answer}");

    let broken = raw_exchange(
        web(&running),
        b"GET /takip/1 HTTP/1.1\r\nHost: kargo.test\r\nBad Name: 1\r\n\r\n",
    )
    .await;
    assert!(
        broken.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{broken}"
    );
    assert!(broken.ends_with("\r\n\r\nmalformed request\n"), "{broken}");

    assert_eq!(handed_to_hyper(&running).await, 0);
    stop(running).await;
}

/// A route with JWT verification and a local rate limit is served inline by the own engine: its
/// steps run on the head it forwards (the verified claim in, the client's forged copy and the
/// token out), a retry on another backend sends that same edited head without counting the
/// request again, refusals are the steps' own answers, and no request takes the pipeline.
#[tokio::test]
async fn jwt_and_a_local_limit_run_inline_and_a_retry_keeps_their_edits() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use trafik_proxy::plan::{JwtKeys, JwtPlan, RateKey, RateLimitPlan};

    const SECRET: &[u8] = b"trafik-ornek-anahtar";
    let echo = echo_server(Duration::ZERO).await;
    // Reads a request head and closes without answering: the request is lost, and retried.
    let lost = Arc::new(AtomicUsize::new(0));
    let losing = lost.clone();
    let closing = raw_backend(move |mut stream| {
        let losing = losing.clone();
        async move {
            let mut head = [0u8; 4096];
            if matches!(stream.read(&mut head).await, Ok(n) if n > 0) {
                losing.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
    .await;
    let mut plan = plan(&[closing, echo]);
    routes(&mut plan)[0].filters = vec![
        FilterPlan::Jwt(JwtPlan {
            keys: JwtKeys::Secret {
                algorithm: "HS256".into(),
                secret: SECRET.to_vec(),
            },
            issuers: Vec::new(),
            audiences: Vec::new(),
            leeway: Duration::from_secs(5),
            forward: vec![("sub".into(), HeaderName::from_static("x-kullanici"))],
            keep_token: false,
        }),
        FilterPlan::RateLimit(RateLimitPlan {
            rate: 3,
            period: Duration::from_secs(3600),
            burst: 3,
            key: RateKey::ClientIp,
            global: None,
        }),
    ];
    let running = trafik_proxy::start(plan).unwrap();
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 300;
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &serde_json::json!({"sub": "M3", "exp": expires}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET).unwrap(),
    )
    .unwrap();
    let asking = |token: Option<&str>| {
        let mut request = Request::get("/takip/1")
            .header("host", "kargo.test")
            .header("x-kullanici", "M7");
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        request.body(Full::default()).unwrap()
    };
    let mut client = Client::connect(web(&running)).await;
    // Round robin gives the closing backend the first pick of at least one of the two.
    for remaining in ["2", "1"] {
        let answer = client.send(asking(Some(&token))).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        let seen = &answer.json()["headers"];
        assert_eq!(
            seen["x-kullanici"], "M3",
            "the claim, never the client's copy"
        );
        assert!(seen.get("authorization").is_none(), "{seen}");
        assert_eq!(answer.header("ratelimit-remaining"), Some(remaining));
    }
    assert!(lost.load(Ordering::Relaxed) >= 1, "no request was retried");

    let unsigned = client.send(asking(None)).await;
    assert_eq!(unsigned.status, 401);
    assert_eq!(unsigned.text(), "no bearer token\n");
    assert!(unsigned.header("www-authenticate").is_some());
    assert_eq!(client.send(asking(Some(&token))).await.status, 200);
    let over = client.send(asking(Some(&token))).await;
    assert_eq!(over.status, 429);
    assert!(over.header("retry-after").is_some());
    assert_eq!(over.header("ratelimit-remaining"), Some("0"));

    let status = status(&running).await;
    let web = &status["listeners"][0];
    assert_eq!(web["name"], "web");
    assert_eq!(web["through_pipeline"], 0, "{web}");
    assert_eq!(web["handed_to_hyper"], 0, "{web}");
    stop(running).await;
}

/// Reads a request head from `stream`, a byte at a time (what follows stays unread): its
/// request line, `None` at a close.
async fn request_line(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&head);
    Some(head.lines().next().unwrap_or("").to_owned())
}

/// A backend that closes a kept-alive connection on a request without answering may have acted
/// on it. The pipeline sends such a request again on a new connection only when it may be
/// repeated: a lost `POST` is the client's 502, sent once; a lost `GET` is answered from a new
/// connection.
#[tokio::test]
async fn a_request_a_reused_connection_lost_goes_again_only_when_it_may_be_repeated() {
    use std::sync::Arc;
    let heads = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = heads.clone();
    // Answers the first request on each connection, then reads the next one and closes.
    let backend = raw_backend(move |mut stream| {
        let seen = seen.clone();
        async move {
            for answered in [true, false] {
                let Some(line) = request_line(&mut stream).await else {
                    return;
                };
                seen.lock().unwrap().push(line);
                if !answered {
                    return;
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
            }
        }
    })
    .await;
    let mut plan = plan(&[backend]);
    routes(&mut plan)[0].filters = vec![FilterPlan::RequestBuffering {
        memory: 1024,
        most: u64::MAX,
    }];
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = Client::connect(web(&running)).await;
    assert_eq!(client.get("/takip/1").await.status, 200);
    let post = Request::post("/olay")
        .header("host", "kargo.test")
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(client.send(post).await.status, 502);
    let posts = |heads: &[String]| heads.iter().filter(|h| h.starts_with("POST")).count();
    assert_eq!(posts(&heads.lock().unwrap()), 1, "the POST went once");
    // A GET lost the same way goes on a new connection, whose backend answers it.
    let mut client = Client::connect(web(&running)).await;
    assert_eq!(client.get("/takip/2").await.status, 200);
    assert_eq!(client.get("/takip/3").await.status, 200);
    let gets = heads
        .lock()
        .unwrap()
        .iter()
        .filter(|h| h.starts_with("GET /takip/3"))
        .count();
    assert_eq!(gets, 2, "the lost GET went again");
    stop(running).await;
}

/// A backend that sent an interim answer (`103 Early Hints`) has the request: should it close
/// before the final answer, that is no stale connection's close, and the request does not go
/// again, on the fast path as in the pipeline (the client gets 502, the backend saw it once).
#[tokio::test]
async fn a_request_lost_after_an_interim_answer_does_not_go_again() {
    use std::sync::Arc;
    for filters in [
        vec![],
        vec![FilterPlan::RequestBuffering {
            memory: 1024,
            most: u64::MAX,
        }],
    ] {
        let heads = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let seen = heads.clone();
        // Answers the first request on each connection; to the next, 103 and a close.
        let backend = raw_backend(move |mut stream| {
            let seen = seen.clone();
            async move {
                for answer in [
                    &b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"[..],
                    b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\n",
                ] {
                    let Some(line) = request_line(&mut stream).await else {
                        return;
                    };
                    seen.lock().unwrap().push(line);
                    let _ = stream.write_all(answer).await;
                }
            }
        })
        .await;
        let mut plan = plan(&[backend]);
        plan.pools[0].retries = 0;
        let engine = match filters.is_empty() {
            true => "fast path",
            false => "pipeline",
        };
        routes(&mut plan)[0].filters = filters;
        let running = trafik_proxy::start(plan).unwrap();
        let mut client = Client::connect(web(&running)).await;
        assert_eq!(client.get("/takip/1").await.status, 200, "{engine}");
        assert_eq!(client.get("/takip/2").await.status, 502, "{engine}");
        let sent = heads
            .lock()
            .unwrap()
            .iter()
            .filter(|head| head.starts_with("GET /takip/2"))
            .count();
        assert_eq!(sent, 1, "{engine}: the GET went once");
        drop(client);
        stop(running).await;
    }
}
