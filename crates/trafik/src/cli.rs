//! The command line: one subcommand per job.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use trafik_balance::Algorithm;

use crate::config::schema;
use crate::config::values::{Addr, Dur, LONGEST};

#[derive(Debug, Parser)]
#[command(
    name = "trafik",
    version,
    about = "The traffic layer in one binary: reverse proxy and load balancer, with the tools to measure it."
)]
pub struct Cli {
    /// How log lines are written.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run what a config file describes; with no file, the embedded demo (three replicas of the
    /// course's tracking service behind a health-checked round-robin balancer on 127.0.0.1:8080).
    Serve(ServeArgs),
    /// Validate a config file and print the plan it resolves to (listeners → routes → pools →
    /// backends); exits 2 on any error. With no file, checks the embedded default.
    Check(CheckArgs),
    /// Ask a running `trafik serve` to read its config file again (as SIGHUP does): a file
    /// with errors changes nothing, and its errors are printed.
    Reload(ReloadArgs),
    /// Quick mode: proxy one listen address to a list of backends, no file needed.
    Proxy(Box<ProxyArgs>),
    /// Run the course's models on trafik's own selection code and print their tables.
    #[command(subcommand)]
    Sim(SimModel),
    /// Run one replica of the course's parcel-tracking service (`GET /takip/<no>`, `POST /olay`,
    /// `GET /varlik/<name>`, `GET /saglik`, `GET /sayac`, a WebSocket echo on `/yanki`), for
    /// demos, tests and benchmarks; with `--lesson-defaults`, the load lesson's server.
    Upstream(UpstreamArgs),
    /// Open-loop HTTP load: a target rate regardless of how the server answers, latency from the
    /// intended send time; load, soak and spike profiles, user-journey scenarios, HTTPS and
    /// HTTP/2, distributed agents on etcd. Exit 0 passed, 99 a threshold was breached or too
    /// many requests failed, 98 the target rate could not be held, 2 bad usage.
    #[command(subcommand_negates_reqs = true, args_conflicts_with_subcommands = true)]
    Load(Box<LoadArgs>),
    /// The dashboard's view in a terminal, from a running instance's admin API: pools with
    /// rate, p50/p99, errors and skews, backends with their state, listeners and routes.
    Top(TopArgs),
    /// Predict what a configuration change does before it ships, on the proxy's own selection
    /// code: per pool the share of hash keys (or sticky clients) that move and where to, the
    /// load imbalance before and after, backends added, removed and reweighted.
    Plan(PlanArgs),
    /// The fleet that shares a configuration in etcd: each instance's generation and health,
    /// and the verdict on the latest configuration.
    Status(StatusArgs),
    /// A fleet's configuration in etcd.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// The authoritative DNS server's zones.
    #[command(subcommand)]
    Dns(DnsCommand),
    /// Certificates ordered with ACME (`[[listener.tls]] acme`).
    #[command(subcommand)]
    Cert(CertCommand),
    /// Sign a token to try a route's `[listener.route.jwt]` with (examples/offload.toml); prints
    /// it on stdout. For demos and tests: the secret or key is given on the command line.
    Token(TokenArgs),
    /// Why a request goes where it goes, told by the code that serves it and sending nothing
    /// upstream: every route tried and why it did or did not match, each filter's verdict, the
    /// pool's candidates and the rule's pick. Offline from a config file (-c), or from a running
    /// instance's live state (--admin, its `POST /explain`).
    Explain(ExplainArgs),
}

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ExplainArgs {
    #[command(subcommand)]
    pub what: Option<ExplainWhat>,
    /// The TOML config file to explain offline (every backend up, nothing counted yet).
    #[arg(long, short, conflicts_with = "admin")]
    pub config: Option<PathBuf>,
    /// Ask a running instance's admin API instead, against its live snapshot and state.
    #[arg(long, value_parser = parse_addr)]
    pub admin: Option<SocketAddr>,
    /// A request header, `Name: value`; repeat for more.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// The client's address (hash keys, rate limits and gates by client read it).
    #[arg(long)]
    pub client: Option<String>,
    /// Print the JSON document instead of the text.
    #[arg(long)]
    pub json: bool,
    /// The request's method.
    #[arg(required = true)]
    pub method: Option<String>,
    /// The request's URL (`http://host:port/path?query`); its port chooses the listener.
    #[arg(required = true)]
    pub url: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum ExplainWhat {
    /// What the DNS server answers a name, and why: the policy, the client's group (by
    /// subnet or GeoIP), the live regions and the answer, told by the code that answers
    /// queries. Offline from a config file (-c; regions live unless --down), or from a running
    /// instance (--admin, its `POST /explain/dns`).
    Dns(ExplainDnsArgs),
}

#[derive(Debug, clap::Args)]
pub struct ExplainDnsArgs {
    /// The TOML config file to explain offline (every region live unless --down says not).
    #[arg(long, short, conflicts_with = "admin")]
    pub config: Option<PathBuf>,
    /// Ask a running instance's admin API instead, against its live regions.
    #[arg(long, value_parser = parse_addr)]
    pub admin: Option<SocketAddr>,
    /// The record type asked (A, AAAA, TXT...).
    #[arg(long = "type", default_value = "A")]
    pub kind: String,
    /// The EDNS Client Subnet the query carries (`10.1.0.0/16`), which groups read first.
    #[arg(long, value_name = "CIDR")]
    pub client_subnet: Option<String>,
    /// The query's source address, when it carries no client subnet (default 127.0.0.1).
    #[arg(long, conflicts_with = "client_subnet")]
    pub client: Option<String>,
    /// Offline: a region taken as down (repeat for more); the others are live.
    #[arg(long, value_name = "REGION", conflicts_with = "admin")]
    pub down: Vec<String>,
    /// Print the JSON document instead of the text.
    #[arg(long)]
    pub json: bool,
    /// The name asked (`kargo.example`).
    pub name: String,
}

#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    /// The JOSE algorithm, such as HS256 or RS256.
    #[arg(long, default_value = "HS256")]
    pub algorithm: String,
    /// The shared secret (HS256/384/512), as the route's `secret`.
    #[arg(
        long,
        required_unless_present = "key_file",
        conflicts_with = "key_file"
    )]
    pub secret: Option<String>,
    /// A PEM private key (RS*, PS*, ES*, EdDSA); the route holds its public half.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// The token's subject (`sub`), which a route can forward as a header.
    #[arg(long)]
    pub sub: String,
    /// The issuer (`iss`), as the route's `issuer`.
    #[arg(long)]
    pub issuer: Option<String>,
    /// The audience (`aud`), one of the route's `audiences`.
    #[arg(long)]
    pub audience: Option<String>,
    /// How long the token is valid from now (`exp`).
    #[arg(long, default_value = "1h", value_parser = parse_duration)]
    pub valid_for: std::time::Duration,
}

#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Order new certificates now through a running instance's admin API, and wait for the
    /// outcome: the new certificate is served without a restart; after a failure the old one
    /// stays and the error is printed (exit 1).
    Renew(CertRenewArgs),
}

#[derive(Debug, clap::Args)]
pub struct CertRenewArgs {
    /// The running instance's admin API.
    #[arg(long, default_value = "127.0.0.1:9090", value_parser = parse_addr)]
    pub admin: SocketAddr,
    /// Only the certificate naming this domain (default: every ACME certificate).
    #[arg(long)]
    pub domain: Option<String>,
    /// How long to wait for the CA.
    #[arg(long, default_value = "3m", value_parser = parse_duration)]
    pub wait: std::time::Duration,
}

#[derive(Debug, Subcommand)]
pub enum DnsCommand {
    /// Print the DS record (SHA-256 digest) of a signed zone's KSK, to hand to the parent zone.
    Ds(DsArgs),
}

#[derive(Debug, clap::Args)]
pub struct DsArgs {
    /// The zone, such as `kargo.test`.
    pub zone: String,
    /// The TOML config file.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// The running instance's admin API.
    #[arg(long, default_value = "127.0.0.1:9090", value_parser = parse_addr)]
    pub admin: SocketAddr,
    /// Print one frame and exit.
    #[arg(long)]
    pub once: bool,
    /// How often the view is redrawn.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: std::time::Duration,
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// OLD NEW: the configuration in force and the one about to ship; with --etcd, only NEW
    /// (the configuration in force is the fleet's in etcd).
    #[arg(required = true, num_args = 1..=2, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// How many sample keys to place.
    #[arg(long, default_value_t = 10_000)]
    pub keys: usize,
    /// The sample keys are this prefix followed by 0, 1, 2, … (the key's bytes as the pool's
    /// hash key reads them: a header, cookie or query value, a path).
    #[arg(long, default_value = "key-")]
    pub key_prefix: String,
    /// Play the requests of this access log (`trafik serve --access-log --log-format json`)
    /// through OLD and NEW instead of placing sample keys: routes, moves, sticky sessions, rate
    /// limits and cache keys, per route and pool.
    #[arg(long, value_name = "ACCESS_LOG")]
    pub replay: Option<PathBuf>,
    /// With --replay: exit 1 when a condition holds, e.g. 'moved>5%,refused>0' (metric op
    /// number[%], comma-separated; metrics: route_changed, moved, keys_moved, sticky_moved,
    /// refused, newly_refused, cache_invalidated).
    #[arg(long, value_name = "CONDITIONS", requires = "replay")]
    pub fail_if: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct UpstreamArgs {
    /// Address to listen on.
    #[arg(long, value_parser = parse_addr)]
    pub listen: SocketAddr,
    /// The name the replica reports in `x-kopya`, `/sayac` and at the end of the `x-durak` chain.
    #[arg(long)]
    pub name: String,
    /// Wait this long before each answer (a slow replica).
    #[arg(long, value_parser = parse_duration)]
    pub delay: Option<std::time::Duration>,
    /// Which course service to play: the tracking replica, or the gateway lessons' status
    /// service (gecit/servis.mjs on 8471), fee service (on 8472) or carrier with API v1 and v2
    /// (elci/tasiyici.mjs on 8481).
    #[arg(long, value_enum, default_value_t = UpstreamRole::Tracking)]
    pub role: UpstreamRole,
    #[command(flatten)]
    pub lesson: LessonArgs,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum UpstreamRole {
    Tracking,
    TrackingStatus,
    TrackingFee,
    Carrier,
}

impl From<UpstreamRole> for trafik_upstream::Role {
    fn from(role: UpstreamRole) -> Self {
        match role {
            UpstreamRole::Tracking => trafik_upstream::Role::Tracking,
            UpstreamRole::TrackingStatus => trafik_upstream::Role::TrackingStatus,
            UpstreamRole::TrackingFee => trafik_upstream::Role::TrackingFee,
            UpstreamRole::Carrier => trafik_upstream::Role::Carrier,
        }
    }
}

/// The load lesson's server. Any of these flags turns it on: every path but `/olcut` (its
/// counters), `/saglik` and `/sayac` is then answered as the lesson's server answers it.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "The load lesson's server (any of these turns it on)")]
pub struct LessonArgs {
    /// Be the load lesson's server as the course runs it: a 3 ms wait and 0.85 ms of CPU per
    /// request, and every 100th request a maintenance pass scanning all records 600 times. The
    /// flags below override single values.
    #[arg(long)]
    lesson_defaults: bool,
    /// Milliseconds waited per request.
    #[arg(long, value_parser = parse_millis)]
    wait_ms: Option<std::time::Duration>,
    /// Milliseconds of CPU burnt per request.
    #[arg(long, value_parser = parse_millis)]
    work_ms: Option<std::time::Duration>,
    /// A maintenance pass over all accumulated records every N requests (0: never).
    #[arg(long)]
    maintenance_every: Option<u64>,
    /// How many times a pass scans the records.
    #[arg(long)]
    maintenance_scan: Option<u64>,
}

impl LessonArgs {
    /// The course's values under `--lesson-defaults` (else zero), with each flag given in place
    /// of its value.
    pub fn load_lesson(&self) -> trafik_upstream::LoadLesson {
        let base = if self.lesson_defaults {
            trafik_upstream::LoadLesson::course()
        } else {
            trafik_upstream::LoadLesson::default()
        };
        trafik_upstream::LoadLesson {
            wait: self.wait_ms.unwrap_or(base.wait),
            work: self.work_ms.unwrap_or(base.work),
            maintenance_every: self.maintenance_every.unwrap_or(base.maintenance_every),
            maintenance_scan: self.maintenance_scan.unwrap_or(base.maintenance_scan),
        }
    }
}

/// Milliseconds, bounded as every duration is ([`LONGEST`]): a work time is added to the clock.
fn parse_millis(text: &str) -> Result<std::time::Duration, String> {
    let duration = text
        .parse::<f64>()
        .ok()
        .and_then(|ms| std::time::Duration::try_from_secs_f64(ms / 1000.0).ok())
        .ok_or("expected a number of milliseconds of at least 0, such as 0.85")?;
    if duration > LONGEST {
        return Err(format!(
            "{text} ms is out of range: at most 315360000000 (ten years)"
        ));
    }
    Ok(duration)
}

#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// The TOML config file.
    #[arg(long, short, conflicts_with = "etcd")]
    pub config: Option<PathBuf>,
    /// Log one line per request.
    #[arg(long)]
    pub access_log: bool,
    /// Put the listener NAME on ADDR instead of its configured address (`dns` for the DNS
    /// server); repeat for more. Several instances of one configuration on one machine.
    #[arg(long = "listen", value_name = "NAME=ADDR", value_parser = parse_listen_override)]
    pub listen: Vec<(String, SocketAddr)>,
    /// Serve the admin API on ADDR instead of the configured `[admin] listen`.
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    pub admin: Option<SocketAddr>,
    /// With --etcd: this instance's name under `<prefix>instances/` (default: host name and
    /// process id).
    #[arg(long, requires = "etcd")]
    pub instance: Option<String>,
    #[command(flatten)]
    pub etcd: EtcdArgs,
}

/// Where a fleet's configuration lives in etcd.
#[derive(Clone, Debug, clap::Args)]
pub struct EtcdArgs {
    /// etcd's client URL (http://HOST:PORT) of the fleet whose configuration is
    /// `<prefix>config` (serve reads and watches it; status and plan read it; config push
    /// writes it).
    #[arg(long, value_name = "URL")]
    pub etcd: Option<String>,
    /// The prefix of the fleet's keys: `config`, `status`, `instances/<id>`, `canary/<id>`,
    /// `pushes/<id>`.
    #[arg(long, value_name = "PREFIX", default_value = "/trafik/")]
    pub etcd_prefix: String,
}

fn parse_listen_override(text: &str) -> Result<(String, SocketAddr), String> {
    let (name, address) = text
        .split_once('=')
        .ok_or("expected NAME=ADDR, such as web=127.0.0.1:8081")?;
    Ok((name.to_owned(), parse_addr(address)?))
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check a config file as `trafik check` does and publish it to etcd only when it is clean
    /// (exit 2 and nothing published otherwise); with --canary, on one instance first, judged
    /// by --gate over --for, then published or reverted (exit 1).
    Push(ConfigPushArgs),
}

#[derive(Debug, clap::Args)]
pub struct ConfigPushArgs {
    /// The TOML config file.
    pub file: PathBuf,
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// Apply FILE to this instance only first (its `--instance` id, under
    /// `<prefix>canary/<id>`), judge its traffic by --gate over --for, then publish to all, or
    /// revert it and exit 1 naming the failing figure.
    #[arg(long, value_name = "INSTANCE", requires = "gate")]
    pub canary: Option<String>,
    /// The canary's conditions, all of which must hold over the window, such as
    /// `error_rate<1%,p99<200ms`: requests, error_rate, 2xx/4xx/5xx (a count, or a share with
    /// %), p50/p90/p99 (ms or s); each with <, <=, > or >=.
    #[arg(long, value_name = "CONDITIONS", requires = "canary")]
    pub gate: Option<String>,
    /// How long the canary's traffic is watched before the verdict.
    #[arg(long = "for", value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub window: std::time::Duration,
}

#[derive(Debug, clap::Args)]
pub struct ReloadArgs {
    /// The running instance's admin API.
    #[arg(long, default_value = "127.0.0.1:9090", value_parser = parse_addr)]
    pub admin: SocketAddr,
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The TOML config file.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

/// Quick mode's flags; each sets the config key of the same meaning, and what no flag sets keeps
/// the config file's default.
#[derive(Debug, clap::Args)]
pub struct ProxyArgs {
    /// Address to accept clients on.
    #[arg(long)]
    pub listen: Addr,
    /// `http` proxies each request to a backend; `tcp` relays each client connection's bytes
    /// to one backend chosen when it connects (layer 4).
    #[arg(long, value_enum, default_value_t = ProxyMode::Http)]
    pub mode: ProxyMode,
    /// With --mode tcp: send each backend a PROXY protocol header (v1 or v2) naming the
    /// client.
    #[arg(long)]
    pub proxy_protocol: Option<String>,
    /// A backend address; repeat for more.
    #[arg(long = "to", required = true)]
    pub to: Vec<Addr>,
    /// The selection rule (a config file's `algorithm`).
    #[arg(long, default_value_t = Algorithm::default().name().to_owned(),
        value_parser = clap::builder::PossibleValuesParser::new(Algorithm::ALL.iter().map(|rule| rule.name())))]
    pub algorithm: String,
    /// What hash-based algorithms key on: header:NAME, cookie:NAME, query:NAME, path or
    /// client-ip (the default for them).
    #[arg(long)]
    pub hash_key: Option<String>,
    /// Turn on active HTTP health checks of this path (fall 1, rise 1).
    #[arg(long)]
    pub health_path: Option<String>,
    /// Time between health checks.
    #[arg(long, default_value_t = Dur(schema::Health::DEFAULT_INTERVAL))]
    pub health_interval: Dur,
    /// Passive health (a config file's `[pool.outlier]`): take a backend out of selection after
    /// failed connects or 5xx answers in a row; `off` keeps sending it its share.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    pub outlier: Switch,
    /// Other backends tried after a failed connect, or after a backend lost a GET (its
    /// connection broke or the response timeout passed); 0 turns retries off.
    #[arg(long, default_value_t = schema::Pool::DEFAULT_RETRIES)]
    pub retries: u32,
    /// How long to wait for a backend's response head before answering 504 (or trying
    /// another backend).
    #[arg(long, value_name = "DUR", default_value_t = schema::UpstreamTimeouts::default().response.into_inner())]
    pub response_timeout: Dur,
    /// How long a connect to a backend may take.
    #[arg(long, value_name = "DUR", default_value_t = schema::UpstreamTimeouts::default().connect.into_inner())]
    pub connect_timeout: Dur,
    /// Serve the admin API (/status, /metrics, drain) here; loopback only unless
    /// --admin-allow-remote.
    #[arg(long)]
    pub admin: Option<Addr>,
    /// Allow a non-loopback --admin address; then --admin-token-file is required, and every
    /// admin request must carry its token.
    #[arg(long, requires = "admin")]
    pub admin_allow_remote: bool,
    /// A file whose first line is the admin API's bearer token (required beyond loopback).
    #[arg(long, value_name = "PATH", requires = "admin")]
    pub admin_token_file: Option<String>,
    /// The instance name written in Via headers and in the hop chain.
    #[arg(long, default_value = schema::Server::DEFAULT_NAME)]
    pub name: String,
    /// Append --name to this request header at every request (the course's x-durak); trafik's
    /// own answers carry the chain and a reason in it (`tv > unreachable`).
    #[arg(long, value_name = "NAME")]
    pub trace_header: Option<String>,
    /// Data-plane threads; one per core by default.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Log one line per request.
    #[arg(long)]
    pub access_log: bool,
    /// Serve HTTPS with this certificate chain (PEM, leaf first). Repeat for more certificates,
    /// each with its --tls-key, in the same order: the first is the default, the others are
    /// chosen by the name the client asks for (SNI).
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Vec<String>,
    /// The private key (PEM) of the --tls-cert at the same position.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Vec<String>,
    /// The HTTP/1.1 server of a plain-HTTP listener: trafik's own (the default) or hyper.
    #[arg(long, value_enum)]
    pub engine: Option<schema::Engine>,
}

/// A quick-mode setting that is on by default (a config file's `enabled = true|false`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// What quick mode's listener speaks (a config file's `protocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProxyMode {
    Http,
    Tcp,
}

fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    text.parse::<Addr>().map(|a| a.0)
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    text.parse::<Dur>().map(|d| d.0)
}

#[derive(Debug, Subcommand)]
pub enum SimModel {
    /// Seed 001: round robin, capacity share, least connections and consistent hashing over
    /// subjects of unequal capacity; then one subject leaves.
    Subjects(SubjectsArgs),
    /// The queue model: round robin vs least connections (plus power of two and peak-EWMA),
    /// equal replicas and one slowed down.
    Queue(QueueArgs),
    /// Modulo vs the consistent-hash ring (plus Maglev and bounded loads) on N → N+1 replicas
    /// and back, and the cache warm-up the moved keys cost.
    Hash(HashArgs),
    /// The stickiness model: non-sticky vs sticky by key mod N vs sticky on the ring, on 3 then
    /// 4 replicas, and what a failing replica loses.
    Sticky(StickyArgs),
    /// The CDN lesson's trace: one cache vs an edge cache in front of an application cache, on
    /// the edge cache's own store, by burst length.
    Cache(CacheArgs),
    /// The push-vs-pull lesson: pull, push and hybrid distribution to the edges.
    Distribution(DistributionArgs),
    /// The DNS lesson: geo, latency and weighted policies (trafik-dns's code) seen through
    /// resolvers that cache for a TTL; shares, deviation, distance, queries; a TTL sweep.
    Dns(DnsArgs),
    /// The DNS lesson's failover: a region fails, the health checks notice, and the TTL decides
    /// how long requests still go there and how many are lost.
    Failover(FailoverArgs),
}

#[derive(Debug, clap::Args)]
pub struct DnsArgs {
    /// Caching resolvers; resolver j carries a share proportional to 1/(j+1).
    #[arg(long, default_value_t = 40)]
    pub resolvers: usize,
    /// Requests per second, all resolvers together.
    #[arg(long, default_value_t = 514)]
    pub rate: u64,
    /// The TTLs of the weighted policy's sweep, in seconds.
    #[arg(long, value_delimiter = ',', default_value = "30,60,300,900")]
    pub ttls: Vec<u64>,
    /// The TTL of the policy comparison, in seconds.
    #[arg(long, default_value_t = 300)]
    pub ttl: u64,
    /// Seconds modelled.
    #[arg(long, default_value_t = 3600)]
    pub duration: u64,
    /// Print the tables as JSON, for tools, instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct FailoverArgs {
    /// Caching resolvers; resolver j carries a share proportional to 1/(j+1).
    #[arg(long, default_value_t = 40)]
    pub resolvers: usize,
    /// Requests per second, all resolvers together.
    #[arg(long, default_value_t = 514)]
    pub rate: u64,
    /// The TTLs of the sweep, in seconds.
    #[arg(long, value_delimiter = ',', default_value = "30,60,300,900")]
    pub ttls: Vec<u64>,
    /// The TTL of the summary, in seconds.
    #[arg(long, default_value_t = 300)]
    pub ttl: u64,
    /// The second the region fails.
    #[arg(long, default_value_t = 100)]
    pub fail_at: u64,
    /// Seconds until the health checks mark it dead (interval × fall).
    #[arg(long, default_value_t = 10)]
    pub detection: u64,
    /// Seconds modelled.
    #[arg(long, default_value_t = 1200)]
    pub duration: u64,
    /// The region that fails.
    #[arg(long, default_value = "b34")]
    pub region: String,
    /// The names' policy: geo, latency or weighted.
    #[arg(long, default_value = "geo")]
    pub policy: String,
    /// The availability target (percent) whose monthly downtime budget losses are counted in.
    #[arg(long, default_value_t = 99.9)]
    pub availability: f64,
    /// Print the tables as JSON, for tools, instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct SubjectsArgs {
    /// Seed of the random request stream (the course's by default).
    #[arg(long, default_value_t = 20_260_812)]
    pub seed: u64,
    /// Subjects (back ends) of unequal capacity.
    #[arg(long, default_value_t = 40)]
    pub subjects: usize,
    /// Offered loads of the table's rows, requests per second.
    #[arg(long, value_delimiter = ',', default_value = "1200,2000,2600")]
    pub loads: Vec<u64>,
    /// Virtual nodes per subject on the consistent-hash ring.
    #[arg(long, default_value_t = 128)]
    pub vnodes: u32,
    /// The subject (numbered from 1) that leaves.
    #[arg(long, default_value_t = 20)]
    pub remove: usize,
    /// Offered load while the subject leaves, requests per second.
    #[arg(long, default_value_t = 1200)]
    pub removal_load: u64,
    /// Print the tables as JSON, for tools, instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct QueueArgs {
    /// Replicas behind the balancer.
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// Requests per run.
    #[arg(long, default_value_t = 300)]
    pub requests: usize,
    /// Rounds between arrivals.
    #[arg(long, default_value_t = 2)]
    pub arrival: u64,
    /// Seed of the random service times (the course's by default).
    #[arg(long, default_value_t = 20_240_730)]
    pub seed: u64,
    /// Speed multipliers of the slow scenario, one per replica.
    #[arg(long, value_delimiter = ',', default_value = "3,1,1")]
    pub slow: Vec<u64>,
    /// Print the tables as JSON, for tools, instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct HashArgs {
    /// Keys hashed.
    #[arg(long, default_value_t = 100_000)]
    pub keys: usize,
    /// The keys' common prefix (keys are PREFIX + a number).
    #[arg(long, default_value = "G")]
    pub key_prefix: String,
    /// The first key's number.
    #[arg(long, default_value_t = 1_000_000)]
    pub key_base: u64,
    /// The replicas before one is added, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "k1,k2,k3")]
    pub replicas: Vec<String>,
    /// The replica added; k<N+1> by default.
    #[arg(long)]
    pub added: Option<String>,
    /// Virtual nodes per replica of the ring's rows, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,10,100,1000")]
    pub vnodes: Vec<u32>,
    /// Maglev's lookup table size (a prime).
    #[arg(long, default_value_t = trafik_balance::DEFAULT_TABLE_SIZE)]
    pub maglev_size: u32,
    /// Bounded loads' factor: no replica over this × the mean.
    #[arg(long, default_value_t = 1.25)]
    pub balance_factor: f64,
    /// Reads per second at peak.
    #[arg(long, default_value_t = 416.67)]
    pub read_rate: f64,
    /// Writes per second at peak.
    #[arg(long, default_value_t = 97.22)]
    pub write_rate: f64,
    /// Share of reads a warm cache answers.
    #[arg(long, default_value_t = 0.90)]
    pub hit_ratio: f64,
    /// Store requests per second with a warm cache.
    #[arg(long, default_value_t = 138.89)]
    pub store_base: f64,
    /// The warm-up window.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub warmup: std::time::Duration,
    /// Print the tables as JSON, for tools, instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct StickyArgs {
    /// name:clients:requests-per-client, comma separated.
    #[arg(long, default_value = "buyuk:1:2000,orta:9:400,kucuk:90:50", value_parser = parse_clients)]
    pub clients: ClientGroups,
    /// Virtual nodes per replica on the ring.
    #[arg(long, default_value_t = 200)]
    pub vnodes: u32,
    /// Print the tables as JSON, for tools, instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct CacheArgs {
    /// Requests in the trace.
    #[arg(long, default_value_t = 200_000)]
    pub requests: u64,
    /// Queries per shipment (a burst is at most this long).
    #[arg(long, default_value_t = 10)]
    pub queries: u64,
    /// Bursts open at the same time.
    #[arg(long, default_value_t = 100)]
    pub open: usize,
    /// Keys each cache holds.
    #[arg(long, default_value_t = 1_000)]
    pub capacity: usize,
    /// Burst lengths of the table's rows.
    #[arg(long, value_delimiter = ',', default_value = "10,5,2")]
    pub bursts: Vec<u64>,
    /// Burst length of the summary lines.
    #[arg(long, default_value_t = 10)]
    pub summary_burst: u64,
    /// The store's eviction policy: lru (the course's) or admission (quick_cache).
    #[arg(long, default_value = "lru")]
    pub policy: trafik_cache::Policy,
    /// Print the tables as JSON, for tools, instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct DistributionArgs {
    /// Edge servers.
    #[arg(long, default_value_t = 12)]
    pub edges: u64,
    /// Rounds a pulled copy stays fresh.
    #[arg(long, default_value_t = 300)]
    pub ttl: u64,
    /// Rounds modelled.
    #[arg(long, default_value_t = 900)]
    pub rounds: u64,
    /// The round in which the common objects change.
    #[arg(long, default_value_t = 100)]
    pub update_round: u64,
    /// Objects asked for at every edge.
    #[arg(long, default_value_t = 20)]
    pub common_objects: u64,
    /// Objects asked for at one edge each.
    #[arg(long, default_value_t = 20_046)]
    pub private_objects: u64,
    /// Edge k's first copy expires in round 1 + (k × stagger) mod ttl.
    #[arg(long, default_value_t = 27)]
    pub stagger: u64,
    /// Print the tables as JSON, for tools, instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The stickiness model's client groups: (name prefix, clients, requests per client).
#[derive(Clone, Debug)]
pub struct ClientGroups(pub Vec<(String, usize, u64)>);

fn parse_clients(text: &str) -> Result<ClientGroups, String> {
    trafik_sim::sticky::parse_clients(text)
        .map(ClientGroups)
        .map_err(|e| e.to_string())
}

#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    #[arg(help = url_help(), required_unless_present = "scenario")]
    pub url: Option<String>,
    /// More URLs on the same host and port, one per line; requests cycle through all of them.
    #[arg(long)]
    pub url_file: Option<PathBuf>,
    /// User journeys instead of one URL: a TOML file of weighted flows of steps (captures,
    /// checks, think times, thresholds; examples/load/takip.toml). Flows start open loop at
    /// --rate per second; --max-connections caps the virtual users in flight; with --etcd, the
    /// agents share the arrivals; with --http2, each user's connections speak HTTP/2.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["url", "url_file", "max", "streams", "method", "headers", "body"])]
    pub scenario: Option<PathBuf>,
    /// The course's tests with their defaults: load (3 s), soak (12 s, quarters), spike (9 s).
    #[arg(long, value_enum)]
    pub profile: Option<Profile>,
    /// Requests per second (open loop); 514 under a profile.
    #[arg(long)]
    pub rate: Option<f64>,
    /// How long to send: 10s by default, or the profile's own length.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, allow_negative_numbers = true)]
    pub duration: Option<std::time::Duration>,
    /// Piecewise-linear ramps as DURATION:TARGET,... (k6's ramping arrival rate), e.g. 5s:100,10s:500,5s:0.
    #[arg(long)]
    pub stages: Option<String>,
    /// The rate the first stage ramps from.
    #[arg(long, default_value_t = 0.0)]
    pub start_rate: f64,
    /// Spike profile: the rate multiplier during the spike (the course's: 3).
    #[arg(long)]
    pub spike_factor: Option<f64>,
    /// Spike profile: when the spike starts (the course's: 3s).
    #[arg(long, value_parser = parse_duration)]
    pub spike_at: Option<std::time::Duration>,
    /// Spike profile: how long it lasts (the course's: 1.5s).
    #[arg(long, value_parser = parse_duration)]
    pub spike_for: Option<std::time::Duration>,
    /// Closed loop: every connection sends as fast as the server answers (for throughput).
    #[arg(long, conflicts_with_all = ["rate", "stages", "profile"])]
    pub max: bool,
    /// Connections opened at the start (the fixed number with --max).
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// Most connections the open loop opens when every one is busy.
    #[arg(long, default_value_t = 2048)]
    pub max_connections: usize,
    /// Speak HTTP/2 (cleartext with prior knowledge, or `h2` by ALPN over https).
    #[arg(long)]
    pub http2: bool,
    /// HTTP/2: requests in flight on one connection at once (multiplexed streams); the open
    /// loop still opens another connection when every stream is busy.
    #[arg(long, default_value_t = 1, requires = "http2", value_parser = clap::value_parser!(u16).range(1..))]
    pub streams: u16,
    /// https: trust the CA certificates in this PEM file instead of the system's.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// https: accept any server certificate (a test server's self-signed one).
    #[arg(long, conflicts_with = "cacert")]
    pub insecure: bool,
    /// https: the TLS versions to offer, 1.2 and/or 1.3 (repeat for both; default both).
    #[arg(long = "tls-version", value_name = "VERSION", value_parser = ["1.2", "1.3"])]
    pub tls_versions: Vec<String>,
    /// The HTTP method of every request (GET, POST, PUT, …); with --body for a body.
    #[arg(long, default_value = "GET")]
    pub method: String,
    /// A request header as NAME:VALUE; repeat for more.
    #[arg(long = "header", short = 'H')]
    pub headers: Vec<String>,
    /// The request body, or @FILE to read it from a file.
    #[arg(long)]
    pub body: Option<String>,
    /// Per-request timeout.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub timeout: std::time::Duration,
    /// A send this far behind its intended time counts as late.
    #[arg(long, default_value = "5ms", value_parser = parse_duration)]
    pub late_after: std::time::Duration,
    /// Fail (exit 99) when the threshold metric exceeds this; 25ms under a profile.
    #[arg(long, value_parser = parse_duration)]
    pub threshold: Option<std::time::Duration>,
    /// The metric the threshold applies to: p50, p90, p95, p99, p999, max (latency from the
    /// intended send), or service.p95 and the like.
    #[arg(long, default_value = "p95")]
    pub threshold_on: String,
    /// Fail (exit 99) when a larger share of the finished requests failed (refused, reset, timed
    /// out, not HTTP, or answered with a status outside 2xx and 3xx): a percentage such as 1% or a
    /// fraction such as 0.01.
    #[arg(long, default_value = "1%", allow_negative_numbers = true)]
    pub max_error_rate: trafik_load::MaxErrorRate,
    /// A JSON counters endpoint of the server, fetched before and after the run; with --etcd,
    /// by the coordinator before it hands out the jobs and after every agent reported, since the
    /// server's counters are the whole fleet's doing.
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// Print everything as JSON instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// Write a self-contained HTML page with plots.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Distributed: send through N `trafik load agent`s registered at this etcd (http://HOST:PORT),
    /// each its share of the rate (or of a scenario's arrivals) from a common start time; their
    /// histograms, per step too, are merged exactly.
    #[arg(long, value_name = "URL", requires = "agents")]
    pub etcd: Option<String>,
    /// The number of agents a distributed run waits for.
    #[arg(long, value_name = "N", requires = "etcd", value_parser = clap::value_parser!(u32).range(1..))]
    pub agents: Option<u32>,
    /// How long a distributed run waits for its agents to register.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub agents_wait: std::time::Duration,
    /// The prefix of a distributed run's keys: `agents/NAME`, `jobs/NAME`, `results/RUN/NAME`.
    #[arg(long, value_name = "PREFIX", default_value = "/trafik-load/")]
    pub etcd_prefix: String,
    #[command(subcommand)]
    pub command: Option<LoadCommand>,
}

#[derive(Debug, clap::Subcommand)]
pub enum LoadCommand {
    /// Wait for work from a distributed run's coordinator (`trafik load … --etcd URL --agents
    /// N`): register in etcd, send each share it is given, report what it measured.
    Agent(AgentArgs),
}

#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// etcd's client URL (http://HOST:PORT).
    #[arg(long, value_name = "URL")]
    pub etcd: String,
    /// The prefix of a distributed run's keys: `agents/NAME`, `jobs/NAME`, `results/RUN/NAME`.
    #[arg(long, value_name = "PREFIX", default_value = "/trafik-load/")]
    pub etcd_prefix: String,
    /// The agent's name in etcd (default: host name and process id).
    #[arg(long)]
    pub name: Option<String>,
}

/// The URL's help. Clap turns `{n}` anywhere in help text into a line break and has no escape
/// for it, so the placeholder's `n` is styled (bold, as clap styles literals): the style codes
/// between the braces keep it whole, and clap strips them when the help goes to a pipe.
fn url_help() -> clap::builder::StyledStr {
    let literal = clap::builder::styling::Style::new().bold();
    let n = format!("{{{literal}n{literal:#}}}");
    format!("The URL; `{n}` is replaced by the request number (http://127.0.0.1:8080/takip/TR-{n})")
        .into()
}

/// The course's tests; their values are `trafik_load::Profile::course`.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Profile {
    Load,
    Soak,
    Spike,
}

impl From<Profile> for trafik_load::ProfileKind {
    fn from(profile: Profile) -> Self {
        match profile {
            Profile::Load => trafik_load::ProfileKind::Load,
            Profile::Soak => trafik_load::ProfileKind::Soak,
            Profile::Spike => trafik_load::ProfileKind::Spike,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every option and argument of every command, nested ones included, says what it is for
    /// in `--help`: a new flag without a doc comment fails here.
    #[test]
    fn every_option_has_a_description() {
        fn undescribed(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", command.get_name());
            for arg in command.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && !arg.is_hide_set() && arg.get_help().is_none() {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                undescribed(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        undescribed(&Cli::command(), "", &mut missing);
        assert!(
            missing.is_empty(),
            "options without a description:\n{}",
            missing.join("\n")
        );
    }
}
