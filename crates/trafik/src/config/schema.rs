//! The configuration's shape, as serde reads it from a file and as quick mode builds it from
//! flags. Every section refuses unknown keys. Keys without a default are `Option`s here and the
//! section checkers report them missing, so a mistake in a required key never stops serde from
//! reading (and reporting) the rest. Each default is written once, in the section's `Default`.

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::values::{Addr, Dur, Size};

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
}

/// `[server.limits]`: how large a request head may be.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientLimits {
    pub headers: Spanned<usize>,
    pub head_bytes: Spanned<Size>,
    /// Bytes a second a request body must average after two seconds; 0 for any pace.
    pub min_body_rate: Size,
}

impl Default for ClientLimits {
    fn default() -> Self {
        let limits = trafik_proxy::HeadLimits::default();
        ClientLimits {
            headers: unplaced(limits.headers),
            head_bytes: unplaced(Size(limits.bytes as u64)),
            min_body_rate: Size(limits.min_body_rate),
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
        }
    }
}

/// One certificate of an `https` listener: PEM files, relative to the config file's folder.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenerTls {
    /// The certificate chain, leaf first.
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
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
    pub request_headers: Vec<Spanned<String>>,
    pub response_headers: Vec<Spanned<String>>,
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
            request_headers: Vec::new(),
            response_headers: Vec::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Pool {
    pub name: Option<Spanned<String>>,
    pub algorithm: Spanned<String>,
    pub backends: Option<Spanned<Vec<Spanned<Backend>>>>,
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
            proxy_protocol: None,
            outlier: Outlier::default(),
            retry_statuses: unplaced(Vec::new()),
            retry_budget: unplaced(trafik_proxy::RetryPlan::default().budget_ratio),
            retry_budget_floor: trafik_proxy::RetryPlan::default().budget_floor,
            retry_backoff: unplaced(Dur(trafik_proxy::RetryPlan::default().backoff)),
            max_requests_per_backend: 0,
            slow_start: Dur(Duration::ZERO),
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
    pub address: Option<Spanned<Addr>>,
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
    pub kind: HealthKind,
    pub path: Spanned<String>,
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
            kind: HealthKind::Http,
            path: unplaced("/".into()),
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
