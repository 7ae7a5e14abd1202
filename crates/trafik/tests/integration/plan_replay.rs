//! `trafik plan OLD NEW --replay ACCESS_LOG` against a live proxy: 20,000 requests of real
//! clients through three replicas are logged, the log is replayed with a fourth replica added,
//! and the same requests are sent again through the proxy reloaded with it — the replayed moved
//! share must be the measured one within one percentage point. Then `--fail-if` and the rate
//! limiter's count on the log's own clock.

use std::collections::HashMap;
use std::io::BufReader;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use trafik_test_support::{Trafik, free_port, reload, replica};

const REQUESTS: usize = 20_000;
/// Distinct hash keys among the requests: each comes back several times.
const KEYS: usize = 5_000;
/// Client connections the requests are spread over.
const CLIENTS: usize = 4;

/// Replicas `k1`…`kN`, each with its name and port.
fn replicas(count: usize) -> Vec<(Trafik, (String, u16))> {
    (1..=count)
        .map(|i| {
            let name = format!("k{i}");
            let (replica, port) = replica(&name);
            (replica, (name, port))
        })
        .collect()
}

fn config(web: u16, admin: u16, replicas: &[(String, u16)], route_extra: &str) -> String {
    keyed_config(
        web,
        admin,
        replicas,
        route_extra,
        "algorithm = \"consistent-hash\"\nhash_key = \"header:x-anahtar\"\n",
    )
}

fn keyed_config(
    web: u16,
    admin: u16,
    replicas: &[(String, u16)],
    route_extra: &str,
    placement: &str,
) -> String {
    let mut text = format!(
        "[server]\naccess_log = true\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{web}\"\n\n\
         [[listener.route]]\npool = \"takip\"\n{route_extra}\n\
         [[pool]]\nname = \"takip\"\n{placement}"
    );
    for (name, port) in replicas {
        text.push_str(&format!(
            "\n[[pool.backends]]\naddress = \"127.0.0.1:{port}\"\nname = \"{name}\"\n"
        ));
    }
    text
}

/// The key of request `i`: the keys in a shuffled order, each several times.
fn key_of(i: usize) -> usize {
    (i * 7919) % KEYS
}

/// A client connection from its own loopback address (127.0.0.`10 + n`), kept alive.
fn client(web: u16, n: usize) -> (TcpStream, BufReader<TcpStream>) {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let from = SocketAddr::from(([127, 0, 0, 10 + n as u8], 0));
    socket.bind(&from.into()).unwrap();
    socket
        .connect(&SocketAddr::from(([127, 0, 0, 1], web)).into())
        .unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.set_nodelay(true).unwrap();
    (stream.try_clone().unwrap(), BufReader::new(stream))
}

/// Sends the requests over `CLIENTS` kept-alive connections of as many client addresses, in
/// turn; the replica that answered each.
fn send_all(web: u16) -> Vec<String> {
    let mut clients: Vec<_> = (0..CLIENTS).map(|n| client(web, n)).collect();
    (0..REQUESTS)
        .map(|i| {
            let (writer, reader) = &mut clients[i % CLIENTS];
            let request = format!(
                "GET /takip/TR-{i} HTTP/1.1\r\nHost: kargo.test\r\nx-anahtar: musteri-{}\r\n\r\n",
                key_of(i)
            );
            exchange(writer, reader, &request).unwrap()["x-kopya"].clone()
        })
        .collect()
}

/// Sends one request on a kept-alive connection; the answer's header fields (status 200
/// required).
fn exchange(
    writer: &mut TcpStream,
    reader: &mut BufReader<TcpStream>,
    request: &str,
) -> std::io::Result<HashMap<String, String>> {
    let (status, fields) = trafik_test_support::exchange(writer, reader, request)?;
    assert_eq!(status, 200, "{request}");
    Ok(fields)
}

fn access_lines(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains("\"trafik::access\""))
        .count()
}

/// Waits (generously) for `count` access lines: each is written once its answer has ended.
fn wait_for_lines(log: &Path, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while access_lines(log) < count {
        assert!(
            Instant::now() < deadline,
            "{} of {count} access lines",
            access_lines(log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn plan(old: &Path, new: &Path, log: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trafik"))
        .arg("plan")
        .arg(old)
        .arg(new)
        .arg("--replay")
        .arg(log)
        .args(extra)
        .output()
        .unwrap()
}

/// `trafik serve -c CONFIG` with its JSON log (the access lines among it) written to `log`.
fn serve_logged(config: &Path, log: &Path) -> Trafik {
    let stderr = std::fs::File::create(log).unwrap();
    let config = config.to_str().unwrap();
    let args = ["--log-format", "json", "serve", "-c", config];
    Trafik::start(&args, Stdio::from(stderr), "listening").0
}

/// `trafik plan OLD NEW --replay LOG --json`, which must succeed: its report.
fn replayed(old: &Path, new: &Path, log: &Path) -> Value {
    let planned = plan(old, new, log, &["--json"]);
    assert!(
        planned.status.success(),
        "{}",
        String::from_utf8_lossy(&planned.stderr)
    );
    serde_json::from_slice(&planned.stdout).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trafik-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_replayed_plan_of_a_fourth_replica_is_the_measured_move_within_one_percent() {
    let replicas = replicas(4);
    let named: Vec<(String, u16)> = replicas.iter().map(|(_, named)| named.clone()).collect();
    let (web, admin) = (free_port(), free_port());
    let dir = scratch("plan-replay");
    let (live, three, four, log) = (
        dir.join("live.toml"),
        dir.join("three.toml"),
        dir.join("four.toml"),
        dir.join("access.log"),
    );
    std::fs::write(&three, config(web, admin, &named[..3], "")).unwrap();
    std::fs::write(&four, config(web, admin, &named, "")).unwrap();
    std::fs::copy(&three, &live).unwrap();

    let server = serve_logged(&live, &log);
    let before = send_all(web);
    wait_for_lines(&log, REQUESTS);
    // The log as it stood before the change: the traffic the plan is asked about.
    let logged = dir.join("before.log");
    std::fs::copy(&log, &logged).unwrap();

    let text = std::fs::read_to_string(&logged).unwrap();
    assert!(
        !text.contains("musteri-"),
        "the log keeps the rule's key, never the header's value"
    );
    let report = replayed(&three, &four, &logged);

    std::fs::copy(&four, &live).unwrap();
    reload(&format!("127.0.0.1:{admin}"));
    let after = send_all(web);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);

    // Measured: the keys (and requests) whose replica changed.
    let mut keys: HashMap<usize, bool> = HashMap::new();
    let mut moved_requests = 0;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_ne!(b, "k4");
        *keys.entry(key_of(i)).or_default() |= b != a;
        moved_requests += usize::from(b != a);
    }
    let measured_keys = keys.values().filter(|&&m| m).count() as f64 * 100.0 / KEYS as f64;
    let measured_requests = moved_requests as f64 * 100.0 / REQUESTS as f64;

    assert_eq!(report["requests"], REQUESTS);
    assert_eq!(
        report["old_agrees_with_log"]["percent"], 100.0,
        "the old configuration replayed sends every request where it went: {}",
        report["old_agrees_with_log"]
    );
    let metrics = &report["metrics"];
    assert_eq!(metrics["keys_moved"]["of"], KEYS);
    let planned_keys = metrics["keys_moved"]["percent"].as_f64().unwrap();
    let planned_requests = metrics["moved"]["percent"].as_f64().unwrap();
    eprintln!(
        "replayed plan: keys {planned_keys:.3} %, requests {planned_requests:.3} %; \
         measured: keys {measured_keys:.3} %, requests {measured_requests:.3} %"
    );
    assert!(measured_keys > 10.0, "a fourth replica takes keys");
    assert!(
        (planned_keys - measured_keys).abs() <= 1.0,
        "keys: plan {planned_keys} vs live {measured_keys}"
    );
    assert!(
        (planned_requests - measured_requests).abs() <= 1.0,
        "requests: plan {planned_requests} vs live {measured_requests}"
    );
    assert_eq!(metrics["route_changed"]["count"], 0);
    let pool = &report["pools"][0];
    assert_eq!(pool["pool"], "takip");
    for movement in pool["moves"].as_array().unwrap() {
        assert_eq!(movement["to"], "k4", "keys move only to the new replica");
    }
}

/// An access line as `trafik serve --access-log --log-format json` writes it; request `n`'s
/// key spread over the ring as hashed keys are.
fn line(client: &str, micros: u64, n: u64) -> String {
    access_line(client, micros, n, "/takip/TR-1")
}

fn access_line(client: &str, micros: u64, n: u64, uri: &str) -> String {
    let key = (n + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    serde_json::json!({
        "timestamp": "2026-12-02T12:00:00.000000Z",
        "level": "INFO",
        "target": "trafik::access",
        "fields": {
            "client": client, "method": "GET", "host": "kargo.test", "uri": uri,
            "status": 200, "backend": "", "key": format!("{key:#018x}"), "sticky": "",
            "started_unix_micros": micros, "micros": 100,
        },
    })
    .to_string()
}

#[test]
fn fail_if_exits_1_naming_the_figure_and_a_new_rate_limit_is_counted_on_the_logs_clock() {
    let dir = scratch("plan-replay-limit");
    let ports: Vec<(String, u16)> = (1..=3).map(|i| (format!("k{i}"), 9000 + i)).collect();
    let (web, admin) = (free_port(), free_port());
    let old = dir.join("old.toml");
    let limited = dir.join("limited.toml");
    let grown = dir.join("grown.toml");
    std::fs::write(&old, config(web, admin, &ports, "")).unwrap();
    std::fs::write(
        &limited,
        config(
            web,
            admin,
            &ports,
            "\n[listener.route.rate_limit]\nrate = 1\nper = \"1s\"\nburst = 3\nkey = \"client-ip\"\n",
        ),
    )
    .unwrap();
    let mut four = ports.clone();
    four.push(("k4".into(), 9004));
    std::fs::write(&grown, config(web, admin, &four, "")).unwrap();

    // Client A: ten requests within one millisecond, then one two seconds later (two tokens
    // back); client B: two requests. A burst of 3 at 1/s refuses 7 of A's first ten, none
    // after, none of B's.
    let start = 1_800_000_000_000_000u64;
    let mut lines: Vec<String> = (0..10)
        .map(|i| line("10.0.0.1:4000", start + i * 100, i))
        .collect();
    lines.push(line("10.0.0.1:4001", start + 2_000_000, 10));
    lines.push(line("10.0.0.2:4000", start + 50, 11));
    lines.push(line("10.0.0.2:4000", start + 150, 12));
    lines.push("trafik's own log line, not an access line".into());
    let log = dir.join("access.log");
    std::fs::write(&log, lines.join("\n")).unwrap();

    let limit = plan(&old, &limited, &log, &["--json", "--fail-if", "refused>0"]);
    assert_eq!(
        limit.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&limit.stderr)
    );
    let stderr = String::from_utf8_lossy(&limit.stderr);
    assert!(stderr.contains("refused 7 > 0"), "{stderr}");
    let report: Value = serde_json::from_slice(&limit.stdout).unwrap();
    assert_eq!(report["metrics"]["refused"]["count"], 7);
    assert_eq!(report["metrics"]["newly_refused"]["count"], 7);
    let by_client = &report["rate_limits"][0]["newly_refused_by_client"];
    assert_eq!(
        by_client,
        &serde_json::json!([{"client": "10.0.0.1", "requests": 7}])
    );

    // The same limit passes a bound it stays under; a fourth replica moves keys past 5 %.
    let under = plan(&old, &limited, &log, &["--fail-if", "refused>=60%"]);
    assert_eq!(under.status.code(), Some(0));
    let text = String::from_utf8_lossy(&under.stdout);
    assert!(text.contains("10.0.0.1: 7 more refused"), "{text}");
    let moved = plan(&old, &grown, &log, &["--fail-if", "moved>5%,refused>0"]);
    let stderr = String::from_utf8_lossy(&moved.stderr);
    assert_eq!(moved.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("fails: moved"), "{stderr}");
    assert!(!stderr.contains("fails: refused"), "{stderr}");
    // An unknown metric is an error of the command (exit 2), not a failing plan.
    let unknown = plan(&old, &grown, &log, &["--fail-if", "movd>5%"]);
    assert_eq!(unknown.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(stderr.contains("unknown metric \"movd\""), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Cookie stickiness on the pipeline's path (a route that sets a response header): each client
/// binds once and comes back with its cookie; a replica removed moves exactly the sessions
/// bound to it, and the replayed plan counts the same sessions as the live proxy moves.
#[test]
fn the_replayed_plan_moves_the_sticky_sessions_the_live_proxy_moves() {
    const STICKY_CLIENTS: usize = 24;
    let replicas = replicas(3);
    let named: Vec<(String, u16)> = replicas.iter().map(|(_, named)| named.clone()).collect();
    let (web, admin) = (free_port(), free_port());
    let dir = scratch("plan-replay-sticky");
    let (live, three, two, log) = (
        dir.join("live.toml"),
        dir.join("three.toml"),
        dir.join("two.toml"),
        dir.join("access.log"),
    );
    let route = "response_headers = [\"x-yol: pipeline\"]\n";
    let sticky = "algorithm = \"round-robin\"\n\n[pool.sticky]\nmode = \"cookie\"\ncookie = \"oturum\"\nsecret = \"replay\"\n";
    std::fs::write(&three, keyed_config(web, admin, &named, route, sticky)).unwrap();
    let without_k2 = [named[0].clone(), named[2].clone()];
    std::fs::write(&two, keyed_config(web, admin, &without_k2, route, sticky)).unwrap();
    std::fs::copy(&three, &live).unwrap();

    let server = serve_logged(&live, &log);
    let request =
        |cookie: &str| format!("GET /takip/TR-1 HTTP/1.1\r\nHost: kargo.test\r\n{cookie}\r\n");
    let mut bound = Vec::new();
    for n in 0..STICKY_CLIENTS {
        let (mut writer, mut reader) = client(web, n);
        let first = exchange(&mut writer, &mut reader, &request("")).unwrap();
        assert_eq!(first["x-yol"], "pipeline");
        let cookie = first["set-cookie"].split(';').next().unwrap().to_owned();
        for _ in 0..3 {
            let again = exchange(
                &mut writer,
                &mut reader,
                &request(&format!("Cookie: {cookie}\r\n")),
            )
            .unwrap();
            assert_eq!(again["x-kopya"], first["x-kopya"], "the cookie binds");
        }
        bound.push((cookie, first["x-kopya"].clone()));
    }
    wait_for_lines(&log, STICKY_CLIENTS * 4);
    let logged = dir.join("before.log");
    std::fs::copy(&log, &logged).unwrap();
    let report = replayed(&three, &two, &logged);

    std::fs::copy(&two, &live).unwrap();
    reload(&format!("127.0.0.1:{admin}"));
    let mut measured = 0;
    for (n, (cookie, before)) in bound.iter().enumerate() {
        let (mut writer, mut reader) = client(web, n);
        let after = exchange(
            &mut writer,
            &mut reader,
            &request(&format!("Cookie: {cookie}\r\n")),
        )
        .unwrap();
        measured += usize::from(after["x-kopya"] != *before);
        assert_eq!(after["x-kopya"] != *before, before == "k2");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);

    let sessions = &report["metrics"]["sticky_moved"];
    eprintln!(
        "replayed plan: sticky sessions moved {sessions}; measured {measured} of {STICKY_CLIENTS}"
    );
    assert!(measured > 0, "round robin bound some clients to k2");
    assert_eq!(sessions["of"], STICKY_CLIENTS);
    assert_eq!(sessions["count"], measured);
    // The bound requests (three per client) move with their sessions; first requests are
    // bound by nothing and do not count.
    assert_eq!(report["metrics"]["moved"]["of"], STICKY_CLIENTS * 3);
    assert_eq!(report["metrics"]["moved"]["count"], measured * 3);
    for movement in report["pools"][0]["moves"].as_array().unwrap() {
        assert_eq!(movement["from"], "k2");
    }
}

/// A weighted DNS name (b34, b35, b06) with `weights`, beside one route.
fn dns_config(weights: [u32; 3]) -> String {
    let mut text = config(free_port(), free_port(), &[("k1".into(), 9001)], "");
    text.push_str("\n[dns]\nlisten = \"127.0.0.1:0\"\nquery_log = true\n");
    for (name, address) in [
        ("b34", "127.0.0.34"),
        ("b35", "127.0.0.35"),
        ("b06", "127.0.0.6"),
    ] {
        text.push_str(&format!(
            "\n[[dns.region]]\nname = \"{name}\"\naddresses = [\"{address}\"]\n"
        ));
    }
    text.push_str(&format!(
        "\n[[dns.zone]]\norigin = \"kargo.test.\"\nttl = 300\nname_servers = [\"ns1\"]\n\n\
         [[dns.zone.record]]\nname = \"ns1\"\ntype = \"A\"\nvalue = \"127.0.0.1\"\n\n\
         [[dns.zone.name]]\nname = \"api\"\npolicy = \"weighted\"\nttl = 60\n\
         weights = {{ b34 = {}, b35 = {}, b06 = {} }}\n",
        weights[0], weights[1], weights[2]
    ));
    text
}

/// The DNS query log's lines in the same file are replayed too: each logged query decided by
/// both configurations' own authority, the share per region for the clients seen.
#[test]
fn the_dns_query_log_in_the_same_file_is_replayed_for_the_clients_seen() {
    let dir = scratch("plan-replay-dns");
    let (old, new) = (dir.join("old.toml"), dir.join("new.toml"));
    std::fs::write(&old, dns_config([5, 3, 2])).unwrap();
    std::fs::write(&new, dns_config([6, 4, 0])).unwrap();
    let mut lines = vec![line("10.0.0.1:4000", 1_800_000_000_000_000, 1)];
    for i in 0..1000 {
        let subnet = match i % 2 {
            0 => "None".to_owned(),
            _ => "Some(\"10.9.0.0/24\")".to_owned(),
        };
        lines.push(
            serde_json::json!({
                "target": "trafik::dns",
                "fields": {
                    "message": "dns query", "client": format!("127.0.0.1:{}", 40000 + i),
                    "subnet": subnet, "name": "API.kargo.test.", "kind": "A",
                },
            })
            .to_string(),
        );
    }
    let log = dir.join("access.log");
    std::fs::write(&log, lines.join("\n")).unwrap();
    let report = replayed(&old, &new, &log);
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(report["dns_queries"], 1000);
    let name = &report["dns"][0];
    assert_eq!(name["name"], "api.kargo.test.");
    assert_eq!(name["queries"], 1000);
    let before = name["share_before"]["b06"].as_f64().unwrap();
    assert!(
        (0.1..0.3).contains(&before),
        "b06 answered {before} of the queries"
    );
    assert!(name["share_after"].get("b06").is_none(), "{name}");
    assert!(name["moved"].as_u64().unwrap() > 0);
    assert!((name["share_deviation"].as_f64().unwrap() - before).abs() < 0.1);
}

/// A cache's shorter freshness, on the log's clock: copies fresh under the old `default_ttl` at
/// the log's end but stale under the new one, and the origin fetches each would make.
#[test]
fn a_shorter_cache_freshness_is_counted_on_the_logs_clock() {
    let dir = scratch("plan-replay-cache");
    let cached = |ttl: &str| {
        let mut text = config(
            free_port(),
            free_port(),
            &[("k1".into(), 9001)],
            "cache = \"kenar\"\n",
        );
        text.push_str(&format!(
            "\n[[cache]]\nname = \"kenar\"\ndefault_ttl = \"{ttl}\"\n"
        ));
        text
    };
    let (old, new) = (dir.join("old.toml"), dir.join("new.toml"));
    std::fs::write(&old, cached("60s")).unwrap();
    std::fs::write(&new, cached("10s")).unwrap();
    let second = 1_000_000u64;
    let start = 1_800_000_000_000_000u64;
    // A: fetched at 0, fresh at 5 s under both; B: fetched at 0, fresh at 50 s only under 60 s;
    // C: fetched at the end. At 55 s, A's and B's copies are fresh under 60 s, stale under 10 s.
    let lines = [
        access_line("10.0.0.1:1", start, 1, "/takip/A"),
        access_line("10.0.0.1:1", start + 1, 2, "/takip/B"),
        access_line("10.0.0.1:1", start + 5 * second, 1, "/takip/A"),
        access_line("10.0.0.1:1", start + 50 * second, 2, "/takip/B"),
        access_line("10.0.0.1:1", start + 55 * second, 3, "/takip/C"),
    ];
    let log = dir.join("access.log");
    std::fs::write(&log, lines.join("\n")).unwrap();
    let report = replayed(&old, &new, &log);
    let _ = std::fs::remove_dir_all(&dir);

    let cache = &report["caches"][0];
    assert_eq!(cache["cache"], "kenar");
    assert_eq!(cache["entries"], 3);
    assert_eq!(cache["rekeyed"], 0);
    assert_eq!(cache["expired_by_ttl"], 2, "{cache}");
    assert_eq!(cache["origin_fetches_before"], 3);
    assert_eq!(cache["origin_fetches_after"], 4);
    assert_eq!(report["metrics"]["cache_invalidated"]["count"], 2);
}
