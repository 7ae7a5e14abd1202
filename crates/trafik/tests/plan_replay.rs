//! `trafik plan OLD NEW --replay ACCESS_LOG` against a live proxy: 20,000 requests of real
//! clients through three replicas are logged, the log is replayed with a fourth replica added,
//! and the same requests are sent again through the proxy reloaded with it — the replayed moved
//! share must be the measured one within one percentage point. Then `--fail-if` and the rate
//! limiter's count on the log's own clock.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use trafik_test_support::{Trafik, free_port, get_json};

const REQUESTS: usize = 20_000;
/// Distinct hash keys among the requests: each comes back several times.
const KEYS: usize = 5_000;
/// Client connections the requests are spread over.
const CLIENTS: usize = 4;

fn replica(name: &str) -> (Trafik, u16) {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let (replica, _) = Trafik::start(
        &["upstream", "--name", name, "--listen", &address],
        Stdio::null(),
        "on http://",
    );
    (replica, port)
}

fn config(web: u16, admin: u16, replicas: &[(String, u16)], route_extra: &str) -> String {
    let mut text = format!(
        "[server]\naccess_log = true\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{web}\"\n\n\
         [[listener.route]]\npool = \"takip\"\n{route_extra}\n\
         [[pool]]\nname = \"takip\"\nalgorithm = \"consistent-hash\"\nhash_key = \"header:x-anahtar\"\n"
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

/// Sends requests `clients`-way over kept-alive connections, one client per connection in
/// turn; the replica that answered each request, by its index.
fn send_all(web: u16) -> Vec<String> {
    let mut connections: Vec<(TcpStream, BufReader<TcpStream>)> = (0..CLIENTS)
        .map(|_| {
            let stream = TcpStream::connect(("127.0.0.1", web)).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            stream.set_nodelay(true).unwrap();
            (stream.try_clone().unwrap(), BufReader::new(stream))
        })
        .collect();
    (0..REQUESTS)
        .map(|i| {
            let (writer, reader) = &mut connections[i % CLIENTS];
            ask(writer, reader, i).unwrap()
        })
        .collect()
}

fn ask(
    writer: &mut TcpStream,
    reader: &mut BufReader<TcpStream>,
    i: usize,
) -> std::io::Result<String> {
    let request = format!(
        "GET /takip/TR-{i} HTTP/1.1\r\nHost: kargo.test\r\nx-anahtar: musteri-{}\r\n\r\n",
        key_of(i)
    );
    writer.write_all(request.as_bytes())?;
    let mut status = String::new();
    reader.read_line(&mut status)?;
    assert!(status.starts_with("HTTP/1.1 200"), "request {i}: {status}");
    let (mut replica, mut length) = (None, 0usize);
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        match name.to_ascii_lowercase().as_str() {
            "x-kopya" => replica = Some(value.trim().to_owned()),
            "content-length" => length = value.trim().parse().unwrap(),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(replica.expect("x-kopya names the replica"))
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

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trafik-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_replayed_plan_of_a_fourth_replica_is_the_measured_move_within_one_percent() {
    let replicas: Vec<_> = (1..=4).map(|i| replica(&format!("k{i}"))).collect();
    let named: Vec<(String, u16)> = replicas
        .iter()
        .enumerate()
        .map(|(i, (_, port))| (format!("k{}", i + 1), *port))
        .collect();
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

    let stderr = std::fs::File::create(&log).unwrap();
    let (server, _) = Trafik::start(
        &[
            "--log-format",
            "json",
            "serve",
            "-c",
            live.to_str().unwrap(),
        ],
        Stdio::from(stderr),
        "listening",
    );
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
    let planned = plan(&three, &four, &logged, &["--json"]);
    assert!(
        planned.status.success(),
        "{}",
        String::from_utf8_lossy(&planned.stderr)
    );
    let report: Value = serde_json::from_slice(&planned.stdout).unwrap();

    std::fs::copy(&four, &live).unwrap();
    let reload = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["reload", "--admin", &format!("127.0.0.1:{admin}")])
        .output()
        .unwrap();
    assert!(
        reload.status.success(),
        "{}",
        String::from_utf8_lossy(&reload.stderr)
    );
    assert_eq!(
        get_json(&format!("127.0.0.1:{admin}"), "/status")["config"]["generation"],
        2
    );
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
    let key = (n + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    serde_json::json!({
        "timestamp": "2026-12-02T12:00:00.000000Z",
        "level": "INFO",
        "target": "trafik::access",
        "fields": {
            "client": client, "method": "GET", "host": "kargo.test", "uri": "/takip/TR-1",
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
