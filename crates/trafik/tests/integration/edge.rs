//! `[[cache]]` and static routes as `trafik check` sees them, and the CDN and distribution
//! models (`trafik sim cache`, `trafik sim distribution`) against the course's printed tables.

use std::path::PathBuf;
use std::process::{Command, Output};

fn trafik(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(args)
        .output()
        .expect("trafik runs")
}

/// Writes `text` to a fresh folder (with an `assets` folder beside it) and checks it; returns
/// the exit code and stderr.
fn check(name: &str, text: &str) -> (i32, String) {
    let dir = std::env::temp_dir().join(format!("trafik-edge-{}-{name}", std::process::id()));
    std::fs::create_dir_all(dir.join("assets")).unwrap();
    let path: PathBuf = dir.join("trafik.toml");
    std::fs::write(&path, text).unwrap();
    let output = trafik(&["check", "--config", path.to_str().unwrap()]);
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const EDGE: &str = r#"
[[listener]]
name = "kenar"
listen = "127.0.0.1:18472"

[[listener.route]]
path_prefix = "/takip"
pool = "koken"
cache = "kenar"

[[listener.route]]
path_prefix = "/varlik"
static = "assets"
index = "index.html"

[[pool]]
name = "koken"
backends = [{ address = "127.0.0.1:18471" }]

[[cache]]
name = "kenar"
default_ttl = "60s"

[cache.header]
name = "x-kenar"
hit = "isabet"
miss = "iska"
"#;

#[test]
fn a_cache_and_a_static_route_check_clean() {
    let (code, stderr) = check("good", EDGE);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn cache_and_static_mistakes_are_reported_together_with_their_place() {
    let text = EDGE
        .replace("cache = \"kenar\"", "cache = \"kenr\"")
        .replace(
            "static = \"assets\"",
            "static = \"assets\"\npool = \"koken\"",
        )
        .replace(
            "default_ttl = \"60s\"",
            "default_ttl = \"60s\"\neviction = \"fifo\"\nmax_entries = 0",
        )
        .replace("name = \"x-kenar\"", "name = \"x kenar\"");
    let (code, stderr) = check("bad", &text);
    assert_ne!(code, 0);
    for expected in [
        "listener[0].route[0].cache: no cache is named \"kenr\"; did you mean \"kenar\"?",
        "listener[0].route[1].pool: a route is answered by a pool or by static files, not both",
        "cache[0].eviction: expected lru or admission, found \"fifo\"",
        "cache[0].max_entries: expected at least 1 entry, found 0",
        "cache[0].header.name: expected a header name",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
    assert!(
        stderr.contains("trafik.toml:9:9: "),
        "errors name file:line:column:\n{stderr}"
    );
    let missing_dir = EDGE.replace("static = \"assets\"", "static = \"yok\"");
    let (code, stderr) = check("missing", &missing_dir);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("route[1].static: expected a directory"),
        "{stderr}"
    );
    let stray_index = EDGE.replace("cache = \"kenar\"", "cache = \"kenar\"\nindex = \"a.html\"");
    let (code, stderr) = check("index", &stray_index);
    assert_ne!(code, 0);
    assert!(stderr.contains("route[0].index"), "{stderr}");
}

fn sim(args: &[&str]) -> serde_json::Value {
    let output = trafik(&[&["sim"], args, &["--json"]].concat());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// kenar/iz.mjs's printed table.
#[test]
fn sim_cache_with_defaults_is_the_course_table() {
    let report = sim(&["cache"]);
    let rows: Vec<String> = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {:.4} {:.4} {} {:.4} {}",
                r["burst"],
                r["single_hit_ratio"].as_f64().unwrap(),
                r["edge_hit_ratio"].as_f64().unwrap(),
                r["app_requests"],
                r["app_hit_ratio"].as_f64().unwrap(),
                r["store_requests"]
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            "10 0.8998 0.8998 20046 0.0000 20046",
            "5 0.3998 0.3998 120044 0.0000 120044",
            "2 0.0759 0.0759 184815 0.0021 184418",
        ]
    );
    // Every input is an option: a smaller trace, other bursts (the course's PARAMS example).
    let other = sim(&[
        "cache",
        "--requests",
        "50000",
        "--open",
        "500",
        "--capacity",
        "2000",
        "--bursts",
        "10,8,6,4",
        "--summary-burst",
        "8",
    ]);
    let app: Vec<u64> = other["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["app_requests"].as_u64().unwrap())
        .collect();
    assert_eq!(app, [5236, 15231, 25645, 36406]);
}

/// yayma/olc.mjs's printed tables.
#[test]
fn sim_distribution_with_defaults_is_the_course_table() {
    let report = sim(&["distribution"]);
    let modes: Vec<String> = report["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{} {} {} {} {} {}",
                m["mode"].as_str().unwrap(),
                m["origin_requests"],
                m["pushed"],
                m["wasted"],
                m["stale_rounds"],
                m["messages"]
            )
        })
        .collect();
    assert_eq!(
        modes,
        [
            "pull 20322 0 0 1794 20322",
            "push 0 240792 220506 0 240804",
            "hybrid 20046 240 0 0 20298",
        ]
    );
    let classes: Vec<String> = report["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{} {} {} {} {} {}",
                c["class"].as_str().unwrap(),
                c["objects"],
                c["edges"],
                c["pull_requests"],
                c["push_requests"],
                c["wasted"]
            )
        })
        .collect();
    assert_eq!(
        classes,
        [
            "common 20 12 240 240 0",
            "private 20046 1 20046 240552 220506"
        ]
    );
    let other = sim(&[
        "distribution",
        "--edges",
        "24",
        "--ttl",
        "120",
        "--rounds",
        "600",
        "--update-round",
        "50",
    ]);
    assert_eq!(other["modes"][0]["origin_requests"], 20646);
    assert_eq!(other["modes"][0]["stale_rounds"], 1476);
}
