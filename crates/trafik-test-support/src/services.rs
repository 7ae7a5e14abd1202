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

/// Pebble, Let's Encrypt's ACME test server (Debian's `pebble`), on free ports with its config and
/// log in a folder of its own; killed by its pid when dropped. It checks challenges on
/// `http_port` (HTTP-01) and `tls_port` (TLS-ALPN-01) of the address `dns` gives for the name.
pub struct Pebble {
    child: Child,
    folder: PathBuf,
    directory_port: u16,
    management_port: u16,
}

impl Pebble {
    /// Starts pebble with its own HTTPS certificate (made here, for 127.0.0.1), waiting until
    /// its directory answers; it validates at once (`PEBBLE_VA_NOSLEEP`) and never rejects a
    /// good nonce.
    pub fn start(
        folder: &Path,
        dns: std::net::SocketAddr,
        http_port: u16,
        tls_port: u16,
    ) -> Pebble {
        std::fs::create_dir_all(folder).expect("pebble's folder");
        let ca = crate::proxy::tls::TestCa::new("pebble's own HTTPS");
        let own = ca.issue(&["127.0.0.1", "localhost"]);
        std::fs::write(folder.join("https-ca.pem"), &ca.pem).unwrap();
        std::fs::write(folder.join("https.pem"), &own.cert_pem).unwrap();
        std::fs::write(folder.join("https.key"), &own.key_pem).unwrap();
        let [directory_port, management_port] = crate::free_ports();
        let config = serde_json::json!({ "pebble": {
            "listenAddress": format!("127.0.0.1:{directory_port}"),
            "managementListenAddress": format!("127.0.0.1:{management_port}"),
            "certificate": folder.join("https.pem"),
            "privateKey": folder.join("https.key"),
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }});
        std::fs::write(folder.join("pebble.json"), config.to_string()).unwrap();
        let log = std::fs::File::create(folder.join("pebble.log")).expect("pebble's log");
        let child = crate::process::tool("pebble", "pebble")
            .arg("-config")
            .arg(folder.join("pebble.json"))
            .args(["-dnsserver", &dns.to_string()])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            // Orders prove their names again, so a renewal's challenge can fail; pebble still
            // reuses a valid authorization about once in a hundred orders of one account.
            .env("PEBBLE_AUTHZREUSE", "0")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("pebble (Debian's pebble package)");
        let pebble = Pebble {
            child,
            folder: folder.to_owned(),
            directory_port,
            management_port,
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        while TcpStream::connect(("127.0.0.1", management_port)).is_err()
            || TcpStream::connect(("127.0.0.1", directory_port)).is_err()
        {
            assert!(
                Instant::now() < deadline,
                "pebble did not listen within 90 s: {}",
                pebble.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        pebble
    }

    /// The ACME directory URL.
    pub fn directory(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.directory_port)
    }

    /// The CA file of pebble's own HTTPS (`directory_ca`).
    pub fn https_ca(&self) -> PathBuf {
        self.folder.join("https-ca.pem")
    }

    /// The root certificate (PEM) pebble signs with, from its management API: made anew at
    /// every start.
    pub fn root(&self) -> String {
        self.management("/roots/0")
    }

    /// `GET path` on the management API, trusting pebble's own HTTPS CA.
    fn management(&self, path: &str) -> String {
        let ca = std::fs::read_to_string(self.https_ca()).unwrap();
        let (_, answer) = https_get(self.management_port, "127.0.0.1", path, &ca)
            .unwrap_or_else(|e| panic!("pebble {path}: {e}"));
        let (head, body) = answer.split_once("\r\n\r\n").expect("a whole answer");
        assert!(head.starts_with("HTTP/1.1 200"), "pebble {path}: {head}");
        body.to_owned()
    }

    /// What pebble wrote, for a failure's message.
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(self.folder.join("pebble.log")).unwrap_or_default();
        let start = text.len().saturating_sub(3000);
        text.get(start..).unwrap_or(&text).to_owned()
    }

    /// How many certificates pebble issued (its log's line for each).
    pub fn issued(&self) -> usize {
        std::fs::read_to_string(self.folder.join("pebble.log"))
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains("Issued certificate serial"))
            .count()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` over HTTPS to 127.0.0.1:`port` for `name` (SNI and Host), trusting only the CA in
/// `root_pem`: the leaf certificate served (DER) and the whole answer, read to its close.
pub fn https_get(
    port: u16,
    name: &str,
    path: &str,
    root_pem: &str,
) -> Result<(Vec<u8>, String), String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let root = rustls::pki_types::CertificateDer::from_pem_slice(root_pem.as_bytes())
        .map_err(|e| format!("the root is not PEM: {e}"))?;
    roots.add(root).map_err(|e| e.to_string())?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let server_name =
        rustls::pki_types::ServerName::try_from(name.to_owned()).map_err(|e| e.to_string())?;
    let connection = rustls::ClientConnection::new(std::sync::Arc::new(config), server_name)
        .map_err(|e| e.to_string())?;
    let socket = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let mut stream = rustls::StreamOwned::new(connection, socket);
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    let read = stream.read_to_string(&mut answer);
    // A server may close without TLS's close_notify once the answer is out.
    if answer.is_empty() {
        return Err(format!("no answer: {read:?}"));
    }
    let leaf = stream.conn.peer_certificates().ok_or("no certificate")?[0].to_vec();
    Ok((leaf, answer))
}
