//! `trafik config push --canary`: three `trafik serve --etcd` instances on a real etcd. A
//! configuration that sends the route to a dead pool goes to one instance, fails its gate and is
//! reverted (exit 1, the failing figure named) while the other two, under load, lose nothing; a
//! good one passes the gate and reaches all three; one killed during its window is undone by
//! its lease. The pushes are recorded under the prefix and shown by `trafik status`.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use trafik_test_support::{Etcd, Trafik, Upstream, free_port};

const PREFIX: &str = "/kanarya/";

fn trafik(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(args)
        .output()
        .unwrap()
}

/// The fleet's configuration: one route to `backends`, its answers marked `x-surum: marker`;
/// listener and admin addresses are placeholders every instance overrides.
fn config(backends: &[&str], marker: &str) -> String {
    let mut text = format!(
        "[admin]\nlisten = \"127.0.0.1:1\"\n\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:2\"\n\n[[listener.route]]\npool = \"takip\"\nresponse_headers = [\"x-surum: {marker}\"]\n\n[[pool]]\nname = \"takip\"\n"
    );
    for address in backends {
        text.push_str(&format!("\n[[pool.backends]]\naddress = \"{address}\"\n"));
    }
    text
}

/// One GET on a new connection: the status and `x-surum`, or `None` when no answer came.
fn get(web: u16) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", web)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET /takip/TR-1 HTTP/1.1\r\nHost: kargo.test\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let head = answer.split("\r\n\r\n").next()?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let version = head
        .lines()
        .find_map(|line| line.strip_prefix("x-surum: "))
        .unwrap_or_default()
        .to_owned();
    Some((status, version))
}

/// Sends requests to `web` one after another (5 ms apart, at most 4,000, at most 60 s) until
/// `stop`; how many were answered 200 and how many were not (an error, or no answer).
fn load(web: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u32, u32)> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        let (mut good, mut bad) = (0, 0);
        while !stop.load(Ordering::Relaxed) && good + bad < 4_000 && Instant::now() < deadline {
            match get(web) {
                Some((200, _)) => good += 1,
                _ => bad += 1,
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        (good, bad)
    })
}

fn push(dir: &Path, etcd: &str, text: &str, canary: &[&str]) -> Output {
    let file = dir.join("kanarya.toml");
    std::fs::write(&file, text).unwrap();
    let mut args = vec![
        "config",
        "push",
        file.to_str().unwrap(),
        "--etcd",
        etcd,
        "--etcd-prefix",
        PREFIX,
    ];
    args.extend_from_slice(canary);
    trafik(&args)
}

fn status(etcd: &str) -> serde_json::Value {
    let output = trafik(&["status", "--etcd", etcd, "--etcd-prefix", PREFIX, "--json"]);
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// A canary push under load on every instance; (the push's output, the canary's answers good
/// and bad, the other instances' answers good and bad).
fn push_under_load(
    dir: &Path,
    etcd: &str,
    text: &str,
    webs: &[u16],
    gate: &str,
) -> (Output, (u32, u32), (u32, u32)) {
    let stop = Arc::new(AtomicBool::new(false));
    let loads: Vec<_> = webs.iter().map(|&web| load(web, stop.clone())).collect();
    let output = push(
        dir,
        etcd,
        text,
        &["--canary", "t0", "--gate", gate, "--for", "2s"],
    );
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<(u32, u32)> = loads.into_iter().map(|l| l.join().unwrap()).collect();
    let others = counts[1..]
        .iter()
        .fold((0, 0), |(g, b), (good, bad)| (g + good, b + bad));
    (output, counts[0], others)
}

#[test]
fn a_failing_canary_is_reverted_and_a_passing_one_is_published() {
    let dir = std::env::temp_dir().join(format!("trafik-canary-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let etcd = Etcd::start(&dir.join("etcd"));
    let url = etcd.url();
    let replicas = [Upstream::start(&[]), Upstream::start(&[])];
    let ports: Vec<&str> = replicas.iter().map(|r| r.address.as_str()).collect();
    let published = push(&dir, &url, &config(&ports, "v1"), &[]);
    assert!(published.status.success(), "{published:?}");

    let webs: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let instances: Vec<Trafik> = (0..3)
        .map(|i| Trafik::fleet_instance(&url, PREFIX, &format!("t{i}"), webs[i], free_port()))
        .collect();
    // The canary's admin address is read from its registration, which comes within a second.
    let deadline = Instant::now() + Duration::from_secs(15);
    while status(&url)["instances"].as_array().unwrap().len() < 3 {
        assert!(Instant::now() < deadline, "{}", status(&url));
        std::thread::sleep(Duration::from_millis(100));
    }

    // A gate naming a figure it does not know is refused before anything happens.
    let unknown = push(
        &dir,
        &url,
        &config(&ports, "v9"),
        &["--canary", "t0", "--gate", "p95<200ms", "--for", "2s"],
    );
    assert_eq!(unknown.status.code(), Some(2), "{unknown:?}");
    let said = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        said.contains("unknown figure \"p95\"") && said.contains("nothing was published"),
        "{said}"
    );

    // The route to a dead pool: the canary answers 502, fails its gate and goes back; the
    // other two never see the configuration and lose nothing.
    let dead = format!("127.0.0.1:{}", free_port());
    let (output, canary, others) = push_under_load(
        &dir,
        &url,
        &config(&[&dead], "kotu"),
        &webs,
        "error_rate<1%,p99<5s",
    );
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        said.contains("canary t0 failed the gate: error_rate") && said.contains("reverted"),
        "{said}"
    );
    eprintln!("{}{said}", String::from_utf8_lossy(&output.stdout));
    eprintln!("bad push: canary {canary:?} (good, bad), others {others:?}");
    assert!(canary.1 > 0, "the canary answered the dead pool's errors");
    assert_eq!(others.1, 0, "no request lost on the other instances");
    assert!(others.0 > 0);
    for &web in &webs {
        assert_eq!(get(web), Some((200, "v1".to_owned())), "port {web}");
    }
    let listed = status(&url);
    let t0 = listed["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|instance| instance["id"] == "t0")
        .unwrap();
    assert_eq!(
        t0["canary"],
        serde_json::Value::Null,
        "back on the fleet's: {t0}"
    );
    let record = &listed["pushes"][0];
    assert_eq!(record["verdict"], "reverted", "{record}");
    assert_eq!(record["canary"], "t0");
    assert!(
        record["failing"]
            .as_str()
            .unwrap()
            .starts_with("error_rate"),
        "{record}"
    );
    assert!(record["figures"]["responses"]["5xx"].as_u64().unwrap() > 0);

    // A push that dies during its window (killed here) leaves nothing behind: the canary's
    // key goes with the push's lease, and the canary goes back by itself.
    let file = dir.join("olen.toml");
    std::fs::write(&file, config(&[&dead], "olen")).unwrap();
    let mut dying = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args([
            "config",
            "push",
            file.to_str().unwrap(),
            "--etcd",
            &url,
            "--etcd-prefix",
            PREFIX,
            "--canary",
            "t0",
            "--gate",
            "error_rate<1%",
            "--for",
            "60s",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(webs[0]).is_some_and(|(_, version)| version == "v1") {
        assert!(Instant::now() < deadline, "the canary never took the file");
        std::thread::sleep(Duration::from_millis(50));
    }
    dying.kill().unwrap();
    dying.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(webs[0]) != Some((200, "v1".to_owned())) {
        assert!(
            Instant::now() < deadline,
            "the canary stayed on a dead push's file"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(webs[1]), Some((200, "v1".to_owned())));

    // A good configuration passes the gate and reaches every instance.
    let (output, canary, others) = push_under_load(
        &dir,
        &url,
        &config(&ports, "v2"),
        &webs,
        "error_rate<1%,p99<5s,requests>0",
    );
    assert!(output.status.success(), "{output:?}");
    eprintln!("good push: canary {canary:?} (good, bad), others {others:?}");
    assert_eq!(
        (canary.1, others.1),
        (0, 0),
        "nothing lost while a good configuration spreads"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    for &web in &webs {
        while get(web) != Some((200, "v2".to_owned())) {
            assert!(
                Instant::now() < deadline,
                "port {web} answers {:?}",
                get(web)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let listed = status(&url);
    let pushes = listed["pushes"].as_array().unwrap();
    assert_eq!(pushes.len(), 3, "{listed}");
    assert_eq!(
        pushes[1]["verdict"], "abandoned",
        "the killed push: {listed}"
    );
    assert_eq!(pushes[2]["verdict"], "published", "{listed}");
    let text = trafik(&["status", "--etcd", &url, "--etcd-prefix", PREFIX]);
    let text = String::from_utf8_lossy(&text.stdout);
    eprintln!("{text}");
    assert!(
        text.contains("on canary t0")
            && text.contains(": reverted: error_rate")
            && text.contains(": published"),
        "{text}"
    );

    drop(instances);
    drop(replicas);
    drop(etcd);
    let _ = std::fs::remove_dir_all(&dir);
}
