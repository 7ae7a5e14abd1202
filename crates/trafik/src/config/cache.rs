//! `[[cache]]`: an edge cache that routes put in front of their target with `cache = "NAME"`.

use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use toml::Spanned;
use trafik_proxy::{CacheHeader, CachePlan};

use super::report::Report;
use super::schema::Cache;

/// Every cache by name, for routes to find; `None` for one with errors (already reported).
pub type Known = Vec<(String, Option<Arc<CachePlan>>)>;

pub fn check_all(report: &mut Report, caches: Vec<Spanned<Cache>>) -> Known {
    let mut known: Known = Vec::new();
    for (i, cache) in caches.into_iter().enumerate() {
        let field = format!("cache[{i}]");
        if let Some(name) = &cache.get_ref().name
            && known.iter().any(|(n, _)| n == name.get_ref())
        {
            report.error(
                name.span(),
                &format!("{field}.name"),
                format!(
                    "cache {:?} is defined twice; names must be unique",
                    name.get_ref()
                ),
            );
            continue;
        }
        let name = cache.get_ref().name.as_ref().map(|n| n.get_ref().clone());
        let plan = check(report, &field, cache).map(Arc::new);
        if let Some(name) = name {
            known.push((name, plan));
        }
    }
    known
}

fn check(report: &mut Report, field: &str, cache: Spanned<Cache>) -> Option<CachePlan> {
    let span = cache.span();
    let cache = cache.into_inner();
    let key = |name: &str| format!("{field}.{name}");
    let name = report.required(
        cache.name,
        span,
        &key("name"),
        "name = \"kenar\", the name routes use in `cache = \"kenar\"`",
    );
    if *cache.max_entries.get_ref() == 0 {
        report.error(
            cache.max_entries.span(),
            &key("max_entries"),
            "expected at least 1 entry, found 0",
        );
    }
    if cache.max_bytes.get_ref().0 == 0 {
        report.error(
            cache.max_bytes.span(),
            &key("max_bytes"),
            "expected a size above zero, such as \"256MiB\"",
        );
    }
    let policy = match cache.eviction.get_ref().parse() {
        Ok(policy) => Some(policy),
        Err(message) => {
            report.error(cache.eviction.span(), &key("eviction"), message);
            None
        }
    };
    let header = cache.header.and_then(|header| {
        let span = header.span();
        let header = header.into_inner();
        let field = key("header");
        let name = report.required(
            header.name,
            span,
            &format!("{field}.name"),
            "name = \"x-kenar\", the header that says hit or miss",
        )?;
        let parsed_name = HeaderName::from_bytes(name.get_ref().as_bytes());
        if parsed_name.is_err() {
            report.error(
                name.span(),
                &format!("{field}.name"),
                format!(
                    "expected a header name such as \"x-kenar\", found {:?}",
                    name.get_ref()
                ),
            );
        }
        let mut value = |written: &Spanned<String>, what: &str| {
            let parsed = HeaderValue::from_str(written.get_ref());
            if parsed.is_err() {
                report.error(
                    written.span(),
                    &format!("{field}.{what}"),
                    format!("{:?} cannot be written in a header", written.get_ref()),
                );
            }
            parsed.ok()
        };
        let hit = value(&header.hit, "hit");
        let miss = value(&header.miss, "miss");
        Some(CacheHeader {
            name: parsed_name.ok()?,
            hit: hit?,
            miss: miss?,
        })
    });
    Some(CachePlan {
        name: name?.into_inner(),
        max_entries: cache.max_entries.into_inner(),
        max_bytes: cache.max_bytes.get_ref().0,
        policy: policy?,
        default_ttl: cache.default_ttl.get_ref().0,
        stale_while_revalidate: cache.stale_while_revalidate.get_ref().0,
        stale_if_error: cache.stale_if_error.get_ref().0,
        header,
        clock: trafik_cache::Clock::system(),
    })
}
