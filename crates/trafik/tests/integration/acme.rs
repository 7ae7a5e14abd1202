//! Certificates ordered with ACME from pebble (Let's Encrypt's test CA, Debian's `pebble`), whose
//! resolver asks trafik's own DNS server for the test names: a cold order served at start, a
//! renewal on demand served without a restart, a stored certificate served after a restart
//! without a new order, a failing challenge that keeps the old certificate and shows the error,
//! and a fleet of three instances on one etcd that orders once and serves one certificate.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use trafik_test_support::free_port;
use trafik_test_support::process::{Trafik, Upstream, get_json, get_text, trafik_binary};
use trafik_test_support::services::{Etcd, Pebble, https_get};

const NAME: &str = "www.kargo.test";

fn folder(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trafik-acme-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The ports of one instance: plain HTTP (HTTP-01), HTTPS (TLS-ALPN-01 and serving), admin.
#[derive(Clone, Copy)]
struct Ports {
    plain: u16,
    https: u16,
    admin: u16,
}

impl Ports {
    fn free() -> Ports {
        let [plain, https, admin] = trafik_test_support::free_ports();
        Ports {
            plain,
            https,
            admin,
        }
    }
    fn admin(&self) -> String {
        format!("127.0.0.1:{}", self.admin)
    }
}

/// `[dns]` answering `www.kargo.test` with `address`.
fn dns_section(dns: u16, address: &str) -> String {
    format!(
        r#"
[dns]
listen = "127.0.0.1:{dns}"

[[dns.zone]]
origin = "kargo.test."
name_servers = ["ns1"]

[[dns.zone.record]]
name = "ns1"
type = "A"
value = "127.0.0.1"

[[dns.zone.record]]
name = "www"
type = "A"
value = "{address}"
"#
    )
}

/// A configuration with an https listener whose certificate comes from `pebble` by
/// `challenge`, a plain listener, both in front of `upstream`.
fn config(ports: Ports, pebble: &Pebble, challenge: &str, upstream: &Upstream) -> String {
    format!(
        r#"[admin]
listen = "127.0.0.1:{admin}"

[[listener]]
name = "plain"
listen = "127.0.0.1:{plain}"

[[listener.route]]
pool = "takip"

[[listener]]
name = "site"
listen = "127.0.0.1:{https}"
protocol = "https"

[[listener.tls]]
acme = {{ domains = ["{NAME}"], directory = "{directory}", directory_ca = "{ca}", email = "ops@kargo.test", challenge = "{challenge}", storage = "acme" }}

[[listener.route]]
pool = "takip"

[[pool]]
name = "takip"
backends = [{{ address = "{upstream}" }}]
"#,
        admin = ports.admin,
        plain = ports.plain,
        https = ports.https,
        directory = pebble.directory(),
        ca = pebble.https_ca().display(),
        upstream = upstream.address,
    )
}

/// `trafik serve -c file`, its log in `log`.
fn serve(file: &Path, log: &Path) -> Trafik {
    let log = std::fs::File::create(log).unwrap();
    Trafik::start(
        &["serve", "--config", file.to_str().unwrap()],
        Stdio::from(log),
        "listening on",
    )
    .0
}

/// The leaf certificate served on `port` for `NAME`, verified against pebble's `root`, and the
/// answer to a GET through it.
fn served(port: u16, root: &str) -> Result<(Vec<u8>, String), String> {
    https_get(port, NAME, "/saglik", root)
}

/// Waits (bounded, generously) until `port` serves a certificate pebble issued, and returns it.
fn wait_served(port: u16, root: &str, what: &str, logs: &[&Path]) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match served(port, root) {
            Ok((leaf, answer)) => {
                assert!(answer.starts_with("HTTP/1.1 200"), "{what}: {answer}");
                return leaf;
            }
            Err(error) if Instant::now() > deadline => {
                let logs: Vec<String> = logs
                    .iter()
                    .map(|log| std::fs::read_to_string(log).unwrap_or_default())
                    .collect();
                panic!("{what}: no certificate served within 120 s ({error}); logs:\n{logs:#?}");
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn certificate_status(admin: &str) -> serde_json::Value {
    let status = get_json(admin, "/status");
    let certificates = status["certificates"].as_array().unwrap();
    assert_eq!(certificates.len(), 1, "{status}");
    certificates[0].clone()
}

/// `trafik reload` of the instance whose admin API is at `admin`, which must take the file.
fn reload(admin: &str) {
    let reload = Command::new(trafik_binary())
        .args(["reload", "--admin", admin])
        .output()
        .unwrap();
    assert!(reload.status.success(), "{reload:?}");
}

fn cert_renew(admin: &str) -> std::process::Output {
    Command::new(trafik_binary())
        .args(["cert", "renew", "--admin", admin, "--wait", "3m"])
        .output()
        .unwrap()
}

/// Pebble checking challenges on `ports`, resolving with the DNS server on `dns`; its root; a
/// replica behind trafik.
struct Setup {
    dir: PathBuf,
    ports: Ports,
    dns: u16,
    pebble: Pebble,
    root: String,
    upstream: Upstream,
}

impl Setup {
    fn new(test: &str) -> Setup {
        let dir = folder(test);
        let ports = Ports::free();
        let dns = free_port();
        let pebble = Pebble::start(
            &dir.join("pebble"),
            format!("127.0.0.1:{dns}").parse().unwrap(),
            ports.plain,
            ports.https,
        );
        let root = pebble.root();
        Setup {
            dir,
            ports,
            dns,
            pebble,
            root,
            upstream: Upstream::start(&[]),
        }
    }

    /// The configuration with `challenge`, its name at `address`.
    fn config(&self, challenge: &str, address: &str) -> String {
        config(self.ports, &self.pebble, challenge, &self.upstream)
            + &dns_section(self.dns, address)
    }
}

#[test]
fn http_01_orders_at_start_renews_on_demand_without_a_restart_and_keeps_what_it_stored() {
    let setup = Setup::new("http01");
    let (dir, ports, root) = (&setup.dir, setup.ports, &setup.root);
    let file = dir.join("trafik.toml");
    std::fs::write(&file, setup.config("http-01", "127.0.0.1")).unwrap();
    let check = Command::new(trafik_binary())
        .args(["check", "--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    let plan = String::from_utf8_lossy(&check.stdout);
    assert!(
        plan.contains(&format!(
            "certificate by ACME (http-01) from {}: {NAME}",
            setup.pebble.directory()
        )),
        "{plan}"
    );

    // Cold: nothing stored, so trafik orders at start and serves what pebble issued.
    let log = dir.join("trafik.log");
    let trafik = serve(&file, &log);
    let first = wait_served(ports.https, root, "the first order", &[&log]);
    let status = certificate_status(&ports.admin());
    assert_eq!(status["serving"], true, "{status}");
    assert_eq!(status["ordered"], 1, "{status}");
    assert_eq!(status["last_error"], serde_json::Value::Null, "{status}");
    let (not_before, not_after, renew_at) = (
        status["not_before"].as_u64().unwrap(),
        status["not_after"].as_u64().unwrap(),
        status["renew_at"].as_u64().unwrap(),
    );
    assert_eq!(renew_at, not_before + (not_after - not_before) * 2 / 3);
    assert!(dir.join("acme").join(NAME).join("cert.pem").is_file());
    let metrics = get_text(&ports.admin(), "/metrics");
    assert!(
        metrics.contains(&format!(
            "trafik_certificate_expiry_timestamp_seconds{{domains=\"{NAME}\"}} {not_after}"
        )),
        "{metrics}"
    );

    // On demand: a new certificate, served by the same process.
    let renewed = cert_renew(&ports.admin());
    assert!(renewed.status.success(), "{renewed:?}");
    assert!(
        String::from_utf8_lossy(&renewed.stdout).contains("renewed"),
        "{renewed:?}"
    );
    let (second, _) = served(ports.https, root).unwrap();
    assert_ne!(first, second, "the renewal's certificate is served");
    let status = certificate_status(&ports.admin());
    assert_eq!(status["ordered"], 2, "{status}");
    let stopped = trafik.stop();
    assert!(stopped.status.success(), "{stopped:?}");

    // Restarted: the stored certificate is served, and nothing is ordered.
    let log = dir.join("trafik-again.log");
    let _trafik = serve(&file, &log);
    let again = wait_served(ports.https, root, "the stored certificate", &[&log]);
    assert_eq!(again, second);
    let status = certificate_status(&ports.admin());
    assert_eq!(status["ordered"], 0, "{status}");
    assert_eq!(status["renewals"], 1, "{status}");

    // Another challenge is another certificate to manage: after the reload only it is shown
    // (certificate_status wants exactly one) and renewed; the http-01 one is forgotten.
    std::fs::write(&file, setup.config("tls-alpn-01", "127.0.0.1")).unwrap();
    reload(&ports.admin());
    let status = certificate_status(&ports.admin());
    assert_eq!(status["challenge"], "tls-alpn-01", "{status}");
}

#[test]
fn a_failing_tls_alpn_01_challenge_keeps_the_old_certificate_and_shows_the_error() {
    let setup = Setup::new("alpn");
    let (dir, ports, root) = (&setup.dir, setup.ports, &setup.root);
    let file = dir.join("trafik.toml");
    std::fs::write(&file, setup.config("tls-alpn-01", "127.0.0.1")).unwrap();
    let log = dir.join("trafik.log");
    let _trafik = serve(&file, &log);
    let first = wait_served(ports.https, root, "the TLS-ALPN-01 order", &[&log]);

    // The name now points where nothing answers: the next challenge fails.
    std::fs::write(&file, setup.config("tls-alpn-01", "127.0.0.2")).unwrap();
    reload(&ports.admin());
    // Pebble makes a new authorization when `rand.Intn(100) > PEBBLE_AUTHZREUSE`, so even at 0
    // it hands an account its valid one now and then and the renewal would pass unchallenged.
    // A new account has none to reuse: trafik registers one when none is stored.
    std::fs::remove_dir_all(dir.join("acme").join("accounts")).unwrap();
    let renewed = cert_renew(&ports.admin());
    assert_eq!(renewed.status.code(), Some(1), "{renewed:?}");
    let said = String::from_utf8_lossy(&renewed.stdout);
    assert!(said.contains("failed, the old certificate stays"), "{said}");

    let (still, answer) = served(ports.https, root).unwrap();
    assert_eq!(still, first, "the old certificate is served on");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let status = certificate_status(&ports.admin());
    assert_eq!(status["serving"], true, "{status}");
    assert_eq!(status["failures"], 1, "{status}");
    let error = status["last_error"].as_str().unwrap();
    assert!(error.contains("tls-alpn-01"), "{error}");
    let metrics = get_text(&ports.admin(), "/metrics");
    assert!(
        metrics.contains(&format!(
            "trafik_certificate_failing{{domains=\"{NAME}\"}} 1"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "trafik_certificate_failures_total{{domains=\"{NAME}\"}} 1"
        )),
        "{metrics}"
    );

    // The name answers again: the asked renewal is retried with the backoff (5 s, doubling)
    // until it succeeds, without another `cert renew`, and the certificate stops failing.
    std::fs::write(&file, setup.config("tls-alpn-01", "127.0.0.1")).unwrap();
    reload(&ports.admin());
    let mut tries = 0;
    while served(ports.https, root).map(|(leaf, _)| leaf) == Ok(first.clone()) {
        tries += 1;
        assert!(tries < 600, "the failed renewal was not retried: {log:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let metrics = get_text(&ports.admin(), "/metrics");
    assert!(
        metrics.contains(&format!(
            "trafik_certificate_failing{{domains=\"{NAME}\"}} 0"
        )),
        "{metrics}"
    );
}

#[test]
fn a_fleet_of_three_on_one_etcd_orders_once_and_serves_one_certificate() {
    fleet_of_three("fleet", "http-01");
}

/// The CA's TLS-ALPN-01 handshake reaches the first instance while the second holds the
/// order: the first answers with the digest the second published in etcd.
#[test]
fn a_fleet_answers_tls_alpn_01_on_an_instance_that_did_not_order() {
    fleet_of_three("fleet-alpn", "tls-alpn-01");
}

/// Three instances on one etcd with `challenge`, the CA reaching the first one's listeners: the
/// first order is made once and served by all; a renewal asked of the second is validated at
/// the first and taken by all.
fn fleet_of_three(test: &str, challenge: &str) {
    let dir = folder(test);
    let etcd = Etcd::start(&dir.join("etcd"));
    let ports: Vec<Ports> = (0..3).map(|_| Ports::free()).collect();
    let dns = free_port();
    // The CA reaches the first instance; any of the three may hold the order lock, and the
    // first answers the challenge through etcd.
    let pebble = Pebble::start(
        &dir.join("pebble"),
        format!("127.0.0.1:{dns}").parse().unwrap(),
        ports[0].plain,
        ports[0].https,
    );
    let root = pebble.root();
    let upstream = Upstream::start(&[]);
    // The name server is an instance of its own, outside the fleet.
    let dns_file = dir.join("dns.toml");
    std::fs::write(&dns_file, dns_section(dns, "127.0.0.1")).unwrap();
    let dns_log = dir.join("dns.log");
    let _dns = Trafik::start(
        &["serve", "--config", dns_file.to_str().unwrap()],
        Stdio::from(std::fs::File::create(&dns_log).unwrap()),
        "dns on",
    );
    let file = dir.join("fleet.toml");
    std::fs::write(&file, config(ports[0], &pebble, challenge, &upstream)).unwrap();
    let pushed = Command::new(trafik_binary())
        .args([
            "config",
            "push",
            file.to_str().unwrap(),
            "--etcd",
            &etcd.url(),
        ])
        .output()
        .unwrap();
    assert!(pushed.status.success(), "{pushed:?}");
    let logs: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("fleet-{i}.log"))).collect();
    let instances: Vec<Trafik> = ports
        .iter()
        .zip(&logs)
        .enumerate()
        .map(|(i, (ports, log))| {
            let listen = |name: &str, port: u16| format!("{name}=127.0.0.1:{port}");
            Trafik::start(
                &[
                    "serve",
                    "--etcd",
                    &etcd.url(),
                    "--instance",
                    &format!("k{i}"),
                    "--listen",
                    &listen("plain", ports.plain),
                    "--listen",
                    &listen("site", ports.https),
                    "--admin",
                    &ports.admin(),
                ],
                Stdio::from(std::fs::File::create(log).unwrap()),
                "listening on",
            )
            .0
        })
        .collect();
    let log_paths: Vec<&Path> = logs.iter().map(PathBuf::as_path).collect();
    let leaves: Vec<Vec<u8>> = ports
        .iter()
        .map(|p| wait_served(p.https, &root, "a fleet instance", &log_paths))
        .collect();
    assert!(
        leaves.iter().all(|leaf| *leaf == leaves[0]),
        "all three serve one certificate"
    );
    let ordered: u64 = ports
        .iter()
        .map(|p| certificate_status(&p.admin())["ordered"].as_u64().unwrap())
        .sum();
    assert_eq!(ordered, 1, "one instance ordered");
    assert_eq!(pebble.issued(), 1, "{}", pebble.log());

    // A renewal asked of the second instance: it orders, the CA asks the first for the
    // challenge's answer (which only etcd gives it), and every instance takes the new
    // certificate.
    let before = certificate_status(&ports[1].admin())["ordered"]
        .as_u64()
        .unwrap();
    let renewed = cert_renew(&ports[1].admin());
    assert!(renewed.status.success(), "{renewed:?}");
    let after = certificate_status(&ports[1].admin())["ordered"]
        .as_u64()
        .unwrap();
    assert_eq!(after, before + 1, "the second instance ordered");
    assert_eq!(pebble.issued(), 2, "{}", pebble.log());
    let (renewal, _) = served(ports[1].https, &root).unwrap();
    assert_ne!(renewal, leaves[0]);
    for p in &ports {
        let deadline = Instant::now() + Duration::from_secs(60);
        while served(p.https, &root).map(|(leaf, _)| leaf) != Ok(renewal.clone()) {
            assert!(
                Instant::now() < deadline,
                "an instance did not take the renewal from etcd: {log_paths:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    drop(instances);
}
