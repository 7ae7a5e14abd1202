//! Three `trafik serve --etcd` instances on one configuration in a real etcd (Debian's
//! `etcd-server`, started here on free ports): pushes reach all three, traffic through all three
//! loses nothing while five pushes land, a broken configuration changes nothing anywhere, hash
//! keys and sticky cookies give the same backend through each instance, and an instance that
//! loses etcd serves on and catches up when etcd returns.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use trafik_test_support::{Etcd, Trafik, free_port, get_json, json, load_errors, replica};

const PREFIX: &str = "/filo/";

fn trafik(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(args)
        .output()
        .unwrap()
}

/// The fleet's configuration: the listener and admin addresses are placeholders every instance
/// overrides; `marker` shows in a response header, so a test sees which version answered.
fn config(backends: &[u16], marker: &str) -> String {
    let mut text = format!(
        "[admin]\nlisten = \"127.0.0.1:1\"\n\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:2\"\n\n[[listener.route]]\npath_prefix = \"/oturum\"\npool = \"oturum\"\n\n[[listener.route]]\npool = \"takip\"\nresponse_headers = [\"x-surum: {marker}\"]\n\n[[pool]]\nname = \"takip\"\nalgorithm = \"consistent-hash\"\nhash_key = \"header:x-anahtar\"\n"
    );
    let list = |text: &mut String| {
        for port in backends {
            text.push_str(&format!(
                "\n[[pool.backends]]\naddress = \"127.0.0.1:{port}\"\nname = \"k{port}\"\n"
            ));
        }
    };
    list(&mut text);
    text.push_str("\n[[pool]]\nname = \"oturum\"\n\n[pool.sticky]\nmode = \"cookie\"\nsecret = \"filonun-ortak-sirri\"\n");
    list(&mut text);
    text
}

fn push(dir: &Path, etcd: &str, text: &str) -> Output {
    let file = dir.join("filo.toml");
    std::fs::write(&file, text).unwrap();
    trafik(&[
        "config",
        "push",
        file.to_str().unwrap(),
        "--etcd",
        etcd,
        "--etcd-prefix",
        PREFIX,
    ])
}

fn generation(admin: u16) -> u64 {
    get_json(&format!("127.0.0.1:{admin}"), "/status")["config"]["generation"]
        .as_u64()
        .unwrap()
}

/// Polls every instance until each runs `generation`; how long the slowest took.
fn wait_for_generation(admins: &[u16], generation_wanted: u64) -> Duration {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(10);
    for &admin in admins {
        while generation(admin) != generation_wanted {
            assert!(
                Instant::now() < deadline,
                "instance on admin {admin} is at generation {}, not {generation_wanted}",
                generation(admin)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    start.elapsed()
}

/// One GET; (status, x-kopya, x-surum, set-cookie).
fn get(web: u16, path: &str, headers: &str) -> (u16, String, String, String) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", web)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: kargo.test\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let head = answer.split("\r\n\r\n").next().unwrap();
    let header = |name: &str| {
        head.lines()
            .find_map(|line| {
                let (n, v) = line.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (
        status,
        header("x-kopya"),
        header("x-surum"),
        header("set-cookie"),
    )
}

#[test]
fn three_instances_follow_one_configuration_in_etcd() {
    let dir = std::env::temp_dir().join(format!("trafik-fleet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut etcd = Etcd::start(&dir.join("etcd"));
    let url = etcd.url();
    let replicas: Vec<_> = (0..4).map(|i| replica(&format!("r{i}"))).collect();
    let ports: Vec<u16> = replicas.iter().map(|(_, port)| *port).collect();

    // A broken file is refused before anything is published: the instances could not start.
    let broken = config(&ports[..2], "v0").replace("consistent-hash", "tutarli");
    let refused = push(&dir, &url, &broken);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("algorithm") && said.contains("nothing was published"),
        "{said}"
    );
    let status = trafik(&["status", "--etcd", &url, "--etcd-prefix", PREFIX, "--json"]);
    assert!(status.status.success(), "{status:?}");
    let listed: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(listed["instances"], serde_json::json!([]));

    let published = push(&dir, &url, &config(&ports[..3], "v1"));
    assert!(published.status.success(), "{published:?}");

    let webs: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let admins: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let instances: Vec<Trafik> = (0..3)
        .map(|i| Trafik::fleet_instance(&url, PREFIX, &format!("trafik-{i}"), webs[i], admins[i]))
        .collect();
    for &web in &webs {
        assert_eq!(get(web, "/takip/TR-1", "").2, "v1");
    }

    // `trafik status --etcd` lists the three, each on generation 1 (reports come every second).
    let deadline = Instant::now() + Duration::from_secs(10);
    let listed = loop {
        let status = trafik(&["status", "--etcd", &url, "--etcd-prefix", PREFIX, "--json"]);
        let listed: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        if listed["instances"].as_array().unwrap().len() == 3 {
            break listed;
        }
        assert!(Instant::now() < deadline, "status lists {listed}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut ids: Vec<&str> = listed["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["trafik-0", "trafik-1", "trafik-2"]);
    for instance in listed["instances"].as_array().unwrap() {
        assert_eq!(instance["healthy"], true, "{instance}");
    }
    let text = trafik(&["status", "--etcd", &url, "--etcd-prefix", PREFIX]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("3 instance(s)"));

    // The same key lands on the same backend through each instance; so does a sticky cookie
    // one instance set.
    for key in 0..200 {
        let header = format!("x-anahtar: musteri-{key}\r\n");
        let chosen: Vec<String> = webs
            .iter()
            .map(|&web| get(web, "/takip/TR-1", &header).1)
            .collect();
        assert!(!chosen[0].is_empty());
        assert!(
            chosen.iter().all(|c| c == &chosen[0]),
            "key {key}: {chosen:?}"
        );
    }
    for _ in 0..10 {
        let (_, first, _, cookie) = get(webs[0], "/oturum/a", "");
        let cookie = cookie.split(';').next().unwrap().to_owned();
        assert!(!cookie.is_empty());
        for &web in &webs[1..] {
            let (_, again, _, _) = get(web, "/oturum/a", &format!("Cookie: {cookie}\r\n"));
            assert_eq!(again, first, "cookie {cookie} through port {web}");
        }
    }

    // Traffic through all three while five pushes land: nothing lost.
    let loads: Vec<Child> = webs
        .iter()
        .map(|web| {
            Command::new(env!("CARGO_BIN_EXE_trafik"))
                .args([
                    "load",
                    &format!("http://127.0.0.1:{web}/takip/TR-{{n}}"),
                    "--rate",
                    "300",
                    "--duration",
                    "8s",
                    "--json",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut latencies = Vec::new();
    for (step, generation_wanted) in (2..=6).enumerate() {
        std::thread::sleep(Duration::from_millis(1000));
        let backends = if step % 2 == 0 {
            &ports[..4]
        } else {
            &ports[1..3]
        };
        let output = push(
            &dir,
            &url,
            &config(backends, &format!("v{generation_wanted}")),
        );
        assert!(output.status.success(), "{output:?}");
        latencies.push(wait_for_generation(&admins, generation_wanted));
    }
    for load in loads {
        let output = load.wait_with_output().unwrap();
        let report = json(&output);
        assert_eq!(
            load_errors(&report),
            0,
            "no request failed: {}",
            report["errors"]
        );
        assert!(report["sent"].as_u64().unwrap() >= 2_000, "{report}");
        assert_eq!(report["completed"], report["sent"]);
    }
    eprintln!("push → every instance on the new generation: {latencies:?}");
    for &web in &webs {
        assert_eq!(get(web, "/takip/TR-1", "").2, "v6");
    }

    // A broken configuration written straight to etcd (past `config push`'s check) changes
    // nothing anywhere, and the status key says why.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = trafik_etcd::Etcd::new(&url).unwrap();
    let config_key = format!("{PREFIX}config");
    let revision = runtime
        .block_on(client.put(&config_key, broken.as_bytes(), None))
        .unwrap();
    let status_key = format!("{PREFIX}status");
    let deadline = Instant::now() + Duration::from_secs(10);
    let verdict = loop {
        let value = runtime.block_on(client.get(&status_key)).unwrap().unwrap();
        let verdict: serde_json::Value = serde_json::from_slice(&value.value).unwrap();
        if verdict["revision"] == revision {
            break verdict;
        }
        assert!(
            Instant::now() < deadline,
            "no verdict on revision {revision}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(verdict["accepted"], false, "{verdict}");
    assert!(
        verdict["errors"].to_string().contains("tutarli"),
        "{verdict}"
    );
    std::thread::sleep(Duration::from_millis(300));
    for (&admin, &web) in admins.iter().zip(&webs) {
        assert_eq!(generation(admin), 6);
        assert_eq!(get(web, "/takip/TR-1", "").2, "v6");
    }

    // etcd goes away: every instance serves on; a change made while it was away arrives once
    // it is back.
    etcd.kill();
    std::thread::sleep(Duration::from_millis(1500));
    for &web in &webs {
        let (status, _, version, _) = get(web, "/takip/TR-1", "");
        assert_eq!((status, version.as_str()), (200, "v6"));
    }
    let away = push(&dir, &url, &config(&ports[..2], "v7"));
    assert!(!away.status.success(), "no etcd, no push");
    etcd.run();
    let output = push(&dir, &url, &config(&ports[..2], "v7"));
    assert!(output.status.success(), "{output:?}");
    let caught_up = wait_for_generation(&admins, 7);
    eprintln!("after etcd came back, every instance on the new generation in {caught_up:?}");
    for &web in &webs {
        assert_eq!(get(web, "/takip/TR-1", "").2, "v7");
    }

    // `trafik plan --etcd` compares the fleet's configuration with a file about to ship.
    let next = dir.join("sonraki.toml");
    std::fs::write(&next, config(&ports[..3], "v8")).unwrap();
    let plan = trafik(&[
        "plan",
        "--json",
        "--etcd",
        &url,
        "--etcd-prefix",
        PREFIX,
        next.to_str().unwrap(),
    ]);
    assert!(plan.status.success(), "{plan:?}");
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan["pools"][0]["name"], "takip");
    assert_eq!(
        plan["pools"][0]["added"],
        serde_json::json!([format!("k{}", ports[2])])
    );
    assert!(plan["pools"][0]["moved_share"].as_f64().unwrap() > 0.0);

    drop(instances);
    drop(etcd);
    drop(replicas);
    let _ = std::fs::remove_dir_all(&dir);
}
