//! The edge filters over real sockets, with `curl` as the client: compression in each coding
//! (streamed from a pool, from static files, and stored per coding by the edge cache), decoded
//! byte for byte by curl; and CORS, its preflights answered at the edge and a credentialed
//! cross-origin fetch made by headless chromium.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use trafik_metrics_text::strict_reader;
use trafik_test_support::{Trafik, free_ports, get_json, get_text, parse_head};

/// A 1.5 MB JSON text of varied records: past the static files' 1 MiB in-memory bound, so
/// static answers stream too.
fn records() -> Vec<u8> {
    let words = [
        "takip",
        "kargo",
        "aktarma",
        "teslim",
        "dagitimda",
        "sube",
        "durum",
    ];
    let mut seed = 7u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let lines: Vec<String> = (0..30_000)
        .map(|_| {
            format!(
                "{{\"no\":\"TR-{}\",\"durum\":\"{} {}\",\"adim\":{}}}",
                1000 + next() % 9000,
                words[next() % words.len()],
                words[next() % words.len()],
                next() % 10
            )
        })
        .collect();
    format!("[{}]\n", lines.join(",\n")).into_bytes()
}

fn site(name: &str, body: &[u8]) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("trafik-edge-filters-{}-{name}", std::process::id()));
    for folder in ["", "akis", "kenar", "hazir"] {
        std::fs::create_dir_all(dir.join("site").join(folder)).unwrap();
        std::fs::write(dir.join("site").join(folder).join("veri.json"), body).unwrap();
    }
    dir
}

fn serve(dir: &Path, config: &str) -> Trafik {
    let path = dir.join("trafik.toml");
    std::fs::write(&path, config).unwrap();
    Trafik::start(
        &["serve", "-c", path.to_str().unwrap()],
        Stdio::null(),
        "listening on",
    )
    .0
}

/// What curl got: status, head fields (lowercase names), body as decoded.
struct Got {
    status: u16,
    head: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.head
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, name: &str) -> Vec<&str> {
        self.head
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// `curl --compressed` (it decodes whatever coding the answer names) with these headers.
fn curl(url: &str, headers: &[&str], dir: &Path) -> Got {
    let head_file = dir.join("head.txt");
    let body_file = dir.join("body.out");
    let mut command = Command::new("curl");
    command.args(["-s", "--compressed", "--max-time", "60", "-D"]);
    command.arg(&head_file).arg("-o").arg(&body_file);
    for header in headers {
        command.args(["-H", header]);
    }
    let output = command
        .arg(url)
        .output()
        .expect("curl (.ci/run installs it)");
    assert!(output.status.success(), "curl {url}: {output:?}");
    let (status, head) = parse_head(&std::fs::read_to_string(&head_file).unwrap());
    Got {
        status,
        head,
        body: std::fs::read(&body_file).unwrap_or_default(),
    }
}

#[test]
fn each_coding_decodes_to_the_same_bytes_and_the_cache_keeps_one_variant_per_coding() {
    let body = records();
    let dir = site("codings", &body);
    let [files, edge, admin] = free_ports();
    let config = format!(
        r#"
[[listener]]
name = "dosya"
listen = "127.0.0.1:{files}"

[[listener.route]]
path_prefix = "/hazir"
static = "site"

[listener.route.compress]
encodings = ["gzip"]

[[listener.route]]
static = "site"

[[listener]]
name = "kenar"
listen = "127.0.0.1:{edge}"

[[listener.route]]
path_prefix = "/akis"
pool = "dosya"

[listener.route.compress]
types = ["application/json"]

[[listener.route]]
path_prefix = "/kenar"
pool = "dosya"
cache = "kenar"

[listener.route.compress]

[[listener.route]]
path_prefix = "/hazir"
pool = "dosya"

[listener.route.compress]

[[listener.route]]
path_prefix = "/dosya"
static = "site"

[listener.route.compress]

[[pool]]
name = "dosya"
backends = [{{ address = "127.0.0.1:{files}" }}]

[[cache]]
name = "kenar"
default_ttl = "60s"
max_bytes = "64MiB"

[admin]
listen = "127.0.0.1:{admin}"
"#
    );
    let trafik = serve(&dir, &config);
    let url = |path: &str| format!("http://127.0.0.1:{edge}{path}");
    for coding in ["gzip", "br", "zstd"] {
        let accept = format!("Accept-Encoding: {coding}");
        for path in [
            "/akis/veri.json",
            "/dosya/veri.json",
            "/kenar/veri.json",
            "/kenar/veri.json",
        ] {
            let got = curl(&url(path), &[&accept], &dir);
            assert_eq!(got.status, 200, "{path} {coding}");
            assert_eq!(
                got.header("content-encoding"),
                Some(coding),
                "{path}: {:?}",
                got.head
            );
            assert!(
                got.body == body,
                "{path} in {coding} decodes to other bytes"
            );
            assert_eq!(got.all("vary"), ["accept-encoding"], "{path}");
            // Streamed in chunks; a cached copy goes with the length of its compressed bytes.
            if !path.starts_with("/kenar") {
                assert_eq!(got.header("content-length"), None, "{path}");
            }
            assert!(
                got.header("etag").is_some_and(|e| e.starts_with("W/\"")),
                "{path}: {:?}",
                got.head
            );
        }
    }
    // The cache stored one copy per coding: the second request of each was a hit.
    let got = curl(
        &url("/kenar/veri.json"),
        &["Accept-Encoding: br;q=0.5, gzip;q=0.9"],
        &dir,
    );
    assert_eq!(got.header("content-encoding"), Some("gzip"));
    assert!(
        got.header("cache-status")
            .is_some_and(|s| s.contains("hit")),
        "{:?}",
        got.head
    );
    assert!(got.body == body);
    // A client that accepts none gets the bytes as they are (a variant of its own).
    for path in ["/akis/veri.json", "/kenar/veri.json", "/dosya/veri.json"] {
        let got = curl(&url(path), &["Accept-Encoding: identity"], &dir);
        assert_eq!(got.header("content-encoding"), None, "{path}");
        assert_eq!(
            got.header("content-length"),
            Some(body.len().to_string().as_str()),
            "{path}"
        );
        assert_eq!(got.all("vary"), ["accept-encoding"], "{path}");
        assert!(got.body == body, "{path}");
    }
    // A range is served as asked, uncompressed.
    let got = curl(
        &url("/dosya/veri.json"),
        &["Accept-Encoding: gzip", "Range: bytes=0-99"],
        &dir,
    );
    assert_eq!(got.status, 206);
    assert_eq!(got.header("content-encoding"), None);
    assert!(got.body == body[..100]);
    // Never twice: the upstream's own gzip is kept as it is.
    let got = curl(&url("/hazir/veri.json"), &["Accept-Encoding: gzip"], &dir);
    assert_eq!(
        got.header("content-encoding"),
        Some("gzip"),
        "{:?}",
        got.head
    );
    assert!(got.body == body, "compressed once, decoded once");
    let status = get_json(&format!("127.0.0.1:{admin}"), "/status");
    let route = |name: &str| {
        status["compress"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["route"] == name)
            .unwrap_or_else(|| panic!("{name} in {status}"))
            .clone()
    };
    let streamed = route("kenar /akis");
    assert_eq!(
        (
            streamed["gzip"].as_i64(),
            streamed["br"].as_i64(),
            streamed["zstd"].as_i64()
        ),
        (Some(1), Some(1), Some(1))
    );
    assert_eq!(streamed["identity"], 1);
    assert!(
        streamed["bytes_out"].as_i64().unwrap() * 3 < streamed["bytes_in"].as_i64().unwrap(),
        "{streamed}"
    );
    // Each coding compressed once for the cache; the hits came stored.
    let cached = route("kenar /kenar");
    assert_eq!(
        (
            cached["gzip"].as_i64(),
            cached["br"].as_i64(),
            cached["zstd"].as_i64()
        ),
        (Some(1), Some(1), Some(1))
    );
    assert_eq!(route("kenar /hazir")["already_encoded"], 1);
    assert_eq!(route("kenar /dosya")["ranges"], 1);
    let text = get_text(&format!("127.0.0.1:{admin}"), "/metrics");
    let metrics = strict_reader::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let akis = [("route", "kenar /akis"), ("outcome", "zstd")];
    assert_eq!(metrics.value("trafik_compress_answers_total", &akis), 1.0);
    let into = [("route", "kenar /akis"), ("direction", "in")];
    assert_eq!(
        metrics.value("trafik_compress_bytes_total", &into),
        streamed["bytes_in"].as_f64().unwrap()
    );
    drop(trafik);
    let _ = std::fs::remove_dir_all(dir);
}

/// The panel's page: two credentialed fetches with a custom header (so each is preflighted)
/// to another origin, through trafik's CORS and around it; what became of them in
/// `window.sonuc`.
const PANEL: &str = r#"<!doctype html>
<title>panel</title>
<script>
async function dene(url) {
  try {
    const answer = await fetch(url, {credentials: "include", headers: {"x-istemci": "panel"}});
    const body = await answer.json();
    return "ok " + answer.status + " " + body.no + " " + (answer.headers.get("x-kopya") || "-");
  } catch (error) {
    return "hata " + error.name;
  }
}
document.cookie = "oturum=panel";
const api = new URLSearchParams(location.search).get("api");
Promise.all(["/takip/TR-4821", "/acik/TR-4821", "/kimliksiz/TR-4821"].map(path => dene(api + path)))
  .then(results => { window.sonuc = results; });
</script>
"#;

#[test]
fn a_browser_calls_another_origin_through_cors_and_fails_without_it() {
    let dir = std::env::temp_dir().join(format!("trafik-edge-cors-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("panel")).unwrap();
    std::fs::write(dir.join("panel").join("index.html"), PANEL).unwrap();
    let [page, api, replica, admin] = free_ports();
    let config = format!(
        r#"
[[upstream]]
name = "k1"
listen = "127.0.0.1:{replica}"

[[listener]]
name = "panel"
listen = "127.0.0.1:{page}"

[[listener.route]]
static = "panel"
index = "index.html"

[[listener]]
name = "api"
listen = "127.0.0.1:{api}"

[[listener.route]]
path_prefix = "/takip"
pool = "takip"

[listener.route.cors]
origins = ["http://127.0.0.1:{page}", "https://*.kargo.test"]
headers = ["x-istemci"]
expose = ["x-kopya"]
credentials = true
max_age = "1m"

[[listener.route]]
path_prefix = "/acik"
pool = "takip"

[[listener.route]]
path_prefix = "/kimliksiz"
pool = "takip"

[listener.route.cors]
origins = ["http://127.0.0.1:{page}"]
headers = ["x-istemci"]

[[pool]]
name = "takip"
backends = [{{ address = "127.0.0.1:{replica}" }}]

[admin]
listen = "127.0.0.1:{admin}"
"#
    );
    let trafik = serve(&dir, &config);
    let driver = trafik_test_support::webdriver::Driver::start();
    let browser = driver.session(800, 600);
    browser.go(&format!(
        "http://127.0.0.1:{page}/?api=http://127.0.0.1:{api}"
    ));
    let done = browser.wait_until(
        "return Array.isArray(window.sonuc);",
        std::time::Duration::from_secs(30),
    );
    let results = browser.run("return window.sonuc;");
    assert!(
        done.is_some(),
        "the page's fetches never ended: {results} {:?}",
        browser.console()
    );
    assert_eq!(
        results,
        serde_json::json!([
            // Preflighted, credentialed, and the exposed header readable.
            "ok 200 TR-4821 k1",
            // No CORS: the replica's own 404 to the preflight carries no permission.
            "hata TypeError",
            // CORS without credentials: a credentialed answer may not be read.
            "hata TypeError",
        ]),
        "{:?}",
        browser.console()
    );
    // The preflights were answered at the edge: the replica saw one GET on /takip, and on
    // /acik only the OPTIONS that trafik relayed as any request.
    let counts = get_json(&format!("127.0.0.1:{replica}"), "/sayac");
    let status = get_json(&format!("127.0.0.1:{admin}"), "/status");
    let cors = &status["cors"][0];
    assert_eq!(cors["route"], "api /takip", "{status}");
    assert_eq!(
        (cors["preflights"].as_i64(), cors["allowed"].as_i64()),
        (Some(1), Some(1)),
        "{cors}"
    );
    assert_eq!(counts["yol"]["/takip"], 1, "{counts}");
    assert_eq!(
        counts["yol"]["/kimliksiz"],
        serde_json::Value::Null,
        "{counts}"
    );
    drop(browser);
    drop(trafik);
    let _ = std::fs::remove_dir_all(dir);
}
