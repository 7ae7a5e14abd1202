//! Helpers shared by the `trafik load` test binaries: a real `trafik upstream` child process
//! and running `trafik load` itself.
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

/// A `trafik upstream` child process; stopped (by its id) when dropped.
pub struct Upstream {
    child: Child,
    pub address: String,
}

impl Upstream {
    pub fn start(extra: &[&str]) -> Upstream {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = format!("127.0.0.1:{port}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_trafik"))
            .args(["upstream", "--name", "k1", "--listen", &address])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("upstream k1 on"), "{line}");
        Upstream { child, address }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// A GET over a plain socket, its body parsed as JSON.
pub fn get_json(address: &str, path: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let body = answer.split("\r\n\r\n").nth(1).unwrap();
    serde_json::from_str(body).unwrap()
}

pub fn load(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trafik"))
        .arg("load")
        .args(args)
        .output()
        .unwrap()
}

pub fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}
