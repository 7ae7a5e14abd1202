//! Real `trafik` child processes that cannot outlive a failed test, running `trafik load`
//! itself, and a network namespace of its own for a test that binds the course's fixed ports.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

/// The `trafik` binary cargo built beside the running test binary (`target/<profile>/trafik`;
/// a test binary lives in `target/<profile>/deps`). Cargo builds it for the `trafik` crate's
/// integration tests, the only ones that start it.
pub fn trafik_binary() -> PathBuf {
    let test = std::env::current_exe().expect("the test binary's path");
    let profile = test
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test binary in target/<profile>/deps");
    let binary = profile.join("trafik");
    assert!(
        binary.exists(),
        "{} is not built: run the test through cargo test -p trafik",
        binary.display()
    );
    binary
}

/// A replica (`trafik upstream`) on a free port that names itself `name` in `x-kopya`; its port.
pub fn replica(name: &str) -> (Trafik, u16) {
    let port = crate::free_port();
    let address = format!("127.0.0.1:{port}");
    let (replica, _) = Trafik::start(
        &["upstream", "--name", name, "--listen", &address],
        Stdio::null(),
        "on http://",
    );
    (replica, port)
}

/// Sends one request (written at once: several small writes would wait on Nagle and delayed
/// ACKs) on a kept-alive connection and reads its answer whole: the status and the header
/// fields by lowercase name.
pub fn exchange(
    writer: &mut std::net::TcpStream,
    reader: &mut BufReader<std::net::TcpStream>,
    request: &str,
) -> std::io::Result<(u16, std::collections::HashMap<String, String>)> {
    use std::io::{Read, Write};
    writer.write_all(request.as_bytes())?;
    let mut status = String::new();
    reader.read_line(&mut status)?;
    let code = status
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut fields = std::collections::HashMap::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            fields.insert(name.to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let length = fields
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok((code, fields))
}

/// `trafik reload --admin ADDRESS`, which must succeed.
pub fn reload(admin: &str) {
    let reloaded = Command::new(trafik_binary())
        .args(["reload", "--admin", admin])
        .output()
        .unwrap();
    assert!(
        reloaded.status.success(),
        "{}",
        String::from_utf8_lossy(&reloaded.stderr)
    );
}

/// A `trafik` child process. Dropping it (a failed assertion unwinding) kills it by its id, so a
/// test never leaves a server behind; `stop` is the graceful way, SIGTERM and a drain.
pub struct Trafik {
    /// Taken when stopped, so the process is signalled and reaped exactly once.
    child: Option<Child>,
}

impl Trafik {
    /// Starts `trafik ARGS` and returns it with what it printed up to and including the first
    /// line that contains `ready` (where it listens).
    pub fn start(args: &[&str], stderr: Stdio, ready: &str) -> (Trafik, String) {
        let mut command = Command::new(trafik_binary());
        command.args(args);
        Trafik::spawn(command, args, stderr, ready)
    }

    /// As [`Trafik::start`], with at most `limit` file descriptors: the soft and the hard
    /// limit, as `ulimit -n` sets them, so trafik cannot raise its own.
    pub fn start_with_descriptors(
        limit: u32,
        args: &[&str],
        stderr: Stdio,
        ready: &str,
    ) -> (Trafik, String) {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
            .arg(trafik_binary())
            .args(args);
        Trafik::spawn(command, args, stderr, ready)
    }

    fn spawn(mut command: Command, args: &[&str], stderr: Stdio, ready: &str) -> (Trafik, String) {
        let mut child = command
            // Colour is trafik's own decision (stderr is not a terminal here), not the caller's.
            .env_remove("NO_COLOR")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let trafik = Trafik { child: Some(child) };
        let mut printed = String::new();
        let mut lines = BufReader::new(stdout);
        while !printed.lines().any(|line| line.contains(ready)) {
            let mut line = String::new();
            if lines.read_line(&mut line).unwrap() == 0 {
                let output = trafik.stop();
                panic!(
                    "trafik {args:?} stopped before printing {ready:?}: {printed}{}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            printed.push_str(&line);
        }
        (trafik, printed)
    }

    /// One instance of a fleet: `trafik serve --etcd URL --etcd-prefix PREFIX --instance ID`
    /// with its listener `web` and its admin API on the given loopback ports.
    pub fn fleet_instance(etcd: &str, prefix: &str, id: &str, web: u16, admin: u16) -> Trafik {
        let listen = format!("web=127.0.0.1:{web}");
        let admin = format!("127.0.0.1:{admin}");
        let args = [
            "serve",
            "--etcd",
            etcd,
            "--etcd-prefix",
            prefix,
            "--listen",
            &listen,
            "--admin",
            &admin,
            "--instance",
            id,
        ];
        Trafik::start(&args, Stdio::null(), "listening").0
    }

    /// The process id, for reading `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Sends SIGTERM, waits, and returns how it exited and what it logged (when piped).
    pub fn stop(mut self) -> Output {
        let child = self.child.take().expect("a running trafik");
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        child.wait_with_output().unwrap()
    }
}

impl Drop for Trafik {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A `trafik upstream` child process on a free port.
pub struct Upstream {
    trafik: Trafik,
    pub address: String,
}

impl Upstream {
    pub fn start(extra: &[&str]) -> Upstream {
        let port = crate::free_port();
        Upstream::start_at(&format!("127.0.0.1:{port}"), extra)
    }

    /// A replica on a given address (a restarted one takes its old address again).
    pub fn start_at(address: &str, extra: &[&str]) -> Upstream {
        let address = address.to_owned();
        let mut args = vec!["upstream", "--name", "k1", "--listen", &address];
        args.extend_from_slice(extra);
        let (trafik, _) = Trafik::start(&args, Stdio::null(), "upstream k1 on");
        Upstream { trafik, address }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// Sends SIGTERM and waits; the exit status tells whether it drained cleanly.
    pub fn stop(self) -> std::process::ExitStatus {
        self.trafik.stop().status
    }
}

/// A `trafik proxy` (quick mode) child process on a free port.
pub struct Proxy {
    trafik: Trafik,
    pub address: String,
}

impl Proxy {
    /// Starts `trafik [global] proxy --listen 127.0.0.1:0 [args]`, stderr captured.
    pub fn start(global: &[&str], args: &[&str]) -> Proxy {
        let mut all = global.to_vec();
        all.extend_from_slice(&["proxy", "--listen", "127.0.0.1:0"]);
        all.extend_from_slice(args);
        let (trafik, line) = Trafik::start(&all, Stdio::piped(), "listening on");
        let address = line
            .split("://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no listen address in {line:?}"))
            .to_owned();
        Proxy { trafik, address }
    }

    /// The process id, for reading `/proc`.
    pub fn pid(&self) -> u32 {
        self.trafik.pid()
    }

    /// Sends SIGTERM, waits, and returns how it exited and what it logged.
    pub fn stop(self) -> Output {
        self.trafik.stop()
    }
}

/// A GET over a plain socket: the answer's body.
pub fn get_text(address: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (_, body) = answer.split_once("\r\n\r\n").unwrap();
    body.to_owned()
}

/// A GET over a plain socket, its body parsed as JSON.
pub fn get_json(address: &str, path: &str) -> serde_json::Value {
    serde_json::from_str(&get_text(address, path)).unwrap()
}

pub fn load(args: &[&str]) -> Output {
    Command::new(trafik_binary())
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

/// The requests of a `trafik load --json` report that failed, of every kind.
pub fn load_errors(report: &serde_json::Value) -> u64 {
    report["errors"]
        .as_object()
        .expect("a load report's errors")
        .values()
        .map(|count| count.as_u64().expect("a count"))
        .sum()
}

/// Set in the copy of this test binary that runs inside its own network namespace.
pub const INSIDE_NAMESPACE: &str = "TRAFIK_TEST_INSIDE_NAMESPACE";

/// Runs `test` from this binary again in new user, network and PID namespaces (loopback up),
/// and fails unless it ran there and passed. The harness names each test's thread after the
/// test's path in its binary (`cli::the_readme_main_command…` in a binary of modules), which
/// the copy is asked for exactly; with one test thread, the thread is `main` and the bare
/// name is the filter.
pub fn run_in_own_network_namespace(test: &str) {
    let current = std::thread::current();
    let path = current.name().filter(|name| {
        name.strip_suffix(test)
            .is_some_and(|module| module.is_empty() || module.ends_with("::"))
    });
    let filter: &[&str] = match path {
        Some(path) => &[path, "--exact"],
        None => &[test],
    };
    let output = tool("unshare", "util-linux")
        .args(["--user", "--map-root-user", "--net", "--pid", "--fork"])
        .args([
            "--kill-child",
            "sh",
            "-c",
            "ip link set lo up && exec \"$0\" \"$@\"",
        ])
        .arg(std::env::current_exe().unwrap())
        .args(filter)
        .args(["--nocapture", "--test-threads=1"])
        .env(INSIDE_NAMESPACE, "1")
        .output()
        .expect("unshare (util-linux) runs");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && report.contains("1 passed"),
        "{test} in its own network namespace (needs unshare from util-linux, ip from iproute2 \
         and permission to create user namespaces): {}\n{report}",
        output.status
    );
}

/// A response head's status and fields (names lowercased), from its text without the blank
/// line; status 0 when the first line names none.
pub fn parse_head(head: &str) -> (u16, Vec<(String, String)>) {
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let fields = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, fields)
}

/// A command for `program`, a tool from Debian's `package` the test needs; a missing one fails
/// the test saying how to get it (the suite's other tests still run).
pub fn tool(program: &str, package: &str) -> Command {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|directory| directory.join(program))
        .find(|candidate| candidate.is_file());
    match found {
        Some(found) => Command::new(found),
        None => panic!(
            "this test needs `{program}`: run scripts/setup.sh, which installs what the tests \
             need, or apt-get install {package}"
        ),
    }
}
