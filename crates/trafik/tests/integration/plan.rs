//! `trafik plan` against the live proxy: a consistent-hash pool grows from three replicas to
//! four; the plan's predicted moved share must match what 10,000 keys do through a running
//! `trafik serve` reloaded from one config to the other.

use std::collections::HashMap;
use std::io::BufReader;
use std::net::TcpStream;
use std::process::{Command, Stdio};

use trafik_test_support::{Trafik, exchange, free_port, get_json, reload, replica};

const KEYS: usize = 10_000;

fn config(web: u16, admin: u16, replicas: &[(String, u16)]) -> String {
    let mut text = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:{web}\"\n\n[[listener.route]]\npool = \"takip\"\n\n[[pool]]\nname = \"takip\"\nalgorithm = \"consistent-hash\"\nhash_key = \"header:x-anahtar\"\n"
    );
    for (name, port) in replicas {
        text.push_str(&format!(
            "\n[[pool.backends]]\naddress = \"127.0.0.1:{port}\"\nname = \"{name}\"\n"
        ));
    }
    text
}

/// Sends one request per key over one kept-alive connection; the replica that answered each.
fn placement(web: u16) -> Vec<String> {
    let stream = TcpStream::connect(("127.0.0.1", web)).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    (0..KEYS)
        .map(|i| ask(&mut writer, &mut reader, i).unwrap())
        .collect()
}

fn ask(
    writer: &mut TcpStream,
    reader: &mut BufReader<TcpStream>,
    i: usize,
) -> std::io::Result<String> {
    let request =
        format!("GET /takip/TR-{i} HTTP/1.1\r\nHost: kargo.test\r\nx-anahtar: key-{i}\r\n\r\n");
    let (status, mut fields) = exchange(writer, reader, &request)?;
    assert_eq!(status, 200, "key-{i}");
    Ok(fields.remove("x-kopya").expect("x-kopya names the replica"))
}

#[test]
fn plan_predicts_the_share_of_keys_a_fourth_replica_takes_through_the_live_proxy() {
    let replicas: Vec<_> = (1..=4).map(|i| replica(&format!("k{i}"))).collect();
    let named: Vec<(String, u16)> = replicas
        .iter()
        .enumerate()
        .map(|(i, (_, port))| (format!("k{}", i + 1), *port))
        .collect();
    let (web, admin) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("trafik-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let three = dir.join("three.toml");
    let four = dir.join("four.toml");
    std::fs::write(&three, config(web, admin, &named[..3])).unwrap();
    std::fs::write(&four, config(web, admin, &named)).unwrap();

    let plan = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args([
            "plan",
            "--json",
            "--keys",
            &KEYS.to_string(),
            "--key-prefix",
            "key-",
        ])
        .arg(&three)
        .arg(&four)
        .output()
        .unwrap();
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let pool = &plan["pools"][0];
    assert_eq!(pool["name"], "takip");
    assert_eq!(pool["added"], serde_json::json!(["k4"]));
    let predicted = pool["moved_share"].as_f64().unwrap();

    let path = three.to_str().unwrap();
    let (server, _) = Trafik::start(&["serve", "-c", path], Stdio::null(), "listening");
    let before = placement(web);
    std::fs::copy(&four, &three).unwrap();
    reload(&format!("127.0.0.1:{admin}"));
    assert_eq!(
        get_json(&format!("127.0.0.1:{admin}"), "/status")["config"]["generation"],
        2
    );
    let after = placement(web);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);

    let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
    let measured = moved as f64 / KEYS as f64;
    let mut destinations: HashMap<&str, usize> = HashMap::new();
    for (b, a) in before.iter().zip(&after).filter(|(b, a)| b != a) {
        assert_ne!(b, "k4");
        *destinations.entry(a.as_str()).or_default() += 1;
    }
    eprintln!("plan predicted {predicted:.4}, the live proxy moved {measured:.4}");
    assert!(measured > 0.1, "a fourth replica takes keys: {measured}");
    assert!(
        (predicted - measured).abs() <= 0.01,
        "plan {predicted} vs live {measured}"
    );
    assert_eq!(destinations.keys().collect::<Vec<_>>(), [&"k4"]);
    // The plan's from → to matrix names the same destination.
    for targets in pool["moves"].as_object().unwrap().values() {
        assert_eq!(
            targets.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["k4"]
        );
    }
}
