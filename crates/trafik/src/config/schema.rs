//! The configuration file's shape, as serde reads it. Every section refuses unknown keys.

use serde::Deserialize;
use toml::Spanned;

use super::values::{Addr, Dur};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    #[serde(default)]
    pub server: Server,
    pub admin: Option<Admin>,
    /// Built-in `trafik upstream` replicas run inside this process (the demo topology).
    #[serde(default, rename = "upstream")]
    pub upstreams: Vec<Upstream>,
    #[serde(default, rename = "listener")]
    pub listeners: Vec<Listener>,
    #[serde(default, rename = "pool")]
    pub pools: Vec<Pool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    #[serde(default = "Server::default_name")]
    pub name: String,
    /// Data-plane threads; the number of cores when absent.
    pub workers: Option<Spanned<usize>>,
    #[serde(default = "Server::default_drain")]
    pub drain_timeout: Dur,
    #[serde(default)]
    pub trust_forwarded: bool,
    #[serde(default)]
    pub access_log: bool,
    #[serde(default)]
    pub timeouts: ClientTimeouts,
}

impl Server {
    fn default_name() -> String {
        "trafik".into()
    }

    fn default_drain() -> Dur {
        Dur(std::time::Duration::from_secs(10))
    }
}

impl Default for Server {
    fn default() -> Self {
        Server {
            name: Self::default_name(),
            workers: None,
            drain_timeout: Self::default_drain(),
            trust_forwarded: false,
            access_log: false,
            timeouts: ClientTimeouts::default(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientTimeouts {
    #[serde(default = "ClientTimeouts::default_header")]
    pub client_header: Dur,
    #[serde(default = "ClientTimeouts::default_idle")]
    pub idle: Dur,
}

impl ClientTimeouts {
    fn default_header() -> Dur {
        Dur(std::time::Duration::from_secs(30))
    }

    fn default_idle() -> Dur {
        Dur(std::time::Duration::from_secs(60))
    }
}

impl Default for ClientTimeouts {
    fn default() -> Self {
        ClientTimeouts {
            client_header: Self::default_header(),
            idle: Self::default_idle(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admin {
    pub listen: Spanned<Addr>,
    /// Admin on a non-loopback address must be asked for explicitly: it has no authentication.
    #[serde(default)]
    pub allow_remote: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    pub name: String,
    pub listen: Addr,
    #[serde(default)]
    pub delay: Option<Dur>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listener {
    pub name: Spanned<String>,
    pub listen: Addr,
    #[serde(default = "Listener::default_protocol")]
    pub protocol: Spanned<Protocol>,
    #[serde(default, rename = "route")]
    pub routes: Vec<Route>,
}

impl Listener {
    fn default_protocol() -> Spanned<Protocol> {
        Spanned::new(0..0, Protocol::Http)
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Http,
    Https,
    Tcp,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    #[serde(default = "Route::default_prefix")]
    pub path_prefix: Spanned<String>,
    pub host: Option<String>,
    #[serde(default)]
    pub methods: Vec<Spanned<String>>,
    pub pool: Spanned<String>,
    #[serde(default)]
    pub retry_non_idempotent: bool,
}

impl Route {
    fn default_prefix() -> Spanned<String> {
        Spanned::new(0..0, "/".into())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    pub name: Spanned<String>,
    #[serde(default = "Pool::default_algorithm")]
    pub algorithm: Spanned<String>,
    pub backends: Spanned<Vec<Backend>>,
    pub health: Option<Health>,
    #[serde(default)]
    pub timeouts: UpstreamTimeouts,
    #[serde(default = "Pool::default_retries")]
    pub retries: u32,
    /// `header:NAME`, `cookie:NAME`, `query:NAME`, `path` or `client-ip`.
    pub hash_key: Option<Spanned<String>>,
    pub virtual_nodes: Option<Spanned<u32>>,
    pub balance_factor: Option<Spanned<f64>>,
    pub table_size: Option<Spanned<u32>>,
    pub sticky: Option<Sticky>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sticky {
    #[serde(default = "Sticky::default_mode")]
    pub mode: Spanned<String>,
    #[serde(default = "Sticky::default_cookie")]
    pub cookie: String,
    /// Signs cookies; a random one per start when absent (cookies then do not survive it).
    pub secret: Option<String>,
    pub virtual_nodes: Option<u32>,
}

impl Sticky {
    fn default_mode() -> Spanned<String> {
        Spanned::new(0..0, "cookie".into())
    }

    fn default_cookie() -> String {
        "trafik_sticky".into()
    }
}

impl Pool {
    fn default_algorithm() -> Spanned<String> {
        Spanned::new(0..0, "round-robin".into())
    }

    fn default_retries() -> u32 {
        1
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    pub address: Addr,
    pub name: Option<String>,
    #[serde(default = "Backend::default_weight")]
    pub weight: Spanned<u32>,
}

impl Backend {
    fn default_weight() -> Spanned<u32> {
        Spanned::new(0..0, 1)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    #[serde(default)]
    pub kind: HealthKind,
    #[serde(default = "Health::default_path")]
    pub path: String,
    #[serde(default = "Health::default_interval")]
    pub interval: Dur,
    #[serde(default = "Health::default_timeout")]
    pub timeout: Dur,
    #[serde(default = "Health::default_fall")]
    pub fall: u32,
    #[serde(default = "Health::default_rise")]
    pub rise: u32,
}

impl Health {
    fn default_path() -> String {
        "/".into()
    }

    fn default_interval() -> Dur {
        Dur(std::time::Duration::from_secs(2))
    }

    fn default_timeout() -> Dur {
        Dur(std::time::Duration::from_secs(1))
    }

    fn default_fall() -> u32 {
        3
    }

    fn default_rise() -> u32 {
        2
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
#[serde(deny_unknown_fields)]
pub struct UpstreamTimeouts {
    #[serde(default = "UpstreamTimeouts::default_connect")]
    pub connect: Dur,
    #[serde(default = "UpstreamTimeouts::default_response")]
    pub response: Dur,
}

impl UpstreamTimeouts {
    fn default_connect() -> Dur {
        Dur(std::time::Duration::from_secs(2))
    }

    fn default_response() -> Dur {
        Dur(std::time::Duration::from_secs(30))
    }
}

impl Default for UpstreamTimeouts {
    fn default() -> Self {
        UpstreamTimeouts {
            connect: Self::default_connect(),
            response: Self::default_response(),
        }
    }
}
