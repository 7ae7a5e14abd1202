//! Mutual TLS both ways, over real sockets with certificates each test makes: an https listener
//! that asks curl for a client certificate and tells the backend who the client is (removing
//! what a client claims itself), and a pool that shows its own certificate to a backend that
//! demands one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::HeaderName;
use trafik_proxy::tls::backend::BackendTls;
use trafik_proxy::tls::{Certificate, ClientAuth, IdentityHeaders, TrustRoots};
use trafik_proxy::{Engine, ListenerKind, Plan};
use trafik_test_support::proxy::tls::{Issued, TestCa, tls_backend};
use trafik_test_support::proxy::*;

/// A folder for one test's PEM files, which curl reads.
fn folder(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trafik-mtls-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn roots(ca: &TestCa) -> TrustRoots {
    TrustRoots {
        store: Arc::new(ca.roots()),
        source: "the test CA".into(),
    }
}

/// `plan` with an https listener serving `site` that verifies clients against `clients`.
fn mutual(mut plan: Plan, site: &Issued, clients: &TestCa, required: bool) -> Plan {
    let routes = std::mem::take(routes(&mut plan));
    plan.listeners[0].kind = ListenerKind::Https {
        routes,
        certificates: vec![site.for_listener()],
        managed: Vec::new(),
        client_auth: Some(ClientAuth {
            roots: roots(clients),
            required,
            headers: Arc::new(IdentityHeaders {
                subject: Some(HeaderName::from_static("x-client-subject")),
                sans: Some(HeaderName::from_static("x-client-sans")),
                fingerprint: Some(HeaderName::from_static("x-client-fingerprint")),
            }),
        }),
    };
    plan
}

/// curl on a blocking thread (the test's runtime runs the backend).
async fn curl(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(args)
            .output()
            .expect("curl runs (.ci/run installs it)")
    })
    .await
    .unwrap()
}

/// The SHA-256 fingerprint of a PEM certificate as openssl computes it, in lower-case hex.
fn openssl_fingerprint(pem: &str) -> String {
    let output = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in", pem])
        .output()
        .expect("openssl runs");
    let text = String::from_utf8_lossy(&output.stdout);
    text.trim()
        .rsplit('=')
        .next()
        .unwrap()
        .replace(':', "")
        .to_ascii_lowercase()
}

#[tokio::test]
async fn a_client_certificate_is_verified_and_named_to_the_backend() {
    let upstream = echo_server(Duration::ZERO).await;
    let dir = folder("listener");
    let (site_ca, client_ca) = (TestCa::new("site CA"), TestCa::new("client CA"));
    let site = site_ca.issue(&["kargo.test"]);
    let courier = client_ca.issue_client("kurye", &["kurye.kargo.test", "spiffe://kargo/kurye"]);
    let stranger = TestCa::new("another CA").issue_client("kurye", &[]);
    let ca_file = write(&dir, "ca.pem", &site_ca.pem);
    let (cert, key) = (
        write(&dir, "kurye.pem", &courier.cert_pem),
        write(&dir, "kurye.key", &courier.key_pem),
    );
    let (stranger_cert, stranger_key) = (
        write(&dir, "stranger.pem", &stranger.cert_pem),
        write(&dir, "stranger.key", &stranger.key_pem),
    );
    let fingerprint = openssl_fingerprint(&cert);
    for (engine, required) in [
        (Engine::Trafik, true),
        (Engine::Hyper, true),
        (Engine::Trafik, false),
    ] {
        let plan = mutual(plan_on(engine, &[upstream]), &site, &client_ca, required);
        let running = trafik_proxy::start(plan).unwrap();
        let port = web(&running).port();
        let get = |flag: &str, identity: Option<(&str, &str)>| {
            let mut args: Vec<String> = [
                "-sS",
                flag,
                "--cacert",
                &ca_file,
                "--resolve",
                &format!("kargo.test:{port}:127.0.0.1"),
                // What a client may claim; only the listener may say it.
                "-H",
                "x-client-subject: CN=admin",
                "-H",
                "x-client-fingerprint: 00",
            ]
            .iter()
            .map(|a| a.to_string())
            .collect();
            if let Some((cert, key)) = identity {
                args.extend(["--cert".into(), cert.into(), "--key".into(), key.into()]);
            }
            args.push(format!("https://kargo.test:{port}/takip/TR-1"));
            curl(args)
        };
        for flag in ["--http1.1", "--http2"] {
            let output = get(flag, Some((&cert, &key))).await;
            assert!(
                output.status.success(),
                "{engine:?} {flag}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let echoed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
            let headers = &echoed["headers"];
            assert_eq!(headers["x-client-subject"], "CN=kurye", "{engine:?} {flag}");
            assert_eq!(
                headers["x-client-sans"], "DNS:kurye.kargo.test, URI:spiffe://kargo/kurye",
                "{engine:?} {flag}"
            );
            assert_eq!(headers["x-client-fingerprint"], fingerprint.as_str());
        }
        // No certificate, or one another CA signed.
        for identity in [None, Some((stranger_cert.as_str(), stranger_key.as_str()))] {
            let output = get("--http1.1", identity).await;
            let signed_elsewhere = identity.is_some();
            if required || signed_elsewhere {
                assert!(
                    !output.status.success(),
                    "{engine:?} required={required}: {}",
                    String::from_utf8_lossy(&output.stdout)
                );
            } else {
                // Optional: served, and a client's own claims never pass.
                let echoed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
                let headers = echoed["headers"].as_object().unwrap();
                assert!(!headers.contains_key("x-client-subject"), "{headers:?}");
                assert!(!headers.contains_key("x-client-fingerprint"), "{headers:?}");
            }
        }
        stop(running).await;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_pool_shows_its_certificate_to_a_backend_that_demands_one() {
    let (backend_ca, client_ca) = (TestCa::new("backend CA"), TestCa::new("client CA"));
    let demanding = backend_ca
        .issue(&["127.0.0.1"])
        .server_config_with(Some(&client_ca));
    let (backend, seen) = tls_backend(demanding).await;
    let trafik_cert = client_ca.issue_client("trafik", &["trafik.kargo.test"]);
    let pool_tls = |certificate: Option<&Certificate>| {
        BackendTls::new(&roots(&backend_ca), None, certificate, &[b"http/1.1"]).unwrap()
    };

    // Without a certificate the backend refuses the handshake: 502, nothing reached it.
    let mut refused = plan(&[backend]);
    refused.pools[0].tls = Some(pool_tls(None));
    let running = trafik_proxy::start(refused).unwrap();
    assert_eq!(get(web(&running), "/takip/TR-2").await.status, 502);
    assert_eq!(seen.requests.load(Ordering::Relaxed), 0);
    stop(running).await;

    let loaded = Certificate::from_pem(
        "trafik's client certificate",
        trafik_cert.cert_pem.as_bytes(),
        trafik_cert.key_pem.as_bytes(),
    )
    .unwrap();
    let mut plan = plan(&[backend]);
    plan.pools[0].tls = Some(pool_tls(Some(&loaded)));
    let running = trafik_proxy::start(plan).unwrap();
    let answer = get(web(&running), "/takip/TR-3").await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.header("x-client-certificate"), Some("yes"));
    stop(running).await;
}

/// A route may match the client certificate's identity headers: it reads the verified identity,
/// set before routing, never what a client claims under the same name.
#[tokio::test]
async fn a_route_matches_the_verified_identity_and_never_a_claimed_one() {
    let upstream = echo_server(Duration::ZERO).await;
    let dir = folder("route");
    let (site_ca, client_ca) = (TestCa::new("site CA"), TestCa::new("client CA"));
    let site = site_ca.issue(&["kargo.test"]);
    let courier = client_ca.issue_client("kurye", &[]);
    let ca_file = write(&dir, "ca.pem", &site_ca.pem);
    let (cert, key) = (
        write(&dir, "kurye.pem", &courier.cert_pem),
        write(&dir, "kurye.key", &courier.key_pem),
    );
    for engine in [Engine::Trafik, Engine::Hyper] {
        let mut plan = plan_on(engine, &[upstream]);
        let mut couriers_only = route("/takip", "takip");
        couriers_only.routing.conditions.headers = vec![(
            "x-client-subject".into(),
            trafik_policy::route_match::ValueMatch::parse("CN=kurye").unwrap(),
        )];
        *routes(&mut plan) = vec![couriers_only];
        let plan = mutual(plan, &site, &client_ca, false);
        let running = trafik_proxy::start(plan).unwrap();
        let port = web(&running).port();
        let status = |identity: Option<(&str, &str)>| {
            let mut args: Vec<String> = [
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--cacert",
                &ca_file,
                "--resolve",
                &format!("kargo.test:{port}:127.0.0.1"),
                "-H",
                "x-client-subject: CN=kurye",
            ]
            .iter()
            .map(|a| a.to_string())
            .collect();
            if let Some((cert, key)) = identity {
                args.extend(["--cert".into(), cert.into(), "--key".into(), key.into()]);
            }
            args.push(format!("https://kargo.test:{port}/takip/TR-1"));
            curl(args)
        };
        let verified = status(Some((&cert, &key))).await;
        assert_eq!(
            String::from_utf8_lossy(&verified.stdout),
            "200",
            "{engine:?}"
        );
        let claimed = status(None).await;
        assert_eq!(
            String::from_utf8_lossy(&claimed.stdout),
            "404",
            "{engine:?}"
        );
        stop(running).await;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
