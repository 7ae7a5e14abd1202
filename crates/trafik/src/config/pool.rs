//! `[[pool]]`: a set of interchangeable backends, how one is chosen, and how long to wait for it.

use std::time::Duration;

use toml::Spanned;
use trafik_balance::{Algorithm, SelectorOptions};
use trafik_proxy::{BackendPlan, HashKey, PoolPlan, RetryPlan};

use super::report::Report;
use super::schema::{Backend, Pool};
use super::{adaptive_concurrency, health, layer4, outlier, sticky, tls};
use crate::suggest::did_you_mean;

/// Each pool's name as written, by position; routes refer to pools by it.
pub fn names(pools: &[Spanned<Pool>]) -> Vec<Option<String>> {
    let name = |pool: &Spanned<Pool>| pool.get_ref().name.as_ref().map(|n| n.get_ref().clone());
    pools.iter().map(name).collect()
}

/// What to add when a rule or stickiness needs a hash key.
pub fn key_needed(what: &str) -> String {
    format!(
        "{what} places requests by a key: add hash_key = \"header:x-istemci\" (or cookie:NAME, query:NAME, path, client-ip)"
    )
}

/// `i` is the pool's position; `names` every pool's name, to find duplicates; `layer4_pools`
/// the pools that layer-4 listeners use.
pub fn check(
    report: &mut Report,
    i: usize,
    pool: Spanned<Pool>,
    names: &[Option<String>],
    layer4_pools: &[String],
) -> Option<PoolPlan> {
    let field = format!("pool[{i}]");
    let span = pool.span();
    let mut pool = pool.into_inner();
    let selector_options = selector_options(report, &field, &pool);
    let protocol = tls::protocol(report, &field, &pool);
    let tls = tls::pool(report, &field, &pool, protocol.unwrap_or_default());
    let retry = retry(report, &field, &pool);
    let example = "name = \"takip\", the name routes use to send requests here";
    let name = report.required(
        pool.name.take(),
        span.clone(),
        &format!("{field}.name"),
        example,
    );
    if let Some(name) = &name
        && names
            .iter()
            .flatten()
            .filter(|n| *n == name.get_ref())
            .count()
            > 1
    {
        report.error(
            name.span(),
            &format!("{field}.name"),
            format!(
                "pool {:?} is defined more than once; names must be unique",
                name.get_ref()
            ),
        );
    }
    let layer4 = name
        .as_ref()
        .is_some_and(|name| layer4_pools.contains(name.get_ref()));
    let proxy_protocol = layer4::check_pool(report, &field, &pool, layer4);
    let algorithm = algorithm(report, &field, &pool.algorithm);
    let backends = backends(report, &field, span, pool.backends);
    let hash_key = pool.hash_key.as_ref().and_then(|key| {
        let parsed = key.get_ref().parse::<HashKey>();
        parsed
            .map_err(|e| report.error(key.span(), &format!("{field}.hash_key"), e))
            .ok()
    });
    if let Some(algorithm) = algorithm
        && algorithm.uses_key()
        && pool.hash_key.is_none()
    {
        report.error(
            pool.algorithm.span(),
            &format!("{field}.hash_key"),
            key_needed(&format!("algorithm {algorithm}")),
        );
    }
    let health = pool.health.map(|health| {
        let speaks_http2 = protocol != Some(trafik_proxy::plan::UpstreamProtocol::Http1);
        health::check(report, &field, health, speaks_http2)
    });
    let sticky = pool.sticky.map(|settings| {
        let has_key = pool.hash_key.is_some();
        sticky::check(
            report,
            &field,
            settings,
            has_key,
            selector_options.virtual_nodes,
        )
    });
    let timeouts = &pool.timeouts;
    let connect_timeout = report.above_zero(
        &timeouts.connect,
        &format!("{field}.timeouts.connect"),
        "a timeout",
        "every connect would fail",
    );
    let response_timeout = report.above_zero(
        &timeouts.response,
        &format!("{field}.timeouts.response"),
        "a timeout",
        "every request would end in 504",
    );
    let queue_timeout = queue(
        report,
        &field,
        &pool.max_pending,
        pool.max_requests_per_backend,
        &pool.queue_timeout,
    );
    let outlier = outlier::check(report, &field, pool.outlier);
    let adaptive_concurrency = pool
        .adaptive_concurrency
        .map(|settings| adaptive_concurrency::check(report, &field, settings));
    let sticky = match sticky {
        Some(plan) => Some(plan?),
        None => None,
    };
    Some(PoolPlan {
        name: name?.into_inner(),
        algorithm: algorithm?,
        selector_options,
        hash_key,
        sticky,
        backends: backends?,
        health,
        connect_timeout,
        response_timeout,
        retries: pool.retries,
        tls: tls?,
        protocol: protocol?,
        proxy_protocol,
        outlier,
        retry,
        max_requests_per_backend: pool.max_requests_per_backend,
        slow_start: pool.slow_start.0,
        max_pending: *pool.max_pending.get_ref(),
        queue_timeout,
        adaptive_concurrency,
    })
}

/// The pending queue's timeout; a queue needs the request limit that fills it.
fn queue(
    report: &mut Report,
    field: &str,
    max_pending: &Spanned<u32>,
    max_requests_per_backend: u32,
    queue_timeout: &Spanned<super::values::Dur>,
) -> Duration {
    if *max_pending.get_ref() > 0 && max_requests_per_backend == 0 {
        report.error(
            max_pending.span(),
            &format!("{field}.max_pending"),
            "expected max_requests_per_backend above 0 too: requests queue only while every backend is at that limit",
        );
    }
    report.above_zero(
        queue_timeout,
        &format!("{field}.queue_timeout"),
        "a timeout",
        "a queued request would be refused at once",
    )
}

/// The retried statuses (5xx only: a 4xx is the request's fault and would fail anywhere), the
/// budget's share (0 to 1) and the backoff (at most 10 s).
fn retry(report: &mut Report, field: &str, pool: &Pool) -> RetryPlan {
    let statuses = pool.retry_statuses.get_ref();
    if let Some(bad) = statuses.iter().find(|s| !(500..=599).contains(*s)) {
        report.error(
            pool.retry_statuses.span(),
            &format!("{field}.retry_statuses"),
            format!("expected 5xx statuses such as [502, 503, 504], found {bad}"),
        );
    }
    let ratio = *pool.retry_budget.get_ref();
    if !(0.0..=1.0).contains(&ratio) {
        report.error(
            pool.retry_budget.span(),
            &format!("{field}.retry_budget"),
            format!("expected a share of requests from 0.0 to 1.0 (0.2 is a fifth), found {ratio}"),
        );
    }
    let backoff = pool.retry_backoff.get_ref().0;
    if backoff > std::time::Duration::from_secs(10) {
        report.error(
            pool.retry_backoff.span(),
            &format!("{field}.retry_backoff"),
            format!(
                "expected at most 10s, found {}",
                pool.retry_backoff.get_ref()
            ),
        );
    }
    RetryPlan {
        statuses: statuses.clone(),
        budget_ratio: ratio,
        budget_floor: pool.retry_budget_floor,
        backoff,
    }
}

fn algorithm(report: &mut Report, field: &str, name: &Spanned<String>) -> Option<Algorithm> {
    name.get_ref()
        .parse::<Algorithm>()
        .map_err(|error| {
            let hint = did_you_mean(&error.0, Algorithm::ALL.iter().map(|a| a.name()))
                .map(|s| format!(" (did you mean {s:?}?)"))
                .unwrap_or_default();
            report.error(
                name.span(),
                &format!("{field}.algorithm"),
                format!("{error}{hint}"),
            );
        })
        .ok()
}

fn backends(
    report: &mut Report,
    field: &str,
    pool: std::ops::Range<usize>,
    backends: Option<Spanned<Vec<Spanned<Backend>>>>,
) -> Option<Vec<BackendPlan>> {
    let example = "backends = [{ address = \"127.0.0.1:8081\" }]";
    let backends = report.required(backends, pool, &format!("{field}.backends"), example)?;
    if backends.get_ref().is_empty() {
        report.error(
            backends.span(),
            &format!("{field}.backends"),
            format!("a pool needs at least one backend, such as {example}"),
        );
    }
    let mut plans = Vec::new();
    for (b, backend) in backends.into_inner().into_iter().enumerate() {
        let field = format!("{field}.backends[{b}]");
        let span = backend.span();
        let backend = backend.into_inner();
        if *backend.weight.get_ref() == 0 {
            report.error(
                backend.weight.span(),
                &format!("{field}.weight"),
                "expected a weight of at least 1 (to stop sending to a backend, drain it)",
            );
        }
        let address = report.required(
            backend.address,
            span,
            &format!("{field}.address"),
            "address = \"127.0.0.1:8081\"",
        );
        plans.push(BackendPlan {
            address: address?.get_ref().0,
            name: backend.name,
            weight: backend.weight.into_inner(),
        });
    }
    Some(plans)
}

/// Ring size, bounded-load factor and Maglev table size; absent ones keep trafik-balance's
/// defaults.
fn selector_options(report: &mut Report, field: &str, pool: &Pool) -> SelectorOptions {
    let mut options = SelectorOptions::default();
    if let Some(vnodes) = &pool.virtual_nodes {
        virtual_nodes_in_range(report, vnodes, &format!("{field}.virtual_nodes"));
        options.virtual_nodes = *vnodes.get_ref();
    }
    if let Some(factor) = &pool.balance_factor {
        // NaN is refused too.
        if factor
            .get_ref()
            .partial_cmp(&1.0)
            .is_none_or(std::cmp::Ordering::is_lt)
        {
            report.error(
                factor.span(),
                &format!("{field}.balance_factor"),
                format!(
                    "expected a factor of at least 1.0 (such as 1.25), found {}",
                    factor.get_ref()
                ),
            );
        }
        options.balance_factor = *factor.get_ref();
    }
    if let Some(size) = &pool.table_size {
        let size_value = *size.get_ref();
        if size_value > MAX_TABLE_SIZE {
            report.error(
                size.span(),
                &format!("{field}.table_size"),
                format!(
                    "expected a table size of at most {MAX_TABLE_SIZE} (a prime; 65537 suits pools of up to a few hundred backends), found {size_value}: the table is filled slot by slot on every reload"
                ),
            );
        } else if !is_prime(size_value) {
            report.error(
                size.span(),
                &format!("{field}.table_size"),
                not_prime(size_value),
            );
        }
        options.table_size = size_value;
    }
    options
}

/// The largest Maglev table (Envoy's bound, a prime): 20 MB, filled in well under a second.
const MAX_TABLE_SIZE: u32 = 5_000_011;

/// The most ring points per backend: 10,000 already spread keys within a fraction of a
/// percent, and a pool's ring is this many times its backends, built on every reload.
const MAX_VIRTUAL_NODES: u32 = 10_000;

/// Checks a ring's points per backend (a pool's `virtual_nodes`, or its sticky section's).
pub fn virtual_nodes_in_range(report: &mut Report, vnodes: &Spanned<u32>, field: &str) {
    let count = *vnodes.get_ref();
    if !(1..=MAX_VIRTUAL_NODES).contains(&count) {
        report.error(
            vnodes.span(),
            field,
            format!(
                "expected from 1 to {MAX_VIRTUAL_NODES} virtual nodes per backend (160 is usual), found {count}"
            ),
        );
    }
}

/// Maglev fills its table by stepping through it, which only visits every slot when the size
/// is prime; the message offers the primes on either side.
fn not_prime(size: u32) -> String {
    let below = (2..size).rev().find(|&n| is_prime(n));
    let above = (size.saturating_add(1)..=u32::MAX).find(|&n| is_prime(n));
    let nearest = match (below, above) {
        (Some(below), Some(above)) => format!("the nearest primes are {below} and {above}"),
        (None, Some(above)) => format!("the nearest prime is {above}"),
        _ => "such as 65537".to_owned(),
    };
    format!("expected a prime table size; {size} is not prime ({nearest})")
}

fn is_prime(n: u32) -> bool {
    n >= 2
        && (2..)
            .take_while(|d: &u64| d * d <= u64::from(n))
            .all(|d| u64::from(n) % d != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primes_are_told_from_composites() {
        let primes: Vec<u32> = (0..30).filter(|&n| is_prime(n)).collect();
        assert_eq!(primes, [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]);
        assert!(is_prime(65_537));
        assert!(!is_prime(65_535));
        assert!(is_prime(4_294_967_291), "the largest u32 prime");
    }

    #[test]
    fn a_composite_table_size_names_the_primes_around_it() {
        assert!(not_prime(1000).ends_with("(the nearest primes are 997 and 1009)"));
        assert!(not_prime(1).ends_with("(the nearest prime is 2)"));
    }
}
