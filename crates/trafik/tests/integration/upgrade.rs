//! Binary upgrade without loss: under a steady load of about 200 requests a second, SIGUSR2
//! makes `trafik serve` start its successor on the same listening sockets, and the old process
//! drains and exits; no request fails or is reset on the way, whether each comes on a
//! connection of its own or clients keep their connections alive through the upgrade. An h3
//! listener's UDP sockets go to the successor too.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use trafik_test_support::{Upstream, free_port};

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

/// `trafik serve --config config`, its output in `log` (and its errors in `errors`, if
/// given), once it says it listens.
fn serve(config: &Path, log: &Path, errors: Option<&Path>) -> Child {
    let errors = match errors {
        Some(path) => Stdio::from(std::fs::File::create(path).unwrap()),
        None => Stdio::null(),
    };
    let old = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(errors)
        .spawn()
        .unwrap();
    let printed = || std::fs::read_to_string(log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !printed().contains("listening on") {
        assert!(
            Instant::now() < deadline,
            "trafik did not start: {}",
            printed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    old
}

/// The process id in the old process's `upgrade: process PID serves now` line, once printed.
fn successor_in(printed: &str) -> Option<u32> {
    printed
        .lines()
        .find_map(|line| line.strip_prefix("upgrade: process "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
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
    let mut old = serve(&config, &log, None);
    let _old_guard = Pid(old.id());
    let printed = || std::fs::read_to_string(&log).unwrap_or_default();
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
    let successor =
        successor_in(&printed()).unwrap_or_else(|| panic!("no successor named: {}", printed()));
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
    let status = trafik_test_support::get_json(&format!("127.0.0.1:{admin}"), "/status");
    assert_eq!(status["config"]["generation"], 1, "{status}");
    drop(_successor_guard);
    let deadline = Instant::now() + Duration::from_secs(20);
    while running(successor) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    upstream.stop();
}

/// One kept-alive client: a request, its whole answer, a pause, and again, on one connection
/// for as long as the server keeps it (a new one after an answer with `Connection: close`).
/// Every `split`-th request sends its head in two writes, so that some requests are only half
/// arrived when the drain begins. Returns how many it sent and why those that failed did.
fn kept_alive_client(
    address: &str,
    pause: Duration,
    split: u32,
    stop: &AtomicBool,
) -> (u32, Vec<String>) {
    let (mut sent, mut failed) = (0, Vec::new());
    let mut connection: Option<TcpStream> = None;
    while !stop.load(Ordering::Relaxed) {
        let stream = match &mut connection {
            Some(stream) => stream,
            None => match TcpStream::connect(address) {
                Ok(stream) => {
                    stream
                        .set_read_timeout(Some(Duration::from_secs(20)))
                        .unwrap();
                    connection.insert(stream)
                }
                Err(error) => {
                    failed.push(format!("connect: {error}"));
                    sent += 1;
                    continue;
                }
            },
        };
        let head = format!("GET /takip/TR-{sent} HTTP/1.1\r\nHost: yukseltme\r\n\r\n");
        let written = if split > 0 && sent % split == 0 {
            let (first, second) = head.as_bytes().split_at(20);
            stream.write_all(first).and_then(|()| {
                std::thread::sleep(pause);
                stream.write_all(second)
            })
        } else {
            stream.write_all(head.as_bytes())
        };
        sent += 1;
        let answer = written
            .map_err(|e| format!("send: {e}"))
            .and_then(|()| read_answer(stream));
        match answer {
            Ok(close) => {
                if close {
                    connection = None;
                }
            }
            Err(error) => {
                failed.push(format!("request {}: {error}", sent - 1));
                connection = None;
            }
        }
        std::thread::sleep(pause);
    }
    (sent, failed)
}

/// Reads one whole answer framed by its length: whether it says `Connection: close`, or why
/// it could not be read.
fn read_answer(stream: &mut TcpStream) -> Result<bool, String> {
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Err(format!("closed after {} bytes of the head", received.len())),
            Ok(n) => received.extend_from_slice(&chunk[..n]),
            Err(error) => return Err(format!("read: {error}")),
        }
    };
    let head = String::from_utf8_lossy(&received[..head_end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        return Err(format!("answer: {head:?}"));
    }
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .and_then(|length| length.trim().parse().ok())
        .ok_or_else(|| format!("no length: {head:?}"))?;
    while received.len() < head_end + length {
        match stream.read(&mut chunk) {
            Ok(0) => return Err("closed in the body".into()),
            Ok(n) => received.extend_from_slice(&chunk[..n]),
            Err(error) => return Err(format!("read: {error}")),
        }
    }
    Ok(head.contains("\r\nconnection: close\r\n"))
}

/// Sixteen clients keep their connections alive, each with a request in flight most of the
/// time (the backend takes 20 ms) and a 10 ms pause between an answer and its next request, a
/// few requests sent in two parts; SIGUSR2 comes while they run. The old process must finish
/// what has started and close each connection only where no request can be lost: after an
/// answer that says `Connection: close`, or idle past a grace period.
fn an_upgrade_loses_no_request_on_kept_alive_connections(engine: &str) {
    let upstream = Upstream::start(&["--delay", "20ms"]);
    let (web, admin) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!(
        "trafik-upgrade-kept-alive-{engine}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("trafik.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nworkers = 2\nengine = \"{engine}\"\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{web}\"\n\n\
             [[listener.route]]\npath_prefix = \"/\"\npool = \"takip\"\n\n\
             [[pool]]\nname = \"takip\"\nbackends = [{{ address = \"{}\" }}]\n",
            upstream.address
        ),
    )
    .unwrap();
    let log = dir.join("stdout.log");
    let mut old = serve(&config, &log, None);
    let _old_guard = Pid(old.id());
    let printed = || std::fs::read_to_string(&log).unwrap_or_default();
    let address = format!("127.0.0.1:{web}");
    request(&address).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..16)
        .map(|client| {
            let (address, stop) = (address.clone(), stop.clone());
            // Every fifth request of half the clients comes in two parts.
            let split = if client % 2 == 0 { 5 } else { 0 };
            std::thread::spawn(move || {
                kept_alive_client(&address, Duration::from_millis(10), split, &stop)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    Command::new("kill")
        .args(["-USR2", &old.id().to_string()])
        .status()
        .unwrap();
    let exit = old.wait().unwrap();
    let successor =
        successor_in(&printed()).unwrap_or_else(|| panic!("no successor named: {}", printed()));
    let _successor_guard = Pid(successor);
    assert!(exit.success(), "the old process drains and exits 0: {exit}");
    // The clients go on with the successor for a while.
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let results: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let sent: u32 = results.iter().map(|(sent, _)| sent).sum();
    let failed: Vec<&String> = results.iter().flat_map(|(_, failed)| failed).collect();
    eprintln!(
        "{engine}: {sent} requests on kept-alive connections, {} failed, through the upgrade",
        failed.len()
    );
    assert!(sent >= 200, "the load ran through the upgrade: {sent}");
    assert!(
        failed.is_empty(),
        "{engine}: {} of {sent} failed: {failed:?}",
        failed.len()
    );
    let status = trafik_test_support::get_json(&format!("127.0.0.1:{admin}"), "/status");
    assert_eq!(status["config"]["generation"], 1, "{status}");
    drop(_successor_guard);
    let deadline = Instant::now() + Duration::from_secs(20);
    while running(successor) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    upstream.stop();
}

#[test]
fn an_upgrade_loses_no_request_on_kept_alive_connections_of_the_own_engine() {
    an_upgrade_loses_no_request_on_kept_alive_connections("trafik");
}

#[test]
fn an_upgrade_loses_no_request_on_kept_alive_connections_of_hyper() {
    an_upgrade_loses_no_request_on_kept_alive_connections("hyper");
}

/// An h3 listener beside its https twin: the successor takes over its UDP sockets (handed over
/// as the TCP ones are), so HTTP/3 clients get answers after the upgrade, while the old process
/// closes its own HTTP/3 connection gracefully and exits. The successor runs one worker where
/// its predecessor ran two: the socket of each listener it has no worker for is closed, not
/// left in the port's group to swallow the clients the kernel hashes to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_hands_the_h3_listener_to_the_successor() {
    use trafik_test_support::proxy::h3::H3Client;
    use trafik_test_support::proxy::tls::{TestCa, TlsClient};

    let upstream = Upstream::start(&[]);
    let (web, admin) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("trafik-upgrade-h3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = TestCa::new("trafik upgrade test CA");
    let site = ca.issue(&["kargo.test"]);
    std::fs::write(dir.join("site.pem"), &site.cert_pem).unwrap();
    std::fs::write(dir.join("site.key"), &site.key_pem).unwrap();
    let config = dir.join("trafik.toml");
    let write_config = |workers: usize| {
        std::fs::write(
            &config,
            format!(
                "[server]\nworkers = {workers}\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
             [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{web}\"\nprotocol = \"https\"\n\n\
             [[listener.tls]]\ncert = \"site.pem\"\nkey = \"site.key\"\n\n\
             [[listener.route]]\npath_prefix = \"/\"\npool = \"takip\"\n\n\
             [[listener]]\nname = \"web-h3\"\nlisten = \"127.0.0.1:{web}\"\nprotocol = \"h3\"\n\n\
             [[pool]]\nname = \"takip\"\nbackends = [{{ address = \"{}\" }}]\n",
                upstream.address
            ),
        )
        .unwrap()
    };
    write_config(2);
    let (log, errors) = (dir.join("stdout.log"), dir.join("stderr.log"));
    let mut old = serve(&config, &log, Some(&errors));
    let _old_guard = Pid(old.id());
    let printed = || {
        let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
        read(&log) + &read(&errors)
    };
    let address = format!("127.0.0.1:{web}").parse().unwrap();
    let mut before = H3Client::connect(address, "kargo.test", &ca).await;
    assert_eq!(before.get("kargo.test", "/takip/TR-1").await.status, 200);

    write_config(1);
    Command::new("kill")
        .args(["-USR2", &old.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let successor = loop {
        if let Some(pid) = successor_in(&printed()) {
            break pid;
        }
        assert!(
            Instant::now() < deadline && !printed().contains("upgrade failed"),
            "no successor took over: {}",
            printed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let _successor_guard = Pid(successor);
    // The old process closes its HTTP/3 connection without error, then exits.
    let closed = tokio::time::timeout(Duration::from_secs(60), before.closed)
        .await
        .expect("the old process closes its HTTP/3 connection")
        .unwrap();
    assert!(closed.is_h3_no_error(), "{closed:?}");
    let exit = tokio::task::spawn_blocking(move || old.wait().unwrap())
        .await
        .unwrap();
    assert!(exit.success(), "the old process drains and exits 0: {exit}");

    // Only the successor is left: new connections are its, whichever socket the kernel would
    // hash their source ports to (each client has a port of its own).
    assert!(running(successor));
    let localhost = std::net::Ipv4Addr::LOCALHOST.into();
    for i in 0..6 {
        let mut after = H3Client::try_connect(localhost, address, "kargo.test", &ca)
            .await
            .unwrap_or_else(|error| panic!("HTTP/3 client {i}: {error}"));
        let answer = after.get("kargo.test", &format!("/takip/TR-{i}")).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        after.close().await;
        let connected = TlsClient::connect(address, "kargo.test", &ca, &[b"http/1.1"]);
        let mut https = tokio::time::timeout(Duration::from_secs(30), connected)
            .await
            .unwrap_or_else(|_| panic!("HTTPS client {i}: no TLS handshake in 30 s"));
        assert_eq!(https.get(&format!("/takip/TR-{i}")).await.0.status, 200);
    }
    drop(_successor_guard);
    let deadline = Instant::now() + Duration::from_secs(20);
    while running(successor) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    upstream.stop();
    let _ = std::fs::remove_dir_all(dir);
}
