//! The configuration's shape, as serde reads it from a file and as quick mode builds it from
//! flags. Every section refuses unknown keys. Keys without a default are `Option`s here and the
//! section checkers report them missing, so a mistake in a required key never stops serde from
//! reading (and reporting) the rest. Each default is written once, in the section's `Default`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::values::{Addr, BackendAddress, Buffering, Dur, Size};

/// A value with no place in a file: a default, or a quick-mode flag.
pub fn unplaced<T>(value: T) -> Spanned<T> {
    Spanned::new(0..0, value)
}

/// Returns true if and only if `value` was written in a file (not a default, not a flag).
pub fn is_written<T>(value: &Spanned<T>) -> bool {
    !value.span().is_empty()
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct File {
    pub server: Server,
    pub admin: Option<Spanned<Admin>>,
    /// Built-in `trafik upstream` replicas run inside this process (the demo topology).
    #[serde(rename = "upstream")]
    pub upstreams: Vec<Spanned<Upstream>>,
    #[serde(rename = "listener")]
    pub listeners: Vec<Spanned<Listener>>,
    #[serde(rename = "pool")]
    pub pools: Vec<Spanned<Pool>>,
    /// Edge caches that routes name with `cache = "NAME"`.
    #[serde(rename = "cache")]
    pub caches: Vec<Spanned<Cache>>,
    /// The authoritative DNS server.
    pub dns: Option<Spanned<Dns>>,
    /// W3C trace context and span export.
    pub tracing: Tracing,
}

/// `[tracing]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tracing {
    /// Start a trace for a request that arrives without a valid `traceparent`.
    pub start: bool,
    /// An OTLP/HTTP collector's URL; sampled spans are exported there when set.
    pub otlp_endpoint: Option<Spanned<String>>,
    /// The spans' `service.name`; the server's name when absent.
    pub service_name: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Server {
    pub name: String,
    /// Data-plane threads; the number of cores when absent.
    pub workers: Option<Spanned<usize>>,
    pub drain_timeout: Dur,
    pub trust_forwarded: bool,
    pub access_log: bool,
    /// The request header each instance appends its name to (the course's `x-durak`).
    pub trace_header: Option<Spanned<String>>,
    pub timeouts: ClientTimeouts,
    pub limits: ClientLimits,
    pub upstream_limits: UpstreamLimits,
    /// The HTTP/1.1 server of plain-HTTP listeners.
    pub engine: Engine,
    /// The DNS server backend names are asked of (`IP:PORT`); the system's when absent.
    pub resolver: Option<Spanned<Addr>>,
    /// A name is asked again after its TTL, but not sooner than this…
    pub resolve_min: Spanned<Dur>,
    /// …and not later than this.
    pub resolve_max: Spanned<Dur>,
}

/// `[server] engine`: trafik's own HTTP/1.1 engine, or hyper's.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    #[default]
    Trafik,
    Hyper,
}

/// `[server.limits]`: how large a request head may be.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientLimits {
    pub headers: Spanned<usize>,
    pub head_bytes: Spanned<Size>,
    /// Bytes a second a request body must average after two seconds; 0 for any pace.
    pub min_body_rate: Size,
    /// Streams one HTTP/2 or HTTP/3 connection may have open at once.
    pub streams: Spanned<u32>,
}

impl Default for ClientLimits {
    fn default() -> Self {
        let limits = trafik_proxy::HeadLimits::default();
        ClientLimits {
            headers: unplaced(limits.headers),
            head_bytes: unplaced(Size(limits.bytes as u64)),
            min_body_rate: Size(limits.min_body_rate),
            streams: unplaced(limits.streams),
        }
    }
}

/// `[server.upstream_limits]`: how large a backend's answer head may be.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamLimits {
    pub headers: Spanned<usize>,
    pub head_bytes: Spanned<Size>,
}

impl Default for UpstreamLimits {
    fn default() -> Self {
        let limits = trafik_proxy::AnswerLimits::default();
        UpstreamLimits {
            headers: unplaced(limits.headers),
            head_bytes: unplaced(Size(limits.bytes as u64)),
        }
    }
}

impl Server {
    pub const DEFAULT_NAME: &str = "trafik";
}

impl Default for Server {
    fn default() -> Self {
        Server {
            name: Self::DEFAULT_NAME.into(),
            workers: None,
            drain_timeout: Dur(Duration::from_secs(10)),
            trust_forwarded: false,
            access_log: false,
            trace_header: None,
            timeouts: ClientTimeouts::default(),
            limits: ClientLimits::default(),
            upstream_limits: UpstreamLimits::default(),
            engine: Engine::default(),
            resolver: None,
            resolve_min: unplaced(Dur(trafik_proxy::ResolverPlan::default().min)),
            resolve_max: unplaced(Dur(trafik_proxy::ResolverPlan::default().max)),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientTimeouts {
    pub client_header: Spanned<Dur>,
    pub idle: Spanned<Dur>,
}

impl Default for ClientTimeouts {
    fn default() -> Self {
        ClientTimeouts {
            client_header: unplaced(Dur(Duration::from_secs(30))),
            idle: unplaced(Dur(Duration::from_secs(60))),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Admin {
    pub listen: Option<Spanned<Addr>>,
    /// Admin on a non-loopback address must be asked for explicitly: it has no authentication.
    pub allow_remote: bool,
    /// The bearer token every request must carry (`Authorization: Bearer TOKEN`).
    pub token: Option<Spanned<String>>,
    /// A file holding the token (its first line), so the config file need not.
    pub token_file: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Upstream {
    pub name: Option<Spanned<String>>,
    pub listen: Option<Spanned<Addr>>,
    pub delay: Dur,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Listener {
    pub name: Option<Spanned<String>>,
    pub listen: Option<Spanned<Addr>>,
    pub protocol: Spanned<Protocol>,
    /// For `tcp` listeners: the pool that gets every connection.
    pub pool: Option<Spanned<String>>,
    #[serde(rename = "route")]
    pub routes: Vec<Spanned<Route>>,
    /// The certificates of an `https` listener, chosen by the name the client asks for; the
    /// first is the default.
    pub tls: Vec<Spanned<ListenerTls>>,
    /// Mutual TLS: the CA (PEM) clients' certificates must chain to…
    pub client_ca: Option<Spanned<String>>,
    /// …`required` or `optional`…
    pub client_auth: Option<Spanned<String>>,
    /// …and the request headers that tell backends who the client is.
    pub client_headers: Option<Spanned<ClientHeaders>>,
    /// Open connections at once; 0 is no cap.
    pub max_connections: u32,
    /// Open connections from one client IP address; 0 is no cap.
    pub max_connections_per_client: u32,
    /// Answer every request with a redirect to the same URL over https (a plain listener).
    pub redirect_https: bool,
    /// Client networks every route of the listener takes (`allow`) or refuses (`deny`).
    pub allow: Vec<Spanned<String>>,
    pub deny: Vec<Spanned<String>>,
}

impl Default for Listener {
    fn default() -> Self {
        Listener {
            name: None,
            listen: None,
            protocol: unplaced(Protocol::Http),
            pool: None,
            routes: Vec::new(),
            tls: Vec::new(),
            client_ca: None,
            client_auth: None,
            client_headers: None,
            max_connections: 0,
            max_connections_per_client: 0,
            redirect_https: false,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }
}

/// `client_headers = { subject = "x-client-subject", … }`: header names, each optional.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientHeaders {
    pub subject: Option<Spanned<String>>,
    pub sans: Option<Spanned<String>>,
    pub fingerprint: Option<Spanned<String>>,
}

/// One certificate of an `https` listener: PEM files, relative to the config file's folder, or
/// one ordered and renewed with ACME.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenerTls {
    /// The certificate chain, leaf first.
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
    pub acme: Option<Spanned<Acme>>,
}

/// `acme = { domains = […], directory = URL, email, challenge, storage, directory_ca }`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Acme {
    pub domains: Option<Spanned<Vec<Spanned<String>>>>,
    pub directory: Option<Spanned<String>>,
    pub directory_ca: Option<Spanned<String>>,
    pub email: Option<Spanned<String>>,
    pub challenge: Option<Spanned<String>>,
    pub storage: Option<Spanned<String>>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Http,
    Https,
    Tcp,
    #[serde(rename = "tls-passthrough")]
    TlsPassthrough,
    /// HTTP/3 over QUIC, on UDP.
    H3,
}

impl Protocol {
    /// Whether its listeners relay bytes (layer 4) rather than requests.
    pub fn is_layer4(self) -> bool {
        matches!(self, Protocol::Tcp | Protocol::TlsPassthrough)
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Route {
    pub path_prefix: Spanned<String>,
    /// For `tls-passthrough` listeners: the server names (SNI) this route takes.
    pub sni: Option<Spanned<String>>,
    pub host: Option<String>,
    pub methods: Vec<Spanned<String>>,
    pub pool: Option<Spanned<String>>,
    pub retry_non_idempotent: bool,
    /// Filters, applied in this order: the body limit, then headers.
    pub request_body_limit: Option<Spanned<Size>>,
    /// Read each body whole before the backend sees the request.
    pub request_buffering: Option<Spanned<Buffering>>,
    pub request_headers: Vec<Spanned<String>>,
    pub response_headers: Vec<Spanned<String>>,
    /// The gateway's keys (see `gateway.rs`): a path template matched by segments instead of
    /// `path_prefix`, and what answers it.
    pub path: Option<Spanned<String>>,
    /// `aggregate` or `ambassador`; absent: a pool or a service of the map.
    pub target: Option<Spanned<String>>,
    /// A pool by name, or `{capture}` choosing among `services`.
    pub service: Option<Spanned<String>>,
    pub services: Vec<Spanned<String>>,
    pub upstream_path: Option<Spanned<String>>,
    /// jq over `{part: answer, ...}`.
    pub merge: Option<Spanned<String>>,
    #[serde(rename = "part")]
    pub parts: Vec<Spanned<Part>>,
    pub client_header: Option<Spanned<String>>,
    #[serde(rename = "view")]
    pub views: Vec<Spanned<View>>,
    /// The query parameter that lists records (`no` for `?no=A,B,C`).
    pub batch: Option<Spanned<String>>,
    pub batch_concurrency: Spanned<usize>,
    /// The ambassador's jq mapping of the answer, and of its status.
    pub answer: Option<Spanned<String>>,
    pub status: Option<Spanned<String>>,
    pub timeout: Spanned<Dur>,
    /// The `[[cache]]` in front of this route's target.
    pub cache: Option<Spanned<String>>,
    /// A directory whose files answer this route, instead of a pool.
    #[serde(rename = "static")]
    pub static_root: Option<Spanned<String>>,
    /// The file a directory answers with, on a static route.
    pub index: Option<Spanned<String>>,
    /// The gateway stages, run in a fixed order: access log, gate, jwt, rate limit, body limit.
    pub access_log: bool,
    pub gate: Option<Spanned<Gate>>,
    pub jwt: Option<Spanned<Jwt>>,
    pub rate_limit: Option<Spanned<RateLimit>>,
    /// Cross-origin requests from browsers, answered at the edge.
    pub cors: Option<Spanned<Cors>>,
    /// Answers compressed at the edge.
    pub compress: Option<Spanned<Compress>>,
    // Routing (see `routing.rs`): what the route asks of a request besides host, path and
    // method, and the split, mirror, redirect, rewrites and address rules.
    /// Header name → `value`, `prefix*`, `~regex`, `*` (present) or `!` (absent).
    pub headers: BTreeMap<String, Spanned<String>>,
    pub query: BTreeMap<String, Spanned<String>>,
    pub cookies: BTreeMap<String, Spanned<String>>,
    /// Client networks (`10.0.0.0/8`); the route takes only clients in one of them.
    pub clients: Vec<Spanned<String>>,
    pub priority: Option<Spanned<i32>>,
    /// Pools by weight, instead of `pool`.
    pub split: Option<Spanned<Vec<Spanned<SplitShare>>>>,
    /// `cookie` or `header:NAME`.
    pub split_sticky: Option<Spanned<String>>,
    pub mirror: Option<Spanned<Mirror>>,
    pub redirect: Option<Spanned<Redirect>>,
    pub strip_prefix: Option<Spanned<String>>,
    pub replace_prefix: Option<Spanned<ReplacePrefix>>,
    pub rewrite: Option<Spanned<Rewrite>>,
    pub allow: Vec<Spanned<String>>,
    pub deny: Vec<Spanned<String>>,
}

/// `[listener.route.cors]`: the origins that may call the route from a browser, and how.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Cors {
    pub origins: Option<Spanned<Vec<Spanned<String>>>>,
    pub methods: Option<Vec<Spanned<String>>>,
    pub headers: Vec<Spanned<String>>,
    pub expose: Vec<Spanned<String>>,
    pub credentials: bool,
    pub max_age: Option<Spanned<Dur>>,
}

/// `[listener.route.compress]`: which answers go out compressed, in which codings.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Compress {
    pub encodings: Spanned<Vec<Spanned<String>>>,
    pub types: Vec<Spanned<String>>,
    pub min_length: Spanned<Size>,
    pub gzip_level: Spanned<u32>,
    pub br_level: Spanned<u32>,
    pub zstd_level: Spanned<i32>,
}

impl Default for Compress {
    fn default() -> Self {
        let texts = |list: &[&str]| list.iter().map(|t| unplaced(t.to_string())).collect();
        Compress {
            encodings: unplaced(texts(&["zstd", "br", "gzip"])),
            types: texts(Compress::DEFAULT_TYPES),
            min_length: unplaced(Size(256)),
            gzip_level: unplaced(5),
            br_level: unplaced(4),
            zstd_level: unplaced(3),
        }
    }
}

impl Compress {
    /// Text formats worth compressing; images, video and archives are compressed already.
    pub const DEFAULT_TYPES: &[&str] = &[
        "text/*",
        "application/json",
        "application/javascript",
        "application/xml",
        "application/wasm",
        "image/svg+xml",
    ];
}

/// One pool of a split and its weight.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SplitShare {
    pub pool: Option<Spanned<String>>,
    pub weight: Option<Spanned<u32>>,
}

/// `mirror = { pool, percent }`: a copy of a share of the requests to another pool.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Mirror {
    pub pool: Option<Spanned<String>>,
    pub percent: Spanned<f64>,
    pub max_body: Size,
    pub max_in_flight: Spanned<u32>,
}

impl Default for Mirror {
    fn default() -> Self {
        Mirror {
            pool: None,
            percent: unplaced(100.0),
            max_body: Size(64 << 10),
            max_in_flight: unplaced(64),
        }
    }
}

/// `redirect = { to, status, query }`.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Redirect {
    pub to: Option<Spanned<String>>,
    pub status: Spanned<u16>,
    /// `keep` or `drop`.
    pub query: Spanned<String>,
}

impl Default for Redirect {
    fn default() -> Self {
        Redirect {
            to: None,
            status: unplaced(302),
            query: unplaced("keep".into()),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplacePrefix {
    pub from: Option<Spanned<String>>,
    pub to: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Rewrite {
    pub regex: Option<Spanned<String>>,
    pub to: Option<Spanned<String>>,
}

impl Route {
    pub const DEFAULT_BATCH_CONCURRENCY: usize = 4;
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
}

/// One upstream call of an aggregate.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Part {
    pub name: Option<Spanned<String>>,
    pub service: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub timeout: Spanned<Dur>,
    /// `null`, `omit` or `fail`: required, the contract must be explicit.
    pub missing: Option<Spanned<String>>,
}

impl Default for Part {
    fn default() -> Self {
        Part {
            name: None,
            service: None,
            path: None,
            timeout: unplaced(Dur(Route::DEFAULT_TIMEOUT)),
            missing: None,
        }
    }
}

/// `[listener.route.gate]`: what a request must look like to reach the pool (lesson 16).
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Gate {
    pub paths: Vec<Spanned<String>>,
    /// `Name: regex` lines.
    pub headers: Vec<Spanned<String>>,
    pub token: Option<Spanned<String>>,
    /// JSON Schemas, written as TOML tables.
    pub query_schema: Option<Spanned<toml::Value>>,
    pub body_schema: Option<Spanned<toml::Value>>,
    pub body_limit: Spanned<Size>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            paths: Vec::new(),
            headers: Vec::new(),
            token: None,
            query_schema: None,
            body_schema: None,
            body_limit: unplaced(Size(1 << 20)),
        }
    }
}

/// A client type's projection of an aggregate's answer.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct View {
    pub client: Option<Spanned<String>>,
    pub project: Option<Spanned<String>>,
}

/// `[listener.route.jwt]`: verify a bearer token; one key source.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Jwt {
    pub algorithm: Option<Spanned<String>>,
    pub secret: Option<Spanned<String>>,
    pub key_file: Option<Spanned<String>>,
    /// A JWKS file, or an http:// URL.
    pub jwks: Option<Spanned<String>>,
    pub jwks_refresh: Spanned<Dur>,
    pub issuer: Option<Spanned<String>>,
    pub audiences: Vec<Spanned<String>>,
    pub leeway: Spanned<Dur>,
    /// `claim: header-name` lines.
    pub forward_claims: Vec<Spanned<String>>,
    pub keep_token: bool,
}

impl Default for Jwt {
    fn default() -> Self {
        Jwt {
            algorithm: None,
            secret: None,
            key_file: None,
            jwks: None,
            jwks_refresh: unplaced(Dur(Duration::from_secs(300))),
            issuer: None,
            audiences: Vec::new(),
            leeway: unplaced(Dur(Duration::from_secs(30))),
            forward_claims: Vec::new(),
            keep_token: false,
        }
    }
}

/// `[listener.route.rate_limit]`: GCRA per key, here or shared through Redis.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimit {
    pub rate: Option<Spanned<u32>>,
    pub per: Spanned<Dur>,
    /// Requests let through at once; `rate` when absent.
    pub burst: Option<Spanned<u32>>,
    pub key: Spanned<String>,
    /// `host:port` of a Redis shared by the instances that share this limit.
    pub redis: Option<Spanned<String>>,
    pub redis_prefix: Option<Spanned<String>>,
    pub redis_timeout: Spanned<Dur>,
    /// After Redis failed, how often one request asks it again (the others are decided by
    /// `on_redis_error` at once).
    pub redis_probe_interval: Spanned<Dur>,
    /// With Redis down: `open` lets requests through, `closed` answers 503.
    pub on_redis_error: Spanned<String>,
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            rate: None,
            per: unplaced(Dur(Duration::from_secs(1))),
            burst: None,
            key: unplaced("client-ip".into()),
            redis: None,
            redis_prefix: None,
            redis_timeout: unplaced(Dur(Duration::from_millis(100))),
            redis_probe_interval: unplaced(Dur(Duration::from_secs(1))),
            on_redis_error: unplaced("open".into()),
        }
    }
}

impl Default for Route {
    fn default() -> Self {
        Route {
            path_prefix: unplaced("/".into()),
            sni: None,
            host: None,
            methods: Vec::new(),
            pool: None,
            retry_non_idempotent: false,
            request_body_limit: None,
            request_buffering: None,
            request_headers: Vec::new(),
            response_headers: Vec::new(),
            path: None,
            target: None,
            service: None,
            services: Vec::new(),
            upstream_path: None,
            merge: None,
            parts: Vec::new(),
            client_header: None,
            views: Vec::new(),
            batch: None,
            batch_concurrency: unplaced(Self::DEFAULT_BATCH_CONCURRENCY),
            answer: None,
            status: None,
            timeout: unplaced(Dur(Self::DEFAULT_TIMEOUT)),
            cache: None,
            static_root: None,
            index: None,
            access_log: false,
            gate: None,
            jwt: None,
            rate_limit: None,
            cors: None,
            compress: None,
            headers: BTreeMap::new(),
            query: BTreeMap::new(),
            cookies: BTreeMap::new(),
            clients: Vec::new(),
            priority: None,
            split: None,
            split_sticky: None,
            mirror: None,
            redirect: None,
            strip_prefix: None,
            replace_prefix: None,
            rewrite: None,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Pool {
    pub name: Option<Spanned<String>>,
    pub algorithm: Spanned<String>,
    pub backends: Option<Spanned<Vec<Spanned<Backend>>>>,
    /// `srv:NAME`: the backends are the SRV records' targets, instead of `backends`.
    pub discover: Option<Spanned<String>>,
    pub health: Option<Spanned<Health>>,
    pub timeouts: UpstreamTimeouts,
    pub retries: u32,
    /// `header:NAME`, `cookie:NAME`, `query:NAME`, `path` or `client-ip`.
    pub hash_key: Option<Spanned<String>>,
    /// The selection rule's options; absent ones come from `trafik_balance::SelectorOptions`.
    pub virtual_nodes: Option<Spanned<u32>>,
    pub balance_factor: Option<Spanned<f64>>,
    pub table_size: Option<Spanned<u32>>,
    pub sticky: Option<Spanned<Sticky>>,
    /// Speak TLS to the backends, verifying their certificates against `ca` (a PEM file) or
    /// the system's trusted roots, for the name `sni` (each backend's IP address when absent).
    pub tls: Spanned<bool>,
    pub ca: Option<Spanned<String>>,
    pub sni: Option<Spanned<String>>,
    /// The certificate (PEM chain) and key shown to backends that ask for one.
    pub client_cert: Option<Spanned<String>>,
    pub client_key: Option<Spanned<String>>,
    /// `http1` (default), `h2`, `h2c` or `auto`.
    pub protocol: Option<Spanned<String>>,
    /// For layer-4 pools: `v1` or `v2`, the PROXY protocol header sent to backends.
    pub proxy_protocol: Option<Spanned<String>>,
    /// Passive health: on unless `enabled = false`.
    pub outlier: Outlier,
    /// Answers (5xx) that send a bodiless idempotent request to another backend.
    pub retry_statuses: Spanned<Vec<u16>>,
    /// The retry budget: this share of requests over ten seconds, plus `retry_budget_floor` a
    /// second.
    pub retry_budget: Spanned<f64>,
    pub retry_budget_floor: u32,
    /// The first retry's most random wait; doubled for each further retry.
    pub retry_backoff: Spanned<Dur>,
    /// A circuit breaker: the most requests in flight to one backend; 0 for none.
    pub max_requests_per_backend: u32,
    /// How long a backend that comes back takes to reach its full share; 0s for at once.
    pub slow_start: Dur,
    /// Requests that may wait while every backend is at `max_requests_per_backend`; 0: none.
    pub max_pending: Spanned<u32>,
    /// How long each of them may wait.
    pub queue_timeout: Spanned<Dur>,
    /// A limit on requests in flight to the pool that follows their latency; absent: none.
    pub adaptive_concurrency: Option<Spanned<AdaptiveConcurrency>>,
}

impl Pool {
    pub const DEFAULT_RETRIES: u32 = 1;
}

impl Default for Pool {
    fn default() -> Self {
        Pool {
            name: None,
            algorithm: unplaced(trafik_balance::Algorithm::default().name().into()),
            backends: None,
            discover: None,
            health: None,
            timeouts: UpstreamTimeouts::default(),
            retries: Self::DEFAULT_RETRIES,
            hash_key: None,
            virtual_nodes: None,
            balance_factor: None,
            table_size: None,
            sticky: None,
            tls: unplaced(false),
            ca: None,
            sni: None,
            client_cert: None,
            client_key: None,
            protocol: None,
            proxy_protocol: None,
            outlier: Outlier::default(),
            retry_statuses: unplaced(Vec::new()),
            retry_budget: unplaced(trafik_proxy::RetryPlan::default().budget_ratio),
            retry_budget_floor: trafik_proxy::RetryPlan::default().budget_floor,
            retry_backoff: unplaced(Dur(trafik_proxy::RetryPlan::default().backoff)),
            max_requests_per_backend: 0,
            slow_start: Dur(Duration::ZERO),
            max_pending: unplaced(0),
            queue_timeout: unplaced(Dur(Duration::from_secs(1))),
            adaptive_concurrency: None,
        }
    }
}

/// `[pool.adaptive_concurrency]`: defaults come from `trafik_balance::ConcurrencyRules`.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdaptiveConcurrency {
    pub min_limit: Spanned<u32>,
    pub max_limit: Spanned<u32>,
    pub initial_limit: Spanned<u32>,
    pub tolerance: Spanned<f64>,
    pub baseline_window: Spanned<Dur>,
}

impl Default for AdaptiveConcurrency {
    fn default() -> Self {
        let rules = trafik_balance::ConcurrencyRules::default();
        AdaptiveConcurrency {
            min_limit: unplaced(rules.min_limit),
            max_limit: unplaced(rules.max_limit),
            initial_limit: unplaced(rules.initial_limit),
            tolerance: unplaced(rules.tolerance),
            baseline_window: unplaced(Dur(rules.baseline_window)),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Sticky {
    pub mode: Spanned<String>,
    pub cookie: String,
    /// Signs cookies; a random one per start when absent (cookies then do not survive it).
    pub secret: Option<String>,
    /// Ring points per backend for `mode = "consistent"`; the pool's `virtual_nodes` when absent.
    pub virtual_nodes: Option<Spanned<u32>>,
}

impl Default for Sticky {
    fn default() -> Self {
        Sticky {
            mode: unplaced("cookie".into()),
            cookie: "trafik_sticky".into(),
            secret: None,
            virtual_nodes: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Backend {
    pub address: Option<Spanned<BackendAddress>>,
    pub name: Option<String>,
    pub weight: Spanned<u32>,
}

impl Default for Backend {
    fn default() -> Self {
        Backend {
            address: None,
            name: None,
            weight: unplaced(1),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Health {
    pub kind: Spanned<HealthKind>,
    pub path: Spanned<String>,
    /// For `kind = "grpc"`: the service asked about; empty for the server as a whole.
    pub service: String,
    pub interval: Spanned<Dur>,
    /// How long one probe may take.
    pub timeout: Spanned<Dur>,
    pub fall: Spanned<u32>,
    pub rise: Spanned<u32>,
}

impl Health {
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
}

impl Default for Health {
    fn default() -> Self {
        Health {
            kind: unplaced(HealthKind::Http),
            path: unplaced("/".into()),
            service: String::new(),
            interval: unplaced(Dur(Self::DEFAULT_INTERVAL)),
            timeout: unplaced(Dur(Self::DEFAULT_TIMEOUT)),
            fall: unplaced(3),
            rise: unplaced(2),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum HealthKind {
    #[default]
    Http,
    Tcp,
    Grpc,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamTimeouts {
    pub connect: Spanned<Dur>,
    pub response: Spanned<Dur>,
}

impl Default for UpstreamTimeouts {
    fn default() -> Self {
        UpstreamTimeouts {
            connect: unplaced(Dur(Duration::from_secs(2))),
            response: unplaced(Dur(Duration::from_secs(30))),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Cache {
    pub name: Option<Spanned<String>>,
    pub max_entries: Spanned<usize>,
    pub max_bytes: Spanned<Size>,
    /// `lru` or `admission`.
    pub eviction: Spanned<String>,
    /// Freshness of answers that state none; 0s stores only answers that do.
    pub default_ttl: Spanned<Dur>,
    pub stale_while_revalidate: Spanned<Dur>,
    pub stale_if_error: Spanned<Dur>,
    pub header: Option<Spanned<CacheHeader>>,
}

impl Default for Cache {
    fn default() -> Self {
        Cache {
            name: None,
            max_entries: unplaced(10_000),
            max_bytes: unplaced(Size(256 << 20)),
            eviction: unplaced("lru".into()),
            default_ttl: unplaced(Dur(Duration::ZERO)),
            stale_while_revalidate: unplaced(Dur(Duration::ZERO)),
            stale_if_error: unplaced(Dur(Duration::ZERO)),
            header: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Dns {
    /// UDP and TCP, on the same port.
    pub listen: Option<Spanned<Addr>>,
    pub query_log: bool,
    /// Response rate limiting of UDP answers; off when absent.
    pub rate_limit: Option<Spanned<DnsRateLimit>>,
    /// A MaxMind database for groups by country, continent or autonomous system.
    pub geoip: Option<Spanned<DnsGeoip>>,
    #[serde(rename = "region")]
    pub regions: Vec<Spanned<DnsRegion>>,
    #[serde(rename = "group")]
    pub groups: Vec<Spanned<DnsGroup>>,
    #[serde(rename = "zone")]
    pub zones: Vec<Spanned<DnsZone>>,
}

/// `[dns.geoip]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsGeoip {
    /// A MaxMind DB file, relative to the config file's folder.
    pub database: Option<Spanned<String>>,
}

/// `[dns.rate_limit]`: identical answers to one client /24 (IPv6 /56) per second.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsRateLimit {
    pub responses_per_second: Spanned<u32>,
    /// Every `slip`-th limited answer is sent truncated, the rest dropped; 0 drops them all.
    pub slip: u32,
}

impl Default for DnsRateLimit {
    fn default() -> Self {
        DnsRateLimit {
            responses_per_second: unplaced(5),
            slip: 2,
        }
    }
}

/// Where a region's names point, and how it is known to be live: active checks of `check`
/// with `health`'s settings, or the backends of `pool`; always live with neither.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsRegion {
    pub name: Option<Spanned<String>>,
    pub addresses: Vec<Spanned<String>>,
    pub check: Option<Spanned<Addr>>,
    pub health: Option<Spanned<Health>>,
    pub pool: Option<Spanned<String>>,
}

/// A client group: the clients whose address (or EDNS client subnet) is in one of `prefixes`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsGroup {
    pub name: Option<Spanned<String>>,
    pub prefixes: Vec<Spanned<String>>,
    /// With `[dns.geoip]`: ISO country codes, autonomous system numbers, continent codes.
    pub countries: Vec<Spanned<String>>,
    pub asns: Vec<Spanned<u32>>,
    pub continents: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsZone {
    pub origin: Option<Spanned<String>>,
    /// An RFC 1035 master file with the zone's records (its SOA and apex NS too, when it has
    /// them), relative to the config file's folder.
    pub file: Option<Spanned<String>>,
    /// The TTL of records and names that set none, in seconds.
    pub ttl: u32,
    pub name_servers: Vec<Spanned<String>>,
    pub soa: DnsSoa,
    #[serde(rename = "record")]
    pub records: Vec<Spanned<DnsRecord>>,
    #[serde(rename = "name")]
    pub names: Vec<Spanned<DnsName>>,
    pub transfer: Option<Spanned<DnsTransfer>>,
    pub dnssec: Option<Spanned<DnsDnssec>>,
}

/// `[dns.zone.dnssec]`: where the zone's KSK and ZSK live (made when absent) and how absence
/// is proven.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsDnssec {
    /// A folder, relative to the config file's.
    pub keys: Option<Spanned<String>>,
    /// `"nsec"` (the default) or `"nsec3"`.
    pub denial: Option<Spanned<String>>,
}

/// `[dns.zone.transfer]`: who may take the zone by AXFR/IXFR, who is told of new serials, and
/// the key transfers must be signed with.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsTransfer {
    pub allow: Vec<Spanned<String>>,
    pub notify: Vec<Spanned<String>>,
    pub tsig: Option<Spanned<DnsTsig>>,
}

/// `tsig = { name = "…", algorithm = "hmac-sha256", secret = "BASE64" }`.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsTsig {
    pub name: Option<Spanned<String>>,
    pub algorithm: Spanned<String>,
    pub secret: Option<Spanned<String>>,
}

impl Default for DnsTsig {
    fn default() -> Self {
        DnsTsig {
            name: None,
            algorithm: unplaced("hmac-sha256".to_owned()),
            secret: None,
        }
    }
}

impl Default for DnsZone {
    fn default() -> Self {
        DnsZone {
            origin: None,
            file: None,
            ttl: 300,
            name_servers: Vec::new(),
            soa: DnsSoa::default(),
            records: Vec::new(),
            names: Vec::new(),
            transfer: None,
            dnssec: None,
        }
    }
}

/// `[cache.header]`: a header saying hit or miss on every answer of the cache's routes.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheHeader {
    pub name: Option<Spanned<String>>,
    pub hit: Spanned<String>,
    pub miss: Spanned<String>,
}

impl Default for CacheHeader {
    fn default() -> Self {
        CacheHeader {
            name: None,
            hit: unplaced("hit".into()),
            miss: unplaced("miss".into()),
        }
    }
}

/// The zone's SOA; `mname` is the first name server when absent.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsSoa {
    pub mname: Option<Spanned<String>>,
    pub rname: Spanned<String>,
    pub serial: u32,
    pub refresh: u32,
    pub retry: u32,
    pub expire: u32,
    /// The TTL of negative answers.
    pub minimum: u32,
}

impl Default for DnsSoa {
    fn default() -> Self {
        DnsSoa {
            mname: None,
            rname: unplaced("hostmaster".into()),
            serial: 1,
            refresh: 3600,
            retry: 600,
            expire: 604_800,
            minimum: 30,
        }
    }
}

/// A static record: `name` relative to the zone (`@` is the apex) or absolute.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsRecord {
    pub name: Spanned<String>,
    /// A, AAAA, CNAME, TXT, SRV, NS, MX, CAA, PTR or DS (at a delegation).
    #[serde(rename = "type")]
    pub kind: Option<Spanned<String>>,
    /// The data as a zone file writes it (SRV: `priority weight port target`; MX:
    /// `preference exchange`; CAA: `flags tag "value"`); TXT: the text itself, unquoted.
    pub value: Option<Spanned<String>>,
    pub ttl: Option<u32>,
}

impl Default for DnsRecord {
    fn default() -> Self {
        DnsRecord {
            name: unplaced("@".into()),
            kind: None,
            value: None,
            ttl: None,
        }
    }
}

/// A name answered by a routing policy; each policy reads its own keys.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsName {
    pub name: Option<Spanned<String>>,
    /// geo, latency, weighted, failover or multivalue.
    pub policy: Option<Spanned<String>>,
    pub ttl: Option<u32>,
    /// geo: each group's region; `fallback`: each region's fallback.
    pub groups: Option<Spanned<std::collections::BTreeMap<String, Spanned<String>>>>,
    pub fallback: Option<Spanned<std::collections::BTreeMap<String, Spanned<String>>>>,
    /// geo: the region of clients in no group (the first region when absent).
    pub default_region: Option<Spanned<String>>,
    /// latency: the distance from each group to each region.
    #[allow(clippy::type_complexity)]
    pub distance: Option<
        Spanned<
            std::collections::BTreeMap<
                String,
                Spanned<std::collections::BTreeMap<String, Spanned<f64>>>,
            >,
        >,
    >,
    /// latency: the group of clients in no group (the first group when absent).
    pub default_group: Option<Spanned<String>>,
    /// weighted: each region's weight, or the `pattern` of regions walked one slot per query.
    pub weights: Option<Spanned<std::collections::BTreeMap<String, Spanned<u32>>>>,
    pub pattern: Vec<Spanned<String>>,
    /// weighted: `pattern` (the next live slot) or `random`.
    pub choice: Spanned<String>,
    /// weighted: the same region for every client of a /24 (IPv6: /56).
    pub consistent: bool,
    pub primary: Option<Spanned<String>>,
    pub secondary: Option<Spanned<String>>,
    /// failover: `primary` (answer it anyway) or `empty` (no address) when both are down.
    pub all_down: Spanned<String>,
    /// multivalue: the regions, and how many live ones an answer holds.
    pub regions: Vec<Spanned<String>>,
    pub max: Spanned<usize>,
}

impl DnsName {
    pub const DEFAULT_MAX: usize = 8;
}

impl Default for DnsName {
    fn default() -> Self {
        DnsName {
            name: None,
            policy: None,
            ttl: None,
            groups: None,
            fallback: None,
            default_region: None,
            distance: None,
            default_group: None,
            weights: None,
            pattern: Vec::new(),
            choice: unplaced("pattern".into()),
            consistent: false,
            primary: None,
            secondary: None,
            all_down: unplaced("primary".into()),
            regions: Vec::new(),
            max: unplaced(Self::DEFAULT_MAX),
        }
    }
}

/// `[pool.outlier]`: passive health, which takes a backend out for a while after connect
/// failures or errors in a row, or a window of requests with too few successes. Defaults come
/// from `trafik_balance::OutlierRules`.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Outlier {
    pub enabled: bool,
    pub consecutive_connect_failures: u32,
    pub consecutive_errors: u32,
    pub min_success_rate: Spanned<f64>,
    pub success_rate_window: Spanned<u32>,
    pub base_ejection: Spanned<Dur>,
    pub max_ejection: Spanned<Dur>,
    pub max_ejected_percent: Spanned<u32>,
}

impl Default for Outlier {
    fn default() -> Self {
        let rules = trafik_balance::OutlierRules::default();
        Outlier {
            enabled: true,
            consecutive_connect_failures: rules.consecutive_connect_failures,
            consecutive_errors: rules.consecutive_errors,
            min_success_rate: unplaced(rules.min_success_rate),
            success_rate_window: unplaced(rules.success_rate_window),
            base_ejection: unplaced(Dur(rules.base_ejection)),
            max_ejection: unplaced(Dur(rules.max_ejection)),
            max_ejected_percent: unplaced(rules.max_ejected_percent),
        }
    }
}
