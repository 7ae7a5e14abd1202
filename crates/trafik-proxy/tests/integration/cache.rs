//! The edge cache live: trafik in front of `trafik upstream` replicas (and, for revalidation, an
//! origin with validators), on real loopback sockets; the origin's own counters say what
//! reached it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use trafik_proxy::{
    CacheHeader, CachePlan, PathTemplate, Plan, Running, ServiceChoice, TargetPlan,
    UpstreamTemplate,
};
use trafik_test_support::proxy::*;
use trafik_upstream::RunningReplica;

/// The course's edge: x-kenar says isabet or iska.
fn cache_plan(default_ttl: Duration) -> CachePlan {
    CachePlan {
        name: "kenar".into(),
        max_entries: 1000,
        max_bytes: 1 << 20,
        policy: trafik_cache::Policy::Lru,
        default_ttl,
        stale_while_revalidate: Duration::ZERO,
        stale_if_error: Duration::ZERO,
        header: Some(CacheHeader {
            name: http::HeaderName::from_static("x-kenar"),
            hit: HeaderValue::from_static("isabet"),
            miss: HeaderValue::from_static("iska"),
        }),
        clock: trafik_cache::Clock::system(),
    }
}

/// A cache clock a minute behind the system's, which origins date their answers on: advanced by
/// that minute, the copies stored before are a minute old, and those stored after are new.
fn clock_a_minute_behind() -> trafik_cache::Clock {
    trafik_cache::Clock::manual(std::time::SystemTime::now() - A_MINUTE)
}

const A_MINUTE: Duration = Duration::from_secs(60);

/// One listener whose only route puts `cache` in front of pool `takip` (`backends`).
fn edge(backends: &[SocketAddr], cache: CachePlan) -> Plan {
    let mut plan = plan(backends);
    let route = &mut routes(&mut plan)[0];
    route.target = TargetPlan::Cached {
        cache: Arc::new(cache),
        target: Box::new(route.target.clone()),
    };
    plan
}

/// Requests the replica answered (its own counter).
/// The course's edge with a minute of freshness in front of one replica, which runs as long as
/// the returned handle.
async fn edge_before_one_replica() -> (Vec<RunningReplica>, Running) {
    let origin = replicas(1).await;
    let running = trafik_proxy::start(edge(
        &[origin[0].address()],
        cache_plan(Duration::from_secs(60)),
    ))
    .unwrap();
    (origin, running)
}

async fn origin_requests(replica: SocketAddr) -> u64 {
    get(replica, "/sayac").await.json()["istek"]
        .as_u64()
        .unwrap()
}

async fn cache_status(running: &Running) -> serde_json::Value {
    status(running).await["caches"][0].clone()
}

/// `POST /caches/kenar/preload` with `paths`.
async fn preload(running: &Running, paths: &[String]) -> Answer {
    let list = serde_json::to_string(paths).unwrap();
    admin(running, "POST", "/caches/kenar/preload", &list).await
}

/// A request to the admin API with a body.
async fn admin(running: &Running, method: &str, path: &str, body: &str) -> Answer {
    let address = running.admin_address().unwrap();
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", address.to_string())
        .header("content-type", "text/css")
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    Client::connect(address).await.send(request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_a_miss_then_hits_and_six_requests_for_two_numbers_reach_the_origin_twice() {
    let (origin, running) = edge_before_one_replica().await;
    let mut seen = Vec::new();
    for _round in 0..3 {
        for number in ["TR900011", "TR900012"] {
            let answer = get(web(&running), &format!("/takip/{number}")).await;
            assert_eq!(answer.status, 200);
            assert!(answer.text().contains(number));
            assert!(
                answer.header("cache-status").is_some(),
                "every answer says what the cache did"
            );
            seen.push(answer.header("x-kenar").unwrap().to_owned());
        }
    }
    assert_eq!(
        seen,
        ["iska", "iska", "isabet", "isabet", "isabet", "isabet"]
    );
    assert_eq!(origin_requests(origin[0].address()).await, 2);
    let counters = cache_status(&running).await;
    assert_eq!(counters["hits"], 4);
    assert_eq!(counters["misses"], 2);
    assert_eq!(counters["origin_requests"], 2);
    assert_eq!(counters["entries"], 2);
    let answer = get(web(&running), "/takip/TR900011").await;
    assert!(answer.header("cache-status").unwrap().contains("hit"));
    assert!(answer.header("age").is_some());
    assert_eq!(
        handed_to_hyper(&running).await,
        0,
        "served by the own engine"
    );
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_misses_for_one_key_reach_the_origin_once() {
    // A slow origin, so every request arrives while the first is still being answered.
    let origin = replica(
        "k1",
        LOOPBACK_ANY_PORT.parse().unwrap(),
        Duration::from_millis(500),
    )
    .await;
    let running = trafik_proxy::start(edge(
        &[origin.address()],
        cache_plan(Duration::from_secs(60)),
    ))
    .unwrap();
    let address = web(&running);
    let mut clients = Vec::new();
    for _ in 0..100 {
        clients.push(tokio::spawn(
            async move { get(address, "/takip/TR-1").await },
        ));
    }
    let mut bodies = std::collections::BTreeSet::new();
    for client in clients {
        let answer = client.await.unwrap();
        assert_eq!(answer.status, 200);
        bodies.insert(answer.body);
    }
    assert_eq!(bodies.len(), 1);
    assert_eq!(origin_requests(origin.address()).await, 1);
    let counters = cache_status(&running).await;
    assert_eq!(counters["origin_requests"], 1);
    // Each request was a hit (it came after the copy was stored) or waited for the one fetch.
    let coalesced = counters["coalesced"].as_u64().unwrap();
    let hits = counters["hits"].as_u64().unwrap();
    assert_eq!(coalesced + hits, 99, "{counters}");
    assert!(coalesced > 0, "{counters}");
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_makes_the_next_request_a_miss() {
    let (_origin, running) = edge_before_one_replica().await;
    for path in ["/takip/TR-1", "/takip/TR-2", "/takip/TR-1", "/olay"] {
        get(web(&running), path).await;
    }
    assert_eq!(
        get(web(&running), "/takip/TR-1").await.header("x-kenar"),
        Some("isabet")
    );
    let purged = admin(&running, "POST", "/caches/kenar/purge?path=/takip/TR-1", "").await;
    assert_eq!(purged.status, 200);
    assert_eq!(purged.json()["purged"], 1);
    assert_eq!(
        get(web(&running), "/takip/TR-1").await.header("x-kenar"),
        Some("iska")
    );
    assert_eq!(
        get(web(&running), "/takip/TR-2").await.header("x-kenar"),
        Some("isabet")
    );
    let purged = admin(&running, "POST", "/caches/kenar/purge?prefix=/takip/", "").await;
    assert_eq!(purged.json()["purged"], 2);
    assert_eq!(
        get(web(&running), "/takip/TR-2").await.header("x-kenar"),
        Some("iska")
    );
    assert_eq!(
        get(web(&running), "/olay").await.header("x-kenar"),
        Some("isabet")
    );
    let counters = cache_status(&running).await;
    assert_eq!(counters["purged"], 3);
    let missing = admin(&running, "POST", "/caches/kenar/purge", "").await;
    assert_eq!(missing.status, 400);
    let unknown = admin(&running, "POST", "/caches/yok/purge?prefix=/", "").await;
    assert_eq!(unknown.status, 404);
    // A page of another origin may not purge (nor push, nor preload) through a browser.
    let address = running.admin_address().unwrap();
    let foreign = Request::post("/caches/kenar/purge?prefix=/")
        .header("host", address.to_string())
        .header("origin", "http://kotu.example")
        .body(Full::default())
        .unwrap();
    assert_eq!(
        Client::connect(address).await.send(foreign).await.status,
        403
    );
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_object_is_a_hit_that_never_reaches_the_origin() {
    let (origin, running) = edge_before_one_replica().await;
    let pushed = admin(
        &running,
        "PUT",
        "/caches/kenar/objects?path=/varlik/stil.css",
        "h1{}",
    )
    .await;
    assert_eq!(pushed.status, 200, "{}", pushed.text());
    assert_eq!(pushed.json()["bytes"], 4);
    let version = pushed.json()["version"].as_u64().unwrap();
    let answer = get(web(&running), "/varlik/stil.css").await;
    assert_eq!(answer.header("x-kenar"), Some("isabet"));
    assert_eq!(answer.text(), "h1{}");
    assert_eq!(answer.header("content-type"), Some("text/css"));
    assert_eq!(
        answer.header("etag"),
        Some(format!("\"trafik-{version}\"").as_str())
    );
    assert_eq!(origin_requests(origin[0].address()).await, 0);
    // A newer push replaces it, with a newer version.
    let again = admin(
        &running,
        "PUT",
        "/caches/kenar/objects?path=/varlik/stil.css",
        "h2{}",
    )
    .await;
    assert!(again.json()["version"].as_u64().unwrap() > version);
    assert_eq!(get(web(&running), "/varlik/stil.css").await.text(), "h2{}");
    assert_eq!(cache_status(&running).await["pushed"], 2);
    let wrong = admin(&running, "POST", "/caches/kenar/objects?path=/x", "").await;
    assert_eq!(wrong.status, 405);
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preloading_twenty_paths_makes_the_next_twenty_requests_hits() {
    let (origin, running) = edge_before_one_replica().await;
    let paths: Vec<String> = (1..=20).map(|n| format!("/takip/TR9000{n:02}")).collect();
    let preloaded = preload(&running, &paths).await;
    assert_eq!(preloaded.status, 200, "{}", preloaded.text());
    assert_eq!(preloaded.json()["preloaded"], 20);
    assert_eq!(preloaded.json()["failed"], 0);
    assert_eq!(origin_requests(origin[0].address()).await, 20);
    for path in &paths {
        let answer = get(web(&running), path).await;
        assert_eq!(answer.header("x-kenar"), Some("isabet"), "{path}");
    }
    assert_eq!(origin_requests(origin[0].address()).await, 20);
    let counters = cache_status(&running).await;
    assert_eq!(counters["preloaded"], 20);
    assert_eq!(counters["hits"], 20);
    let bad = admin(
        &running,
        "POST",
        "/caches/kenar/preload",
        "{\"not\": \"a list\"}",
    )
    .await;
    assert_eq!(bad.status, 400);
    stop(running).await;
}

/// Probe finding: every preload job was spawned at once, so a list of 200,000 paths (1 MiB)
/// opened as many origin fetches together. Each worker now runs a bounded number of jobs at a
/// time; the rest wait in the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_preload_list_reaches_the_origin_a_few_paths_at_a_time() {
    let (in_flight, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (counting, highest) = (in_flight.clone(), most.clone());
    let origin = raw_backend(move |mut stream| {
        let (counting, highest) = (counting.clone(), highest.clone());
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut seen = Vec::new();
            let mut buffer = [0u8; 4096];
            loop {
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buffer[..n]),
                    }
                }
                seen.clear();
                let now = counting.fetch_add(1, Ordering::SeqCst) + 1;
                highest.fetch_max(now, Ordering::SeqCst);
                // Held long enough that fetches started together overlap.
                tokio::time::sleep(Duration::from_millis(50)).await;
                counting.fetch_sub(1, Ordering::SeqCst);
                let answer =
                    b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 2\r\n\r\nok";
                if stream.write_all(answer).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    let mut plan = edge(&[origin], cache_plan(Duration::from_secs(60)));
    plan.workers = 1;
    let running = trafik_proxy::start(plan).unwrap();
    let paths: Vec<String> = (0..200).map(|n| format!("/takip/TR{n}")).collect();
    let preloaded = preload(&running, &paths).await;
    assert_eq!(preloaded.json()["preloaded"], 200, "{}", preloaded.text());
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= trafik_proxy::http::cache::JOBS_AT_ONCE,
        "{most} fetches at once"
    );
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_error_within_stale_if_error_serves_the_stale_copy() {
    let origin = replicas(1).await;
    let mut cache = cache_plan(Duration::from_secs(1));
    cache.stale_if_error = Duration::from_secs(600);
    cache.clock = clock_a_minute_behind();
    let clock = cache.clock.clone();
    let running = trafik_proxy::start(edge(&[origin[0].address()], cache)).unwrap();
    let fresh = get(web(&running), "/takip/TR-7").await;
    assert_eq!(fresh.header("x-kenar"), Some("iska"));
    for replica in origin {
        replica.stop().await;
    }
    // Past its freshness: the copy must go to the origin, which is gone.
    clock.advance(A_MINUTE);
    let stale = get(web(&running), "/takip/TR-7").await;
    assert_eq!(stale.status, 200);
    assert_eq!(stale.body, fresh.body);
    let said = stale.header("cache-status").unwrap();
    assert!(
        said.contains("fwd=stale") && said.contains("stale-if-error"),
        "{said}"
    );
    assert!(said.contains("fwd-status=502"), "{said}");
    // A key never stored has no stale copy: the error goes through, marked as a miss.
    let missing = get(web(&running), "/takip/TR-8").await;
    assert_eq!(missing.status, 502);
    assert_eq!(missing.header("x-kenar"), Some("iska"));
    assert_eq!(cache_status(&running).await["stale_served"], 1);
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_while_revalidate_answers_at_once_and_refreshes_behind() {
    let origin = replicas(1).await;
    let mut cache = cache_plan(Duration::from_secs(1));
    cache.stale_while_revalidate = Duration::from_secs(600);
    cache.clock = clock_a_minute_behind();
    let clock = cache.clock.clone();
    let running = trafik_proxy::start(edge(&[origin[0].address()], cache)).unwrap();
    let first = get(web(&running), "/takip/TR-3").await;
    assert_eq!(first.header("x-kenar"), Some("iska"));
    clock.advance(A_MINUTE);
    let stale = get(web(&running), "/takip/TR-3").await;
    assert_eq!(stale.header("x-kenar"), Some("isabet"));
    let said = stale.header("cache-status").unwrap();
    assert!(said.contains("stale-while-revalidate"), "{said}");
    // The refresh runs on a worker after the answer: the origin sees it.
    let mut waited = 0;
    while origin_requests(origin[0].address()).await < 2 {
        assert!(waited < 100, "the stale copy was never refreshed");
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
    let fresh = get(web(&running), "/takip/TR-3").await;
    assert!(fresh.header("cache-status").unwrap().contains("hit; ttl="));
    assert_eq!(origin_requests(origin[0].address()).await, 2);
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_the_cache_may_not_answer_go_to_the_origin_and_say_why() {
    let (origin, running) = edge_before_one_replica().await;
    let mut client = Client::connect(web(&running)).await;
    let post = client
        .send(
            Request::post("/olay")
                .header("host", "kargo.test")
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap(),
        )
        .await;
    assert_eq!(post.status, 201);
    assert!(post.header("cache-status").unwrap().ends_with("fwd=method"));
    // What GET /olay answered (404, cacheable by default) is stored; a POST that succeeds
    // there makes it stale: the next GET goes to the origin again.
    assert_eq!(client.get("/olay").await.header("x-kenar"), Some("iska"));
    assert_eq!(client.get("/olay").await.header("x-kenar"), Some("isabet"));
    let changed = client
        .send(
            Request::post("/olay")
                .header("host", "kargo.test")
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap(),
        )
        .await;
    assert_eq!(changed.status, 201);
    assert_eq!(client.get("/olay").await.header("x-kenar"), Some("iska"));
    for _ in 0..2 {
        let no_store = client
            .send(
                Request::get("/takip/TR-1")
                    .header("host", "kargo.test")
                    .header("cache-control", "no-store")
                    .body(Full::default())
                    .unwrap(),
            )
            .await;
        assert!(
            no_store
                .header("cache-status")
                .unwrap()
                .ends_with("fwd=request")
        );
    }
    assert_eq!(origin_requests(origin[0].address()).await, 6);
    assert_eq!(cache_status(&running).await["entries"], 1);
    stop(running).await;
}

/// An origin whose answers carry an ETag and stay fresh for one second; it answers 304 to a
/// request naming that ETag. Counts its 200s and 304s.
async fn validating_origin() -> (SocketAddr, Arc<[AtomicUsize; 2]>) {
    let counts: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let counting = counts.clone();
    let address = hyper_backend(move |request: Request<hyper::body::Incoming>| {
        let counting = counting.clone();
        async move {
            let matches = request
                .headers()
                .get("if-none-match")
                .is_some_and(|tag| tag == "\"v1\"");
            let mut response = Response::new(Full::new(if matches {
                Bytes::new()
            } else {
                Bytes::from_static(b"surum 1")
            }));
            if matches {
                *response.status_mut() = StatusCode::NOT_MODIFIED;
                counting[1].fetch_add(1, Ordering::SeqCst);
            } else {
                counting[0].fetch_add(1, Ordering::SeqCst);
            }
            let headers = response.headers_mut();
            headers.insert("etag", HeaderValue::from_static("\"v1\""));
            let fresh_for = if matches { "max-age=60" } else { "max-age=1" };
            headers.insert("cache-control", HeaderValue::from_static(fresh_for));
            headers.insert(
                "x-tur",
                HeaderValue::from(counting[1].load(Ordering::SeqCst)),
            );
            Ok::<_, std::convert::Infallible>(response)
        }
    })
    .await;
    (address, counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_304_from_the_origin_refreshes_the_stored_copy() {
    let (origin, counts) = validating_origin().await;
    let mut cache = cache_plan(Duration::ZERO);
    cache.clock = clock_a_minute_behind();
    let clock = cache.clock.clone();
    let running = trafik_proxy::start(edge(&[origin], cache)).unwrap();
    let first = get(web(&running), "/takip/TR-5").await;
    assert_eq!(first.text(), "surum 1");
    // Its second of freshness (max-age=1) is long over.
    clock.advance(A_MINUTE);
    let revalidated = get(web(&running), "/takip/TR-5").await;
    assert_eq!(revalidated.status, 200);
    assert_eq!(revalidated.text(), "surum 1");
    let said = revalidated.header("cache-status").unwrap();
    assert!(said.contains("fwd=stale; fwd-status=304"), "{said}");
    // The 304's headers replaced the stored ones.
    assert_eq!(revalidated.header("x-tur"), Some("1"));
    assert_eq!(counts[0].load(Ordering::SeqCst), 1);
    assert_eq!(counts[1].load(Ordering::SeqCst), 1);
    assert_eq!(cache_status(&running).await["revalidated"], 1);
    // A client's own validator is answered by the cache.
    let mut client = Client::connect(web(&running)).await;
    let conditional = client
        .send(
            Request::get("/takip/TR-5")
                .header("host", "kargo.test")
                .header("if-none-match", "\"v1\"")
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(conditional.status, 304);
    assert_eq!(
        counts[0].load(Ordering::SeqCst) + counts[1].load(Ordering::SeqCst),
        2
    );
    stop(running).await;
}

/// An origin that answers in the language asked for (`Vary: accept-language`, fresh a minute),
/// after `delay`; counts its answers.
async fn varying_origin(delay: Duration) -> (SocketAddr, Arc<AtomicUsize>) {
    let count = Arc::new(AtomicUsize::new(0));
    let counting = count.clone();
    let address = hyper_backend(move |request: Request<hyper::body::Incoming>| {
        let counting = counting.clone();
        async move {
            tokio::time::sleep(delay).await;
            counting.fetch_add(1, Ordering::SeqCst);
            let language = request
                .headers()
                .get("accept-language")
                .map_or(Bytes::from_static(b"-"), |v| {
                    Bytes::copy_from_slice(v.as_bytes())
                });
            let mut response = Response::new(Full::new(language));
            let headers = response.headers_mut();
            headers.insert("vary", HeaderValue::from_static("Accept-Language"));
            headers.insert("cache-control", HeaderValue::from_static("max-age=60"));
            Ok::<_, std::convert::Infallible>(response)
        }
    })
    .await;
    (address, count)
}

async fn in_language(address: SocketAddr, language: &str) -> Answer {
    Client::connect(address)
        .await
        .send(
            Request::get("/takip/TR-1")
                .header("host", "kargo.test")
                .header("accept-language", language)
                .body(Full::default())
                .unwrap(),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_variant_of_a_varying_answer_is_its_own_entry_even_when_requests_collapse() {
    let (origin, count) = varying_origin(Duration::from_millis(300)).await;
    let running = trafik_proxy::start(edge(&[origin], cache_plan(Duration::ZERO))).unwrap();
    let address = web(&running);
    // Concurrent first requests in two languages: the Turkish ones may wait on the English
    // fetch, but must not be answered with its variant.
    let mut asking = Vec::new();
    for n in 0..10 {
        let language = if n % 2 == 0 { "tr" } else { "en" };
        asking.push(tokio::spawn(async move {
            (language, in_language(address, language).await)
        }));
    }
    for asked in asking {
        let (language, answer) = asked.await.unwrap();
        assert_eq!(answer.text(), language);
    }
    assert_eq!(count.load(Ordering::SeqCst), 2);
    for language in ["tr", "en"] {
        let answer = in_language(address, language).await;
        assert_eq!(answer.text(), language);
        assert_eq!(answer.header("x-kenar"), Some("isabet"));
    }
    assert_eq!(count.load(Ordering::SeqCst), 2);
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_a_cache_whose_settings_stay_and_empties_one_that_changes() {
    let origin = replicas(1).await;
    let plan = edge(&[origin[0].address()], cache_plan(Duration::from_secs(60)));
    let running = trafik_proxy::start(plan.clone()).unwrap();
    get(web(&running), "/takip/TR-1").await;
    running.apply(plan).unwrap();
    let kept = get(web(&running), "/takip/TR-1").await;
    assert_eq!(kept.header("x-kenar"), Some("isabet"));
    assert_eq!(
        cache_status(&running).await["hits"],
        1,
        "the counters carried over too"
    );
    let mut smaller = cache_plan(Duration::from_secs(60));
    smaller.max_entries = 10;
    running
        .apply(edge(&[origin[0].address()], smaller))
        .unwrap();
    let refetched = get(web(&running), "/takip/TR-1").await;
    assert_eq!(refetched.header("x-kenar"), Some("iska"));
    assert_eq!(origin_requests(origin[0].address()).await, 2);
    stop(running).await;
}

/// An origin that answers every request on a connection with the same raw `answer` bytes.
async fn raw_origin(answer: &'static [u8]) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    raw_backend(move |mut stream| async move {
        let mut buffer = vec![0; 4096];
        while let Ok(read) = stream.read(&mut buffer).await {
            if read == 0 || stream.write_all(answer).await.is_err() {
                break;
            }
        }
    })
    .await
}

/// Probe finding: an origin's 204 that names a Content-Length (its body is dropped, as a 204
/// has none) was stored and answered with that length over an empty body: hyper's length check
/// panicked and the client waited for an answer that never came, on the miss and on every hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_204_that_names_a_length_is_answered_without_one_on_a_miss_and_a_hit() {
    let origin = raw_origin(
        b"HTTP/1.1 204 No Content\r\ncontent-length: 5\r\ncache-control: max-age=60\r\n\r\nbosss",
    )
    .await;
    let running =
        trafik_proxy::start(edge(&[origin], cache_plan(Duration::from_secs(60)))).unwrap();
    for expected in ["iska", "isabet"] {
        let answer = raw_exchange(
            web(&running),
            b"GET /bos HTTP/1.1\r\nhost: kargo.test\r\nconnection: close\r\n\r\n",
        )
        .await;
        let head = answer.to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 204"), "{answer:?}");
        assert!(head.contains(&format!("x-kenar: {expected}")), "{answer:?}");
        assert!(!head.contains("content-length"), "{answer:?}");
    }
}

/// Probe finding: the cache endpoints were answered before the admin API's guards, so a page
/// on a rebound name (`Host: evil.test`) could push an object every client then got, and a
/// cross-site form (`Origin: http://evil.test`) could purge. Both are now refused as for
/// `/reload`, and nothing is stored or purged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_endpoints_refuse_foreign_pages_like_the_rest_of_the_admin_api() {
    let (_origin, running) = edge_before_one_replica().await;
    let address = running.admin_address().unwrap();
    let foreign = |method: &str, path: &str, name: &str, value: &str| {
        let host = if name == "host" {
            value.to_owned()
        } else {
            address.to_string()
        };
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", host);
        if name != "host" {
            request = request.header(name, value);
        }
        request
            .body(Full::new(Bytes::from_static(b"zehir")))
            .unwrap()
    };
    let rebound = Client::connect(address)
        .await
        .send(foreign(
            "PUT",
            "/caches/kenar/objects?path=/takip/TR1",
            "host",
            "evil.test",
        ))
        .await;
    assert_eq!(rebound.status, 403, "{}", rebound.text());
    let answer = get(web(&running), "/takip/TR1").await;
    assert_eq!(answer.header("x-kenar"), Some("iska"));
    assert_ne!(answer.text(), "zehir");
    let cross_site = Client::connect(address)
        .await
        .send(foreign(
            "POST",
            "/caches/kenar/purge?prefix=/",
            "origin",
            "http://evil.test",
        ))
        .await;
    assert_eq!(cross_site.status, 403, "{}", cross_site.text());
    let cached = get(web(&running), "/takip/TR1").await;
    assert_eq!(cached.header("x-kenar"), Some("isabet"));
    assert_eq!(cache_status(&running).await["pushed"], 0);
    stop(running).await;
}

/// An origin that answers every request 2xx, GETs with a body fresh for a minute; a POST to a
/// URI whose query is `moved` also names `/moved` (Location) and another host's `/kept`
/// (Content-Location).
async fn agreeable_origin() -> SocketAddr {
    hyper_backend(|request: Request<hyper::body::Incoming>| async move {
        let mut response = Response::new(Full::new(Bytes::from(format!(
            "{} {}",
            request.method(),
            request.uri()
        ))));
        let headers = response.headers_mut();
        headers.insert("cache-control", HeaderValue::from_static("max-age=60"));
        if request.uri().query() == Some("moved") {
            headers.insert("location", HeaderValue::from_static("/moved"));
            headers.insert(
                "content-location",
                HeaderValue::from_static("http://baska.test/kept"),
            );
        }
        Ok::<_, std::convert::Infallible>(response)
    })
    .await
}

/// Probe finding (issue 23): any client could flush the cache. A 2xx OPTIONS (a safe method)
/// dropped its path's copies, a POST to `/p?anything` dropped every `/p?*` copy, and nothing
/// counted it. Now only an unsafe method invalidates, only the exact URI (and a same-host
/// Location / Content-Location, RFC 9111 §4.4), each counted in `invalidated`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_unsafe_request_invalidates_and_only_its_own_uri() {
    let origin = agreeable_origin().await;
    let running =
        trafik_proxy::start(edge(&[origin], cache_plan(Duration::from_secs(60)))).unwrap();
    let mut client = Client::connect(web(&running)).await;
    let mut send = async |method: &str, path: &str| {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "kargo.test")
            .body(Full::default())
            .unwrap();
        client.send(request).await
    };
    let stored = ["/p?a", "/p?b", "/moved", "/kept"];
    for path in stored {
        assert_eq!(send("GET", path).await.header("x-kenar"), Some("iska"));
    }
    for (method, path) in [("OPTIONS", "/p?a"), ("TRACE", "/p?a"), ("POST", "/p?c")] {
        assert_eq!(send(method, path).await.status, 200, "{method} {path}");
    }
    for path in stored {
        assert_eq!(
            send("GET", path).await.header("x-kenar"),
            Some("isabet"),
            "{path} after OPTIONS /p?a, TRACE /p?a and POST /p?c"
        );
    }
    assert_eq!(send("POST", "/p?moved").await.status, 200);
    assert_eq!(send("DELETE", "/p?a").await.status, 200);
    let mut seen = Vec::new();
    for path in stored {
        seen.push((
            path,
            send("GET", path).await.header("x-kenar").map(str::to_owned),
        ));
    }
    let expected = [
        ("/p?a", Some("iska".to_owned())),
        ("/p?b", Some("isabet".to_owned())),
        ("/moved", Some("iska".to_owned())),
        ("/kept", Some("isabet".to_owned())),
    ];
    assert_eq!(seen, expected, "another host's Content-Location stays");
    let counters = cache_status(&running).await;
    assert_eq!(counters["invalidated"], 2, "{counters}");
    assert_eq!(counters["purged"], 0, "{counters}");
    stop(running).await;
}

/// Requests of the first listener the pipeline served.
async fn through_pipeline(running: &Running) -> serde_json::Value {
    status(running).await["listeners"][0]["through_pipeline"].clone()
}

/// The bytes a client got for `request` on a connection of its own.
async fn exchange_alone(running: &Running, request: &str) -> String {
    raw_exchange(web(running), request.as_bytes()).await
}

/// A hit is answered by the own HTTP/1 engine from the head it parsed: no request of the
/// course's edge goes through the pipeline once its copy is stored, and the answer is the one
/// the pipeline gives (the stored fields, `Age`, `Cache-Status`, the custom header; a 304 for a
/// matching validator; no body for HEAD). The query is part of the key; a request that says
/// `no-cache` is not a hit and takes the pipeline to the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_are_answered_by_the_own_engine_from_the_head_it_parsed() {
    let origin = raw_origin(
        // With labels of its own, which the cache's replace.
        b"HTTP/1.1 200 OK\r\netag: \"v1\"\r\ncache-control: max-age=600\r\ncache-status: koken; hit\r\nx-kenar: koken\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nmerhb",
    )
    .await;
    let running =
        trafik_proxy::start(edge(&[origin], cache_plan(Duration::from_secs(60)))).unwrap();
    let get = |target: &str, extra: &str| {
        format!("GET {target} HTTP/1.1\r\nhost: kargo.test\r\n{extra}connection: close\r\n\r\n")
    };
    for target in ["/takip/TR1?x=1", "/takip/TR1?x=2"] {
        let miss = exchange_alone(&running, &get(target, "")).await;
        assert!(miss.contains("x-kenar: iska"), "{miss}");
    }
    assert_eq!(through_pipeline(&running).await, 2);
    for target in ["/takip/TR1?x=1", "/takip/TR1?x=2", "/takip/TR1?x=1"] {
        let hit = exchange_alone(&running, &get(target, "")).await;
        assert!(hit.starts_with("HTTP/1.1 200 OK\r\n"), "{hit}");
        assert!(hit.ends_with("\r\n\r\nmerhb"), "{hit}");
        for field in [
            "x-kenar: isabet\r\n",
            "etag: \"v1\"\r\n",
            "content-type: text/plain\r\n",
            "content-length: 5\r\n",
            "age: ",
            "; hit; ttl=",
        ] {
            assert!(hit.contains(field), "{field:?} in {hit}");
        }
        for label in ["cache-status: ", "x-kenar: "] {
            assert_eq!(hit.matches(label).count(), 1, "{label:?} once in {hit}");
        }
    }
    let head = exchange_alone(
        &running,
        "HEAD /takip/TR1?x=1 HTTP/1.1\r\nhost: kargo.test\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(
        head.contains("content-length: 5\r\n") && head.ends_with("\r\n\r\n"),
        "{head}"
    );
    let validated = exchange_alone(
        &running,
        &get("/takip/TR1?x=1", "if-none-match: W/\"v1\"\r\n"),
    )
    .await;
    assert!(
        validated.starts_with("HTTP/1.1 304 Not Modified\r\n"),
        "{validated}"
    );
    assert!(
        validated.contains("x-kenar: isabet") && validated.ends_with("\r\n\r\n"),
        "{validated}"
    );
    assert_eq!(through_pipeline(&running).await, 2, "hits take no pipeline");
    assert_eq!(handed_to_hyper(&running).await, 0);
    let counters = cache_status(&running).await;
    assert_eq!(
        (counters["hits"].clone(), counters["misses"].clone()),
        (5.into(), 2.into())
    );
    let asked_again = exchange_alone(
        &running,
        &get("/takip/TR1?x=2", "cache-control: no-cache\r\n"),
    )
    .await;
    assert!(asked_again.contains("x-kenar: iska"), "{asked_again}");
    assert_eq!(through_pipeline(&running).await, 3);
    assert_eq!(cache_status(&running).await["origin_requests"], 3);
    stop(running).await;
}

/// A custom header named `Cache-Status` stands in for the cache's own, on a miss (the
/// pipeline) and on a hit (the own engine) alike: one field, the custom value.
#[tokio::test]
async fn a_custom_header_named_cache_status_replaces_the_caches_own() {
    let origin = raw_origin(
        b"HTTP/1.1 200 OK\r\ncache-control: max-age=600\r\ncontent-length: 5\r\n\r\nmerhb",
    )
    .await;
    let mut cache = cache_plan(Duration::from_secs(60));
    cache.header = Some(CacheHeader {
        name: http::HeaderName::from_static("cache-status"),
        hit: HeaderValue::from_static("HIT"),
        miss: HeaderValue::from_static("MISS"),
    });
    let running = trafik_proxy::start(edge(&[origin], cache)).unwrap();
    let get = "GET /takip/TR1 HTTP/1.1\r\nhost: kargo.test\r\nconnection: close\r\n\r\n";
    for expected in ["cache-status: MISS\r\n", "cache-status: HIT\r\n"] {
        let answer = exchange_alone(&running, get).await;
        assert!(answer.contains(expected), "{expected:?} in {answer}");
        assert_eq!(answer.matches("cache-status: ").count(), 1, "{answer}");
    }
    stop(running).await;
}

/// A cached gateway route: a preload (a job with no client's request behind it) goes through
/// the route's path template as a client's miss does — its upstream path written from the
/// captures — and what it stores answers the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preload_through_a_gateway_route_writes_its_upstream_path_from_the_captures() {
    let origin = replicas(1).await;
    let mut plan = plan(&[origin[0].address()]);
    let route = &mut routes(&mut plan)[0];
    route.path_template = Some(PathTemplate::parse("/kargo/{no}").unwrap());
    route.target = TargetPlan::Cached {
        cache: Arc::new(cache_plan(Duration::from_secs(60))),
        target: Box::new(TargetPlan::Service {
            service: ServiceChoice::Named("takip".into()),
            upstream_path: Some(UpstreamTemplate::parse("/takip/{no}", &["no".into()]).unwrap()),
            retry_non_idempotent: false,
        }),
    };
    let running = trafik_proxy::start(plan).unwrap();
    let preloaded = admin(
        &running,
        "POST",
        "/caches/kenar/preload",
        "[\"/kargo/TR900001\"]",
    )
    .await;
    assert_eq!(preloaded.status, 200, "{}", preloaded.text());
    assert_eq!(preloaded.json()["preloaded"], 1, "{}", preloaded.text());
    assert_eq!(origin_requests(origin[0].address()).await, 1);
    let answer = get(web(&running), "/kargo/TR900001").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("x-kenar"), Some("isabet"));
    assert_eq!(origin_requests(origin[0].address()).await, 1);
    stop(running).await;
}
