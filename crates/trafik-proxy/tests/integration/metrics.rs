//! The golden metrics through a real proxy: `/metrics` reads as strict Prometheus text, and
//! after a known load the histograms and status classes of every level add up to it; `/status`
//! summarizes the last seconds per pool and backend.

use trafik_metrics_text::strict_reader;
use trafik_test_support::proxy::*;

/// Requests sent, each on its own connection.
const LOAD: usize = 90;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histograms_and_classes_add_up_to_the_requests_sent_on_the_own_engine() {
    histograms_and_classes_add_up(trafik_proxy::Engine::Trafik).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histograms_and_classes_add_up_to_the_requests_sent_on_hyper() {
    histograms_and_classes_add_up(trafik_proxy::Engine::Hyper).await;
}

async fn histograms_and_classes_add_up(engine: trafik_proxy::Engine) {
    let replicas = replicas(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = plan_on(engine, &addresses);
    routes(&mut plan).push(route("/none", "empty"));
    plan.pools.push(pool("empty", &[]));
    let running = trafik_proxy::start(plan).expect("starts");
    let web = web(&running);
    for n in 0..LOAD {
        assert_eq!(get(web, &format!("/takip/TR-{n}")).await.status, 200);
    }
    // A pool with no backend: trafik's own 503, a server error of the pool and route.
    for _ in 0..3 {
        assert_eq!(get(web, "/none").await.status, 503);
    }
    let text = admin_get(&running, "/metrics").await.text();
    let metrics = strict_reader::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let load = LOAD as f64;
    let total = load + 3.0;

    let listener = [("listener", "web")];
    let count =
        |name: &str, labels: &[(&str, &str)]| metrics.value(&format!("{name}_count"), labels);
    assert_eq!(
        count("trafik_listener_request_duration_seconds", &listener),
        total
    );
    assert_eq!(
        metrics.value("trafik_listener_connections_accepted_total", &listener),
        total
    );
    let class = |name: &str, labels: &[(&str, &str)], class: &str| {
        let mut labels = labels.to_vec();
        labels.push(("class", class));
        metrics.value(name, &labels)
    };
    assert_eq!(
        class("trafik_listener_responses_total", &listener, "2xx"),
        load
    );
    assert_eq!(
        class("trafik_listener_responses_total", &listener, "5xx"),
        3.0
    );

    let root = [("listener", "web"), ("route", "/")];
    assert_eq!(count("trafik_route_request_duration_seconds", &root), load);
    let none = [("listener", "web"), ("route", "/none")];
    assert_eq!(class("trafik_route_responses_total", &none, "5xx"), 3.0);

    let takip = [("pool", "takip")];
    assert_eq!(count("trafik_pool_request_duration_seconds", &takip), load);
    assert_eq!(class("trafik_pool_responses_total", &takip, "2xx"), load);
    assert_eq!(
        class("trafik_pool_responses_total", &[("pool", "empty")], "5xx"),
        3.0
    );
    // Every backend answered its share, and the shares add up.
    let per_backend: Vec<f64> = metrics
        .matching("trafik_backend_request_duration_seconds_count", &takip)
        .map(|s| s.value)
        .collect();
    assert_eq!(per_backend.len(), 3);
    assert!(per_backend.iter().all(|&n| n > 0.0), "{per_backend:?}");
    assert_eq!(per_backend.iter().sum::<f64>(), load);
    // Kept-alive upstream connections: at least one connect per backend was timed, and no more
    // than the connections opened.
    let connects: f64 = metrics
        .matching("trafik_backend_connect_duration_seconds_count", &takip)
        .map(|s| s.value)
        .sum();
    let opened: f64 = metrics
        .matching("trafik_backend_connections_total", &takip)
        .map(|s| s.value)
        .sum();
    assert!(
        connects >= 3.0 && connects == opened,
        "{connects} vs {opened}"
    );
    // Buckets: loopback requests sit far below 10 s, so +Inf holds nothing more than 10 s.
    let ten_seconds = metrics.value(
        "trafik_pool_request_duration_seconds_bucket",
        &[("pool", "takip"), ("le", "10")],
    );
    assert_eq!(ten_seconds, load);
    assert!(metrics.value("trafik_pool_request_duration_seconds_sum", &takip) > 0.0);

    // /status: the same load, in the last 10 seconds.
    let status = status(&running).await;
    let pool = &status["pools"][0];
    let recent = &pool["recent"]["10s"];
    assert_eq!(recent["requests"], LOAD, "{recent}");
    assert!(recent["rate"].as_f64().unwrap() > 0.0);
    let (p50, p99) = (
        recent["p50_ms"].as_f64().unwrap(),
        recent["p99_ms"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99, "{recent}");
    assert_eq!(recent["error_rate"], 0.0);
    let by_backend: u64 = pool["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["recent"]["60s"]["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(by_backend, LOAD as u64);
    assert_eq!(status["pools"][1]["recent"]["10s"]["error_rate"], 1.0);
    assert_eq!(status["listeners"][0]["accepted"], LOAD + 3);
    assert_eq!(status["listeners"][0]["responses"]["2xx"], LOAD);
    // The listener's histogram since start, per bucket, as `config push --canary` subtracts it.
    let durations = &status["listeners"][0]["durations"];
    let counts = durations["counts"].as_array().unwrap();
    assert_eq!(
        counts.len(),
        durations["bounds_us"].as_array().unwrap().len() + 1
    );
    let timed: u64 = counts.iter().map(|c| c.as_u64().unwrap()).sum();
    assert_eq!(timed, LOAD as u64 + 3, "{durations}");
    stop(running).await;
}
