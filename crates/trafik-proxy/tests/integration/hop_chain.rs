//! The course's lesson "Yük Dengeleyici ve Ters Vekil" (lesson 9): the same work as two trafik
//! instances — `tv` routes `/varlik` to the content replica and the rest to `yd`, `yd` spreads
//! it over k1–k3 — and as one merged instance, `tvyd`. The `x-durak` header shows the stops each
//! request touched; stopping the instance that holds the replica list shows what still answers.
//! All real sockets, replicas of `trafik upstream`, the course's request mix and its table.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use http::HeaderName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trafik_proxy::{Plan, Running};
use trafik_test_support::proxy::*;
use trafik_upstream::RunningReplica;

const TRACE: HeaderName = HeaderName::from_static("x-durak");

/// The course's table (`vekil/olc.sh`), row for row. Where the course's relay writes
/// `ulasilamadi` after the chain, trafik writes its reason for the same failure, `unreachable`;
/// `baglanti yok` (no connection) is the client's own label.
const COURSE_TABLE: &str = "\
ayri: tv + yd          /varlik/stil.css  6/6  tv > statik (6)
ayri: tv + yd          /takip            6/6  tv > yd > k1 (2)  |  tv > yd > k2 (2)  |  tv > yd > k3 (2)
ayri: yd durduruldu    /varlik/stil.css  6/6  tv > statik (6)
ayri: yd durduruldu    /takip            0/6  tv > unreachable (6)
birlesik: tvyd         /varlik/stil.css  6/6  tvyd > statik (6)
birlesik: tvyd         /takip            6/6  tvyd > k1 (2)  |  tvyd > k2 (2)  |  tvyd > k3 (2)
birlesik: durduruldu   /varlik/stil.css  0/6  baglanti yok (6)
birlesik: durduruldu   /takip            0/6  baglanti yok (6)
";

/// The course's client (`vekil/istemci.mjs`): each path six times, on a new connection each;
/// how many were answered 200, and how many came back with each chain.
const PATHS: [&str; 2] = ["/varlik/stil.css", "/takip"];
const REQUESTS: usize = 6;

/// One request on a new connection: its status and `x-durak` (`-` when absent), or `None` when
/// nothing accepted the connection.
async fn try_get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: kargo.test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let head = answer.split("\r\n\r\n").next().unwrap_or("");
    let status = head
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let chain = head
        .lines()
        .find_map(|line| line.strip_prefix("x-durak: "))
        .unwrap_or("-");
    Some((status, chain.to_owned()))
}

/// The client's rows for one run, formatted as the course prints them.
async fn rows(address: SocketAddr, label: &str) -> String {
    let mut out = String::new();
    for path in PATHS {
        let mut chains: BTreeMap<String, usize> = BTreeMap::new();
        let mut answered = 0;
        for _ in 0..REQUESTS {
            let chain = match try_get(address, path).await {
                Some((status, chain)) => {
                    answered += usize::from(status == 200);
                    chain
                }
                None => "baglanti yok".to_owned(),
            };
            *chains.entry(chain).or_default() += 1;
        }
        let chains: Vec<String> = chains
            .iter()
            .map(|(chain, n)| format!("{chain} ({n})"))
            .collect();
        out += &format!(
            "{label:<22} {path:<17} {answered}/{REQUESTS}  {}\n",
            chains.join("  |  ")
        );
    }
    out
}

async fn named_replica(name: &str) -> RunningReplica {
    replica(name, LOOPBACK_ANY_PORT.parse().unwrap(), Duration::ZERO).await
}

/// An instance named `name`, tracing in `x-durak`, whose routes send each prefix to a pool of
/// its own: `[("/varlik", [statik]), ("/", [k1, k2, k3])]`.
fn relay(name: &str, rules: &[(&str, &[SocketAddr])]) -> Plan {
    let mut plan = plan(&[]);
    plan.name = name.into();
    plan.trace_header = Some(TRACE);
    plan.pools.clear();
    routes(&mut plan).clear();
    for (i, (prefix, targets)) in rules.iter().enumerate() {
        let pool_name = format!("kural{i}");
        plan.pools.push(pool(&pool_name, targets));
        routes(&mut plan).push(route(prefix, &pool_name));
    }
    plan
}

fn start(plan: Plan) -> Running {
    trafik_proxy::start(plan).expect("the instance starts")
}

#[tokio::test]
async fn split_and_merged_layouts_reproduce_the_course_table() {
    let statik = named_replica("statik").await;
    let replicas = [
        named_replica("k1").await,
        named_replica("k2").await,
        named_replica("k3").await,
    ];
    let list: Vec<SocketAddr> = replicas.iter().map(RunningReplica::address).collect();
    let content: &[SocketAddr] = &[statik.address()];

    let yd = start(relay("yd", &[("/", &list)]));
    let tv = start(relay("tv", &[("/varlik", content), ("/", &[web(&yd)])]));
    let mut table = rows(web(&tv), "ayri: tv + yd").await;
    stop(yd).await;
    table += &rows(web(&tv), "ayri: yd durduruldu").await;
    stop(tv).await;

    let merged = start(relay("tvyd", &[("/varlik", content), ("/", &list)]));
    let merged_address = web(&merged);
    table += &rows(merged_address, "birlesik: tvyd").await;
    stop(merged).await;
    table += &rows(merged_address, "birlesik: durduruldu").await;

    assert_eq!(table, COURSE_TABLE);
}

#[tokio::test]
async fn a_chain_that_breaks_further_on_names_every_stop_before_the_break() {
    let k1 = named_replica("k1").await;
    let k1_address = k1.address();
    let mut yd_plan = relay("yd", &[("/takip", &[k1_address])]);
    yd_plan.pools[0].retries = 0;
    let yd = start(yd_plan);
    let tv = start(relay("tv", &[("/", &[web(&yd)])]));

    let answer = get(web(&tv), "/takip/TR-1").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("x-durak"), Some("tv > yd > k1"));
    // yd has no route for it: yd's own 404, relayed by tv as it is.
    let answer = get(web(&tv), "/baska").await;
    assert_eq!(answer.status, 404);
    assert_eq!(answer.header("x-durak"), Some("tv > yd > no-route"));
    // The replica behind yd is gone: yd answers 502 and says so.
    k1.stop().await;
    let answer = get(web(&tv), "/takip/TR-1").await;
    assert_eq!(answer.status, 502);
    assert_eq!(answer.header("x-durak"), Some("tv > yd > unreachable"));
    assert_eq!(
        answer.text(),
        format!("could not connect to a backend: k1 ({k1_address}), connection refused\n")
    );
    stop(tv).await;
    stop(yd).await;
}

#[tokio::test]
async fn the_chain_goes_on_from_what_the_client_sent_and_is_absent_when_off() {
    let echo = echo_server(Duration::ZERO).await;
    let mut traced = plan(&[echo]);
    traced.trace_header = Some(TRACE);
    let running = start(traced.clone());
    let mut client = Client::connect(web(&running)).await;
    let seen = client.get("/takip/TR-1").await.json();
    assert_eq!(seen["headers"]["x-durak"], "trafik-test");
    let from_edge = http::Request::get("/takip/TR-1")
        .header("host", "kargo.test")
        .header("x-durak", "kenar")
        .body(http_body_util::Full::default())
        .unwrap();
    let seen = client.send(from_edge).await.json();
    assert_eq!(seen["headers"]["x-durak"], "kenar > trafik-test");
    stop(running).await;

    let mut off = traced;
    off.trace_header = None;
    let running = start(off);
    let seen = get(web(&running), "/takip/TR-1").await.json();
    assert!(seen["headers"].get("x-durak").is_none(), "{seen}");
    stop(running).await;
}
