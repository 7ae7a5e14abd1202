//! The hop chain and WebSocket upgrades through real processes: `trafik proxy` instances (quick
//! mode, `--trace-header`) in a row in front of a `trafik upstream` replica, and lesson 9's
//! example files run as the course runs its relays.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::Stdio;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use trafik_test_support::{
    INSIDE_NAMESPACE, Proxy, Trafik, Upstream, run_in_own_network_namespace,
};

/// `GET path` on a new connection: the status code and the `x-durak` header.
fn get(address: &str, path: &str) -> (u16, Option<String>) {
    try_get(address, path).expect("the connection is accepted")
}

/// As [`get`], or `None` when nothing accepts the connection.
fn try_get(address: &str, path: &str) -> Option<(u16, Option<String>)> {
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: kargo.test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let head = answer.split("\r\n\r\n").next().unwrap();
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let chain = head
        .lines()
        .find_map(|line| line.strip_prefix("x-durak: "))
        .map(str::to_owned);
    Some((status, chain))
}

/// `trafik proxy --name NAME --trace-header x-durak --to BACKEND`.
fn proxy(name: &str, backend: &str) -> Proxy {
    Proxy::start(
        &[],
        &["--name", name, "--trace-header", "x-durak", "--to", backend],
    )
}

#[test]
fn each_trafik_in_a_row_adds_its_name_and_says_where_the_row_broke() {
    let k1 = Upstream::start(&[]);
    let yd = proxy("yd", &k1.address);
    let tv = proxy("tv", &yd.address);

    assert_eq!(
        get(&tv.address, "/takip/TR-1"),
        (200, Some("tv > yd > k1".into()))
    );
    assert_eq!(get(&k1.address, "/takip/TR-1"), (200, Some("k1".into())));

    yd.stop();
    assert_eq!(
        get(&tv.address, "/takip/TR-1"),
        (502, Some("tv > unreachable".into()))
    );
    tv.stop();
    k1.stop();
}

#[test]
fn a_trace_header_that_cannot_cross_a_hop_is_refused_by_its_flag() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["proxy", "--listen", "127.0.0.1:0", "--to", "127.0.0.1:9"])
        .args(["--trace-header", "connection"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(
        errors.contains("--trace-header: \"connection\" is removed at every hop"),
        "{errors}"
    );
}

#[tokio::test]
async fn a_websocket_reaches_the_replicas_echo_through_two_proxies() {
    let k1 = Upstream::start(&[]);
    let yd = proxy("yd", &k1.address);
    let tv = proxy("tv", &yd.address);

    let stream = tokio::net::TcpStream::connect(&tv.address).await.unwrap();
    let (mut socket, handshake) = tokio_tungstenite::client_async("ws://kargo.test/yanki", stream)
        .await
        .expect("the handshake succeeds");
    assert_eq!(handshake.status(), 101);
    assert_eq!(handshake.headers()["x-durak"], "tv > yd > k1");
    assert_eq!(handshake.headers()["via"], "1.1 yd, 1.1 tv");
    for message in [Message::text("merhaba"), Message::binary(vec![0u8, 255])] {
        socket.send(message.clone()).await.unwrap();
        assert_eq!(socket.next().await.unwrap().unwrap(), message);
    }
    socket.close(None).await.unwrap();
    assert!(matches!(socket.next().await, Some(Ok(Message::Close(_)))));
    assert!(socket.next().await.is_none());
    tv.stop();
    yd.stop();
    k1.stop();
}

/// The course's table for lesson 9 (`vekil/olc.sh`). Where its relay writes `ulasilamadi` after
/// the chain, trafik writes its reason for the same failure, `unreachable`; `baglanti yok` (no
/// connection) is the client's own label.
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

/// The course's client (`vekil/istemci.mjs`): each path six times on a new connection, then
/// one row per path: answered with 200, and how many came back with each chain.
fn rows(address: &str, label: &str) -> String {
    let mut out = String::new();
    for path in ["/varlik/stil.css", "/takip"] {
        let mut chains: BTreeMap<String, usize> = BTreeMap::new();
        let mut answered = 0;
        for _ in 0..6 {
            let chain = match try_get(address, path) {
                Some((status, chain)) => {
                    answered += usize::from(status == 200);
                    chain.unwrap_or_else(|| "-".into())
                }
                None => "baglanti yok".into(),
            };
            *chains.entry(chain).or_default() += 1;
        }
        let chains: Vec<String> = chains.iter().map(|(c, n)| format!("{c} ({n})")).collect();
        out += &format!(
            "{label:<22} {path:<17} {answered}/6  {}\n",
            chains.join("  |  ")
        );
    }
    out
}

/// `trafik serve -c examples/NAME.toml`, once it listens.
fn serve_example(name: &str) -> Trafik {
    let path = format!("{}/../../examples/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    Trafik::start(&["serve", "-c", &path], Stdio::null(), "listening on").0
}

/// Lesson 9's example files on the course's fixed ports, driven as the course's `olc.sh` drives
/// its relays: both stops, then `yd` stopped, then the merged instance, then that stopped. In a
/// network namespace of its own, so the fixed ports cannot collide with anything.
#[test]
fn the_lesson_9_examples_reproduce_the_course_table() {
    if std::env::var_os(INSIDE_NAMESPACE).is_none() {
        return run_in_own_network_namespace("the_lesson_9_examples_reproduce_the_course_table");
    }
    let yd = serve_example("chain-yd");
    let tv = serve_example("chain-tv");
    let mut table = rows("127.0.0.1:8860", "ayri: tv + yd");
    assert!(yd.stop().status.success());
    table += &rows("127.0.0.1:8860", "ayri: yd durduruldu");
    assert!(tv.stop().status.success());

    let merged = serve_example("merged");
    table += &rows("127.0.0.1:8861", "birlesik: tvyd");
    assert!(merged.stop().status.success());
    table += &rows("127.0.0.1:8861", "birlesik: durduruldu");
    assert_eq!(table, COURSE_TABLE);
}
