//! Backends by name: every pool's `HOST:PORT` backends and `srv:NAME` discovery, asked of DNS
//! (hickory-resolver) and asked again when the answer's TTL runs out, bounded by the plan's
//! `resolve_min` and `resolve_max`. A changed set of addresses becomes a new snapshot built the
//! way a reload builds it ([`crate::Instance::follow_names`]): the pool of the same name hands
//! counters, health and sessions of the addresses it keeps to the new one, and requests on
//! removed addresses finish on the snapshot they started with. A failed lookup keeps the last
//! good set, is counted, and is tried again after `resolve_min`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolverConfig,
};
use hickory_resolver::net::NetError;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use tokio::sync::watch;

use crate::Instance;
use crate::plan::{BackendPlan, Discover, Plan, ResolverPlan};

/// What each name resolved to, shared by the resolving task, reloads and the admin API. Names
/// are known by what is asked (`HOST:PORT`, `srv:NAME`), so a reload that changes only a
/// name's weight keeps its addresses.
pub struct Names {
    plan: ResolverPlan,
    known: Mutex<BTreeMap<String, Found>>,
}

/// One name's last good answer and how asking for it went.
#[derive(Clone, Debug, Default)]
pub struct Found {
    /// Backend addresses and weights, sorted, without repeats.
    pub addresses: Vec<(SocketAddr, u32)>,
    /// When `addresses` was last answered.
    pub resolved_at: Option<SystemTime>,
    /// The answer's TTL, before bounding.
    pub ttl: Option<Duration>,
    /// Lookups that failed (the set was kept), since the name was first asked.
    pub failures: u64,
    pub last_error: Option<String>,
    /// When to ask again.
    next: Option<Instant>,
}

impl Names {
    pub fn new(plan: ResolverPlan) -> Self {
        Names {
            plan,
            known: Mutex::default(),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Found>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `plan` with every pool's names added as backends, at the addresses known as of now (none
    /// for a name not answered yet). Addresses the pool already has are not added twice.
    pub fn expand(&self, plan: &Plan) -> Plan {
        let known = self.known();
        let mut expanded = plan.clone();
        for pool in &mut expanded.pools {
            for discover in &pool.discover {
                let Some(found) = known.get(&discover.to_string()) else {
                    continue;
                };
                for &(address, answered) in &found.addresses {
                    let weight = match discover {
                        Discover::Name { weight, .. } => *weight,
                        Discover::Srv { .. } => answered,
                    };
                    if pool.backends.iter().all(|b| b.address != address) {
                        pool.backends.push(BackendPlan {
                            address,
                            name: None,
                            weight,
                        });
                    }
                }
            }
        }
        expanded
    }

    /// Every name with its state, for `/status`.
    pub fn snapshot(&self) -> Vec<(String, Found)> {
        self.known()
            .iter()
            .map(|(name, found)| (name.clone(), found.clone()))
            .collect()
    }

    /// Drops the names `plan` no longer has, adds its new ones (due at once) and returns the
    /// names due by `now`.
    fn due(&self, plan: &Plan, now: Instant) -> Vec<Discover> {
        let mut wanted: BTreeMap<String, &Discover> = BTreeMap::new();
        for discover in plan.pools.iter().flat_map(|p| &p.discover) {
            wanted.insert(discover.to_string(), discover);
        }
        let mut known = self.known();
        known.retain(|name, _| wanted.contains_key(name));
        wanted
            .into_iter()
            .filter(|(name, _)| {
                let found = known.entry(name.clone()).or_default();
                found.next.is_none_or(|next| next <= now)
            })
            .map(|(_, discover)| discover.clone())
            .collect()
    }

    /// The earliest time a name is due.
    fn next_due(&self) -> Option<Instant> {
        self.known().values().filter_map(|found| found.next).min()
    }

    /// Records an answer (or a failure); true when the set of addresses changed.
    fn record(&self, name: &Discover, answer: Result<Answer, String>, now: Instant) -> bool {
        let mut known = self.known();
        let Some(found) = known.get_mut(&name.to_string()) else {
            return false;
        };
        match answer {
            Ok(answer) => {
                found.next = Some(now + answer.ttl.clamp(self.plan.min, self.plan.max));
                found.ttl = Some(answer.ttl);
                found.resolved_at = Some(SystemTime::now());
                let changed = found.addresses != answer.addresses;
                if changed {
                    tracing::info!(%name, addresses = ?answer.addresses, "a backend name's addresses changed");
                }
                found.addresses = answer.addresses;
                changed
            }
            Err(error) => {
                tracing::warn!(%name, %error, "a backend name did not resolve; its last addresses stay");
                found.next = Some(now + self.plan.min);
                found.failures += 1;
                found.last_error = Some(error);
                false
            }
        }
    }
}

/// What one lookup found.
struct Answer {
    addresses: Vec<(SocketAddr, u32)>,
    /// The shortest TTL among the records it took.
    ttl: Duration,
}

/// Asks for every name when it is due, for the life of the instance; each change of addresses
/// rebuilds the snapshot.
pub async fn follow(instance: Arc<Instance>, mut shutdown: watch::Receiver<bool>) {
    let names = instance.names.clone();
    // Built when a name first needs it: without names, /etc/resolv.conf is never read.
    let mut built: Option<Result<TokioResolver, String>> = None;
    let mut snapshots = instance.watch();
    loop {
        let now = Instant::now();
        let plan = instance.configured();
        let mut changed = false;
        for name in names.due(&plan, now) {
            let answer = match built.get_or_insert_with(|| resolver(&names.plan)) {
                Ok(resolver) => lookup(resolver, &name).await,
                Err(error) => Err(format!("no DNS resolver: {error}")),
            };
            changed |= names.record(&name, answer, Instant::now());
        }
        if changed && let Err(errors) = instance.follow_names() {
            tracing::error!(?errors, "the pools could not follow their names");
        }
        // Far enough to mean "until a reload adds a name".
        let next = names
            .next_due()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            () = tokio::time::sleep_until(next.into()) => {}
            // A reload may add names; the snapshot this task publishes itself wakes it too,
            // to find nothing due.
            _ = snapshots.changed() => {}
            _ = shutdown.wait_for(|stopping| *stopping) => return,
        }
    }
}

/// The resolver: the plan's server over UDP then TCP, or the system's configuration. Its own
/// cache is off, so every lookup asks the server (the TTL is kept here).
fn resolver(plan: &ResolverPlan) -> Result<TokioResolver, String> {
    let provider = TokioRuntimeProvider::default();
    let mut builder = match plan.server {
        Some(server) => {
            let connection = |mut connection: ConnectionConfig| {
                connection.port = server.port();
                connection
            };
            let name_server = NameServerConfig::new(
                server.ip(),
                true,
                vec![
                    connection(ConnectionConfig::udp()),
                    connection(ConnectionConfig::tcp()),
                ],
            );
            TokioResolver::builder_with_config(
                ResolverConfig::from_name_servers(vec![name_server]),
                provider,
            )
        }
        None => TokioResolver::builder(provider).map_err(|e| e.to_string())?,
    };
    let options = builder.options_mut();
    options.cache_size = 0;
    options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    options.timeout = Duration::from_secs(2);
    options.attempts = 2;
    builder.build().map_err(|e| e.to_string())
}

/// The most backends one name gives a pool: far more than a pool is made of, and a bound on
/// what a DNS answer (up to 64 KiB over TCP: thousands of records) can make of one.
pub const MOST_ADDRESSES_PER_NAME: usize = 256;

/// The most SRV targets of one answer looked up (each is a lookup of its own: thousands of
/// targets would be as many lookups in flight at every refresh).
pub const MOST_SRV_TARGETS: usize = 32;

async fn lookup(resolver: &TokioResolver, name: &Discover) -> Result<Answer, String> {
    let mut addresses = Vec::new();
    let ttl = match name {
        Discover::Name { host, port, weight } => {
            let (ips, ttl) = addresses_of(resolver, host)
                .await
                .map_err(|e| e.to_string())?;
            addresses.extend(
                ips.into_iter()
                    .map(|ip| (SocketAddr::new(ip, *port), *weight)),
            );
            ttl
        }
        Discover::Srv { name } => {
            let lookup = resolver
                .lookup(name.as_str(), RecordType::SRV)
                .await
                .map_err(|e| e.to_string())?;
            let mut ttl = remaining(lookup.valid_until());
            let records: Vec<_> = lookup
                .answers()
                .iter()
                .filter_map(|record| match &record.data {
                    RData::SRV(srv) if !srv.target.is_root() => Some(srv.clone()),
                    _ => None,
                })
                .collect();
            // The lowest priority only: the others are fallbacks for when it is gone, which
            // its owner says by removing its records. In a stable order, so that the targets
            // kept past the bound are the same at every lookup.
            let lowest = records.iter().map(|srv| srv.priority).min();
            let mut chosen: Vec<_> = records
                .iter()
                .filter(|srv| Some(srv.priority) == lowest)
                .collect();
            chosen.sort_by_key(|srv| (srv.target.to_ascii(), srv.port));
            if chosen.len() > MOST_SRV_TARGETS {
                tracing::warn!(%name, targets = chosen.len(), kept = MOST_SRV_TARGETS, "an SRV answer names more targets than a name may give; the first are kept");
                chosen.truncate(MOST_SRV_TARGETS);
            }
            // The targets at once: a slow one holds up no other. One with no address (its
            // owner removed it) is left out; one that failed otherwise (a timeout, SERVFAIL)
            // fails the lookup, so the last good set stays rather than shrink for a moment.
            let targets = chosen.into_iter().map(|srv| async move {
                (srv, addresses_of(resolver, &srv.target.to_ascii()).await)
            });
            let mut unresolved = None;
            for (srv, resolved) in futures_util::future::join_all(targets).await {
                let (ips, target_ttl) = match resolved {
                    Ok(resolved) => resolved,
                    Err(error) if error.is_no_records_found() => {
                        tracing::debug!(%name, target = %srv.target, %error, "an SRV target has no address");
                        unresolved = Some(error.to_string());
                        continue;
                    }
                    Err(error) => {
                        return Err(format!("SRV target {} of {name}: {error}", srv.target));
                    }
                };
                ttl = ttl.min(target_ttl);
                // Weight 0 is "rarely" in RFC 2782; selection needs at least 1.
                let weight = u32::from(srv.weight.max(1));
                addresses.extend(
                    ips.into_iter()
                        .map(|ip| (SocketAddr::new(ip, srv.port), weight)),
                );
            }
            if addresses.is_empty() {
                return Err(match unresolved {
                    Some(error) => format!("no SRV target of {name} resolved: {error}"),
                    None => format!("no SRV record of {name} has an address"),
                });
            }
            ttl
        }
    };
    addresses.sort_unstable();
    addresses.dedup_by_key(|(address, _)| *address);
    if addresses.len() > MOST_ADDRESSES_PER_NAME {
        tracing::warn!(%name, addresses = addresses.len(), kept = MOST_ADDRESSES_PER_NAME, "a name has more addresses than a pool takes from one; the first are kept");
        addresses.truncate(MOST_ADDRESSES_PER_NAME);
    }
    Ok(Answer { addresses, ttl })
}

async fn addresses_of(
    resolver: &TokioResolver,
    host: &str,
) -> Result<(Vec<IpAddr>, Duration), NetError> {
    let found = resolver.lookup_ip(host).await?;
    let ttl = remaining(found.valid_until());
    Ok((found.into_iter().collect(), ttl))
}

fn remaining(valid_until: Instant) -> Duration {
    valid_until.saturating_duration_since(Instant::now())
}

/// The `names` block of `/status`: per name, the pools that use it, its addresses, when they
/// were answered, the TTL and the failed lookups.
pub fn status(instance: &Instance) -> serde_json::Value {
    let plan = instance.configured();
    let names: Vec<serde_json::Value> = instance
        .names()
        .into_iter()
        .map(|(name, found)| {
            let pools: Vec<&str> = plan
                .pools
                .iter()
                .filter(|pool| pool.discover.iter().any(|d| d.to_string() == name))
                .map(|pool| pool.name.as_str())
                .collect();
            let addresses: Vec<serde_json::Value> = found
                .addresses
                .iter()
                .map(|(address, weight)| serde_json::json!({"address": address.to_string(), "weight": weight}))
                .collect();
            serde_json::json!({
                "name": name,
                "pools": pools,
                "addresses": addresses,
                "resolved_at": found
                    .resolved_at
                    .map(|at| humantime::format_rfc3339_millis(at).to_string()),
                "ttl_seconds": found.ttl.map(|ttl| ttl.as_secs()),
                "failures": found.failures,
                "last_error": found.last_error,
            })
        })
        .collect();
    serde_json::Value::Array(names)
}

/// `trafik_backend_name_addresses` and `trafik_backend_name_failures_total`, by name.
pub fn metrics(instance: &Instance, exposition: &mut trafik_metrics_text::Exposition) {
    use trafik_metrics_text::Kind;
    let names = instance.names();
    if names.is_empty() {
        return;
    }
    let mut family = exposition.family(
        "trafik_backend_name_addresses",
        Kind::Gauge,
        "Addresses the backend name resolved to last.",
    );
    for (name, found) in &names {
        family.sample(&[("name", name)], found.addresses.len());
    }
    let mut family = exposition.family(
        "trafik_backend_name_failures_total",
        Kind::Counter,
        "Lookups of the backend name that failed (its last addresses were kept).",
    );
    for (name, found) in &names {
        family.sample(&[("name", name)], found.failures);
    }
}
