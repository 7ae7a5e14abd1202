//! A real etcd (Debian's `etcd-server`) on free ports with its own data directory, for the
//! tests of etcd's users (the fleet, distributed load).
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real etcd on free ports with its own data directory; killed by its pid when dropped.
pub struct Etcd {
    child: Option<Child>,
    client: u16,
    peer: u16,
    data: PathBuf,
}

impl Etcd {
    pub fn start(data: &Path) -> Etcd {
        let mut etcd = Etcd {
            child: None,
            client: free_port(),
            peer: free_port(),
            data: data.to_owned(),
        };
        etcd.run();
        etcd
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client)
    }

    /// Starts (or starts again, on the same ports and data) and waits until it answers.
    pub fn run(&mut self) {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let child = Command::new("etcd")
            .args(["--name", "filo", "--data-dir"])
            .arg(&self.data)
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("filo={peer}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd is installed (Debian: etcd-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.client)) {
                let _ = write!(
                    stream,
                    "GET /health HTTP/1.1\r\nHost: etcd\r\nConnection: close\r\n\r\n"
                );
                let mut answer = String::new();
                let _ = stream.read_to_string(&mut answer);
                if answer.contains("\"health\":\"true\"") {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "etcd did not come up");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}
