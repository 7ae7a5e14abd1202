//! TLS as a user configures it: certificate problems found by `trafik check` at the value that
//! names the file, all at once; quick mode's `--tls-cert`/`--tls-key`; and a reload whose key is
//! broken changing nothing.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use trafik_test_support::{Trafik, Upstream, free_port};

fn trafik(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(args)
        .output()
        .expect("trafik runs")
}

/// A fresh folder for one test's files.
fn folder(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trafik-tls-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A self-signed certificate for `names`, written as NAME.pem and NAME.key in `dir`.
fn certificate(dir: &Path, name: &str, names: &[&str]) {
    let made =
        rcgen::generate_simple_self_signed(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), made.cert.pem()).unwrap();
    std::fs::write(
        dir.join(format!("{name}.key")),
        made.signing_key.serialize_pem(),
    )
    .unwrap();
}

/// What `trafik check` says of `text` written at `path`, which it must refuse, reporting each
/// `(needle, field, message)`: the message for the field at the place of the needle.
fn check_errors(path: &Path, text: &str, expected: &[(&str, &str, &str)]) -> String {
    std::fs::write(path, text).unwrap();
    let output = trafik(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let errors = String::from_utf8_lossy(&output.stderr).into_owned();
    for (needle, field, message) in expected {
        let expected = format!(
            "{}:{}: {field}: {message}",
            path.display(),
            place(text, needle)
        );
        assert!(
            errors.contains(&expected),
            "missing {expected:?} in\n{errors}"
        );
    }
    errors
}

/// `trafik serve` with one https listener (the demo certificate, copied into `dir`, and the
/// listener's `extra` keys) in front of `upstream`.
struct Served {
    server: Trafik,
    web: u16,
    admin: u16,
    config: PathBuf,
    text: String,
}

fn serve_https(dir: &Path, extra: &str, upstream: &Upstream) -> Served {
    let (web, admin) = (free_port(), free_port());
    let config = dir.join("trafik.toml");
    let text = format!(
        r#"[admin]
listen = "127.0.0.1:{admin}"

[[listener]]
name = "web"
listen = "127.0.0.1:{web}"
protocol = "https"
{extra}
[[listener.tls]]
cert = "localhost.pem"
key = "localhost.key"

[[listener.route]]
pool = "takip"

[[pool]]
name = "takip"
backends = [{{ address = "{}" }}]
"#,
        upstream.address
    );
    std::fs::write(&config, &text).unwrap();
    let (server, _) = Trafik::start(
        &["serve", "--config", config.to_str().unwrap()],
        Stdio::piped(),
        "listening on",
    );
    Served {
        server,
        web,
        admin,
        config,
        text,
    }
}

/// `LINE:COLUMN` of the first `needle` in `text`, 1-based.
fn place(text: &str, needle: &str) -> String {
    let offset = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} in the config"));
    let line = text[..offset].matches('\n').count() + 1;
    let column = offset - text[..offset].rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("{line}:{column}")
}

/// The demo files of `examples/certs`, which the repository ships for examples and tests.
fn demo(file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/certs")
        .join(file)
        .display()
        .to_string()
}

/// `GET path` over HTTPS to 127.0.0.1:`port` as `localhost`, trusting the demo CA; the answer's
/// head and body.
fn https_get(port: u16, path: &str) -> Result<String, String> {
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(demo("ca.pem")).unwrap();
    let ca = rustls::pki_types::pem::PemObject::from_pem_slice(&ca).unwrap();
    roots.add(ca).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = "localhost".try_into().unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let socket = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    let mut stream = rustls::StreamOwned::new(connection, socket);
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    match stream.read_to_string(&mut answer) {
        // A server may close without TLS's close_notify once the answer is out.
        Ok(_) => Ok(answer),
        Err(_) if !answer.is_empty() => Ok(answer),
        Err(error) => Err(error.to_string()),
    }
}

#[test]
fn check_reports_every_certificate_problem_at_the_value_naming_it() {
    let dir = folder("check");
    certificate(&dir, "site", &["kargo.test"]);
    certificate(&dir, "other", &["other.test"]);
    std::fs::write(dir.join("not-pem.pem"), "hello\n").unwrap();
    let text = r#"[[listener]]
name = "web"
listen = "127.0.0.1:0"
protocol = "https"

[[listener.route]]
pool = "p"

[[listener.tls]]
cert = "missing.pem"
key = "site.key"

[[listener.tls]]
cert = "not-pem.pem"
key = "site.key"

[[listener.tls]]
cert = "site.pem"
key = "other.key"

[[listener]]
name = "plain"
listen = "127.0.0.1:0"

[[listener.route]]
pool = "q"

[[listener.tls]]
cert = "site.pem"
key = "site.key"

[[pool]]
name = "p"
tls = true
ca = "missing-ca.pem"
sni = "not a name"
backends = [{ address = "127.0.0.1:9" }]

[[pool]]
name = "q"
ca = "site.pem"
backends = [{ address = "127.0.0.1:9" }]
"#;
    let errors = check_errors(
        &dir.join("tls.toml"),
        text,
        &[
            ("\"missing.pem\"", "listener[0].tls[0].cert", "cannot read"),
            (
                "\"not-pem.pem\"",
                "listener[0].tls[1].cert",
                "no certificate in this file",
            ),
            (
                "\"other.key\"",
                "listener[0].tls[2].key",
                "this key does not belong to the certificate",
            ),
            (
                "[[listener.tls]]\ncert = \"site.pem\"\nkey = \"site.key\"",
                "listener[1].tls",
                "certificates are for https listeners",
            ),
            ("\"missing-ca.pem\"", "pool[0].ca", "cannot read"),
            ("\"not a name\"", "pool[0].sni", "expected a DNS name"),
            (
                "\"site.pem\"\nbackends",
                "pool[1].ca",
                "`ca` applies to TLS",
            ),
        ],
    );
    assert!(
        errors.contains("error: 7 errors in the configuration"),
        "{errors}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn quick_mode_serves_https_with_the_certificates_it_is_given() {
    let upstream = Upstream::start(&[]);
    let (cert, key) = (demo("localhost.pem"), demo("localhost.key"));
    let args = [
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--to",
        &upstream.address,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ];
    let (proxy, line) = Trafik::start(&args, Stdio::piped(), "listening on");
    let port: u16 = line
        .split("https://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no https address in {line:?}"));
    let answer = https_get(port, "/takip/TR-4821").unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"no\":\"TR-4821\""), "{answer}");
    assert!(proxy.stop().status.success());
    upstream.stop();

    // A key without its certificate, and a file that is not there, name the flag.
    let quick = ["proxy", "--listen", "127.0.0.1:0", "--to", "127.0.0.1:9"];
    for (extra, expected) in [
        (vec!["--tls-key", &key], "--tls-cert: missing `cert`"),
        (
            vec!["--tls-cert", "nowhere.pem", "--tls-key", &key],
            "--tls-cert: cannot read nowhere.pem",
        ),
    ] {
        let args: Vec<&str> = quick.iter().copied().chain(extra).collect();
        let output = trafik(&args);
        assert_eq!(output.status.code(), Some(2));
        let errors = String::from_utf8_lossy(&output.stderr);
        assert!(errors.contains(expected), "{errors}");
    }
}

#[test]
fn a_reload_with_a_broken_key_changes_nothing() {
    let dir = folder("reload");
    for file in ["localhost.pem", "localhost.key"] {
        std::fs::copy(demo(file), dir.join(file)).unwrap();
    }
    let upstream = Upstream::start(&[]);
    let Served {
        server,
        web,
        admin,
        config,
        text,
    } = serve_https(&dir, "", &upstream);
    assert!(
        https_get(web, "/takip/TR-1")
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );

    // The key file is overwritten with one of another certificate: the reload is refused
    // with the reason, at the key's line, and the old certificate goes on serving.
    certificate(&dir, "stranger", &["localhost"]);
    std::fs::copy(dir.join("stranger.key"), dir.join("localhost.key")).unwrap();
    let reload = || trafik(&["reload", "--admin", &format!("127.0.0.1:{admin}")]);
    let refused = reload();
    assert_eq!(refused.status.code(), Some(2));
    let errors = String::from_utf8_lossy(&refused.stderr);
    let expected = format!(
        "{}:{}: listener[0].tls[0].key: this key does not belong to the certificate",
        config.display(),
        place(&text, "\"localhost.key\"")
    );
    assert!(errors.contains(&expected), "{errors}");
    assert!(
        https_get(web, "/takip/TR-2")
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );

    std::fs::copy(demo("localhost.key"), dir.join("localhost.key")).unwrap();
    let accepted = reload();
    assert!(accepted.status.success(), "{accepted:?}");
    assert!(
        https_get(web, "/takip/TR-3")
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );
    assert!(server.stop().status.success());
    upstream.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_reports_mutual_tls_and_protocol_problems_where_they_are_written() {
    let dir = folder("mtls-check");
    certificate(&dir, "site", &["kargo.test"]);
    let text = r#"[[listener]]
name = "web"
listen = "127.0.0.1:0"
protocol = "https"
client_ca = "missing-ca.pem"
client_auth = "sometimes"

[listener.client_headers]
subject = "not a header"

[[listener.tls]]
cert = "site.pem"
key = "site.key"

[[listener.route]]
pool = "p"

[[listener]]
name = "plain"
listen = "127.0.0.1:0"
client_auth = "optional"

[[listener.route]]
pool = "p"

[[pool]]
name = "p"
protocol = "h2"
client_cert = "site.pem"
backends = [{ address = "127.0.0.1:9" }]
"#;
    check_errors(
        &dir.join("mtls.toml"),
        text,
        &[
            ("\"missing-ca.pem\"", "listener[0].client_ca", "cannot read"),
            (
                "\"sometimes\"",
                "listener[0].client_auth",
                "expected \"required\"",
            ),
            (
                "\"not a header\"",
                "listener[0].client_headers.subject",
                "not a header name",
            ),
            (
                "\"optional\"",
                "listener[1].client_auth",
                "client certificates need the CA",
            ),
            ("\"h2\"", "pool[0].protocol", "h2 is HTTP/2 over TLS"),
            (
                "\"site.pem\"\nbackends",
                "pool[0].client_cert",
                "`client_cert` applies to TLS",
            ),
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_reload_reads_the_client_ca_again() {
    use trafik_test_support::proxy::tls::TestCa;
    let dir = folder("client-ca-reload");
    let (first, second) = (TestCa::new("clients 1"), TestCa::new("clients 2"));
    let files = |name: &str, ca: &TestCa| {
        let issued = ca.issue_client(name, &[]);
        let (cert, key) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&cert, &issued.cert_pem).unwrap();
        std::fs::write(&key, &issued.key_pem).unwrap();
        (cert.display().to_string(), key.display().to_string())
    };
    let (old_client, new_client) = (files("eski", &first), files("yeni", &second));
    std::fs::write(dir.join("clients.pem"), &first.pem).unwrap();
    for file in ["localhost.pem", "localhost.key"] {
        std::fs::copy(demo(file), dir.join(file)).unwrap();
    }
    let upstream = Upstream::start(&[]);
    let Served {
        server, web, admin, ..
    } = serve_https(&dir, "client_ca = \"clients.pem\"\n", &upstream);
    let ca = demo("ca.pem");
    let curl = |(cert, key): &(String, String)| {
        Command::new("curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--cacert",
                &ca,
            ])
            .args(["--cert", cert, "--key", key])
            .arg(format!("https://localhost:{web}/takip/TR-1"))
            .output()
            .expect("curl runs")
    };
    let answered = |output: Output| String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(answered(curl(&old_client)), "200");
    assert!(!curl(&new_client).status.success(), "another CA's client");

    // The file now names the other CA: a reload reads it, and the clients change places.
    std::fs::write(dir.join("clients.pem"), &second.pem).unwrap();
    let reload = trafik(&["reload", "--admin", &format!("127.0.0.1:{admin}")]);
    assert!(reload.status.success(), "{reload:?}");
    assert_eq!(answered(curl(&new_client)), "200");
    assert!(!curl(&old_client).status.success(), "the old CA's client");
    assert!(server.stop().status.success());
    upstream.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_reports_every_acme_problem_at_its_value() {
    let dir = folder("acme-check");
    certificate(&dir, "site", &["kargo.test"]);
    let text = r#"
[[listener]]
name = "web"
listen = "127.0.0.1:1443"
protocol = "https"

[[listener.tls]]
cert = "site.pem"
key = "site.key"
acme = { domains = ["kargo.test"], directory = "https://ca.test/dir", challenge = "tls-alpn-01", storage = "acme" }

[[listener.tls]]
acme = { domains = ["*.kargo.test", "kargo"], directory = "http://ca.test/dir", email = "ops", challenge = "dns-01", storage = "acme" }

[[listener.tls]]
acme = { domains = ["www.kargo.test"], directory = "https://ca.test/dir", directory_ca = "missing-ca.pem", storage = "acme" }

[[listener.route]]
pool = "p"

[[pool]]
name = "p"
backends = [{ address = "127.0.0.1:9" }]
"#;
    check_errors(
        &dir.join("acme.toml"),
        text,
        &[
            (
                "\"site.pem\"\nkey",
                "listener[0].tls[0].cert",
                "a certificate comes from files or from ACME, not both",
            ),
            (
                "\"*.kargo.test\"",
                "listener[0].tls[1].acme.domains[0]",
                "a wildcard needs the dns-01 challenge",
            ),
            (
                "\"kargo\"",
                "listener[0].tls[1].acme.domains[1]",
                "not a DNS name",
            ),
            (
                "\"http://ca.test/dir\"",
                "listener[0].tls[1].acme.directory",
                "an ACME directory is an https:// URL",
            ),
            (
                "\"ops\"",
                "listener[0].tls[1].acme.email",
                "expected an email address",
            ),
            (
                "\"dns-01\"",
                "listener[0].tls[1].acme.challenge",
                "unknown challenge \"dns-01\"",
            ),
            (
                "\"missing-ca.pem\"",
                "listener[0].tls[2].acme.directory_ca",
                "cannot read",
            ),
            (
                "{ domains = [\"www.kargo.test\"]",
                "listener[0].tls[2].acme.challenge",
                "http-01 is answered by a plain http listener",
            ),
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
