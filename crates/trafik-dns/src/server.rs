//! The DNS server: trafik's UDP loops (one per socket, each with its packet cache) and TCP loop
//! ([`serve_tcp`]), hickory's wire format, and trafik's handler answering from the
//! [`Authority`] in force. Messages hickory cannot parse get FORMERR (or are
//! dropped when even the header is short); UDP answers larger than the client's EDNS buffer
//! (512 bytes without EDNS) are truncated with TC set, and the client asks again over TCP.
//! AXFR and IXFR over TCP are answered by `Handler::transfer` (see [`crate::transfer`]); a
//! question signed with TSIG gets a signed answer.

use std::hash::{Hash, Hasher};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use hickory_proto::op::{Edns, Header, HeaderCounts, LowerQuery, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsCode, EdnsOption};
use hickory_proto::rr::{DNSClass, LowerName, RData, Record, RecordType};
use hickory_proto::serialize::binary::BinEncoder;
use hickory_server::net::NetError;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use serde_json::{Value, json};
use tokio::net::{TcpListener, UdpSocket};
use trafik_admission::{Admitted, ConnectionLimit, ConnectionLimits};
use trafik_metrics_text::{Exposition, Kind};

use crate::packet_cache::{Found, PacketCache, Reusable};
use crate::policy::{Client, Decision, Live, mask};
use crate::rate::{self, Verdict};
use crate::transfer::{self, Chain, Denied};
use crate::zone::{Authority, Code, DnsPlan, Lookup, PolicyName};

/// The largest UDP answer trafik sends, whatever buffer a client offers (the 2020 DNS flag
/// day's value, which avoids IP fragmentation).
pub const MAX_UDP_PAYLOAD: u16 = 1232;

/// How often the server looks whether a signed zone that transfers is due for re-signing.
const RESIGN_CHECK: Duration = Duration::from_secs(600);

/// How long a TCP connection may stay without a whole request, and the longest one answer's
/// write may wait for the client to read.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// The caps on DNS over TCP, as a listener's: at most 1,024 connections at once (accepting
/// waits for one to close) and 64 from one client network (a /24, or /56 for IPv6; one more is
/// closed at accept).
const TCP_CONNECTIONS: ConnectionLimits = ConnectionLimits {
    max_connections: 1024,
    max_connections_per_client: 64,
};

/// Which regions are live now; the data plane answers it from its health checks.
pub trait Liveness: Send + Sync + 'static {
    fn live(&self) -> Live;
}

/// Every region live: for zones without health checks, and for tests.
pub struct AllLive;

impl Liveness for AllLive {
    fn live(&self) -> Live {
        Live::all(Live::MAX_REGIONS)
    }
}

/// The configuration in force: replaced whole on reload.
struct Current {
    authority: Arc<Authority>,
    liveness: Arc<dyn Liveness>,
}

/// Counters of queries answered before any zone is involved.
#[derive(Default)]
struct ServerCounters {
    /// Not one question, or not a query.
    formerr: AtomicU64,
    notimp: AtomicU64,
    /// For names in no zone of ours, or not of class IN.
    refused: AtomicU64,
    /// UDP answers response rate limiting dropped, and sent truncated instead.
    rate_limited_dropped: AtomicU64,
    rate_limited_truncated: AtomicU64,
    /// UDP questions answered from a packet cache, and built (then stored if reusable).
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    /// Zone transfers sent, and refused (address, key or signature).
    transfers: AtomicU64,
    transfers_refused: AtomicU64,
}

struct Handler {
    current: ArcSwap<Current>,
    counters: ServerCounters,
    /// Draws for weighted random choice: a counter, mixed.
    draws: AtomicU64,
}

/// A running DNS server.
pub struct DnsServer {
    control: DnsControl,
    /// The UDP loops, one per socket, and the TCP loop with the re-signing timer of the server
    /// that has TCP.
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What a running server answers from, its counters, and the way to change both.
#[derive(Clone)]
pub struct DnsControl {
    handler: Arc<Handler>,
    address: SocketAddr,
}

impl DnsServer {
    /// Binds UDP and TCP on `address` (with port 0, one port free for both) and starts
    /// answering on the tokio runtime entered, with `udp_sockets` UDP sockets on the port.
    pub fn start(
        address: SocketAddr,
        udp_sockets: usize,
        authority: Authority,
        liveness: Arc<dyn Liveness>,
    ) -> io::Result<DnsServer> {
        let bound = Bound::bind(address, udp_sockets)?;
        let control = DnsControl::new(bound.address, authority, liveness);
        DnsServer::serve(&control, bound.udp, Some(bound.tcp))
    }

    /// Serves `control`'s zones on sockets bound by [`Bound::bind`], on the tokio runtime
    /// entered: one runtime may take every socket, or each thread's runtime some of them, all
    /// answering from the same [`DnsControl`]. Each UDP socket is read by its own loop with its
    /// own packet cache ([`serve_udp`]); TCP by [`serve_tcp`].
    pub fn serve(
        control: &DnsControl,
        udp: Vec<std::net::UdpSocket>,
        tcp: Option<std::net::TcpListener>,
    ) -> io::Result<DnsServer> {
        let mut loops = Vec::with_capacity(udp.len() + 2);
        for socket in udp {
            let socket = UdpSocket::from_std(socket)?;
            loops.push(tokio::spawn(serve_udp(control.handler.clone(), socket)));
        }
        if let Some(tcp) = tcp {
            tcp.set_nonblocking(true)?;
            let listener = TcpListener::from_std(tcp)?;
            loops.push(tokio::spawn(serve_tcp(control.handler.clone(), listener)));
            // One timer for all the sockets: the one taking TCP takes it.
            let control = control.clone();
            loops.push(tokio::spawn(async move {
                loop {
                    tokio::time::sleep(RESIGN_CHECK).await;
                    control.resign(transfer::unix_now());
                }
            }));
        }
        Ok(DnsServer {
            control: control.clone(),
            tasks: loops,
        })
    }

    /// The bound address (UDP and TCP).
    pub fn address(&self) -> SocketAddr {
        self.control.address
    }

    pub fn control(&self) -> &DnsControl {
        &self.control
    }

    /// Stops accepting and answering: the loops end, and with the TCP loop its connections.
    pub async fn stop(mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
            let _ = task.await;
        }
    }
}

/// A DNS server's sockets: UDP sockets sharing one port (SO_REUSEPORT), and TCP on the same
/// port.
pub struct Bound {
    pub address: SocketAddr,
    pub udp: Vec<std::net::UdpSocket>,
    pub tcp: std::net::TcpListener,
}

impl Bound {
    /// Binds `udp_sockets` UDP sockets and one TCP listener on `address`; see [`bind_both`].
    pub fn bind(address: SocketAddr, udp_sockets: usize) -> io::Result<Bound> {
        let (udp, tcp) = bind_both(address, udp_sockets.max(1))?;
        Ok(Bound {
            address: tcp.local_addr()?,
            udp,
            tcp,
        })
    }
}

impl DnsControl {
    /// Answers from `authority` with the regions `liveness` says are live; serve it with
    /// [`DnsServer::serve`].
    pub fn new(address: SocketAddr, authority: Authority, liveness: Arc<dyn Liveness>) -> Self {
        notify_new_serials(None, &authority);
        DnsControl {
            handler: Arc::new(Handler {
                current: ArcSwap::from_pointee(Current {
                    authority: Arc::new(authority),
                    liveness,
                }),
                counters: ServerCounters::default(),
                draws: AtomicU64::new(seed()),
            }),
            address,
        }
    }

    /// The bound address (UDP and TCP).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Answers from `authority` from now on; queries in flight finish on the old one.
    /// Secondaries of zones whose serial changed are notified.
    pub fn replace(&self, authority: Authority, liveness: Arc<dyn Liveness>) {
        let old = self.handler.current.swap(Arc::new(Current {
            authority: Arc::new(authority),
            liveness,
        }));
        notify_new_serials(Some(&old.authority), &self.handler.current.load().authority);
    }

    /// Builds the zones in force again when a signed zone that transfers is due for new
    /// signatures at `now` (Unix seconds), and answers from them: the zone's serial rises and
    /// its secondaries are notified ([`Authority::resigned`]).
    pub fn resign(&self, now: u64) {
        let current = self.handler.current.load_full();
        let Some(authority) = current.authority.resigned(now) else {
            return;
        };
        let resigned = Arc::new(Current {
            authority: Arc::new(authority),
            liveness: current.liveness.clone(),
        });
        // Only in place of what it was built from: a reload meanwhile wins, and the next
        // check re-signs that.
        let before = self
            .handler
            .current
            .compare_and_swap(&current, resigned.clone());
        if Arc::ptr_eq(&before, &current) {
            tracing::info!("dns: signed zones re-signed for their secondaries");
            notify_new_serials(Some(&current.authority), &resigned.authority);
        }
    }

    /// Keeps the authority in force and takes region liveness from `liveness`.
    pub fn set_liveness(&self, liveness: Arc<dyn Liveness>) {
        self.handler.current.rcu(|old| Current {
            authority: old.authority.clone(),
            liveness: liveness.clone(),
        });
    }

    /// Builds `plan`'s zones, keeping the counters of the names that stay from the authority
    /// in force.
    pub fn build(&self, plan: &DnsPlan) -> Result<Authority, Vec<String>> {
        Authority::build(plan, Some(&self.handler.current.load().authority))
    }

    /// What the server in force answers `question` now, with the regions live now, and why
    /// ([`Authority::explain`]); nothing counted.
    pub fn explain(&self, question: &crate::zone::explain::Question) -> Value {
        let current = self.handler.current.load();
        let live = current.liveness.live();
        let random = trafik_balance::hash::mix64(seed());
        current.authority.explain(question, live, random)
    }

    /// The `dns` block of the admin API's `/status`.
    pub fn status(&self) -> Value {
        let current = self.handler.current.load();
        let live = current.liveness.live();
        let counters = &self.handler.counters;
        let authority = &current.authority;
        json!({
            "listen": self.address.to_string(),
            "live": authority.regions.iter().enumerate()
                .filter(|(i, _)| live.contains(*i))
                .map(|(_, r)| r.name.clone())
                .collect::<Vec<_>>(),
            "regions": authority.regions.iter().enumerate().map(|(i, r)| json!({
                "name": r.name,
                "addresses": r.addresses.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "live": live.contains(i),
            })).collect::<Vec<_>>(),
            "refused": counters.refused.load(Ordering::Relaxed),
            "formerr": counters.formerr.load(Ordering::Relaxed),
            "notimp": counters.notimp.load(Ordering::Relaxed),
            "rate_limited": {
                "dropped": counters.rate_limited_dropped.load(Ordering::Relaxed),
                "truncated": counters.rate_limited_truncated.load(Ordering::Relaxed),
            },
            "packet_cache": {
                "hits": counters.cache_hits.load(Ordering::Relaxed),
                "misses": counters.cache_misses.load(Ordering::Relaxed),
            },
            "transfers": {
                "sent": counters.transfers.load(Ordering::Relaxed),
                "refused": counters.transfers_refused.load(Ordering::Relaxed),
            },
            "zones": authority.zones.iter().map(|zone| json!({
                "zone": zone.origin.to_string(),
                "serial": zone.serial(),
                "queries": zone.counters.queries.load(Ordering::Relaxed),
                "nxdomain": zone.counters.nxdomain.load(Ordering::Relaxed),
                "names": zone.policy_names().map(|name| {
                    let c = &name.counters;
                    json!({
                        "name": name.name.to_string(),
                        "policy": name.policy.kind(),
                        "ttl": name.ttl,
                        "queries": c.queries.load(Ordering::Relaxed),
                        "answers": authority.regions.iter()
                            .map(|r| (r.name.clone(), json!(c.answers.get(&r.name)
                                .map_or(0, |n| n.load(Ordering::Relaxed)))))
                            .collect::<serde_json::Map<_, _>>(),
                        "failovers": c.failovers.load(Ordering::Relaxed),
                        "nodata": c.nodata.load(Ordering::Relaxed),
                    })
                }).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }

    /// The DNS counters' families, written to `exposition`.
    pub fn metrics(&self, exposition: &mut Exposition) {
        let current = self.handler.current.load();
        let live = current.liveness.live();
        let authority = &current.authority;
        let policy_names = || {
            authority.zones.iter().flat_map(|zone| {
                zone.policy_names().map(|name| {
                    let labels = [
                        ("name", name.name.to_string()),
                        ("policy", name.policy.kind().to_owned()),
                    ];
                    (labels, &name.counters)
                })
            })
        };
        let mut queries = exposition.family(
            "trafik_dns_queries_total",
            Kind::Counter,
            "DNS queries per policy name.",
        );
        for (labels, counters) in policy_names() {
            queries.sample(&labels, counters.queries.load(Ordering::Relaxed));
        }
        let mut answers = exposition.family(
            "trafik_dns_answers_total",
            Kind::Counter,
            "DNS answers per policy name and region.",
        );
        for ([name, policy], counters) in policy_names() {
            for region in &authority.regions {
                let count = counters
                    .answers
                    .get(&region.name)
                    .map_or(0, |n| n.load(Ordering::Relaxed));
                let labels = [
                    name.clone(),
                    policy.clone(),
                    ("region", region.name.clone()),
                ];
                answers.sample(&labels, count);
            }
        }
        let mut failovers = exposition.family(
            "trafik_dns_failovers_total",
            Kind::Counter,
            "DNS answers that health moved off the policy's first choice.",
        );
        for (labels, counters) in policy_names() {
            failovers.sample(&labels, counters.failovers.load(Ordering::Relaxed));
        }
        let mut nxdomain = exposition.family(
            "trafik_dns_nxdomain_total",
            Kind::Counter,
            "NXDOMAIN answers per zone.",
        );
        for zone in &authority.zones {
            nxdomain.sample(
                &[("zone", zone.origin.to_string())],
                zone.counters.nxdomain.load(Ordering::Relaxed),
            );
        }
        let mut region_live = exposition.family(
            "trafik_dns_region_live",
            Kind::Gauge,
            "1 while a region is live.",
        );
        for (index, region) in authority.regions.iter().enumerate() {
            region_live.sample(&[("region", &region.name)], u8::from(live.contains(index)));
        }
        let counters = &self.handler.counters;
        let mut cache = exposition.family(
            "trafik_dns_packet_cache_total",
            Kind::Counter,
            "UDP questions answered from the packet cache (hit) or built (miss).",
        );
        cache.sample(
            &[("result", "hit")],
            counters.cache_hits.load(Ordering::Relaxed),
        );
        cache.sample(
            &[("result", "miss")],
            counters.cache_misses.load(Ordering::Relaxed),
        );
        let mut transfers = exposition.family(
            "trafik_dns_transfers_total",
            Kind::Counter,
            "Zone transfers (AXFR, IXFR) sent, and refused for their address, key or signature.",
        );
        transfers.sample(
            &[("result", "sent")],
            counters.transfers.load(Ordering::Relaxed),
        );
        transfers.sample(
            &[("result", "refused")],
            counters.transfers_refused.load(Ordering::Relaxed),
        );
        let mut limited = exposition.family(
            "trafik_dns_rate_limited_total",
            Kind::Counter,
            "UDP answers response rate limiting dropped or sent truncated.",
        );
        let dropped = counters.rate_limited_dropped.load(Ordering::Relaxed);
        let truncated = counters.rate_limited_truncated.load(Ordering::Relaxed);
        limited.sample(&[("action", "dropped")], dropped);
        limited.sample(&[("action", "truncated")], truncated);
    }
}

/// Binds `count` UDP sockets sharing one port (the first without SO_REUSEPORT, so a port in use
/// is an error), then TCP on the same port; with port 0, tries again until a port is free for
/// both all along.
fn bind_both(
    address: SocketAddr,
    count: usize,
) -> io::Result<(Vec<std::net::UdpSocket>, std::net::TcpListener)> {
    let mut last = None;
    for _ in 0..20 {
        let probe = udp_socket(address, false)?;
        let bound = probe
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("a UDP socket without an IP address"))?;
        let tcp = match std::net::TcpListener::bind(bound) {
            Ok(tcp) => tcp,
            Err(error) if address.port() == 0 => {
                last = Some(error);
                continue;
            }
            Err(error) => return Err(error),
        };
        drop(probe);
        // Another program may take the port between the probe's close and these binds.
        match (0..count)
            .map(|_| udp_socket(bound, true).map(std::net::UdpSocket::from))
            .collect::<io::Result<Vec<_>>>()
        {
            Ok(udp) => return Ok((udp, tcp)),
            Err(error) if address.port() == 0 => last = Some(error),
            Err(error) => return Err(error),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no port free for both UDP and TCP")))
}

fn udp_socket(address: SocketAddr, shared: bool) -> io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(address),
        socket2::Type::DGRAM,
        None,
    )?;
    socket.set_reuse_port(shared)?;
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    Ok(socket)
}

fn seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// DNS over TCP (RFC 7766): each connection's messages answered in turn, each answer written
/// (with the socket's backpressure) before the next request is read, so a transfer sends as
/// many messages as its zone needs; within [`TCP_CONNECTIONS`], counted by client network.
/// hickory-server's TCP loop queued a handler's answers in a channel of 64 it only drained
/// after the handler returned, so a transfer of more than ~66 messages (a zone over ~1 MiB)
/// failed every time.
async fn serve_tcp(handler: Arc<Handler>, listener: TcpListener) {
    let Some(limit) = ConnectionLimit::new("dns", TCP_CONNECTIONS) else {
        return;
    };
    // Dropped with this task: stopping the server ends its connections.
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::debug!(%error, "dns tcp accept");
                // Out of descriptors, say: give the others time to close.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        let Some(admitted) = limit.admit(rate::network(peer.ip())).await else {
            continue;
        };
        connections.spawn(serve_tcp_connection(
            handler.clone(),
            stream,
            peer,
            admitted,
        ));
    }
}

async fn serve_tcp_connection(
    handler: Arc<Handler>,
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    _admitted: Admitted,
) {
    use tokio::io::AsyncReadExt;
    let (mut reader, writer) = stream.into_split();
    let answers = TcpAnswers(Arc::new(TcpWriter {
        writer: tokio::sync::Mutex::new(writer),
        broken: std::sync::atomic::AtomicBool::new(false),
    }));
    // Ends when the client closes, idles, or stops reading (a write that failed or timed out
    // may have left part of a message: nothing more can follow it).
    while !answers.0.broken.load(Ordering::Relaxed) {
        let read = tokio::time::timeout(TCP_IDLE, async {
            let length = reader.read_u16().await?;
            let mut message = vec![0u8; usize::from(length)];
            reader.read_exact(&mut message).await?;
            io::Result::Ok(message)
        })
        .await;
        let Ok(Ok(message)) = read else {
            return;
        };
        // A message that is not a query gets no answer, as over UDP.
        if message.len() < 12 || message[2] & 0x80 != 0 {
            continue;
        }
        let mut header = [0u8; 12];
        header.copy_from_slice(&message[..12]);
        let request = match Request::from_bytes(message, peer, Protocol::Tcp) {
            Ok(request) => request,
            Err(_) => {
                let mut refusal = Vec::new();
                format_error(&header, &mut refusal);
                if answers.write(&refusal).await.is_err() {
                    return;
                }
                continue;
            }
        };
        if is_transfer(&request) {
            handler.transfer(&request, answers.clone()).await;
        } else {
            handler.answer(&request, answers.clone(), None).await;
        }
    }
}

/// Writes each answer to a TCP connection as it is made, framed by its length (RFC 1035
/// §4.2.2): a transfer's messages go out one after another at the pace the client reads.
#[derive(Clone)]
struct TcpAnswers(Arc<TcpWriter>);

struct TcpWriter {
    writer: tokio::sync::Mutex<tokio::net::tcp::OwnedWriteHalf>,
    /// A write failed or timed out: the connection takes no more.
    broken: std::sync::atomic::AtomicBool,
}

impl TcpAnswers {
    async fn write(&self, message: &[u8]) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        let length = u16::try_from(message.len())
            .map_err(|_| io::Error::other("a DNS message over TCP holds at most 65535 bytes"))?;
        if self.0.broken.load(Ordering::Relaxed) {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "an earlier write failed",
            ));
        }
        let mut framed = Vec::with_capacity(2 + message.len());
        framed.extend_from_slice(&length.to_be_bytes());
        framed.extend_from_slice(message);
        let mut writer = self.0.writer.lock().await;
        let written = match tokio::time::timeout(TCP_IDLE, writer.write_all(&framed)).await {
            Ok(written) => written,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading",
            )),
        };
        if written.is_err() {
            self.0.broken.store(true, Ordering::Relaxed);
        }
        written
    }
}

#[async_trait::async_trait]
impl ResponseHandler for TcpAnswers {
    async fn send_response<'a>(
        &mut self,
        response: hickory_server::zone_handler::MessageResponse<
            '_,
            'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
        >,
    ) -> Result<ResponseInfo, NetError> {
        let (info, bytes) = emit(response, u16::MAX)?;
        self.write(&bytes)
            .await
            .map_err(|error| NetError::from(error.to_string()))?;
        Ok(info)
    }
}

/// What a request not answered counts as: SERVFAIL, no records.
fn serve_failed(request: &Request) -> ResponseInfo {
    let mut metadata = Metadata::response_from_request(&request.metadata);
    metadata.response_code = ResponseCode::ServFail;
    ResponseInfo::from(Header {
        metadata,
        counts: HeaderCounts::default(),
    })
}

/// An AXFR or IXFR query (one question; more are FORMERR as for any query).
fn is_transfer(request: &Request) -> bool {
    request.metadata.op_code == OpCode::Query
        && matches!(
            request.queries.queries(),
            [q] if matches!(q.query_type(), RecordType::AXFR | RecordType::IXFR)
        )
}

/// Sends NOTIFY for each zone of `new` whose serial is not the one in `old`.
fn notify_new_serials(old: Option<&Authority>, new: &Authority) {
    for zone in &new.zones {
        let Some(settings) = &zone.transfer else {
            continue;
        };
        let before = old
            .and_then(|old| old.zones.iter().find(|z| z.origin == zone.origin))
            .map(|z| z.serial());
        if before != Some(zone.serial()) {
            transfer::notify(
                zone.soa().clone(),
                settings.notify.clone(),
                settings.signer.clone(),
            );
        }
    }
}

/// The TSIG record of an answer whose unsigned encoding is `bytes`.
fn sign(
    context: hickory_proto::rr::TSigResponseContext,
    bytes: Result<Vec<u8>, String>,
) -> Option<Box<hickory_proto::rr::Record<hickory_proto::rr::rdata::tsig::TSIG>>> {
    let signed = bytes.and_then(|bytes| context.sign(&bytes).map_err(|e| e.to_string()));
    signed
        .map_err(|error| tracing::warn!(%error, "dns answer not signed"))
        .ok()
}

/// The unsigned encoding of `response`, which TSIG signs: [`emit`]'s, within a message's
/// largest size.
fn encoded<'a>(
    response: hickory_server::zone_handler::MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
) -> Result<Vec<u8>, String> {
    emit(response, u16::MAX)
        .map(|(_, bytes)| bytes)
        .map_err(|error| error.to_string())
}

/// The largest query read over UDP; a longer one arrives cut and gets FORMERR.
const MAX_UDP_QUERY: usize = 4096;

/// Answers the queries arriving on `socket`: from the packet cache when the same question was
/// answered under the same conditions, else through the handler (storing what may be reused).
/// One query at a time: no answer waits on anything but the socket.
async fn serve_udp(handler: Arc<Handler>, socket: UdpSocket) {
    let mut buffer = vec![0u8; MAX_UDP_QUERY];
    let mut out = Vec::with_capacity(512);
    let mut cache = PacketCache::default();
    loop {
        let (length, source) = match socket.recv_from(&mut buffer).await {
            Ok(received) => received,
            Err(error) => {
                // An ICMP error of an earlier answer, reported on this socket.
                tracing::debug!(%error, "dns udp receive");
                continue;
            }
        };
        // No answer to port 0 (unreachable) or to a message that is not a query (a response
        // sent to us is how reflection loops start).
        if source.port() == 0 || length < 12 || buffer[2] & 0x80 != 0 {
            continue;
        }
        let query = &buffer[..length];
        handler.reply_udp(query, source, &mut cache, &mut out).await;
        if !out.is_empty()
            && let Err(error) = socket.send_to(&out, source).await
        {
            tracing::debug!(%error, %source, "dns answer not sent");
        }
    }
}

/// hickory's encoding of `response` within `limit` bytes (truncated with TC past it).
fn emit<'a>(
    response: hickory_server::zone_handler::MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
    limit: u16,
) -> Result<(ResponseInfo, Vec<u8>), NetError> {
    let mut bytes = Vec::with_capacity(512);
    let mut encoder = BinEncoder::new(&mut bytes);
    encoder.set_max_size(limit);
    let info = response
        .destructive_emit(&mut encoder)
        .map_err(|error| NetError::from(error.to_string()))?;
    Ok((info, bytes))
}

/// hickory's encoding of an answer, kept instead of sent: for UDP, within the client's EDNS
/// buffer (512 bytes without EDNS), truncated with TC past it.
#[derive(Clone, Default)]
struct Encoded(Arc<std::sync::Mutex<Vec<u8>>>);

#[async_trait::async_trait]
impl ResponseHandler for Encoded {
    async fn send_response<'a>(
        &mut self,
        response: hickory_server::zone_handler::MessageResponse<
            '_,
            'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
        >,
    ) -> Result<ResponseInfo, NetError> {
        let limit = response.edns().map_or(512, Edns::max_payload);
        let (info, bytes) = emit(response, limit)?;
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = bytes;
        Ok(info)
    }
}

/// FORMERR for a query whose header could be read but not the rest, as hickory-server answers
/// one: the id, opcode and RD echoed, no sections.
fn format_error(query: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&query[..2]);
    out.push(0x80 | (query[2] & 0x79));
    out.push(0x01);
    out.extend_from_slice(&[0; 8]);
}

impl Handler {
    /// Writes the answer to the UDP `query` from `source` into `out` (left empty when none is
    /// due), from `cache` or built and then stored there when it may be reused.
    async fn reply_udp(
        &self,
        query: &[u8],
        source: SocketAddr,
        cache: &mut PacketCache,
        out: &mut Vec<u8>,
    ) {
        out.clear();
        let current = self.current.load();
        let authority = &current.authority;
        // A logged or rate-limited answer is built each time: the log line and the limit are
        // per query.
        let bypass = authority.query_log || authority.rate_limiter.is_some();
        let group = authority
            .groups
            .group_of(Client::from_source(source.ip()))
            .map(|(group, _)| group);
        let mut forced = None;
        if !bypass {
            cache.follow(authority, std::time::Instant::now());
            let live = current.liveness.live();
            let draw = |name: &PolicyName, client: Option<Client>| {
                let client = client.unwrap_or_else(|| Client::from_source(source.ip()));
                name.policy
                    .decide(client, &authority.groups, live, self.draw())
            };
            match cache.answer(query, live, group, draw, out) {
                Found::Hit { refused } => {
                    self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                    if refused {
                        self.counters.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    return;
                }
                Found::Miss => {}
                Found::Drawn(decision) => forced = Some(decision),
            }
        }
        if !bypass {
            self.counters.cache_misses.fetch_add(1, Ordering::Relaxed);
        }
        let request = match Request::from_bytes(query.to_vec(), source, Protocol::Udp) {
            Ok(request) => request,
            Err(_) => return format_error(query, out),
        };
        let encoded = Encoded::default();
        let (_, reusable) = self
            .answer(&request, encoded.clone(), forced.as_ref())
            .await;
        std::mem::swap(
            out,
            &mut encoded.0.lock().unwrap_or_else(|p| p.into_inner()),
        );
        if let Some(reusable) = reusable
            && !bypass
            && !out.is_empty()
        {
            cache.store(query, group, out, reusable);
        }
    }

    /// Answers `request` through `responder`; with what a packet cache needs to reuse the
    /// answer, when it may be.
    async fn answer<R: ResponseHandler>(
        &self,
        request: &Request,
        mut responder: R,
        forced: Option<&Decision>,
    ) -> (ResponseInfo, Option<Reusable>) {
        let current = self.current.load();
        let mut metadata = Metadata::response_from_request(&request.metadata);
        let mut edns = request.edns.as_ref().map(|theirs| {
            let mut ours = Edns::new();
            ours.set_max_payload(theirs.max_payload().clamp(512, MAX_UDP_PAYLOAD));
            ours.set_version(0);
            // RFC 3225 §3: the DO bit is copied into the response.
            ours.set_dnssec_ok(theirs.flags().dnssec_ok);
            ours
        });
        let code = if request.metadata.op_code != OpCode::Query {
            self.counters.notimp.fetch_add(1, Ordering::Relaxed);
            Some(ResponseCode::NotImp)
        } else if is_transfer(request) {
            // Transfers go over TCP (RFC 5936 §4.2; IXFR's UDP form is not offered).
            self.counters
                .transfers_refused
                .fetch_add(1, Ordering::Relaxed);
            Some(ResponseCode::Refused)
        } else if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
            Some(ResponseCode::BADVERS)
        } else {
            None
        };
        let query = match (code, request.request_info()) {
            (None, Ok(info)) => Some(info.query),
            (None, Err(_)) => {
                self.counters.formerr.fetch_add(1, Ordering::Relaxed);
                metadata.response_code = ResponseCode::FormErr;
                None
            }
            (Some(code), _) => {
                metadata.response_code = code;
                None
            }
        };
        if let Some(edns) = &mut edns
            && metadata.response_code.high() != 0
        {
            edns.set_rcode_high(metadata.response_code.high());
        }
        let Some(query) = query else {
            let response = MessageResponseBuilder::new(&request.queries, edns.as_ref())
                .build_no_records(metadata);
            return (send(&mut responder, response, request).await, None);
        };
        // A signed question (a secondary's SOA check) gets a signed answer, or NOTAUTH
        // (RFC 8945 §5.2); neither is reused from a packet cache.
        let signing = match request.signature.as_deref() {
            Some(tsig) => {
                let signer = current
                    .authority
                    .zones
                    .iter()
                    .find(|zone| zone.origin.zone_of(query.name()))
                    .and_then(|zone| zone.transfer.as_ref()?.signer.as_ref());
                match transfer::verify(signer, request.as_slice(), tsig, transfer::unix_now()) {
                    Ok(context) => Some(context),
                    Err((_, context)) => {
                        metadata.response_code = ResponseCode::NotAuth;
                        let build = || {
                            MessageResponseBuilder::new(&request.queries, edns.as_ref())
                                .build_no_records(metadata)
                        };
                        let mut response = build();
                        if let Some(tsig) = context.and_then(|c| sign(c, encoded(build()))) {
                            response.set_signature(tsig);
                        }
                        return (send(&mut responder, response, request).await, None);
                    }
                }
            }
            None => None,
        };
        let subnet = request
            .edns
            .as_ref()
            .and_then(|e| match e.option(EdnsCode::Subnet) {
                Some(EdnsOption::Subnet(subnet)) => Some(*subnet),
                _ => None,
            });
        let subnet_client = match &subnet {
            Some(subnet) if subnet.source_prefix() > 0 => Some(Client {
                address: mask(subnet.addr(), subnet.source_prefix()),
                prefix: subnet.source_prefix(),
            }),
            _ => None,
        };
        let client = subnet_client.unwrap_or_else(|| Client::from_source(request.src().ip()));
        let live = current.liveness.live();
        let (name, kind) = (query.name(), query.query_type());
        let authority = &current.authority;
        let answerable = matches!(query.query_class(), DNSClass::IN | DNSClass::ANY);
        let mut lookup = match answerable {
            true => authority.lookup(name, kind, client, live, self.draw(), forced),
            false => Lookup {
                code: Code::Refused,
                ..Default::default()
            },
        };
        let limiter = authority
            .rate_limiter
            .as_ref()
            .filter(|_| request.protocol() == Protocol::Udp);
        // What rate limiting counts the answer as, told before signing: a signed denial (a
        // black lie) answers NOERROR for the random name asked, but is still a denial,
        // counted per zone.
        let rate_key = limiter.map(|l| rate_key(l.hasher(), request.src().ip(), query, &lookup));
        if answerable && request.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok) {
            authority.sign(&mut lookup, name, kind, transfer::unix_now());
        }
        metadata.response_code = match lookup.code {
            Code::NoError => ResponseCode::NoError,
            Code::NxDomain => ResponseCode::NXDomain,
            Code::Refused => {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                ResponseCode::Refused
            }
        };
        // A referral speaks for the child zone's servers, not for us (RFC 1034 §4.3.2).
        metadata.authoritative =
            lookup.code != Code::Refused && !(lookup.referral && lookup.answers.is_empty());
        if let (Some(edns), Some(subnet)) = (&mut edns, &subnet) {
            // RFC 7871 §7.2.1: echo family, source prefix and address; set the scope.
            let full = if subnet.addr().is_ipv4() { 32 } else { 128 };
            let scope = if subnet.source_prefix() == 0 {
                0
            } else {
                lookup.scope.min(full)
            };
            edns.options_mut()
                .insert(EdnsOption::Subnet(ClientSubnet::new(
                    subnet.addr(),
                    subnet.source_prefix(),
                    scope,
                )));
        }
        if let (Some(limiter), Some(key)) = (limiter, rate_key) {
            match limiter.check(key) {
                Verdict::Send => {}
                Verdict::Drop => {
                    self.counters
                        .rate_limited_dropped
                        .fetch_add(1, Ordering::Relaxed);
                    let info = ResponseInfo::from(Header {
                        metadata,
                        counts: HeaderCounts::default(),
                    });
                    return (info, None);
                }
                Verdict::Slip => {
                    self.counters
                        .rate_limited_truncated
                        .fetch_add(1, Ordering::Relaxed);
                    metadata.truncation = true;
                    let response = MessageResponseBuilder::new(&request.queries, edns.as_ref())
                        .build_no_records(metadata);
                    return (send(&mut responder, response, request).await, None);
                }
            }
        }
        if current.authority.query_log {
            let regions: Vec<&str> = lookup
                .regions
                .iter()
                .filter_map(|r| current.authority.regions.get(*r).map(|r| r.name.as_str()))
                .collect();
            tracing::info!(
                target: "trafik::dns",
                client = %request.src(),
                subnet = ?subnet.as_ref().map(|s| format!("{}/{}", s.addr(), s.source_prefix())),
                name = %query.name(),
                kind = %query.query_type(),
                protocol = %request.protocol(),
                code = %metadata.response_code,
                answers = lookup.answers.len(),
                regions = ?regions,
                "dns query"
            );
        }
        let build = || {
            MessageResponseBuilder::new(&request.queries, edns.as_ref()).build(
                metadata,
                lookup.answers.iter(),
                lookup.authority.iter(),
                std::iter::empty::<&Record>(),
                lookup.additional.iter(),
            )
        };
        let mut response = build();
        if let Some(context) = signing {
            match sign(context, encoded(build())) {
                Some(tsig) => response.set_signature(tsig),
                None => return (serve_failed(request), None),
            }
            return (send(&mut responder, response, request).await, None);
        }
        let info = send(&mut responder, response, request).await;
        let reusable = Reusable {
            live,
            refused: lookup.code == Code::Refused,
            tally: lookup.tally,
            drawn: lookup
                .drawn
                .map(|(name, decision)| (name, decision, subnet_client)),
        };
        (info, Some(reusable))
    }

    /// Answers an AXFR or IXFR over TCP: the whole zone, SOA first and last, in messages of
    /// at most 16 KiB, each signed when the request was (RFC 8945 §5.3.1); an IXFR from a
    /// secondary already at our serial gets the SOA alone, one at a serial the zone's journal
    /// reaches the changes since (RFC 1995 §4), any other the whole zone. Refused for addresses outside `allow` and, when the zone has a key, for requests
    /// not signed with it (NOTAUTH with the TSIG error for a bad key, MAC or time).
    async fn transfer<R: ResponseHandler>(
        &self,
        request: &Request,
        mut responder: R,
    ) -> ResponseInfo {
        let current = self.current.load();
        let now = transfer::unix_now();
        let mut metadata = Metadata::response_from_request(&request.metadata);
        let asked = request.queries.queries().first();
        let zone = current.authority.zones.iter().find_map(|zone| {
            let settings = zone.transfer.as_ref()?;
            asked
                .is_some_and(|q| *q.name() == zone.origin)
                .then_some((zone, settings))
        });
        let admitted = match zone {
            Some((zone, settings)) => settings
                .admit(
                    request.src().ip(),
                    request.as_slice(),
                    request.signature.as_deref(),
                    now,
                )
                .map(|signing| (zone, settings, signing)),
            None => Err((Denied::Refused, None)),
        };
        let (zone, settings, signing) = match admitted {
            Ok(admitted) => admitted,
            Err((denied, signing)) => {
                self.counters
                    .transfers_refused
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    target: "trafik::dns",
                    client = %request.src(),
                    zone = ?asked.map(|q| q.name().to_string()),
                    why = ?denied,
                    "dns transfer refused"
                );
                metadata.response_code = match denied {
                    Denied::Refused => ResponseCode::Refused,
                    Denied::NotAuth(_) => ResponseCode::NotAuth,
                };
                let build = || {
                    MessageResponseBuilder::new(&request.queries, None).build_no_records(metadata)
                };
                let mut response = build();
                if let Some(tsig) = signing.and_then(|c| sign(c, encoded(build()))) {
                    response.set_signature(tsig);
                }
                return send(&mut responder, response, request).await;
            }
        };
        let soa = zone.soa().clone();
        // An IXFR names the secondary's serial in the SOA of its authority section.
        let theirs = asked
            .filter(|q| q.query_type() == RecordType::IXFR)
            .and_then(|_| {
                request.authorities.iter().find_map(|r| match &r.data {
                    RData::SOA(theirs) => Some(theirs.serial),
                    _ => None,
                })
            });
        let incremental = theirs.and_then(|serial| {
            if (zone.serial().wrapping_sub(serial) as i32) <= 0 {
                Some(vec![soa.clone()])
            } else {
                zone.changes_since(serial)
            }
        });
        let all: Vec<Record> = match incremental {
            Some(records) => records,
            None => std::iter::once(soa.clone())
                .chain(zone.transfer_records(now).iter().cloned())
                .chain(std::iter::once(soa))
                .collect(),
        };
        metadata.authoritative = true;
        let mut first = signing;
        let mut chain: Option<Chain> = None;
        let mut info = None;
        for part in transfer::messages(&all) {
            let build = || {
                MessageResponseBuilder::new(&request.queries, None).build(
                    metadata,
                    part.iter(),
                    std::iter::empty::<&Record>(),
                    std::iter::empty::<&Record>(),
                    std::iter::empty::<&Record>(),
                )
            };
            let mut response = build();
            if first.is_some() || chain.is_some() {
                let signed = encoded(build()).and_then(|bytes| match (first.take(), &mut chain) {
                    (Some(context), _) => {
                        let tsig = context.sign(&bytes).map_err(|e| e.to_string())?;
                        if let Some(signer) = &settings.signer {
                            chain = Some(Chain::new(
                                signer.clone(),
                                tsig.data.mac.clone(),
                                request.metadata.id,
                                now,
                            ));
                        }
                        Ok(tsig)
                    }
                    (None, Some(chain)) => chain.sign(&bytes),
                    (None, None) => Err("no signer".to_string()),
                });
                match signed {
                    Ok(tsig) => response.set_signature(tsig),
                    Err(error) => {
                        tracing::warn!(%error, "dns transfer not signed");
                        return serve_failed(request);
                    }
                }
            }
            match responder.send_response(response).await {
                Ok(sent) => info = Some(sent),
                Err(error) => {
                    tracing::debug!(%error, "dns transfer cut");
                    return serve_failed(request);
                }
            }
        }
        self.counters.transfers.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            target: "trafik::dns",
            client = %request.src(),
            zone = %zone.origin,
            serial = zone.serial(),
            records = all.len(),
            signed = settings.signer.is_some(),
            "dns transfer sent"
        );
        info.unwrap_or_else(|| serve_failed(request))
    }

    /// The next draw for weighted random choice: a counter, mixed.
    fn draw(&self) -> u64 {
        trafik_balance::hash::mix64(self.draws.fetch_add(1, Ordering::Relaxed))
    }
}

/// What response rate limiting counts an answer as: the client's network with the name and type
/// asked, the zone for NXDOMAIN (so random names share one count), or the refusal.
fn rate_key(mut hasher: impl Hasher, client: IpAddr, query: &LowerQuery, lookup: &Lookup) -> u64 {
    rate::network(client).hash(&mut hasher);
    lookup.code.hash(&mut hasher);
    match lookup.code {
        Code::NoError => {
            query.name().hash(&mut hasher);
            u16::from(query.query_type()).hash(&mut hasher);
        }
        Code::NxDomain => {
            if let Some(soa) = lookup.authority.first() {
                LowerName::from(&soa.name).hash(&mut hasher);
            }
        }
        Code::Refused => {}
    }
    hasher.finish()
}

async fn send<'a, R: ResponseHandler>(
    responder: &mut R,
    response: hickory_server::zone_handler::MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
    request: &Request,
) -> ResponseInfo {
    match responder.send_response(response).await {
        Ok(info) => info,
        Err(error) => {
            tracing::debug!(%error, "dns answer not sent");
            serve_failed(request)
        }
    }
}
