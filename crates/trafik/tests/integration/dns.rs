//! `[dns]` end to end: `trafik serve` answering `dig`, regions that die and come back with their
//! health targets (own checks, or a pool's), reloads that change the zone, and config errors.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use trafik_metrics_text::strict_reader;
use trafik_test_support::{
    INSIDE_NAMESPACE, Named, Trafik, Upstream, get_json, get_text, run_in_own_network_namespace,
};

/// A `trafik upstream` on a given address (to bring a stopped health target back).
fn upstream_at(address: &str) -> Trafik {
    let args = ["upstream", "--name", "k1", "--listen", address];
    Trafik::start(&args, Stdio::null(), "upstream k1 on").0
}

struct Dns {
    _trafik: Trafik,
    dns: String,
    admin: String,
    file: PathBuf,
}

/// A test's own folder for its config and zone files.
fn directory(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("trafik-dns-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    directory
}

impl Dns {
    fn start(name: &str, config: &str) -> Dns {
        let directory = directory(name);
        let file = directory.join("dns.toml");
        std::fs::write(&file, config).unwrap();
        let (trafik, printed) = Trafik::start(
            &["serve", "--config", file.to_str().unwrap()],
            Stdio::null(),
            "admin on",
        );
        let after = |prefix: &str| {
            printed
                .lines()
                .find_map(|line| line.strip_prefix(prefix))
                .and_then(|rest| rest.split_whitespace().next())
                .unwrap_or_else(|| panic!("no {prefix:?} in {printed}"))
                .trim_end_matches("/status")
                .to_owned()
        };
        Dns {
            dns: after("dns on "),
            admin: after("admin on http://"),
            _trafik: trafik,
            file,
        }
    }

    /// `dig +short` for an A record, from `subnet` when given.
    fn ask(&self, name: &str, subnet: Option<&str>) -> Vec<String> {
        let (host, port) = self.dns.rsplit_once(':').unwrap();
        let mut command = Command::new("dig");
        command.args([
            &format!("@{host}"),
            "-p",
            port,
            name,
            "A",
            "+short",
            "+tries=1",
            "+time=2",
        ]);
        if let Some(subnet) = subnet {
            command.arg(format!("+subnet={subnet}"));
        }
        let output = command.output().expect("dig runs (install dnsutils)");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `dig +short` for `name` and `kind`.
    fn short(&self, name: &str, kind: &str) -> String {
        let (host, port) = self.dns.rsplit_once(':').unwrap();
        let output = Command::new("dig")
            .args([&format!("@{host}"), "-p", port, name, kind])
            .args(["+short", "+tries=1", "+time=2"])
            .output()
            .expect("dig runs (install dnsutils)");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    fn reload(&self) {
        let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
            .args(["reload", "--admin", &self.admin])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Asks until the answer is `want`, for at most 15 s; the answers seen on the way.
    fn until(&self, name: &str, subnet: Option<&str>, want: &[&str]) -> Vec<Vec<String>> {
        let started = Instant::now();
        let mut seen = Vec::new();
        loop {
            let answer = self.ask(name, subnet);
            if answer == want {
                return seen;
            }
            seen.push(answer);
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "{name} never answered {want:?}; saw {seen:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn config(k34: &str, k35: &str, k06: &str, primary: &str) -> String {
    format!(
        r#"
[admin]
listen = "127.0.0.1:0"

[[listener]]
name = "web"
listen = "127.0.0.1:0"
[[listener.route]]
pool = "p06"

[[pool]]
name = "p06"
backends = [{{ address = "{k06}" }}]
health = {{ path = "/saglik", interval = "100ms", fall = 2, rise = 2 }}

[dns]
listen = "127.0.0.1:0"
query_log = true

[[dns.region]]
name = "b34"
addresses = ["127.0.0.34"]
check = "{k34}"
health = {{ path = "/saglik", interval = "100ms", fall = 2, rise = 2 }}

[[dns.region]]
name = "b35"
addresses = ["127.0.0.35"]
check = "{k35}"
health = {{ path = "/saglik", interval = "100ms", fall = 2, rise = 2 }}

[[dns.region]]
name = "b06"
addresses = ["127.0.0.6"]
pool = "p06"

[[dns.group]]
name = "g1"
prefixes = ["10.1.0.0/16"]

[[dns.group]]
name = "g4"
prefixes = ["10.4.0.0/16"]

[[dns.zone]]
origin = "kargo.test."
ttl = 30
name_servers = ["ns1"]

[[dns.zone.record]]
name = "ns1"
type = "A"
value = "127.0.0.1"

[[dns.zone.name]]
name = "cografi"
policy = "geo"
groups = {{ g1 = "b34", g4 = "b06" }}
fallback = {{ b34 = "b06", b35 = "b34", b06 = "b35" }}

[[dns.zone.name]]
name = "devralma"
policy = "failover"
primary = "{primary}"
secondary = "b35"
"#
    )
}

#[test]
fn regions_leave_the_answers_when_their_checks_fail_and_return_after_rise() {
    let k34 = Upstream::start(&[]);
    let k35 = Upstream::start(&[]);
    let k06 = Upstream::start(&[]);
    let (k34_address, k06_address) = (k34.address.clone(), k06.address.clone());
    let dns = Dns::start(
        "health",
        &config(&k34.address, &k35.address, &k06.address, "b34"),
    );
    assert_eq!(dns.ask("devralma.kargo.test", None), ["127.0.0.34"]);
    assert_eq!(
        dns.ask("cografi.kargo.test", Some("10.4.0.0/16")),
        ["127.0.0.6"]
    );

    // b34's own check: interval 100 ms × fall 2, then the secondary answers.
    assert!(k34.stop().success());
    dns.until("devralma.kargo.test", None, &["127.0.0.35"]);
    assert_eq!(
        dns.ask("cografi.kargo.test", Some("10.1.0.0/16")),
        ["127.0.0.6"]
    );
    let status = get_json(&dns.admin, "/status");
    assert_eq!(status["dns"]["live"], serde_json::json!(["b35", "b06"]));
    let _back = upstream_at(&k34_address);
    dns.until("devralma.kargo.test", None, &["127.0.0.34"]);

    // b06 follows pool p06, whose backend's checks the proxy runs.
    assert!(k06.stop().success());
    dns.until("cografi.kargo.test", Some("10.4.0.0/16"), &["127.0.0.35"]);
    let _back = upstream_at(&k06_address);
    dns.until("cografi.kargo.test", Some("10.4.0.0/16"), &["127.0.0.6"]);

    let status = get_json(&dns.admin, "/status");
    let names = status["dns"]["zones"][0]["names"]
        .as_array()
        .unwrap()
        .clone();
    let devralma = names
        .iter()
        .find(|n| n["name"] == "devralma.kargo.test.")
        .unwrap();
    assert!(devralma["failovers"].as_u64().unwrap() >= 1, "{devralma}");
    assert!(
        devralma["answers"]["b35"].as_u64().unwrap() >= 1,
        "{devralma}"
    );
    let metrics = get_text(&dns.admin, "/metrics");
    assert!(
        metrics.contains("trafik_dns_region_live{region=\"b34\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "trafik_dns_failovers_total{name=\"devralma.kargo.test.\",policy=\"failover\"}"
        )
    );
}

/// `trafik explain dns … --json` with `args` (the name last).
fn explain_dns(args: &[&str]) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["explain", "dns", "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The addresses an explanation's answer holds (the last field of each A record).
fn explained_addresses(told: &serde_json::Value) -> Vec<String> {
    told["answer"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|record| {
            let record = record.as_str()?;
            (record_type(record) == "A")
                .then(|| record.split_whitespace().last().unwrap().to_owned())
        })
        .collect()
}

#[test]
fn the_explained_dns_answer_is_the_one_the_next_query_gets() {
    let k34 = Upstream::start(&[]);
    let k35 = Upstream::start(&[]);
    let k06 = Upstream::start(&[]);
    let config = config(&k34.address, &k35.address, &k06.address, "b34")
        + "\n[[dns.zone.name]]\nname = \"agirlik\"\npolicy = \"weighted\"\n\
           pattern = [\"b34\", \"b35\", \"b06\", \"b34\", \"b35\"]\n";
    let dns = Dns::start("explain", &config);
    dns.until("cografi.kargo.test", Some("10.4.0.0/16"), &["127.0.0.6"]);
    let live = ["--admin", dns.admin.as_str()];

    // The weighted pattern: explaining does not move it (told twice, the same), and the next
    // query takes the slot told.
    for round in 0..12 {
        let told = explain_dns(&[live[0], live[1], "agirlik.kargo.test"]);
        assert_eq!(told["policy"], "weighted", "{told}");
        let again = explain_dns(&[live[0], live[1], "agirlik.kargo.test"]);
        assert_eq!(
            told["answer"], again["answer"],
            "explaining moved the pattern"
        );
        let answered = dns.ask("agirlik.kargo.test", None);
        assert_eq!(
            answered,
            explained_addresses(&told),
            "round {round}: {told}"
        );
    }

    // Geo by the client subnet's group, then its fallback once the region's check fails.
    let subnet = ["--client-subnet", "10.1.0.0/16"];
    let told = explain_dns(&[live[0], live[1], subnet[0], subnet[1], "cografi.kargo.test"]);
    assert_eq!(told["group"]["group"], "g1", "{told}");
    assert_eq!(told["group"]["scope"], 16, "{told}");
    assert_eq!(
        told["decision"]["regions"],
        serde_json::json!(["b34"]),
        "{told}"
    );
    assert_eq!(
        explained_addresses(&told),
        dns.ask("cografi.kargo.test", Some("10.1.0.0/16"))
    );
    assert!(k34.stop().success());
    dns.until("cografi.kargo.test", Some("10.1.0.0/16"), &["127.0.0.6"]);
    let told = explain_dns(&[live[0], live[1], subnet[0], subnet[1], "cografi.kargo.test"]);
    assert_eq!(
        told["decision"]["regions"],
        serde_json::json!(["b06"]),
        "{told}"
    );
    assert_eq!(told["decision"]["failover"], true, "{told}");
    let b34 = &told["regions"][0];
    assert_eq!(
        (&b34["name"], &b34["live"]),
        (&"b34".into(), &false.into()),
        "{told}"
    );
    assert_eq!(explained_addresses(&told), ["127.0.0.6"]);

    // Offline from the file: every region live unless said, and the text for people.
    let file = dns.file.to_str().unwrap();
    let offline = explain_dns(&["-c", file, subnet[0], subnet[1], "cografi.kargo.test"]);
    assert_eq!(explained_addresses(&offline), ["127.0.0.34"], "{offline}");
    let down = explain_dns(&[
        "-c",
        file,
        "--down",
        "b34",
        subnet[0],
        subnet[1],
        "cografi.kargo.test",
    ]);
    assert_eq!(explained_addresses(&down), ["127.0.0.6"], "{down}");
    let text = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args([
            "explain",
            "dns",
            "-c",
            file,
            "--client-subnet",
            "10.4.0.0/16",
        ])
        .arg("cografi.kargo.test")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("group g4 (scope /16): 10.4.0.0 is under the prefix 10.4.0.0/16"),
        "{text}"
    );
    assert!(
        text.contains("cografi.kargo.test. 30 IN A 127.0.0.6"),
        "{text}"
    );
}

#[test]
fn metrics_with_dns_on_read_as_strict_prometheus_text() {
    let k34 = Upstream::start(&[]);
    let k35 = Upstream::start(&[]);
    let k06 = Upstream::start(&[]);
    let dns = Dns::start(
        "metrics",
        &config(&k34.address, &k35.address, &k06.address, "b34"),
    );
    assert_eq!(dns.ask("devralma.kargo.test", None), ["127.0.0.34"]);
    dns.ask("yok.kargo.test", None);
    let text = get_text(&dns.admin, "/metrics");
    let metrics = strict_reader::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let devralma = [("name", "devralma.kargo.test."), ("policy", "failover")];
    assert_eq!(metrics.value("trafik_dns_queries_total", &devralma), 1.0);
    let answers = [devralma[0], ("region", "b34")];
    assert_eq!(metrics.value("trafik_dns_answers_total", &answers), 1.0);
    let zone = [("zone", "kargo.test.")];
    assert_eq!(metrics.value("trafik_dns_nxdomain_total", &zone), 1.0);
    assert_eq!(
        metrics.value("trafik_dns_region_live", &[("region", "b34")]),
        1.0
    );
    // The proxy's own families are in the same exposition.
    assert_eq!(metrics.types["trafik_backend_healthy"], "gauge");
}

#[test]
fn a_reload_changes_what_the_names_answer() {
    let k34 = Upstream::start(&[]);
    let k35 = Upstream::start(&[]);
    let k06 = Upstream::start(&[]);
    let dns = Dns::start(
        "reload",
        &config(&k34.address, &k35.address, &k06.address, "b34"),
    );
    assert_eq!(dns.ask("devralma.kargo.test", None), ["127.0.0.34"]);
    dns.ask("yok.kargo.test", None);
    std::fs::write(
        &dns.file,
        config(&k34.address, &k35.address, &k06.address, "b06"),
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["reload", "--admin", &dns.admin])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(dns.ask("devralma.kargo.test", None), ["127.0.0.6"]);
    let status = get_json(&dns.admin, "/status");
    assert_eq!(
        status["dns"]["zones"][0]["nxdomain"], 1,
        "counters survive the reload"
    );
}

#[test]
fn dns_config_errors_are_all_reported_at_their_place() {
    let text = config("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "b99")
        .replace("10.4.0.0/16", "10.4.0.0/33")
        .replace("type = \"A\"", "type = \"DNAME\"")
        .replace("policy = \"geo\"", "policy = \"cografi\"")
        .replace(
            "query_log = true",
            "query_log = true\n[dns.rate_limit]\nresponses_per_second = 0",
        )
        .replace("prefixes = [\"10.1.0.0/16\"]", "countries = [\"TUR\"]")
        .replace(
            "[[dns.zone.name]]\nname = \"devralma\"",
            "[[dns.zone.record]]\ntype = \"MX\"\nvalue = \"posta\"\n\n[[dns.zone.name]]\nname = \"devralma\"",
        )
        .replace(
            "[[dns.zone.name]]\nname = \"cografi\"",
            "[[dns.zone.record]]\nname = \"devralma\"\ntype = \"TXT\"\nvalue = \"x\"\n\n[[dns.zone.name]]\nname = \"cografi\"",
        );
    let directory = std::env::temp_dir().join(format!("trafik-dns-{}-errors", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let file = directory.join("bad.toml");
    std::fs::write(&file, &text).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["check", "--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    // The last line holding the needle (a name's, after a record of the same name).
    let line_of = |needle: &str| {
        let lines: Vec<&str> = text.lines().collect();
        lines.iter().rposition(|l| l.contains(needle)).unwrap() + 1
    };
    for (needle, field, message) in [
        (
            "10.4.0.0/33",
            "dns.group[1].prefixes",
            "expected an address prefix",
        ),
        (
            "type = \"DNAME\"",
            "dns.zone[0].record[0].type",
            "expected A, AAAA, CNAME, TXT, SRV, NS, MX, CAA, PTR or DS",
        ),
        (
            "countries = [\"TUR\"]",
            "dns.group[0].countries",
            "expected a two-letter ISO 3166 country code such as \"TR\", found \"TUR\"",
        ),
        (
            "countries = [\"TUR\"]",
            "dns.group[0]:",
            "countries, continents and asns are looked up in a GeoIP database",
        ),
        (
            "responses_per_second = 0",
            "dns.rate_limit.responses_per_second",
            "expected at least 1 answer a second",
        ),
        (
            "value = \"posta\"",
            "dns.zone[0].record[2].value",
            "expected MX data as a zone file writes it, such as \"10 posta\"",
        ),
        (
            "policy = \"cografi\"",
            "dns.zone[0].name[0].policy",
            "expected geo, latency",
        ),
        (
            "primary = \"b99\"",
            "dns.zone[0].name[1].primary",
            "no region is named \"b99\"",
        ),
        (
            "name = \"devralma\"",
            "dns.zone[0].name[1].name",
            "also has static records",
        ),
    ] {
        let place = format!("bad.toml:{}:", line_of(needle));
        assert!(
            errors
                .lines()
                .any(|l| l.contains(&place) && l.contains(field) && l.contains(message)),
            "{place} {field} {message}:\n{errors}"
        );
    }
}

/// The course's zone from a master file, policy names beside it in the config.
const ZONE_FILE: &str = "\
$TTL 60
@        IN SOA ns1 hostmaster (
                7       ; serial
                3600 600 604800 30 )
         IN NS   ns1
         IN MX   10 posta
         IN CAA  0 issue \"letsencrypt.org\"
ns1      IN A    127.0.0.1
posta    IN A    127.0.0.25
*.musteri IN TXT \"joker\"
bolge    IN NS   ns1.bolge
ns1.bolge IN A   127.0.0.53
";

fn zone_file_config() -> String {
    r#"
[admin]
listen = "127.0.0.1:0"

[dns]
listen = "127.0.0.1:0"

[[dns.region]]
name = "b34"
addresses = ["127.0.0.34"]

[[dns.zone]]
origin = "kargo.test."
file = "kargo.zone"

[[dns.zone.record]]
name = "eski-posta"
type = "MX"
value = "20 posta"

[[dns.zone.name]]
name = "devralma"
policy = "failover"
primary = "b34"
secondary = "b34"
"#
    .to_owned()
}

#[test]
fn a_zone_file_serves_beside_policy_names_and_a_reload_reads_it_again() {
    std::fs::write(directory("zone-file").join("kargo.zone"), ZONE_FILE).unwrap();
    let dns = Dns::start("zone-file", &zone_file_config());
    assert_eq!(dns.short("kargo.test", "MX"), "10 posta.kargo.test.");
    assert_eq!(
        dns.short("kargo.test", "CAA"),
        "0 issue \"letsencrypt.org\""
    );
    assert_eq!(dns.short("kargo.test", "NS"), "ns1.kargo.test.");
    assert!(
        dns.short("kargo.test", "SOA")
            .contains(" 7 3600 600 604800 30")
    );
    assert_eq!(
        dns.short("eski-posta.kargo.test", "MX"),
        "20 posta.kargo.test."
    );
    assert_eq!(dns.short("bir.musteri.kargo.test", "TXT"), "\"joker\"");
    assert_eq!(dns.ask("devralma.kargo.test", None), ["127.0.0.34"]);
    let changed = ZONE_FILE.replace("10 posta", "5 posta");
    std::fs::write(dns.file.with_file_name("kargo.zone"), changed).unwrap();
    dns.reload();
    assert_eq!(dns.short("kargo.test", "MX"), "5 posta.kargo.test.");
}

#[test]
fn zone_file_errors_are_reported_at_the_file_s_line() {
    let folder = directory("zone-file-errors");
    let broken = ZONE_FILE.replace(
        "posta    IN A    127.0.0.25",
        "posta    IN A    127.0.0.256",
    );
    std::fs::write(folder.join("kargo.zone"), broken).unwrap();
    let file = folder.join("dns.toml");
    std::fs::write(&file, zone_file_config()).unwrap();
    let check = || {
        let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
            .args(["check", "--config", file.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let errors = check();
    let place = format!(
        "{}:9: dns.zone[0].file: ",
        folder.join("kargo.zone").display()
    );
    assert!(errors.contains(&place), "{place}\n{errors}");
    // The file's NS records did not read; they are not reported missing as well.
    assert!(
        errors.contains("error: 1 error in the configuration"),
        "{errors}"
    );
    // A record of the config that conflicts with the file's: reported at the zone.
    std::fs::write(folder.join("kargo.zone"), ZONE_FILE).unwrap();
    let conflict = zone_file_config().replace(
        "name = \"eski-posta\"\ntype = \"MX\"\nvalue = \"20 posta\"",
        "name = \"posta\"\ntype = \"CNAME\"\nvalue = \"ns1\"",
    );
    std::fs::write(&file, conflict).unwrap();
    let errors = check();
    assert!(
        errors.contains(
            "dns.toml:12:1: dns.zone[0]: posta.kargo.test. has a CNAME and other records"
        ),
        "{errors}"
    );
}

/// Writes a MaxMind database with the examples' script (the mmdb-writer Python package);
/// `changes` are its NETWORK=COUNTRY,CONTINENT,ASN arguments.
fn make_geo(path: &std::path::Path, changes: &[&str]) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/dns-zone/make-geo.py"
    );
    let output = Command::new("python3")
        .arg(script)
        .arg(path)
        .args(changes)
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "make-geo.py failed (pip install mmdb-writer): {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn groups_by_country_asn_and_continent_follow_the_geoip_database_and_its_reload() {
    let folder = directory("geoip");
    make_geo(&folder.join("geo.mmdb"), &[]);
    let config = r#"
[admin]
listen = "127.0.0.1:0"

[dns]
listen = "127.0.0.1:0"

[dns.geoip]
database = "geo.mmdb"

[[dns.region]]
name = "b34"
addresses = ["127.0.0.34"]

[[dns.region]]
name = "b35"
addresses = ["127.0.0.35"]

[[dns.region]]
name = "b06"
addresses = ["127.0.0.6"]

[[dns.region]]
name = "b01"
addresses = ["127.0.0.1"]

[[dns.group]]
name = "turkiye"
countries = ["tr"]

[[dns.group]]
name = "as64503"
asns = [64503]

[[dns.group]]
name = "avrupa"
continents = ["EU"]

[[dns.zone]]
origin = "kargo.test."
name_servers = ["ns1"]

[[dns.zone.name]]
name = "cografi"
policy = "geo"
groups = { turkiye = "b35", as64503 = "b06", avrupa = "b34" }
default_region = "b01"
"#;
    let dns = Dns::start("geoip", config);
    let answers = |subnets: &[&str]| -> Vec<String> {
        subnets
            .iter()
            .map(|s| dns.ask("cografi.kargo.test", Some(s)).join(","))
            .collect()
    };
    let subnets = ["10.1.9.0/24", "10.2.9.0/24", "10.3.9.0/24", "10.4.9.0/24"];
    // TR by country, DE by its continent, US by its ASN, JP in no group.
    assert_eq!(
        answers(&subnets),
        ["127.0.0.35", "127.0.0.34", "127.0.0.6", "127.0.0.1"]
    );
    make_geo(&folder.join("geo.mmdb"), &["10.4.0.0/16=TR,EU,64504"]);
    dns.reload();
    assert_eq!(
        answers(&subnets),
        ["127.0.0.35", "127.0.0.34", "127.0.0.6", "127.0.0.35"]
    );
}

#[test]
fn the_dns_models_print_the_course_tables_as_json() {
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    let dns = run(&["sim", "dns", "--json"]);
    let rows: Vec<(String, String, String, u64)> = dns["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["policy"].as_str().unwrap().to_owned(),
                format!("{:.3}", row["deviation"].as_f64().unwrap()),
                format!("{:.3}", row["distance"].as_f64().unwrap()),
                row["upstream_queries"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected = [
        ("geo", "0.076", "1.710", 480),
        ("latency", "0.051", "1.171", 480),
        ("weighted", "0.022", "2.144", 480),
    ];
    for (row, (policy, deviation, distance, queries)) in rows.iter().zip(expected) {
        assert_eq!(
            row,
            &(policy.into(), deviation.into(), distance.into(), queries)
        );
    }
    assert_eq!(
        dns["policies"][0]["shares"]["b34"]
            .as_f64()
            .map(|s| (s * 1000.0).round()),
        Some(576.0)
    );
    assert_eq!(dns["ttl_sweep"][0]["upstream_queries"], 4800);
    let failover = run(&["sim", "failover", "--json"]);
    let rows: Vec<(u64, i64, u64)> = failover["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["ttl"].as_u64().unwrap(),
                r["window_s"].as_i64().unwrap(),
                r["dropped"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (30, 39, 6666),
            (60, 69, 9486),
            (300, 305, 57906),
            (900, 905, 190206)
        ]
    );
    // Every input is an option: a faster health check shortens every window.
    let quicker = run(&[
        "sim",
        "failover",
        "--json",
        "--detection",
        "2",
        "--ttls",
        "30",
    ]);
    assert!(quicker["rows"][0]["window_s"].as_i64().unwrap() < 39);
    assert!(quicker["rows"][0]["budget_share"].as_f64().unwrap() > 0.0);
}

/// The transfer tests' TSIG key (32 bytes, base64, as `tsig-keygen` writes one).
const SECRET: &str = "q1kNnYVsZQoeZ3pGJ7qR0lzCq4JXb0XkD9cj1nC7h8Y=";

/// The zone-file config with `[dns.zone.transfer]`: transfers from `allow`, NOTIFY to `notify`.
fn transfer_config(allow: &str, notify: &str) -> String {
    zone_file_config().replace(
        "[[dns.zone.record]]",
        &format!(
            "[dns.zone.transfer]\nallow = [\"{allow}\"]\nnotify = [\"{notify}\"]\n\
             tsig = {{ name = \"aktarim\", algorithm = \"hmac-sha256\", secret = \"{SECRET}\" }}\n\n\
             [[dns.zone.record]]"
        ),
    )
}

/// The `;; XFR size:` line of dig's transfer output and the number of messages it counts.
fn transfer_size(axfr: &str) -> (&str, usize) {
    let size = axfr
        .lines()
        .find_map(|l| l.strip_prefix(";; XFR size: "))
        .unwrap_or_else(|| {
            panic!(
                "no XFR size in {}",
                &axfr[axfr.len().saturating_sub(2000)..]
            )
        });
    let messages = size
        .split("(messages ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{size}"));
    (size, messages)
}

/// `dig` at `server` (`address:port`) with `args`; what it printed.
fn dig(server: &str, args: &[&str]) -> String {
    let (host, port) = server.rsplit_once(':').unwrap();
    let output = Command::new("dig")
        .args([&format!("@{host}"), "-p", port])
        .args(args)
        .args(["+tries=1", "+time=3"])
        .output()
        .expect("dig runs (install dnsutils)");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Probe finding: hickory-server's TCP loop queued a handler's answers in a channel of 64 that
/// it drained only after the handler returned, so a transfer of more than ~66 messages (a zone
/// over ~1 MiB, a signed one of ~3,000 names) was cut every time and never reached a
/// secondary. Each message now goes out as it is made.
#[test]
fn a_zone_of_several_megabytes_transfers_whole() {
    let hosts: String = (0..6000)
        .map(|i| format!("host{i} IN TXT \"{}\"\n", "x".repeat(250)))
        .collect();
    let folder = directory("transfer-large");
    std::fs::write(folder.join("kargo.zone"), format!("{ZONE_FILE}{hosts}")).unwrap();
    let dns = Dns::start(
        "transfer-large",
        &transfer_config("127.0.0.1/32", "127.0.0.1:9"),
    );
    let key = format!("hmac-sha256:aktarim:{SECRET}");
    let axfr = dig(&dns.dns, &["kargo.test", "AXFR", "-y", &key, "+onesoa"]);
    let (size, messages) = transfer_size(&axfr);
    assert!(messages > 80, "{size}");
    assert!(axfr.contains("host5999.kargo.test."), "{size}");
}

#[test]
fn a_transfer_needs_the_key_and_an_allowed_address() {
    // Enough hosts for several messages, each signed on the previous one's MAC.
    let hosts: String = (0..1500)
        .map(|i| format!("host{i} IN A 127.1.{}.{}\n", i / 250, i % 250))
        .collect();
    let folder = directory("transfer");
    std::fs::write(folder.join("kargo.zone"), format!("{ZONE_FILE}{hosts}")).unwrap();
    let dns = Dns::start("transfer", &transfer_config("127.0.0.1/32", "127.0.0.1:9"));
    let key = format!("hmac-sha256:aktarim:{SECRET}");
    let axfr = dig(&dns.dns, &["kargo.test", "AXFR", "-y", &key]);
    assert!(axfr.contains("posta.kargo.test.\t"), "{axfr}");
    assert!(axfr.contains("host1499.kargo.test."), "{axfr}");
    // The policy name, as answered with every region live.
    assert!(
        axfr.contains("devralma.kargo.test.\t300\tIN\tA\t127.0.0.34"),
        "{axfr}"
    );
    let (size, messages) = transfer_size(&axfr);
    assert!(size.starts_with("1512 records") && messages > 1, "{size}");
    let soa = dig(&dns.dns, &["kargo.test", "SOA", "+short"]);
    let serial: u32 = soa.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(serial > 7, "the managed serial, not the file's: {soa}");
    // A secondary at our serial gets the SOA alone; one behind gets the zone (RFC 1995 §4).
    let ixfr = dig(
        &dns.dns,
        &["kargo.test", &format!("IXFR={serial}"), "-y", &key],
    );
    assert!(ixfr.contains(";; XFR size: 1 records"), "{ixfr}");
    let ixfr = dig(
        &dns.dns,
        &["kargo.test", &format!("IXFR={}", serial - 1), "-y", &key],
    );
    assert!(ixfr.contains(";; XFR size: 1512 records"), "{ixfr}");
    // A signed question gets a signed answer, which dig checks.
    let signed = dig(&dns.dns, &["kargo.test", "SOA", "-y", &key]);
    assert!(signed.contains("status: NOERROR"), "{signed}");
    assert!(signed.contains("aktarim.\t\t0\tANY\tTSIG"), "{signed}");
    let refused = [
        dig(&dns.dns, &["kargo.test", "AXFR"]),
        dig(
            &dns.dns,
            &["kargo.test", "AXFR", "-b", "127.0.0.2", "-y", &key],
        ),
        dig(
            &dns.dns,
            &[
                "kargo.test",
                "AXFR",
                "-y",
                &format!("hmac-sha256:aktarim:{}", SECRET.replace('q', "Q")),
            ],
        ),
        dig(
            &dns.dns,
            &[
                "kargo.test",
                "AXFR",
                "-y",
                &format!("hmac-sha256:baska:{SECRET}"),
            ],
        ),
    ];
    for (answer, why) in refused.iter().zip(["", "", "BADSIG", "BADKEY"]) {
        assert!(answer.contains("Transfer failed."), "{answer}");
        assert!(!answer.contains("posta.kargo.test."), "{answer}");
        assert!(answer.contains(why), "{why}: {answer}");
    }
    let status = get_json(&dns.admin, "/status");
    assert_eq!(status["dns"]["transfers"]["sent"], 3, "{status}");
    assert_eq!(status["dns"]["transfers"]["refused"], 4, "{status}");
    assert_eq!(status["dns"]["zones"][0]["serial"], serial, "{status}");
    // A reload that changes nothing keeps the serial; one that changes a record raises it.
    dns.reload();
    assert_eq!(dig(&dns.dns, &["kargo.test", "SOA", "+short"]), soa);
    std::fs::write(
        folder.join("kargo.zone"),
        format!("{}{hosts}", ZONE_FILE.replace("10 posta", "5 posta")),
    )
    .unwrap();
    dns.reload();
    let after = dig(&dns.dns, &["kargo.test", "SOA", "+short"]);
    let raised: u32 = after.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(raised > serial, "{soa} then {after}");
    // A secondary at the old serial gets the change alone (RFC 1995): new SOA, old SOA, the
    // MX removed, new SOA, the MX added, new SOA.
    let ixfr = dig(
        &dns.dns,
        &["kargo.test", &format!("IXFR={serial}"), "-y", &key],
    );
    assert!(ixfr.contains(";; XFR size: 6 records"), "{ixfr}");
    assert!(
        ixfr.contains("MX\t10 posta") && ixfr.contains("MX\t5 posta"),
        "{ixfr}"
    );
}

/// trafik serving ZONE_FILE with transfers (the config followed by `more`) in the test folder
/// `name`, and named as its secondary on the port trafik notifies (a free port given to
/// trafik's config first).
fn primary_and_secondary(name: &str, more: &str) -> (Dns, Named) {
    let folder = directory(name);
    std::fs::write(folder.join("kargo.zone"), ZONE_FILE).unwrap();
    let named_port = trafik_test_support::free_port();
    let notify = format!("127.0.0.1:{named_port}");
    let config = format!("{}{more}", transfer_config("127.0.0.1/32", &notify));
    let dns = Dns::start(name, &config);
    let named = Named::secondary_on(
        &folder.join("named"),
        named_port,
        "kargo.test",
        &dns.dns,
        ("aktarim", SECRET),
    );
    (dns, named)
}

#[test]
fn bind_as_a_secondary_takes_the_zone_and_each_reload() {
    let folder = directory("secondary");
    let (dns, named) = primary_and_secondary("secondary", "");
    let log = folder.join("named/named.log");
    let until = |name: &str, want: &str| converge(&named.address(), name, want, &log);
    until("posta.kargo.test", "127.0.0.25");
    until("devralma.kargo.test", "127.0.0.34");
    // A reload that changes a record: a new serial, NOTIFY, and named transfers again (its
    // refresh timer is an hour away, so only the NOTIFY brings it).
    std::fs::write(
        folder.join("kargo.zone"),
        ZONE_FILE.replace("127.0.0.25", "127.0.0.26"),
    )
    .unwrap();
    dns.reload();
    until("posta.kargo.test", "127.0.0.26");
    // By IXFR: the change alone (the new SOA; the old SOA and A; the new SOA and A; the new SOA).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("Transfer completed: 1 messages, 6 records")
    {
        assert!(Instant::now() < deadline, "no IXFR; see {}", log.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Asks `server` for `name` until it answers `want`, for at most 30 s (named's `log` in the
/// failure).
fn converge(server: &str, name: &str, want: &str, log: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = dig(server, &[name, "A", "+short"]);
        if answer.trim() == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{server} never answered {want} for {name} (last {answer:?}); see {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// examples/dns-secondary/ as its README runs it, on its fixed ports (5300, 5301, 9090) in a
/// network namespace of its own: named's files in the test's folder instead of
/// /tmp/trafik-secondary, the zone file a copy so the reload's edit stays here.
#[test]
fn the_secondary_example_runs_with_bind_as_its_readme_says() {
    if std::env::var_os(INSIDE_NAMESPACE).is_none() {
        return run_in_own_network_namespace(
            "the_secondary_example_runs_with_bind_as_its_readme_says",
        );
    }
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/dns-secondary");
    let folder = directory("secondary-example");
    for file in ["trafik.toml", "kargo.zone"] {
        std::fs::copy(example.join(file), folder.join(file)).unwrap();
    }
    let named_folder = folder.join("named");
    std::fs::create_dir_all(&named_folder).unwrap();
    let conf = std::fs::read_to_string(example.join("named.conf"))
        .unwrap()
        .replace("/tmp/trafik-secondary", named_folder.to_str().unwrap());
    std::fs::write(named_folder.join("named.conf"), conf).unwrap();
    let config = folder.join("trafik.toml");
    let _trafik = Trafik::start(
        &["serve", "-c", config.to_str().unwrap()],
        Stdio::null(),
        "admin on",
    );
    let _named = Named::run(&named_folder.join("named.conf"), 5301);
    let log = named_folder.join("named.log");
    converge("127.0.0.1:5301", "posta.kargo.test", "127.0.0.25", &log);
    converge("127.0.0.1:5301", "devralma.kargo.test", "127.0.0.34", &log);
    let zone = folder.join("kargo.zone");
    let text = std::fs::read_to_string(&zone).unwrap();
    std::fs::write(&zone, text.replace("127.0.0.25", "127.0.0.26")).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["reload", "--admin", "127.0.0.1:9090"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    converge("127.0.0.1:5301", "posta.kargo.test", "127.0.0.26", &log);
}

#[test]
fn transfer_config_errors_are_reported_at_their_place() {
    let text = transfer_config("127.0.0.1/40", "127.0.0.1")
        .replace("hmac-sha256\", secret", "hmac-md5\", secret")
        .replace(SECRET, "c2hvcnQ=");
    let folder = directory("transfer-errors");
    let file = folder.join("bad.toml");
    std::fs::write(&file, &text).unwrap();
    std::fs::write(folder.join("kargo.zone"), ZONE_FILE).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["check", "--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    let line_of = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let column_of = |needle: &str| {
        let line = text.lines().find(|l| l.contains(needle)).unwrap();
        line.find(needle).unwrap() + 1
    };
    for (needle, field, message) in [
        (
            "\"127.0.0.1/40\"",
            "dns.zone[0].transfer.allow",
            "expected an address prefix such as \"127.0.0.1/32\"",
        ),
        (
            "\"127.0.0.1\"]",
            "dns.zone[0].transfer.notify",
            "expected a secondary's address and port",
        ),
        (
            "\"hmac-md5\"",
            "dns.zone[0].transfer.tsig.algorithm",
            "expected \"hmac-sha256\", found \"hmac-md5\"",
        ),
        (
            "\"c2hvcnQ=\"",
            "dns.zone[0].transfer.tsig.secret",
            "5 bytes is too short",
        ),
    ] {
        let place = format!("bad.toml:{}:{}", line_of(needle), column_of(needle));
        assert!(
            errors
                .lines()
                .any(|l| l.contains(&place) && l.contains(field) && l.contains(message)),
            "{place} {field} {message}:\n{errors}"
        );
    }
}

/// The zone-file config signed with DNSSEC, keys in `dns-keys/` beside the config.
fn signed_config(denial: &str) -> String {
    format!(
        "{}\n[dns.zone.dnssec]\nkeys = \"dns-keys/\"\ndenial = \"{denial}\"\n",
        zone_file_config()
    )
}

fn trafik(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn dnssec_keys_are_made_once_and_trafik_dns_ds_prints_the_ksk_s_ds() {
    let folder = directory("dnssec-keys");
    let file = folder.join("dns.toml");
    std::fs::write(&file, signed_config("nsec")).unwrap();
    std::fs::write(folder.join("kargo.zone"), ZONE_FILE).unwrap();
    let ds = || {
        let output = trafik(&[
            "dns",
            "ds",
            "kargo.test",
            "--config",
            file.to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let first = ds();
    let fields: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(fields[..3], ["kargo.test.", "IN", "DS"], "{first}");
    assert!(fields[4..6] == ["13", "2"], "ECDSA P-256, SHA-256: {first}");
    assert_eq!(fields[6].len(), 64, "{first}");
    for key in ["kargo.test.ksk.pk8", "kargo.test.zsk.pk8"] {
        assert!(folder.join("dns-keys").join(key).is_file(), "{key}");
    }
    // The keys are read back, not made again: the same DS.
    assert_eq!(ds(), first);
    // `trafik check` names the keys by tag, the KSK's the DS's.
    let check = trafik(&["check", "--config", file.to_str().unwrap()]);
    let printed = String::from_utf8_lossy(&check.stdout);
    let signed = format!("signed: KSK {}, ZSK ", fields[3]);
    assert!(printed.contains(&signed), "{printed}");
    assert!(printed.contains("denial by NSEC black lies"), "{printed}");
    let unsigned = trafik(&[
        "dns",
        "ds",
        "devralma.kargo.test",
        "--config",
        file.to_str().unwrap(),
    ]);
    assert!(!unsigned.status.success());
    assert!(String::from_utf8_lossy(&unsigned.stderr).contains("no zone devralma.kargo.test."));
}

#[test]
fn dnssec_config_errors_are_reported_at_their_place() {
    let folder = directory("dnssec-errors");
    std::fs::write(folder.join("kargo.zone"), ZONE_FILE).unwrap();
    std::fs::create_dir_all(folder.join("dns-keys")).unwrap();
    std::fs::write(folder.join("dns-keys/kargo.test.ksk.pk8"), "not a key").unwrap();
    let text = signed_config("nsec5");
    let file = folder.join("bad.toml");
    std::fs::write(&file, &text).unwrap();
    let output = trafik(&["check", "--config", file.to_str().unwrap()]);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    for (needle, field, message) in [
        (
            "\"nsec5\"",
            "dns.zone[0].dnssec.denial",
            "expected \"nsec\" or \"nsec3\"",
        ),
        (
            "\"dns-keys/\"",
            "dns.zone[0].dnssec.keys",
            "kargo.test.ksk.pk8 is not an ECDSA P-256 key",
        ),
    ] {
        let line = text.lines().position(|l| l.contains(needle)).unwrap() + 1;
        let column = text
            .lines()
            .find(|l| l.contains(needle))
            .unwrap()
            .find(needle)
            .unwrap()
            + 1;
        let place = format!("bad.toml:{line}:{column}");
        assert!(
            errors
                .lines()
                .any(|l| l.contains(&place) && l.contains(field) && l.contains(message)),
            "{place} {field} {message}:\n{errors}"
        );
    }
}

#[test]
fn signed_answers_validate_with_delv_from_the_zone_s_ds() {
    each_denial("dnssec", signed_answers_validate);
}

fn signed_answers_validate(denial: &str, name: &str) {
    std::fs::write(directory(name).join("kargo.zone"), ZONE_FILE).unwrap();
    let dns = Dns::start(name, &signed_config(denial));
    let anchors = dns.file.with_file_name("anchors.conf");
    anchors_for(&ds_of("kargo.test", &dns.file), &anchors);
    // Without the DO bit the answer is as unsigned as before; with it, RRSIGs.
    let plain = dig(&dns.dns, &["posta.kargo.test", "A"]);
    assert!(
        plain.contains("127.0.0.25") && !plain.contains("RRSIG"),
        "{plain}"
    );
    let signed = dig(&dns.dns, &["+dnssec", "posta.kargo.test", "A"]);
    assert!(signed.contains("RRSIG\tA 13 3"), "{signed}");
    // The denial asked for: NSEC, or NSEC3 at the name's hash (and NSEC3PARAM at the apex).
    let missing = dig(&dns.dns, &["+dnssec", "yok.kargo.test", "A"]);
    assert!(
        missing
            .lines()
            .any(|l| record_type(l) == denial.to_uppercase()),
        "{missing}"
    );
    let param = dig(&dns.dns, &["kargo.test", "NSEC3PARAM", "+short"]);
    assert_eq!(param.trim() == "1 0 0 -", denial == "nsec3", "{param}");
    // The keys are the zone's records, asked with DO or without.
    let keys = dig(&dns.dns, &["kargo.test", "DNSKEY", "+short"]);
    assert_eq!(keys.lines().count(), 2, "{keys}");
    validates(&dns.dns, &anchors, SIGNED_QUESTIONS);
    validates(&dns.dns, &anchors, &[("biri.musteri.kargo.test", "AAAA")]);
    // The DO bit is part of the packet cache's key: a plain question after the signed ones
    // still gets the plain answer.
    let plain_again = dig(&dns.dns, &["posta.kargo.test", "A"]);
    assert!(!plain_again.contains("RRSIG"), "{plain_again}");
}

/// The type of a record as dig prints it (owner, TTL, class, type, data).
fn record_type(line: &str) -> &str {
    line.split_whitespace().nth(3).unwrap_or_default()
}

/// What the DNSSEC tests ask delv of ZONE_FILE's zone: a static answer, a policy answer, a
/// name that does not exist, a type a name does not have, a wildcard's answer.
const SIGNED_QUESTIONS: &[(&str, &str)] = &[
    ("posta.kargo.test", "A"),
    ("devralma.kargo.test", "A"),
    ("yok.kargo.test", "A"),
    ("posta.kargo.test", "TXT"),
    ("biri.musteri.kargo.test", "TXT"),
];

/// Runs `test` with each denial a signed zone may have, and a test folder's name for it
/// (`prefix-denial`).
fn each_denial(prefix: &str, test: fn(&str, &str)) {
    for denial in ["nsec", "nsec3"] {
        test(denial, &format!("{prefix}-{denial}"));
    }
}

/// The DS line `trafik dns ds` prints for `zone` of the config `file`.
fn ds_of(zone: &str, file: &std::path::Path) -> String {
    let output = trafik(&["dns", "ds", zone, "--config", file.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// Asks `delv` at `server`, trusting the DS in `anchors` for `kargo.test`, each of `questions`
/// (name, type): each answer must be "fully validated".
fn validates(server: &str, anchors: &std::path::Path, questions: &[(&str, &str)]) {
    let (host, port) = server.rsplit_once(':').unwrap();
    for (name, kind) in questions {
        let printed = printed(
            Command::new("delv")
                .args([&format!("@{host}"), "-p", port, "-a"])
                .arg(anchors)
                .args(["+root=kargo.test", name, kind]),
            "delv (install bind9-dnsutils)",
        )
        .1;
        assert!(
            printed.contains("fully validated"),
            "{name} {kind}:\n{printed}"
        );
    }
}

/// Runs `command` (`what` names it if it cannot start): whether it succeeded, and what it
/// printed on stdout and stderr.
fn printed(command: &mut Command, what: &str) -> (bool, String) {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{what}: {error}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// A trust-anchors file for delv holding `ds` (a `trafik dns ds` line).
fn anchors_for(ds: &str, file: &std::path::Path) {
    let ds: Vec<&str> = ds.split_whitespace().collect();
    let anchor = format!(
        "trust-anchors {{ {} static-ds {} {} {} \"{}\"; }};\n",
        ds[0], ds[3], ds[4], ds[5], ds[6]
    );
    std::fs::write(file, anchor).unwrap();
}

#[test]
fn a_signed_zone_transfers_signed_and_ldns_verify_zone_accepts_it() {
    each_denial("signed-transfer", signed_transfer_verifies);
}

fn signed_transfer_verifies(denial: &str, name: &str) {
    let folder = directory(name);
    let zone = format!(
        "{ZONE_FILE}uzak IN NS ns.disari.test.\nuzak IN DS 12345 13 2 {}\nkopuk IN CNAME yok\n",
        "ab".repeat(32)
    );
    std::fs::write(folder.join("kargo.zone"), zone).unwrap();
    let config = format!(
        "{}\n[dns.zone.dnssec]\nkeys = \"dns-keys/\"\ndenial = \"{denial}\"\n",
        transfer_config("127.0.0.1/32", "127.0.0.1:9")
    );
    let dns = Dns::start(name, &config);
    let key = format!("hmac-sha256:aktarim:{SECRET}");
    let axfr = dig(&dns.dns, &["kargo.test", "AXFR", "+onesoa", "-y", &key]);
    let chain = denial.to_uppercase();
    for needle in ["\tDNSKEY\t257 3 13 ", "\tRRSIG\tSOA 13 2 "] {
        assert!(axfr.contains(needle), "{needle}: {axfr}");
    }
    assert!(axfr.lines().any(|l| record_type(l) == chain), "{axfr}");
    // The zone as a master file: dig's records without its comments and TSIGs.
    let records: String = axfr
        .lines()
        .filter(|l| !l.starts_with(';') && !l.is_empty() && !l.contains("\tTSIG\t"))
        .map(|l| format!("{l}\n"))
        .collect();
    let transferred = folder.join("transferred.zone");
    std::fs::write(&transferred, &records).unwrap();
    let trusted = folder.join("kargo.ds");
    std::fs::write(&trusted, ds_of("kargo.test", &dns.file)).unwrap();
    let verify = |file: &std::path::Path| {
        let mut command = Command::new("ldns-verify-zone");
        command.arg("-k").arg(&trusted).arg(file);
        printed(&mut command, "ldns-verify-zone (install ldnsutils)")
    };
    let (verified, printed) = verify(&transferred);
    assert!(verified, "{printed}\n{records}");
    assert!(
        printed.contains("Zone is verified and complete"),
        "{printed}"
    );
    // A zone missing one record of the chain (and its RRSIG) fails: the check can fail.
    let broken = folder.join("broken.zone");
    let owner = |l: &str| l.split_whitespace().next().unwrap_or_default().to_owned();
    let dropped = records
        .lines()
        .find(|l| record_type(l) == chain && !l.starts_with("kargo.test."))
        .map(owner)
        .unwrap();
    let in_chain = |l: &str| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        record_type(l) == chain || (record_type(l) == "RRSIG" && fields.get(4) == Some(&&*chain))
    };
    let cut: String = records
        .lines()
        .filter(|l| !(owner(l) == dropped && in_chain(l)))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&broken, cut).unwrap();
    let (verified, printed) = verify(&broken);
    assert!(!verified, "{printed}");
}

#[test]
fn delegations_validate_with_delv_signed_and_unsigned() {
    let folder = directory("delegation");
    std::fs::write(folder.join("kargo.zone"), ZONE_FILE).unwrap();
    std::fs::write(
        folder.join("bolge.zone"),
        "$TTL 60\n@ IN SOA ns1 hostmaster 1 3600 600 604800 30\n@ IN NS ns1\n\
         ns1 IN A 127.0.0.53\nwww IN A 127.0.0.80\n",
    )
    .unwrap();
    // The parent with its DNSSEC keys, then the child zone (`bolge`) with its own: both
    // served here, so delv finds the whole chain at one server.
    let config = format!(
        "{}\n[dns.zone.dnssec]\nkeys = \"dns-keys/\"\n\n\
         [[dns.zone]]\norigin = \"bolge.kargo.test.\"\nfile = \"bolge.zone\"\n\
         [dns.zone.dnssec]\nkeys = \"dns-keys/\"\n",
        zone_file_config()
    );
    let file = folder.join("dns.toml");
    std::fs::write(&file, &config).unwrap();
    // The child's DS goes into the parent's zone file, as a registrar would publish it;
    // `disari` is an unsigned delegation (no DS).
    let child_ds = ds_of("bolge.kargo.test", &file);
    let ds_data = child_ds.split_once(" DS ").unwrap().1;
    std::fs::write(
        folder.join("kargo.zone"),
        format!("{ZONE_FILE}bolge IN DS {ds_data}\ndisari IN NS ns.disari.test.\n"),
    )
    .unwrap();
    let dns = Dns::start("delegation", &config);
    let anchors = folder.join("anchors.conf");
    anchors_for(&ds_of("kargo.test", &dns.file), &anchors);
    // The child's DS comes from the parent, signed; the child's answers chain to it.
    let ds = dig(&dns.dns, &["+dnssec", "+norec", "bolge.kargo.test", "DS"]);
    assert!(ds.contains("\tRRSIG\tDS 13 3 "), "{ds}");
    validates(
        &dns.dns,
        &anchors,
        &[
            ("bolge.kargo.test", "DS"),
            ("www.bolge.kargo.test", "A"),
            ("yok.bolge.kargo.test", "A"),
            ("disari.kargo.test", "DS"),
        ],
    );
    // A referral to the unsigned child proves it has no DS: the NSEC at the cut, signed.
    let referral = dig(
        &dns.dns,
        &["+dnssec", "+norec", "www.disari.kargo.test", "A"],
    );
    assert!(
        referral
            .contains("disari.kargo.test.\t30\tIN\tNSEC\t\\000.disari.kargo.test. NS RRSIG NSEC"),
        "{referral}"
    );
    assert!(referral.contains("\tRRSIG\tNSEC 13 3 "), "{referral}");
    assert!(!referral.contains("flags: qr aa"), "{referral}");
}

#[test]
fn bind_serves_the_signed_transfer_and_delv_validates_it_there() {
    each_denial("signed-secondary", bind_serves_signed);
}

fn bind_serves_signed(denial: &str, name: &str) {
    let folder = directory(name);
    let signed = format!("\n[dns.zone.dnssec]\nkeys = \"dns-keys/\"\ndenial = \"{denial}\"\n");
    let (dns, named) = primary_and_secondary(name, &signed);
    converge(
        &named.address(),
        "posta.kargo.test",
        "127.0.0.25",
        &folder.join("named/named.log"),
    );
    let anchors = folder.join("anchors.conf");
    anchors_for(&ds_of("kargo.test", &dns.file), &anchors);
    // named answers from the transferred zone alone: its RRSIGs, and its NSEC or NSEC3 chain
    // for the names and types that do not exist (real denial, where trafik itself tells black
    // lies): NSEC names the neighbours, NSEC3 their hashes.
    let missing = dig(&named.address(), &["+dnssec", "yok.kargo.test", "A"]);
    assert!(missing.contains("status: NXDOMAIN"), "{missing}");
    let denials = missing
        .lines()
        .filter(|l| record_type(l) == denial.to_uppercase())
        .count();
    assert_eq!(denials, if denial == "nsec" { 2 } else { 3 }, "{missing}");
    validates(&named.address(), &anchors, SIGNED_QUESTIONS);
    // A wildcard's NODATA below an empty non-terminal (musteri) needs the chain to hold it.
    let more = [("biri.musteri.kargo.test", "MX"), ("kargo.test", "MX")];
    validates(&named.address(), &anchors, &more);
}
