//! The configuration file: read once into typed sections ([`schema`]), checked with every
//! problem reported at its file, line and column with the field's path, then turned into the
//! data plane's [`Plan`].

mod schema;
pub mod values;

use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use trafik_balance::{Algorithm, SelectorOptions};
use trafik_proxy::{
    BackendPlan, ClientPlan, HashKey, HealthCheck, HealthPlan, ListenerKind, ListenerPlan, Plan,
    PoolPlan, RoutePlan, StickyPlan, TargetPlan,
};
use trafik_upstream::ReplicaConfig;

use crate::suggest::did_you_mean;

/// The configuration trafik runs when `serve` is given no file: the course's parcel-tracking
/// topology on loopback.
pub const EMBEDDED_DEFAULT: &str = include_str!("default.toml");

/// What a configuration file asks trafik to run.
#[derive(Debug)]
pub struct Loaded {
    pub plan: Plan,
    /// Built-in replicas to start before the proxy, with their addresses.
    pub upstreams: Vec<(SocketAddr, ReplicaConfig)>,
}

/// One problem in a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    /// The path of the field, such as `pool[0].health.interval`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// Reads, checks and plans a configuration. `file` is the name used in error messages.
pub fn load(file: &str, text: &str) -> Result<Loaded, Vec<ConfigError>> {
    let at = |span: Option<Range<usize>>, field: String, message: String| {
        let (line, column) = line_and_column(text, span.map_or(0, |s| s.start));
        ConfigError {
            file: file.to_owned(),
            line,
            column,
            field,
            message,
        }
    };
    let deserializer = toml::Deserializer::parse(text)
        .map_err(|e| vec![at(e.span(), String::new(), e.message().to_owned())])?;
    let parsed: schema::File = serde_path_to_error::deserialize(deserializer).map_err(|e| {
        // `Spanned` fields add a private segment to the path; the user never wrote it.
        let field = e
            .path()
            .to_string()
            .replace(".$__serde_spanned_private_value", "");
        let span = e.inner().span();
        let mut message = e.inner().message().to_owned();
        if let Some(hint) = unknown_field_hint(&message) {
            message.push_str(&hint);
        }
        let field = if field == "." { String::new() } else { field };
        vec![at(span, field, message)]
    })?;
    let mut checker = Checker {
        errors: Vec::new(),
        at: &at,
    };
    let loaded = checker.plan(parsed);
    if checker.errors.is_empty() {
        Ok(loaded)
    } else {
        Err(checker.errors)
    }
}

/// Turns the file's sections into a plan, collecting every error instead of stopping at the
/// first, so one run of `trafik check` shows them all.
struct Checker<'a, F> {
    errors: Vec<ConfigError>,
    at: &'a F,
}

impl<F: Fn(Option<Range<usize>>, String, String) -> ConfigError> Checker<'_, F> {
    fn error(&mut self, span: Range<usize>, field: impl Into<String>, message: impl Into<String>) {
        let error = (self.at)(Some(span), field.into(), message.into());
        self.errors.push(error);
    }

    fn plan(&mut self, file: schema::File) -> Loaded {
        let pool_names: Vec<String> = file
            .pools
            .iter()
            .map(|p| p.name.get_ref().clone())
            .collect();
        let pools = file
            .pools
            .into_iter()
            .enumerate()
            .map(|(i, pool)| self.pool(i, pool, &pool_names))
            .collect();
        let mut listener_names: Vec<&str> = Vec::new();
        for (i, listener) in file.listeners.iter().enumerate() {
            let name = listener.name.get_ref().as_str();
            if listener_names.contains(&name) {
                self.error(
                    listener.name.span(),
                    format!("listener[{i}].name"),
                    format!("listener {name:?} is defined twice; names must be unique"),
                );
            }
            listener_names.push(name);
        }
        if file.listeners.is_empty() {
            self.error(0..0, "listener", "no listener: add a [[listener]] with a name, a listen address and at least one [[listener.route]]");
        }
        let listeners = file
            .listeners
            .into_iter()
            .enumerate()
            .map(|(i, listener)| self.listener(i, listener, &pool_names))
            .collect();
        let admin = file.admin.map(|admin| {
            let address = admin.listen.get_ref().0;
            if !address.ip().is_loopback() && !admin.allow_remote {
                self.error(admin.listen.span(), "admin.listen", format!("the admin API has no authentication, so {address} (not loopback) needs `allow_remote = true` in [admin]"));
            }
            address
        });
        let workers = match &file.server.workers {
            Some(workers) if *workers.get_ref() == 0 => {
                self.error(
                    workers.span(),
                    "server.workers",
                    "expected at least 1 worker",
                );
                1
            }
            Some(workers) => *workers.get_ref(),
            None => default_workers(),
        };
        let upstreams = file
            .upstreams
            .into_iter()
            .map(|u| {
                (
                    u.listen.0,
                    ReplicaConfig {
                        name: u.name,
                        delay: u.delay.map_or(Duration::ZERO, |d| d.0),
                        ..ReplicaConfig::default()
                    },
                )
            })
            .collect();
        let server = file.server;
        Loaded {
            plan: Plan {
                name: server.name,
                workers,
                listeners,
                pools,
                admin,
                client: ClientPlan {
                    header_read_timeout: server.timeouts.client_header.0,
                    idle_timeout: server.timeouts.idle.0,
                    trust_forwarded: server.trust_forwarded,
                    access_log: server.access_log,
                },
                drain_timeout: server.drain_timeout.0,
            },
            upstreams,
        }
    }

    fn listener(&mut self, i: usize, listener: schema::Listener, pools: &[String]) -> ListenerPlan {
        if *listener.protocol.get_ref() != schema::Protocol::Http {
            self.error(listener.protocol.span(), format!("listener[{i}].protocol"), "only \"http\" listeners are supported in this version (\"https\" and \"tcp\" are planned)");
        }
        if listener.routes.is_empty() {
            self.error(listener.name.span(), format!("listener[{i}].route"), "a listener needs at least one [[listener.route]] saying which pool gets its requests");
        }
        let routes = listener
            .routes
            .into_iter()
            .enumerate()
            .map(|(r, route)| self.route(&format!("listener[{i}].route[{r}]"), route, pools))
            .collect();
        ListenerPlan {
            name: listener.name.into_inner(),
            address: listener.listen.0,
            kind: ListenerKind::Http { routes },
        }
    }

    fn route(&mut self, field: &str, route: schema::Route, pools: &[String]) -> RoutePlan {
        if !pools.contains(route.pool.get_ref()) {
            {
                let wanted = route.pool.get_ref();
                let hint = did_you_mean(wanted, pools.iter().map(String::as_str))
                    .map(|s| format!("; did you mean {s:?}?"))
                    .unwrap_or_default();
                self.error(
                    route.pool.span(),
                    format!("{field}.pool"),
                    format!(
                        "no pool is named {wanted:?}{hint} (defined pools: {})",
                        list(pools)
                    ),
                );
            }
        }
        if !route.path_prefix.get_ref().starts_with('/') {
            self.error(
                route.path_prefix.span(),
                format!("{field}.path_prefix"),
                format!(
                    "expected a path starting with \"/\", found {:?}",
                    route.path_prefix.get_ref()
                ),
            );
        }
        let methods = route
            .methods
            .iter()
            .filter_map(|m| match http::Method::from_bytes(m.get_ref().as_bytes()) {
                Ok(method) if m.get_ref().bytes().all(|b| b.is_ascii_uppercase()) => Some(method),
                _ => {
                    self.error(m.span(), format!("{field}.methods"), format!("expected an HTTP method in capitals such as \"GET\" or \"POST\", found {:?}", m.get_ref()));
                    None
                }
            })
            .collect();
        RoutePlan {
            host: route.host,
            path_prefix: route.path_prefix.into_inner(),
            methods,
            filters: Vec::new(),
            target: TargetPlan::Pool {
                pool: route.pool.into_inner(),
                retry_non_idempotent: route.retry_non_idempotent,
            },
        }
    }

    fn pool(&mut self, i: usize, pool: schema::Pool, names: &[String]) -> PoolPlan {
        let field = format!("pool[{i}]");
        let name = pool.name.get_ref();
        if names.iter().filter(|n| *n == name).count() > 1 {
            self.error(
                pool.name.span(),
                format!("{field}.name"),
                format!("pool {name:?} is defined more than once; names must be unique"),
            );
        }
        let algorithm = pool
            .algorithm
            .get_ref()
            .parse::<Algorithm>()
            .unwrap_or_else(|error| {
                let hint = did_you_mean(&error.0, Algorithm::ALL.iter().map(|a| a.name()))
                    .map(|s| format!(" (did you mean {s:?}?)"))
                    .unwrap_or_default();
                self.error(
                    pool.algorithm.span(),
                    format!("{field}.algorithm"),
                    format!("{error}{hint}"),
                );
                Algorithm::default()
            });
        if pool.backends.get_ref().is_empty() {
            self.error(
                pool.backends.span(),
                format!("{field}.backends"),
                "a pool needs at least one backend, such as { address = \"127.0.0.1:8081\" }",
            );
        }
        let backends_span = pool.backends.span();
        let backends = pool
            .backends
            .into_inner()
            .into_iter()
            .enumerate()
            .map(|(b, backend)| {
                if *backend.weight.get_ref() == 0 {
                    let span = if backend.weight.span().is_empty() {
                        backends_span.clone()
                    } else {
                        backend.weight.span()
                    };
                    self.error(
                        span,
                        format!("{field}.backends[{b}].weight"),
                        "expected a weight of at least 1 (to stop sending to a backend, drain it)",
                    );
                }
                BackendPlan {
                    address: backend.address.0,
                    name: backend.name,
                    weight: (*backend.weight.get_ref()).max(1),
                }
            })
            .collect();
        let health = pool.health.map(|health| {
            if !health.path.starts_with('/') {
                self.error(
                    pool.name.span(),
                    format!("{field}.health.path"),
                    format!(
                        "expected a path starting with \"/\", found {:?}",
                        health.path
                    ),
                );
            }
            if health.interval.0.is_zero() {
                self.error(
                    pool.name.span(),
                    format!("{field}.health.interval"),
                    "expected an interval above zero",
                );
            }
            HealthPlan {
                check: match health.kind {
                    schema::HealthKind::Http => HealthCheck::Http { path: health.path },
                    schema::HealthKind::Tcp => HealthCheck::Tcp,
                },
                interval: health.interval.0,
                timeout: health.timeout.0,
                fall: health.fall.max(1),
                rise: health.rise.max(1),
            }
        });
        let hash_key = pool.hash_key.as_ref().and_then(|key| {
            key.get_ref()
                .parse::<HashKey>()
                .map_err(|e| self.error(key.span(), format!("{field}.hash_key"), e))
                .ok()
        });
        let key_needed = |what: &str| {
            format!(
                "{what} places requests by a key: add hash_key = \"header:x-istemci\" (or cookie:NAME, query:NAME, path, client-ip)"
            )
        };
        if algorithm.uses_key() && pool.hash_key.is_none() {
            self.error(
                pool.algorithm.span(),
                format!("{field}.hash_key"),
                key_needed(&format!("algorithm {algorithm}")),
            );
        }
        let mut options = SelectorOptions::default();
        if let Some(vnodes) = &pool.virtual_nodes {
            if *vnodes.get_ref() == 0 {
                self.error(
                    vnodes.span(),
                    format!("{field}.virtual_nodes"),
                    "expected at least 1 virtual node per backend",
                );
            }
            options.virtual_nodes = (*vnodes.get_ref()).max(1);
        }
        if let Some(factor) = &pool.balance_factor {
            // NaN is refused too.
            if factor
                .get_ref()
                .partial_cmp(&1.0)
                .is_none_or(std::cmp::Ordering::is_lt)
            {
                self.error(
                    factor.span(),
                    format!("{field}.balance_factor"),
                    format!(
                        "expected a factor of at least 1.0 (such as 1.25), found {}",
                        factor.get_ref()
                    ),
                );
            }
            options.balance_factor = factor.get_ref().max(1.0);
        }
        if let Some(size) = &pool.table_size {
            if *size.get_ref() < 3 {
                self.error(
                    size.span(),
                    format!("{field}.table_size"),
                    "expected a prime table size such as 65537",
                );
            }
            options.table_size = *size.get_ref();
        }
        let sticky = pool
            .sticky
            .map(|sticky| match sticky.mode.get_ref().as_str() {
                "cookie" => StickyPlan::Cookie {
                    name: sticky.cookie,
                    secret: sticky.secret.map_or_else(random_secret, String::into_bytes),
                },
                mode @ ("modulo" | "consistent") => {
                    if pool.hash_key.is_none() {
                        self.error(
                            sticky.mode.span(),
                            format!("{field}.hash_key"),
                            key_needed(&format!("sticky mode {mode}")),
                        );
                    }
                    if mode == "modulo" {
                        StickyPlan::Modulo
                    } else {
                        StickyPlan::Consistent {
                            virtual_nodes: sticky
                                .virtual_nodes
                                .unwrap_or(options.virtual_nodes)
                                .max(1),
                        }
                    }
                }
                other => {
                    self.error(
                        sticky.mode.span(),
                        format!("{field}.sticky.mode"),
                        format!(
                            "expected \"cookie\", \"modulo\" or \"consistent\", found {other:?}"
                        ),
                    );
                    StickyPlan::Modulo
                }
            });
        PoolPlan {
            name: pool.name.into_inner(),
            algorithm,
            selector_options: options,
            hash_key,
            sticky,
            backends,
            health,
            connect_timeout: pool.timeouts.connect.0,
            response_timeout: pool.timeouts.response.0,
            retries: pool.retries,
        }
    }
}

/// A cookie-signing secret for one run, from the kernel's random source.
pub fn random_secret() -> Vec<u8> {
    use std::io::Read;
    let mut secret = vec![0u8; 32];
    if let Err(error) =
        std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut secret))
    {
        // Without randomness the cookies are still HMAC-signed, only with a guessable key.
        tracing::warn!(%error, "no /dev/urandom: sticky cookies use a time-based secret");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        secret = now.as_nanos().to_le_bytes().to_vec();
    }
    secret
}

/// The data-plane threads to run when the config does not say: one per core.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// 1-based line and column (in characters) of a byte offset.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// For serde's "unknown field `x`, expected one of `a`, `b`", the closest known name.
fn unknown_field_hint(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, expected) = rest.split_once('`')?;
    let candidates = expected.split('`').skip(1).step_by(2);
    did_you_mean(unknown, candidates).map(|s| format!("; did you mean `{s}`?"))
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_count_from_one() {
        let text = "ab\ncdé\nf";
        assert_eq!(line_and_column(text, 0), (1, 1));
        assert_eq!(line_and_column(text, 4), (2, 2));
        assert_eq!(line_and_column(text, text.len()), (3, 2));
    }

    #[test]
    fn the_embedded_default_is_a_valid_config() {
        let loaded = load("<embedded>", EMBEDDED_DEFAULT).unwrap();
        assert_eq!(loaded.upstreams.len(), 3);
        assert_eq!(loaded.plan.pools[0].backends.len(), 3);
    }
}
