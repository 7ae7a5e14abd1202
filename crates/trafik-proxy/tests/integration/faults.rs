//! Faults of backends and of clients, each with what trafik does about it: a request a backend
//! lost goes to another, a request smuggled past the framing never reaches a backend, a loop
//! back into trafik ends at once, and a client's fault is never charged to a backend.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trafik_proxy::Engine;
use trafik_test_support::proxy::*;

/// What a [`recording_backend`] does once it has a request head.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers `200 ok` and waits for the next request.
    Answer,
    /// Closes the connection without a word, as a replica killed mid-request does.
    HangUp,
}

/// A raw backend that keeps every byte it received, across connections, in arrival order.
async fn recording_backend(behaviour: Behaviour) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let recording = received.clone();
    let address = raw_backend(move |mut stream| {
        let recording = recording.clone();
        async move {
            let mut buffer = [0u8; 4096];
            let mut head = Vec::new();
            loop {
                let read = match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(read) => read,
                };
                recording.lock().unwrap().extend_from_slice(&buffer[..read]);
                head.extend_from_slice(&buffer[..read]);
                while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                    head.drain(..end + 4);
                    match behaviour {
                        Behaviour::HangUp => return,
                        Behaviour::Answer => {
                            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                            if stream.write_all(answer).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        }
    })
    .await;
    (address, received)
}

fn text(bytes: &Mutex<Vec<u8>>) -> String {
    String::from_utf8_lossy(&bytes.lock().unwrap()).into_owned()
}

/// Every way to make two readers disagree on where a request body ends, with what the client
/// got and what the backend received. A second request hides in each body (`/kacak`): it must
/// never reach the backend as a request of its own.
#[tokio::test]
async fn the_smuggling_table() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        the_smuggling_table_on(engine).await;
    }
}

async fn the_smuggling_table_on(engine: Engine) {
    let (backend, received) = recording_backend(Behaviour::Answer).await;
    let running = trafik_proxy::start(plan_on(engine, &[backend])).unwrap();
    const SMUGGLED: &str = "GET /kacak HTTP/1.1\r\nHost: a\r\n\r\n";
    // Content-Length beside Transfer-Encoding is not in the table: hyper drops the length and
    // closes after the answer (RFC 9112 §6.3), see the test below.
    let cases: [(&str, String, &str); 6] = [
        (
            "two Content-Length values",
            format!(
                "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 33\r\n\r\n{SMUGGLED}"
            ),
            "400",
        ),
        (
            "Transfer-Encoding chunked on two lines",
            format!(
                "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{SMUGGLED}"
            ),
            "400",
        ),
        (
            "Transfer-Encoding identity, chunked",
            format!(
                "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n{SMUGGLED}"
            ),
            "400",
        ),
        (
            "a space before the colon",
            format!(
                "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n{SMUGGLED}"
            ),
            "400",
        ),
        (
            "an invalid chunk size",
            format!(
                "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{SMUGGLED}"
            ),
            "400",
        ),
        (
            "a chunk size past 64 bits",
            format!(
                "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\n{SMUGGLED}"
            ),
            "400",
        ),
    ];
    let mut table = String::from("case | client got | backend received\n");
    for (case, request, status) in &cases {
        let before = received.lock().unwrap().len();
        let answer = raw_exchange(web(&running), request.as_bytes()).await;
        let got = received.lock().unwrap()[before..].to_vec();
        let got = String::from_utf8_lossy(&got).into_owned();
        let first_line = got.lines().next().unwrap_or("nothing");
        table.push_str(&format!(
            "{case} | {} | {first_line}\n",
            answer.lines().next().unwrap_or("")
        ));
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{case}: {answer}"
        );
        assert!(!got.contains("/kacak"), "{case}: the backend got {got:?}");
        assert!(
            !got.contains("POST /x"),
            "{case}: forwarded ambiguously: {got:?}"
        );
    }
    eprintln!("{table}");
    assert_eq!(
        status(&running).await["pools"][0]["backends"][0]["failures"],
        0
    );
    stop(running).await;
}

/// Content-Length beside chunked: the body is read by its chunks alone (the length dropped),
/// forwarded framed one way, and the connection closed after the answer, so what follows the
/// last chunk is never read as a request.
#[tokio::test]
async fn a_request_framed_twice_is_read_by_its_chunks_and_its_connection_closed() {
    let (backend, received) = recording_backend(Behaviour::Answer).await;
    let running = trafik_proxy::start(plan(&[backend])).unwrap();
    let answer = raw_exchange(
        web(&running),
        b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /kacak HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert_eq!(answer.matches("HTTP/1.1").count(), 1, "{answer}");
    let got = text(&received);
    assert!(got.contains("transfer-encoding: chunked\r\n"), "{got}");
    assert!(!got.contains("content-length"), "{got}");
    assert!(!got.contains("/kacak"), "{got}");
    stop(running).await;
}

/// A body that ends early (a client that half-closes after a short body, or sends a broken
/// chunk) is the client's fault: 400, and the backend's failure count does not move.
#[tokio::test]
async fn a_body_the_client_broke_is_a_400_not_charged_to_the_backend() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        a_body_the_client_broke_is_a_400_not_charged_to_the_backend_on(engine).await;
    }
}

async fn a_body_the_client_broke_is_a_400_not_charged_to_the_backend_on(engine: Engine) {
    // A backend that answers only a whole body: one that answered on the head could win the
    // race with the client's broken body, and its 200 would be relayed.
    let backend = body_reading_server().await;
    let running = trafik_proxy::start(plan_on(engine, &[backend])).unwrap();
    let mut stream = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    stream
        .write_all(b"POST /olay HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc")
        .await
        .unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let broken_chunk = raw_exchange(
        web(&running),
        b"POST /olay HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n",
    )
    .await;
    assert!(broken_chunk.starts_with("HTTP/1.1 400"), "{broken_chunk}");
    let backend = &status(&running).await["pools"][0]["backends"][0];
    assert_eq!(backend["failures"], 0, "{backend}");
    stop(running).await;
}

/// A backend that takes a GET and hangs up (killed mid-request, or a kept-alive connection that
/// died): the GET goes to another backend. A POST with a body is not sent twice.
#[tokio::test]
async fn a_get_a_backend_lost_goes_to_another_backend() {
    let (dying, lost) = recording_backend(Behaviour::HangUp).await;
    let (healthy, answered) = recording_backend(Behaviour::Answer).await;
    let running = trafik_proxy::start(plan(&[dying, healthy])).unwrap();
    let mut statuses = Vec::new();
    for n in 0..6 {
        statuses.push(get(web(&running), &format!("/takip/{n}")).await.status);
    }
    assert_eq!(statuses, [200; 6]);
    assert!(text(&lost).contains("GET /takip/"));
    assert_eq!(text(&answered).matches("GET /takip/").count(), 6);
    // A request with a body is gone once sent: it is answered 502, never replayed.
    let mut posted = Vec::new();
    for _ in 0..2 {
        let answer = raw_exchange(
            web(&running),
            b"POST /olay HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        )
        .await;
        posted.push(answer.get(..12).unwrap_or("").to_owned());
    }
    posted.sort();
    assert_eq!(posted, ["HTTP/1.1 200", "HTTP/1.1 502"]);
    let posts =
        text(&lost).matches("POST /olay").count() + text(&answered).matches("POST /olay").count();
    assert_eq!(posts, 2, "each POST reached exactly one backend");
    stop(running).await;
}

/// A backend that sends an answer's head and closes before its first body byte lost the
/// request: a GET goes to another backend and its client gets that one's whole answer, on both
/// engines; every request that went to it is a failure in its counters.
#[tokio::test]
async fn a_get_whose_answer_is_cut_before_its_body_goes_to_another_backend() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        let cutting =
            answering_then_closing("HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n").await;
        let replicas = replicas(1).await;
        let running =
            trafik_proxy::start(plan_on(engine, &[cutting, replicas[0].address()])).unwrap();
        for n in 0..6 {
            let request =
                format!("GET /takip/{n} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
            let answer = raw_exchange(web(&running), request.as_bytes()).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{engine:?}: {answer}");
            assert!(answer.contains("x-kopya: k1"), "{engine:?}: {answer}");
        }
        let status = status(&running).await;
        let cutting = &status["pools"][0]["backends"][0];
        assert!(
            cutting["decisions"].as_u64() > Some(0),
            "{engine:?}: {cutting}"
        );
        assert_eq!(
            cutting["failures"], cutting["decisions"],
            "{engine:?}: {cutting}"
        );
        stop(running).await;
    }
}

/// Connecting failed, so nothing was sent: a POST goes to the next backend like a GET.
#[tokio::test]
async fn a_post_whose_connect_failed_goes_to_another_backend() {
    let closed = refusing_port();
    let (healthy, answered) = recording_backend(Behaviour::Answer).await;
    let running = trafik_proxy::start(plan(&[closed.address, healthy])).unwrap();
    for _ in 0..4 {
        let answer = raw_exchange(
            web(&running),
            b"POST /olay HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    assert_eq!(text(&answered).matches("POST /olay").count(), 4);
    stop(running).await;
}

/// trafik's own 502 names the backend that failed and the class of its failure, the same on
/// both engines, and nothing more (no system message).
#[tokio::test]
async fn a_502_names_the_backend_and_why_on_both_engines() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        let closed = refusing_port();
        let running = trafik_proxy::start(plan_on(engine, &[closed.address])).unwrap();
        let answer = get(web(&running), "/takip/TR-1").await;
        assert_eq!(answer.status, 502, "{engine:?}");
        assert_eq!(
            answer.text(),
            format!(
                "could not connect to a backend: k1 ({}), connection refused\n",
                closed.address
            ),
            "{engine:?}"
        );
        stop(running).await;

        let (dying, _) = recording_backend(Behaviour::HangUp).await;
        let running = trafik_proxy::start(plan_on(engine, &[dying])).unwrap();
        let answer = get(web(&running), "/takip/TR-1").await;
        assert_eq!(answer.status, 502, "{engine:?}");
        assert_eq!(
            answer.text(),
            format!(
                "the backend closed the connection without answering: k1 ({dying}), connection closed or reset before an answer\n"
            ),
            "{engine:?}"
        );
        stop(running).await;
    }
}

/// A bodiless POST a backend lost may have been acted on: it goes to another backend only
/// where the route says repeating it is safe.
#[tokio::test]
async fn a_lost_post_is_sent_again_only_where_the_route_allows_it() {
    let (dying, _) = recording_backend(Behaviour::HangUp).await;
    let (healthy, _) = recording_backend(Behaviour::Answer).await;
    let post = b"POST /olay HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let running = trafik_proxy::start(plan(&[dying, healthy])).unwrap();
    let answer = raw_exchange(web(&running), post).await;
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    stop(running).await;

    let mut plan = plan(&[dying, healthy]);
    routes(&mut plan)[0].target = trafik_proxy::TargetPlan::Pool {
        pool: "takip".into(),
        retry_non_idempotent: true,
    };
    let running = trafik_proxy::start(plan).unwrap();
    let answer = raw_exchange(web(&running), post).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stop(running).await;
}

/// A pool whose backend is trafik's own listener: the request comes back carrying trafik's name
/// in `Via` and is answered 508 instead of forwarded again.
#[tokio::test]
async fn a_backend_that_leads_back_into_trafik_ends_in_508() {
    let own: SocketAddr = {
        let listener = std::net::TcpListener::bind(LOOPBACK_ANY_PORT).unwrap();
        listener.local_addr().unwrap()
    };
    let mut plan = plan(&[own]);
    plan.listeners[0].address = own;
    let running = trafik_proxy::start(plan).unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), get(own, "/takip/1"))
        .await
        .expect("the request looped");
    assert_eq!(answer.status, 508, "{}", answer.text());
    assert!(answer.text().contains("Via"), "{}", answer.text());
    stop(running).await;
}

/// A page on any name can point that name at 127.0.0.1 (DNS rebinding) and read the admin API
/// as its own origin; the admin API answers only to an address or localhost.
#[tokio::test]
async fn the_admin_api_answers_only_to_its_address_or_localhost() {
    let (backend, _) = recording_backend(Behaviour::Answer).await;
    let running = trafik_proxy::start(plan(&[backend])).unwrap();
    let admin = running.admin_address().unwrap();
    let ask = |host: String| {
        let request = format!("GET /status HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        async move { raw_exchange(admin, request.as_bytes()).await }
    };
    let foreign = ask(format!("rebound.example:{}", admin.port())).await;
    assert!(foreign.starts_with("HTTP/1.1 403"), "{foreign}");
    assert!(!foreign.contains("pools"), "{foreign}");
    for own in [admin.to_string(), format!("localhost:{}", admin.port())] {
        let answer = ask(own).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    stop(running).await;
}

/// A status the pool retries sends a GET to another backend; one with `Retry-After` reaches
/// the client, which is told when to ask again.
#[tokio::test]
async fn answers_with_a_retried_status_go_to_another_backend() {
    let unavailable = answering("HTTP/1.1 503 X\r\ncontent-length: 2\r\n\r\nno").await;
    let (healthy, _) = recording_backend(Behaviour::Answer).await;
    let mut plan = plan(&[unavailable, healthy]);
    plan.pools[0].retry.statuses = vec![503];
    let running = trafik_proxy::start(plan).unwrap();
    let (_, failed) = tally(web(&running), 6).await;
    assert!(failed.is_empty(), "{failed:?}");
    // The retry's pick moves round robin's turn on, so each request meets the 503 first.
    assert_eq!(status(&running).await["pools"][0]["retries"], 6);
    assert_eq!(
        handed_to_hyper(&running).await,
        0,
        "served by the own engine"
    );
    stop(running).await;

    let later = answering("HTTP/1.1 503 X\r\nretry-after: 30\r\ncontent-length: 2\r\n\r\nno").await;
    let mut plan = trafik_test_support::proxy::plan(&[later, healthy]);
    plan.pools[0].retry.statuses = vec![503];
    let running = trafik_proxy::start(plan).unwrap();
    let answer = get(web(&running), "/takip/1").await;
    assert_eq!(answer.status, 503);
    assert_eq!(answer.header("retry-after"), Some("30"));
    stop(running).await;
}

/// Every backend refuses: each request would be tried three times, but the budget lets
/// retries add at most a fifth of the requests.
#[tokio::test]
async fn the_retry_budget_holds_while_every_backend_fails() {
    let closed: Vec<RefusingPort> = (0..3).map(|_| refusing_port()).collect();
    let addresses: Vec<SocketAddr> = closed.iter().map(|port| port.address).collect();
    let mut plan = plan(&addresses);
    plan.pools[0].retries = 2;
    plan.pools[0].retry.budget_floor = 0;
    let running = trafik_proxy::start(plan).unwrap();
    let (_, failed) = tally(web(&running), 100).await;
    assert_eq!(failed.len(), 100);
    let pool = &status(&running).await["pools"][0];
    let sent = pool["retries"].as_u64().unwrap();
    let refused = pool["retries_refused"].as_u64().unwrap();
    assert!((19..=21).contains(&sent), "{pool}");
    assert!(refused >= 80, "{pool}");
    let tries: u64 = pool["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["decisions"].as_u64().unwrap())
        .sum();
    assert_eq!(tries, 100 + sent, "{pool}");
    stop(running).await;
}

/// A head with more fields or more bytes than the listener allows gets 431 before any backend
/// is asked.
#[tokio::test]
async fn a_request_head_past_the_limits_gets_431() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        a_request_head_past_the_limits_gets_431_on(engine).await;
    }
}

async fn a_request_head_past_the_limits_gets_431_on(engine: Engine) {
    let (backend, received) = recording_backend(Behaviour::Answer).await;
    let mut plan = plan_on(engine, &[backend]);
    plan.client.limits = trafik_proxy::HeadLimits {
        headers: 10,
        bytes: 8 * 1024,
        ..trafik_proxy::HeadLimits::default()
    };
    let running = trafik_proxy::start(plan).unwrap();
    let with_fields = |count: usize| {
        let fields: String = (0..count).map(|n| format!("x-alan-{n}: 1\r\n")).collect();
        format!("GET /takip/1 HTTP/1.1\r\nHost: a\r\n{fields}Connection: close\r\n\r\n")
    };
    let within = raw_exchange(web(&running), with_fields(7).as_bytes()).await;
    assert!(within.starts_with("HTTP/1.1 200"), "{within}");
    let many = raw_exchange(web(&running), with_fields(20).as_bytes()).await;
    assert!(many.starts_with("HTTP/1.1 431"), "{many}");
    let long = format!(
        "GET /takip/2 HTTP/1.1\r\nHost: a\r\nx-uzun: {}\r\nConnection: close\r\n\r\n",
        "u".repeat(9 * 1024)
    );
    let long = raw_exchange(web(&running), long.as_bytes()).await;
    assert!(long.starts_with("HTTP/1.1 431"), "{long}");
    assert_eq!(text(&received).matches("GET /takip/").count(), 1);
    stop(running).await;
}

/// A circuit breaker: with one request in flight allowed per backend, a second one at the same
/// time is answered 503 at once, with the reason, instead of queueing behind the first.
#[tokio::test]
async fn a_backend_at_its_request_limit_is_passed_over_and_then_503() {
    let slow = echo_server(Duration::from_millis(500)).await;
    let mut plan = plan(&[slow]);
    plan.pools[0].max_requests_per_backend = 1;
    let running = trafik_proxy::start(plan).unwrap();
    let address = web(&running);
    let first = tokio::spawn(async move { get(address, "/takip/1").await.status });
    // The first request is in flight once the backend holds it.
    wait_for_status(&running, |s| {
        s["pools"][0]["backends"][0]["active_connections"] == 1
    })
    .await;
    let second = get(address, "/takip/2").await;
    assert_eq!(second.status, 503);
    assert_eq!(second.header("x-trafik-reason"), Some("backends-at-limit"));
    assert_eq!(first.await.unwrap(), 200);
    let pool = &status(&running).await["pools"][0];
    assert_eq!(pool["at_limit"], 1, "{pool}");
    assert_eq!(pool["backends"][0]["failures"], 0, "{pool}");
    stop(running).await;
}

/// The pending queue: with one request in flight allowed and one waiting place, the second
/// request waits for the first and is served; a third while both are held gets 503 at once, and
/// one that waits longer than `queue_timeout` gets 503 too, each with its reason.
#[tokio::test]
async fn requests_wait_in_the_pool_queue_for_a_backend_below_its_limit() {
    let slow = echo_server(Duration::from_millis(600)).await;
    let mut plan = plan(&[slow]);
    plan.pools[0].max_requests_per_backend = 1;
    plan.pools[0].max_pending = 1;
    plan.pools[0].queue_timeout = Duration::from_secs(20);
    let running = trafik_proxy::start(plan).unwrap();
    let address = web(&running);
    let first = tokio::spawn(async move { get(address, "/takip/1").await.status });
    wait_for_status(&running, |s| {
        s["pools"][0]["backends"][0]["active_connections"] == 1
    })
    .await;
    let second = tokio::spawn(async move { get(address, "/takip/2").await.status });
    wait_for_status(&running, |s| s["pools"][0]["queue"]["pending"] == 1).await;
    let third = get(address, "/takip/3").await;
    assert_eq!(third.status, 503);
    assert_eq!(third.header("x-trafik-reason"), Some("queue-full"));
    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(second.await.unwrap(), 200, "the queued request is served");
    let queue = &status(&running).await["pools"][0]["queue"];
    assert_eq!(queue["queued"], 1, "{queue}");
    assert_eq!(queue["full"], 1, "{queue}");
    assert_eq!(queue["timed_out"], 0, "{queue}");
    stop(running).await;

    let mut plan = trafik_test_support::proxy::plan(&[slow]);
    plan.pools[0].max_requests_per_backend = 1;
    plan.pools[0].max_pending = 4;
    plan.pools[0].queue_timeout = Duration::from_millis(50);
    let running = trafik_proxy::start(plan).unwrap();
    let address = web(&running);
    let first = tokio::spawn(async move { get(address, "/takip/1").await.status });
    wait_for_status(&running, |s| {
        s["pools"][0]["backends"][0]["active_connections"] == 1
    })
    .await;
    let late = get(address, "/takip/2").await;
    assert_eq!(late.status, 503);
    assert_eq!(late.header("x-trafik-reason"), Some("queue-timeout"));
    assert_eq!(first.await.unwrap(), 200);
    assert_eq!(status(&running).await["pools"][0]["queue"]["timed_out"], 1);
    stop(running).await;
}

/// A body trickled slower than the listener's minimum rate (slowloris on the body) is cut off
/// with 408 after the grace period, and the backend is not blamed.
#[tokio::test]
async fn a_body_slower_than_the_minimum_rate_gets_408() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        a_body_slower_than_the_minimum_rate_gets_408_on(engine).await;
    }
}

async fn a_body_slower_than_the_minimum_rate_gets_408_on(engine: Engine) {
    let backend = body_reading_server().await;
    let mut plan = plan_on(engine, &[backend]);
    plan.client.limits.min_body_rate = 1000;
    let running = trafik_proxy::start(plan).unwrap();
    let mut stream = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    stream
        .write_all(b"POST /olay HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\nabc")
        .await
        .unwrap();
    let trickle = async {
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if stream.write_all(b"x").await.is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), trickle).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let backend = &status(&running).await["pools"][0]["backends"][0];
    assert_eq!(backend["failures"], 0, "{backend}");
    // A body at a normal pace passes.
    let posted = raw_exchange(
        web(&running),
        b"POST /olay HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
    )
    .await;
    assert!(posted.starts_with("HTTP/1.1 200"), "{posted}");
    stop(running).await;
}

/// trafik's own answer to a `HEAD` names its length and sends no body (RFC 9110 §9.3.2), so the
/// connection carries the next request: what follows the answer's head is the next answer.
#[tokio::test]
async fn an_error_answer_to_a_head_request_has_no_body() {
    let dead = std::net::TcpListener::bind(LOOPBACK_ANY_PORT)
        .unwrap()
        .local_addr()
        .unwrap();
    let mut plan = plan(&[dead]);
    plan.pools[0].retries = 0;
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    client
        .write_all(b"HEAD /takip/1 HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = client.read(&mut buffer).await.unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buffer[..n]);
    }
    client
        .write_all(b"GET /takip/2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    client.read_to_end(&mut seen).await.unwrap();
    let text = String::from_utf8_lossy(&seen);
    let first_end = text.find("\r\n\r\n").unwrap() + 4;
    assert!(text.starts_with("HTTP/1.1 502"), "{text}");
    assert!(text.contains("content-length: "), "{text}");
    assert!(
        text[first_end..].starts_with("HTTP/1.1 502"),
        "a body followed the HEAD answer: {text}"
    );
    stop(running).await;
}
