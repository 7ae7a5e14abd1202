//! The real services tests talk to, from Debian's packages, each on ports the test chose and
//! killed by its process id when dropped: `redis-server`, `etcd` (`etcd-server`) and BIND's
//! `named` (`bind9`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` of the test's own, stopped by its pid.
pub struct Redis(Child);

impl Redis {
    pub fn start(port: u16) -> Redis {
        let child = crate::process::tool("redis-server", "redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (Debian's redis-server package)");
        let redis = Redis(child);
        // Long: a loaded machine (a CI run beside builds) may take seconds to start a server.
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// etcd exited before it answered (a port taken meanwhile, most likely).
struct EtcdExited;

/// A real etcd on free ports with its own data directory; killed by its pid when dropped.
pub struct Etcd {
    child: Option<Child>,
    client: u16,
    peer: u16,
    data: PathBuf,
}

impl Etcd {
    /// Starts etcd on free ports. Ports are chosen free, then bound by etcd: should another
    /// process take one in between, etcd exits at once and is started again on new ones.
    pub fn start(data: &Path) -> Etcd {
        let mut etcd = Etcd {
            child: None,
            client: crate::free_port(),
            peer: crate::free_port(),
            data: data.to_owned(),
        };
        for _ in 0..3 {
            match etcd.try_run() {
                Ok(()) => return etcd,
                Err(EtcdExited) => {
                    (etcd.client, etcd.peer) = (crate::free_port(), crate::free_port());
                }
            }
        }
        panic!("etcd exited at start three times: {}", etcd.log());
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client)
    }

    /// Starts again, on the same ports and data, and waits until it answers.
    pub fn run(&mut self) {
        if self.try_run().is_err() {
            panic!("etcd exited at start: {}", self.log());
        }
    }

    /// Starts etcd and waits until it answers its health check, or until it exits. The wait
    /// is long: a loaded machine (a CI run beside builds) can take many seconds to start it.
    fn try_run(&mut self) -> Result<(), EtcdExited> {
        let client = self.url();
        let peer = format!("http://127.0.0.1:{}", self.peer);
        std::fs::create_dir_all(&self.data).expect("etcd's data directory");
        let log = std::fs::File::create(self.data.with_extension("log")).expect("etcd's log");
        let mut child = crate::process::tool("etcd", "etcd-server")
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
            .stderr(log)
            .spawn()
            .expect("etcd is installed (Debian: etcd-server)");
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return Err(EtcdExited);
            }
            if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.client)) {
                let _ = write!(
                    stream,
                    "GET /health HTTP/1.1\r\nHost: etcd\r\nConnection: close\r\n\r\n"
                );
                let mut answer = String::new();
                let _ = stream.read_to_string(&mut answer);
                if answer.contains("\"health\":\"true\"") {
                    self.child = Some(child);
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("etcd did not answer within 90 s: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The end of what etcd wrote, for a failure's message.
    fn log(&self) -> String {
        let text = std::fs::read_to_string(self.data.with_extension("log")).unwrap_or_default();
        let start = text.len().saturating_sub(2000);
        text.get(start..).unwrap_or(&text).to_owned()
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

/// BIND's `named` (Debian's bind9) as the secondary of one zone, on a free port, with its config,
/// zone copy and log (`named.log`) in a folder of its own; killed by its pid when dropped.
pub struct Named {
    child: Child,
    port: u16,
}

impl Named {
    /// Secondary on `port` for `zone`, transferred from `primary` (`address:port`) with the
    /// HMAC-SHA256 key `key` (name, base64 secret), which also signs its SOA checks. The port
    /// is the test's (from [`crate::free_port`]) so that the primary can be told where to
    /// send NOTIFY before named starts.
    pub fn secondary_on(
        folder: &Path,
        port: u16,
        zone: &str,
        primary: &str,
        key: (&str, &str),
    ) -> Named {
        std::fs::create_dir_all(folder).unwrap();
        let folder = folder.canonicalize().unwrap();
        let (host, primary_port) = primary.rsplit_once(':').expect("address:port");
        let (key_name, secret) = key;
        let dir = folder.display();
        let config = format!(
            r#"options {{
    directory "{dir}";
    pid-file "{dir}/named.pid";
    session-keyfile "{dir}/session.key";
    managed-keys-directory "{dir}";
    listen-on port {port} {{ 127.0.0.1; }};
    listen-on-v6 {{ none; }};
    recursion no;
    dnssec-validation no;
    notify no;
}};
controls {{ }};
key "{key_name}" {{ algorithm hmac-sha256; secret "{secret}"; }};
server {host} {{ keys {{ {key_name}; }}; }};
zone "{zone}" {{
    type secondary;
    primaries port {primary_port} {{ {host} key {key_name}; }};
    file "secondary.db";
}};
"#
        );
        let file = folder.join("named.conf");
        std::fs::write(&file, config).unwrap();
        Named::run(&file, port)
    }

    /// named with the config `file` (an example's), which listens on 127.0.0.1:`port`; its
    /// log is `named.log` beside the file.
    pub fn run(file: &Path, port: u16) -> Named {
        let log_file = file.with_file_name("named.log");
        let log = std::fs::File::create(&log_file).unwrap();
        // -g: in the foreground, logging to stderr; as the user running the test.
        // Debian puts it in /usr/sbin, which a non-root PATH lacks.
        let binary = ["/usr/sbin/named", "/usr/local/sbin/named"]
            .into_iter()
            .find(|path| Path::new(path).exists())
            .unwrap_or("named");
        let child = Command::new(binary)
            .arg("-g")
            .arg("-c")
            .arg(file)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("named is installed (Debian: bind9)");
        let named = Named { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "named did not listen; see {}",
                log_file.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        named
    }

    /// Where it answers (UDP and TCP).
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The repository's gRPC example server (`examples/grpc/kargo_grpc.py`, Python grpcio) on a
/// free port, killed by its pid when dropped.
pub struct GrpcServer {
    child: Child,
    pub address: String,
}

/// The example's script, which is both the server and the test's client.
fn kargo_grpc() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/grpc/kargo_grpc.py")
}

impl GrpcServer {
    /// `health_file`: a file whose content `down` makes its health service say NOT_SERVING.
    pub fn start(health_file: Option<&Path>) -> GrpcServer {
        let port = crate::free_port();
        let mut command = Command::new("python3");
        command
            .arg(kargo_grpc())
            .args(["serve", &port.to_string()])
            .stdout(Stdio::null());
        if let Some(file) = health_file {
            command.arg("--health-file").arg(file);
        }
        let child = command
            .spawn()
            .expect("python3 with grpcio (.ci/run installs it)");
        let server = GrpcServer {
            child,
            address: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(&server.address).is_err() {
            assert!(Instant::now() < deadline, "the gRPC server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// Kills it now (a backend lost mid-call).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts the example's client for one `scenario` against `target`; it prints a JSON line per
/// event.
pub fn grpc_client(target: &str, scenario: &str) -> Child {
    Command::new("python3")
        .arg(kargo_grpc())
        .args(["call", target, scenario])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with grpcio (.ci/run installs it)")
}

/// The last event of a whole call of `scenario`.
pub fn grpc_call(target: &str, scenario: &str) -> serde_json::Value {
    let output = grpc_client(target, scenario)
        .wait_with_output()
        .expect("the gRPC client ran");
    let text = String::from_utf8_lossy(&output.stdout);
    let last = text
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no event from {scenario}"));
    serde_json::from_str(last).expect("a JSON event")
}
