//! Seeded mutation fuzzing of what trafik reads from the network, each through a real server:
//! the admin API (paths, methods, headers), a tls-passthrough listener's ClientHello sniffing,
//! the DNS server over UDP and TCP (queries, and AXFR/IXFR with and without TSIG; a `trafik
//! serve` child process), and the load client's response parser (`trafik load`'s HTTP/1.1
//! client against a real socket server answering mutated responses). Every case gets an answer or a close within a bound (no hang); the
//! server still serves afterwards (no panic took it down) and its peak memory stays bounded.
//!
//! A short pass runs with the tests; `fuzz/run.sh` runs the `long_*` ones with
//! `TRAFIK_FUZZ_CASES` cases each (and `TRAFIK_FUZZ_SEED`, else one from the clock).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use trafik_balance::random::SharedRng;
use trafik_test_support::{Trafik, Upstream};

/// How long one case may take to be answered or closed.
const BOUND: Duration = Duration::from_secs(5);
/// The most memory the server may have held at its peak after a run.
const MAX_PEAK_RSS_KIB: u64 = 512 * 1024;

/// Cuts, splices in `pieces` and overwrites single bytes of `seed`, one to four times.
fn mutate(seed: &[u8], pieces: &[&[u8]], random: &SharedRng) -> Vec<u8> {
    let mut bytes = seed.to_vec();
    for _ in 0..=random.below(4) {
        let at = random.below(bytes.len() + 1);
        match random.below(3) {
            0 => {
                let end = (at + random.below(8)).min(bytes.len());
                bytes.drain(at..end);
            }
            1 => {
                let piece = pieces[random.below(pieces.len())];
                bytes.splice(at..at, piece.iter().copied());
            }
            _ if at < bytes.len() => bytes[at] = random.below(256) as u8,
            _ => bytes.push(random.below(256) as u8),
        }
    }
    bytes
}

/// Sends `bytes` on a new connection, closes the sending side and reads until the peer closes:
/// what came back, or `None` when that took longer than [`BOUND`].
fn exchange(address: SocketAddr, bytes: &[u8]) -> Option<Vec<u8>> {
    let mut stream = TcpStream::connect(address).expect("the server accepts");
    stream.set_read_timeout(Some(BOUND)).unwrap();
    let _ = stream.write_all(bytes);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let started = Instant::now();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return Some(answer),
            Ok(read) => answer.extend_from_slice(&buffer[..read]),
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(answer);
            }
            Err(_) => return None,
        }
        if started.elapsed() > BOUND {
            return None;
        }
    }
}

/// The number of cases and the seed of a long run, from the environment.
fn long_run() -> (u64, u64) {
    let from_env = |name: &str| std::env::var(name).ok().and_then(|n| n.parse().ok());
    let seed = from_env("TRAFIK_FUZZ_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(13, |d| d.as_nanos() as u64)
    });
    (from_env("TRAFIK_FUZZ_CASES").unwrap_or(100_000), seed)
}

/// `trafik serve` with an HTTP listener, a tls-passthrough listener, DNS and the admin API.
struct Instance {
    trafik: Trafik,
    _upstream: Upstream,
    web: SocketAddr,
    passthrough: SocketAddr,
    dns: SocketAddr,
    admin: SocketAddr,
    _directory: PathBuf,
}

impl Instance {
    fn start(name: &str) -> Instance {
        let upstream = Upstream::start(&[]);
        let directory =
            std::env::temp_dir().join(format!("trafik-fuzz-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let file = directory.join("fuzz.toml");
        let config = format!(
            r#"
[server.timeouts]
client_header = "2s"

[admin]
listen = "127.0.0.1:0"

[[listener]]
name = "web"
listen = "127.0.0.1:0"
[[listener.route]]
pool = "takip"

[[listener]]
name = "tls"
listen = "127.0.0.1:0"
protocol = "tls-passthrough"
[[listener.route]]
pool = "ham"

[[pool]]
name = "takip"
backends = [{{ address = "{upstream}" }}]

[[pool]]
name = "ham"
backends = [{{ address = "{upstream}" }}]

[dns]
listen = "127.0.0.1:0"

[[dns.region]]
name = "b34"
addresses = ["127.0.0.34", "::34"]

[[dns.region]]
name = "b35"
addresses = ["127.0.0.35"]

[[dns.zone]]
origin = "kargo.test."
ttl = 30
name_servers = ["ns1"]

[[dns.zone.record]]
name = "ns1"
type = "A"
value = "127.0.0.1"

[[dns.zone.record]]
type = "MX"
value = "10 ns1"

[[dns.zone.record]]
name = "*.musteri"
type = "CNAME"
value = "agirlik"

[[dns.zone.record]]
name = "bolge"
type = "NS"
value = "ns1.bolge"

[[dns.zone.record]]
name = "ns1.bolge"
type = "A"
value = "127.0.0.53"

[[dns.zone.name]]
name = "agirlik"
policy = "weighted"
weights = {{ b34 = 2, b35 = 1 }}

[dns.zone.transfer]
allow = ["127.0.0.1/32"]
tsig = {{ name = "aktarim", algorithm = "hmac-sha256", secret = "q1kNnYVsZQoeZ3pGJ7qR0lzCq4JXb0XkD9cj1nC7h8Y=" }}

# Transferred without a key: mutated transfer requests reach the sending path.
[[dns.zone]]
origin = "acik.test."
name_servers = ["ns1.kargo.test."]

[[dns.zone.record]]
name = "kayit"
type = "TXT"
value = "bir"

# Signed, with a signed delegation and a CNAME to nothing: DO questions and transfers reach
# the signing paths.
[[dns.zone.record]]
name = "alt"
type = "NS"
value = "ns1.kargo.test."

[[dns.zone.record]]
name = "alt"
type = "DS"
value = "12345 13 2 {digest}"

[[dns.zone.record]]
name = "kopuk"
type = "CNAME"
value = "yok"

[dns.zone.transfer]
allow = ["127.0.0.1/32"]

[dns.zone.dnssec]
keys = "dns-keys/"
"#,
            digest = "ab".repeat(32),
            upstream = upstream.address
        );
        std::fs::write(&file, config).unwrap();
        let (trafik, printed) = Trafik::start(
            &["serve", "--config", file.to_str().unwrap()],
            Stdio::null(),
            "admin on",
        );
        let after = |prefix: &str| -> SocketAddr {
            printed
                .lines()
                .find_map(|line| line.split_once(prefix).map(|(_, rest)| rest))
                .and_then(|rest| rest.split(['/', ' ']).find(|part| !part.is_empty()))
                .and_then(|address| address.parse().ok())
                .unwrap_or_else(|| panic!("no {prefix:?} in {printed}"))
        };
        Instance {
            web: after("http://"),
            passthrough: after("tls-passthrough://"),
            dns: after("dns on "),
            admin: after("admin on http://"),
            trafik,
            _upstream: upstream,
            _directory: directory,
        }
    }

    /// Still answering on every front: HTTP through the proxy, the admin API and DNS.
    fn assert_serves(&self) {
        let answer = exchange(
            self.web,
            b"GET /takip/TR-1 HTTP/1.1\r\nHost: kargo.test\r\nConnection: close\r\n\r\n",
        )
        .expect("the proxy answers");
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
        let status = format!(
            "GET /status HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.admin
        );
        let answer = exchange(self.admin, status.as_bytes()).expect("the admin API answers");
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
        let answer = udp_exchange(self.dns, &dns_query(0x1234, "ns1.kargo.test"))
            .expect("the DNS server answers");
        assert_eq!(&answer[..2], &[0x12, 0x34], "the query's id");
        assert_eq!(answer[3] & 0x0f, 0, "NOERROR: {answer:?}");
    }

    /// The most memory the process held, from `/proc`.
    fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.trafik.pid()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    fn finish(self, target: &str, cases: u64, seed: u64, started: Instant) {
        self.assert_serves();
        let peak = self.peak_rss_kib();
        assert!(peak < MAX_PEAK_RSS_KIB, "peak RSS {peak} KiB");
        eprintln!(
            "fuzz {target}: {cases} cases (seed {seed}) in {:.1} s, peak RSS {} MiB",
            started.elapsed().as_secs_f64(),
            peak / 1024
        );
    }
}

/// A DNS query for `name`, type A, recursion desired.
fn dns_query(id: u16, name: &str) -> Vec<u8> {
    let mut packet = id.to_be_bytes().to_vec();
    packet.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        packet.push(label.len() as u8);
        packet.extend_from_slice(label.as_bytes());
    }
    packet.extend_from_slice(&[0, 0, 1, 0, 1]);
    packet
}

/// [`dns_query`] with an EDNS OPT record asking for DNSSEC (the DO bit).
fn dnssec_query(id: u16, name: &str) -> Vec<u8> {
    let mut packet = dns_query(id, name);
    packet[11] = 1;
    packet.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 0]);
    packet
}

/// A zone transfer request: `kind` 252 (AXFR) or 251 (IXFR, with the client's SOA at serial 1
/// in the authority section), and a TSIG record by `key` with a MAC of zeros when given.
fn transfer_query(id: u16, zone: &str, kind: u16, key: Option<&str>) -> Vec<u8> {
    let name = |packet: &mut Vec<u8>, name: &str| {
        for label in name.split('.').filter(|l| !l.is_empty()) {
            packet.push(label.len() as u8);
            packet.extend_from_slice(label.as_bytes());
        }
        packet.push(0);
    };
    let mut packet = id.to_be_bytes().to_vec();
    let authority = u8::from(kind == 251);
    let additional = u8::from(key.is_some());
    packet.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, authority, 0, additional]);
    name(&mut packet, zone);
    packet.extend_from_slice(&kind.to_be_bytes());
    packet.extend_from_slice(&[0, 1]);
    if kind == 251 {
        // The client's SOA: a pointer to the question's name, serial 1.
        packet.extend_from_slice(&[0xc0, 0x0c, 0, 6, 0, 1, 0, 0, 0, 0]);
        let rdata = [&[0u8, 0][..], &1u32.to_be_bytes(), &[0; 16]].concat();
        packet.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        packet.extend_from_slice(&rdata);
    }
    if let Some(key) = key {
        name(&mut packet, key);
        packet.extend_from_slice(&[0, 250, 0, 255, 0, 0, 0, 0]);
        let mut rdata = Vec::new();
        name(&mut rdata, "hmac-sha256");
        rdata.extend_from_slice(&[0, 0, 0x6a, 0x0f, 0x44, 0x00, 1, 44, 0, 32]);
        rdata.extend_from_slice(&[0x5a; 32]);
        rdata.extend_from_slice(&id.to_be_bytes());
        rdata.extend_from_slice(&[0, 0, 0, 0]);
        packet.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        packet.extend_from_slice(&rdata);
    }
    packet
}

/// One datagram there and its answer, if one comes within a second (a server may drop what
/// it cannot parse).
fn udp_exchange(server: SocketAddr, packet: &[u8]) -> Option<Vec<u8>> {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    socket.send_to(packet, server).ok()?;
    let mut buffer = [0u8; 4096];
    let (read, _) = socket.recv_from(&mut buffer).ok()?;
    Some(buffer[..read].to_vec())
}

fn admin_cases(instance: &Instance, cases: u64, random: &SharedRng) {
    let host = instance.admin.to_string();
    let seeds: Vec<String> = [
        "GET /status HTTP/1.1\r\nHost: {host}\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n",
        "POST /reload HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n",
        "POST /pools/takip/backends/127.0.0.1:1/drain HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n\r\n",
        "POST /pools/nope/backends/%5B::1%5D:1/undrain HTTP/1.1\r\nHost: [::1]\r\nAuthorization: Bearer 0123456789abcdef\r\n\r\n",
        "DELETE /caches/kenar/TR-1 HTTP/1.1\r\nHost: {host}\r\nOrigin: http://evil.example\r\n\r\n",
    ]
    .iter()
    .map(|seed| seed.replace("{host}", &host))
    .collect();
    let pieces: [&[u8]; 14] = [
        b"\r\n",
        b"/",
        b"%",
        b"%2f",
        b"..",
        b"drain",
        b"backends/",
        b"Host: ",
        b"Origin: ",
        b"Authorization: Bearer ",
        b"Content-Length: ",
        b"\0",
        b"?",
        b"\xff",
    ];
    for _ in 0..cases {
        let request = mutate(seeds[random.below(seeds.len())].as_bytes(), &pieces, random);
        let answer = exchange(instance.admin, &request).unwrap_or_else(|| {
            panic!(
                "no answer nor close within {BOUND:?} to {:?}",
                String::from_utf8_lossy(&request)
            )
        });
        assert!(
            answer.is_empty() || answer.starts_with(b"HTTP/1."),
            "{:?} → {:?}",
            String::from_utf8_lossy(&request),
            String::from_utf8_lossy(&answer)
        );
    }
}

/// A ClientHello (TLS 1.2 record, one cipher suite) asking for `name`.
fn client_hello(name: &str) -> Vec<u8> {
    let name = name.as_bytes();
    let length = |n: usize| (n as u16).to_be_bytes();
    let mut server_name = length(name.len() + 3).to_vec();
    server_name.push(0);
    server_name.extend_from_slice(&length(name.len()));
    server_name.extend_from_slice(name);
    let mut extensions = vec![0, 0];
    extensions.extend_from_slice(&length(server_name.len()));
    extensions.extend_from_slice(&server_name);
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
    body.extend_from_slice(&length(extensions.len()));
    body.extend_from_slice(&extensions);
    let mut handshake = vec![1];
    handshake.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    handshake.extend_from_slice(&body);
    let mut record = vec![22, 3, 1];
    record.extend_from_slice(&length(handshake.len()));
    record.extend_from_slice(&handshake);
    record
}

fn client_hello_cases(instance: &Instance, cases: u64, random: &SharedRng) {
    let seeds = [client_hello("a.kargo.test"), client_hello("")];
    // What the parser turns on: record and handshake types, lengths, the extension's type.
    let pieces: [&[u8]; 8] = [
        &[22],
        &[1],
        &[0, 0],
        &[0xff, 0xff],
        &[0x40, 0x00],
        &[3, 3],
        &[22, 3, 1, 0, 4],
        b"kargo",
    ];
    for _ in 0..cases {
        let hello = mutate(&seeds[random.below(seeds.len())], &pieces, random);
        exchange(instance.passthrough, &hello)
            .unwrap_or_else(|| panic!("no relay nor close within {BOUND:?} for {hello:?}"));
    }
}

fn dns_cases(instance: &Instance, cases: u64, random: &SharedRng) {
    let seeds = [
        dns_query(1, "ns1.kargo.test"),
        dns_query(2, "yok.kargo.test"),
        dns_query(3, "kargo.test"),
        dns_query(4, "x.musteri.kargo.test"),
        dns_query(5, "www.bolge.kargo.test"),
        dns_query(6, "agirlik.kargo.test"),
        transfer_query(7, "kargo.test", 252, None),
        transfer_query(8, "kargo.test", 252, Some("aktarim")),
        transfer_query(9, "kargo.test", 251, Some("aktarim")),
        transfer_query(10, "kargo.test", 252, Some("baska")),
        transfer_query(11, "acik.test", 252, None),
        transfer_query(12, "acik.test", 251, None),
        dnssec_query(13, "kopuk.acik.test"),
        dnssec_query(14, "www.alt.acik.test"),
        dnssec_query(15, "yok.acik.test"),
        dnssec_query(16, "kayit.acik.test"),
    ];
    let pieces: [&[u8]; 8] = [
        &[0xc0, 0x0c],
        &[0],
        &[63],
        &[0xff, 0xff],
        &[0, 41],
        &[0, 252],
        &[0, 251],
        &[0, 250],
    ];
    for n in 0..cases {
        let packet = mutate(&seeds[random.below(seeds.len())], &pieces, random);
        if n % 2 == 0 {
            // An answer is optional for a datagram; the server going on is not (checked after).
            let _ = udp_exchange(instance.dns, &packet);
        } else {
            let mut framed = (packet.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(&packet);
            let framed = mutate(&framed, &pieces, random);
            exchange(instance.dns, &framed)
                .unwrap_or_else(|| panic!("no answer nor close within {BOUND:?} for {framed:?}"));
        }
    }
}

/// Runs `cases` of `target` against a new instance.
fn run(target: &str, cases: u64, seed: u64, each: fn(&Instance, u64, &SharedRng)) {
    let instance = Instance::start(target);
    instance.assert_serves();
    let random = SharedRng::new(seed);
    let started = Instant::now();
    each(&instance, cases, &random);
    instance.finish(target, cases, seed, started);
}

/// Mutated responses from a real socket server to `trafik load`'s HTTP/1.1 client: each
/// request ends in an answer or an error within [`BOUND`], never a hang or a panic.
fn load_client_cases(cases: u64, seed: u64) {
    use trafik_load::client::{Connection, Scratch};
    let seeds: [&[u8]; 5] = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.0 200 OK\r\n\r\nuntil the end",
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\nConnection: close\r\n\r\n",
    ];
    let pieces: [&[u8]; 12] = [
        b"\r\n",
        b"\n",
        b":",
        b" ",
        b"chunked",
        b"Content-Length: ",
        b"Transfer-Encoding: ",
        b"ffffffffffffffffff",
        b"-1",
        b"0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b";x=y",
    ];
    let random = SharedRng::new(seed);
    let responses: Vec<Vec<u8>> = (0..cases)
        .map(|_| mutate(seeds[random.below(seeds.len())], &pieces, &random))
        .collect();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let shown = responses.clone();
    let server = std::thread::spawn(move || {
        for response in responses {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            // The request head first, then the answer, then the close.
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let _ = stream.write_all(&response);
        }
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let target = trafik_load::Target::new(
        &[format!("http://{address}/takip/TR-{{n}}")],
        http::Method::GET,
        Vec::new(),
        bytes::Bytes::new(),
    )
    .unwrap();
    let started = Instant::now();
    let mut answered = 0;
    runtime.block_on(async {
        let mut scratch = Scratch::default();
        for (n, response) in shown.iter().enumerate() {
            let exchange = async {
                let mut connection = Connection::open(&target, false, None).await?;
                connection.send(&target, n as u64, &mut scratch).await
            };
            match tokio::time::timeout(BOUND, exchange).await {
                Ok(Ok(_)) => answered += 1,
                Ok(Err(_)) => {}
                Err(_) => panic!("the client hung on {:?}", String::from_utf8_lossy(response)),
            }
        }
    });
    server.join().unwrap();
    eprintln!(
        "fuzz load-client: {cases} cases (seed {seed}) in {:.1} s, {answered} read as answers",
        started.elapsed().as_secs_f64()
    );
    assert!(
        answered > 0,
        "no seed survived as an answer: the parser refuses everything"
    );
}

#[test]
fn mutated_admin_requests_get_an_answer_or_a_close() {
    run("admin", 2_000, 13, admin_cases);
}

#[test]
fn mutated_client_hellos_are_relayed_or_closed() {
    run("client-hello", 2_000, 13, client_hello_cases);
}

#[test]
fn mutated_dns_packets_over_udp_and_tcp_leave_the_server_answering() {
    run("dns", 1_000, 13, dns_cases);
}

#[test]
fn mutated_responses_end_the_load_clients_request_in_an_answer_or_an_error() {
    load_client_cases(2_000, 13);
}

#[test]
#[ignore = "a long run: fuzz/run.sh"]
fn long_admin() {
    let (cases, seed) = long_run();
    run("admin", cases, seed, admin_cases);
}

#[test]
#[ignore = "a long run: fuzz/run.sh"]
fn long_client_hello() {
    let (cases, seed) = long_run();
    run("client-hello", cases, seed, client_hello_cases);
}

#[test]
#[ignore = "a long run: fuzz/run.sh"]
fn long_dns() {
    let (cases, seed) = long_run();
    run("dns", cases, seed, dns_cases);
}

#[test]
#[ignore = "a long run: fuzz/run.sh"]
fn long_load_client() {
    let (cases, seed) = long_run();
    load_client_cases(cases, seed);
}
