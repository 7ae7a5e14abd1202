//! The DNS server live: real UDP and TCP sockets on a free loopback port, asked by `dig`
//! (dnsutils) and by hickory's client, and sent malformed packets by hand.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::Command;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hickory_net::client::{Client, ClientHandle};
use hickory_net::runtime::TokioRuntimeProvider;
use hickory_net::tcp::TcpClientStream;
use hickory_net::udp::UdpClientStream;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};
use trafik_dns::policy::{AllDown, Live, Policy, Prefix, Weighted, WeightedChoice};
use trafik_dns::zone::{DnsPlan, NamePlan, RecordData, RecordPlan, RegionPlan, SoaPlan, ZonePlan};
use trafik_dns::{Authority, DnsServer, Liveness};

/// Region liveness a test sets by hand.
struct Switches(AtomicU64);

impl Liveness for Switches {
    fn live(&self) -> Live {
        Live::from_bits(self.0.load(Ordering::SeqCst))
    }
}

const B34: &str = "127.0.0.34";
const B35: &str = "127.0.0.35";
const B06: &str = "127.0.0.6";

fn name(name: &str, policy: Policy) -> NamePlan {
    NamePlan {
        name: name.into(),
        ttl: 30,
        policy,
    }
}

/// The course's zone: three regions, four client groups, one name per policy, and a name with
/// more TXT records than fit 512 bytes.
/// The course's plan with its zone signed by keys made in a temporary folder named after
/// `label` (the caller removes it).
fn signed_course_plan(label: &str) -> (DnsPlan, std::path::PathBuf) {
    let mut plan = course_plan();
    let folder = std::env::temp_dir().join(format!("{label}-{}", std::process::id()));
    let origin = Name::from_ascii("kargo.test.").unwrap();
    plan.zones[0].dnssec = Some(trafik_dns::dnssec::ZoneKeys::load(&folder, &origin).unwrap());
    (plan, folder)
}

fn course_plan() -> DnsPlan {
    let region = |name: &str, address: &str| RegionPlan {
        name: name.into(),
        addresses: vec![address.parse().unwrap()],
    };
    let txt = |i: usize| RecordPlan {
        name: "buyuk".into(),
        ttl: None,
        data: RecordData::Txt(vec![format!("kayit {i:02} {}", "x".repeat(40))]),
    };
    DnsPlan {
        regions: vec![region("b34", B34), region("b35", B35), region("b06", B06)],
        groups: (1..=4)
            .map(|g| {
                let prefix = Prefix::parse(&format!("10.{g}.0.0/16")).unwrap();
                (format!("g{g}"), vec![prefix])
            })
            .collect(),
        zones: vec![ZonePlan {
            origin: "kargo.test.".into(),
            ttl: 30,
            soa: SoaPlan {
                mname: "ns1".into(),
                rname: "hostmaster".into(),
                serial: 1,
                refresh: 3600,
                retry: 600,
                expire: 604_800,
                minimum: 30,
            },
            name_servers: vec!["ns1".into()],
            records: std::iter::once(RecordPlan {
                name: "ns1".into(),
                ttl: None,
                data: RecordData::A("127.0.0.1".parse().unwrap()),
            })
            .chain((0..40).map(txt))
            .collect(),
            names: vec![
                name(
                    "cografi",
                    Policy::Geo {
                        region_of_group: vec![0, 1, 0, 2],
                        default: 0,
                        fallback: vec![Some(2), Some(0), Some(1)],
                    },
                ),
                name(
                    "gecikme",
                    Policy::Latency {
                        distance: vec![
                            vec![1.0, 3.0, 2.0],
                            vec![3.0, 1.0, 2.0],
                            vec![2.0, 4.0, 1.0],
                            vec![2.0, 3.0, 4.0],
                        ],
                        default_group: 0,
                    },
                ),
                name(
                    "agirlik",
                    Policy::Weighted(Weighted::new(
                        WeightedChoice::Pattern,
                        vec![0, 1, 2, 0, 1, 0, 1, 2, 0, 0],
                        None,
                    )),
                ),
                name(
                    "devralma",
                    Policy::Failover {
                        primary: 0,
                        secondary: 1,
                        all_down: AllDown::Empty,
                    },
                ),
                name(
                    "hepsi",
                    Policy::Multivalue {
                        regions: vec![0, 1, 2],
                        max: 2,
                    },
                ),
            ],
            transfer: None,
            dnssec: None,
        }],
        query_log: false,
        rate_limit: None,
        geoip: None,
    }
}

/// A server on a free port, on a runtime of its own so the test can block on `dig`.
struct Running {
    runtime: tokio::runtime::Runtime,
    server: Option<DnsServer>,
    live: Arc<Switches>,
    address: SocketAddr,
}

impl Running {
    fn start() -> Running {
        Running::with(&course_plan())
    }

    fn with(plan: &DnsPlan) -> Running {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let live = Arc::new(Switches(AtomicU64::new(Live::all(3).bits())));
        let authority = Authority::build(plan, None).unwrap();
        let liveness: Arc<dyn Liveness> = live.clone();
        let entered = runtime.enter();
        let server =
            DnsServer::start("127.0.0.1:0".parse().unwrap(), 2, authority, liveness).unwrap();
        drop(entered);
        let address = server.address();
        Running {
            runtime,
            server: Some(server),
            live,
            address,
        }
    }

    fn set_live(&self, region: usize, up: bool) {
        let live = self.live.live().with(region, up);
        self.live.0.store(live.bits(), Ordering::SeqCst);
    }

    /// `dig` with the given options; its whole output.
    fn dig(&self, args: &[&str]) -> String {
        let output = Command::new("dig")
            .arg(format!("@{}", self.address.ip()))
            .arg("-p")
            .arg(self.address.port().to_string())
            .args(["+tries=1", "+time=2"])
            .args(args)
            .output()
            .expect("dig runs (install dnsutils)");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The addresses `dig +short` prints for `name` asked from `subnet`.
    fn addresses(&self, name: &str, subnet: &str) -> Vec<String> {
        let subnet = format!("+subnet={subnet}");
        self.dig(&[name, "A", &subnet, "+short"])
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            self.runtime.block_on(server.stop());
        }
    }
}

#[test]
fn each_policy_answers_each_client_group_by_its_subnet() {
    let dns = Running::start();
    let groups = ["10.1.0.0/16", "10.2.9.0/24", "10.3.0.0/16", "10.4.200.0/24"];
    let geo: Vec<String> = groups
        .iter()
        .map(|g| dns.addresses("cografi.kargo.test", g).join(","))
        .collect();
    assert_eq!(geo, [B34, B35, B34, B06]);
    let latency: Vec<String> = groups
        .iter()
        .map(|g| dns.addresses("gecikme.kargo.test", g).join(","))
        .collect();
    assert_eq!(latency, [B34, B35, B06, B34]);
    let weighted: Vec<String> = (0..10)
        .map(|_| dns.addresses("agirlik.kargo.test", groups[0]).join(","))
        .collect();
    let count = |address: &str| weighted.iter().filter(|a| *a == address).count();
    assert_eq!(
        (count(B34), count(B35), count(B06)),
        (5, 3, 2),
        "{weighted:?}"
    );
    assert_eq!(dns.addresses("hepsi.kargo.test", groups[0]), [B34, B35]);
}

#[test]
fn the_answer_carries_the_matched_prefix_as_ecs_scope() {
    let dns = Running::start();
    let answer = dns.dig(&["cografi.kargo.test", "A", "+subnet=10.2.9.0/24"]);
    assert!(
        answer.contains("CLIENT-SUBNET: 10.2.9.0/24/16"),
        "scope 16 from the 10.2.0.0/16 group:\n{answer}"
    );
    assert!(answer.contains("flags: qr aa"), "authoritative:\n{answer}");
    let static_answer = dns.dig(&["ns1.kargo.test", "A", "+subnet=10.2.9.0/24"]);
    assert!(
        static_answer.contains("CLIENT-SUBNET: 10.2.9.0/24/0"),
        "a static record holds for every client:\n{static_answer}"
    );
}

#[test]
fn health_moves_answers_to_fallbacks_and_back() {
    let dns = Running::start();
    dns.set_live(0, false);
    assert_eq!(dns.addresses("cografi.kargo.test", "10.1.0.0/16"), [B06]);
    assert_eq!(dns.addresses("gecikme.kargo.test", "10.4.0.0/16"), [B35]);
    assert_eq!(dns.addresses("devralma.kargo.test", "10.1.0.0/16"), [B35]);
    assert_eq!(dns.addresses("hepsi.kargo.test", "10.1.0.0/16"), [B35, B06]);
    for _ in 0..10 {
        assert_ne!(dns.addresses("agirlik.kargo.test", "10.1.0.0/16"), [B34]);
    }
    dns.set_live(1, false);
    let empty = dns.dig(&["devralma.kargo.test", "A"]);
    assert!(
        empty.contains("status: NOERROR") && empty.contains("ANSWER: 0"),
        "{empty}"
    );
    dns.set_live(0, true);
    assert_eq!(dns.addresses("devralma.kargo.test", "10.1.0.0/16"), [B34]);
}

#[test]
fn a_large_answer_is_truncated_over_udp_and_complete_over_tcp() {
    let dns = Running::start();
    let answer = dns.dig(&["buyuk.kargo.test", "TXT", "+noedns"]);
    assert!(
        answer.contains("Truncated, retrying in TCP mode"),
        "{answer}"
    );
    assert!(answer.contains("ANSWER: 40"), "{answer}");
    let udp_only = dns.dig(&["buyuk.kargo.test", "TXT", "+ignore", "+bufsize=4096"]);
    assert!(udp_only.contains("flags: qr aa tc"), "{udp_only}");
}

#[test]
fn hickory_clients_see_negative_answers_and_tcp_over_both_transports() {
    let dns = Running::start();
    dns.runtime.block_on(async {
        let provider = TokioRuntimeProvider::default();
        let udp = UdpClientStream::builder(dns.address, provider.clone()).build();
        let (mut client, background) = Client::<TokioRuntimeProvider>::from_sender(udp);
        tokio::spawn(background);
        let ask = |name: &str| Name::from_str(name).unwrap();
        let nx = client
            .query(ask("yok.kargo.test."), DNSClass::IN, RecordType::A)
            .await
            .unwrap();
        assert_eq!(nx.metadata.response_code, ResponseCode::NXDomain);
        assert_eq!(nx.authorities[0].record_type(), RecordType::SOA);
        let nodata = client
            .query(ask("ns1.kargo.test."), DNSClass::IN, RecordType::AAAA)
            .await
            .unwrap();
        assert_eq!(nodata.metadata.response_code, ResponseCode::NoError);
        assert!(nodata.answers.is_empty());
        assert_eq!(nodata.authorities.len(), 1);
        let refused = client
            .query(ask("example.com."), DNSClass::IN, RecordType::A)
            .await
            .unwrap();
        assert_eq!(refused.metadata.response_code, ResponseCode::Refused);
        let (connect, sender) = TcpClientStream::new(dns.address, None, None, provider);
        let stream = connect.await.unwrap();
        let (mut tcp, background) = Client::<TokioRuntimeProvider>::new(stream, sender);
        tokio::spawn(background);
        let large = tcp
            .query(ask("buyuk.kargo.test."), DNSClass::IN, RecordType::TXT)
            .await
            .unwrap();
        assert_eq!(large.answers.len(), 40);
        let soa = tcp
            .query(ask("kargo.test."), DNSClass::IN, RecordType::SOA)
            .await
            .unwrap();
        assert!(matches!(soa.answers[0].data, RData::SOA(_)));
    });
}

/// A query for `cografi.kargo.test. A`, id 0x1234: header then question.
fn query_packet() -> Vec<u8> {
    query_for("cografi")
}

/// A query for `NAME.kargo.test. A`, id 0x1234.
fn query_for(name: &str) -> Vec<u8> {
    let mut packet = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in [name, "kargo", "test"] {
        packet.push(label.len() as u8);
        packet.extend_from_slice(label.as_bytes());
    }
    packet.extend_from_slice(&[0, 0, 1, 0, 1]);
    packet
}

/// The response code of the answer to `packet`, or `None` when none came.
fn exchange(address: SocketAddr, packet: &[u8]) -> Option<u8> {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    socket.send_to(packet, address).unwrap();
    let mut buffer = [0u8; 1500];
    let (read, _) = socket.recv_from(&mut buffer).ok()?;
    assert!(read >= 12, "an answer has a whole header");
    assert_eq!(&buffer[..2], &packet[..2], "the answer keeps the id");
    Some(buffer[3] & 0x0f)
}

#[test]
fn malformed_packets_get_formerr_or_nothing_and_the_server_goes_on() {
    const FORMERR: u8 = 1;
    let dns = Running::start();
    let good = query_packet();
    assert_eq!(exchange(dns.address, &good), Some(0));
    let mut truncated = good.clone();
    truncated.truncate(good.len() - 3);
    let mut looping = good[..12].to_vec();
    // The question's name is a pointer to itself (offset 12).
    looping.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
    let mut forward = good[..12].to_vec();
    forward.extend_from_slice(&[0xc0, 40, 0, 1, 0, 1]);
    let mut huge_counts = good.clone();
    huge_counts[4..12].copy_from_slice(&[0xff; 8]);
    let mut two_questions = good.clone();
    two_questions[5] = 2;
    two_questions.extend_from_slice(&good[12..]);
    let cases: [(&str, &[u8]); 6] = [
        ("a short header", &good[..7]),
        ("a truncated question", &truncated),
        ("a compression loop", &looping),
        ("a forward pointer", &forward),
        ("huge section counts", &huge_counts),
        ("two questions", &two_questions),
    ];
    for (case, packet) in cases {
        let code = exchange(dns.address, packet);
        assert!(
            code.is_none() || code == Some(FORMERR),
            "{case}: answered with code {code:?}"
        );
    }
    assert_eq!(exchange(dns.address, &two_questions), Some(FORMERR));
    assert_eq!(exchange(dns.address, &good), Some(0), "still answering");
    let address: IpAddr = B34.parse().unwrap();
    assert!(
        dns.addresses("cografi.kargo.test", "10.1.0.0/16")
            .contains(&address.to_string())
    );
}

/// DNS over TCP on trafik's own loop (RFC 7766): queries pipelined on one connection are
/// answered in order, a message hickory cannot parse gets FORMERR, and one that is not a
/// query gets nothing; none of them ends the connection.
#[test]
fn tcp_answers_pipelined_queries_in_order_and_survives_bad_messages() {
    use std::io::{Read, Write};
    let dns = Running::start();
    let mut stream = std::net::TcpStream::connect(dns.address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let framed = |message: &[u8]| {
        let mut framed = (message.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(message);
        framed
    };
    let mut first = query_for("cografi");
    first[..2].copy_from_slice(&[0, 1]);
    let mut broken = query_for("cografi");
    broken[..2].copy_from_slice(&[0, 2]);
    broken.truncate(broken.len() - 3);
    let mut answer_sent_back = query_for("cografi");
    answer_sent_back[..2].copy_from_slice(&[0, 3]);
    answer_sent_back[2] |= 0x80;
    let mut last = query_for("devralma");
    last[..2].copy_from_slice(&[0, 4]);
    let mut all = Vec::new();
    for message in [&first, &broken, &answer_sent_back, &last] {
        all.extend(framed(message));
    }
    stream.write_all(&all).unwrap();
    let mut read_one = || {
        let mut length = [0u8; 2];
        stream.read_exact(&mut length).unwrap();
        let mut message = vec![0u8; usize::from(u16::from_be_bytes(length))];
        stream.read_exact(&mut message).unwrap();
        message
    };
    let answers: Vec<(u16, u8)> = (0..3)
        .map(|_| {
            let message = read_one();
            (
                u16::from_be_bytes([message[0], message[1]]),
                message[3] & 0x0f,
            )
        })
        .collect();
    assert_eq!(answers, [(1, 0), (2, 1), (4, 0)], "(id, rcode) in order");
}

/// DNS over TCP had no cap: each connection held a descriptor for as long as it sent a query
/// every few seconds, until the process (and its HTTP listeners) had none left. One client
/// network may hold 64 connections; the next is closed at once, and the others still answer.
#[test]
fn one_client_network_holds_at_most_64_tcp_connections() {
    use std::io::{Read, Write};
    let dns = Running::start();
    let held: Vec<std::net::TcpStream> = (0..64)
        .map(|_| std::net::TcpStream::connect(dns.address).unwrap())
        .collect();
    let mut refused = std::net::TcpStream::connect(dns.address).unwrap();
    refused
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(refused.read(&mut byte).unwrap_or(0), 0, "closed at accept");
    let mut first = &held[0];
    first
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let query = query_packet();
    let mut framed = (query.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&query);
    first.write_all(&framed).unwrap();
    let mut length = [0u8; 2];
    first.read_exact(&mut length).unwrap();
    assert!(u16::from_be_bytes(length) > 12, "an answer");
}

#[test]
fn edns_version_1_gets_badvers_with_an_opt_of_version_0() {
    let dns = Running::start();
    let answer = dns.dig(&["cografi.kargo.test", "A", "+edns=1", "+noednsnegotiation"]);
    assert!(answer.contains("status: BADVERS"), "{answer}");
    assert!(answer.contains("EDNS: version: 0"), "{answer}");
    assert!(answer.contains("ANSWER: 0"), "{answer}");
}

/// The course's zone with what a real domain has, read from a master file: mail, CAA, a
/// wildcard and a delegation with glue; and the reverse zone of 127.0.0.0/24.
fn domain_plan() -> DnsPlan {
    let mut plan = course_plan();
    let origin = Name::from_ascii("kargo.test.").unwrap();
    let text = "\
@              MX    10 posta
@              CAA   0 issue \"letsencrypt.org\"
posta          A     127.0.0.25
*.musteri      TXT   \"joker\"
bolge          NS    ns1.bolge
ns1.bolge      A     127.0.0.53
";
    let parsed = |record: hickory_proto::rr::Record| RecordPlan {
        name: record.name.to_string(),
        ttl: Some(record.ttl),
        data: RecordData::Parsed(record.data),
    };
    let records = trafik_dns::master::read(text, &origin, 60).unwrap();
    plan.zones[0]
        .records
        .extend(records.into_iter().map(parsed));
    let reverse = Name::from_ascii("0.0.127.in-addr.arpa.").unwrap();
    let text = "25 PTR posta.kargo.test.\n";
    let mut zone = plan.zones[0].clone();
    zone.origin = reverse.to_string();
    zone.names.clear();
    zone.name_servers = vec!["ns1.kargo.test.".into()];
    zone.soa.mname = "ns1.kargo.test.".into();
    zone.records = trafik_dns::master::read(text, &reverse, 60)
        .unwrap()
        .into_iter()
        .map(parsed)
        .collect();
    plan.zones.push(zone);
    plan
}

#[test]
fn mail_caa_reverse_and_wildcard_records_answer_dig() {
    let dns = Running::with(&domain_plan());
    let short = |args: &[&str]| dns.dig(&[args, &["+short"]].concat());
    assert_eq!(short(&["kargo.test", "MX"]).trim(), "10 posta.kargo.test.");
    assert_eq!(
        short(&["kargo.test", "CAA"]).trim(),
        "0 issue \"letsencrypt.org\""
    );
    assert_eq!(short(&["-x", "127.0.0.25"]).trim(), "posta.kargo.test.");
    assert_eq!(
        short(&["kim.musteri.kargo.test", "TXT"]).trim(),
        "\"joker\""
    );
    let answer = dns.dig(&["kim.musteri.kargo.test", "TXT"]);
    assert!(
        answer.contains("kim.musteri.kargo.test.\t60\tIN\tTXT"),
        "the wildcard answers with the question's name:\n{answer}"
    );
}

#[test]
fn a_delegated_name_gets_a_referral_without_aa_and_with_glue() {
    let dns = Running::with(&domain_plan());
    let answer = dns.dig(&["www.bolge.kargo.test", "A", "+norecurse"]);
    assert!(answer.contains("status: NOERROR"), "{answer}");
    assert!(
        answer.contains("flags: qr;"),
        "not authoritative:\n{answer}"
    );
    assert!(answer.contains("ANSWER: 0, AUTHORITY: 1"), "{answer}");
    assert!(
        answer.contains("bolge.kargo.test.\t60\tIN\tNS\tns1.bolge.kargo.test."),
        "{answer}"
    );
    assert!(
        answer.contains("ns1.bolge.kargo.test.\t60\tIN\tA\t127.0.0.53"),
        "glue:\n{answer}"
    );
}

#[test]
fn any_gets_one_rrset() {
    let dns = Running::with(&domain_plan());
    let apex = dns.dig(&["kargo.test", "ANY"]);
    assert!(apex.contains("ANSWER: 1,"), "{apex}");
    assert!(apex.contains("IN\tSOA"), "{apex}");
    let txt = dns.dig(&["buyuk.kargo.test", "ANY", "+tcp"]);
    assert!(txt.contains("ANSWER: 40,"), "one RRset, all of it:\n{txt}");
}

/// Sends `count` copies of `packet` at once and reads the answers until none comes for a
/// second: (full answers, truncated answers).
fn burst(address: SocketAddr, packet: &[u8], count: usize) -> (usize, usize) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    for _ in 0..count {
        socket.send_to(packet, address).unwrap();
    }
    let (mut full, mut truncated) = (0, 0);
    let mut buffer = [0u8; 1500];
    while let Ok((read, _)) = socket.recv_from(&mut buffer) {
        assert!(read >= 12);
        if buffer[2] & 0x02 != 0 {
            truncated += 1;
        } else {
            full += 1;
        }
    }
    (full, truncated)
}

#[test]
fn rate_limiting_drops_repeats_to_one_network_and_truncates_every_second_one() {
    let mut plan = course_plan();
    plan.rate_limit = Some(trafik_dns::rate::RateLimitPlan {
        responses_per_second: 2,
        slip: 2,
    });
    let dns = Running::with(&plan);
    let started = std::time::Instant::now();
    let (full, truncated) = burst(dns.address, &query_packet(), 20);
    // Two at once, and two a second after: whatever the time the burst took.
    let allowed = 2 + 2 * started.elapsed().as_secs() as usize + 1;
    assert!((1..=allowed).contains(&full), "{full} full answers");
    let limited = 20 - full;
    assert!(
        truncated >= limited / 2 - 1 && truncated <= limited / 2 + 1,
        "{truncated} of {limited} limited answers truncated"
    );
    // Over TCP nothing is limited, and another name has its own count.
    for _ in 0..5 {
        let answer = dns.dig(&["cografi.kargo.test", "A", "+tcp", "+short"]);
        assert_eq!(answer.trim(), B34);
    }
    assert_eq!(dns.dig(&["devralma.kargo.test", "A", "+short"]).trim(), B34);
}

/// Probe finding: on a signed zone, a denial for a random name is a NOERROR "black lie", and
/// rate limiting counted it by the name asked: every random name had a burst of its own, so
/// a flood of them from a forged source was never limited (and each cost a fresh signature).
/// Denials count per zone, signed or not.
#[test]
fn signed_denials_for_random_names_share_one_rate_limit() {
    let (mut plan, folder) = signed_course_plan("trafik-rrl-signed");
    plan.rate_limit = Some(trafik_dns::rate::RateLimitPlan {
        responses_per_second: 2,
        slip: 0,
    });
    let dns = Running::with(&plan);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let started = std::time::Instant::now();
    for n in 0..20 {
        // `yokNN.kargo.test. A` with an OPT record asking for DNSSEC (DO).
        let mut packet = query_for(&format!("yok{n:02}"));
        packet[11] = 1;
        packet.extend_from_slice(&[0, 0, 0x29, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 0]);
        socket.send_to(&packet, dns.address).unwrap();
    }
    let mut answered = 0;
    let mut buffer = [0u8; 1500];
    while socket.recv_from(&mut buffer).is_ok() {
        answered += 1;
    }
    // Two at once, and two a second after: whatever the time the burst took.
    let allowed = 2 + 2 * started.elapsed().as_secs() as usize + 1;
    assert!(
        (1..=allowed).contains(&answered),
        "{answered} of 20 answered"
    );
    let _ = std::fs::remove_dir_all(&folder);
}

/// The raw answer to `packet` over UDP.
fn raw_answer(address: SocketAddr, packet: &[u8]) -> Vec<u8> {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    socket.send_to(packet, address).unwrap();
    let mut buffer = [0u8; 1500];
    let (read, _) = socket.recv_from(&mut buffer).unwrap();
    buffer[..read].to_vec()
}

#[test]
fn a_repeated_question_gets_the_same_bytes_with_its_own_id_and_case_and_is_counted() {
    let dns = Running::start();
    let first = raw_answer(dns.address, &query_packet());
    let mut shouted = query_packet();
    shouted[0..2].copy_from_slice(&[0xab, 0xcd]);
    shouted[13..20].copy_from_slice(b"COGRAFI");
    for _ in 0..4 {
        let again = raw_answer(dns.address, &shouted);
        assert_eq!(&again[..2], &[0xab, 0xcd]);
        assert_eq!(
            &again[12..shouted.len()],
            &shouted[12..],
            "the name as asked"
        );
        assert_eq!(&again[2..12], &first[2..12]);
        assert_eq!(again.len(), first.len());
    }
    let status = dns.server.as_ref().unwrap().control().status();
    let names = status["zones"][0]["names"].as_array().unwrap();
    let name = names
        .iter()
        .find(|n| n["name"] == "cografi.kargo.test.")
        .unwrap();
    assert_eq!(name["queries"], 5, "{name}");
    assert_eq!(name["answers"]["b34"], 5, "{name}");
    assert_eq!(status["zones"][0]["queries"], 5);
    // Built once per socket (the server has two, each with its cache), then from the cache.
    let (hits, misses) = (
        status["packet_cache"]["hits"].as_u64().unwrap(),
        status["packet_cache"]["misses"].as_u64().unwrap(),
    );
    assert!(
        hits + misses == 5 && misses <= 2,
        "{hits} hits, {misses} misses"
    );
    // A health change is another key: the fallback answers at once.
    dns.set_live(0, false);
    assert_eq!(dns.addresses("cografi.kargo.test", "10.1.0.0/16"), [B06]);
    dns.set_live(0, true);
    assert_eq!(dns.addresses("cografi.kargo.test", "10.1.0.0/16"), [B34]);
}

#[test]
fn a_weighted_name_walks_its_pattern_when_the_same_packet_repeats() {
    let dns = Running::start();
    let packet = query_for("agirlik");
    let mut counts = std::collections::HashMap::new();
    for _ in 0..30 {
        let answer = raw_answer(dns.address, &packet);
        // The last 4 bytes of the one A record are the address.
        let address = answer[answer.len() - 4..].to_vec();
        *counts.entry(address).or_insert(0) += 1;
    }
    let count = |address: [u8; 4]| counts.get(address.as_slice()).copied().unwrap_or(0);
    assert_eq!(
        (
            count([127, 0, 0, 34]),
            count([127, 0, 0, 35]),
            count([127, 0, 0, 6])
        ),
        (15, 9, 6),
        "{counts:?}"
    );
}

#[test]
fn a_signed_transferring_zone_is_re_signed_with_a_new_serial_each_day() {
    let (mut plan, folder) = signed_course_plan("trafik-resign");
    plan.zones[0].transfer = Some(trafik_dns::transfer::TransferPlan {
        allow: vec![Prefix::parse("127.0.0.1/32").unwrap()],
        notify: Vec::new(),
        tsig: None,
    });
    let dns = Running::with(&plan);
    let control = dns.server.as_ref().unwrap().control();
    let serial = || control.status()["zones"][0]["serial"].as_u64().unwrap();
    let before = serial();
    let now = trafik_dns::transfer::unix_now();
    // The same day: nothing to do; a day later: a new serial, answered over the wire too.
    control.resign(now);
    assert_eq!(serial(), before);
    control.resign(now + 86_400);
    let after = serial();
    assert!(after > before, "{before} then {after}");
    let soa = dns.dig(&["kargo.test", "SOA", "+short"]);
    assert!(soa.contains(&format!(" {after} ")), "{soa}");
    std::fs::remove_dir_all(folder).unwrap();
}
