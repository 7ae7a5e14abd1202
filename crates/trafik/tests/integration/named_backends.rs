//! Backends by name (issue 24, item 1) against trafik's own DNS server as the authority: a
//! `trafik serve` with a `[dns]` zone on a free port, a proxy whose `[server] resolver` asks it,
//! and `trafik upstream` replicas on 127.0.0.x. The zone file changes, the DNS instance reloads,
//! and the proxy's pool follows while `trafik load` runs, losing nothing; SRV records give ports
//! and weights; a DNS server that stops answering leaves the last addresses in place, counted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use trafik_test_support::{
    Trafik, Upstream, free_port, free_ports, get_json, get_text, json, load_errors,
};

/// A test's own folder for its configs and zone file.
fn directory(name: &str) -> PathBuf {
    let directory =
        std::env::temp_dir().join(format!("trafik-named-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    directory
}

/// A zone file of `kargo.test.` with a 1-second TTL and `records`.
fn write_zone(file: &Path, records: &[String]) {
    let mut text = String::from("$TTL 1\n");
    for record in records {
        text.push_str(record);
        text.push('\n');
    }
    std::fs::write(file, text).unwrap();
}

/// `api IN A ADDRESS` for each address.
fn a_records(addresses: &[&str]) -> Vec<String> {
    addresses
        .iter()
        .map(|address| format!("api IN A {address}"))
        .collect()
}

/// The authority: a `trafik serve` with only a DNS zone (from `zone`) and an admin listener.
struct Authority {
    trafik: Trafik,
    dns: u16,
    admin: String,
}

impl Authority {
    fn start(directory: &Path) -> Authority {
        let [dns, admin] = free_ports();
        let file = directory.join("dns.toml");
        let config = format!(
            "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n[dns]\nlisten = \"127.0.0.1:{dns}\"\n\n\
             [[dns.zone]]\norigin = \"kargo.test.\"\nname_servers = [\"ns1\"]\nfile = \"kargo.zone\"\n\n\
             [[dns.zone.record]]\nname = \"ns1\"\ntype = \"A\"\nvalue = \"127.0.0.1\"\n"
        );
        std::fs::write(&file, config).unwrap();
        let (trafik, _) = Trafik::start(
            &["serve", "--config", file.to_str().unwrap()],
            Stdio::null(),
            "admin on",
        );
        Authority {
            trafik,
            dns,
            admin: format!("127.0.0.1:{admin}"),
        }
    }

    /// Reads the zone file again (`trafik reload`).
    fn reload(&self) {
        let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
            .args(["reload", "--admin", &self.admin])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
    }
}

/// A proxy on a free port whose pool `takip` is `pool_lines`, asking names of `dns`.
struct NamedProxy {
    _trafik: Trafik,
    web: u16,
    admin: String,
    file: PathBuf,
}

impl NamedProxy {
    fn start(directory: &Path, dns: u16, pool_lines: &str) -> NamedProxy {
        let [web, admin] = free_ports();
        let file = directory.join("proxy.toml");
        let config = format!(
            "[server]\nworkers = 2\nresolver = \"127.0.0.1:{dns}\"\nresolve_min = \"100ms\"\nresolve_max = \"2s\"\n\n\
             [admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{web}\"\n\n\
             [[listener.route]]\npath_prefix = \"/\"\npool = \"takip\"\n\n\
             [[pool]]\nname = \"takip\"\n{pool_lines}\n"
        );
        std::fs::write(&file, config).unwrap();
        let (trafik, _) = Trafik::start(
            &["serve", "--config", file.to_str().unwrap()],
            Stdio::null(),
            "admin on",
        );
        NamedProxy {
            _trafik: trafik,
            web,
            admin: format!("127.0.0.1:{admin}"),
            file,
        }
    }

    /// Rewrites the pool's lines in the config file and reloads it.
    fn reload_pool(&self, from: &str, to: &str) {
        let text = std::fs::read_to_string(&self.file).unwrap();
        std::fs::write(&self.file, text.replace(from, to)).unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
            .args(["reload", "--admin", &self.admin])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
    }

    fn status(&self) -> serde_json::Value {
        get_json(&self.admin, "/status")
    }

    /// Polls `/status` until `done` holds (generously: a loaded machine), and returns it.
    fn wait_for(&self, what: &str, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = self.status();
            if done(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "{what}: {status}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The pool's backend addresses, sorted.
fn pool_addresses(status: &serde_json::Value) -> Vec<String> {
    let mut addresses: Vec<String> = status["pools"][0]["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["address"].as_str().unwrap().to_owned())
        .collect();
    addresses.sort();
    addresses
}

/// A backend's decisions, by address.
fn decisions(status: &serde_json::Value, address: &str) -> u64 {
    status["pools"][0]["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["address"] == address)
        .and_then(|b| b["decisions"].as_u64())
        .unwrap_or_else(|| panic!("no backend {address}: {status}"))
}

/// `list` sorted, as [`pool_addresses`] gives them.
fn addresses(list: &[&str]) -> Vec<String> {
    let mut list: Vec<String> = list.iter().map(|a| (*a).to_owned()).collect();
    list.sort();
    list
}

#[test]
fn a_named_pool_follows_its_zone_under_load_with_nothing_lost() {
    let directory = directory("follow");
    let port = free_port();
    let [a, b, c] = ["127.0.0.21", "127.0.0.22", "127.0.0.23"];
    let replicas: Vec<Upstream> = [a, b, c]
        .iter()
        .map(|ip| Upstream::start_at(&format!("{ip}:{port}"), &[]))
        .collect();
    let zone = directory.join("kargo.zone");
    write_zone(&zone, &a_records(&[a, b]));
    let authority = Authority::start(&directory);
    let proxy = NamedProxy::start(
        &directory,
        authority.dns,
        &format!("backends = [{{ address = \"api.kargo.test:{port}\" }}]"),
    );
    let (ka, kb, kc) = (
        format!("{a}:{port}"),
        format!("{b}:{port}"),
        format!("{c}:{port}"),
    );
    let first = proxy.wait_for("both addresses resolved", |s| {
        pool_addresses(s) == addresses(&[&ka, &kb])
    });
    let name = &first["names"][0];
    assert_eq!(name["name"], format!("api.kargo.test:{port}"));
    assert_eq!(name["pools"], serde_json::json!(["takip"]));
    assert!(name["resolved_at"].is_string(), "{name}");

    let load = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args([
            "load",
            &format!("http://127.0.0.1:{}/takip/TR-{{n}}", proxy.web),
            "--rate",
            "400",
            "--duration",
            "12s",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // An address added to the zone joins the pool; the kept ones keep their counters.
    let before_add = proxy.wait_for("traffic on the first two", |s| {
        decisions(s, &ka) > 100 && decisions(s, &kb) > 100
    });
    write_zone(&zone, &a_records(&[a, b, c]));
    authority.reload();
    let added = proxy.wait_for("the third address joined", |s| {
        pool_addresses(s) == addresses(&[&ka, &kb, &kc])
    });
    assert!(
        decisions(&added, &kb) >= decisions(&before_add, &kb),
        "kept counters: {} then {}",
        decisions(&before_add, &kb),
        decisions(&added, &kb)
    );
    proxy.wait_for("the new backend serves", |s| decisions(s, &kc) > 100);

    // An address removed from the zone leaves the pool; its requests in flight finish.
    write_zone(&zone, &a_records(&[b, c]));
    authority.reload();
    proxy.wait_for("the first address left", |s| {
        pool_addresses(s) == addresses(&[&kb, &kc])
    });

    let output = load.wait_with_output().unwrap();
    let report = json(&output);
    assert_eq!(
        load_errors(&report),
        0,
        "no request failed: {}",
        report["errors"]
    );
    assert!(report["completed"].as_u64().unwrap() > 1000, "{report}");
    assert_eq!(report["completed"], report["sent"]);
    let after = proxy.status();
    assert!(
        decisions(&after, &kc) > decisions(&added, &kc),
        "the pool kept serving after the removal: {after}"
    );
    assert_eq!(after["names"][0]["failures"], 0, "{after}");
    drop(replicas);
}

#[test]
fn srv_discovery_takes_ports_and_weights_from_the_lowest_priority_records() {
    let directory = directory("srv");
    let [p1, p2, p3] = free_ports();
    let replicas: Vec<Upstream> = [p1, p2, p3]
        .iter()
        .map(|port| Upstream::start_at(&format!("127.0.0.31:{port}"), &[]))
        .collect();
    let zone = directory.join("kargo.zone");
    write_zone(
        &zone,
        &[
            format!("_http._tcp.api IN SRV 10 3 {p1} sunucu"),
            format!("_http._tcp.api IN SRV 10 1 {p2} sunucu"),
            // A fallback of a higher priority value: not used while the others are there.
            format!("_http._tcp.api IN SRV 20 1 {p3} sunucu"),
            "sunucu IN A 127.0.0.31".to_owned(),
        ],
    );
    let authority = Authority::start(&directory);
    let proxy = NamedProxy::start(
        &directory,
        authority.dns,
        "algorithm = \"weighted-round-robin\"\ndiscover = \"srv:_http._tcp.api.kargo.test\"",
    );
    let (k1, k2) = (format!("127.0.0.31:{p1}"), format!("127.0.0.31:{p2}"));
    let status = proxy.wait_for("the SRV targets resolved", |s| {
        pool_addresses(s) == addresses(&[&k1, &k2])
    });
    let weight = |address: &str| {
        status["pools"][0]["backends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["address"] == address)
            .map(|b| b["weight"].clone())
    };
    assert_eq!(weight(&k1), Some(3.into()), "{status}");
    assert_eq!(weight(&k2), Some(1.into()), "{status}");
    assert_eq!(
        status["names"][0]["name"], "srv:_http._tcp.api.kargo.test",
        "{status}"
    );
    for n in 0..8 {
        get_text(
            &format!("127.0.0.1:{}", proxy.web),
            &format!("/takip/TR-{n}"),
        );
    }
    let served = proxy.status();
    assert_eq!(decisions(&served, &k1), 6, "3 of every 4: {served}");
    assert_eq!(decisions(&served, &k2), 2, "1 of every 4: {served}");
    drop(replicas);
}

#[test]
fn a_resolution_failure_keeps_the_last_addresses_and_is_counted() {
    let directory = directory("failure");
    let port = free_port();
    let replica = Upstream::start_at(&format!("127.0.0.41:{port}"), &[]);
    let zone = directory.join("kargo.zone");
    write_zone(&zone, &a_records(&["127.0.0.41"]));
    let authority = Authority::start(&directory);
    let proxy = NamedProxy::start(
        &directory,
        authority.dns,
        &format!("backends = [{{ address = \"api.kargo.test:{port}\" }}]"),
    );
    let kept = format!("127.0.0.41:{port}");
    proxy.wait_for("resolved", |s| pool_addresses(s) == addresses(&[&kept]));

    // The authority stops answering: lookups fail, the pool keeps its backend.
    authority.trafik.stop();
    let failed = proxy.wait_for("a failed lookup counted", |s| {
        s["names"][0]["failures"].as_u64() > Some(0)
    });
    assert_eq!(pool_addresses(&failed), addresses(&[&kept]), "{failed}");
    assert!(failed["names"][0]["last_error"].is_string(), "{failed}");
    let answer = get_text(&format!("127.0.0.1:{}", proxy.web), "/takip/TR-1");
    assert!(answer.contains("TR-1"), "still served: {answer}");

    // A reload that changes only the name's weight keeps its addresses (the name cannot be
    // asked now): the name is known by what is asked, not by its weight.
    proxy.reload_pool("{ address = ", "{ weight = 2, address = ");
    let reloaded = proxy.status();
    assert_eq!(pool_addresses(&reloaded), addresses(&[&kept]), "{reloaded}");
    assert_eq!(
        reloaded["pools"][0]["backends"][0]["weight"], 2,
        "{reloaded}"
    );
    let metrics = get_text(&proxy.admin, "/metrics");
    assert!(
        metrics.lines().any(|line| line
            .starts_with("trafik_backend_name_failures_total{name=\"api.kargo.test:")
            && !line.ends_with(" 0")),
        "{metrics}"
    );
    drop(replica);
}

/// Probe finding: what a name resolves to had no bound, so a DNS answer of thousands of
/// records made a pool of thousands of backends, and an SRV answer of thousands of targets as
/// many lookups one after another. A name gives at most 256 backends, and an SRV answer's
/// first 32 targets (by name and port) are looked up.
#[test]
fn a_name_gives_a_pool_a_bounded_number_of_backends() {
    let directory = directory("bounded");
    let zone = directory.join("kargo.zone");
    let mut records: Vec<String> = (0..300)
        .map(|n| format!("cok IN A 127.0.{}.{}", 50 + n / 250, 1 + n % 250))
        .collect();
    records.extend((0..40).map(|n| format!("_http._tcp.api IN SRV 10 1 {} h{n:02}", 20000 + n)));
    records.extend((0..40).map(|n| format!("h{n:02} IN A 127.0.60.{}", n + 1)));
    write_zone(&zone, &records);
    let authority = Authority::start(&directory);
    let many = NamedProxy::start(
        &directory,
        authority.dns,
        "backends = [{ address = \"cok.kargo.test:80\" }]",
    );
    let status = many.wait_for("the name resolved", |s| !pool_addresses(s).is_empty());
    assert_eq!(
        pool_addresses(&status).len(),
        256,
        "{}",
        status["names"][0]["name"]
    );
    drop(many);
    let targets = NamedProxy::start(
        &directory,
        authority.dns,
        "discover = \"srv:_http._tcp.api.kargo.test\"",
    );
    let status = targets.wait_for("the SRV targets resolved", |s| {
        !pool_addresses(s).is_empty()
    });
    let found = pool_addresses(&status);
    assert_eq!(found.len(), 32, "{}", status["names"][0]["name"]);
    // The first 32 by target name: h00 … h31.
    assert!(found.contains(&"127.0.60.32:20031".to_owned()), "{found:?}");
    assert!(
        !found.contains(&"127.0.60.33:20032".to_owned()),
        "{found:?}"
    );
}

/// Probe finding: one SRV target that did not resolve failed the whole name, so its pool kept
/// its last set (or had none) although the other targets answered. The targets are asked at
/// once and each on its own.
#[test]
fn an_srv_target_that_does_not_resolve_leaves_the_others_in_the_pool() {
    let directory = directory("srv-partial");
    let zone = directory.join("kargo.zone");
    write_zone(
        &zone,
        &[
            "_http._tcp.api IN SRV 10 1 20001 var".to_owned(),
            "_http._tcp.api IN SRV 10 1 20002 yok".to_owned(),
            "var IN A 127.0.0.61".to_owned(),
        ],
    );
    let authority = Authority::start(&directory);
    let proxy = NamedProxy::start(
        &directory,
        authority.dns,
        "discover = \"srv:_http._tcp.api.kargo.test\"",
    );
    let status = proxy.wait_for("the SRV name resolved", |s| {
        s["names"][0]["resolved_at"].is_string() || s["names"][0]["failures"] != 0
    });
    assert_eq!(
        pool_addresses(&status),
        ["127.0.0.61:20001"],
        "{}",
        status["names"]
    );
}
