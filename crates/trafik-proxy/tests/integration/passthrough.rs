//! TLS passthrough over real sockets: TLS backends with certificates made here (one test CA),
//! reached through trafik by the server name their clients ask for; trafik never holds a key,
//! so a client that completes its handshake has talked to the backend that owns the name.
//! Hellos without a route, plain HTTP and garbage are closed, and the listener keeps serving.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use trafik_proxy::{ListenerKind, ListenerPlan, Plan, ServerNamePattern, SniRoutePlan};
use trafik_test_support::proxy::*;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A test certificate authority that the clients trust.
struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Authority {
    fn new() -> Self {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        Authority {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// A certificate for `names`, and its key.
    fn certificate(&self, names: &[&str]) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let certificate = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (certificate.der().clone(), key)
    }

    fn client(&self, send_server_name: bool) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.enable_sni = send_server_name;
        TlsConnector::from(Arc::new(config))
    }
}

/// A TLS backend that greets every client with its `name` and closes.
async fn tls_backend(
    name: &'static str,
    certificate: (CertificateDer<'static>, PrivateKeyDer<'static>),
) -> SocketAddr {
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![certificate.0], certificate.1)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(LOOPBACK_ANY_PORT).await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(stream).await {
                    let _ = tls.write_all(name.as_bytes()).await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    address
}

/// What a TLS client that asks for `server_name` (or no name) and verifies the certificate
/// against it reads, with the certificate it was shown.
async fn greeting(
    address: SocketAddr,
    authority: &Authority,
    server_name: &str,
    send_server_name: bool,
) -> std::io::Result<(String, CertificateDer<'static>)> {
    let stream = TcpStream::connect(address).await?;
    let name = ServerName::try_from(server_name.to_owned()).unwrap();
    let mut tls = authority
        .client(send_server_name)
        .connect(name, stream)
        .await?;
    let mut text = String::new();
    tls.read_to_string(&mut text).await?;
    let shown = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    Ok((text, shown))
}

fn sni_route(name: Option<&str>, pool: &str) -> SniRoutePlan {
    SniRoutePlan {
        server_name: name.map(|n| n.parse::<ServerNamePattern>().unwrap()),
        pool: pool.into(),
    }
}

/// Three TLS backends: `a` for a.kargo.test, `b` for every other *.kargo.test, `c` for the
/// rest. Listener 0 routes by name with `c` as the fallback; listener 1 knows only a.kargo.test.
struct Setup {
    authority: Authority,
    certificates: Vec<CertificateDer<'static>>,
    running: trafik_proxy::Running,
}

async fn setup() -> Setup {
    let authority = Authority::new();
    let a = authority.certificate(&["a.kargo.test"]);
    let b = authority.certificate(&["*.kargo.test"]);
    let c = authority.certificate(&["c.kargo.test", "other.example"]);
    let certificates = vec![a.0.clone(), b.0.clone(), c.0.clone()];
    let backends = [
        tls_backend("a", a).await,
        tls_backend("b", b).await,
        tls_backend("c", c).await,
    ];
    let mut plan: Plan = plan(&[]);
    plan.pools = ["a", "b", "c"]
        .iter()
        .zip(backends)
        .map(|(name, backend)| pool(name, &[backend]))
        .collect();
    plan.client.header_read_timeout = Duration::from_millis(500);
    plan.listeners = vec![
        ListenerPlan {
            connections: Default::default(),
            name: "sni".into(),
            address: LOOPBACK_ANY_PORT.parse().unwrap(),
            kind: ListenerKind::TlsPassthrough {
                routes: vec![
                    sni_route(Some("*.kargo.test"), "b"),
                    sni_route(None, "c"),
                    sni_route(Some("a.kargo.test"), "a"),
                ],
            },
        },
        ListenerPlan {
            connections: Default::default(),
            name: "strict".into(),
            address: LOOPBACK_ANY_PORT.parse().unwrap(),
            kind: ListenerKind::TlsPassthrough {
                routes: vec![sni_route(Some("a.kargo.test"), "a")],
            },
        },
    ];
    let running = trafik_proxy::start(plan).unwrap();
    Setup {
        authority,
        certificates,
        running,
    }
}

fn pool_field(status: &Value, pool: usize, field: &str) -> u64 {
    status["pools"][pool]["backends"][0][field]
        .as_u64()
        .unwrap()
}

#[tokio::test]
async fn each_server_name_reaches_the_backend_that_owns_it() {
    let Setup {
        authority,
        certificates,
        running,
    } = setup().await;
    let listener = running.listener_addresses()[0];
    for (name, expected, certificate) in [
        ("a.kargo.test", "a", 0),
        ("x.kargo.test", "b", 1),
        ("A.KARGO.TEST", "a", 0),
        ("other.example", "c", 2),
    ] {
        let (text, shown) = greeting(listener, &authority, name, true).await.unwrap();
        assert_eq!(text, expected, "{name}");
        assert_eq!(
            shown, certificates[certificate],
            "{name}: the backend's own certificate"
        );
    }
    let status = status(&running).await;
    for (pool, connections) in [(0, 2), (1, 1), (2, 1)] {
        assert_eq!(pool_field(&status, pool, "connections"), connections);
        assert_eq!(pool_field(&status, pool, "decisions"), connections);
        assert_eq!(pool_field(&status, pool, "requests"), 0);
        // At least the ClientHello went out, and a certificate came back.
        assert!(pool_field(&status, pool, "bytes_out") > 100 * connections);
        assert!(pool_field(&status, pool, "bytes_in") > 300 * connections);
    }
    stop(running).await;
}

#[tokio::test]
async fn a_hello_without_a_name_goes_to_the_route_without_one_or_is_closed() {
    let Setup {
        authority,
        certificates,
        running,
    } = setup().await;
    let [fallback, strict] = running.listener_addresses()[..] else {
        panic!("two listeners");
    };
    let (text, shown) = greeting(fallback, &authority, "c.kargo.test", false)
        .await
        .unwrap();
    assert_eq!((text.as_str(), &shown), ("c", &certificates[2]));

    assert!(
        greeting(strict, &authority, "a.kargo.test", false)
            .await
            .is_err()
    );
    assert!(
        greeting(strict, &authority, "x.kargo.test", true)
            .await
            .is_err()
    );
    let (text, _) = greeting(strict, &authority, "a.kargo.test", true)
        .await
        .unwrap();
    assert_eq!(text, "a");
    let status = status(&running).await;
    assert_eq!(
        pool_field(&status, 0, "decisions"),
        1,
        "closed hellos cost no decision"
    );
    stop(running).await;
}

/// Sends `bytes` and returns what comes back before trafik closes the connection.
async fn answer_to(address: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer));
    // A reset is a close too; only a connection left open fails.
    let _ = closed.await.expect("trafik closed the connection");
    answer
}

#[tokio::test]
async fn plain_http_garbage_and_unfinished_hellos_are_closed_without_an_answer() {
    let Setup {
        authority, running, ..
    } = setup().await;
    let listener = running.listener_addresses()[0];
    let mut garbage = Vec::new();
    let mut state = 0x9e37_79b9_u32;
    for _ in 0..4096 {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        garbage.push((state >> 24) as u8);
    }
    garbage[0] = 22; // a handshake record header, then nonsense
    garbage[1] = 3;
    for sent in [
        &b"GET / HTTP/1.1\r\nHost: a.kargo.test\r\n\r\n"[..],
        &garbage,
        &garbage[5..],
        // A record that promises a hello and never delivers it: the read timeout closes it.
        &[22, 3, 1, 0, 200, 1, 0, 0, 196],
        // A hello too long to accept.
        &[22, 3, 1, 0x40, 0, 1, 0x01, 0, 0],
    ] {
        assert_eq!(
            answer_to(listener, sent).await,
            b"",
            "{:?}",
            &sent[..sent.len().min(16)]
        );
    }
    let status = status(&running).await;
    for pool in 0..3 {
        assert_eq!(pool_field(&status, pool, "decisions"), 0);
    }
    // The listener still serves.
    let (text, _) = greeting(listener, &authority, "a.kargo.test", true)
        .await
        .unwrap();
    assert_eq!(text, "a");
    stop(running).await;
}
