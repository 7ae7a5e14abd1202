//! Routing beyond host, path and method, end to end on real sockets: each matcher, priority,
//! a weighted split across pools (and sticky clients), mirroring, redirects, path rewrites as
//! the upstream sees them, `redirect_https`, and address rules.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use trafik_policy::rewrite::{PathRewrite, RedirectTemplate};
use trafik_policy::route_match::{IpRules, ValueMatch, parse_net};
use trafik_proxy::{
    Engine, FilterPlan, ListenerKind, MirrorPlan, Plan, RedirectPlan, RoutePlan, SplitSticky,
    TargetPlan,
};
use trafik_test_support::proxy::*;

const ENGINES: [Engine; 2] = [Engine::Trafik, Engine::Hyper];

/// Replicas k1… each alone in a pool of its own name, and a plan with those pools and no
/// routes yet.
async fn pools_of_one(
    names: &[&str],
    engine: Engine,
) -> (Plan, Vec<trafik_upstream::RunningReplica>) {
    let mut plan = plan_on(engine, &[]);
    plan.pools.clear();
    let mut started = Vec::new();
    for name in names {
        let replica = replica(name, LOOPBACK_ANY_PORT.parse().unwrap(), Duration::ZERO).await;
        plan.pools.push(pool(name, &[replica.address()]));
        started.push(replica);
    }
    routes(&mut plan).clear();
    (plan, started)
}

fn when(prefix: &str, pool: &str, edit: impl FnOnce(&mut RoutePlan)) -> RoutePlan {
    let mut route = route(prefix, pool);
    edit(&mut route);
    route
}

fn value(text: &str) -> ValueMatch {
    ValueMatch::parse(text).unwrap()
}

/// Which replica answered `request` (whatever it answered: a replica knows few paths).
async fn answered_by(address: SocketAddr, request: Request<Full<Bytes>>) -> String {
    let answer = Client::connect(address).await.send(request).await;
    answer.header("x-kopya").unwrap_or("?").to_owned()
}

fn get(path: &str) -> http::request::Builder {
    Request::get(path).header("host", "kargo.test")
}

#[tokio::test]
async fn each_matcher_chooses_its_route_on_both_engines() {
    for engine in ENGINES {
        let (mut plan, _replicas) = pools_of_one(
            &[
                "genel", "tam", "onek", "desen", "var", "sorgu", "kurabiye", "yontem", "ag",
                "oncelik",
            ],
            engine,
        )
        .await;
        let header = |name: &str, want: &str| vec![(name.to_owned(), value(want))];
        *routes(&mut plan) = vec![
            route("/", "genel"),
            when("/api", "tam", |r| {
                r.routing.conditions.headers = header("x-surum", "beta")
            }),
            when("/api", "onek", |r| {
                r.routing.conditions.headers = header("x-surum", "gamma*")
            }),
            when("/api", "desen", |r| {
                r.routing.conditions.headers = header("x-surum", "~^v[0-9]+$")
            }),
            when("/api", "var", |r| {
                r.routing.conditions.headers = header("x-deneme", "*")
            }),
            when("/api", "sorgu", |r| {
                r.routing.conditions.query = header("surum", "yeni sürüm")
            }),
            when("/api", "kurabiye", |r| {
                r.routing.conditions.cookies = header("grup", "deneme")
            }),
            when("/api", "yontem", |r| {
                r.methods = vec![http::Method::PUT, http::Method::DELETE];
            }),
            when("/api", "ag", |r| {
                r.routing.conditions.clients = vec![parse_net("10.0.0.0/8").unwrap()]
            }),
            // Absent: any request without the header on /api/yok; a higher priority goes
            // before every more specific route.
            when("/api/yok", "genel", |r| {
                r.routing.conditions.headers = header("x-var", "!")
            }),
            when("/", "oncelik", |r| {
                r.routing.conditions.headers = header("x-oncelik", "*");
                r.routing.priority = 10;
            }),
        ];
        let running = trafik_proxy::start(plan).unwrap();
        let web = web(&running);
        let by = |request| answered_by(web, request);
        let empty = Full::default;
        assert_eq!(by(get("/api/x").body(empty()).unwrap()).await, "genel");
        assert_eq!(
            by(get("/api/x")
                .header("x-surum", "beta")
                .body(empty())
                .unwrap())
            .await,
            "tam"
        );
        assert_eq!(
            by(get("/api/x")
                .header("x-surum", "beta2")
                .body(empty())
                .unwrap())
            .await,
            "genel",
            "exact is exact"
        );
        assert_eq!(
            by(get("/api/x")
                .header("x-surum", "gamma-3")
                .body(empty())
                .unwrap())
            .await,
            "onek"
        );
        assert_eq!(
            by(get("/api/x")
                .header("x-surum", "v12")
                .body(empty())
                .unwrap())
            .await,
            "desen"
        );
        assert_eq!(
            by(get("/api/x").header("x-deneme", "").body(empty()).unwrap()).await,
            "var"
        );
        assert_eq!(
            by(get("/api/x?surum=yeni%20s%C3%BCr%C3%BCm")
                .body(empty())
                .unwrap())
            .await,
            "sorgu"
        );
        assert_eq!(
            by(get("/api/x")
                .header("cookie", "a=1; grup=deneme")
                .body(empty())
                .unwrap())
            .await,
            "kurabiye"
        );
        let put = Request::put("/api/x")
            .header("host", "kargo.test")
            .body(empty())
            .unwrap();
        assert_eq!(by(put).await, "yontem");
        // The client is loopback; a forwarded address is not believed without trust_forwarded.
        assert_eq!(
            by(get("/api/x")
                .header("x-forwarded-for", "10.1.2.3")
                .body(empty())
                .unwrap())
            .await,
            "genel"
        );
        assert_eq!(by(get("/api/yok").body(empty()).unwrap()).await, "genel");
        assert_eq!(
            by(get("/api/x")
                .header("x-oncelik", "1")
                .header("x-surum", "beta")
                .body(empty())
                .unwrap())
            .await,
            "oncelik"
        );
        stop(running).await;
    }
}

#[tokio::test]
async fn a_trusted_forwarded_address_is_the_client_of_a_network_match() {
    let (mut plan, _replicas) = pools_of_one(&["genel", "ag"], Engine::Trafik).await;
    plan.client.trust_forwarded = true;
    *routes(&mut plan) = vec![
        route("/", "genel"),
        when("/", "ag", |r| {
            r.routing.conditions.clients = vec![parse_net("10.0.0.0/8").unwrap()]
        }),
    ];
    let running = trafik_proxy::start(plan).unwrap();
    let forwarded = get("/x").header("x-forwarded-for", "10.1.2.3, 127.0.0.1");
    assert_eq!(
        answered_by(web(&running), forwarded.body(Full::default()).unwrap()).await,
        "ag"
    );
    assert_eq!(
        answered_by(web(&running), get("/x").body(Full::default()).unwrap()).await,
        "genel"
    );
    stop(running).await;
}

fn split(pools: &[(&str, u32)], sticky: Option<SplitSticky>) -> TargetPlan {
    TargetPlan::Split {
        pools: pools.iter().map(|(p, w)| ((*p).to_owned(), *w)).collect(),
        sticky,
        retry_non_idempotent: false,
    }
}

#[tokio::test]
async fn a_90_10_split_holds_within_one_and_a_half_percent_over_20000_requests() {
    const REQUESTS: usize = 20_000;
    const CLIENTS: usize = 8;
    let (mut plan, _replicas) = pools_of_one(&["v1", "v2"], Engine::Trafik).await;
    *routes(&mut plan) = vec![when("/", "v1", |r| {
        r.target = split(&[("v1", 90), ("v2", 10)], None)
    })];
    let running = trafik_proxy::start(plan).unwrap();
    let web = web(&running);
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(web).await;
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            for n in 0..REQUESTS / CLIENTS {
                let answer = client.get(&format!("/takip/TR-{n}")).await;
                assert_eq!(answer.status, 200);
                *counts
                    .entry(answer.header("x-kopya").unwrap().to_owned())
                    .or_default() += 1;
            }
            counts
        }));
    }
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for task in tasks {
        for (replica, n) in task.await.unwrap() {
            *counts.entry(replica).or_default() += n;
        }
    }
    let v2 = counts.get("v2").copied().unwrap_or(0) as f64 / REQUESTS as f64;
    assert!(
        (v2 - 0.10).abs() <= 0.015,
        "v2 got {:.2} % ({counts:?})",
        v2 * 100.0
    );
    assert_eq!(counts.values().sum::<usize>(), REQUESTS);
    let status = status(&running).await;
    let picks: u64 = status["routing"][0]["split"]["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["picks"].as_u64().unwrap())
        .sum();
    assert_eq!(picks, REQUESTS as u64);
    stop(running).await;
}

#[tokio::test]
async fn sticky_clients_never_switch_pools() {
    let (mut plan, _replicas) = pools_of_one(&["v1", "v2"], Engine::Trafik).await;
    let cookie = SplitSticky::Cookie(SplitSticky::COOKIE.to_owned());
    let header = SplitSticky::Header(http::HeaderName::from_static("x-kullanici"));
    *routes(&mut plan) = vec![
        when("/kuki", "v1", |r| {
            r.target = split(&[("v1", 50), ("v2", 50)], Some(cookie))
        }),
        when("/baslik", "v1", |r| {
            r.target = split(&[("v1", 50), ("v2", 50)], Some(header))
        }),
    ];
    let running = trafik_proxy::start(plan).unwrap();
    let web = web(&running);
    let mut seen = BTreeMap::new();
    for user in 0..40 {
        let mut client = Client::connect(web).await;
        let first = client.get("/kuki").await;
        let set = first
            .header("set-cookie")
            .expect("a first answer binds")
            .to_owned();
        let pair = set.split(';').next().unwrap().to_owned();
        let pool = first.header("x-kopya").unwrap().to_owned();
        assert_eq!(pair, format!("trafik_split={pool}"));
        *seen.entry(pool.clone()).or_insert(0) += 1;
        for _ in 0..10 {
            let again = client
                .send(
                    get("/kuki")
                        .header("cookie", &pair)
                        .body(Full::default())
                        .unwrap(),
                )
                .await;
            assert_eq!(
                again.header("x-kopya"),
                Some(pool.as_str()),
                "user {user} switched"
            );
            assert_eq!(
                again.header("set-cookie"),
                None,
                "a kept client is not bound again"
            );
        }
        let mut by_header = None;
        for _ in 0..10 {
            let request = get("/baslik").header("x-kullanici", format!("kullanici-{user}"));
            let answer = client.send(request.body(Full::default()).unwrap()).await;
            let replica = answer.header("x-kopya").unwrap().to_owned();
            assert_eq!(
                by_header.get_or_insert(replica.clone()),
                &replica,
                "user {user} switched"
            );
        }
    }
    // Both pools got new clients: the draw is free until a client is bound.
    assert_eq!(seen.len(), 2, "{seen:?}");
    stop(running).await;
}

fn mirror_to(pool: &str, percent: f64) -> MirrorPlan {
    MirrorPlan {
        pool: pool.into(),
        percent,
        max_body: 1024,
        max_in_flight: 64,
    }
}

#[tokio::test]
async fn the_mirror_gets_a_copy_with_its_body_and_the_client_its_own_answer() {
    let primary = answering("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let (shadow, received) =
        answering_recorded("HTTP/1.1 500 No\r\ncontent-length: 4\r\n\r\nhayr").await;
    let mut plan = plan(&[primary]);
    plan.pools.push(pool("golge", &[shadow]));
    routes(&mut plan)[0].routing.mirror = Some(mirror_to("golge", 100.0));
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = Client::connect(web(&running)).await;
    let post = Request::post("/olay")
        .header("host", "kargo.test")
        .body(Full::new(Bytes::from_static(b"{\"no\":\"TR-1\"}")))
        .unwrap();
    let answer = client.send(post).await;
    assert_eq!((answer.status, answer.text().as_str()), (200, "ok"));
    // A body over max_body is not copied; the client's request goes on whole.
    let long = Request::post("/olay")
        .header("host", "kargo.test")
        .body(Full::new(Bytes::from(vec![b'x'; 4096])))
        .unwrap();
    assert_eq!(client.send(long).await.status, 200);
    wait_for_status(&running, |s| {
        let mirror = &s["routing"][0]["mirror"];
        mirror["failed"] == 1 && mirror["dropped"] == 1
    })
    .await;
    let seen = String::from_utf8_lossy(&received.lock().unwrap()).into_owned();
    assert!(seen.starts_with("POST /olay HTTP/1.1\r\n"), "{seen}");
    assert!(seen.ends_with("\r\n\r\n{\"no\":\"TR-1\"}"), "{seen}");
    stop(running).await;
}

#[tokio::test]
async fn the_mirror_receives_its_share() {
    let primary = answering("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let shadow = answering("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
    let mut plan = plan(&[primary]);
    plan.pools.push(pool("golge", &[shadow]));
    routes(&mut plan)[0].routing.mirror = Some(mirror_to("golge", 25.0));
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = Client::connect(web(&running)).await;
    for n in 0..2_000 {
        assert_eq!(client.get(&format!("/takip/TR-{n}")).await.status, 200);
    }
    // 500 expected; the binomial spread is about 19.
    wait_for_status(&running, |s| {
        let mirror = &s["routing"][0]["mirror"];
        let counted = ["sent", "dropped", "failed"].map(|k| mirror[k].as_u64().unwrap_or(0));
        counted[1] + counted[2] == 0 && (400..=600).contains(&counted[0])
    })
    .await;
    stop(running).await;
}

/// Probe finding: a copy read its backend's answer body with no bound, so a mirror backend that
/// sent a head and then stalled held the copy's place for ever (with every place held, all
/// later copies are dropped). The body is read for at most the pool's response timeout.
#[tokio::test]
async fn a_mirror_that_stalls_in_its_answer_body_frees_the_copys_place() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let primary = answering("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let stalling = raw_backend(|mut stream| async move {
        let mut buffer = [0u8; 4096];
        if !read_head(&mut stream).await {
            return;
        }
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nx";
        if stream.write_all(head).await.is_ok() {
            // Held open with the body unfinished until the proxy lets go.
            let _ = stream.read(&mut buffer).await;
        }
    })
    .await;
    let mut plan = plan(&[primary]);
    let mut shadow = pool("golge", &[stalling]);
    shadow.response_timeout = Duration::from_millis(300);
    plan.pools.push(shadow);
    routes(&mut plan)[0].routing.mirror = Some(mirror_to("golge", 100.0));
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = Client::connect(web(&running)).await;
    assert_eq!(client.get("/takip/TR-1").await.status, 200);
    wait_for_status(&running, |s| s["routing"][0]["mirror"]["failed"] == 1).await;
    stop(running).await;
}

#[tokio::test]
async fn a_dead_mirror_changes_nothing_for_the_client() {
    let dead = refusing_port();
    let mut answers = Vec::new();
    for mirrored in [false, true] {
        let echo = echo_server(Duration::ZERO).await;
        let mut plan = plan(&[echo]);
        plan.pools.push(pool("golge", &[dead.address]));
        if mirrored {
            routes(&mut plan)[0].routing.mirror = Some(mirror_to("golge", 100.0));
        }
        let running = trafik_proxy::start(plan).unwrap();
        let mut client = Client::connect(web(&running)).await;
        let mut seen = Vec::new();
        for n in 0..50 {
            let request = Request::post(format!("/olay/{n}"))
                .header("host", "kargo.test")
                .body(Full::new(Bytes::from(format!("olay {n}"))))
                .unwrap();
            let answer = client.send(request).await;
            let mut echoed = answer.json();
            // The client's own port differs between the runs.
            echoed["headers"]
                .as_object_mut()
                .unwrap()
                .retain(|k, _| !k.contains("forwarded"));
            seen.push((answer.status, echoed));
        }
        if mirrored {
            wait_for_status(&running, |s| s["routing"][0]["mirror"]["failed"] == 50).await;
            assert_eq!(status(&running).await["routing"][0]["mirror"]["sent"], 0);
        }
        answers.push(seen);
        stop(running).await;
    }
    assert_eq!(answers[0], answers[1]);
}

fn redirect(to: &str, captures: &[&str], status: u16, keep_query: bool) -> TargetPlan {
    TargetPlan::Redirect(RedirectPlan {
        to: RedirectTemplate::parse(to, captures).unwrap(),
        status,
        keep_query,
    })
}

#[tokio::test]
async fn redirects_carry_captures_and_keep_or_drop_the_query() {
    for engine in ENGINES {
        let (mut plan, _replicas) = pools_of_one(&["genel"], engine).await;
        let mut captured = route("/", "genel");
        captured.path_template =
            Some(trafik_proxy::PathTemplate::parse("/eski/takip/{no}").unwrap());
        captured.target = redirect("https://yeni.test/takip/{no}", &["no"], 308, true);
        *routes(&mut plan) = vec![
            route("/", "genel"),
            captured,
            when("/gecici", "genel", |r| {
                r.target = redirect("{scheme}://{host}/kalici{path}", &[], 302, false)
            }),
        ];
        let running = trafik_proxy::start(plan).unwrap();
        let mut client = Client::connect(web(&running)).await;
        let moved = client.get("/eski/takip/TR-7?dil=tr").await;
        assert_eq!(moved.status, 308);
        assert_eq!(
            moved.header("location"),
            Some("https://yeni.test/takip/TR-7?dil=tr")
        );
        assert_eq!(moved.header("x-kopya"), None, "the pool never sees it");
        let found = client.get("/gecici/a?b=1").await;
        assert_eq!(found.status, 302);
        assert_eq!(
            found.header("location"),
            Some("http://kargo.test/kalici/gecici/a")
        );
        assert_eq!(client.get("/takip").await.header("x-kopya"), Some("genel"));
        stop(running).await;
    }
}

#[tokio::test]
async fn a_redirect_https_listener_sends_every_request_to_https() {
    let mut plan = plan(&[]);
    plan.pools.clear();
    plan.listeners[0].kind = ListenerKind::Http {
        routes: vec![RoutePlan::redirect_https()],
    };
    let running = trafik_proxy::start(plan).unwrap();
    let request = Request::post("/olay/1?x=1")
        .header("host", "kargo.test:8080")
        .body(Full::new(Bytes::from_static(b"veri")))
        .unwrap();
    let answer = Client::connect(web(&running)).await.send(request).await;
    assert_eq!(answer.status, 308);
    assert_eq!(
        answer.header("location"),
        Some("https://kargo.test/olay/1?x=1")
    );
    stop(running).await;
}

#[tokio::test]
async fn the_upstream_sees_the_rewritten_path_and_the_query_on_both_engines() {
    for engine in ENGINES {
        let (backend, received) =
            answering_recorded("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
        let mut plan = plan_on(engine, &[backend]);
        let rewrite = |rewrite: PathRewrite| vec![FilterPlan::RewritePath(rewrite)];
        *routes(&mut plan) = vec![
            when("/api", "takip", |r| {
                r.filters = rewrite(PathRewrite::StripPrefix("/api".into()))
            }),
            when("/v1", "takip", |r| {
                r.filters = rewrite(PathRewrite::ReplacePrefix {
                    from: "/v1".into(),
                    to: "/v2".into(),
                })
            }),
            when("/eski", "takip", |r| {
                r.filters =
                    rewrite(PathRewrite::regex("^/eski/([^/]+)/(.*)$", "/yeni/$2/$1").unwrap())
            }),
        ];
        let running = trafik_proxy::start(plan).unwrap();
        let mut client = Client::connect(web(&running)).await;
        for path in [
            "/api/takip/1?x=1",
            "/api",
            "/v1/takip?y=2",
            "/eski/TR-1/ozet",
        ] {
            assert_eq!(client.get(path).await.status, 200);
        }
        let seen = String::from_utf8_lossy(&received.lock().unwrap()).into_owned();
        let lines: Vec<&str> = seen.lines().filter(|l| l.starts_with("GET ")).collect();
        assert_eq!(
            lines,
            [
                "GET /takip/1?x=1 HTTP/1.1",
                "GET / HTTP/1.1",
                "GET /v2/takip?y=2 HTTP/1.1",
                "GET /yeni/ozet/TR-1 HTTP/1.1",
            ]
        );
        stop(running).await;
    }
}

#[tokio::test]
async fn address_rules_refuse_with_403_and_are_counted() {
    for engine in ENGINES {
        let (mut plan, _replicas) = pools_of_one(&["genel"], engine).await;
        let rules = |allow: &[&str], deny: &[&str]| IpRules {
            allow: allow.iter().map(|n| parse_net(n).unwrap()).collect(),
            deny: deny.iter().map(|n| parse_net(n).unwrap()).collect(),
        };
        *routes(&mut plan) = vec![
            when("/takip/ic", "genel", |r| {
                r.routing.access = vec![rules(&["127.0.0.0/8"], &[])]
            }),
            when("/takip/dis", "genel", |r| {
                r.routing.access = vec![rules(&["10.0.0.0/8"], &[])]
            }),
            // The listener allows loopback; the route denies it: deny wins.
            when("/takip/yasak", "genel", |r| {
                r.routing.access = vec![rules(&["127.0.0.0/8"], &[]), rules(&[], &["127.0.0.1"])]
            }),
        ];
        let running = trafik_proxy::start(plan).unwrap();
        let mut client = Client::connect(web(&running)).await;
        assert_eq!(client.get("/takip/ic/1").await.status, 200);
        for _ in 0..3 {
            assert_eq!(client.get("/takip/dis/1").await.status, 403);
        }
        assert_eq!(client.get("/takip/yasak").await.status, 403);
        let status = status(&running).await;
        let denied: BTreeMap<&str, u64> = status["routing"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["route"].as_str().unwrap(), r["denied"].as_u64().unwrap()))
            .collect();
        let metrics = admin_get(&running, "/metrics").await.text();
        assert!(
            metrics.contains("trafik_route_denied_total{route=\"web /takip/dis\"} 3"),
            "{metrics}"
        );
        assert_eq!(
            denied,
            BTreeMap::from([
                ("web /takip/ic", 0),
                ("web /takip/dis", 3),
                ("web /takip/yasak", 1)
            ])
        );
        stop(running).await;
    }
}
