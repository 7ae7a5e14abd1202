//! The typed, validated description of what to run. The binary builds a [`Plan`] from a config
//! file or from quick-mode flags; the data plane never reads configuration text itself.

use std::net::SocketAddr;
use std::time::Duration;

use http::Method;
use trafik_balance::Algorithm;

/// Everything one trafik instance runs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The instance name, written in `Via` headers.
    pub name: String,
    /// Data-plane worker threads; each accepts on every listener and keeps its own upstream
    /// connection pools.
    pub workers: usize,
    pub listeners: Vec<ListenerPlan>,
    pub pools: Vec<PoolPlan>,
    pub admin: Option<SocketAddr>,
    pub client: ClientPlan,
    /// How long in-flight requests may take to finish after a stop signal.
    pub drain_timeout: Duration,
}

/// How trafik treats the client side of every listener.
#[derive(Clone, Debug)]
pub struct ClientPlan {
    /// Time allowed to read a request head, counted from when trafik starts waiting for it; on a
    /// kept-alive connection that wait starts when the previous response is sent, so this also
    /// bounds how long an idle keep-alive connection stays open.
    pub header_read_timeout: Duration,
    /// A connection on which no byte moves either way for this long is closed.
    pub idle_timeout: Duration,
    /// Keep `Forwarded` / `X-Forwarded-*` headers that arrive from clients and append to them;
    /// when false they are replaced, since an untrusted client could forge them.
    pub trust_forwarded: bool,
    /// Log one line per request.
    pub access_log: bool,
}

/// One listening address and its route table.
#[derive(Clone, Debug)]
pub struct ListenerPlan {
    pub name: String,
    pub address: SocketAddr,
    /// Routes in the order they are tried (see [`crate::Route`] for matching).
    pub routes: Vec<RoutePlan>,
}

/// Which requests go to which pool.
#[derive(Clone, Debug)]
pub struct RoutePlan {
    /// Matches the request's host (without port), ASCII case-insensitively; `None` matches any.
    pub host: Option<String>,
    /// Matches a path equal to it or continuing it at a `/` boundary (`/takip` matches
    /// `/takip` and `/takip/1`, not `/takipx`); `/` matches everything.
    pub path_prefix: String,
    /// Methods this route takes; empty takes any.
    pub methods: Vec<Method>,
    /// Index into [`Plan::pools`].
    pub pool: usize,
    /// Retry connect failures of non-idempotent requests (POST, PATCH) too.
    pub retry_non_idempotent: bool,
}

/// A set of interchangeable backends and how to choose among them.
#[derive(Clone, Debug)]
pub struct PoolPlan {
    pub name: String,
    pub algorithm: Algorithm,
    pub backends: Vec<BackendPlan>,
    pub health: Option<HealthPlan>,
    pub connect_timeout: Duration,
    /// Time from sending a request until the response head arrives.
    pub response_timeout: Duration,
    /// Further backends tried when connecting fails (0 turns retries off).
    pub retries: u32,
}

/// One upstream server.
#[derive(Clone, Debug)]
pub struct BackendPlan {
    pub address: SocketAddr,
    pub name: Option<String>,
    pub weight: u32,
}

/// Active health checking of a pool's backends.
#[derive(Clone, Debug)]
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
}
