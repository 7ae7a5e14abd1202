//! Replacing the configuration of a running instance: what carries over, what changes, and a
//! bad plan that changes nothing.

use std::sync::atomic::Ordering;
use std::time::Duration;

use trafik_proxy::{HealthPlan, ListenerKind, ListenerPlan, StickyPlan};
use trafik_test_support::proxy::*;

fn backend<'a>(status: &'a serde_json::Value, pool: usize, name: &str) -> &'a serde_json::Value {
    status["pools"][pool]["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap_or_else(|| panic!("no backend {name} in {status}"))
}

#[tokio::test]
async fn a_reload_keeps_counters_health_and_sessions_of_what_stays() {
    let mut replicas = replicas(4).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut first = plan(&addresses[..3]);
    first.pools[0].health = Some(course_health_check());
    first.pools[0].sticky = Some(StickyPlan::Cookie {
        name: "trafik".into(),
        secret: b"same secret".to_vec(),
    });
    let running = trafik_proxy::start(first.clone()).unwrap();
    assert_eq!(status(&running).await["config"]["generation"], 1);

    // A client bound to a replica that stays up (round robin gives k1 first, then k2, k3).
    let bound = get(web(&running), "/takip/1").await;
    let cookie = bound
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let home = bound.header("x-kopya").unwrap().to_owned();
    assert_eq!(home, "k1");
    let (_, failures) = tally(web(&running), 30).await;
    assert!(failures.is_empty());
    replicas.remove(1).stop().await; // k2
    wait_for_status(&running, |s| backend(s, 0, "k2")["healthy"] == false).await;
    let before = status(&running).await;

    // Add k4, change k3's weight, add a route and a listener.
    let mut second = first.clone();
    second.pools[0].backends.push(trafik_proxy::BackendPlan {
        address: addresses[3],
        name: Some("k4".into()),
        weight: 1,
    });
    second.pools[0].backends[2].weight = 3;
    routes(&mut second).push(route("/olay", "takip"));
    second.listeners.push(ListenerPlan {
        connections: Default::default(),
        name: "ikinci".into(),
        address: LOOPBACK_ANY_PORT.parse().unwrap(),
        kind: ListenerKind::Http {
            routes: vec![route("/", "takip")],
        },
    });
    assert_eq!(running.apply(second), Ok(2));
    let after = status(&running).await;
    assert_eq!(after["config"]["generation"], 2);
    for name in ["k1", "k3"] {
        assert_eq!(
            backend(&after, 0, name)["decisions"],
            backend(&before, 0, name)["decisions"],
            "{name}'s counters carry over"
        );
    }
    assert_eq!(backend(&after, 0, "k2")["healthy"], false, "k2 stays down");
    assert_eq!(backend(&after, 0, "k3")["weight"], 3);
    assert_eq!(backend(&after, 0, "k4")["decisions"], 0);

    // The cookie issued before the reload still sticks.
    let mut client = Client::connect(web(&running)).await;
    let again = client
        .send(
            http::Request::get("/takip/2")
                .header("host", "kargo.test")
                .header("cookie", &cookie)
                .body(http_body_util::Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(again.header("x-kopya"), Some(home.as_str()));
    assert!(again.header("set-cookie").is_none());
    let addresses_now = running.listener_addresses();
    assert_eq!(addresses_now.len(), 2);
    assert_eq!(
        get(addresses_now[1], "/takip/3").await.status,
        200,
        "the new listener serves"
    );
    stop(running).await;
}

#[tokio::test]
async fn a_plan_that_cannot_run_changes_nothing() {
    let replicas = replicas(2).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let first = plan(&addresses);
    let running = trafik_proxy::start(first.clone()).unwrap();
    let web_address = web(&running);

    let mut broken = first.clone();
    routes(&mut broken).push(route("/olay", "yok"));
    let errors = running.apply(broken).unwrap_err();
    assert!(errors[0].contains("\"yok\""), "{errors:?}");

    // A listener on an address already taken by someone else fails the reload too.
    let taken = std::net::TcpListener::bind(LOOPBACK_ANY_PORT).unwrap();
    let mut clashing = first.clone();
    clashing.listeners.push(ListenerPlan {
        connections: Default::default(),
        name: "carpisan".into(),
        address: taken.local_addr().unwrap(),
        kind: ListenerKind::Http {
            routes: vec![route("/", "takip")],
        },
    });
    let errors = running.apply(clashing).unwrap_err();
    assert!(errors[0].contains("cannot bind"), "{errors:?}");

    assert_eq!(status(&running).await["config"]["generation"], 1);
    assert_eq!(running.listener_addresses(), vec![web_address]);
    assert_eq!(get(web_address, "/takip/1").await.status, 200);
    stop(running).await;
}

#[tokio::test]
async fn a_removed_listener_stops_accepting_and_a_moved_one_binds_anew() {
    let replicas = replicas(1).await;
    let first = plan(&[replicas[0].address()]);
    let running = trafik_proxy::start(first.clone()).unwrap();
    let old = web(&running);
    let mut moved = first;
    moved.listeners[0].name = "tasinan".into();
    moved.listeners[0].address = LOOPBACK_ANY_PORT.parse().unwrap();
    running.apply(moved).unwrap();
    let new = web(&running);
    assert_ne!(new, old);
    assert_eq!(get(new, "/takip/1").await.status, 200);
    // The old socket closes once every worker has heard of the change.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while tokio::net::TcpStream::connect(old).await.is_ok() {
        assert!(std::time::Instant::now() < deadline, "{old} still accepts");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop(running).await;
}

#[tokio::test]
async fn an_instance_without_a_file_says_there_is_nothing_to_reload() {
    let replicas = replicas(1).await;
    let running = trafik_proxy::start(plan(&[replicas[0].address()])).unwrap();
    let admin = running.admin_address().unwrap();
    let answer = Client::connect(admin)
        .await
        .send(
            http::Request::post("/reload")
                .body(http_body_util::Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(answer.status, 400);
    assert!(
        answer.json()["errors"][0]
            .as_str()
            .unwrap()
            .contains("nothing to reload")
    );
    stop(running).await;
}

#[tokio::test]
async fn an_unchanged_listener_keeps_its_socket_even_on_port_zero() {
    let replicas = replicas(1).await;
    let first = plan(&[replicas[0].address()]);
    let running = trafik_proxy::start(first.clone()).unwrap();
    let before = web(&running);
    running.apply(first.clone()).unwrap();
    assert_eq!(web(&running), before);
    stop(running).await;
}

#[tokio::test]
async fn two_listeners_on_one_address_are_refused() {
    let replicas = replicas(1).await;
    let first = plan(&[replicas[0].address()]);
    let running = trafik_proxy::start(first.clone()).unwrap();
    let mut twins = first.clone();
    twins.listeners[0].address = web(&running);
    let mut twin = twins.listeners[0].clone();
    twin.name = "ikiz".into();
    twins.listeners.push(twin);
    let errors = running.apply(twins).unwrap_err();
    assert!(errors[0].contains("another listener"), "{errors:?}");
    stop(running).await;
}

#[tokio::test]
async fn the_round_robin_turn_and_requests_in_flight_survive_a_reload_of_an_unchanged_pool() {
    let replicas = replicas(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let first = plan(&addresses);
    let running = trafik_proxy::start(first.clone()).unwrap();
    let mut seen = std::collections::BTreeMap::new();
    for n in 0..30 {
        let answer = get(web(&running), &format!("/takip/{n}")).await;
        *seen
            .entry(answer.header("x-kopya").unwrap().to_owned())
            .or_insert(0) += 1;
        if n % 2 == 1 {
            running.apply(first.clone()).unwrap();
        }
    }
    let want: std::collections::BTreeMap<String, i32> =
        [("k1".into(), 10), ("k2".into(), 10), ("k3".into(), 10)].into();
    assert_eq!(seen, want);
    stop(running).await;
}

#[tokio::test]
async fn least_connections_still_sees_a_request_in_flight_from_before_the_reload() {
    let slow = replica(
        "yavas",
        LOOPBACK_ANY_PORT.parse().unwrap(),
        Duration::from_secs(2),
    )
    .await;
    let fast = replica("hizli", LOOPBACK_ANY_PORT.parse().unwrap(), Duration::ZERO).await;
    let mut first = plan(&[slow.address(), fast.address()]);
    first.workers = 1;
    first.pools[0].algorithm = trafik_balance::Algorithm::LeastConnections;
    let running = trafik_proxy::start(first.clone()).unwrap();
    let address = web(&running);
    let long = tokio::spawn(async move { get(address, "/takip/1").await });
    wait_for_status(&running, |s| {
        s["pools"][0]["backends"][0]["active_connections"] == 1
    })
    .await;
    running.apply(first.clone()).unwrap();
    let after = get(address, "/takip/2").await;
    assert_eq!(after.header("x-kopya"), Some("hizli"));
    assert_eq!(long.await.unwrap().header("x-kopya"), Some("yavas"));
    stop(running).await;
}

#[tokio::test]
async fn without_health_checks_after_a_reload_a_down_backend_is_tried_again() {
    let mut replicas = replicas_apart(2).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut first = plan(&addresses);
    first.pools[0].health = Some(course_health_check());
    let running = trafik_proxy::start(first.clone()).unwrap();
    replicas.remove(1).stop().await;
    wait_for_status(&running, |s| {
        s["pools"][0]["backends"][1]["healthy"] == false
    })
    .await;
    let mut unchecked = first.clone();
    unchecked.pools[0].health = None;
    running.apply(unchecked).unwrap();
    let _back = replica("k2", addresses[1], Duration::ZERO).await;
    let (by_replica, failures) = tally(web(&running), 20).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(by_replica.get("k2"), Some(&10), "{by_replica:?}");
    stop(running).await;
}

#[tokio::test]
async fn frequent_reloads_do_not_reset_the_fall_count() {
    let mut replicas = replicas(2).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut first = plan(&addresses);
    first.pools[0].health = Some(HealthPlan {
        fall: 3,
        ..course_health_check()
    });
    let running = trafik_proxy::start(first.clone()).unwrap();
    replicas.remove(1).stop().await;
    // A reload every 300 ms: faster than three failed probes 200 ms apart.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        running.apply(first.clone()).unwrap();
        if status(&running).await["pools"][0]["backends"][1]["healthy"] == false {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "k2 is dead and still marked up"
        );
    }
    stop(running).await;
}

#[tokio::test]
async fn a_reloaded_idle_timeout_applies() {
    let replicas = replicas(1).await;
    let mut first = plan(&[replicas[0].address()]);
    first.client.idle_timeout = Duration::from_secs(60);
    let running = trafik_proxy::start(first.clone()).unwrap();
    let mut second = first.clone();
    second.client.idle_timeout = Duration::from_secs(1);
    running.apply(second).unwrap();
    status(&running).await;
    let mut stream = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    let mut buffer = [0u8; 16];
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        use tokio::io::AsyncReadExt;
        stream.read(&mut buffer).await
    })
    .await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "the connection outlived the reloaded idle timeout"
    );
    stop(running).await;
}

#[tokio::test]
async fn kept_alive_connections_to_a_removed_backend_are_closed() {
    let (old, old_connections) = counting_server().await;
    let (new, _) = counting_server().await;
    let mut first = plan(&[old]);
    first.workers = 1;
    let running = trafik_proxy::start(first.clone()).unwrap();
    assert_eq!(get(web(&running), "/x").await.status, 200);
    assert_eq!(old_connections.open.load(Ordering::SeqCst), 1);
    let mut second = plan(&[new]);
    second.workers = 1;
    running.apply(second).unwrap();
    assert_eq!(get(web(&running), "/x").await.status, 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while old_connections.open.load(Ordering::SeqCst) != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "still open to the removed backend"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop(running).await;
}

#[tokio::test]
async fn a_cookie_for_a_backend_the_reload_removed_is_a_lost_session() {
    let replicas = replicas(2).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut first = plan(&addresses);
    first.pools[0].sticky = Some(StickyPlan::Cookie {
        name: "trafik".into(),
        secret: b"s".to_vec(),
    });
    let running = trafik_proxy::start(first.clone()).unwrap();
    let _ = get(web(&running), "/a").await;
    let bound = get(web(&running), "/b").await;
    assert_eq!(bound.header("x-kopya"), Some("k2"));
    let cookie = bound
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let mut second = first.clone();
    second.pools[0].backends.truncate(1);
    running.apply(second).unwrap();
    let moved = Client::connect(web(&running))
        .await
        .send(
            http::Request::get("/c")
                .header("host", "kargo.test")
                .header("cookie", &cookie)
                .body(http_body_util::Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(moved.header("x-kopya"), Some("k1"));
    let sticky = &status(&running).await["pools"][0]["sticky"];
    assert_eq!(sticky["lost"], 1, "{sticky}");
    assert_eq!(sticky["rebinds"], 1, "{sticky}");
    stop(running).await;
}

/// The number of workers changes only on restart: a reload that configures another count is
/// built for the workers that run, so each keeps a counter shard of its own (a worker writes
/// its shard without a locked add; two sharing one would lose counts).
#[tokio::test]
async fn a_reload_configuring_other_workers_keeps_a_shard_for_every_running_one() {
    let replicas = replicas(1).await;
    let first = plan(&[replicas[0].address()]);
    let running_workers = first.workers;
    let running = trafik_proxy::start(first).unwrap();
    // A new route: its counters are made by this reload.
    let mut second = plan(&[replicas[0].address()]);
    second.workers = 1;
    let ListenerKind::Http { routes } = &mut second.listeners[0].kind else {
        unreachable!("plan() serves plain HTTP");
    };
    routes.insert(0, route("/yeni", "takip"));
    running.apply(second).unwrap();
    let snapshot = running.snapshot();
    let added = snapshot
        .metrics
        .routes
        .iter()
        .find(|entry| entry.route == "/yeni")
        .expect("the new route's counters");
    assert_eq!(added.traffic.shards().count(), running_workers);
    running.stop();
}
