//! gRPC through trafik with real parts: Python grpcio's client (h2c with prior knowledge to a
//! plain listener) → trafik → grpcio's server behind a pool with `protocol = "h2c"`. Every
//! kind of call, a deadline, trafik's own failure as UNAVAILABLE, a backend killed mid-stream,
//! and the gRPC health check taking a backend out.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use trafik_test_support::{
    GrpcServer, Trafik, free_port, get_json, grpc_call, grpc_client, proxy::refusing_port,
};

fn folder(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trafik-grpc-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// trafik with a plain listener whose every request goes to an h2c pool of `backends`; `health`
/// adds `[pool.health]` lines. Returns it with its listener's address and its admin's.
fn trafik(dir: &Path, backends: &[&str], health: &str) -> (Trafik, String, String) {
    let (web, admin) = (free_port(), free_port());
    let backends: Vec<String> = backends
        .iter()
        .map(|address| format!("{{ address = \"{address}\" }}"))
        .collect();
    let config = format!(
        r#"[admin]
listen = "127.0.0.1:{admin}"

[[listener]]
name = "grpc"
listen = "127.0.0.1:{web}"

[[listener.route]]
pool = "kargo"

[[pool]]
name = "kargo"
protocol = "h2c"
retries = 0
backends = [{}]
{health}
"#,
        backends.join(", ")
    );
    let path = dir.join("trafik.toml");
    std::fs::write(&path, config).unwrap();
    let (server, _) = Trafik::start(
        &["serve", "--config", path.to_str().unwrap()],
        Stdio::null(),
        "listening on",
    );
    (
        server,
        format!("127.0.0.1:{web}"),
        format!("127.0.0.1:{admin}"),
    )
}

#[test]
fn calls_of_every_kind_pass_with_their_trailers() {
    let dir = folder("kinds");
    let backend = GrpcServer::start(None);
    let (server, web, _) = trafik(&dir, &[&backend.address], "");
    assert_eq!(grpc_call(&web, "unary")["answer"], "yanit:TR-1");
    assert_eq!(
        grpc_call(&web, "server-stream")["answers"],
        serde_json::json!(["olay-0", "olay-1", "olay-2", "olay-3", "olay-4"])
    );
    assert_eq!(grpc_call(&web, "client-stream")["answer"], "a,b,c,d");
    assert_eq!(
        grpc_call(&web, "bidi")["answers"],
        serde_json::json!(["duydum:bir", "duydum:iki", "duydum:uc"])
    );
    // The backend sleeps 5 s; the call's 0.5 s deadline ends it.
    assert_eq!(grpc_call(&web, "deadline")["code"], "DEADLINE_EXCEEDED");
    assert!(server.stop().status.success());

    // trafik's own failure, a backend it cannot reach, is a gRPC status, not an HTTP 502.
    let nobody = refusing_port();
    let (server, web, _) = trafik(&dir, &[&nobody.address.to_string()], "");
    let failed = grpc_call(&web, "unary");
    assert_eq!(failed["code"], "UNAVAILABLE", "{failed}");
    assert!(server.stop().status.success());

    // A backend that takes the connection and never answers: trafik's own wait ends at the
    // call's grpc-timeout (not the pool's 30 s response timeout) with DEADLINE_EXCEEDED.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (server, web, _) = trafik(&dir, &[&silent.local_addr().unwrap().to_string()], "");
    let output = std::process::Command::new("curl")
        .args([
            "-sS",
            "-m",
            "20",
            "--http2-prior-knowledge",
            "-D",
            "-",
            "-o",
            "/dev/null",
        ])
        .args([
            "-H",
            "content-type: application/grpc",
            "-H",
            "grpc-timeout: 300m",
        ])
        .args([
            "--data-binary",
            "",
            &format!("http://{web}/kargo.Takip/Sor"),
        ])
        .output()
        .expect("curl runs");
    let head = String::from_utf8_lossy(&output.stdout).to_ascii_lowercase();
    assert!(head.starts_with("http/2 200"), "{head}");
    assert!(head.contains("grpc-status: 4\r\n"), "{head}");
    assert!(
        head.contains("grpc-message: the backend did not answer in time"),
        "{head}"
    );
    assert!(server.stop().status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_backend_killed_mid_stream_ends_the_call_unavailable() {
    let dir = folder("killed");
    let mut backend = GrpcServer::start(None);
    let (server, web, _) = trafik(&dir, &[&backend.address], "");
    let mut client = grpc_client(&web, "watch");
    let mut events = BufReader::new(client.stdout.take().unwrap()).lines();
    for expected in ["olay-0", "olay-1"] {
        let line = events.next().expect("an event").unwrap();
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(event["message"], expected, "{line}");
    }
    backend.kill();
    // Messages already on their way may come first; the call then ends with trafik's status.
    let end = events
        .map(|line| serde_json::from_str::<serde_json::Value>(&line.unwrap()).unwrap())
        .find(|event| event.get("message").is_none())
        .expect("the call's end");
    assert_eq!(end["code"], "UNAVAILABLE", "{end}");
    assert_eq!(end["details"], "the backend closed the call", "{end}");
    client.wait().unwrap();
    assert!(server.stop().status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_grpc_health_check_marks_a_not_serving_backend_down() {
    let dir = folder("health");
    let flag = dir.join("health-b");
    std::fs::write(&flag, "up").unwrap();
    let (a, b) = (GrpcServer::start(None), GrpcServer::start(Some(&flag)));
    let health = "\n[pool.health]\nkind = \"grpc\"\ninterval = \"200ms\"\ntimeout = \"2s\"\nfall = 1\nrise = 1\n";
    let (server, web, admin) = trafik(&dir, &[&a.address, &b.address], health);
    let healthy = |admin: &str| -> Vec<bool> {
        let status = get_json(admin, "/status");
        status["pools"][0]["backends"]
            .as_array()
            .unwrap()
            .iter()
            .map(|backend| backend["healthy"].as_bool().unwrap())
            .collect()
    };
    let wait_for = |wanted: [bool; 2]| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while healthy(&admin) != wanted {
            assert!(
                Instant::now() < deadline,
                "never {wanted:?}: {:?}",
                healthy(&admin)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_for([true, true]);
    std::fs::write(&flag, "down").unwrap();
    wait_for([true, false]);
    // Every call now goes to the backend that serves.
    for _ in 0..3 {
        assert_eq!(grpc_call(&web, "unary")["answer"], "yanit:TR-1");
    }
    std::fs::write(&flag, "up").unwrap();
    wait_for([true, true]);
    assert!(server.stop().status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}
