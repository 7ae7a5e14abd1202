//! Static files against the descriptor limit: however many different files clients ask for,
//! trafik keeps only its share of descriptors open for files it may serve again.

use std::io::BufReader;
use std::net::TcpStream;
use std::process::Stdio;

use trafik_test_support::{Trafik, exchange, free_port, get_json};

/// Files a client asks for, each once: more than the descriptor limit below.
const FILES: usize = 400;

/// `ulimit -n 256`: a site keeping every file it served open would run out long before the
/// last one (each file opened is then a 404, a new connection refused). Each file is served
/// all the same, and new connections after them.
#[test]
fn many_files_asked_for_once_leave_descriptors_for_everything_else() {
    let dir = std::env::temp_dir().join(format!("trafik-static-files-{}", std::process::id()));
    let root = dir.join("varlik");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&root).unwrap();
    for i in 0..FILES {
        std::fs::write(root.join(format!("dosya-{i}.txt")), format!("dosya {i}\n")).unwrap();
    }
    let (web, admin) = (free_port(), free_port());
    let config = dir.join("trafik.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
workers = 2

[admin]
listen = "127.0.0.1:{admin}"

[[listener]]
name = "icerik"
listen = "127.0.0.1:{web}"

[[listener.route]]
path_prefix = "/varlik"
static = "{root}"
"#,
            root = root.display()
        ),
    )
    .unwrap();
    let (_trafik, _) = Trafik::start_with_descriptors(
        256,
        &["serve", "--config", config.to_str().unwrap()],
        Stdio::null(),
        "listening",
    );
    let address = format!("127.0.0.1:{web}");
    let stream = TcpStream::connect(&address).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    for i in 0..FILES {
        let request = format!("GET /varlik/dosya-{i}.txt HTTP/1.1\r\nHost: kargo.test\r\n\r\n");
        let (status, fields) = exchange(&mut writer, &mut reader, &request).unwrap();
        assert_eq!(status, 200, "file {i}: {fields:?}");
    }
    // New connections, each a file already asked for and one kept (the first ones).
    for i in 0..40 {
        let stream = TcpStream::connect(&address).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut writer = stream;
        let request = format!("GET /varlik/dosya-{i}.txt HTTP/1.1\r\nHost: kargo.test\r\n\r\n");
        let (status, fields) = exchange(&mut writer, &mut reader, &request).unwrap();
        assert_eq!(status, 200, "a new connection, file {i}: {fields:?}");
    }
    let status = get_json(&format!("127.0.0.1:{admin}"), "/status");
    let site = &status["static"][0];
    assert_eq!(site["requests"], FILES + 40, "{site}");
    assert_eq!(site["not_found"], 0, "{site}");
    let _ = std::fs::remove_dir_all(&dir);
}
