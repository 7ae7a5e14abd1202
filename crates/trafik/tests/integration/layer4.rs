//! Layer 4 as a user meets it: `tcp` and `tls-passthrough` listeners in a config file, checked
//! with every mistake at its line and column, and quick mode's `--mode tcp`.

use std::io::{Read, Write};
use std::process::{Command, Output};

use trafik_test_support::{Proxy, Upstream, get_json};

fn trafik(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(args)
        .output()
        .expect("trafik runs")
}

/// Runs `trafik check` on `text`; returns the exit code, the plan and the errors.
fn check(name: &str, text: &str) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!("trafik-layer4-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let output = trafik(&["check", "--config", path.to_str().unwrap()]);
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const LAYER4: &str = r#"
[[listener]]
name = "ham"
listen = "127.0.0.1:18090"
protocol = "tcp"
pool = "ham"

[[listener]]
name = "tls"
listen = "127.0.0.1:18443"
protocol = "tls-passthrough"

[[listener.route]]
sni = "a.kargo.test"
pool = "a"

[[listener.route]]
sni = "*.kargo.test"
pool = "ham"

[[listener.route]]
pool = "ham"

[[pool]]
name = "ham"
algorithm = "consistent-hash"
hash_key = "client-ip"
proxy_protocol = "v2"
backends = [{ address = "127.0.0.1:18091" }, { address = "127.0.0.1:18092" }]

[[pool]]
name = "a"
backends = [{ address = "127.0.0.1:18093" }]
"#;

#[test]
fn layer4_listeners_are_checked_and_shown() {
    let (code, plan, errors) = check("layer4.toml", LAYER4);
    assert_eq!(code, 0, "{errors}");
    for expected in [
        "listener ham on tcp://127.0.0.1:18090\n  every connection → pool ham\n",
        "listener tls on tls-passthrough://127.0.0.1:18443\n",
        "  route server name a.kargo.test → pool a\n",
        "  route server name *.kargo.test → pool ham\n",
        "  route any other server name, or none → pool ham\n",
        "pool ham: consistent-hash",
        "  hash key: client-ip\n  PROXY protocol v2 header to every backend\n",
    ] {
        assert!(plan.contains(expected), "missing {expected:?} in\n{plan}");
    }
}

#[test]
fn layer4_mistakes_are_reported_where_they_are_written() {
    let bad = LAYER4
        .replace(
            "pool = \"ham\"\n\n[[listener]]",
            "\n[[listener.route]]\npool = \"ham\"\n\n[[listener]]",
        )
        .replace(
            "sni = \"a.kargo.test\"",
            "sni = \"*.kargo.test\"\npath_prefix = \"/\"",
        )
        .replace(
            "sni = \"*.kargo.test\"\npool = \"ham\"",
            "sni = \"a..test\"\npool = \"ham\"",
        )
        .replace(
            "hash_key = \"client-ip\"",
            "hash_key = \"header:x-istemci\"",
        )
        .replace("proxy_protocol = \"v2\"", "proxy_protocol = \"v3\"")
        + "\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:18080\"\npool = \"a\"\n\n[[listener.route]]\nsni = \"a.kargo.test\"\npool = \"a\"\n\n[[listener]]\nname = \"s\"\nlisten = \"127.0.0.1:18444\"\nprotocol = \"https\"\n";
    let (code, _, errors) = check("bad.toml", &bad);
    assert_eq!(code, 2);
    for expected in [
        "bad.toml:2:1: listener[0].pool: missing `pool`: add pool = \"takip\", the pool that gets every connection",
        "bad.toml:7:1: listener[0].route: a tcp listener sends every connection to its `pool` and has no routes",
        "bad.toml:17:15: listener[1].route[0].path_prefix: `path_prefix` reads HTTP requests, which a tls-passthrough listener never decrypts",
        "bad.toml:21:7: listener[1].route[1].sni: expected a server name such as \"kargo.example\" or \"*.kargo.example\", found \"a..test\"",
        "bad.toml:30:12: pool[0].hash_key: a pool of a tcp or tls-passthrough listener sees connections, not requests: it can key on client-ip only, found \"header:x-istemci\"",
        "bad.toml:31:18: pool[0].proxy_protocol: expected \"v1\" (text) or \"v2\" (binary), found \"v3\"",
        "bad.toml:41:8: listener[2].pool: an http listener sends each request to the pool of the route it matches",
        "bad.toml:44:7: listener[2].route[0].sni: `sni` matches the server name of TLS connections",
        "bad.toml:45:8: listener[2].route[0].pool: pool \"a\" also takes the connections of a tcp or tls-passthrough listener",
        "bad.toml:50:12: listener[3].tls: an https listener needs a certificate",
    ] {
        assert!(
            errors.contains(expected),
            "missing {expected:?} in\n{errors}"
        );
    }

    let twice = LAYER4.replace("sni = \"a.kargo.test\"", "sni = \"*.KARGO.test\"");
    let (_, _, errors) = check("twice.toml", &twice);
    assert!(
        errors.contains("twice.toml:18:7: listener[1].route[1].sni: another route of this listener already takes server name *.kargo.test"),
        "{errors}"
    );
    let fallbacks = LAYER4.replace("sni = \"a.kargo.test\"\n", "");
    let (_, _, errors) = check("fallbacks.toml", &fallbacks);
    assert!(
        errors.contains("listener[1].route[2].sni: another route of this listener already takes the connections no `sni` matches"),
        "{errors}"
    );
    let http_pool = LAYER4.replace(
        "[[pool]]\nname = \"a\"",
        "[[pool]]\nname = \"a\"\nproxy_protocol = \"v1\"",
    );
    let http_pool = http_pool.replace("pool = \"a\"\n", "pool = \"ham\"\n")
        + "\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:18080\"\n[[listener.route]]\npool = \"a\"\n";
    let (_, _, errors) = check("http_pool.toml", &http_pool);
    assert!(
        errors.contains(
            "pool[1].proxy_protocol: the PROXY protocol header goes on layer-4 connections only"
        ),
        "{errors}"
    );
    let cookie = LAYER4.replace(
        "backends = [{ address = \"127.0.0.1:18091\" }, { address = \"127.0.0.1:18092\" }]",
        "backends = [{ address = \"127.0.0.1:18091\" }]\n[pool.sticky]\nmode = \"cookie\"",
    );
    let (_, _, errors) = check("cookie.toml", &cookie);
    assert!(
        errors.contains("pool[0].sticky.mode: cookie stickiness needs HTTP"),
        "{errors}"
    );
}

/// A raw HTTP/1.1 GET: the whole answer as text.
fn curl(address: &str, request: &str) -> String {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

fn free_address() -> String {
    format!("127.0.0.1:{}", trafik_test_support::free_port())
}

#[test]
fn quick_mode_tcp_relays_connections_without_touching_them() {
    let upstream = Upstream::start(&[]);
    let admin = free_address();
    let proxy = Proxy::start(
        &[],
        &[
            "--mode",
            "tcp",
            "--admin",
            &admin,
            "--to",
            &upstream.address,
        ],
    );
    let request = "GET /takip/TR-4821 HTTP/1.1\r\nHost: kargo.test\r\nConnection: close\r\n\r\n";
    let answer = curl(&proxy.address, request);
    assert!(answer.contains("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("x-kopya: k1"), "{answer}");
    assert!(!answer.contains("via:"), "layer 4 adds nothing: {answer}");

    let status = get_json(&admin, "/status");
    let backend = &status["pools"][0]["backends"][0];
    assert_eq!(backend["connections"], 1);
    assert_eq!(backend["decisions"], 1);
    assert_eq!(backend["requests"], 0);
    assert_eq!(backend["bytes_out"], request.len());
    assert_eq!(backend["bytes_in"], answer.len());
    assert!(proxy.stop().status.success());
    assert!(upstream.stop().success());
}

#[test]
fn quick_mode_flags_for_layer4_are_checked_against_the_mode() {
    let quick = ["proxy", "--listen", "127.0.0.1:0", "--to", "127.0.0.1:1"];
    for (extra, expected) in [
        (
            &["--proxy-protocol", "v2"][..],
            "--proxy-protocol: the PROXY protocol header goes on layer-4 connections only",
        ),
        (
            &["--mode", "tcp", "--proxy-protocol", "v9"][..],
            "--proxy-protocol: expected \"v1\" (text) or \"v2\" (binary), found \"v9\"",
        ),
        (
            &["--mode", "tcp", "--hash-key", "header:x"][..],
            "--hash-key: a pool of a tcp or tls-passthrough listener sees connections",
        ),
        (&["--mode", "udp"][..], "invalid value 'udp' for '--mode"),
    ] {
        let args: Vec<&str> = quick.iter().chain(extra).copied().collect();
        let output = trafik(&args);
        assert_eq!(output.status.code(), Some(2), "{extra:?}");
        let errors = String::from_utf8_lossy(&output.stderr);
        assert!(errors.contains(expected), "{extra:?}: {errors}");
    }
}
