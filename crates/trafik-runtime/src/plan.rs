//! The typed, validated description of what to run. The binary builds a [`Plan`] from a config
//! file or from quick-mode flags; the data plane never reads configuration text itself.

pub mod failover;
mod gateway;
mod routing;
mod server_name;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue, Method, Uri};
use trafik_balance::{Algorithm, SelectorOptions};

pub use crate::proxy_protocol::ProxyProtocol;
use crate::tls::Certificate;
use crate::tls::backend::BackendTls;
pub use gateway::{
    AggregatePlan, AmbassadorPlan, BatchPlan, ClientChooser, PartPlan, ServiceChoice, ViewPlan,
    ViewsPlan,
};
pub use routing::{MirrorPlan, RedirectPlan, RoutingPlan, SplitSticky};
pub use server_name::ServerNamePattern;
pub use trafik_gateway::template::{PathTemplate, UpstreamTemplate};

/// Everything one trafik instance runs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The instance name, written in `Via` headers and in the hop chain.
    pub name: String,
    /// The request header in which each trafik appends its name (the course's `x-durak`); its
    /// own answers carry the chain and a reason in the same response header. Off when `None`.
    pub trace_header: Option<HeaderName>,
    /// Data-plane worker threads; each accepts on every listener and keeps its own upstream
    /// connection pools.
    pub workers: usize,
    pub listeners: Vec<ListenerPlan>,
    pub pools: Vec<PoolPlan>,
    pub admin: Option<SocketAddr>,
    pub client: ClientPlan,
    /// How long in-flight requests may take to finish after a stop signal.
    pub drain_timeout: Duration,
    /// The authoritative DNS server, when configured.
    pub dns: Option<DnsServicePlan>,
    /// The bearer token the admin API requires of every request, when set.
    pub admin_token: Option<crate::admin_token::AdminToken>,
    /// W3C trace context and span export.
    pub tracing: TracingPlan,
    /// How the names among the pools' backends are resolved.
    pub resolver: ResolverPlan,
}

/// `[server] resolver`, `resolve_min`, `resolve_max`: where backend names are asked and how
/// often again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolverPlan {
    /// The DNS server asked (UDP, then TCP); the system's configuration when `None`.
    pub server: Option<SocketAddr>,
    /// A name is asked again when its answer's TTL runs out, but never sooner than this (a TTL
    /// of 0 would ask without pause, and a failure is retried after this)…
    pub min: Duration,
    /// …and never later than this (a day-long TTL would hide a change for a day).
    pub max: Duration,
}

impl Default for ResolverPlan {
    fn default() -> Self {
        ResolverPlan {
            server: None,
            min: Duration::from_secs(1),
            max: Duration::from_secs(60),
        }
    }
}

/// `[tracing]`: what trafik does with W3C trace context.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TracingPlan {
    /// Start a trace for a request that arrives without a valid `traceparent`.
    pub start: bool,
    /// Export sampled spans to this OTLP/HTTP collector.
    pub otlp: Option<OtlpPlan>,
}

/// How trafik treats the client side of every listener.
#[derive(Clone, Debug)]
pub struct ClientPlan {
    /// Time allowed to read a request head, counted from when trafik starts waiting for it; on a
    /// kept-alive connection that wait starts when the previous response is sent, so this also
    /// bounds how long an idle keep-alive connection stays open.
    pub header_read_timeout: Duration,
    /// A connection on which no byte moves either way for this long is closed. It is checked
    /// once a second, so the close comes within a second after the limit (in whole seconds).
    pub idle_timeout: Duration,
    /// Keep `Forwarded` / `X-Forwarded-*` headers that arrive from clients and append to them;
    /// when false they are replaced, since an untrusted client could forge them.
    pub trust_forwarded: bool,
    /// Log one line per request.
    pub access_log: bool,
    /// The most header fields in a request head, and the most bytes of a head (request line
    /// included); past either the client gets 431. Bounds what one slow or hostile client can
    /// make trafik hold.
    pub limits: HeadLimits,
    /// How large a backend's answer head may be.
    pub upstream_limits: AnswerLimits,
    /// Which HTTP/1.1 and HTTP/2 server runs the HTTP listeners.
    pub engine: Engine,
}

/// The HTTP/1.1 and HTTP/2 server of HTTP and HTTPS listeners.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Engine {
    /// trafik's own (the proxy's `h1` and `http2::server`): HTTP/1.1's plain pool routes on a
    /// lean loop, what that loop does not take handed to hyper for the rest of the connection;
    /// HTTP/2 (h2 by ALPN, h2c by its preface) on the own server.
    #[default]
    Trafik,
    /// hyper for every request, kept to compare the two in one run.
    Hyper,
}

/// Limits on what a client sends: one request head (both on HTTP/1.1, `headers` on HTTP/2 too,
/// its bytes bounded by hyper's h2 settings), its body's pace, and the requests one HTTP/2 or
/// HTTP/3 connection may have open at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadLimits {
    pub headers: usize,
    pub bytes: usize,
    /// The slowest a request body may come, in bytes a second on average once it has run for
    /// two seconds (408 then); 0 allows any pace.
    pub min_body_rate: u64,
    /// Streams one HTTP/2 or HTTP/3 connection may have open at once (its
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`, QUIC's bidirectional stream limit): each may hold a
    /// backend connection, and the caps on connections count connections, not streams.
    pub streams: u32,
}

impl HeadLimits {
    /// hyper refuses a smaller read buffer: a head may always be this long.
    pub const MIN_BYTES: usize = 8 * 1024;
}

impl Default for HeadLimits {
    /// nginx's defaults: 100 fields (hyper's too), 4 × 8 KiB of head; a body averaging at
    /// least 1 KiB a second, so a client trickling its upload cannot hold a backend connection
    /// for long (nginx has no rate, but holds no backend connection while it reads a body);
    /// haproxy's 100 streams a connection (the least RFC 9113 §6.5.2 recommends; hyper's 200
    /// let one client hold 200 backend connections).
    fn default() -> Self {
        HeadLimits {
            headers: 100,
            bytes: 32 * 1024,
            min_body_rate: 1024,
            streams: 100,
        }
    }
}

/// Limits on a backend's answer head: past either, the answer is the backend's failure (502),
/// so an answer head that never ends costs a bounded buffer, not memory until the timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnswerLimits {
    pub headers: usize,
    /// Bytes of head, the status line and informational (1xx) heads before it included.
    pub bytes: usize,
}

impl Default for AnswerLimits {
    /// The request side's: 100 fields (hyper's client default too), 32 KiB of head.
    fn default() -> Self {
        let request = HeadLimits::default();
        AnswerLimits {
            headers: request.headers,
            bytes: request.bytes,
        }
    }
}

/// One listening address, what it speaks and where its traffic goes.
#[derive(Clone, Debug)]
pub struct ListenerPlan {
    /// A listener is matched across reloads by its address (with port 0, by name and address):
    /// while it stays the same, its sockets stay open.
    pub name: String,
    pub address: SocketAddr,
    pub kind: ListenerKind,
    /// Caps on its open connections (the proxy's `admission`); none by default.
    pub connections: ConnectionLimits,
}

pub use trafik_admission::ConnectionLimits;

/// What a listener speaks on its connections. Layer-4 kinds come beside these and reuse the
/// same accept loop (the proxy's `transport`).
#[derive(Clone, Debug)]
pub enum ListenerKind {
    /// Plain HTTP/1.1; the routes are tried most specific first (see
    /// the proxy's `http::route::RouteTable`).
    Http { routes: Vec<RoutePlan> },
    /// HTTP/1.1 or HTTP/2 (by ALPN) inside TLS, which ends here; the same routes as `Http`.
    Https {
        routes: Vec<RoutePlan>,
        /// The certificates served, chosen by the name the client asks for; the first is the
        /// default.
        certificates: Vec<Arc<Certificate>>,
        /// Certificates ordered with ACME, chosen by their domains before `certificates`.
        managed: Vec<Arc<crate::tls::acme::Managed>>,
        /// Mutual TLS: clients' certificates asked for, verified, and named to backends.
        client_auth: Option<crate::tls::ClientAuth>,
    },
    /// Layer 4: one decision per client connection among the backends of `pool`, then bytes
    /// copied both ways (the proxy's `tcp`).
    Tcp { pool: String },
    /// TLS relayed as layer 4 without being decrypted: the server name (SNI) in the client's
    /// ClientHello chooses the pool.
    TlsPassthrough { routes: Vec<SniRoutePlan> },
    /// HTTP/3 over QUIC (UDP), beside an `Https` listener on the same port number: the same
    /// routes, certificates and mutual TLS (the configuration takes them from that listener
    /// when the h3 one names none), and that listener's answers advertise it with `Alt-Svc`.
    H3 {
        routes: Vec<RoutePlan>,
        certificates: Vec<Arc<Certificate>>,
        /// Certificates ordered with ACME (the https twin's, shared: one order serves both).
        managed: Vec<Arc<crate::tls::acme::Managed>>,
        /// Mutual TLS, as on `Https`.
        client_auth: Option<crate::tls::ClientAuth>,
    },
}

impl ListenerKind {
    /// The name written in configuration files.
    pub fn name(&self) -> &'static str {
        match self {
            ListenerKind::Http { .. } => "http",
            ListenerKind::Https { .. } => "https",
            ListenerKind::Tcp { .. } => "tcp",
            ListenerKind::TlsPassthrough { .. } => "tls-passthrough",
            ListenerKind::H3 { .. } => "h3",
        }
    }

    /// Whether its sockets are UDP (QUIC) rather than TCP: a UDP listener may share its
    /// address with a TCP one.
    pub fn is_udp(&self) -> bool {
        matches!(self, ListenerKind::H3 { .. })
    }

    /// The HTTP routes of a listener, with or without TLS; none at layer 4.
    pub fn routes(&self) -> &[RoutePlan] {
        match self {
            ListenerKind::Http { routes }
            | ListenerKind::Https { routes, .. }
            | ListenerKind::H3 { routes, .. } => routes,
            ListenerKind::Tcp { .. } | ListenerKind::TlsPassthrough { .. } => &[],
        }
    }

    /// The certificates it has ordered with ACME; none without TLS.
    pub fn managed(&self) -> &[Arc<crate::tls::acme::Managed>] {
        match self {
            ListenerKind::Https { managed, .. } | ListenerKind::H3 { managed, .. } => managed,
            _ => &[],
        }
    }
}

/// Which connections of a TLS passthrough listener go to a pool.
#[derive(Clone, Debug)]
pub struct SniRoutePlan {
    /// The server names this route takes; `None` takes the connections no other route takes,
    /// those without a server name included.
    pub server_name: Option<ServerNamePattern>,
    pub pool: String,
}

/// Which requests a route takes, what is done to them and where they go.
#[derive(Clone, Debug)]
pub struct RoutePlan {
    /// Matches the request's host (without port), ASCII case-insensitively; `None` matches any.
    pub host: Option<String>,
    /// Matches a path equal to it or continuing it at a `/` boundary (`/takip` matches
    /// `/takip` and `/takip/1`, not `/takipx`); `/` matches everything.
    pub path_prefix: String,
    /// Methods this route takes; empty takes any.
    pub methods: Vec<Method>,
    /// Steps applied in order to the request (and in reverse to the response) after the
    /// built-in ones.
    pub filters: Vec<FilterPlan>,
    pub target: TargetPlan,
    /// When set, the path is matched by segments instead of by `path_prefix`
    /// (`/takip/{no}/{part}`), and its captures are the target's to use.
    pub path_template: Option<PathTemplate>,
    /// Header, query, cookie and client conditions, priority, address rules, mirror.
    pub routing: RoutingPlan,
}

/// Where a route sends what it matched.
#[derive(Clone, Debug)]
pub enum TargetPlan {
    /// A pool of backends, by name.
    Pool {
        pool: String,
        /// Retry connect failures of non-idempotent requests (POST, PATCH) too.
        retry_non_idempotent: bool,
    },
    /// A service of the gateway's map (a pool, possibly chosen by a capture), relayed as a
    /// pool is, to a path written from the captures.
    Service {
        service: ServiceChoice,
        /// The path sent upstream (`/{part}/{no}`); the request's own when `None`.
        upstream_path: Option<UpstreamTemplate>,
        retry_non_idempotent: bool,
    },
    /// Several upstream calls in parallel, merged by a jq expression (and projected per client).
    Aggregate(Arc<AggregatePlan>),
    /// One upstream call in an external contract, its answer mapped back by jq.
    Ambassador(Arc<AmbassadorPlan>),
    /// Files under a directory (the proxy's `http::files`): the path after the route's prefix,
    /// under `root`; a directory answers with its `index` file.
    Static {
        root: std::path::PathBuf,
        index: Option<String>,
    },
    /// Another target behind an edge cache (the proxy's `http::cache`); routes naming the same
    /// cache share its store.
    Cached {
        cache: Arc<CachePlan>,
        target: Box<TargetPlan>,
    },
    /// Pools by weight (a canary), optionally keeping each client on the pool it got.
    Split {
        pools: Vec<(String, u32)>,
        sticky: Option<SplitSticky>,
        retry_non_idempotent: bool,
    },
    /// An answer that sends the client elsewhere.
    Redirect(RedirectPlan),
}

/// An edge cache: its store's bounds and how it treats freshness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachePlan {
    pub name: String,
    pub max_entries: usize,
    /// Bytes of bodies and headers stored; also the largest object stored.
    pub max_bytes: u64,
    pub policy: trafik_cache::Policy,
    /// Freshness of answers that do not state one.
    pub default_ttl: Duration,
    /// How long past its freshness a copy is served while one request refreshes it.
    pub stale_while_revalidate: Duration,
    /// How long past its freshness a copy is served when the origin fails.
    pub stale_if_error: Duration,
    /// A header naming hit or miss (the course's `x-kenar: isabet|iska`).
    pub header: Option<CacheHeader>,
    /// The time freshness is read on: the system clock, except in tests that move it.
    pub clock: trafik_cache::Clock,
}

/// The custom header a cache writes on every answer, besides `Cache-Status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheHeader {
    pub name: HeaderName,
    pub hit: HeaderValue,
    pub miss: HeaderValue,
}

/// A configurable step of a route's pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterPlan {
    /// Refuse request bodies longer than this many bytes with 413: at once when
    /// `Content-Length` says so, else when the streamed body passes the limit (the backend has
    /// then seen the bytes up to it, and its request is cut off).
    RequestBodyLimit {
        bytes: u64,
    },
    /// Read each request body whole before the target sees the request: up to `memory` bytes
    /// in memory, the rest in a temporary file. A slow upload then holds no backend
    /// connection, and the backend gets the body at once. A body past `most` bytes is
    /// refused (413): the file would otherwise grow with whatever a client sends.
    RequestBuffering {
        memory: u64,
        most: u64,
    },
    /// Set a header on the request sent upstream.
    SetRequestHeader {
        name: HeaderName,
        value: HeaderValue,
    },
    /// Set a header on the response sent to the client.
    SetResponseHeader {
        name: HeaderName,
        value: HeaderValue,
    },
    /// The gatekeeper (lesson 16): refuse malformed requests before any upstream sees them.
    Gate(GatePlan),
    /// Verify a JWT bearer token (the auth stage).
    Jwt(JwtPlan),
    RateLimit(RateLimitPlan),
    /// Log each request of the route as one JSON line with every stage's verdict.
    AccessLog,
    /// Rewrite the path sent upstream (`strip_prefix`, `replace_prefix`, `rewrite`).
    RewritePath(trafik_policy::rewrite::PathRewrite),
    /// Cross-origin requests: preflights answered at the edge, `Access-Control-*` on answers.
    Cors(CorsPlan),
    /// Answers compressed for clients that accept it.
    Compress(CompressPlan),
}

/// `[listener.route.cors]`: which other origins may call the route from a browser.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorsPlan {
    pub origins: trafik_policy::cors::Origins,
    /// Methods a preflight may ask for.
    pub methods: Vec<Method>,
    /// Request headers a preflight may ask for, lowercase; `*` any.
    pub headers: Vec<String>,
    /// Answer headers the page's script may read besides the safelisted ones.
    pub expose: Vec<HeaderName>,
    /// Whether the page may send cookies and read the answer to a credentialed request.
    pub credentials: bool,
    /// How long a browser may keep a preflight's verdict; `None` leaves it to the browser.
    pub max_age: Option<Duration>,
}

/// `[listener.route.compress]`: answers compressed at the edge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompressPlan {
    /// The codings offered, the preferred first.
    pub encodings: Vec<trafik_policy::negotiate::Coding>,
    /// Media types compressed (`text/*` for a whole top-level type).
    pub types: Vec<String>,
    /// Answers whose `Content-Length` is below this stay as they are.
    pub min_length: u64,
    pub gzip_level: u32,
    pub br_level: u32,
    pub zstd_level: i32,
}

/// A route's gate: what a request must look like to pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatePlan {
    /// Paths let through exactly; empty lets any through.
    pub paths: Vec<String>,
    /// Headers that must be present and match a regular expression.
    pub headers: Vec<(HeaderName, String)>,
    /// The regular expression the bearer token must match.
    pub token: Option<String>,
    /// JSON Schema texts, already checked to compile.
    pub query_schema: Option<String>,
    pub body_schema: Option<String>,
    /// Bodies over this many bytes are refused (413): by `Content-Length` before reading,
    /// else while counting. Bodies with a schema are read up to it.
    pub body_limit: u64,
}

/// Where a route's JWT keys come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwtKeys {
    /// A shared secret, for HS256/384/512.
    Secret { algorithm: String, secret: Vec<u8> },
    /// A PEM public key, read when the configuration was.
    Pem { algorithm: String, pem: Vec<u8> },
    /// A JWKS document in a file or at an http:// URL, read again every `refresh`.
    Jwks {
        source: JwksSource,
        refresh: Duration,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwksSource {
    File(std::path::PathBuf),
    Url(http::Uri),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtPlan {
    pub keys: JwtKeys,
    /// Accepted issuers; empty accepts any.
    pub issuers: Vec<String>,
    /// Accepted audiences; empty does not check `aud`.
    pub audiences: Vec<String>,
    /// Clock difference allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// Claims sent upstream as request headers (`sub` → `x-kullanici`); headers of these names
    /// that the client sent are removed first.
    pub forward: Vec<(String, HeaderName)>,
    /// Keep `Authorization` on the request sent upstream.
    pub keep_token: bool,
}

/// A rate limit: `rate` requests per `period` per key, `burst` at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitPlan {
    pub rate: u32,
    pub period: Duration,
    pub burst: u32,
    pub key: RateKey,
    /// `None` counts in this instance; `Some` shares the count through Redis.
    pub global: Option<GlobalLimit>,
}

/// What a rate limit counts by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RateKey {
    ClientIp,
    Header(HeaderName),
    /// A claim of the token the auth stage verified.
    Claim(String),
    /// One count for the whole route.
    Route,
}

/// A limit shared by every instance that names the same Redis and key prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalLimit {
    /// `redis://host:port/`.
    pub redis: String,
    /// Prefix of the Redis keys: instances with the same prefix share the count.
    pub prefix: String,
    /// How long a Redis round trip (or a connect) may take before the Redis counts as down.
    pub timeout: Duration,
    /// With Redis down: let requests through (true) or refuse them with 503.
    pub fail_open: bool,
    /// After Redis failed, requests are decided by `fail_open` without asking it, but for one
    /// every this long that asks again.
    pub probe_interval: Duration,
}

/// A set of interchangeable backends and how to choose among them.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolPlan {
    pub name: String,
    pub algorithm: Algorithm,
    /// Virtual nodes, balance factor, table size, seed: what the algorithm is built with.
    pub selector_options: SelectorOptions,
    /// Where a hash-based algorithm (or key stickiness) finds each request's key.
    pub hash_key: Option<HashKey>,
    /// Keeps a client on one backend across requests.
    pub sticky: Option<StickyPlan>,
    pub backends: Vec<BackendPlan>,
    /// Names that add a backend per address they resolve to; the running instance appends
    /// those to `backends` (see `Discover`).
    pub discover: Vec<Discover>,
    pub health: Option<HealthPlan>,
    pub connect_timeout: Duration,
    /// Time from sending a request until the response head arrives.
    pub response_timeout: Duration,
    /// Further backends tried when connecting fails (0 turns retries off).
    pub retries: u32,
    /// Speak TLS to the backends (and to their health checks).
    pub tls: Option<BackendTls>,
    /// The HTTP version spoken to the backends (and to their health checks).
    pub protocol: UpstreamProtocol,
    /// For layer-4 pools: the PROXY protocol header that tells each backend who the client is.
    pub proxy_protocol: Option<ProxyProtocol>,
    /// Passive health (outlier ejection); `None` turns it off.
    pub outlier: Option<trafik_balance::OutlierRules>,
    /// When and how often a request goes to another backend.
    pub retry: RetryPlan,
    /// The most requests in flight to one backend (a circuit breaker); 0 for no limit. A
    /// backend at its limit is passed over; when all are, the client gets 503 at once.
    pub max_requests_per_backend: u32,
    /// With `max_requests_per_backend`: how many requests may wait for a backend with room
    /// when every one is at its limit (0: none wait, 503 at once)…
    pub max_pending: u32,
    /// …and for how long each may wait before its 503.
    pub queue_timeout: Duration,
    /// A backend that comes back (from an ejection, or up again by its checks) gets its full
    /// share of picks only after this long; zero turns the ramp off.
    pub slow_start: Duration,
    /// A limit on requests in flight to the whole pool that follows their latency; `None`
    /// (the default) for none.
    pub adaptive_concurrency: Option<trafik_balance::ConcurrencyRules>,
}

/// Which HTTP a pool speaks to its backends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum UpstreamProtocol {
    /// HTTP/1.1, one request per connection at a time.
    #[default]
    Http1,
    /// HTTP/2 over TLS (ALPN `h2` only): many requests on one connection.
    H2,
    /// HTTP/2 over plain TCP with prior knowledge.
    H2c,
    /// Over TLS, what ALPN agrees (`h2` preferred, else HTTP/1.1); HTTP/1.1 on plain TCP.
    Auto,
}

impl UpstreamProtocol {
    pub fn name(self) -> &'static str {
        match self {
            UpstreamProtocol::Http1 => "http1",
            UpstreamProtocol::H2 => "h2",
            UpstreamProtocol::H2c => "h2c",
            UpstreamProtocol::Auto => "auto",
        }
    }

    /// What TLS offers by ALPN for it.
    pub fn alpn(self) -> &'static [&'static [u8]] {
        match self {
            UpstreamProtocol::Http1 | UpstreamProtocol::H2c => &[b"http/1.1"],
            UpstreamProtocol::H2 => &[b"h2"],
            UpstreamProtocol::Auto => &[b"h2", b"http/1.1"],
        }
    }
}

/// What else makes a pool send a request to another backend, and what bounds it.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPlan {
    /// Answers that send a bodiless idempotent request to another backend (502, 503, 504).
    pub statuses: Vec<u16>,
    /// Retries allowed over ten seconds, as a share of requests…
    pub budget_ratio: f64,
    /// …plus this many a second.
    pub budget_floor: u32,
    /// A retry after a lost request or a retried status waits a random time up to this, doubled
    /// for each further retry (full jitter).
    pub backoff: Duration,
}

impl Default for RetryPlan {
    fn default() -> Self {
        RetryPlan {
            statuses: Vec::new(),
            budget_ratio: 0.2,
            budget_floor: 10,
            backoff: Duration::from_millis(25),
        }
    }
}

/// One upstream server.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendPlan {
    pub address: SocketAddr,
    pub name: Option<String>,
    pub weight: u32,
}

/// Backends found by name rather than written as addresses.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Discover {
    /// `HOST:PORT`: a backend on `port` at every address (A and AAAA) `host` has, of `weight`.
    Name {
        host: String,
        port: u16,
        weight: u32,
    },
    /// `srv:NAME`: a backend per SRV record of the lowest priority, its port and weight from
    /// the record, at every address of its target.
    Srv { name: String },
}

impl std::fmt::Display for Discover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Discover::Name { host, port, .. } => write!(f, "{host}:{port}"),
            Discover::Srv { name } => write!(f, "srv:{name}"),
        }
    }
}

/// Active health checking of a pool's backends.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthPlan {
    pub check: HealthCheck,
    pub interval: Duration,
    pub timeout: Duration,
    /// Consecutive failures that mark a backend down.
    pub fall: u32,
    /// Consecutive successes that mark it up again.
    pub rise: u32,
}

/// What a health probe does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HealthCheck {
    /// `GET path`; any 2xx or 3xx status passes.
    Http { path: String },
    /// A TCP connect that succeeds passes.
    Tcp,
    /// `grpc.health.v1.Health/Check` for `service` (empty: the whole server) answering SERVING;
    /// over HTTP/2 only.
    Grpc { service: String },
}

/// The part of a request a hash-based rule keys on. Its bytes go through
/// `trafik_balance::hash::stable_hash`, so every instance and version agrees on the result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashKey {
    Header(HeaderName),
    Cookie(String),
    Query(String),
    Path,
    ClientIp,
}

/// Session stickiness: how a client is bound to a backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StickyPlan {
    /// trafik sets a cookie naming the backend (opaque, HMAC-signed); a valid cookie returns the
    /// client to its backend while it is up, even while it drains.
    Cookie { name: String, secret: Vec<u8> },
    /// The hash key mod the number of backends (the course's "yapışkan-kalan"): simple, but a
    /// change in the number of backends re-binds most clients.
    Modulo,
    /// The hash key on a consistent-hash ring ("yapışkan-tutarlı"): a change re-binds few.
    Consistent { virtual_nodes: u32 },
}

impl std::str::FromStr for HashKey {
    type Err = String;

    /// `header:NAME`, `cookie:NAME`, `query:NAME`, `path` or `client-ip`.
    fn from_str(text: &str) -> Result<Self, String> {
        let expected = "expected header:NAME, cookie:NAME, query:NAME, path or client-ip";
        match text.split_once(':') {
            Some(("header", name)) => HeaderName::from_bytes(name.as_bytes())
                .map(HashKey::Header)
                .map_err(|_| format!("{name:?} is not a valid header name")),
            Some(("cookie", name)) if !name.is_empty() => Ok(HashKey::Cookie(name.to_owned())),
            Some(("query", name)) if !name.is_empty() => Ok(HashKey::Query(name.to_owned())),
            None if text == "path" => Ok(HashKey::Path),
            None if text == "client-ip" => Ok(HashKey::ClientIp),
            _ => Err(format!("{expected}, found {text:?}")),
        }
    }
}

impl std::fmt::Display for HashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HashKey::Header(name) => write!(f, "header:{name}"),
            HashKey::Cookie(name) => write!(f, "cookie:{name}"),
            HashKey::Query(name) => write!(f, "query:{name}"),
            HashKey::Path => f.write_str("path"),
            HashKey::ClientIp => f.write_str("client-ip"),
        }
    }
}

impl PoolPlan {
    /// The identities selection places backends by (the address as written, weight at least 1):
    /// the pool and `trafik plan` build their `BackendSet` from these, so both place alike.
    pub fn backend_specs(&self) -> impl Iterator<Item = trafik_balance::BackendSpec> + '_ {
        self.backends.iter().map(|b| trafik_balance::BackendSpec {
            id: b.address.to_string(),
            weight: b.weight.max(1),
        })
    }
}

/// What the instance serves over DNS.
#[derive(Clone, Debug)]
pub struct DnsServicePlan {
    /// UDP and TCP, same port.
    pub listen: SocketAddr,
    pub zones: trafik_dns::DnsPlan,
    /// How each region of `zones.regions` (same order) is known to be live.
    pub health: Vec<RegionHealth>,
}

/// How a region is known to be live.
#[derive(Clone, Debug, PartialEq)]
pub enum RegionHealth {
    /// Always: no check.
    Always,
    /// Active checks of `address`: down after `fall` failed probes, so after `interval × fall`.
    Check {
        address: SocketAddr,
        plan: HealthPlan,
    },
    /// While at least one backend of the pool of this name is up.
    Pool(String),
}

/// Where spans go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpPlan {
    /// `http://HOST:PORT/PATH`, usually `/v1/traces`.
    pub endpoint: Uri,
    /// `service.name` of the spans' resource.
    pub service_name: String,
}
