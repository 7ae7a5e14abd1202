//! TLS on both sides, over real loopback sockets with certificates each test makes: `https`
//! listeners serving HTTP/1.1 and HTTP/2 (by ALPN) with the certificate the client's SNI names,
//! h2c on plain listeners, whatever is not TLS closed without harm, and pools that speak TLS to
//! their backends and verify them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Version};
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trafik_proxy::Plan;
use trafik_proxy::plan::UpstreamProtocol;
use trafik_proxy::tls::backend::{BackendTls, server_name};
use trafik_proxy::tls::{Certificate, TrustRoots};
use trafik_test_support::proxy::tls::{
    TestCa, TlsClient, h2_backend, h2c, h2c_get, https, tls_backend,
};
use trafik_test_support::proxy::*;

const H2: &[&[u8]] = &[b"h2", b"http/1.1"];
const HTTP1: &[&[u8]] = &[b"http/1.1"];

#[tokio::test]
async fn an_https_listener_serves_http1_and_http2_as_alpn_agrees() {
    let upstream = echo_server(Duration::ZERO).await;
    let ca = TestCa::new("trafik test CA");
    let site = ca.issue(&["kargo.test"]);
    let running = trafik_proxy::start(https(plan(&[upstream]), &[&site])).unwrap();

    let mut http1 = TlsClient::connect(web(&running), "kargo.test", &ca, HTTP1).await;
    let (answer, version) = http1.get("/takip/TR-1").await;
    assert_eq!((answer.status, version), (200, Version::HTTP_11));
    let seen = answer.json();
    assert_eq!(seen["headers"]["x-forwarded-proto"], "https");
    assert_eq!(
        seen["headers"]["forwarded"],
        "for=127.0.0.1;proto=https;host=\"kargo.test\""
    );
    assert_eq!(seen["headers"]["via"], "1.1 trafik-test");
    // HTTP/1.1 behind TLS is the own engine's, kept alive, as on plain TCP.
    let (again, _) = http1.get("/takip/TR-1").await;
    assert_eq!(again.status, 200);
    assert_eq!(
        handed_to_hyper(&running).await,
        0,
        "served by the own engine"
    );

    let mut http2 = TlsClient::connect(web(&running), "kargo.test", &ca, H2).await;
    for _ in 0..3 {
        let (answer, version) = http2.get("/takip/TR-2?x=1").await;
        assert_eq!((answer.status, version), (200, Version::HTTP_2));
        // The backend speaks HTTP/1.1: it gets origin form, the authority as Host and no
        // trace of HTTP/2, except that Via says which protocol trafik received.
        let seen = answer.json();
        assert_eq!(seen["uri"], "/takip/TR-2?x=1");
        assert_eq!(seen["headers"]["host"], "kargo.test");
        assert_eq!(seen["headers"]["x-forwarded-proto"], "https");
        assert_eq!(seen["headers"]["via"], "2 trafik-test");
        // The backend's `Connection` header and those it names never reach an HTTP/2
        // client (RFC 9113 §8.2.2); hyper's client would refuse the response if they did.
        assert_eq!(answer.header("x-upstream-secret"), None);
        assert_eq!(answer.header("keep-alive"), None);
    }
    stop(running).await;
}

#[tokio::test]
async fn the_certificate_is_chosen_by_the_name_the_client_asks_for() {
    let replicas = replicas(1).await;
    let ca = TestCa::new("trafik test CA");
    let default = ca.issue(&["default.test", "127.0.0.1"]);
    let exact = ca.issue(&["api.kargo.test"]);
    let wildcard = ca.issue(&["*.kargo.test"]);
    let running = trafik_proxy::start(https(
        plan(&[replicas[0].address()]),
        &[&default, &wildcard, &exact],
    ))
    .unwrap();
    let served = |name: &'static str| {
        let ca = &ca;
        let address = web(&running);
        async move {
            let mut client = TlsClient::connect(address, name, ca, H2).await;
            assert_eq!(client.get("/takip/TR-1").await.0.status, 200);
            client.served
        }
    };
    assert_eq!(
        served("api.kargo.test").await,
        exact.der,
        "an exact name wins"
    );
    assert_eq!(
        served("www.kargo.test").await,
        wildcard.der,
        "then a wildcard"
    );
    assert_eq!(served("default.test").await, default.der);
    // A client connecting to an address sends no name: it gets the first certificate.
    assert_eq!(served("127.0.0.1").await, default.der);
    stop(running).await;
}

#[tokio::test]
async fn a_plain_listener_speaks_h2c_with_prior_knowledge_and_http1() {
    let upstream = echo_server(Duration::ZERO).await;
    let running = trafik_proxy::start(plan(&[upstream])).unwrap();
    let (answer, version) = h2c_get(web(&running), "/takip/TR-3").await;
    assert_eq!((answer.status, version), (200, Version::HTTP_2));
    let seen = answer.json();
    assert_eq!(seen["headers"]["x-forwarded-proto"], "http");
    assert_eq!(seen["headers"]["host"], "kargo.test");
    assert_eq!(seen["headers"]["via"], "2 trafik-test");
    let answer = get(web(&running), "/takip/TR-4").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["headers"]["via"], "1.1 trafik-test");
    stop(running).await;
}

/// Counts panics on trafik's worker threads: a task that panics is dropped by its runtime and
/// the worker lives on, so only a hook sees it.
fn count_worker_panics() -> Arc<AtomicUsize> {
    let panics = Arc::new(AtomicUsize::new(0));
    let counted = panics.clone();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current()
            .name()
            .is_some_and(|name| name.starts_with("trafik-worker"))
        {
            counted.fetch_add(1, Ordering::Relaxed);
        }
        previous(info);
    }));
    panics
}

/// Sends `bytes` and reads until trafik closes the connection (at most 10 s); what came back.
async fn answer_to(address: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let _ = stream.write_all(bytes).await;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("trafik closes the connection")
        .ok();
    answer
}

#[tokio::test]
async fn plain_http_and_garbage_on_the_tls_port_are_closed_without_harm() {
    let panics = count_worker_panics();
    let replicas = replicas(1).await;
    let ca = TestCa::new("trafik test CA");
    let site = ca.issue(&["kargo.test"]);
    let mut plan = https(plan(&[replicas[0].address()]), &[&site]);
    // A hello cut short waits for the rest until the handshake timeout.
    plan.client.header_read_timeout = Duration::from_millis(500);
    let running = trafik_proxy::start(plan).unwrap();
    let address = web(&running);

    let plain = answer_to(
        address,
        b"GET /takip/TR-1 HTTP/1.1\r\nHost: kargo.test\r\n\r\n",
    )
    .await;
    assert!(!plain.starts_with(b"HTTP/"), "no HTTP answer in clear text");
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    answer_to(address, &garbage).await;
    // A handshake record that claims 16 KiB and ends after a few bytes, and one whose
    // ClientHello is cut short inside a well-formed record.
    answer_to(
        address,
        &[0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0xff, 0xff],
    )
    .await;
    answer_to(
        address,
        &[
            0x16, 0x03, 0x01, 0x00, 0x06, 0x01, 0x00, 0x00, 0x02, 0x03, 0x03,
        ],
    )
    .await;

    let mut client = TlsClient::connect(address, "kargo.test", &ca, H2).await;
    assert_eq!(
        client.get("/takip/TR-2").await.0.status,
        200,
        "still serving"
    );
    assert_eq!(panics.load(Ordering::Relaxed), 0, "no worker panicked");
    stop(running).await;
}

#[tokio::test]
async fn a_client_that_never_finishes_its_handshake_is_closed() {
    let replicas = replicas(1).await;
    let ca = TestCa::new("trafik test CA");
    let site = ca.issue(&["kargo.test"]);
    let mut plan = https(plan(&[replicas[0].address()]), &[&site]);
    plan.client.header_read_timeout = Duration::from_millis(300);
    let running = trafik_proxy::start(plan).unwrap();
    // The idle timeout (30 s) is far off: only the handshake timeout can close this one.
    let started = Instant::now();
    let answer = answer_to(web(&running), b"").await;
    assert!(answer.is_empty());
    assert!(started.elapsed() < Duration::from_secs(10));
    stop(running).await;
}

/// A pool of `backends` speaking TLS, trusting `roots`, expecting `sni` when given.
fn tls_pool(backends: &[SocketAddr], roots: &TestCa, sni: Option<&str>) -> Plan {
    let mut plan = plan(backends);
    let trusted = TrustRoots {
        store: Arc::new(roots.roots()),
        source: "the test CA".into(),
    };
    let name = sni.map(|name| server_name(name).unwrap());
    plan.pools[0].tls = Some(BackendTls::new(&trusted, name, None, &[b"http/1.1"]).unwrap());
    plan
}

#[tokio::test]
async fn a_tls_pool_verifies_its_backends_against_its_ca() {
    let ca = TestCa::new("backend CA");
    let by_address = ca.issue(&["127.0.0.1"]);
    let (backend, seen) = tls_backend(by_address.server_config()).await;
    let running = trafik_proxy::start(tls_pool(&[backend], &ca, None)).unwrap();
    let mut client = Client::connect(web(&running)).await;
    for _ in 0..3 {
        let answer = client.get("/takip/TR-5").await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(answer.text(), "/takip/TR-5");
        assert_eq!(answer.header("x-sni"), Some("-"), "no SNI for an address");
    }
    assert_eq!(seen.requests.load(Ordering::Relaxed), 3);
    assert_eq!(
        handed_to_hyper(&running).await,
        0,
        "served by the own engine"
    );
    stop(running).await;

    // With `sni`, that name is sent and the certificate must be valid for it.
    let named = ca.issue(&["kargo.internal"]);
    let (backend, _) = tls_backend(named.server_config()).await;
    let running = trafik_proxy::start(tls_pool(&[backend], &ca, Some("kargo.internal"))).unwrap();
    let answer = get(web(&running), "/takip/TR-6").await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.header("x-sni"), Some("kargo.internal"));
    stop(running).await;

    // A backend whose certificate another CA signed is refused: a failed connect, 502.
    let stranger = TestCa::new("another CA").issue(&["127.0.0.1"]);
    let (backend, seen) = tls_backend(stranger.server_config()).await;
    let running = trafik_proxy::start(tls_pool(&[backend], &ca, None)).unwrap();
    assert_eq!(get(web(&running), "/takip/TR-7").await.status, 502);
    assert_eq!(seen.requests.load(Ordering::Relaxed), 0);
    stop(running).await;
}

#[tokio::test]
async fn health_checks_of_a_tls_pool_speak_tls() {
    let ca = TestCa::new("backend CA");
    let (backend, seen) = tls_backend(ca.issue(&["127.0.0.1"]).server_config()).await;
    let mut plan = tls_pool(&[backend], &ca, None);
    plan.pools[0].health = Some(course_health_check());
    let running = trafik_proxy::start(plan).unwrap();
    // One failed probe would mark the only backend down (fall 1); wait for three to arrive.
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.probes.load(Ordering::Relaxed) < 3 {
        assert!(
            Instant::now() < deadline,
            "no health probes arrived over TLS"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(running.snapshot().pools[0].backends.is_up(0));
    assert_eq!(get(web(&running), "/takip/TR-8").await.status, 200);
    stop(running).await;
}

/// A backend a TLS pool cannot verify goes down with rustls' reason and the setting that
/// answers it, not a bare "TLS handshake failed".
#[tokio::test]
async fn a_backend_whose_certificate_fails_is_down_with_the_reason() {
    let ca = TestCa::new("backend CA");
    let stranger = TestCa::new("another CA").issue(&["127.0.0.1"]);
    let (backend, _) = tls_backend(stranger.server_config()).await;
    let mut plan = tls_pool(&[backend], &ca, None);
    plan.pools[0].health = Some(course_health_check());
    let running = trafik_proxy::start(plan).unwrap();
    let reason = |status: &serde_json::Value| {
        status["pools"][0]["backends"][0]["timeline"]
            .as_array()
            .and_then(|changes| changes.last())
            .and_then(|change| change["reason"].as_str())
            .unwrap_or("")
            .to_owned()
    };
    wait_for_status(&running, |status| reason(status).contains("TLS")).await;
    let why = reason(&status(&running).await);
    assert!(why.contains("UnknownIssuer"), "{why}");
    assert!(why.contains("the pool's `ca` did not sign"), "{why}");
    stop(running).await;
}

/// Runs curl on a blocking thread (the test's runtime also runs the replicas); `None` when
/// curl is not installed.
async fn curl(args: Vec<String>) -> Option<std::process::Output> {
    tokio::task::spawn_blocking(move || std::process::Command::new("curl").args(args).output().ok())
        .await
        .unwrap()
}

#[tokio::test]
async fn curl_speaks_http2_and_http1_to_an_https_listener() {
    if curl(vec!["--version".into()]).await.is_none() {
        eprintln!("curl is not installed: skipped (hyper's clients cover the same ground)");
        return;
    }
    let replicas = replicas(1).await;
    let ca = TestCa::new("trafik test CA");
    let site = ca.issue(&["kargo.test"]);
    let running = trafik_proxy::start(https(plan(&[replicas[0].address()]), &[&site])).unwrap();
    let port = web(&running).port();
    let ca_file =
        std::env::temp_dir().join(format!("trafik-test-ca-{}-{port}.pem", std::process::id()));
    std::fs::write(&ca_file, &ca.pem).unwrap();
    for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let args = vec![
            "-sS".into(),
            flag.into(),
            "--cacert".into(),
            ca_file.display().to_string(),
            "--resolve".into(),
            format!("kargo.test:{port}:127.0.0.1"),
            "-w".into(),
            "\n%{http_version} %{http_code}".into(),
            format!("https://kargo.test:{port}/takip/TR-9"),
        ];
        let output = curl(args).await.unwrap();
        let out = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{flag}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(out.ends_with(&format!("\n{version} 200")), "{flag}: {out}");
        assert!(out.contains("TR-9"), "{flag}: {out}");
    }
    // -k, no CA: curl skips verification, and the address gets the default certificate.
    let args = ["-sk", "--http2", "-o", "/dev/null", "-w", "%{http_version}"];
    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    args.push(format!("https://127.0.0.1:{port}/takip/TR-10"));
    let output = curl(args).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "2");
    std::fs::remove_file(&ca_file).unwrap();
    stop(running).await;
}

#[test]
fn certificates_load_from_pem_files() {
    let ca = TestCa::new("trafik test CA");
    let site = ca.issue(&["kargo.test"]);
    let folder = std::env::temp_dir().join(format!("trafik-test-certs-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let (cert, key) = (folder.join("site.pem"), folder.join("site.key"));
    std::fs::write(&cert, &site.cert_pem).unwrap();
    std::fs::write(&key, &site.key_pem).unwrap();
    let loaded = Certificate::load(&cert, &key).unwrap();
    assert_eq!(loaded.names, ["kargo.test"]);
    let errors = Certificate::load(&folder.join("missing.pem"), &key).unwrap_err();
    assert!(format!("{errors:?}").contains("cannot read"), "{errors:?}");
    std::fs::remove_dir_all(&folder).unwrap();
}

/// What became of one HTTP/2 request.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    /// Answered: the response's HEADERS frame arrived.
    Answered,
    /// The stream was reset with this error code (1 = PROTOCOL_ERROR).
    Reset(u32),
}

/// One GET with `extra` headers over a fresh h2c connection, written frame by frame: the
/// clients at hand (hyper's, h2's) refuse to send the headers under test.
async fn raw_h2c(address: SocketAddr, extra: &[(&str, &str)]) -> Fate {
    // HPACK (RFC 7541): indexed :method GET (2), :scheme http (6), :path / (4); :authority as a
    // literal with indexed name (1); the extra headers as literals with new names.
    let mut block = vec![0x82, 0x86, 0x84, 0x01, 10];
    block.extend_from_slice(b"kargo.test");
    for (name, value) in extra {
        block.push(0x00);
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]); // SETTINGS, empty
    let length = (block.len() as u32).to_be_bytes();
    // HEADERS on stream 1 with END_STREAM and END_HEADERS.
    bytes.extend_from_slice(&[length[1], length[2], length[3], 0x1, 0x5, 0, 0, 0, 1]);
    bytes.extend_from_slice(&block);
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(&bytes).await.unwrap();
    loop {
        let mut head = [0u8; 9];
        tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut head))
            .await
            .expect("a frame within 10 s")
            .expect("the connection stays open until the stream's fate is known");
        let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0; length];
        stream.read_exact(&mut payload).await.unwrap();
        let on_stream_1 = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) == 1;
        match head[3] {
            0x1 if on_stream_1 => return Fate::Answered,
            0x3 if on_stream_1 => {
                return Fate::Reset(u32::from_be_bytes(payload[..4].try_into().unwrap()));
            }
            0x7 => panic!("GOAWAY: the whole connection was refused"),
            _ => {} // SETTINGS, its ACK, WINDOW_UPDATE…
        }
    }
}

#[tokio::test]
async fn an_http2_request_with_connection_specific_headers_is_reset() {
    let replicas = replicas(1).await;
    let running = trafik_proxy::start(plan(&[replicas[0].address()])).unwrap();
    let address = web(&running);
    // RFC 9113 §8.2.2: such a request is malformed; of them only `TE: trailers` may pass.
    assert_eq!(raw_h2c(address, &[]).await, Fate::Answered);
    assert_eq!(
        raw_h2c(address, &[("te", "trailers")]).await,
        Fate::Answered
    );
    for header in [
        ("connection", "keep-alive"),
        ("te", "gzip"),
        ("upgrade", "h2c"),
    ] {
        assert_eq!(
            raw_h2c(address, &[header]).await,
            Fate::Reset(1),
            "{header:?}"
        );
    }
    stop(running).await;
}

/// An answer far larger than the sockets' buffers reaches a client that starts reading late,
/// whole, on a connection that stays open, when the own engine relays it behind TLS.
#[tokio::test]
async fn a_large_answer_reaches_a_late_reader_whole_over_https() {
    const LENGTH: usize = 8 << 20;
    let mut answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {LENGTH}\r\n\r\n").into_bytes();
    answer.resize(answer.len() + LENGTH, b'x');
    let backend = answering(answer).await;
    let ca = TestCa::new("trafik test CA");
    let site = ca.issue(&["kargo.test"]);
    let running = trafik_proxy::start(https(plan(&[backend]), &[&site])).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(ca.roots())
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let stream = TcpStream::connect(web(&running)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("kargo.test").unwrap();
    let mut stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, stream)
        .await
        .unwrap();
    stream
        .write_all(b"GET /indir HTTP/1.1\r\nHost: kargo.test\r\n\r\n")
        .await
        .unwrap();
    // The proxy writes until the sockets are full, then waits for the reader.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut received = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let whole = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(n > 0, "closed after {} bytes", received.len());
            received.extend_from_slice(&buffer[..n]);
            let Some(head) = received.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            if received.len() >= head + 4 + LENGTH {
                return head + 4;
            }
        }
    })
    .await;
    let head = whole.unwrap_or_else(|_| panic!("stalled after {} bytes", received.len()));
    assert_eq!(received.len(), head + LENGTH);
    assert_eq!(
        handed_to_hyper(&running).await,
        0,
        "served by the own engine"
    );
    stop(running).await;
}

/// An HTTP/2 GET of `/alan` with `fields` on a fresh h2c connection: its status, and its body
/// and trailer fields read to the end.
async fn h2c_get_with(
    address: SocketAddr,
    fields: &[(&str, String)],
) -> (u16, bytes::Bytes, Option<http::HeaderMap>) {
    use http_body_util::BodyExt;
    let mut request = http::Request::get("http://kargo.test/alan");
    for (name, value) in fields {
        request = request.header(*name, value);
    }
    let request = request.body(http_body_util::Full::default()).unwrap();
    let response = h2c(address).await.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap();
    let trailers = body.trailers().cloned();
    (status, body.to_bytes(), trailers)
}

/// An HTTP/2 head with more fields than `[server.limits] headers` gets 431 before any backend
/// is asked, as an HTTP/1.1 head does; one within the limit passes.
#[tokio::test]
async fn an_http2_head_past_the_field_limit_gets_431() {
    let (backend, received) =
        answering_recorded("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let mut plan = plan(&[backend]);
    plan.client.limits.headers = 10;
    let running = trafik_proxy::start(plan).unwrap();
    let fields = |count: usize| -> Vec<(&str, String)> {
        (0..count).map(|_| ("x-alan", "1".to_owned())).collect()
    };
    let (within, _, _) = h2c_get_with(web(&running), &fields(10)).await;
    assert_eq!(within, 200);
    for count in [11, 150] {
        let (many, _, _) = h2c_get_with(web(&running), &fields(count)).await;
        assert_eq!(many, 431, "{count} fields");
    }
    let received = String::from_utf8_lossy(&received.lock().unwrap()).into_owned();
    assert_eq!(received.matches("GET /alan").count(), 1, "{received}");
    stop(running).await;
}

/// RFC 9113 §8.2.3: the `cookie` fields of an HTTP/2 request reach an HTTP/1.1 backend as one
/// field, joined with "; ".
#[tokio::test]
async fn an_http2_requests_cookie_fields_reach_the_backend_as_one() {
    let (backend, received) =
        answering_recorded("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let running = trafik_proxy::start(plan(&[backend])).unwrap();
    let cookies = [("cookie", "a=1".to_owned()), ("cookie", "b=2".to_owned())];
    let (status, _, _) = h2c_get_with(web(&running), &cookies).await;
    assert_eq!(status, 200);
    let received = String::from_utf8_lossy(&received.lock().unwrap()).into_owned();
    let lines: Vec<&str> = received
        .lines()
        .filter(|line| line.to_ascii_lowercase().starts_with("cookie:"))
        .collect();
    assert_eq!(lines, ["cookie: a=1; b=2"], "{received}");
    stop(running).await;
}

/// Over HTTP/2 as over HTTP/1.1, an answer's trailer fields do not reach the client, even one
/// that takes trailers (`te: trailers`): a `Set-Cookie` among them must not.
#[tokio::test]
async fn an_http2_client_gets_no_trailer_fields() {
    let backend = answering(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: x-son\r\n\r\n\
         4;ad=deger\r\nwiki\r\n0\r\nx-son: 1\r\nset-cookie: oturum=ele\r\n\r\n",
    )
    .await;
    let running = trafik_proxy::start(plan(&[backend])).unwrap();
    let (status, body, trailers) =
        h2c_get_with(web(&running), &[("te", "trailers".to_owned())]).await;
    assert_eq!((status, &body[..]), (200, &b"wiki"[..]));
    assert_eq!(trailers, None);
    stop(running).await;
}

/// `plan` whose pool speaks `protocol` to its backends.
fn speaking(mut plan: Plan, protocol: UpstreamProtocol) -> Plan {
    plan.pools[0].protocol = protocol;
    plan
}

#[tokio::test]
async fn an_h2c_pool_multiplexes_requests_up_to_the_backends_stream_limit() {
    // Two streams a connection: six requests at once (each held 1.5 s, so they overlap however
    // slowly a loaded machine starts them) need three connections.
    let (backend, seen) = h2_backend(None, 2, Duration::from_millis(1500)).await;
    let mut plan = speaking(plan(&[backend]), UpstreamProtocol::H2c);
    plan.workers = 1;
    let running = trafik_proxy::start(plan).unwrap();
    let address = web(&running);
    // The connection's SETTINGS are known once it served a request.
    let answer = get(address, "/takip/TR-0").await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.text(), "HTTP/2.0 /takip/TR-0");
    let paths: Vec<String> = (1..=6).map(|i| format!("/takip/TR-{i}")).collect();
    let calls = paths.iter().map(|path| get(address, path));
    for answer in futures_util::future::join_all(calls).await {
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    // More connections when the first is full (exactly three unless a connection's SETTINGS
    // came late on a loaded machine and it took a refused stream first).
    let opened = seen.connections.load(Ordering::Relaxed);
    assert!(
        opened >= 3,
        "{opened} connections for six streams at two a connection"
    );
    assert!(seen.most_open.load(Ordering::Relaxed) > 2);
    // One after another, they share the connections there are.
    for i in 7..9 {
        assert_eq!(get(address, &format!("/takip/TR-{i}")).await.status, 200);
    }
    assert_eq!(seen.connections.load(Ordering::Relaxed), opened);
    stop(running).await;
}

/// An upload larger than the backend's HTTP/2 windows (hyper's server opens 1 MB) reaches it
/// whole: the body goes on as the backend's WINDOW_UPDATEs make room, and the answer follows.
#[tokio::test]
async fn an_upload_past_the_backends_flow_control_window_reaches_an_h2c_backend_whole() {
    let (backend, seen) = h2_backend(None, 100, Duration::ZERO).await;
    let running = trafik_proxy::start(speaking(plan(&[backend]), UpstreamProtocol::H2c)).unwrap();
    let mut client = Client::connect(web(&running)).await;
    let upload = Bytes::from(vec![b'k'; 3 * 1024 * 1024 + 7]);
    let answer = client
        .send(
            Request::post("/takip/yukle")
                .header("host", "kargo.test")
                .body(Full::new(upload.clone()))
                .unwrap(),
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.text(), "HTTP/2.0 /takip/yukle");
    assert_eq!(seen.body_bytes.load(Ordering::Relaxed), upload.len());
    stop(running).await;
}

#[tokio::test]
async fn an_h2_pool_speaks_http2_by_alpn_and_so_do_its_health_checks() {
    let ca = TestCa::new("backend CA");
    let config = ca.issue(&["127.0.0.1"]).server_config();
    let (backend, seen) = h2_backend(Some(config), 100, Duration::ZERO).await;
    let mut plan = tls_pool(&[backend], &ca, None);
    plan.pools[0].tls = Some(
        BackendTls::new(
            &TrustRoots {
                store: Arc::new(ca.roots()),
                source: "the test CA".into(),
            },
            None,
            None,
            UpstreamProtocol::H2.alpn(),
        )
        .unwrap(),
    );
    plan = speaking(plan, UpstreamProtocol::H2);
    // A probe's TLS and HTTP/2 handshakes may take a while on a loaded machine.
    plan.pools[0].health = Some(trafik_proxy::HealthPlan {
        timeout: Duration::from_secs(5),
        ..course_health_check()
    });
    let running = trafik_proxy::start(plan).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.probes.load(Ordering::Relaxed) < 2 {
        assert!(Instant::now() < deadline, "no HTTP/2 health probes");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(running.snapshot().pools[0].backends.is_up(0));
    // An HTTP/1.1 client's request reaches the backend as HTTP/2; the answer's trailers are
    // not a gRPC answer's, so they stay behind.
    let answer = get(web(&running), "/takip/TR-1").await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.text(), "HTTP/2.0 /takip/TR-1");
    stop(running).await;

    // The same pool as http1 offers only http/1.1 by ALPN, which this backend refuses.
    let plain = tls_pool(&[backend], &ca, None);
    let running = trafik_proxy::start(plain).unwrap();
    assert_eq!(get(web(&running), "/takip/TR-2").await.status, 502);
    stop(running).await;
}
