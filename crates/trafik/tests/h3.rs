//! HTTP/3 at the edge, as a user configures it: an `h3` listener on the port of an https
//! listener serves that listener's certificate and routes over QUIC, the https answers advertise
//! it with `Alt-Svc`, and an HTTP/3 client (hyperium's h3 over quinn; curl here has no HTTP/3)
//! gets the same answers as an HTTPS one from the same trafik process, counted in its metrics.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use bytes::Bytes;
use http::{Request, Version};
use http_body_util::Full;
use trafik_test_support::proxy::Answer;
use trafik_test_support::proxy::h3::H3Client;
use trafik_test_support::proxy::tls::{Issued, TestCa, TlsClient};
use trafik_test_support::{Trafik, Upstream, free_port};

const HTTP1: &[&[u8]] = &[b"http/1.1"];
const LOCALHOST: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// A fresh folder for one test's files.
fn folder(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trafik-h3-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `trafik serve` with an https listener and an h3 listener on the same port (given neither
/// routes nor certificates: the https one's), a CA-issued certificate for `kargo.test`.
struct Served {
    server: Trafik,
    port: u16,
    admin: u16,
    ca: TestCa,
}

fn serve(dir: &Path, upstream: &Upstream, h3_keys: &str) -> Served {
    let ca = TestCa::new("trafik h3 test CA");
    let site = ca.issue(&["kargo.test"]);
    std::fs::write(dir.join("site.pem"), &site.cert_pem).unwrap();
    std::fs::write(dir.join("site.key"), &site.key_pem).unwrap();
    let (port, admin) = (free_port(), free_port());
    let config = write_config(dir, port, admin, upstream, Some(h3_keys));
    let (server, _) = Trafik::start(
        &["serve", "--config", config.to_str().unwrap()],
        Stdio::null(),
        "listening on",
    );
    Served {
        server,
        port,
        admin,
        ca,
    }
}

impl Served {
    /// Rewrites its `trafik.toml` in `dir` (with the h3 listener and these keys, or without it)
    /// and runs `trafik reload`.
    fn reload(&self, dir: &Path, upstream: &Upstream, h3: Option<&str>) -> std::process::Output {
        write_config(dir, self.port, self.admin, upstream, h3);
        Command::new(env!("CARGO_BIN_EXE_trafik"))
            .args(["reload", "--admin", &format!("127.0.0.1:{}", self.admin)])
            .output()
            .unwrap()
    }
}

/// Writes `trafik.toml` in `dir`: the https listener on `port`, and with `h3` its UDP twin
/// (with these further keys).
fn write_config(
    dir: &Path,
    port: u16,
    admin: u16,
    upstream: &Upstream,
    h3: Option<&str>,
) -> PathBuf {
    let h3 = match h3 {
        Some(keys) => format!(
            r#"
[[listener]]
name = "web-h3"
listen = "127.0.0.1:{port}"
protocol = "h3"
{keys}"#
        ),
        None => String::new(),
    };
    let config = dir.join("trafik.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
name = "kenar"
workers = 2

[admin]
listen = "127.0.0.1:{admin}"

[[listener]]
name = "web"
listen = "127.0.0.1:{port}"
protocol = "https"

[[listener.tls]]
cert = "site.pem"
key = "site.key"

[[listener.route]]
pool = "takip"
request_headers = ["x-kaynak: kenar"]
response_headers = ["x-cevap: 1"]

[[listener.route]]
path_prefix = "/varlik"
pool = "takip"
{h3}
[[pool]]
name = "takip"
backends = [{{ address = "{}" }}]
"#,
            upstream.address
        ),
    )
    .unwrap();
    config
}

/// What must be the same over HTTPS and HTTP/3: the status, the body and the headers the
/// replica and the route write (not `date`, nor the `Alt-Svc` of the TCP listener).
fn same_parts(answer: &Answer) -> (u16, Bytes, Vec<Option<String>>) {
    let headers = ["content-type", "x-kopya", "x-cevap", "via"]
        .iter()
        .map(|name| answer.header(name).map(str::to_owned))
        .collect();
    (answer.status, answer.body.clone(), headers)
}

/// `trafik_listener_responses_total` of `listener` in the admin's metrics, all classes.
async fn responses(admin: u16, listener: &str) -> u64 {
    let address = format!("127.0.0.1:{admin}").parse().unwrap();
    let mut client = trafik_test_support::proxy::Client::connect(address).await;
    let request = Request::get("/metrics")
        .header("host", format!("127.0.0.1:{admin}"))
        .body(Full::default())
        .unwrap();
    let text = client.send(request).await.text();
    let series = format!("trafik_listener_responses_total{{listener=\"{listener}\",class=");
    text.lines()
        .filter_map(|line| line.strip_prefix(&series))
        .map(|rest| rest.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h3_client_gets_the_same_answers_as_https_from_the_same_trafik() {
    let upstream = Upstream::start(&[]);
    let dir = folder("same");
    let served = serve(&dir, &upstream, "");
    let address = format!("127.0.0.1:{}", served.port).parse().unwrap();

    let mut https = TlsClient::connect(address, "kargo.test", &served.ca, HTTP1).await;
    let (over_tcp, version) = https.get("/takip/TR-4821").await;
    assert_eq!((over_tcp.status, version), (200, Version::HTTP_11));
    // The https listener advertises its UDP twin, on the same port.
    assert_eq!(
        over_tcp.header("alt-svc"),
        Some(format!("h3=\":{}\"; ma=86400", served.port).as_str())
    );
    assert_eq!(over_tcp.header("x-cevap"), Some("1"));
    // So does an answer of the own engine's inline relay (a route with no filters).
    let (relayed, _) = https.get("/varlik/logo").await;
    assert_eq!(relayed.status, 200);
    assert_eq!(
        relayed.header("x-cevap"),
        None,
        "relayed inline, not through the filters"
    );
    assert_eq!(relayed.header("alt-svc"), over_tcp.header("alt-svc"));

    let mut h3 = H3Client::connect(address, "kargo.test", &served.ca).await;
    let over_quic = h3.get("kargo.test", "/takip/TR-4821").await;
    // The answer's Via names the backend's protocol, the same whatever the client spoke.
    assert_eq!(same_parts(&over_quic), same_parts(&over_tcp));
    assert_eq!(over_quic.header("alt-svc"), None, "HTTP/3 needs no advert");
    assert_eq!(over_tcp.header("via"), Some("1.1 kenar"));

    // A POST body passes whole, with or without a content-length (HTTP/3 ends a body with
    // its stream): the replica judges the query in it alike on both.
    let query = Bytes::from_static(br#"{"takipNo": "TR-4821"}"#);
    let https_post = Request::post("/takip")
        .header("host", "kargo.test")
        .header("content-type", "application/json")
        .body(Full::new(query.clone()))
        .unwrap();
    let (over_tcp_post, _) = https.send(https_post).await;
    for length in [None, Some(query.len())] {
        let mut request =
            Request::post("https://kargo.test/takip").header("content-type", "application/json");
        if let Some(length) = length {
            request = request.header("content-length", length);
        }
        let answer = h3.send(request.body(()).unwrap(), query.clone()).await;
        assert_eq!(same_parts(&answer).0, over_tcp_post.status);
        assert_eq!(answer.body, over_tcp_post.body);
    }
    // The replica counted every body byte: two over HTTP/3, one over HTTPS.
    let sayac = h3.get("kargo.test", "/sayac").await.json();
    assert_eq!(sayac["govde"], 3 * query.len(), "{sayac}");

    // The h3 listener's metrics count its four requests, apart from the https listener's.
    assert_eq!(responses(served.admin, "web-h3").await, 4);
    assert_eq!(responses(served.admin, "web").await, 3);

    // A graceful stop closes the QUIC connection with HTTP/3's no-error code after GOAWAY.
    let stopped = served.server.stop();
    assert!(stopped.status.success(), "{stopped:?}");
    let closed = tokio::time::timeout(std::time::Duration::from_secs(30), h3.closed)
        .await
        .expect("the connection closes")
        .unwrap();
    assert!(closed.is_h3_no_error(), "{closed:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_and_removes_an_h3_listener_beside_its_https_twin() {
    let upstream = Upstream::start(&[]);
    let dir = folder("reload");
    let served = serve(&dir, &upstream, "");
    let address = format!("127.0.0.1:{}", served.port).parse().unwrap();
    let reload = |h3: Option<&str>| served.reload(&dir, &upstream, h3);
    let alt_svc = || async {
        let mut https = TlsClient::connect(address, "kargo.test", &served.ca, HTTP1).await;
        let (answer, _) = https.get("/takip/TR-1").await;
        assert_eq!(answer.status, 200);
        answer.header("alt-svc").map(str::to_owned)
    };

    // Removed: the https listener keeps its socket and stops advertising; the open HTTP/3
    // connection is drained (GOAWAY, then closed without error).
    let mut h3 = H3Client::connect(address, "kargo.test", &served.ca).await;
    assert_eq!(h3.get("kargo.test", "/takip/TR-1").await.status, 200);
    let removed = reload(None);
    assert!(removed.status.success(), "{removed:?}");
    assert_eq!(alt_svc().await, None);
    let closed = tokio::time::timeout(std::time::Duration::from_secs(30), h3.closed)
        .await
        .expect("the connection closes")
        .unwrap();
    assert!(closed.is_h3_no_error(), "{closed:?}");

    // Added again by a reload: bound on every worker, advertised, serving.
    add_back(&reload).await;
    assert_eq!(
        alt_svc().await,
        Some(format!("h3=\":{}\"; ma=86400", served.port))
    );
    let mut h3 = H3Client::connect(address, "kargo.test", &served.ca).await;
    for _ in 0..4 {
        assert_eq!(h3.get("kargo.test", "/takip/TR-2").await.status, 200);
    }
    assert!(served.server.stop().status.success());
    let _ = std::fs::remove_dir_all(dir);
}

/// `trafik serve` with an https listener asking clients for a certificate `clients` signed
/// (`client_auth` = `mode`) and naming its subject in `x-client-subject`, a route that only a
/// request whose subject is `CN=kurye` takes (its answers say `x-kimlik: dogrulandi`), and a
/// bare h3 twin: the listener's certificates, routes and mutual TLS.
fn serve_mutual(
    dir: &Path,
    upstream: &Upstream,
    mode: &str,
    ca: &TestCa,
    clients: &TestCa,
) -> (Trafik, u16) {
    let site = ca.issue(&["kargo.test"]);
    std::fs::write(dir.join("site.pem"), &site.cert_pem).unwrap();
    std::fs::write(dir.join("site.key"), &site.key_pem).unwrap();
    std::fs::write(dir.join("clients.pem"), &clients.pem).unwrap();
    let port = free_port();
    let config = dir.join("trafik.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
workers = 2

[[listener]]
name = "web"
listen = "127.0.0.1:{port}"
protocol = "https"
client_ca = "clients.pem"
client_auth = "{mode}"

[listener.client_headers]
subject = "x-client-subject"

[[listener.tls]]
cert = "site.pem"
key = "site.key"

[[listener.route]]
headers = {{ "x-client-subject" = "CN=kurye" }}
pool = "takip"
response_headers = ["x-kimlik: dogrulandi"]

[[listener.route]]
pool = "takip"

[[listener]]
name = "web-h3"
listen = "127.0.0.1:{port}"
protocol = "h3"

[[pool]]
name = "takip"
backends = [{{ address = "{}" }}]
"#,
            upstream.address
        ),
    )
    .unwrap();
    let (server, _) = Trafik::start(
        &["serve", "--config", config.to_str().unwrap()],
        Stdio::null(),
        "listening on",
    );
    (server, port)
}

/// The status of `GET /takip/TR-1` over HTTP/3 sent by `identity` (none: a client without a
/// certificate) claiming `x-client-subject: claimed`, and whether the verified-identity route
/// took it; `None` when the connection or the request fails (the server refused the client).
async fn h3_get_as(
    address: std::net::SocketAddr,
    ca: &TestCa,
    identity: Option<&Issued>,
    claimed: &str,
) -> Option<(u16, bool)> {
    let connected = match identity {
        Some(issued) => H3Client::try_connect_as(issued, address, "kargo.test", ca).await,
        None => H3Client::try_connect(LOCALHOST, address, "kargo.test", ca).await,
    };
    let mut client = connected.ok()?;
    let request = Request::get("https://kargo.test/takip/TR-1")
        .header("x-client-subject", claimed)
        .body(())
        .unwrap();
    // A connection the server closes fails the request (the test client panics on it).
    let answered = tokio::spawn(async move { client.send(request, Bytes::new()).await });
    let answer = tokio::time::timeout(std::time::Duration::from_secs(30), answered)
        .await
        .expect("a refused client's request ends")
        .ok()?;
    Some((
        answer.status,
        answer.header("x-kimlik") == Some("dogrulandi"),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h3_twin_asks_clients_for_the_certificate_its_https_listener_asks_for() {
    let upstream = Upstream::start(&[]);
    let (ca, clients) = (
        TestCa::new("trafik h3 test CA"),
        TestCa::new("trafik h3 clients"),
    );
    let kurye = clients.issue_client("kurye", &[]);
    let misafir = clients.issue_client("misafir", &[]);
    let stranger = TestCa::new("another CA").issue_client("kurye", &[]);

    // Required: over QUIC as over TCP, no certificate (or one another CA signed) is no request,
    // and a client's own claim of a subject is replaced by its certificate's.
    let dir = folder("mtls-required");
    let (server, port) = serve_mutual(&dir, &upstream, "required", &ca, &clients);
    let address = format!("127.0.0.1:{port}").parse().unwrap();
    assert_eq!(h3_get_as(address, &ca, None, "CN=kurye").await, None);
    assert_eq!(
        h3_get_as(address, &ca, Some(&stranger), "CN=kurye").await,
        None
    );
    assert_eq!(
        h3_get_as(address, &ca, Some(&kurye), "").await,
        Some((200, true))
    );
    assert_eq!(
        h3_get_as(address, &ca, Some(&misafir), "CN=kurye").await,
        Some((200, false))
    );
    assert!(server.stop().status.success());

    // Optional: a client without a certificate is served, without the subject it claims.
    let dir_optional = folder("mtls-optional");
    let (server, port) = serve_mutual(&dir_optional, &upstream, "optional", &ca, &clients);
    let address = format!("127.0.0.1:{port}").parse().unwrap();
    assert_eq!(
        h3_get_as(address, &ca, None, "CN=kurye").await,
        Some((200, false))
    );
    assert_eq!(
        h3_get_as(address, &ca, Some(&kurye), "").await,
        Some((200, true))
    );
    assert!(server.stop().status.success());
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(dir_optional);
}

/// Reloads with `reload(Some(""))` (the h3 listener back) until it binds. Until a removed h3
/// listener's endpoints have let go of their sockets (their connections' closing period), the
/// port is taken and the reload is refused, changing nothing: it is tried again.
async fn add_back(reload: &impl Fn(Option<&str>) -> std::process::Output) {
    let mut tries = 0;
    loop {
        let added = reload(Some(""));
        if added.status.success() {
            return;
        }
        let errors = String::from_utf8_lossy(&added.stderr);
        assert!(errors.contains("Address already in use"), "{errors}");
        tries += 1;
        assert!(
            tries < 120,
            "the removed listener's sockets stay bound: {errors}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// An h3 listener added by a reload serves on every worker. Each worker's socket joins the
/// port's `SO_REUSEPORT` group and the kernel hashes each client (its address and port) to one
/// of them, so a socket bound but read by no endpoint (one that failed to start because the
/// worker had not yet seen the reload's snapshot, its socket kept open by the copy held for a
/// binary upgrade) swallows the handshakes of the clients hashed to it. Over several reloads,
/// clients from many ports are all answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h3_listener_added_by_a_reload_answers_clients_on_every_worker() {
    let upstream = Upstream::start(&[]);
    let dir = folder("every-worker");
    let served = serve(&dir, &upstream, "");
    let address = format!("127.0.0.1:{}", served.port).parse().unwrap();
    let reload = |h3: Option<&str>| served.reload(&dir, &upstream, h3);
    let localhost = std::net::Ipv4Addr::LOCALHOST.into();
    for round in 0..12 {
        let removed = reload(None);
        assert!(removed.status.success(), "{removed:?}");
        add_back(&reload).await;
        // Each client on a UDP socket of its own: six source ports, hashed over the workers.
        for client in 0..6 {
            let mut h3 = H3Client::try_connect(localhost, address, "kargo.test", &served.ca)
                .await
                .unwrap_or_else(|error| panic!("round {round}, client {client}: {error}"));
            assert_eq!(h3.get("kargo.test", "/takip/TR-3").await.status, 200);
            h3.close().await;
        }
    }
    assert!(served.server.stop().status.success());
    let _ = std::fs::remove_dir_all(dir);
}

/// The caps of an h3 listener hold for QUIC connections: one over them is refused at once (a
/// QUIC client has no backlog to wait in) and counted as TCP refusals are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h3_connection_over_the_listeners_caps_is_refused_and_counted() {
    let upstream = Upstream::start(&[]);
    let dir = folder("caps");
    let served = serve(
        &dir,
        &upstream,
        "max_connections = 2\nmax_connections_per_client = 1\n",
    );
    let address = format!("127.0.0.1:{}", served.port).parse().unwrap();
    let client = |n: u8| std::net::IpAddr::from([127, 0, 0, n]);
    let connect = |n: u8| H3Client::try_connect(client(n), address, "kargo.test", &served.ca);

    let mut first = connect(1).await.expect("the first client connects");
    assert_eq!(first.get("kargo.test", "/takip/TR-1").await.status, 200);
    let again = connect(1).await.err().expect("over the client's cap");
    assert!(again.contains("refused"), "{again}");
    let mut second = connect(2).await.expect("another client connects");
    assert_eq!(second.get("kargo.test", "/takip/TR-2").await.status, 200);
    let third = connect(3).await.err().expect("over the listener's cap");
    assert!(third.contains("refused"), "{third}");
    // The open connections are served on.
    assert_eq!(first.get("kargo.test", "/takip/TR-3").await.status, 200);

    let admin = format!("127.0.0.1:{}", served.admin);
    let status = trafik_test_support::process::get_json(&admin, "/status");
    let listener = status["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "web-h3")
        .cloned()
        .unwrap();
    assert_eq!(listener["refused_per_client"], 1, "{listener}");
    assert_eq!(listener["refused_at_max"], 1, "{listener}");
    let metrics = trafik_test_support::process::get_text(&admin, "/metrics");
    assert!(
        metrics.contains("trafik_listener_refused_at_max_total{listener=\"web-h3\"} 1"),
        "{metrics}"
    );

    // A closed connection gives its place back (once the server has seen it close).
    first.close().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let _back = loop {
        match connect(3).await {
            Ok(client) => break client,
            Err(error) => assert!(std::time::Instant::now() < deadline, "{error}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(served.server.stop().status.success());
    let _ = std::fs::remove_dir_all(dir);
}

/// What `trafik check` says of `text` written at `config`, which it must refuse.
fn refused(config: &Path, text: &str) -> String {
    std::fs::write(config, text).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["check", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A configuration of one h3 listener on 127.0.0.1:8443 with `keys` from line 5 on (its own
/// lines and sections), and a pool.
fn h3_alone(keys: &str) -> String {
    format!(
        "[[listener]]\nname = \"web-h3\"\nlisten = \"127.0.0.1:8443\"\nprotocol = \"h3\"\n{keys}\n\
         [[pool]]\nname = \"takip\"\nbackends = [{{ address = \"127.0.0.1:9001\" }}]\n"
    )
}

#[test]
fn check_refuses_an_h3_listener_without_certificates() {
    let dir = folder("check");
    let config = dir.join("trafik.toml");
    let errors = refused(&config, &h3_alone(""));
    assert!(
        errors.contains("4:12: listener[0].tls: an h3 listener needs a certificate"),
        "{errors}"
    );

    // Routes of its own need certificates of its own; its own client_ca is read as an https
    // listener's (caps are kept, so they pass).
    let keys =
        "max_connections = 10\nclient_ca = \"ca.pem\"\n\n[[listener.route]]\npool = \"takip\"\n";
    let errors = refused(&config, &h3_alone(keys));
    for expected in [
        "4:12: listener[0].tls: an h3 listener with routes of its own needs a certificate of its own",
        "6:13: listener[0].client_ca: cannot read",
    ] {
        assert!(errors.contains(expected), "{expected:?} in {errors}");
    }
    assert!(!errors.contains("max_connections"), "{errors}");

    assert!(
        !errors.contains("set protocol"),
        "h3 takes client_ca: {errors}"
    );

    // A bare twin takes the https listener's mutual TLS; one of its own would be ignored.
    let errors = refused(&config, &h3_alone("client_ca = \"ca.pem\"\n"));
    assert!(
        errors.contains("5:13: listener[0].client_ca: an h3 listener without certificates takes the https listener's, mutual TLS included"),
        "{errors}"
    );

    // One with routes of its own beside an https listener asking for client certificates must
    // ask too: that listener's Alt-Svc sends clients to it.
    let ca = TestCa::new("trafik h3 check CA");
    let site = ca.issue(&["kargo.test"]);
    std::fs::write(dir.join("site.pem"), &site.cert_pem).unwrap();
    std::fs::write(dir.join("site.key"), &site.key_pem).unwrap();
    std::fs::write(dir.join("clients.pem"), &ca.pem).unwrap();
    let pair = |h3_keys: &str| {
        let tls = "[[listener.tls]]\ncert = \"site.pem\"\nkey = \"site.key\"\n\n[[listener.route]]\npool = \"takip\"\n";
        format!(
            "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:8443\"\nprotocol = \"https\"\n\
             client_ca = \"clients.pem\"\n{tls}\n{}",
            h3_alone(&format!("{h3_keys}{tls}"))
        )
    };
    let errors = refused(&config, &pair(""));
    assert!(
        errors.contains("listener[1].client_ca: the https listener on 127.0.0.1:8443 asks clients for certificates"),
        "{errors}"
    );
    std::fs::write(&config, pair("client_ca = \"clients.pem\"\n")).unwrap();
    let checked = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["check", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(checked.status.success(), "{checked:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Requests per second over HTTP/3 and over HTTPS (HTTP/1.1, kept alive) through the same trafik
/// process to the same replica: `CLIENTS` connections of each kind, each sending `REQUESTS` GETs
/// one after the other, in interleaved rounds; the medians and their ratio are printed. Bounded
/// in count; run by `bench/h3.sh` (release build), never timed in the suite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: bench/h3.sh runs it"]
async fn bench_h3_against_https() {
    const ROUNDS: usize = 5;
    const CLIENTS: usize = 8;
    const REQUESTS: usize = 500;
    let upstream = Upstream::start(&[]);
    let dir = folder("bench");
    let served = serve(&dir, &upstream, "");
    let address: std::net::SocketAddr = format!("127.0.0.1:{}", served.port).parse().unwrap();
    let ca = std::sync::Arc::new(served.ca);
    let (mut over_h3, mut over_https) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        for h3 in [true, false] {
            let mut clients = Vec::new();
            for _ in 0..CLIENTS {
                let ca = ca.clone();
                clients.push(tokio::spawn(async move {
                    if h3 {
                        let mut client = H3Client::connect(address, "kargo.test", &ca).await;
                        let started = std::time::Instant::now();
                        for _ in 0..REQUESTS {
                            assert_eq!(client.get("kargo.test", "/takip/TR-1").await.status, 200);
                        }
                        started.elapsed()
                    } else {
                        let mut client =
                            TlsClient::connect(address, "kargo.test", &ca, HTTP1).await;
                        let started = std::time::Instant::now();
                        for _ in 0..REQUESTS {
                            assert_eq!(client.get("/takip/TR-1").await.0.status, 200);
                        }
                        started.elapsed()
                    }
                }));
            }
            let mut slowest = std::time::Duration::ZERO;
            for client in clients {
                slowest = slowest.max(client.await.unwrap());
            }
            let rate = (CLIENTS * REQUESTS) as f64 / slowest.as_secs_f64();
            match h3 {
                true => over_h3.push(rate),
                false => over_https.push(rate),
            }
        }
    }
    let median = |rates: &mut Vec<f64>| {
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    };
    let (h3, https) = (median(&mut over_h3), median(&mut over_https));
    println!(
        "h3 {h3:.0} req/s, https (HTTP/1.1 kept alive) {https:.0} req/s, h3/https {:.2} ({CLIENTS} connections x {REQUESTS} GETs, median of {ROUNDS} interleaved rounds; every round: h3 {over_h3:.0?}, https {over_https:.0?})",
        h3 / https
    );
    drop(served.server);
    let _ = std::fs::remove_dir_all(dir);
}
