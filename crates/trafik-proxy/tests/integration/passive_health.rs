//! Passive health through real sockets: a backend whose requests fail is ejected for a while,
//! by the rule it broke, within the pool's cap, and comes back when its time is up.

use std::time::Duration;

use trafik_balance::OutlierRules;
use trafik_proxy::Engine;
use trafik_test_support::proxy::*;

fn backend(status: &serde_json::Value, index: usize) -> &serde_json::Value {
    &status["pools"][0]["backends"][index]
}

/// A pool of a backend that refuses connections, then `replicas`, with passive health ejecting
/// for `base_ejection` at first.
fn dead_first(
    replicas: &[trafik_upstream::RunningReplica],
    base_ejection: Duration,
) -> (trafik_proxy::Plan, RefusingPort) {
    let dead = refusing_port();
    let mut backends = vec![dead.address];
    backends.extend(replicas.iter().map(|r| r.address()));
    let mut plan = plan(&backends);
    plan.pools[0].outlier = Some(OutlierRules {
        base_ejection,
        ..OutlierRules::default()
    });
    (plan, dead)
}

#[tokio::test]
async fn a_backend_that_refuses_connections_is_ejected_and_comes_back() {
    let replicas = replicas(2).await;
    let (plan, _dead) = dead_first(&replicas, Duration::from_millis(500));
    let running = trafik_proxy::start(plan).unwrap();
    // Three connect failures in a row eject it; every request is retried elsewhere meanwhile.
    let (_, failed) = tally(web(&running), 12).await;
    assert!(failed.is_empty(), "{failed:?}");
    let after = status(&running).await;
    let dead = backend(&after, 0);
    assert_eq!(dead["ejected"], true, "{dead}");
    assert_eq!(dead["ejection_reason"], "consecutive-connect-failures");
    assert_eq!(dead["ejections"], 1);
    assert_eq!(after["pools"][0]["ejected"], 1);
    // Ejected, it takes no picks.
    let decisions = dead["decisions"].as_u64().unwrap();
    tally(web(&running), 6).await;
    assert_eq!(
        backend(&status(&running).await, 0)["decisions"].as_u64(),
        Some(decisions)
    );
    // Its time up, it returns (and, still dead, is ejected again for twice as long).
    wait_for_status(&running, |s| backend(s, 0)["ejected"] == false).await;
    stop(running).await;
}

#[tokio::test]
async fn a_backend_answering_500_is_ejected_for_its_errors() {
    let failing = answering("HTTP/1.1 500 X\r\ncontent-length: 2\r\n\r\nok").await;
    let replicas = replicas(2).await;
    let mut plan = plan(&[failing, replicas[0].address(), replicas[1].address()]);
    plan.pools[0].outlier = Some(OutlierRules::default());
    let running = trafik_proxy::start(plan).unwrap();
    let (_, failed) = tally(web(&running), 30).await;
    // Round robin sends it every third request until it is ejected after five in a row.
    assert_eq!(failed, [500; 5]);
    let failing = backend(&status(&running).await, 0).clone();
    assert_eq!(failing["ejected"], true, "{failing}");
    assert_eq!(failing["ejection_reason"], "consecutive-errors");
    stop(running).await;
}

#[tokio::test]
async fn the_pool_never_ejects_more_than_its_share() {
    let (first, second) = (refusing_port(), refusing_port());
    let healthy = replicas(1).await;
    let mut plan = plan(&[first.address, second.address, healthy[0].address()]);
    plan.pools[0].retries = 2;
    plan.pools[0].outlier = Some(OutlierRules::default());
    let running = trafik_proxy::start(plan).unwrap();
    let (_, failed) = tally(web(&running), 30).await;
    assert!(failed.is_empty(), "{failed:?}");
    let status = status(&running).await;
    // 50 % of three is one: the second dead backend stays in, and retries cover it.
    assert_eq!(status["pools"][0]["ejected"], 1, "{status}");
    stop(running).await;
}

#[tokio::test]
async fn without_passive_health_nothing_is_ejected() {
    let dead = refusing_port();
    let replicas = replicas(1).await;
    let running = trafik_proxy::start(plan(&[dead.address, replicas[0].address()])).unwrap();
    tally(web(&running), 10).await;
    let status = status(&running).await;
    assert!(backend(&status, 0).get("ejected").is_none(), "{status}");
    stop(running).await;
}

/// Back from its ejection, a backend ramps up over the slow start instead of taking a full
/// share at once.
#[tokio::test]
async fn a_returning_backend_ramps_up_over_the_slow_start() {
    let replicas = replicas(2).await;
    let (mut plan, dead) = dead_first(&replicas, Duration::from_millis(300));
    plan.pools[0].slow_start = Duration::from_secs(60);
    let running = trafik_proxy::start(plan).unwrap();
    tally(web(&running), 12).await;
    assert_eq!(backend(&status(&running).await, 0)["ejected"], true);
    // The port is given up for the replica that comes back on it.
    let address = dead.address;
    drop(dead);
    let _revived = replica("k9", address, Duration::ZERO).await;
    wait_for_status(&running, |s| backend(s, 0)["ejected"] == false).await;
    let (by_replica, failed) = tally(web(&running), 90).await;
    assert!(failed.is_empty(), "{failed:?}");
    // Round robin would give it 30 of 90; a tenth of that, ramping, at the start of 60 s.
    let revived = by_replica.get("k9").copied().unwrap_or(0);
    assert!(
        revived < 15,
        "{revived} of 90 right after its return: {by_replica:?}"
    );
    stop(running).await;
}

/// A backend that cuts every answer's body short (a length of 1000, then 10 bytes and the
/// close) fails those requests, on both engines: each is a failure in its counters and an error
/// to passive health, never a success, so five in a row eject it; the client sees the cut.
#[tokio::test]
async fn a_backend_that_cuts_its_bodies_short_fails_and_is_ejected() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        let cutting =
            answering_then_closing("HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n0123456789")
                .await;
        let replicas = replicas(2).await;
        let mut plan = plan_on(
            engine,
            &[cutting, replicas[0].address(), replicas[1].address()],
        );
        plan.pools[0].outlier = Some(OutlierRules::default());
        let running = trafik_proxy::start(plan).unwrap();
        let mut cut = 0;
        for n in 0..30 {
            let request =
                format!("GET /takip/{n} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
            let answer = raw_exchange(web(&running), request.as_bytes()).await;
            if !answer.contains("x-kopya") {
                assert!(
                    answer.is_empty() || answer.ends_with("0123456789"),
                    "{engine:?}: {answer}"
                );
                cut += 1;
            }
        }
        // Round robin sends it every third request until five in a row eject it.
        assert_eq!(cut, 5, "{engine:?}");
        let status = status(&running).await;
        let cutting = backend(&status, 0);
        assert_eq!(cutting["failures"], 5, "{engine:?}: {cutting}");
        assert_eq!(cutting["ejected"], true, "{engine:?}: {cutting}");
        assert_eq!(
            cutting["ejection_reason"], "consecutive-errors",
            "{engine:?}"
        );
        let metrics = admin_get(&running, "/metrics").await.text();
        let failures = metrics
            .lines()
            .find(|line| line.starts_with("trafik_backend_failures_total") && line.contains("k1"))
            .unwrap_or_else(|| panic!("{engine:?}: no failures of k1 in {metrics}"));
        assert!(failures.ends_with(" 5"), "{engine:?}: {failures}");
        stop(running).await;
    }
}
