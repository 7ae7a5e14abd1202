//! Binary upgrade without loss: under a steady load of about 200 requests a second, SIGUSR2
//! makes `trafik serve` start its successor on the same listening sockets, and the old process
//! drains and exits; no request fails or is reset on the way.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Upstream;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One request on a connection of its own: `Ok` only for a whole 200 answer.
fn request(address: &str) -> Result<(), String> {
    let mut stream = TcpStream::connect(address).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /takip/TR-1 HTTP/1.1\r\nHost: yukseltme\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    let answer = String::from_utf8_lossy(&answer);
    if answer.starts_with("HTTP/1.1 200") && answer.contains("TR-1") {
        Ok(())
    } else {
        Err(format!("answer: {answer:?}"))
    }
}

/// A process this test started (directly or as the successor it asked for), ended by its id.
struct Pid(u32);

impl Drop for Pid {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
}

#[test]
fn an_upgrade_under_load_loses_no_request() {
    let upstream = Upstream::start(&[]);
    let (web, admin) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("trafik-upgrade-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("trafik.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nworkers = 2\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{web}\"\n\n\
             [[listener.route]]\npath_prefix = \"/\"\npool = \"takip\"\n\n\
             [[pool]]\nname = \"takip\"\nbackends = [{{ address = \"{}\" }}]\n",
            upstream.address
        ),
    )
    .unwrap();
    let log = dir.join("stdout.log");
    let mut old = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _old_guard = Pid(old.id());
    let printed = || std::fs::read_to_string(&log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !printed().contains("listening on") {
        assert!(
            Instant::now() < deadline,
            "trafik did not start: {}",
            printed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let address = format!("127.0.0.1:{web}");
    request(&address).unwrap();

    // Four clients at 50 requests a second each, for three seconds.
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (address, stop) = (address.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut sent, mut failed) = (0, Vec::new());
                let start = Instant::now();
                while !stop.load(Ordering::Relaxed) && sent < 150 {
                    let due = start + Duration::from_millis(20) * sent;
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    if let Err(error) = request(&address) {
                        failed.push(error);
                    }
                    sent += 1;
                }
                (sent, failed)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1000));
    Command::new("kill")
        .args(["-USR2", &old.id().to_string()])
        .status()
        .unwrap();
    let exit = old.wait().unwrap();
    let successor: u32 = printed()
        .lines()
        .find_map(|line| line.strip_prefix("upgrade: process "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no successor named: {}", printed()));
    let _successor_guard = Pid(successor);
    assert!(exit.success(), "the old process drains and exits 0: {exit}");
    let mut results = Vec::new();
    for client in clients {
        results.push(client.join().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    let sent: u32 = results.iter().map(|(sent, _)| sent).sum();
    let failed: Vec<&String> = results.iter().flat_map(|(_, failed)| failed).collect();
    eprintln!(
        "{sent} requests, {} failed, through the upgrade",
        failed.len()
    );
    assert!(
        sent >= 400,
        "the load ran through the upgrade: {sent} requests"
    );
    assert!(
        failed.is_empty(),
        "{} of {sent} failed: {failed:?}",
        failed.len()
    );
    // Only the successor is left, and it serves.
    assert!(running(successor));
    request(&address).unwrap();
    let status = common::get_json(&format!("127.0.0.1:{admin}"), "/status");
    assert_eq!(status["config"]["generation"], 1, "{status}");
    drop(_successor_guard);
    let deadline = Instant::now() + Duration::from_secs(20);
    while running(successor) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    upstream.stop();
}
