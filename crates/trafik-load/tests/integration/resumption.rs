//! TLS session resumption, seen from the server: a rustls server on loopback that closes every
//! connection after one answer makes the generator reconnect for each request, and records
//! whether each handshake was full or resumed. Resuming is what the client's session cache is
//! for; without it every reconnect would pay for a full handshake.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rustls::HandshakeKind;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use trafik_load::tls::{TlsOptions, client_config};
use trafik_load::{Pacing, RatePlan, RunOptions, Target};

fn demo(file: &str) -> Vec<u8> {
    let path = format!("{}/../../examples/certs/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A TLS server for localhost on a free port that answers one request per connection, then
/// closes it; the handshakes' kinds, in order, go to the returned list.
async fn server() -> (u16, Arc<Mutex<Vec<HandshakeKind>>>) {
    let certificates: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&demo("localhost.pem"))
            .collect::<Result<_, _>>()
            .unwrap();
    let key = PrivateKeyDer::from_pem_slice(&demo("localhost.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certificates, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let kinds = Arc::new(Mutex::new(Vec::new()));
    let seen = kinds.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                if let Some(kind) = tls.get_ref().1.handshake_kind() {
                    seen.lock().unwrap().push(kind);
                }
                let mut head = Vec::new();
                let mut buffer = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buffer[..n]),
                    }
                }
                let _ = tls
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, kinds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_resume_their_tls_session_instead_of_a_full_handshake() {
    for version in ["1.2", "1.3"] {
        let (port, kinds) = server().await;
        let tls = TlsOptions {
            ca_pem: Some(demo("ca.pem")),
            insecure: false,
            versions: vec![version.to_owned()],
        };
        let url = format!("https://localhost:{port}/takip/TR-{{n}}");
        let options = RunOptions {
            target: Target::new(&[url], http::Method::GET, Vec::new(), Bytes::new()).unwrap(),
            pacing: Pacing::Open(RatePlan::constant(20.0, Duration::from_secs(1))),
            connections: 1,
            max_connections: 8,
            http2: false,
            streams: 1,
            tls: Some(client_config(&tls, false).unwrap()),
            timeout: Duration::from_secs(5),
            late_after: Duration::from_millis(5),
            threshold_us: u64::MAX,
            keep_seconds: false,
        };
        let run = trafik_load::run(options, |_| {}).await;
        assert_eq!(run.recorder.completed, run.sent, "TLS {version}");
        assert!(run.tls_failures.is_empty(), "{:?}", run.tls_failures);
        let kinds = kinds.lock().unwrap().clone();
        // One connection a request: the first handshake is full, and the session it gave is
        // resumed by the reconnects after it.
        assert!(kinds.len() as u64 >= run.sent, "TLS {version}: {kinds:?}");
        assert_eq!(kinds[0], HandshakeKind::Full, "TLS {version}");
        let resumed = kinds
            .iter()
            .filter(|k| **k == HandshakeKind::Resumed)
            .count();
        assert!(
            resumed > kinds.len() / 2,
            "TLS {version}: {resumed} of {} handshakes resumed: {kinds:?}",
            kinds.len()
        );
    }
}
