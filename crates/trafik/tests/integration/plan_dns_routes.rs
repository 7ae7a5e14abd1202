//! `trafik plan` for DNS names and routes: a weighted name reweighted with a shorter TTL and a
//! retargeted route, read from `--json`; every route setting changed alone; then the predicted
//! shares against what a live `trafik serve` answers to `dig`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use trafik_test_support::Trafik;

/// A DNS-and-HTTP configuration: name `api` weighted by `weights` (b34, b35, b06) with `ttl`,
/// route `/takip` to pool `takip_pool`.
fn config(weights: [u32; 3], ttl: u32, takip_pool: &str) -> String {
    format!(
        r#"
[admin]
listen = "127.0.0.1:0"

[[listener]]
name = "web"
listen = "127.0.0.1:0"
[[listener.route]]
pool = "genel"
[[listener.route]]
path_prefix = "/takip"
pool = "{takip_pool}"

[[pool]]
name = "genel"
backends = [{{ address = "127.0.0.1:9" }}]

[[pool]]
name = "takip"
backends = [{{ address = "127.0.0.1:9" }}]

[[pool]]
name = "takip2"
backends = [{{ address = "127.0.0.1:9" }}]

[dns]
listen = "127.0.0.1:0"

[[dns.region]]
name = "b34"
addresses = ["127.0.0.34"]
check = "127.0.0.1:9"
health = {{ path = "/saglik", interval = "1s", fall = 3, rise = 2 }}

[[dns.region]]
name = "b35"
addresses = ["127.0.0.35"]
check = "127.0.0.1:9"
health = {{ path = "/saglik", interval = "1s", fall = 3, rise = 2 }}

[[dns.region]]
name = "b06"
addresses = ["127.0.0.6"]
check = "127.0.0.1:9"
health = {{ path = "/saglik", interval = "2s", fall = 2, rise = 2 }}

[[dns.zone]]
origin = "kargo.test."
ttl = 300
name_servers = ["ns1"]

[[dns.zone.record]]
name = "ns1"
type = "A"
value = "127.0.0.1"

[[dns.zone.name]]
name = "api"
policy = "weighted"
ttl = {ttl}
weights = {{ b34 = {}, b35 = {}, b06 = {} }}
"#,
        weights[0], weights[1], weights[2]
    )
}

fn write(name: &str, text: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("trafik-plan-dns-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let file = directory.join(name);
    std::fs::write(&file, text).unwrap();
    file
}

fn run(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn failover_budgets_are_printed_by_check_and_their_change_by_plan() {
    let old = write("failover-a.toml", &config([5, 3, 2], 60, "takip"));
    let new = write("failover-b.toml", &config([6, 4, 0], 20, "takip"));
    let check = run(&["check", "-c", old.to_str().unwrap()]);
    for line in [
        // The name: its TTL and its slowest region's checks.
        "      failover ≤ 65 s (ttl 60 s + region b06: health 2 × 2 s + 1 s timeout)",
        // The pools have no active checks, and one backend each.
        "  failover: no time bound (no active checks: outlier ejection after 3 failed connects, \
         tried again after 5 s up to 300 s; one backend: nowhere to retry, its requests fail)",
        // Each route: its pool's figure.
        "    failover: no time bound (pool takip)",
    ] {
        assert!(check.lines().any(|l| l == line), "{line:?} not in\n{check}");
    }

    let report = plan(&old, &new);
    let changes = report["failover"].as_array().unwrap();
    assert_eq!(
        changes.len(),
        1,
        "only the name's budget moves: {changes:#?}"
    );
    let name = &changes[0];
    assert_eq!(
        (&name["kind"], &name["name"]),
        (&"dns name".into(), &"api".into())
    );
    assert_eq!(name["before"]["seconds"].as_f64(), Some(65.0));
    // b06 answers no more: b34's 3 × 1 s + 1 s is the slowest left.
    assert_eq!(name["after"]["seconds"].as_f64(), Some(24.0));
    let text = run(&["plan", old.to_str().unwrap(), new.to_str().unwrap()]);
    assert!(
        text.contains(
            "  dns name api: failover ≤ 65 s (ttl 60 s + region b06: health 2 × 2 s + 1 s timeout) \
             → failover ≤ 24 s (ttl 20 s + region b34: health 3 × 1 s + 1 s timeout)"
        ),
        "{text}"
    );
}

fn plan(old: &Path, new: &Path) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args([
            "plan",
            old.to_str().unwrap(),
            new.to_str().unwrap(),
            "--json",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

fn share(entry: &serde_json::Value, key: &str, region: &str) -> f64 {
    entry[key][region].as_f64().unwrap_or(0.0)
}

#[test]
fn a_reweighted_name_and_a_retargeted_route_show_in_the_json() {
    let old = write("a.toml", &config([5, 3, 2], 60, "takip"));
    let new = write("b.toml", &config([6, 4, 0], 20, "takip2"));
    let report = plan(&old, &new);

    let dns = report["dns"].as_array().unwrap();
    assert_eq!(dns.len(), 1, "{report:#}");
    let api = &dns[0];
    assert_eq!(api["name"], "api.kargo.test.");
    assert_eq!(api["change"], "changed");
    for (region, before, after) in [("b34", 0.5, 0.6), ("b35", 0.3, 0.4), ("b06", 0.2, 0.0)] {
        assert!(
            (share(api, "share_before", region) - before).abs() < 1e-9,
            "{api:#}"
        );
        assert!(
            (share(api, "share_after", region) - after).abs() < 1e-9,
            "{api:#}"
        );
    }
    assert!((api["share_deviation"].as_f64().unwrap() - 0.2).abs() < 1e-9);
    assert_eq!(api["removed"], serde_json::json!(["b06"]));
    assert_eq!(api["added"], serde_json::json!([]));
    assert_eq!(
        (api["ttl_before"].as_u64(), api["ttl_after"].as_u64()),
        (Some(60), Some(20))
    );
    // Before: b06's 2 × 2 s + 1 s timeout is the slowest detection; after, b06 answers no
    // more: 3 × 1 s + 1 s (the failover budget's terms).
    assert_eq!(api["failover_window_before"].as_f64(), Some(65.0));
    assert_eq!(api["failover_window_after"].as_f64(), Some(24.0));

    let routes = report["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 1, "{report:#}");
    assert_eq!(routes[0]["path"], "/takip");
    assert_eq!(routes[0]["before"], "pool takip");
    assert_eq!(routes[0]["after"], "pool takip2");
    assert!(report["pools"].is_array());
}

#[test]
fn predicted_shares_agree_with_a_live_server_within_two_percent() {
    let old = write("live-a.toml", &config([5, 3, 2], 60, "takip"));
    let new = write("live-b.toml", &config([7, 2, 1], 20, "takip"));
    let predicted = plan(&old, &new)["dns"][0].clone();

    let (_trafik, printed) = Trafik::start(
        &["serve", "--config", new.to_str().unwrap()],
        Stdio::null(),
        "admin on",
    );
    let dns = printed
        .lines()
        .find_map(|line| line.strip_prefix("dns on "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no dns address in {printed}"));
    let (host, port) = dns.rsplit_once(':').unwrap();
    // One dig, many questions: each `api.kargo.test A` is a query of its own.
    let queries = 1000;
    let mut command = Command::new("dig");
    command.args([
        &format!("@{host}"),
        "-p",
        port,
        "+short",
        "+tries=1",
        "+time=2",
    ]);
    for _ in 0..queries {
        command.args(["api.kargo.test", "A"]);
    }
    let output = command.output().expect("dig runs (install dnsutils)");
    let mut counts: HashMap<String, usize> = HashMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        *counts.entry(line.to_owned()).or_default() += 1;
    }
    assert_eq!(counts.values().sum::<usize>(), queries, "{counts:?}");
    for (region, address) in [
        ("b34", "127.0.0.34"),
        ("b35", "127.0.0.35"),
        ("b06", "127.0.0.6"),
    ] {
        let measured = counts.get(address).copied().unwrap_or(0) as f64 / queries as f64;
        let expected = share(&predicted, "share_after", region);
        assert!(
            (measured - expected).abs() <= 0.02,
            "{region}: predicted {expected}, measured {measured} ({counts:?})"
        );
    }
}

/// A listener with a canary route on `/takip` (its keys `takip`) and a redirect route (its keys
/// `old`), for the route diff.
fn routes_config(takip: &str, old: &str) -> String {
    format!(
        r#"
[[listener]]
name = "web"
listen = "127.0.0.1:0"

[[listener.route]]
path = "/eski/{{no}}"
{old}

[[listener.route]]
path_prefix = "/takip"
{takip}

[[pool]]
name = "v1"
backends = [{{ address = "127.0.0.1:9" }}]

[[pool]]
name = "v2"
backends = [{{ address = "127.0.0.1:9" }}]

[[pool]]
name = "golge"
backends = [{{ address = "127.0.0.1:9" }}]
"#
    )
}

/// Every route setting a user writes shows in `trafik plan`'s route diff, each changed alone
/// from the same configuration: CORS and compression as much as matchers, split, mirror,
/// rewrites, redirect, address rules and priority.
#[test]
fn every_route_setting_changed_alone_shows_in_the_route_diff() {
    let split = r#"split = [{ pool = "v1", weight = 90 }, { pool = "v2", weight = 10 }]"#;
    let redirect = r#"redirect = { to = "/takip/{no}", status = 308 }"#;
    let cors = "[listener.route.cors]\norigins = [\"https://a.test\"]";
    let compress = "[listener.route.compress]\nencodings = [\"gzip\"]\nmin_length = 256";
    let base = routes_config(&format!("{split}\n{cors}\n{compress}"), redirect);
    let old = write("routes-base.toml", &base);
    let takip = |keys: &str, tables: &str| format!("{split}\n{keys}\n{tables}");
    // One key added to the canary route: its name, the key, the field that must show.
    let keys = [
        ("sticky", "split_sticky = \"cookie\"", "target.sticky"),
        (
            "mirror",
            "mirror = { pool = \"golge\", percent = 5 }",
            "routing.mirror",
        ),
        (
            "headers",
            "headers = { \"x-surum\" = \"beta\" }",
            "routing.conditions.headers",
        ),
        (
            "query",
            "query = { \"surum\" = \"beta\" }",
            "routing.conditions.query",
        ),
        (
            "cookies",
            "cookies = { \"surum\" = \"beta\" }",
            "routing.conditions.cookies",
        ),
        (
            "clients",
            "clients = [\"127.0.0.0/8\"]",
            "routing.conditions.clients",
        ),
        ("priority", "priority = 5", "routing.priority"),
        ("allow", "allow = [\"127.0.0.0/8\"]", "routing.access"),
        ("deny", "deny = [\"10.0.0.0/8\"]", "routing.access"),
        (
            "strip_prefix",
            "strip_prefix = \"/takip\"",
            "filters.RewritePath",
        ),
    ];
    let tables = format!("{cors}\n{compress}");
    let mut variants: Vec<(&str, String, String, &str)> = keys
        .into_iter()
        .map(|(name, key, field)| (name, takip(key, &tables), redirect.to_owned(), field))
        .collect();
    variants.extend([
        (
            "cors",
            takip("", &format!("{cors}\ncredentials = true\n{compress}")),
            redirect.to_owned(),
            "filters.Cors.credentials",
        ),
        (
            "compress",
            takip("", &format!("{cors}\n{}", compress.replace("256", "64"))),
            redirect.to_owned(),
            "filters.Compress.min_length",
        ),
        (
            "weights",
            takip("", &tables).replace("90", "80"),
            redirect.to_owned(),
            "target.pools",
        ),
        (
            "redirect",
            takip("", &tables),
            redirect.replace("308", "301"),
            "target.status",
        ),
    ]);
    assert!(
        plan(&old, &old)["routes"].as_array().unwrap().is_empty(),
        "a configuration compared with itself changes nothing"
    );
    for (name, takip, redirect, field) in variants {
        let new = write(
            &format!("routes-{name}.toml"),
            &routes_config(&takip, &redirect),
        );
        let report = plan(&old, &new);
        let fields: Vec<&str> = report["routes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|change| change["fields"].as_array().unwrap())
            .map(|f| f["field"].as_str().unwrap())
            .collect();
        assert!(
            fields.iter().any(|f| f.starts_with(field)),
            "{name}: no {field} among {fields:?}: {report:#}"
        );
    }
}
