//! Replacing the configuration of a running instance: what carries over, what changes, and a
//! bad plan that changes nothing.

mod support;

use std::time::Duration;

use support::*;
use trafik_proxy::{ListenerKind, ListenerPlan, StickyPlan};

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
