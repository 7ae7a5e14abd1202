//! The configuration: a TOML file, or quick-mode flags, in the sections of [`schema`], checked
//! with every problem reported where the user can fix it, then turned into the data plane's
//! [`Plan`]. A file goes through three stages, and its errors are reported all at once in their
//! order: TOML syntax (which stops there: nothing can be read), then unknown keys and wrong types
//! ([`read`]), then what the values that did read mean (one module per section).

mod acme;
mod adaptive_concurrency;
mod admin;
mod cache;
mod compress;
mod cors;
mod dns;
mod gate;
mod gateway;
mod health;
mod jwt;
mod layer4;
mod listener;
mod loops;
#[cfg(test)]
mod mutations;
mod outlier;
mod pool;
mod rate_limit;
pub mod read;
#[cfg(test)]
mod readme_listing;
pub mod report;
mod routing;
pub mod schema;
mod server;
mod static_files;
mod sticky;
mod tls;
mod tracing;
mod upstream;
pub mod values;

use std::net::SocketAddr;

use trafik_proxy::Plan;
use trafik_upstream::ReplicaConfig;

pub use report::{ConfigError, Source, render as render_errors, render_then as render_errors_then};

/// The configuration trafik runs when `serve` is given no file: the course's parcel-tracking
/// topology on loopback.
pub const EMBEDDED_DEFAULT: &str = include_str!("default.toml");

/// What a configuration asks trafik to run.
#[derive(Debug)]
pub struct Loaded {
    pub plan: Plan,
    /// Built-in replicas to start before the proxy, with their addresses.
    pub upstreams: Vec<(SocketAddr, ReplicaConfig)>,
}

/// Reads and checks a file's text; `name` is the file's name in messages.
pub fn load(name: &str, text: &str) -> Result<Loaded, Vec<ConfigError>> {
    let source = Source::File { name, text };
    let mut report = report::Report::new(source);
    let (file, reading) = read::file::<schema::File>(text, &mut report);
    let mut errors = report.into_errors();
    let Some(file) = file else {
        return Err(errors);
    };
    match check(file, source) {
        Ok(loaded) if errors.is_empty() => Ok(loaded),
        Ok(_) => Err(errors),
        Err(checked) => {
            errors.extend(reading.as_written(checked));
            Err(errors)
        }
    }
}

/// Checks every section, from a file or from flags alike, and plans what to run.
pub fn check(file: schema::File, source: Source) -> Result<Loaded, Vec<ConfigError>> {
    let mut report = report::Report::new(source);
    loops::check(&mut report, &file);
    let instance = server::check(&mut report, file.server);
    let (admin, admin_token) = admin::check(&mut report, file.admin);
    let tracing = tracing::check(&mut report, file.tracing, &instance.name);
    let upstreams = upstream::check(&mut report, file.upstreams);
    let pool_names = pool::names(&file.pools);
    let layer4_pools = layer4::pools(&file.listeners);
    let pools: Vec<_> = file
        .pools
        .into_iter()
        .enumerate()
        .map(|(i, settings)| pool::check(&mut report, i, settings, &pool_names, &layer4_pools))
        .collect();
    let caches = cache::check_all(&mut report, file.caches);
    // A name server alone needs no listener.
    let listeners = if file.listeners.is_empty() && file.dns.is_some() {
        Some(Vec::new())
    } else {
        listener::check_all(
            &mut report,
            file.listeners,
            &pool_names,
            &layer4_pools,
            &caches,
        )
    };
    let dns = dns::check(&mut report, file.dns, &pool_names);
    let plan = listeners.zip(pools.into_iter().collect::<Option<Vec<_>>>());
    match plan {
        Some((listeners, pools)) if report.is_clean() => Ok(Loaded {
            plan: Plan {
                name: instance.name,
                trace_header: instance.trace_header,
                workers: instance.workers,
                listeners,
                pools,
                admin,
                client: instance.client,
                drain_timeout: instance.drain_timeout,
                dns,
                admin_token,
                tracing,
                resolver: instance.resolver,
            },
            upstreams,
        }),
        _ => Err(report.into_errors()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_default_is_a_valid_config() {
        let loaded = load("<embedded>", EMBEDDED_DEFAULT).unwrap();
        assert_eq!(loaded.upstreams.len(), 3);
        assert_eq!(loaded.plan.pools[0].backends.len(), 3);
    }

    fn error_fields(text: &str) -> Vec<String> {
        let errors = load("t.toml", text).unwrap_err();
        errors.into_iter().map(|e| e.field).collect()
    }

    const ONE_ROUTE: &str = "[[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:1\"\n\
        [[listener.route]]\npool = \"p\"\n[[pool]]\nname = \"p\"\n";

    #[test]
    fn a_value_that_did_not_read_is_not_reported_missing_too() {
        let text = format!("{ONE_ROUTE}backends = [{{ address = 8081 }}]\n");
        assert_eq!(error_fields(&text), ["pool[0].backends[0].address"]);
    }

    #[test]
    fn errors_after_an_array_element_that_did_not_read_keep_the_file_s_indices() {
        let backends = "backends = [\"127.0.0.1:2\", { address = \"127.0.0.1:3\", weight = 0 }]";
        let text = format!("{ONE_ROUTE}{backends}\n");
        assert_eq!(
            error_fields(&text),
            ["pool[0].backends[0]", "pool[0].backends[1].weight"]
        );
    }

    /// Weights make a cycle of their sum (a common factor divided out): one past
    /// `LONGEST_PATTERN` is refused at the field, not built (4 and 3 billion filled memory).
    #[test]
    fn dns_weights_whose_cycle_would_fill_memory_are_refused() {
        let config = |weights: &str| {
            format!(
                "[dns]\nlisten = \"127.0.0.1:0\"\n\
                 [[dns.region]]\nname = \"b34\"\naddresses = [\"127.0.0.34\"]\n\
                 [[dns.region]]\nname = \"b35\"\naddresses = [\"127.0.0.35\"]\n\
                 [[dns.zone]]\norigin = \"kargo.test.\"\nname_servers = [\"ns1\"]\n\
                 [[dns.zone.record]]\nname = \"ns1\"\ntype = \"A\"\nvalue = \"127.0.0.1\"\n\
                 [[dns.zone.name]]\nname = \"www\"\npolicy = \"weighted\"\nweights = {weights}\n"
            )
        };
        let scaled = config("{ b34 = 4000000000, b35 = 2000000000 }");
        assert!(load("t.toml", &scaled).is_ok(), "2:1 is a cycle of 3");
        let errors = load("t.toml", &config("{ b34 = 4000000000, b35 = 3000000001 }")).unwrap_err();
        let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["dns.zone[0].name[0].weights"]);
        assert!(
            errors[0].message.contains("within 10000 answers"),
            "{}",
            errors[0].message
        );
    }

    /// A field count the parsers cannot make room for is refused at its field (a trillion
    /// passed, and the first head with more than 64 fields aborted the process).
    #[test]
    fn a_head_field_limit_past_ten_thousand_is_refused() {
        let limits = |section: &str, headers: u64| {
            format!(
                "{ONE_ROUTE}backends = [{{ address = \"127.0.0.1:2\" }}]\n\
                 [server.{section}]\nheaders = {headers}\n"
            )
        };
        for section in ["limits", "upstream_limits"] {
            assert!(
                load("t.toml", &limits(section, 10_000)).is_ok(),
                "{section}"
            );
            assert_eq!(
                error_fields(&limits(section, 1_000_000_000_000)),
                [format!("server.{section}.headers")]
            );
        }
    }

    #[test]
    fn workers_past_any_machine_are_refused() {
        let workers = |n: u64| {
            format!(
                "[server]\nworkers = {n}\n{ONE_ROUTE}backends = [{{ address = \"127.0.0.1:2\" }}]\n"
            )
        };
        assert!(load("t.toml", &workers(1024)).is_ok());
        assert_eq!(error_fields(&workers(1_000_000_000)), ["server.workers"]);
    }

    #[test]
    fn an_unknown_key_alone_starts_nothing() {
        let text = format!("{ONE_ROUTE}backends = [{{ address = \"127.0.0.1:2\" }}]\nretrys = 1\n");
        assert_eq!(error_fields(&text), ["pool[0].retrys"]);
    }
}
