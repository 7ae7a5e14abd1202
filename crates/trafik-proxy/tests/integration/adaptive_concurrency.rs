//! A pool's adaptive concurrency limit through a real proxy in front of a real upstream whose
//! latency the test turns up and down: the limit falls when the answers slow down (requests
//! over it get the fast 503 with `x-trafik-reason: concurrency-limit`) and comes back when they
//! speed up again. `/status` and `/metrics` show it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use trafik_balance::ConcurrencyRules;
use trafik_test_support::proxy::{
    Client, LOOPBACK_ANY_PORT, admin_get, hyper_backend, plan, status, stop, web,
};

/// An upstream that waits `delay` milliseconds (changed while it runs) before each answer.
async fn slow_server(delay: Arc<AtomicU64>) -> SocketAddr {
    hyper_backend(move |_request| {
        let wait = Duration::from_millis(delay.load(Ordering::Relaxed));
        async move {
            tokio::time::sleep(wait).await;
            Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        }
    })
    .await
}

/// The upstream's usual wait: well above the noise of a loaded machine, so only the test's
/// slowdown moves the limit down.
const FAST_MS: u64 = 10;
const INITIAL: u32 = 16;

/// The pool's limit as `/status` shows it.
async fn limit(running: &trafik_proxy::Running) -> u64 {
    status(running).await["pools"][0]["adaptive_concurrency"]["limit"]
        .as_u64()
        .expect("the pool shows its limit")
}

/// `clients` kept-alive clients each send up to `each` GETs, until `done` holds for the
/// limit; returns the 503 reasons seen and whether `done` held.
async fn load_until(
    running: &trafik_proxy::Running,
    clients: usize,
    each: usize,
    done: impl Fn(u64) -> bool,
) -> (Vec<String>, bool) {
    let address = web(running);
    let mut reasons = Vec::new();
    for _round in 0..each / 5 {
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                tokio::spawn(async move {
                    let mut client = Client::connect(address).await;
                    let mut reasons = Vec::new();
                    for _ in 0..5 {
                        let answer = client.get("/adaptive").await;
                        match answer.status {
                            200 => {}
                            503 => reasons.push(
                                answer
                                    .header("x-trafik-reason")
                                    .unwrap_or("none")
                                    .to_owned(),
                            ),
                            other => panic!("unexpected {other}: {}", answer.text()),
                        }
                    }
                    reasons
                })
            })
            .collect();
        for task in tasks {
            reasons.extend(task.await.unwrap());
        }
        if done(limit(running).await) {
            return (reasons, true);
        }
    }
    (reasons, false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_falls_when_latency_grows_and_recovers_when_it_falls_back() {
    let delay = Arc::new(AtomicU64::new(FAST_MS));
    let backend = slow_server(delay.clone()).await;
    let mut plan = plan(&[backend]);
    plan.pools[0].adaptive_concurrency = Some(ConcurrencyRules {
        min_limit: 2,
        initial_limit: INITIAL,
        // Four times the baseline before it shrinks: a loaded machine's hiccups stay below,
        // the test's twentyfold slowdown far above.
        tolerance: 4.0,
        ..ConcurrencyRules::default()
    });
    let running = trafik_proxy::start(plan).unwrap();

    // Fast answers with the limit in use: it holds or grows (a loaded machine's stall may
    // cost it a little, never half).
    let (_, _) = load_until(&running, 16, 20, |_| false).await;
    let fast = limit(&running).await;
    assert!(
        fast >= u64::from(INITIAL) / 2,
        "fast answers shrank the limit to {fast}"
    );

    // Answers twenty times slower: the limit falls below the clients, and those over it are
    // turned away (the fast phase may have grown it to twice the clients: half of that is not
    // yet below them). Should it cross below at a round's very end, one more round sees it.
    delay.store(FAST_MS * 20, Ordering::Relaxed);
    let (mut reasons, fell) = load_until(&running, 16, 200, |now| now * 2 < fast && now < 16).await;
    if reasons.is_empty() {
        reasons = load_until(&running, 16, 5, |_| true).await.0;
    }
    let slow = limit(&running).await;
    assert!(fell, "the limit stayed at {slow} (from {fast})");
    assert!(!reasons.is_empty(), "nobody was over the limit");
    assert!(
        reasons.iter().all(|r| r == "concurrency-limit"),
        "{reasons:?}"
    );
    let pool = &status(&running).await["pools"][0]["adaptive_concurrency"];
    assert!(
        pool["rejected"].as_u64().unwrap() >= reasons.len() as u64,
        "{pool}"
    );
    assert_eq!(pool["in_flight"], 0, "{pool}");

    // Fast again: it recovers to where the fast phase left it, or to where it started (16
    // clients keep at most 16 in flight, so it grows no further than about twice that).
    delay.store(FAST_MS, Ordering::Relaxed);
    let target = fast.min(u64::from(INITIAL));
    let (_, recovered) = load_until(&running, 16, 400, |now| now >= target).await;
    let after = limit(&running).await;
    assert!(
        recovered,
        "the limit came back only to {after} (from {slow}, was {fast})"
    );

    let metrics = admin_get(&running, "/metrics").await.text();
    assert!(
        metrics.contains(&format!(
            "trafik_pool_concurrency_limit{{pool=\"takip\"}} {after}"
        )),
        "{metrics}"
    );
    assert!(metrics.contains("trafik_pool_concurrency_rejected_total{pool=\"takip\"}"));
    stop(running).await;
}

/// An upstream whose first answer sends its head and two of its ten body bytes, then holds the
/// rest until the test ends; every later one answers at once.
async fn first_answer_held_open() -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(LOOPBACK_ANY_PORT)
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut stream, _)) = listener.accept().await {
            let held = std::mem::replace(&mut first, false);
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                if !trafik_test_support::proxy::read_head(&mut stream).await {
                    return;
                }
                if held {
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nab")
                        .await;
                    // Holds the rest of the body until the client goes away.
                    let _ = stream.read(&mut buffer).await;
                } else {
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                }
            });
        }
    });
    address
}

/// A request holds its place under the limit until its answer's head: the body is the
/// client's to read, so a long download (or a WebSocket) does not turn others away.
#[tokio::test]
async fn an_answer_still_streaming_holds_no_place_under_the_limit() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backend = first_answer_held_open().await;
    let mut plan = plan(&[backend]);
    plan.pools[0].adaptive_concurrency = Some(ConcurrencyRules {
        min_limit: 1,
        initial_limit: 1,
        max_limit: 1,
        ..ConcurrencyRules::default()
    });
    // The held answer is still open when the test stops.
    plan.drain_timeout = Duration::from_millis(100);
    let running = trafik_proxy::start(plan).unwrap();
    let mut downloading = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    downloading
        .write_all(b"GET /indir HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    while !got.ends_with(b"\r\n\r\nab") {
        let mut buffer = [0u8; 1024];
        let n = downloading.read(&mut buffer).await.unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buffer[..n]);
    }
    let mut client = Client::connect(web(&running)).await;
    let answer = client.get("/takip").await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    drop(downloading);
    stop(running).await;
}
