//! Defects a review of the core found, each pinned by the behaviour a user expects.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::HeaderName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trafik_proxy::{HashKey, StickyPlan};
use trafik_test_support::proxy::*;

#[tokio::test]
async fn round_robin_keeps_exact_shares_when_a_retry_skips_a_stopped_replica() {
    // Three replicas, k2 stopped, no health checks, the default single retry: the course's
    // balancer rotates over k1 and k3, half each.
    let mut replicas = replicas(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let running = trafik_proxy::start(plan(&addresses)).unwrap();
    replicas.remove(1).stop().await;
    let (by_replica, failures) = tally(web(&running), 300).await;
    assert!(failures.is_empty(), "{failures:?}");
    let want: BTreeMap<String, usize> = [("k1".to_owned(), 150), ("k3".to_owned(), 150)].into();
    assert_eq!(by_replica, want);
    stop(running).await;
}

#[tokio::test]
async fn a_backend_in_two_pools_shares_its_idle_connections() {
    let (backend, connections) = counting_server().await;
    let mut plan = plan(&[backend]);
    plan.workers = 1;
    plan.pools.push(pool("yazma", &[backend]));
    *routes(&mut plan) = vec![route("/takip", "takip"), route("/olay", "yazma")];
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = Client::connect(web(&running)).await;
    for path in ["/takip/1", "/olay", "/takip/2", "/olay"] {
        assert_eq!(client.get(path).await.status, 200);
    }
    assert_eq!(
        connections.accepted.load(Ordering::SeqCst),
        1,
        "sequential requests through two pools reuse one upstream connection"
    );
    stop(running).await;
}

async fn get_with_key(address: std::net::SocketAddr, key: &str) -> u16 {
    let mut client = Client::connect(address).await;
    let request = http::Request::get("/takip/1")
        .header("host", "kargo.test")
        .header("x-istemci", key)
        .body(http_body_util::Full::default())
        .unwrap();
    client.send(request).await.status
}

#[tokio::test]
async fn key_stickiness_counts_sessions_not_requests() {
    for sticky in [
        StickyPlan::Modulo,
        StickyPlan::Consistent { virtual_nodes: 100 },
    ] {
        let mut replicas = replicas(3).await;
        let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
        let mut plan = plan(&addresses);
        plan.pools[0].hash_key = Some(HashKey::Header(HeaderName::from_static("x-istemci")));
        plan.pools[0].sticky = Some(sticky.clone());
        plan.pools[0].health = Some(course_health_check());
        let running = trafik_proxy::start(plan).unwrap();
        let clients: Vec<String> = (0..12).map(|i| format!("musteri-{i}")).collect();
        for _ in 0..3 {
            for client in &clients {
                assert_eq!(get_with_key(web(&running), client).await, 200);
            }
        }
        let counters = &status(&running).await["pools"][0]["sticky"];
        assert_eq!(
            counters["bound"], 12,
            "{sticky:?}: twelve clients, bound once each"
        );
        assert_eq!(counters["lost"], 0);

        replicas.remove(0).stop().await;
        wait_for_status(&running, |s| {
            s["pools"][0]["backends"][0]["healthy"] == false
        })
        .await;
        let before = status(&running).await["pools"][0]["backends"][0]["requests"].clone();
        let homed_on_k1 = before.as_u64().unwrap() / 3;
        for _ in 0..3 {
            for client in &clients {
                assert_eq!(get_with_key(web(&running), client).await, 200);
            }
        }
        let counters = &status(&running).await["pools"][0]["sticky"];
        assert_eq!(
            counters["lost"], homed_on_k1,
            "{sticky:?}: each session on the stopped replica is lost once, not once per request"
        );
        assert_eq!(counters["rebinds"], homed_on_k1);
        assert_eq!(
            counters["bound"], 12,
            "a moved session is a rebind, not a new binding"
        );
        stop(running).await;
    }
}

#[tokio::test]
async fn a_cookie_binding_is_counted_only_when_the_cookie_is_sent() {
    // Nothing listens on the backend: every request fails, so no client is ever bound.
    let closed = refusing_port();
    let mut plan = plan(&[closed.address]);
    plan.pools[0].sticky = Some(StickyPlan::Cookie {
        name: "trafik".into(),
        secret: b"secret".to_vec(),
    });
    let running = trafik_proxy::start(plan).unwrap();
    for _ in 0..5 {
        let answer = get(web(&running), "/takip/1").await;
        assert_eq!(answer.status, 502);
        assert!(answer.header("set-cookie").is_none());
    }
    assert_eq!(status(&running).await["pools"][0]["sticky"]["bound"], 0);
    stop(running).await;
}

#[tokio::test]
async fn a_listener_address_already_served_is_an_error() {
    let replicas = replicas(1).await;
    let first = trafik_proxy::start(plan(&[replicas[0].address()])).unwrap();
    let mut second = plan(&[replicas[0].address()]);
    second.admin = None;
    second.listeners[0].address = web(&first);
    let refused = trafik_proxy::start(second);
    let Err(error) = refused else {
        panic!(
            "a second instance started on {} beside the first",
            web(&first)
        );
    };
    assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse, "{error}");
    stop(first).await;
}

#[tokio::test]
async fn a_malformed_request_gets_400_with_a_one_line_body() {
    let replicas = replicas(1).await;
    let running = trafik_proxy::start(plan(&[replicas[0].address()])).unwrap();
    let answer = raw_exchange(
        web(&running),
        b"GET /takip HTTP/1.1\r\nHost: a\r\nbad header\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    assert!(
        body.ends_with('\n') && body.trim().len() > 5,
        "a one-line body, got {answer:?}"
    );
    assert_eq!(body.lines().count(), 1);
    stop(running).await;
}

#[tokio::test]
async fn an_admin_connection_that_never_sends_a_head_is_closed() {
    let replicas = replicas(1).await;
    let mut plan = plan(&[replicas[0].address()]);
    plan.client.header_read_timeout = Duration::from_millis(300);
    let running = trafik_proxy::start(plan).unwrap();
    let admin = running.admin_address().unwrap();
    let mut stream = tokio::net::TcpStream::connect(admin).await.unwrap();
    stream.write_all(b"GET /status HTTP/1.1\r\n").await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "the admin API kept a silent connection open"
    );
    stop(running).await;
}
