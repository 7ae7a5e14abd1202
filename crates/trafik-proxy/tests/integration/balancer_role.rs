//! The course's lesson "Yük Dengeleyici Rolü": three replicas, 300 sequential requests, k2
//! stopped, with and without health checks, with and without retries; all over real sockets.

use std::collections::BTreeMap;

use trafik_test_support::proxy::*;

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn backend<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status["pools"][0]["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap()
}

#[tokio::test]
async fn three_hundred_requests_over_three_replicas_split_one_hundred_each() {
    let replicas = replicas(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let running = trafik_proxy::start(plan(&addresses)).unwrap();

    let (by_replica, failures) = tally(web(&running), 300).await;
    assert_eq!(by_replica, counts(&[("k1", 100), ("k2", 100), ("k3", 100)]));
    assert!(failures.is_empty());

    // The replicas' own counters agree with what the clients saw, and so does the admin API.
    for replica in &replicas {
        let counters = get(replica.address(), "/sayac").await.json();
        assert_eq!(counters["istek"], 100);
        assert_eq!(counters["yol"]["/takip"], 100);
    }
    let status = status(&running).await;
    for name in ["k1", "k2", "k3"] {
        assert_eq!(backend(&status, name)["decisions"], 100);
        assert_eq!(backend(&status, name)["requests"], 100);
        assert_eq!(backend(&status, name)["failures"], 0);
    }
    assert_eq!(status["pools"][0]["unreachable"], 0);
    stop(running).await;
}

#[tokio::test]
async fn with_health_checks_a_stopped_replica_costs_no_request() {
    let mut replicas = replicas(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = plan(&addresses);
    plan.pools[0].health = Some(course_health_check());
    plan.pools[0].retries = 0;
    let running = trafik_proxy::start(plan).unwrap();

    replicas.remove(1).stop().await;
    wait_for_status(&running, |s| backend(s, "k2")["healthy"] == false).await;

    let (by_replica, failures) = tally(web(&running), 300).await;
    assert_eq!(by_replica, counts(&[("k1", 150), ("k3", 150)]));
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(status(&running).await["pools"][0]["unreachable"], 0);
    stop(running).await;
}

#[tokio::test]
async fn without_health_checks_or_retries_a_stopped_replica_costs_its_third() {
    let mut replicas = replicas(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = plan(&addresses);
    plan.pools[0].retries = 0;
    let running = trafik_proxy::start(plan).unwrap();

    replicas.remove(1).stop().await;
    let (by_replica, failures) = tally(web(&running), 300).await;
    assert_eq!(by_replica, counts(&[("k1", 100), ("k3", 100)]));
    assert_eq!(failures, vec![502; 100]);

    let status = status(&running).await;
    assert_eq!(status["pools"][0]["unreachable"], 100);
    assert_eq!(backend(&status, "k2")["failures"], 100);
    assert_eq!(
        backend(&status, "k2")["healthy"],
        false,
        "nothing checks it, but its connects failed"
    );
    stop(running).await;
}

#[tokio::test]
async fn without_health_checks_the_default_retry_answers_every_request() {
    let mut replicas = replicas(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let running = trafik_proxy::start(plan(&addresses)).unwrap();

    replicas.remove(1).stop().await;
    let (by_replica, failures) = tally(web(&running), 300).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(by_replica.values().sum::<usize>(), 300);
    assert!(!by_replica.contains_key("k2"));

    let status = status(&running).await;
    assert_eq!(status["pools"][0]["unreachable"], 0);
    // Every pick of k2 failed and was retried elsewhere: decisions = 300 answers + k2's failures.
    let k2 = backend(&status, "k2");
    assert!(k2["failures"].as_u64().unwrap() > 0);
    assert_eq!(k2["failures"], k2["decisions"]);
    let decisions: u64 = ["k1", "k2", "k3"]
        .iter()
        .map(|n| backend(&status, n)["decisions"].as_u64().unwrap())
        .sum();
    assert_eq!(decisions, 300 + k2["failures"].as_u64().unwrap());
    stop(running).await;
}

#[tokio::test]
async fn a_replica_that_comes_back_is_marked_up_and_served_again() {
    let mut replicas = replicas_apart(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = plan(&addresses);
    plan.pools[0].health = Some(course_health_check());
    let running = trafik_proxy::start(plan).unwrap();

    replicas.remove(1).stop().await;
    wait_for_status(&running, |s| backend(s, "k2")["healthy"] == false).await;
    let _back = replica("k2", addresses[1], std::time::Duration::ZERO).await;
    wait_for_status(&running, |s| backend(s, "k2")["healthy"] == true).await;

    let (by_replica, failures) = tally(web(&running), 30).await;
    assert!(failures.is_empty());
    assert_eq!(by_replica, counts(&[("k1", 10), ("k2", 10), ("k3", 10)]));
    stop(running).await;
}

/// Panic mode: a health check that every backend fails (here a path none of them serves) says
/// more about the check than about the backends, so the pool ignores it and spreads over all of
/// them instead of answering 503 to everything; `/status` and `/metrics` count it.
#[tokio::test]
async fn when_every_check_fails_but_the_replicas_answer_requests_are_still_served() {
    let replicas = replicas(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = plan(&addresses);
    let mut check = course_health_check();
    check.check = trafik_proxy::HealthCheck::Http {
        path: "/no-such-check".into(),
    };
    plan.pools[0].health = Some(check);
    plan.pools[0].retries = 0;
    let running = trafik_proxy::start(plan).unwrap();
    wait_for_status(&running, |s| s["pools"][0]["panic"] == true).await;

    let (by_replica, failures) = tally(web(&running), 30).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(by_replica, counts(&[("k1", 10), ("k2", 10), ("k3", 10)]));
    let status = status(&running).await;
    assert_eq!(status["pools"][0]["panics"], 1);
    assert!(
        ["k1", "k2", "k3"]
            .iter()
            .all(|k| backend(&status, k)["healthy"] == false)
    );
    let metrics = admin_get(&running, "/metrics").await.text();
    assert!(
        metrics.contains("trafik_pool_panics_total{pool=\"takip\"} 1"),
        "{metrics}"
    );
    stop(running).await;
}

#[tokio::test]
async fn with_every_replica_down_the_answer_is_502_and_says_why() {
    let replicas = replicas(2).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = plan(&addresses);
    plan.pools[0].health = Some(course_health_check());
    let running = trafik_proxy::start(plan).unwrap();
    for replica in replicas {
        replica.stop().await;
    }
    wait_for_status(&running, |s| {
        s["pools"][0]["backends"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["healthy"] == false)
    })
    .await;

    // Panic mode tries them anyway; none answers. The answer names the last one tried.
    let answer = get(web(&running), "/takip/TR-1").await;
    assert_eq!(answer.status, 502);
    let text = answer.text();
    assert!(
        text.starts_with("could not connect to a backend: k")
            && addresses
                .iter()
                .any(|address| text.ends_with(&format!(" ({address}), connection refused\n"))),
        "{text}"
    );
    assert_eq!(status(&running).await["pools"][0]["unreachable"], 1);
    stop(running).await;
}
