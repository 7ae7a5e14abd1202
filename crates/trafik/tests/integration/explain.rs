//! `trafik explain` against live instances: a real `trafik serve` before three `trafik upstream`
//! replicas. For each request the admin API's `POST /explain` is asked first, then the same
//! request is sent; the replica that answers (its `x-kopya`) must be the explained backend.
//!
//! The agreement rule: requests go one at a time, each explained right before it is sent, and
//! nothing else picks in that pool between the two — so every rule, stateful ones included
//! (round-robin's turn, the random rules' next draws, the smooth weighted cycle), must agree
//! on every request: 100 %, not a share.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use trafik_test_support::{Trafik, free_ports, parse_head, trafik_binary};

/// What a raw HTTP/1.1 exchange got: status and head fields (lowercase names).
struct Got {
    status: u16,
    head: Vec<(String, String)>,
    body: String,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.head
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `METHOD path` to `address` with `Host: host`.
fn exchange(
    (address, host): (&str, &str),
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Got {
    let mut stream = TcpStream::connect(address).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(head.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let (status, head) = parse_head(head);
    Got {
        status,
        head,
        body: body.to_owned(),
    }
}

/// `POST /explain` for a GET of `path` on `host` at the listener's port `web`.
fn explain(admin: &str, (web, host): (u16, &str), path: &str, headers: &[(&str, &str)]) -> Value {
    let fields: serde_json::Map<String, Value> = headers
        .iter()
        .map(|(n, v)| ((*n).to_owned(), Value::from(*v)))
        .collect();
    let body = json!({
        "method": "GET",
        "url": format!("http://{host}:{web}{path}"),
        "headers": fields,
        "client": "127.0.0.1",
    });
    let got = exchange((admin, admin), "POST", "/explain", &[], &body.to_string());
    assert_eq!(got.status, 200, "{}", got.body);
    serde_json::from_str(&got.body).unwrap()
}

/// `trafik serve` of `config`, written to a directory of its own (named by the free port
/// `port`); the process and the file.
fn serve(config: &str, port: u16) -> (Trafik, PathBuf) {
    let dir = std::env::temp_dir().join(format!("trafik-explain-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trafik.toml");
    std::fs::write(&path, config).unwrap();
    let (proxy, _) = Trafik::start(
        &["serve", "-c", path.to_str().unwrap()],
        Stdio::null(),
        "listening on",
    );
    (proxy, path)
}

struct Setup {
    _replicas: Vec<Trafik>,
    proxy: Trafik,
    port: u16,
    web: String,
    backends: [String; 3],
    admin: String,
    config: PathBuf,
}

fn setup() -> Setup {
    let [web, admin, b1, b2, b3] = free_ports::<5>();
    let replicas = [("k1", b1), ("k2", b2), ("k3", b3)]
        .iter()
        .map(|(name, port)| {
            let address = format!("127.0.0.1:{port}");
            Trafik::start(
                &["upstream", "--name", name, "--listen", &address],
                Stdio::null(),
                &format!("upstream {name} on"),
            )
            .0
        })
        .collect();
    let backends = |weights: [u32; 3]| {
        [b1, b2, b3]
            .iter()
            .zip(weights)
            .enumerate()
            .map(|(i, (port, weight))| {
                format!(
                    "{{ address = \"127.0.0.1:{port}\", name = \"k{}\", weight = {weight} }}",
                    i + 1
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let pools = [
        ("rr", "round-robin", ""),
        ("wrr", "weighted-round-robin", ""),
        ("ring", "consistent-hash", "hash_key = \"header:x-user\"\n"),
        ("maglev", "maglev", "hash_key = \"header:x-user\"\n"),
        ("p2c", "power-of-two", ""),
        ("lc", "least-connections", ""),
        ("random", "random", ""),
        ("ewma", "peak-ewma", ""),
        (
            "cookie",
            "round-robin",
            "[pool.sticky]\nmode = \"cookie\"\nsecret = \"explain\"\n",
        ),
        (
            "keyed",
            "round-robin",
            "hash_key = \"header:x-user\"\n[pool.sticky]\nmode = \"consistent\"\n",
        ),
    ];
    let mut config = format!(
        "[server]\nworkers = 2\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{web}\"\n\n"
    );
    for (name, _, _) in &pools {
        config.push_str(&format!(
            "[[listener.route]]\nhost = \"{name}.pool\"\npool = \"{name}\"\n\n"
        ));
    }
    config.push_str(
        "[[listener.route]]\npath_prefix = \"/takip\"\npool = \"rr\"\n\n\
         [[listener.route]]\nhost = \"sinirli.test\"\npool = \"rr\"\n\
         [listener.route.rate_limit]\nrate = 1\nper = \"60s\"\nburst = 1\nkey = \"client-ip\"\n\n",
    );
    for (name, algorithm, extra) in &pools {
        let backends = backends(if *name == "wrr" || *name == "random" {
            [1, 2, 3]
        } else {
            [1, 1, 1]
        });
        // The rule's keys first: a table ([pool.sticky]) ends the pool's own keys.
        let (keys, table) = extra.split_at(extra.find('[').unwrap_or(extra.len()));
        config.push_str(&format!(
            "[[pool]]\nname = \"{name}\"\nalgorithm = \"{algorithm}\"\nbackends = [{backends}]\n{keys}{table}\n"
        ));
    }
    let (proxy, path) = serve(&config, web);
    Setup {
        _replicas: replicas,
        proxy,
        port: web,
        backends: [b1, b2, b3].map(|port| format!("127.0.0.1:{port}")),
        web: format!("127.0.0.1:{web}"),
        admin: format!("127.0.0.1:{admin}"),
        config: path,
    }
}

#[test]
fn the_explained_backend_is_the_one_the_next_identical_request_reaches() {
    let setup = setup();
    let mut agreed = 0;
    let mut cookie: Option<String> = None;
    let pools = [
        "rr", "wrr", "ring", "maglev", "p2c", "lc", "random", "ewma", "cookie", "keyed",
    ];
    for n in 0..1_050usize {
        let pool = pools[n % pools.len()];
        if n == 500 {
            // Half way, k2 drains in every pool: the rules walk past it, and explain says so.
            for pool in pools {
                let drain = format!("/pools/{pool}/backends/{}/drain", setup.backends[1]);
                let got = exchange((&setup.admin, &setup.admin), "POST", &drain, &[], "");
                assert_eq!(got.status, 200, "{}", got.body);
            }
        }
        let path = format!("/takip/TR-{n}");
        let host = format!("{pool}.pool");
        let user = format!("kullanici-{}", n % 37);
        let mut headers: Vec<(&str, &str)> = vec![("x-user", &user)];
        // Every other cookie request carries the binding the pool gave.
        let carried = cookie.clone().filter(|_| pool == "cookie" && n % 20 < 10);
        if let Some(value) = &carried {
            headers.push(("cookie", value));
        }
        let told = explain(&setup.admin, (setup.port, &host), &path, &headers);
        let expected = told["backend"]["name"]
            .as_str()
            .unwrap_or_else(|| panic!("no backend explained: {told}"))
            .to_owned();
        assert_eq!(told["pool"]["pool"], pool, "{told}");
        let candidates = told["candidates"].as_array().unwrap();
        assert_eq!(candidates.len(), 3, "{told}");
        if n >= 500 {
            assert_eq!(candidates[1]["draining"], true, "{told}");
            // A draining backend keeps the sessions bound to it; only new picks avoid it.
            if told["pool"]["decided_by"] != "sticky cookie" {
                assert_ne!(expected, "k2", "{told}");
            }
        }
        let got = exchange((&setup.web, &host), "GET", &path, &headers, "");
        assert_eq!(got.status, 200, "{}", got.body);
        let reached = got.header("x-kopya").unwrap_or_default();
        assert_eq!(
            reached, expected,
            "request {n} to {pool}: explained {expected}, reached {reached}; {told}"
        );
        if pool == "cookie"
            && let Some(set) = got.header("set-cookie")
        {
            cookie = set.split(';').next().map(str::to_owned);
        }
        agreed += 1;
    }
    assert_eq!(agreed, 1_050);
    setup.proxy.stop();
}

#[test]
fn an_explained_404_lists_the_near_miss_and_an_explained_429_gives_the_real_retry_after() {
    let setup = setup();
    let plain = (setup.port, "127.0.0.1");
    let told = explain(&setup.admin, plain, "/takipx", &[]);
    assert_eq!(told["answer"]["status"], 404, "{told}");
    let routes = told["routes"].as_array().unwrap();
    let near = routes
        .iter()
        .find(|r| r["route"].as_str().unwrap().contains("/takip "))
        .unwrap_or_else(|| panic!("{told}"));
    assert_eq!(near["matched"], false);
    assert_eq!(
        near["why"], "path `/takipx` is not under `/takip`",
        "{told}"
    );
    assert_eq!(
        exchange((&setup.web, &setup.web), "GET", "/takipx", &[], "").status,
        404
    );

    // The one token of the minute: explained as passing, then taken by the real request.
    let first = explain(
        &setup.admin,
        (setup.port, "sinirli.test"),
        "/takip/TR-1",
        &[],
    );
    assert!(first["answer"].is_null(), "{first}");
    assert_eq!(first["filters"][0]["filter"], "rate_limit");
    assert_eq!(
        exchange((&setup.web, "sinirli.test"), "GET", "/takip/TR-1", &[], "").status,
        200
    );
    let refused = explain(
        &setup.admin,
        (setup.port, "sinirli.test"),
        "/takip/TR-1",
        &[],
    );
    assert_eq!(refused["answer"]["status"], 429, "{refused}");
    let explained_retry = refused["answer"]["retry_after"].as_u64().unwrap();
    let got = exchange((&setup.web, "sinirli.test"), "GET", "/takip/TR-1", &[], "");
    assert_eq!(got.status, 429);
    let real_retry: u64 = got.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(explained_retry, real_retry);

    // The command, offline from the same file and through --admin, tells the same near miss.
    for args in [
        vec!["-c", setup.config.to_str().unwrap()],
        vec!["--admin", &setup.admin],
    ] {
        let output = Command::new(trafik_binary())
            .arg("explain")
            .args(&args)
            .args(["--json", "GET", &format!("http://{}/takipx", setup.web)])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let document: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(document["answer"]["status"], 404, "{document}");
        assert!(
            document["routes"]
                .to_string()
                .contains("is not under `/takip`")
        );
    }
    let text = Command::new(trafik_binary())
        .args([
            "explain",
            "-c",
            setup.config.to_str().unwrap(),
            "-H",
            "x-user: a",
        ])
        .args(["GET", &format!("http://ring.pool:{}/takip/1", setup.port)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("ring point"), "{text}");
    assert!(text.contains("→ backend k"), "{text}");
    setup.proxy.stop();
}

#[test]
fn the_gate_and_jwt_verdicts_are_told_offline_from_the_examples() {
    let explain = |file: &str, args: &[&str]| -> Value {
        let output = Command::new(trafik_binary())
            .args(["explain", "--json", "-c", file])
            .args(args)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let gated = explain(
        "examples/gatekeeper.toml",
        &["POST", "http://127.0.0.1:8476/gizli"],
    );
    assert_eq!(gated["answer"]["status"], 404, "{gated}");
    assert_eq!(gated["filters"][0]["filter"], "gate");
    let tokenless = explain(
        "examples/gatekeeper.toml",
        &["POST", "http://127.0.0.1:8476/takip"],
    );
    assert_eq!(tokenless["answer"]["status"], 401, "{tokenless}");
    let unsigned = explain(
        "examples/offload.toml",
        &[
            "-H",
            "authorization: Bearer a.b.c",
            "GET",
            "http://127.0.0.1:8476/takip/1",
        ],
    );
    assert_eq!(unsigned["answer"]["status"], 401, "{unsigned}");
    assert_eq!(unsigned["filters"][0]["filter"], "jwt", "{unsigned}");
}

/// A token good enough for `[admin] token` (64 bits of estimated entropy and more).
const ADMIN_TOKEN: &str = "3f9c2a71d0b84e6f95a1c7d2e8b03f4a6c19e5d7";

#[test]
fn a_request_with_the_admin_token_gets_its_own_explanation_and_the_upstream_never_sees_the_header()
{
    use trafik_test_support::proxy::answering_recorded;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let answer =
        |name: &str| format!("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-kopya: {name}\r\n\r\nok");
    let (b1, seen1) = runtime.block_on(answering_recorded(answer("k1")));
    let (b2, seen2) = runtime.block_on(answering_recorded(answer("k2")));
    for engine in ["trafik", "hyper"] {
        let [web, admin] = free_ports::<2>();
        let config = format!(
            "[server]\nworkers = 1\nengine = \"{engine}\"\n\n\
             [admin]\nlisten = \"127.0.0.1:{admin}\"\ntoken = \"{ADMIN_TOKEN}\"\n\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{web}\"\n\n\
             [[listener.route]]\npath_prefix = \"/\"\npool = \"rr\"\n\n\
             [[pool]]\nname = \"rr\"\nalgorithm = \"round-robin\"\n\
             backends = [{{ address = \"{b1}\", name = \"k1\" }}, {{ address = \"{b2}\", name = \"k2\" }}]\n"
        );
        let (proxy, _) = serve(&config, web);
        let address = format!("127.0.0.1:{web}");
        let bearer = format!("Bearer {ADMIN_TOKEN}");
        let wrong = format!("Bearer {}", ADMIN_TOKEN.replace('3', "4"));
        for n in 0..12 {
            let path = format!("/takip/TR-{n}");
            let asking: Vec<(&str, &str)> = match n % 4 {
                // With the token: the answer explains itself.
                0 | 1 => vec![("x-trafik-explain", "1"), ("authorization", &bearer)],
                // Without it, or with a wrong one: no explanation, and the header goes no further.
                2 => vec![("x-trafik-explain", "1")],
                _ => vec![("X-Trafik-Explain", "1"), ("authorization", &wrong)],
            };
            let got = exchange((&address, "127.0.0.1"), "GET", &path, &asking, "");
            assert_eq!(got.status, 200, "{engine}: {}", got.body);
            let reached = got.header("x-kopya").unwrap_or_default().to_owned();
            let told = got.header("x-trafik-explain");
            if n % 4 < 2 {
                let told =
                    told.unwrap_or_else(|| panic!("{engine}: request {n} got no explanation"));
                assert!(told.len() <= 2048 && told.is_ascii(), "{told}");
                let told: Value = serde_json::from_str(told).unwrap();
                assert_eq!(
                    told["backend"]["name"],
                    reached.as_str(),
                    "{engine}: {told}"
                );
                assert_eq!(told["pool"], "rr", "{told}");
                assert!(told["retry_budget_left"].as_f64().is_some(), "{told}");
            } else {
                assert!(
                    told.is_none(),
                    "{engine}: request {n} was explained without the token"
                );
            }
        }
        proxy.stop();
    }
    for seen in [seen1, seen2] {
        let seen = String::from_utf8_lossy(&seen.lock().unwrap()).to_ascii_lowercase();
        assert!(
            seen.contains("get /takip/tr-"),
            "the backend saw requests: {seen}"
        );
        assert!(!seen.contains("x-trafik-explain"), "{seen}");
        assert!(
            !seen.contains(ADMIN_TOKEN),
            "the admin token went upstream: {seen}"
        );
    }
}

#[test]
fn the_cache_s_verdict_the_retry_budget_and_what_answers_other_targets_are_told() {
    let [web, admin, b1] = free_ports::<3>();
    let backend = format!("127.0.0.1:{b1}");
    let (_replica, _) = Trafik::start(
        &["upstream", "--name", "k1", "--listen", &backend],
        Stdio::null(),
        "upstream k1 on",
    );
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/varlik");
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [[cache]]\nname = \"kenar\"\ndefault_ttl = \"60s\"\n\n\
         [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{web}\"\n\n\
         [[listener.route]]\npath_prefix = \"/varlik\"\npool = \"p\"\ncache = \"kenar\"\n\n\
         [[listener.route]]\npath_prefix = \"/dosya\"\nstatic = \"{root}\"\n\n\
         [[listener.route]]\npath_prefix = \"/eski\"\nredirect = {{ to = \"https://yeni.example/takip\", status = 308 }}\n\n\
         [[listener.route]]\npath_prefix = \"/\"\npool = \"p\"\n\n\
         [[pool]]\nname = \"p\"\nretries = 2\nbackends = [{{ address = \"{backend}\", name = \"k1\" }}]\n"
    );
    let (proxy, _) = serve(&config, web);
    let (admin, address) = (format!("127.0.0.1:{admin}"), format!("127.0.0.1:{web}"));
    let plain = (web, "127.0.0.1");

    // Nothing stored yet: a miss, under the key the request would be stored under.
    let told = explain(&admin, plain, "/varlik/stil.css", &[]);
    assert_eq!(told["cache"]["verdict"], "miss", "{told}");
    assert!(
        told["cache"]["key"]
            .as_str()
            .unwrap()
            .contains("/varlik/stil.css"),
        "{told}"
    );
    assert_eq!(told["backend"]["name"], "k1", "{told}");
    let got = exchange((&address, "127.0.0.1"), "GET", "/varlik/stil.css", &[], "");
    assert_eq!(got.status, 200);
    // Stored now: fresh, with its age; explaining it moves no counter.
    let caches = || get_json(&admin, "/status")["caches"].clone();
    let before = caches();
    let told = explain(&admin, plain, "/varlik/stil.css", &[]);
    assert_eq!(told["cache"]["verdict"], "fresh", "{told}");
    assert!(told["cache"]["age_seconds"].as_u64().is_some(), "{told}");
    assert_eq!(told["answer"]["status"], 200, "{told}");
    assert!(
        told["backend"].is_null(),
        "the store answers, no backend: {told}"
    );
    assert_eq!(caches(), before, "explaining counted");
    let got = exchange((&address, "127.0.0.1"), "GET", "/varlik/stil.css", &[], "");
    assert!(
        got.header("cache-status").unwrap().contains("hit"),
        "{:?}",
        got.head
    );

    // The pool's retry policy and the budget left (the floor: 10 a second over 10 s).
    let told = explain(&admin, plain, "/takip/TR-1", &[]);
    let retry = &told["pool"]["retry"];
    assert_eq!(retry["retries"], 2, "{told}");
    assert!(retry["budget"]["left"].as_f64().unwrap() >= 100.0, "{told}");

    // Other targets say what answers.
    let file = explain(&admin, plain, "/dosya/bicem.css", &[]);
    assert_eq!(file["answer"]["status"], 200, "{file}");
    assert!(
        file["answer"]["reason"]
            .as_str()
            .unwrap()
            .contains("bicem.css"),
        "{file}"
    );
    let missing = explain(&admin, plain, "/dosya/yok.css", &[]);
    assert_eq!(missing["answer"]["status"], 404, "{missing}");
    for (path, status) in [("/dosya/bicem.css", 200), ("/dosya/yok.css", 404)] {
        assert_eq!(
            exchange((&address, "127.0.0.1"), "GET", path, &[], "").status,
            status
        );
    }
    let moved = explain(&admin, plain, "/eski/x", &[]);
    assert_eq!(moved["answer"]["status"], 308, "{moved}");
    let real = exchange((&address, "127.0.0.1"), "GET", "/eski/x", &[], "");
    let location = real.header("location").unwrap();
    assert_eq!(
        moved["answer"]["reason"],
        format!("a redirect to {location}"),
        "{moved}"
    );
    proxy.stop();
}

/// `GET path` from the admin API, as JSON.
fn get_json(admin: &str, path: &str) -> Value {
    let got = exchange((admin, admin), "GET", path, &[], "");
    assert_eq!(got.status, 200, "{}", got.body);
    serde_json::from_str(&got.body).unwrap()
}

#[test]
fn a_batch_aggregate_is_explained_item_by_item_and_a_bad_list_is_its_400() {
    let explain = |url: &str| -> Value {
        let output = Command::new(trafik_binary())
            .args(["explain", "--json", "-c", "examples/bff.toml", "GET", url])
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let batch = explain("http://127.0.0.1:8474/panel/takip?no=TR-1,TR-2");
    assert_eq!(batch["batch"]["items"], 2, "{batch}");
    assert_eq!(batch["parts"][0]["part"], "durum", "{batch}");
    assert_eq!(
        batch["parts"][0]["paths"],
        json!(["/durum/TR-1", "/durum/TR-2"]),
        "{batch}"
    );
    assert_eq!(
        batch["parts"][1]["paths"],
        json!(["/ucret/TR-1", "/ucret/TR-2"]),
        "{batch}"
    );
    assert!(batch["parts"][1]["pool"]["backend"].is_object(), "{batch}");
    let escaping = explain("http://127.0.0.1:8474/panel/takip?no=TR-1,..");
    assert_eq!(escaping["answer"]["status"], 400, "{escaping}");
    assert!(escaping.get("parts").is_none(), "{escaping}");
    let single = explain("http://127.0.0.1:8474/mobil/takip/TR-9");
    assert_eq!(single["parts"][0]["path"], "/durum/TR-9", "{single}");
}
