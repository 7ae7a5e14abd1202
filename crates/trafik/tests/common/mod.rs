//! Helpers shared by the `trafik load` test binaries: a real `trafik upstream` child process
//! and running `trafik load` itself.
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};

/// A `trafik upstream` child process; stopped (by its id) when dropped.
pub struct Upstream {
    /// Taken when stopped, so the process is signalled and reaped exactly once.
    child: Option<Child>,
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
        let mut args = vec!["upstream", "--name", "k1", "--listen", &address];
        args.extend_from_slice(extra);
        let (child, line) = spawn(&args, Stdio::null());
        assert!(line.contains("upstream k1 on"), "{line}");
        Upstream {
            child: Some(child),
            address,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }
}

impl Upstream {
    /// Sends SIGTERM and waits; the exit status tells whether it drained cleanly.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("a running upstream");
        terminate(&child);
        child.wait().unwrap()
    }
}

/// A `trafik proxy` (quick mode) child process on a free port; stopped when dropped.
pub struct Proxy {
    child: Option<Child>,
    pub address: String,
}

impl Proxy {
    /// Starts `trafik [global] proxy --listen 127.0.0.1:0 [args]`, stderr captured.
    pub fn start(global: &[&str], args: &[&str]) -> Proxy {
        let mut all = global.to_vec();
        all.extend_from_slice(&["proxy", "--listen", "127.0.0.1:0"]);
        all.extend_from_slice(args);
        let (child, line) = spawn(&all, Stdio::piped());
        let address = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no listen address in {line:?}"))
            .to_owned();
        Proxy {
            child: Some(child),
            address,
        }
    }

    /// The process id, for reading `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Sends SIGTERM, waits, and returns how it exited and what it logged.
    pub fn stop(mut self) -> Output {
        let child = self.child.take().expect("a running proxy");
        terminate(&child);
        child.wait_with_output().unwrap()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&child);
            let _ = child.wait();
        }
    }
}

/// Starts `trafik ARGS` and returns it with the first line it printed (where it listens).
fn spawn(args: &[&str], stderr: Stdio) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_trafik"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

fn terminate(child: &Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&child);
            let _ = child.wait();
        }
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
