//! What a client and a backend see through trafik: rewritten headers, kept-alive upstream
//! connections, routes, and the status trafik answers with when it cannot relay.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trafik_test_support::proxy::*;

#[tokio::test]
async fn forwarding_headers_are_added_and_hop_by_hop_headers_removed() {
    let echo = echo_server(Duration::ZERO).await;
    let running = trafik_proxy::start(plan(&[echo])).unwrap();
    let mut client = Client::connect(web(&running)).await;
    let answer = client
        .send(
            Request::get("/takip/TR-4821?ayrinti=1")
                .header("host", "kargo.test:8080")
                .header("connection", "x-client-secret")
                .header("x-client-secret", "do not forward")
                .header("te", "trailers")
                .header("x-forwarded-for", "6.6.6.6")
                .header("forwarded", "for=6.6.6.6")
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(answer.status, 200);
    let seen = answer.json();
    let headers = &seen["headers"];
    assert_eq!(seen["uri"], "/takip/TR-4821?ayrinti=1");
    assert_eq!(headers["host"], "kargo.test:8080", "Host passes unchanged");
    assert_eq!(
        headers["x-forwarded-for"], "127.0.0.1",
        "a forged value is replaced"
    );
    assert_eq!(
        headers["forwarded"],
        "for=127.0.0.1;proto=http;host=\"kargo.test:8080\""
    );
    assert_eq!(headers["x-forwarded-proto"], "http");
    assert_eq!(headers["x-forwarded-host"], "kargo.test:8080");
    assert_eq!(headers["via"], "1.1 trafik-test");
    for dropped in ["x-client-secret", "te", "connection"] {
        assert!(
            headers.get(dropped).is_none(),
            "{dropped} reached the backend"
        );
    }
    // And on the way back.
    assert_eq!(answer.header("via"), Some("1.1 trafik-test"));
    assert_eq!(answer.header("x-upstream-secret"), None);
    assert_eq!(answer.header("keep-alive"), None);
    stop(running).await;
}

#[tokio::test]
async fn trusted_forwarding_headers_are_extended() {
    let echo = echo_server(Duration::ZERO).await;
    let mut plan = plan(&[echo]);
    plan.client.trust_forwarded = true;
    let running = trafik_proxy::start(plan).unwrap();
    let answer = Client::connect(web(&running))
        .await
        .send(
            Request::get("/")
                .header("host", "kargo.test")
                .header("x-forwarded-for", "10.0.0.7")
                .header("via", "1.1 edge")
                .body(Full::default())
                .unwrap(),
        )
        .await;
    let headers = &answer.json()["headers"];
    assert_eq!(headers["x-forwarded-for"], "10.0.0.7, 127.0.0.1");
    assert_eq!(headers["via"], "1.1 edge, 1.1 trafik-test");
    stop(running).await;
}

#[tokio::test]
async fn six_client_connections_share_one_kept_alive_connection_per_replica() {
    // The course's layer-7 lesson: 6 client connections, 4 replicas, one worker.
    let replicas = replicas(4).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = plan(&addresses);
    plan.workers = 1;
    let running = trafik_proxy::start(plan).unwrap();
    let shares = [1, 2, 4, 8, 16, 32];
    for share in shares {
        let mut client = Client::connect(web(&running)).await;
        for n in 0..share {
            assert_eq!(client.get(&format!("/takip/TR-{n}")).await.status, 200);
        }
    }
    let status = status(&running).await;
    let backends = status["pools"][0]["backends"].as_array().unwrap();
    let requests: Vec<u64> = backends
        .iter()
        .map(|b| b["requests"].as_u64().unwrap())
        .collect();
    let connections: Vec<u64> = backends
        .iter()
        .map(|b| b["open_connections"].as_u64().unwrap())
        .collect();
    assert_eq!(requests, [16, 16, 16, 15], "one decision per request");
    assert_eq!(
        connections,
        [1, 1, 1, 1],
        "6 client connections became 4 upstream ones"
    );
    stop(running).await;
}

#[tokio::test]
async fn routes_split_reads_and_writes_into_separate_pools() {
    let replicas = replicas(4).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = plan(&addresses[..3]);
    plan.pools.push(pool("yazma", &addresses[3..]));
    *routes(&mut plan) = vec![route("/takip", "takip"), route("/olay", "yazma")];
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = Client::connect(web(&running)).await;
    for n in 1..=63 {
        let answer = if n % 5 == 0 {
            client
                .send(
                    Request::post("/olay")
                        .header("host", "kargo.test")
                        .body(Full::new(Bytes::from_static(b"{\"olay\":\"teslim\"}")))
                        .unwrap(),
                )
                .await
        } else {
            client.get("/takip/TR-1").await
        };
        assert!(answer.status == 200 || answer.status == 201);
    }
    assert_eq!(client.get("/baska").await.status, 404, "no route");
    let mut counts = Vec::new();
    for replica in &replicas {
        counts.push(get(replica.address(), "/sayac").await.json());
    }
    let requests: Vec<_> = counts
        .iter()
        .map(|c| c["istek"].as_u64().unwrap())
        .collect();
    assert_eq!(requests, [17, 17, 17, 12], "the course's read/write pools");
    assert!(
        counts[3]["yol"].get("/takip").is_none(),
        "no reads reach the write pool"
    );
    stop(running).await;
}

#[tokio::test]
async fn a_backend_slower_than_the_response_timeout_gives_504() {
    let slow = echo_server(Duration::from_secs(3)).await;
    let mut plan = plan(&[slow]);
    plan.pools[0].response_timeout = Duration::from_millis(200);
    let running = trafik_proxy::start(plan).unwrap();
    let answer = get(web(&running), "/").await;
    assert_eq!(answer.status, 504);
    assert_eq!(
        answer.text(),
        format!(
            "the backend did not answer in time: k1 ({slow}), no answer within the response timeout\n"
        )
    );
    let status = status(&running).await;
    assert_eq!(status["pools"][0]["backends"][0]["failures"], 1);
    assert_eq!(
        status["pools"][0]["unreachable"], 0,
        "it was reached, just slow"
    );
    stop(running).await;
}

#[tokio::test]
async fn a_malformed_request_gets_400_and_the_proxy_keeps_serving() {
    let replicas = replicas(1).await;
    let running = trafik_proxy::start(plan(&[replicas[0].address()])).unwrap();
    for garbage in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: nope\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
    ] {
        let mut stream = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
        stream.write_all(garbage).await.unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 400"),
            "{garbage:?} → {answer:?}"
        );
    }
    assert_eq!(get(web(&running), "/takip/TR-1").await.status, 200);
    stop(running).await;
}

#[tokio::test]
async fn stopping_drains_in_flight_requests_and_refuses_new_connections() {
    let slow = echo_server(Duration::from_secs(2)).await;
    let running = trafik_proxy::start(plan(&[slow])).unwrap();
    let address = web(&running);
    let in_flight = tokio::spawn(async move { get(address, "/yavas").await });
    // Stopped once the request is with the backend, which holds it for 2 s.
    wait_for_status(&running, |s| {
        s["pools"][0]["backends"][0]["active_connections"] == 1
    })
    .await;
    running.stop();
    // The order, not a duration: the listener closes before the request in flight is answered.
    while tokio::net::TcpStream::connect(address).await.is_ok() {
        assert!(
            !in_flight.is_finished(),
            "the listener still accepted after the request in flight was answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !in_flight.is_finished(),
        "the listener closed only after the request in flight was answered"
    );
    let answer = in_flight.await.unwrap();
    assert_eq!(answer.status, 200, "the request in flight finished");
    tokio::task::spawn_blocking(move || running.wait())
        .await
        .unwrap();
}

/// Reads what the proxy sends until it closes the connection (at most 10 s).
async fn until_closed(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut received));
    match read.await {
        Ok(Ok(_)) => Some(String::from_utf8_lossy(&received).into_owned()),
        _ => None,
    }
}

/// A drain on either engine: a request in flight is answered with `Connection: close`; a
/// request whose head had only partly arrived is read to its end and answered the same way,
/// even when the rest comes after the idle grace; a kept-alive connection between requests is
/// closed once the grace has passed.
#[tokio::test]
async fn a_drain_answers_every_started_request_with_connection_close() {
    for engine in [trafik_proxy::Engine::Trafik, trafik_proxy::Engine::Hyper] {
        let slow = echo_server(Duration::from_millis(300)).await;
        let mut plan = plan_on(engine, &[slow]);
        plan.client.header_read_timeout = Duration::from_secs(60);
        plan.drain_timeout = Duration::from_secs(60);
        let running = trafik_proxy::start(plan).unwrap();
        let address = web(&running);

        let mut idle = tokio::net::TcpStream::connect(address).await.unwrap();
        idle.write_all(b"GET /once HTTP/1.1\r\nHost: kargo.test\r\n\r\n")
            .await
            .unwrap();
        let mut answer = [0u8; 12];
        idle.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"HTTP/1.1 200", "{engine:?}");
        let mut half = tokio::net::TcpStream::connect(address).await.unwrap();
        half.write_all(b"GET /half HTTP/1.1\r\nHo").await.unwrap();
        let in_flight = tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
            stream
                .write_all(b"GET /in-flight HTTP/1.1\r\nHost: kargo.test\r\n\r\n")
                .await
                .unwrap();
            until_closed(&mut stream).await
        });
        wait_for_status(&running, |s| {
            s["pools"][0]["backends"][0]["active_connections"] == 1
        })
        .await;
        running.stop();
        let answer = in_flight
            .await
            .unwrap()
            .expect("the request in flight is answered");
        assert!(answer.starts_with("HTTP/1.1 200"), "{engine:?}: {answer}");
        assert!(
            answer.contains("\r\nconnection: close\r\n"),
            "{engine:?}: {answer}"
        );
        // The kept-alive connection with nothing on it closes once the grace has passed.
        let rest = until_closed(&mut idle).await;
        assert!(
            rest.is_some(),
            "{engine:?}: the idle connection stayed open"
        );
        // By now the grace has passed, and the half-arrived request is still answered.
        half.write_all(b"st: kargo.test\r\n\r\n").await.unwrap();
        let answer = until_closed(&mut half).await.unwrap_or_default();
        assert!(answer.starts_with("HTTP/1.1 200"), "{engine:?}: {answer:?}");
        assert!(
            answer.contains("\r\nconnection: close\r\n"),
            "{engine:?}: {answer}"
        );
        tokio::task::spawn_blocking(move || running.wait())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn the_metrics_endpoint_exposes_the_status_counters() {
    let replicas = replicas(2).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let running = trafik_proxy::start(plan(&addresses)).unwrap();
    tally(web(&running), 4).await;
    let metrics = admin_get(&running, "/metrics").await.text();
    let line = format!(
        "trafik_backend_decisions_total{{pool=\"takip\",backend=\"{}\",name=\"k1\"}} 2",
        addresses[0]
    );
    assert!(metrics.contains(&line), "{metrics}");
    assert!(metrics.contains("# TYPE trafik_backend_requests_total counter"));
    assert!(metrics.contains("trafik_pool_unreachable_total{pool=\"takip\"} 0"));
    assert_eq!(admin_get(&running, "/nope").await.status, 404);
    stop(running).await;
}

#[tokio::test]
async fn a_connection_with_no_bytes_moving_is_closed_after_the_idle_timeout() {
    let replicas = replicas(1).await;
    let mut plan = plan(&[replicas[0].address()]);
    plan.client.idle_timeout = Duration::from_secs(1);
    plan.client.header_read_timeout = Duration::from_secs(30);
    let running = trafik_proxy::start(plan).unwrap();

    // A kept-alive connection that answered once, then goes quiet.
    let mut stream = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    stream
        .write_all(b"GET /takip/TR-1 HTTP/1.1\r\nHost: kargo.test\r\n\r\n")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut received = Vec::new();
    // No upper bound on when it closes: waiting ten times the limit, far short of the 30 s
    // header timeout (the only other one that could close it), tells the idle timeout apart
    // without asking a busy machine to be quick.
    let read =
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut received)).await;
    assert!(
        read.is_ok(),
        "the idle connection was not closed within 10 s"
    );
    let elapsed = started.elapsed();
    assert!(String::from_utf8_lossy(&received).starts_with("HTTP/1.1 200"));
    assert!(
        elapsed >= Duration::from_millis(900),
        "closed after {elapsed:?}, before the limit"
    );
    stop(running).await;
}

/// Sends raw bytes on a fresh connection and returns the status line of the answer (empty if
/// the connection closed without one).
async fn raw_status(address: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 512];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk)).await {
            Ok(Ok(read)) if read > 0 => answer.extend_from_slice(&chunk[..read]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test]
async fn hostile_requests_get_an_answer_never_a_dropped_connection() {
    let replicas = replicas(2).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = plan(&addresses);
    plan.pools[0].sticky = Some(trafik_proxy::StickyPlan::Cookie {
        name: "trafik".into(),
        secret: b"k".to_vec(),
    });
    *routes(&mut plan) = vec![
        {
            let mut r = route("/", "takip");
            r.host = Some("kargo.test".into());
            r
        },
        route("/takip", "takip"),
    ];
    let running = trafik_proxy::start(plan).unwrap();
    let address = web(&running);
    let long_value = "x".repeat(16 * 1024);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // Hosts that are no host: 400 (RFC 9112 §3.2), never a panic or a forwarded guess.
        (b"GET /takip/1 HTTP/1.1\r\nHost: [::1\r\nConnection: close\r\n\r\n".to_vec(), "HTTP/1.1 400"),
        (b"GET /takip/1 HTTP/1.1\r\nHost: [\r\nConnection: close\r\n\r\n".to_vec(), "HTTP/1.1 400"),
        (b"GET /takip/1 HTTP/1.1\r\nHost: :\r\nConnection: close\r\n\r\n".to_vec(), "HTTP/1.1 400"),
        (b"GET /takip/1 HTTP/1.1\r\nHost: [::1]:8080\r\nConnection: close\r\n\r\n".to_vec(), "HTTP/1.1 200"),
        (b"GET /x HTTP/1.1\r\nHost: KARGO.test:99999\r\nConnection: close\r\n\r\n".to_vec(), "HTTP/1.1 404"),
        (b"GET http://kargo.test/takip/2 HTTP/1.1\r\nHost: kargo.test\r\nConnection: close\r\n\r\n".to_vec(), "HTTP/1.1 200"),
        (b"GET /takip/3 HTTP/1.0\r\n\r\n".to_vec(), "HTTP/1.0 200"),
        (b"GET /baska HTTP/1.1\r\nHost: baska.test\r\nConnection: close\r\n\r\n".to_vec(), "HTTP/1.1 404"),
        (
            b"GET /takip/4 HTTP/1.1\r\nHost: a\r\nCookie: trafik=\xff\xfe; trafik=0000000000000000ffffffffffffffffffffffffffffffff\r\nConnection: close\r\n\r\n".to_vec(),
            "HTTP/1.1 200",
        ),
        (
            format!("GET /takip/5 HTTP/1.1\r\nHost: a\r\nX-Uzun: {long_value}\r\nConnection: close\r\n\r\n").into_bytes(),
            "HTTP/1.1 200",
        ),
        (b"GET /takip/6 HTTP/1.1\r\nHost: a\r\nConnection: close, x-a, \xff\r\nX-A: 1\r\n\r\n".to_vec(), "HTTP/1.1 200"),
    ];
    for (request, expected) in cases {
        let status = raw_status(address, &request).await;
        assert!(
            status.starts_with(expected),
            "{:?} → {status:?}",
            String::from_utf8_lossy(&request)
        );
    }
    stop(running).await;
}
