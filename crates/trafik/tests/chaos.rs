//! Chaos under load: `trafik load` through quick mode in front of three replicas while one of
//! them dies, hangs or fails half its requests. Each run is bounded (a few seconds at a rate a
//! debug build holds on a shared machine); the figures at 2,000 req/s come from the same
//! scenarios run by hand (README, "Passive health").

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::thread;
use std::time::{Duration, Instant};

use trafik_test_support::{Proxy, Upstream, get_json, json, load};

/// A free loopback address for an admin API.
fn free_address() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// Quick mode in front of `backends`, with its admin API on the returned address.
fn proxy(backends: &[String], extra: &[&str]) -> (Proxy, String) {
    let admin = free_address();
    let mut args = vec!["--admin", admin.as_str()];
    for backend in backends {
        args.extend(["--to", backend.as_str()]);
    }
    args.extend_from_slice(extra);
    (Proxy::start(&[], &args), admin)
}

/// `trafik load` at `rate` for `seconds` on a thread of its own; its JSON report when joined.
fn load_in_background(
    proxy: &Proxy,
    rate: u32,
    seconds: u32,
) -> thread::JoinHandle<serde_json::Value> {
    let url = format!("http://{}/takip/TR-{{n}}", proxy.address);
    thread::spawn(move || {
        let (rate, duration) = (rate.to_string(), format!("{seconds}s"));
        let output = load(&[
            &url,
            "--rate",
            &rate,
            "--duration",
            &duration,
            "--timeout",
            "5s",
            "--json",
        ]);
        json(&output)
    })
}

fn failed(report: &serde_json::Value) -> u64 {
    report["errors"]
        .as_object()
        .unwrap()
        .values()
        .map(|count| count.as_u64().unwrap())
        .sum()
}

fn backend<'a>(status: &'a serde_json::Value, address: &str) -> &'a serde_json::Value {
    status["pools"][0]["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["address"] == address)
        .unwrap()
}

/// Polls `/status` until `accept` holds, for at most 15 s.
fn wait_for(admin: &str, accept: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = get_json(admin, "/status");
        if accept(&status) || Instant::now() > deadline {
            return status;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// kill -9 at 3 s, the same address back at 6 s: not one GET fails. `extra` turns active checks
/// on for the second run.
fn kill_and_restart(extra: &[&str]) {
    let mut replicas: Vec<Upstream> = (0..3).map(|_| Upstream::start(&[])).collect();
    let addresses: Vec<String> = replicas.iter().map(|r| r.address.clone()).collect();
    let (proxy, admin) = proxy(&addresses, extra);
    let started = Instant::now();
    let running = load_in_background(&proxy, 200, 9);
    thread::sleep(Duration::from_secs(3));
    drop(replicas.remove(1)); // SIGKILL: connections reset, nothing drained
    // Taken out by passive health, or by the active checks when they are on (they see it first).
    let out = |s: &serde_json::Value| {
        let b = backend(s, &addresses[1]);
        b["ejected"] == true || b["healthy"] == false
    };
    let taken_out = wait_for(&admin, out);
    thread::sleep(Duration::from_secs(6).saturating_sub(started.elapsed()));
    let _back = Upstream::start_at(&addresses[1], &[]);
    let report = running.join().unwrap();
    assert_eq!(failed(&report), 0, "{report}");
    assert!(report["completed"].as_u64().unwrap() >= 1_700, "{report}");
    assert!(out(&taken_out), "{taken_out}");
    // Its ejection ends (or its checks pass) and, answering again, it stays in.
    let returned = wait_for(&admin, |s| !out(s));
    assert!(!out(&returned), "{returned}");
    eprintln!(
        "kill -9 {extra:?}: {} sent, {} failed, p99 {} ms, retries {}, ejections {}",
        report["sent"],
        failed(&report),
        report["latency_ms"]["p99"],
        returned["pools"][0]["retries"],
        backend(&returned, &addresses[1])["ejections"]
    );
}

#[test]
fn a_replica_killed_and_restarted_under_load_fails_no_get() {
    kill_and_restart(&[]);
}

#[test]
fn a_replica_killed_and_restarted_under_load_fails_no_get_with_active_checks() {
    kill_and_restart(&["--health-path", "/saglik", "--health-interval", "200ms"]);
}

/// A backend that accepts connections and reads requests but never answers.
fn silent_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut stream = stream;
                let mut sink = [0u8; 4096];
                while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    address
}

/// A backend that answers 500 to every other request, 200 to the rest.
fn half_failing_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let turn = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let turn = turn.clone();
            thread::spawn(move || {
                let mut stream = stream;
                let mut buffer = [0u8; 4096];
                let mut seen = Vec::new();
                while let Ok(read) = stream.read(&mut buffer) {
                    if read == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buffer[..read]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let n = turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let status = if n.is_multiple_of(2) { 500 } else { 200 };
                        let answer = format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\n\r\nok");
                        if stream.write_all(answer.as_bytes()).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    address
}

#[test]
fn a_replica_that_never_answers_is_retried_elsewhere_and_ejected() {
    let replicas: Vec<Upstream> = (0..2).map(|_| Upstream::start(&[])).collect();
    let silent = silent_backend().to_string();
    let mut addresses: Vec<String> = replicas.iter().map(|r| r.address.clone()).collect();
    addresses.push(silent.clone());
    let (proxy, admin) = proxy(&addresses, &["--response-timeout", "300ms"]);
    let report = load_in_background(&proxy, 100, 5).join().unwrap();
    assert_eq!(failed(&report), 0, "{report}");
    let status = get_json(&admin, "/status");
    let hung = backend(&status, &silent);
    assert_eq!(hung["ejection_reason"], "consecutive-errors", "{hung}");
    assert!(hung["ejections"].as_u64().unwrap() >= 1, "{hung}");
    eprintln!(
        "silent replica: {} sent, p99 {} ms (per-try timeout 300 ms), retries {}",
        report["sent"], report["latency_ms"]["p99"], status["pools"][0]["retries"]
    );
}

#[test]
fn a_replica_failing_half_its_requests_is_ejected_by_success_rate() {
    let replicas: Vec<Upstream> = (0..2).map(|_| Upstream::start(&[])).collect();
    let flaky = half_failing_backend().to_string();
    let mut addresses: Vec<String> = replicas.iter().map(|r| r.address.clone()).collect();
    addresses.push(flaky.clone());
    let (proxy, admin) = proxy(&addresses, &[]);
    let report = load_in_background(&proxy, 100, 3).join().unwrap();
    let status = get_json(&admin, "/status");
    let flaky = backend(&status, &flaky);
    assert_eq!(flaky["ejection_reason"], "success-rate", "{flaky}");
    // Only the requests it took before its ejection failed.
    let failures = report["errors"]["status_5xx"].as_u64().unwrap();
    assert!((1..=20).contains(&failures), "{failures} failed: {report}");
    eprintln!(
        "half-failing replica: {} sent, {failures} answered 500 before the ejection",
        report["sent"]
    );
}

#[test]
fn the_retry_budget_holds_while_every_backend_fails() {
    let closed: Vec<String> = (0..3).map(|_| free_address()).collect();
    let (proxy, admin) = proxy(&closed, &["--retries", "2"]);
    let report = load_in_background(&proxy, 100, 3).join().unwrap();
    let pool = &get_json(&admin, "/status")["pools"][0];
    let requests = report["sent"].as_u64().unwrap();
    let retries = pool["retries"].as_u64().unwrap();
    // A fifth of the requests plus the floor of 10 a second over the 10 s window.
    assert!(
        retries as f64 <= 0.2 * requests as f64 + 100.0 + 2.0,
        "{retries} retries for {requests} requests: {pool}"
    );
    assert!(pool["retries_refused"].as_u64().unwrap() > 0, "{pool}");
    eprintln!(
        "every backend down: {requests} requests, {retries} retries, {} refused by the budget",
        pool["retries_refused"]
    );
}
