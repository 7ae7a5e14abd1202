//! `trafik plan OLD NEW --replay ACCESS_LOG`: the requests of an access log played through two
//! configurations by the code that serves them — each listener's route table
//! ([`RouteTable::find`](crate::http::route::RouteTable::find), one [`route::test`] per route),
//! each step's [`Filter::replay`] (the rate limiter counting on the log's own clock), the
//! edge cache's key ([`trafik_cache::key::primary`]), cookie stickiness
//! ([`Selection::of`]) and the pool's pick ([`Pool::pick`]) on the state a fresh start builds —
//! and what differs between the two, per route and pool. No I/O: it takes the log's lines and
//! two snapshots.
//!
//! [`route::test`]: crate::http::route::test
//! [`Filter::replay`]: crate::http::filter::Filter::replay
//! [`Pool::pick`]: crate::pool::Pool::pick

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http::{HeaderValue, Method, Uri, header};
use serde_json::{Value, json};

use crate::explain::{
    ListenerAddress, Question, build_request, choose_listener, describe_route, pool_of,
};
use crate::http::filter::{Exchange, Replayed};
use crate::http::service::ClientConnection;
use crate::http::target::Target;
use crate::plan::HashKey;
use crate::pool::Pool;
use crate::snapshot::Snapshot;
use crate::sticky::Rebinding;
use crate::view::Selection;

/// One request of the access log, as `trafik serve --access-log --log-format json` writes it.
#[derive(Clone, Debug)]
pub struct Record {
    pub client: SocketAddr,
    pub method: Method,
    /// The `Host` it named, port included.
    pub host: Option<String>,
    /// The request target as it came (origin form).
    pub uri: String,
    /// The rule's 64-bit hash key, when its pool read one.
    pub key: Option<u64>,
    /// The backend its sticky cookie bound it to.
    pub sticky: Option<SocketAddr>,
    /// The backend that answered.
    pub backend: Option<SocketAddr>,
    /// When it arrived, in microseconds since the Unix epoch.
    pub started_micros: u64,
}

/// The access log's requests, in the order they arrived, and how many of its lines were
/// access lines that could not be read (other lines — trafik's own logs — are passed over).
pub fn read_log(text: &str) -> (Vec<Record>, usize) {
    let mut records = Vec::new();
    let mut unreadable = 0;
    for line in text.lines() {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if value["target"] != "trafik::access" {
            continue;
        }
        match record(&value["fields"]) {
            Some(record) => records.push(record),
            None => unreadable += 1,
        }
    }
    // Lines are written when an answer ends: arrival order is the order to count limits in.
    records.sort_by_key(|r| r.started_micros);
    (records, unreadable)
}

fn record(fields: &Value) -> Option<Record> {
    let text = |name: &str| fields[name].as_str().filter(|t| !t.is_empty());
    Some(Record {
        client: text("client")?.parse().ok()?,
        method: Method::from_bytes(text("method")?.as_bytes()).ok()?,
        host: text("host").map(str::to_owned),
        uri: text("uri")?.to_owned(),
        key: match text("key") {
            Some(hex) => Some(u64::from_str_radix(hex.trim_start_matches("0x"), 16).ok()?),
            None => None,
        },
        sticky: text("sticky").and_then(|a| a.parse().ok()),
        backend: text("backend").and_then(|a| a.parse().ok()),
        started_micros: fields["started_unix_micros"].as_u64()?,
    })
}

/// One configuration to play the log through: its snapshot as a fresh start builds it, and its
/// listeners.
pub struct Side<'s> {
    pub snapshot: &'s Snapshot,
    pub listeners: &'s [ListenerAddress],
}

/// What one configuration did with one request.
#[derive(Default)]
struct Outcome {
    /// `listener: route → target`, or why nothing took it.
    route: String,
    /// The route, for the rate-limit table.
    route_only: Option<String>,
    refused: bool,
    unknowable: Option<&'static str>,
    pool: Option<usize>,
    backend: Option<(SocketAddr, String)>,
    /// The key was the pool's and the log lacked it.
    key_unknown: bool,
    /// The request was bound to a backend: by its cookie, or by a key its pool places by.
    bound: bool,
    /// The cache's name, its key, and its freshness for answers that state none.
    cache: Option<(String, String, Duration)>,
}

/// The replay of `records` through `old` and `new`, as JSON (the text form is [`render`]).
pub fn replay(old: &Side<'_>, new: &Side<'_>, records: &[Record]) -> Value {
    let mut tally = Tally::default();
    for record in records {
        let before = play(
            old,
            record,
            &|pool| sticky_cookie(pool, record.sticky),
            None,
        );
        // The cookie a bound client holds is the one the old configuration signed.
        let cookie = before
            .pool
            .and_then(|index| sticky_cookie(&old.snapshot.pools[index], record.sticky));
        let logged_key = before
            .pool
            .and_then(|index| old.snapshot.pools[index].plan.hash_key.clone());
        let after = play(new, record, &|_| cookie.clone(), logged_key.as_ref());
        tally.count(old, new, record, &before, &after);
    }
    tally.into_json(records.len())
}

/// The cookie that binds a client to `backend` in `pool`, as the pool signs it.
fn sticky_cookie(pool: &Pool, backend: Option<SocketAddr>) -> Option<HeaderValue> {
    let sticky = pool.sticky.as_ref().filter(|s| s.uses_cookie())?;
    let set_cookie = sticky.bind_cookie(pool.index_of(backend?)?, Rebinding::New)?;
    let pair = set_cookie.to_str().ok()?.split(';').next()?.to_owned();
    HeaderValue::from_str(&pair).ok()
}

/// One request through one configuration; `cookie` gives the sticky cookie the client holds
/// for the pool it reaches. `logged_key` is the hash key the log's value was
/// computed by (the old pool's), `None` when playing the old configuration itself.
fn play(
    side: &Side<'_>,
    record: &Record,
    cookie: &dyn Fn(&Pool) -> Option<HeaderValue>,
    logged_key: Option<&HashKey>,
) -> Outcome {
    let mut outcome = Outcome::default();
    let authority = record.host.as_deref().unwrap_or("localhost");
    let Ok(uri) = format!("http://{authority}{}", record.uri).parse::<Uri>() else {
        outcome.route = "unreadable request target".into();
        return outcome;
    };
    let Some(listener) = choose_listener(side.snapshot, side.listeners, &uri) else {
        outcome.route = "no HTTP listener takes its port".into();
        return outcome;
    };
    let question = Question {
        method: record.method.clone(),
        uri,
        headers: Default::default(),
        client: record.client.ip(),
    };
    let Ok(mut request) = build_request(&question) else {
        outcome.route = format!("{}: refused (ambiguous path)", listener.name);
        return outcome;
    };
    let found = side
        .snapshot
        .http_routes(listener.id)
        .and_then(|routes| routes.find(&request, record.client.ip()));
    let Some((route, captures)) = found else {
        outcome.route = format!("{}: 404", listener.name);
        return outcome;
    };
    let described = describe_route(side.snapshot, route);
    outcome.route = format!("{}: {described}", listener.name);
    outcome.route_only = Some(described);

    let connection = ClientConnection::new(listener.id, record.client, "http", None);
    let exchange = Exchange {
        connection: &connection,
        snapshot: side.snapshot,
        worker: 0,
        notes: RefCell::default(),
    };
    let now = record.started_micros.saturating_mul(1_000);
    for filter in &route.filters {
        match filter.replay(&request, &exchange, now) {
            Some(Replayed::Refused) => {
                outcome.refused = true;
                return outcome;
            }
            Some(Replayed::Unknowable(why)) => outcome.unknowable = Some(why),
            Some(Replayed::Passed) | None => {}
        }
    }
    if let Target::Cached(cached) = &route.target
        && matches!(record.method, Method::GET | Method::HEAD)
    {
        let path_and_query = request.uri().path_and_query().map_or("/", |p| p.as_str());
        outcome.cache = Some((
            cached.cache.plan.name.clone(),
            trafik_cache::key::primary(&cached.host, path_and_query),
            cached.cache.plan.default_ttl,
        ));
    }
    let Some(index) = pool_of(&route.target, captures.as_ref()) else {
        return outcome;
    };
    let pool = &side.snapshot.pools[index];
    outcome.pool = Some(index);
    if let Some(cookie) = cookie(pool) {
        request.headers_mut().insert(header::COOKIE, cookie);
    }
    let mut selection = Selection::of(pool, &request, record.client);
    if pool.needs_key()
        && let Some(key) = &pool.plan.hash_key
    {
        match (logged_key, key) {
            // The old configuration, or a new pool keyed as the old one: the logged key.
            (None, _) => selection.context.key = record.key,
            (Some(logged), key) if logged == key => selection.context.key = record.key,
            // Computed again from what the log keeps.
            (_, HashKey::ClientIp | HashKey::Path | HashKey::Query(_)) => {}
            (_, HashKey::Header(_) | HashKey::Cookie(_)) => outcome.key_unknown = true,
        }
    }
    outcome.bound =
        selection.bound.is_some() || (pool.needs_key() && selection.context.key.is_some());
    outcome.backend = pool
        .pick(selection.bound, &selection.context)
        .map(|picked| (pool.address(picked), pool.display_name(picked)));
    outcome
}

/// Whether a request for a key last fetched at `last` misses at `now` (microseconds), its
/// copy fresh for `ttl`; a miss fetches it again.
fn fetch(last: &mut Option<u64>, now: u64, ttl: Duration) -> bool {
    let fresh = last.is_some_and(|at| now.saturating_sub(at) < ttl.as_micros() as u64);
    if !fresh {
        *last = Some(now);
    }
    !fresh
}

/// A count and what it is a share of.
#[derive(Default, Clone, Copy)]
struct Figure {
    count: u64,
    of: u64,
}

impl Figure {
    fn add(&mut self, hit: bool) {
        self.of += 1;
        self.count += u64::from(hit);
    }

    fn json(self) -> Value {
        let share = match self.of {
            0 => 0.0,
            of => self.count as f64 * 100.0 / of as f64,
        };
        json!({ "count": self.count, "of": self.of, "percent": (share * 1000.0).round() / 1000.0 })
    }
}

#[derive(Default)]
struct PoolTally {
    binds: bool,
    requests: u64,
    moved: Figure,
    key_unknown: u64,
    keys: HashMap<u64, bool>,
    sessions: HashMap<(IpAddr, SocketAddr), bool>,
    moves: BTreeMap<(String, String), u64>,
    before: BTreeMap<String, u64>,
    after: BTreeMap<String, u64>,
}

#[derive(Default)]
struct LimitTally {
    refused_before: u64,
    refused_after: u64,
    newly_refused: BTreeMap<IpAddr, u64>,
    unknowable: Option<&'static str>,
}

#[derive(Default)]
struct CacheTally {
    ttl_before: Duration,
    ttl_after: Option<Duration>,
    /// Per old key: whether the new configuration files its requests elsewhere.
    rekeyed: HashMap<String, bool>,
    /// Per old key: when it was last fetched from the origin, under each freshness.
    fetched: HashMap<String, (Option<u64>, Option<u64>)>,
    misses_before: u64,
    misses_after: u64,
}

#[derive(Default)]
struct Tally {
    agrees_with_log: Figure,
    route_changes: BTreeMap<(String, String), u64>,
    route_changed: Figure,
    pools: BTreeMap<String, PoolTally>,
    limits: BTreeMap<String, LimitTally>,
    refused: Figure,
    newly_refused: Figure,
    caches: BTreeMap<String, CacheTally>,
    last_micros: u64,
}

impl Tally {
    fn count(
        &mut self,
        old: &Side<'_>,
        new: &Side<'_>,
        record: &Record,
        before: &Outcome,
        after: &Outcome,
    ) {
        self.last_micros = self.last_micros.max(record.started_micros);
        if let (Some(logged), Some((replayed, _))) = (record.backend, &before.backend) {
            self.agrees_with_log.add(logged == *replayed);
        }
        let target = |side: &Side<'_>, outcome: &Outcome| match outcome.pool {
            Some(index) => format!("pool {}", side.snapshot.pools[index].plan.name),
            None => outcome.route.clone(),
        };
        let changed = before.route != after.route
            || target(old, before) != target(new, after)
            || before.refused != after.refused;
        self.route_changed.add(changed);
        if before.route != after.route || target(old, before) != target(new, after) {
            *self
                .route_changes
                .entry((before.route.clone(), after.route.clone()))
                .or_default() += 1;
        }
        self.count_limits(record, before, after);
        self.count_cache(record, before, after);
        let Some(old_index) = before.pool else {
            return;
        };
        let old_pool = &old.snapshot.pools[old_index];
        let tally = self.pools.entry(old_pool.plan.name.clone()).or_default();
        tally.binds = old_pool.needs_key() || old_pool.sticky.is_some();
        tally.requests += 1;
        if let Some((_, name)) = &before.backend {
            *tally.before.entry(name.clone()).or_default() += 1;
        }
        let same_pool = after
            .pool
            .is_some_and(|i| new.snapshot.pools[i].plan.name == old_pool.plan.name);
        if let (Some((_, name)), true) = (&after.backend, same_pool) {
            *tally.after.entry(name.clone()).or_default() += 1;
        }
        if after.key_unknown {
            tally.key_unknown += 1;
            return;
        }
        // Only a request bound to its backend can move: one the rule spreads has no place.
        let (Some((from, from_name)), Some((to, to_name)), true, true) =
            (&before.backend, &after.backend, same_pool, before.bound)
        else {
            return;
        };
        let moved = from != to;
        tally.moved.add(moved);
        if moved {
            *tally
                .moves
                .entry((from_name.clone(), to_name.clone()))
                .or_default() += 1;
        }
        if let Some(key) = record.key {
            *tally.keys.entry(key).or_default() |= moved;
        }
        if let Some(sticky) = record.sticky {
            *tally
                .sessions
                .entry((record.client.ip(), sticky))
                .or_default() |= moved;
        }
    }

    fn count_limits(&mut self, record: &Record, before: &Outcome, after: &Outcome) {
        self.refused.add(after.refused);
        self.newly_refused.add(after.refused && !before.refused);
        let route = after.route_only.as_ref().or(before.route_only.as_ref());
        let Some(route) = route else {
            return;
        };
        if !(before.refused || after.refused || after.unknowable.is_some()) {
            return;
        }
        let tally = self.limits.entry(route.clone()).or_default();
        tally.refused_before += u64::from(before.refused);
        tally.refused_after += u64::from(after.refused);
        tally.unknowable = tally.unknowable.or(after.unknowable);
        if after.refused && !before.refused {
            *tally.newly_refused.entry(record.client.ip()).or_default() += 1;
        }
    }

    /// Freshness on the log's clock: a request finds its key fresh when the key was fetched
    /// within the cache's freshness before it, else it is a miss that fetches it again.
    fn count_cache(&mut self, record: &Record, before: &Outcome, after: &Outcome) {
        let Some((name, key, ttl)) = &before.cache else {
            return;
        };
        let tally = self.caches.entry(name.clone()).or_default();
        tally.ttl_before = *ttl;
        let rekeyed = match &after.cache {
            Some((new_name, new_key, new_ttl)) => {
                tally.ttl_after = Some(*new_ttl);
                new_name != name || new_key != key
            }
            None => true,
        };
        *tally.rekeyed.entry(key.clone()).or_default() |= rekeyed;
        let now = record.started_micros;
        let (before_fetch, after_fetch) = tally.fetched.entry(key.clone()).or_default();
        tally.misses_before += u64::from(fetch(before_fetch, now, *ttl));
        if let Some((_, _, new_ttl)) = &after.cache
            && !rekeyed
        {
            tally.misses_after += u64::from(fetch(after_fetch, now, *new_ttl));
        }
    }

    fn into_json(self, requests: usize) -> Value {
        let mut moved = Figure::default();
        let mut keys_moved = Figure::default();
        let mut sessions_moved = Figure::default();
        let pools: Vec<Value> = self
            .pools
            .into_iter()
            .map(|(name, pool)| {
                let keys = Figure {
                    count: pool.keys.values().filter(|&&m| m).count() as u64,
                    of: pool.keys.len() as u64,
                };
                let sessions = Figure {
                    count: pool.sessions.values().filter(|&&m| m).count() as u64,
                    of: pool.sessions.len() as u64,
                };
                if pool.binds {
                    for (total, part) in [
                        (&mut moved, pool.moved),
                        (&mut keys_moved, keys),
                        (&mut sessions_moved, sessions),
                    ] {
                        total.count += part.count;
                        total.of += part.of;
                    }
                }
                json!({
                    "pool": name,
                    "binds": pool.binds,
                    "requests": pool.requests,
                    "moved": pool.binds.then(|| pool.moved.json()),
                    "keys_moved": (pool.binds && keys.of > 0).then(|| keys.json()),
                    "sticky_sessions_moved": (sessions.of > 0).then(|| sessions.json()),
                    "key_unknown": pool.key_unknown,
                    "moves": pool.moves.iter().map(|((from, to), n)| json!({"from": from, "to": to, "requests": n})).collect::<Vec<_>>(),
                    "requests_before": pool.before,
                    "requests_after": pool.after,
                })
            })
            .collect();
        let mut cache_invalidated = Figure::default();
        let caches: Vec<Value> = self
            .caches
            .into_iter()
            .map(|(name, cache)| {
                let last = self.last_micros;
                let ttl_after = cache.ttl_after.unwrap_or_default();
                // Fresh at the log's end under the old freshness, stale under the new one.
                let expired = cache
                    .fetched
                    .iter()
                    .filter(|(key, (fetched, _))| {
                        let age = Duration::from_micros(last - fetched.unwrap_or(last));
                        !cache.rekeyed[*key] && age < cache.ttl_before && age >= ttl_after
                    })
                    .count() as u64;
                let rekeyed = cache.rekeyed.values().filter(|&&r| r).count() as u64;
                let entries = cache.rekeyed.len() as u64;
                cache_invalidated.count += rekeyed + expired;
                cache_invalidated.of += entries;
                json!({
                    "cache": name,
                    "entries": entries,
                    "rekeyed": rekeyed,
                    "expired_by_ttl": expired,
                    "ttl_before": cache.ttl_before.as_secs_f64(),
                    "ttl_after": cache.ttl_after.map(|t| t.as_secs_f64()),
                    "origin_fetches_before": cache.misses_before,
                    "origin_fetches_after": cache.misses_after,
                })
            })
            .collect();
        let limits: Vec<Value> = self
            .limits
            .into_iter()
            .map(|(route, limit)| {
                let mut clients: Vec<(IpAddr, u64)> = limit.newly_refused.into_iter().collect();
                clients.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                json!({
                    "route": route,
                    "refused_before": limit.refused_before,
                    "refused_after": limit.refused_after,
                    "newly_refused_by_client": clients.iter().map(|(ip, n)| json!({"client": ip.to_string(), "requests": n})).collect::<Vec<_>>(),
                    "not_replayed": limit.unknowable,
                })
            })
            .collect();
        json!({
            "requests": requests,
            "old_agrees_with_log": self.agrees_with_log.json(),
            "metrics": {
                "route_changed": self.route_changed.json(),
                "moved": moved.json(),
                "keys_moved": keys_moved.json(),
                "sticky_moved": sessions_moved.json(),
                "refused": self.refused.json(),
                "newly_refused": self.newly_refused.json(),
                "cache_invalidated": cache_invalidated.json(),
            },
            "route_changes": self.route_changes.iter().map(|((before, after), n)| json!({"before": before, "after": after, "requests": n})).collect::<Vec<_>>(),
            "pools": pools,
            "rate_limits": limits,
            "caches": caches,
        })
    }
}

/// The metrics `--fail-if` may name, as the JSON's `metrics` holds them.
pub const METRICS: [&str; 7] = [
    "route_changed",
    "moved",
    "keys_moved",
    "sticky_moved",
    "refused",
    "newly_refused",
    "cache_invalidated",
];

/// One condition of `--fail-if`: `metric op number`, the number a share when it ends in `%`.
#[derive(Debug, PartialEq)]
pub struct Threshold {
    pub metric: String,
    pub op: &'static str,
    pub value: f64,
    pub percent: bool,
}

/// Reads `moved>5%,refused>0`: comma-separated `metric op number[%]`, `op` one of `>`, `>=`,
/// `<`, `<=`, `=`.
pub fn parse_thresholds(text: &str) -> Result<Vec<Threshold>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            let at = part.find(['>', '<', '=']).ok_or_else(|| {
                format!("{part:?}: write a condition as metric>number or metric>number%")
            })?;
            let metric = part[..at].trim();
            if !METRICS.contains(&metric) {
                return Err(format!(
                    "{part:?}: unknown metric {metric:?}; known: {}",
                    METRICS.join(", ")
                ));
            }
            let rest = &part[at..];
            let op = [">=", "<=", ">", "<", "="]
                .into_iter()
                .find(|op| rest.starts_with(op))
                .unwrap_or("=");
            let number = rest[op.len()..].trim();
            let (number, percent) = match number.strip_suffix('%') {
                Some(n) => (n.trim(), true),
                None => (number, false),
            };
            let value: f64 = number
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite())
                .ok_or_else(|| format!("{part:?}: {number:?} is not a number"))?;
            Ok(Threshold {
                metric: metric.to_owned(),
                op,
                value,
                percent,
            })
        })
        .collect()
}

/// The conditions the report meets, each told with its figure: `moved 26.4 % > 5 %`.
pub fn failing(report: &Value, thresholds: &[Threshold]) -> Vec<String> {
    thresholds
        .iter()
        .filter_map(|t| {
            let figure = &report["metrics"][&t.metric];
            let (actual, unit) = match t.percent {
                true => (figure["percent"].as_f64()?, " %"),
                false => (figure["count"].as_f64()?, ""),
            };
            let met = match t.op {
                ">" => actual > t.value,
                ">=" => actual >= t.value,
                "<" => actual < t.value,
                "<=" => actual <= t.value,
                _ => actual == t.value,
            };
            met.then(|| {
                format!(
                    "{} {actual}{unit} {} {}{unit} ({} of {})",
                    t.metric, t.op, t.value, figure["count"], figure["of"]
                )
            })
        })
        .collect()
}

/// The replay for people, from its JSON.
pub fn render(report: &Value) -> String {
    let mut out = format!("replayed {} logged requests\n", report["requests"]);
    let share = |figure: &Value| {
        format!(
            "{} of {} ({:.2} %)",
            figure["count"],
            figure["of"],
            figure["percent"].as_f64().unwrap_or(0.0)
        )
    };
    out.push_str(&format!(
        "the old configuration sends {} to the backend the log names\n",
        share(&report["old_agrees_with_log"])
    ));
    out.push_str("\nmetrics (for --fail-if):\n");
    for name in METRICS {
        out.push_str(&format!(
            "  {name:<18} {}\n",
            share(&report["metrics"][name])
        ));
    }
    let changes = report["route_changes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !changes.is_empty() {
        out.push_str("\nrequests whose route or target changes:\n");
        for change in &changes {
            out.push_str(&format!(
                "  {} × {}\n      → {}\n",
                change["requests"],
                change["before"].as_str().unwrap_or_default(),
                change["after"].as_str().unwrap_or_default()
            ));
        }
    }
    for pool in report["pools"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\npool {} ({} requests)\n",
            pool["pool"].as_str().unwrap_or_default(),
            pool["requests"]
        ));
        if pool["binds"] == true {
            out.push_str(&format!("  moved: {}\n", share(&pool["moved"])));
        } else {
            out.push_str("  its rule binds no request to a backend: nothing can move\n");
        }
        if pool["keys_moved"].is_object() {
            out.push_str(&format!("  keys moved: {}\n", share(&pool["keys_moved"])));
        }
        if pool["sticky_sessions_moved"].is_object() {
            out.push_str(&format!(
                "  sticky sessions moved: {}\n",
                share(&pool["sticky_sessions_moved"])
            ));
        }
        if pool["key_unknown"].as_u64().unwrap_or(0) > 0 {
            out.push_str(&format!(
                "  {} requests keyed by a header or cookie the log does not keep: not placed\n",
                pool["key_unknown"]
            ));
        }
        if pool["binds"] == true {
            for m in pool["moves"].as_array().into_iter().flatten() {
                out.push_str(&format!(
                    "  {} → {}: {} requests\n",
                    m["from"].as_str().unwrap_or_default(),
                    m["to"].as_str().unwrap_or_default(),
                    m["requests"]
                ));
            }
        }
        let (before, after) = (&pool["requests_before"], &pool["requests_after"]);
        let mut names: Vec<&String> = before
            .as_object()
            .into_iter()
            .flat_map(|o| o.keys())
            .collect();
        names.extend(after.as_object().into_iter().flat_map(|o| o.keys()));
        names.sort();
        names.dedup();
        let width = names.iter().map(|n| n.len()).max().unwrap_or(0).max(7);
        out.push_str(&format!(
            "  {:<width$}  requests before  after\n",
            "backend"
        ));
        for name in names {
            let count = |side: &Value| side.get(name.as_str()).and_then(Value::as_u64).unwrap_or(0);
            out.push_str(&format!(
                "  {name:<width$}  {:>15}  {:>5}\n",
                count(before),
                count(after)
            ));
        }
    }
    for limit in report["rate_limits"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\nrate limit on {}: refused {} → {}\n",
            limit["route"].as_str().unwrap_or_default(),
            limit["refused_before"],
            limit["refused_after"]
        ));
        if let Some(why) = limit["not_replayed"].as_str() {
            out.push_str(&format!("  not replayed: {why}\n"));
        }
        for client in limit["newly_refused_by_client"]
            .as_array()
            .into_iter()
            .flatten()
            .take(20)
        {
            out.push_str(&format!(
                "  {}: {} more refused\n",
                client["client"].as_str().unwrap_or_default(),
                client["requests"]
            ));
        }
    }
    for cache in report["caches"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "\ncache {}: {} entries, {} filed under another key, {} expired by the new freshness ({} s → {} s); origin fetches {} → {}\n",
            cache["cache"].as_str().unwrap_or_default(),
            cache["entries"],
            cache["rekeyed"],
            cache["expired_by_ttl"],
            cache["ttl_before"],
            cache["ttl_after"],
            cache["origin_fetches_before"],
            cache["origin_fetches_after"]
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_read_their_grammar_and_refuse_unknown_metrics() {
        let read = parse_thresholds("moved>5%, refused>0,keys_moved<=1.5%").unwrap();
        assert_eq!(read.len(), 3);
        assert_eq!(
            read[0],
            Threshold {
                metric: "moved".into(),
                op: ">",
                value: 5.0,
                percent: true
            }
        );
        assert_eq!(read[2].op, "<=");
        let error = parse_thresholds("moves>5%").unwrap_err();
        assert!(error.contains("unknown metric \"moves\""), "{error}");
        assert!(parse_thresholds("moved>x").is_err());
        assert!(parse_thresholds("moved").is_err());
    }

    #[test]
    fn a_failing_threshold_names_its_figure() {
        let report = json!({"metrics": {
            "moved": {"count": 25, "of": 100, "percent": 25.0},
            "refused": {"count": 0, "of": 100, "percent": 0.0},
        }});
        let failed = failing(&report, &parse_thresholds("moved>5%,refused>0").unwrap());
        assert_eq!(failed, vec!["moved 25 % > 5 % (25 of 100)".to_owned()]);
    }

    #[test]
    fn access_lines_are_read_in_arrival_order_and_other_lines_passed_over() {
        let log = concat!(
            "{\"target\":\"trafik::access\",\"fields\":{\"client\":\"10.0.0.2:5\",\"method\":\"GET\",\"host\":\"a:80\",\"uri\":\"/b\",\"key\":\"0x00000000000000ff\",\"sticky\":\"\",\"backend\":\"127.0.0.1:1\",\"started_unix_micros\":20}}\n",
            "not json\n",
            "{\"target\":\"trafik::proxy\",\"fields\":{}}\n",
            "{\"target\":\"trafik::access\",\"fields\":{\"client\":\"10.0.0.1:5\",\"method\":\"GET\",\"host\":\"\",\"uri\":\"/a\",\"key\":\"\",\"sticky\":\"127.0.0.1:2\",\"backend\":\"\",\"started_unix_micros\":10}}\n",
            "{\"target\":\"trafik::access\",\"fields\":{\"client\":\"nobody\"}}\n",
        );
        let (records, unreadable) = read_log(log);
        assert_eq!(unreadable, 1);
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].uri, "/a");
        assert_eq!(records[0].host, None);
        assert_eq!(records[0].sticky, Some("127.0.0.1:2".parse().unwrap()));
        assert_eq!(records[1].key, Some(0xff));
        assert_eq!(records[1].backend, Some("127.0.0.1:1".parse().unwrap()));
    }
}
