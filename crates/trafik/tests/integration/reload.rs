//! Reloading a running `trafik serve` under load: five changes of its config file while
//! `trafik load` sends 2,000 requests a second, and one broken file that changes nothing.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use trafik_test_support::{Trafik, free_port, get_json};

/// A config: one weighted round-robin pool with sticky cookies (no secret: trafik makes one
/// per process), health checks, and the given backends as (port, weight).
fn config(web: u16, admin: u16, backends: &[(u16, u32)], extra_route: bool) -> String {
    let mut text = format!(
        r#"[server]
name = "trafik-yeniden"

[admin]
listen = "127.0.0.1:{admin}"

[[listener]]
name = "web"
listen = "127.0.0.1:{web}"

[[listener.route]]
path_prefix = "/takip"
pool = "takip"
"#
    );
    if extra_route {
        text.push_str(
            "\n[[listener.route]]\npath_prefix = \"/olay\"\npool = \"takip\"\nresponse_headers = [\"x-yeni-rota: 1\"]\n",
        );
    }
    text.push_str(
        "\n[[pool]]\nname = \"takip\"\nalgorithm = \"weighted-round-robin\"\n\n[pool.health]\npath = \"/saglik\"\ninterval = \"200ms\"\n\n[pool.sticky]\nmode = \"cookie\"\n",
    );
    for (port, weight) in backends {
        text.push_str(&format!(
            "\n[[pool.backends]]\naddress = \"127.0.0.1:{port}\"\nname = \"k{}\"\nweight = {weight}\n",
            port % 10_000
        ));
    }
    text
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

fn reload(admin: u16) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(["reload", "--admin", &format!("127.0.0.1:{admin}")])
        .output()
        .unwrap()
}

/// GET with an optional cookie: (x-kopya, set-cookie, every header line).
fn get(web: u16, path: &str, cookie: Option<&str>) -> (String, Option<String>, String) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", web)).unwrap();
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: kargo.test\r\n{cookie}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let head = answer.split("\r\n\r\n").next().unwrap().to_owned();
    let header = |name: &str| {
        head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    };
    (
        header("x-kopya").unwrap_or_default(),
        header("set-cookie"),
        head,
    )
}

fn decisions(status: &serde_json::Value, name: &str) -> u64 {
    status["pools"][0]["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .map_or(0, |b| b["decisions"].as_u64().unwrap())
}

#[test]
fn five_reloads_under_load_lose_no_request() {
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let _replicas: Vec<Trafik> = ports
        .iter()
        .map(|port| {
            let name = format!("k{}", port % 10_000);
            let address = format!("127.0.0.1:{port}");
            Trafik::start(
                &["upstream", "--name", &name, "--listen", &address],
                Stdio::null(),
                "upstream",
            )
            .0
        })
        .collect();
    let (web, admin) = (free_port(), free_port());
    let directory = std::env::temp_dir().join(format!("trafik-reload-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let file = directory.join("trafik.toml");
    let [a, b, c, d] = [ports[0], ports[1], ports[2], ports[3]];
    write(&file, &config(web, admin, &[(a, 1), (b, 1), (c, 1)], false));
    let (server, _) = Trafik::start(
        &["serve", "--config", file.to_str().unwrap()],
        Stdio::null(),
        "listening on",
    );
    let admin_address = format!("127.0.0.1:{admin}");
    let k = |port: u16| format!("k{}", port % 10_000);

    // A client bound before any reload.
    let (home, cookie, _) = get(web, "/takip/1", None);
    let cookie = cookie
        .expect("a sticky cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(
        home,
        k(a),
        "weighted round robin starts at the first backend"
    );
    let before = get_json(&admin_address, "/status");
    assert_eq!(before["config"]["generation"], 1);
    assert_eq!(before["config"]["file"], file.to_str().unwrap());

    let url = format!("http://127.0.0.1:{web}/takip/TR-{{n}}");
    let load = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args([
            "load",
            &url,
            "--rate",
            "2000",
            "--duration",
            "10s",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let steps: [(&str, String); 5] = [
        (
            "a backend added",
            config(web, admin, &[(a, 1), (b, 1), (c, 1), (d, 1)], false),
        ),
        (
            "a backend removed",
            config(web, admin, &[(a, 1), (c, 1), (d, 1)], false),
        ),
        (
            "a weight changed",
            config(web, admin, &[(a, 1), (c, 3), (d, 1)], false),
        ),
        (
            "a route added",
            config(web, admin, &[(a, 1), (c, 3), (d, 1)], true),
        ),
        // The same file again, by SIGHUP this time.
        (
            "a signal",
            config(web, admin, &[(a, 1), (c, 3), (d, 1)], true),
        ),
    ];
    for (generation, (what, text)) in (2..).zip(steps) {
        std::thread::sleep(Duration::from_millis(1500));
        write(&file, &text);
        if what == "a signal" {
            let status = Command::new("kill")
                .args(["-HUP", &server.pid().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while get_json(&admin_address, "/status")["config"]["generation"] != generation {
                assert!(
                    std::time::Instant::now() < deadline,
                    "SIGHUP did not reload"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        } else {
            let output = reload(admin);
            assert!(output.status.success(), "{what}: {output:?}");
            let said = String::from_utf8_lossy(&output.stdout);
            assert!(
                said.contains(&format!("generation {generation}")),
                "{what}: {said}"
            );
        }
    }

    // A broken file: its errors come back, with line and column, and nothing changes.
    std::thread::sleep(Duration::from_millis(500));
    write(
        &file,
        &config(web, admin, &[(a, 1)], true).replace("weight = 1", "weight = \"bir\""),
    );
    let refused = reload(admin);
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("trafik.toml:") && said.contains("weight"),
        "{said}"
    );
    assert!(said.contains("unchanged"), "{said}");

    let output = load.wait_with_output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&output.stderr));
    });
    let errors: u64 = report["errors"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(
        errors, 0,
        "no request failed across the reloads: {}",
        report["errors"]
    );
    // A busy machine may drop sends the generator could not make in time (counted, never
    // failed); what was planned is sent or dropped, and most of it crossed the reloads.
    let sent = report["sent"].as_u64().unwrap();
    let dropped = report["dropped"].as_u64().unwrap();
    assert_eq!(report["planned"], 20_000, "2,000 req/s × 10 s");
    assert_eq!(
        sent + dropped,
        20_000,
        "every planned send is sent or dropped"
    );
    assert!(sent >= 10_000, "sent {sent}, dropped {dropped}");
    assert_eq!(report["completed"], report["sent"]);

    let after = get_json(&admin_address, "/status");
    assert_eq!(
        after["config"]["generation"], 6,
        "the broken file changed nothing"
    );
    assert!(
        decisions(&after, &k(a)) > decisions(&before, &k(a)) + 1000,
        "k1 kept its counters and kept counting: {} then {}",
        decisions(&before, &k(a)),
        decisions(&after, &k(a))
    );
    let names: Vec<&str> = after["pools"][0]["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [k(a), k(c), k(d)]);

    // The cookie issued before the reloads still sticks, and the added route answers.
    let (again, new_cookie, _) = get(web, "/takip/2", Some(&cookie));
    assert_eq!(again, home);
    assert!(new_cookie.is_none(), "no new binding for a bound client");
    let (_, _, head) = get(web, "/olay", None);
    assert!(
        head.to_ascii_lowercase().contains("x-yeni-rota: 1"),
        "{head}"
    );

    let stopped = server.stop();
    assert!(stopped.status.success());
    let _ = std::fs::remove_dir_all(&directory);
}
