//! The admin API of edge caches: push (`PUT /caches/NAME/objects?path=`), preload
//! (`POST /caches/NAME/preload`, a JSON array of paths fetched from the origin now, through the
//! route's own target, concurrently on the workers), purge (`POST /caches/NAME/purge?prefix=` or
//! `?path=`); and the caches' and static sites' counters for `/status` and `/metrics`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde_json::json;
use trafik_metrics_text::{Exposition, Kind};

use super::{from_a_foreign_page, percent_decode, reply};
use crate::Instance;
use crate::http::cache::{CacheCounters, EdgeCache, Job};
use crate::http::files::SiteCounters;
use crate::snapshot::Snapshot;

/// The largest preload list read.
const MAX_PRELOAD_BODY: usize = 1 << 20;

pub fn is_cache_path(path: &str) -> bool {
    path.starts_with("/caches/")
}

pub async fn answer(instance: &Arc<Instance>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && from_a_foreign_page(&request, instance.admin) {
        return reply(
            StatusCode::FORBIDDEN,
            "text/plain",
            "a web page of another origin may not change trafik\n".into(),
        );
    }
    let path = request.uri().path().to_owned();
    let mut parts = path["/caches/".len()..].split('/');
    let (Some(name), Some(action), None) = (parts.next(), parts.next(), parts.next()) else {
        return not_found("use /caches/NAME/objects, /caches/NAME/preload or /caches/NAME/purge");
    };
    let Some(name) = percent_decode(name) else {
        return not_found("the cache name is not valid percent-encoding");
    };
    let snapshot = instance.snapshot();
    let Some(cache) = snapshot
        .stateful
        .caches
        .iter()
        .find(|c| c.plan.name == name)
        .cloned()
    else {
        return not_found(&format!("no route uses a cache named {name:?}"));
    };
    let query = query(&request);
    let host = query
        .iter()
        .find(|(k, _)| k == "host")
        .map_or("", |(_, v)| v.as_str())
        .to_owned();
    match (action, request.method()) {
        ("objects", &Method::PUT) => push(&cache, &host, &query, request).await,
        ("preload", &Method::POST) => preload(&snapshot, &cache, &host, request).await,
        ("purge", &Method::POST) => purge(&cache, &query),
        ("objects", _) => wrong_method("use PUT"),
        ("preload" | "purge", _) => wrong_method("use POST"),
        _ => not_found("use /caches/NAME/objects, /caches/NAME/preload or /caches/NAME/purge"),
    }
}

async fn push(
    cache: &EdgeCache,
    host: &str,
    query: &[(String, String)],
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let Some(path) = query
        .iter()
        .find(|(k, _)| k == "path")
        .map(|(_, v)| v.clone())
    else {
        return bad("give the object's path: ?path=/varlik/logo.svg");
    };
    if !path.starts_with('/') {
        return bad("the path must start with /");
    }
    let content_type = request.headers().get(header::CONTENT_TYPE).cloned();
    let cache_control = request.headers().get(header::CACHE_CONTROL).cloned();
    let limit = usize::try_from(cache.plan.max_bytes).unwrap_or(usize::MAX);
    let body = match Limited::new(request.into_body(), limit).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return bad("the body could not be read, or is larger than the cache"),
    };
    let bytes = body.len();
    match cache.push(host, &path, content_type, cache_control, body) {
        Ok(version) => json_reply(
            StatusCode::OK,
            json!({ "cache": cache.plan.name, "path": path, "version": version, "bytes": bytes, "pushed": 1 }),
        ),
        Err(reason) => bad(&format!("not stored: {reason}")),
    }
}

async fn preload(
    snapshot: &Snapshot,
    cache: &EdgeCache,
    host: &str,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let body = match Limited::new(request.into_body(), MAX_PRELOAD_BODY)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(_) => return bad("the list could not be read, or is over 1 MiB"),
    };
    let paths: Vec<String> = match serde_json::from_slice(&body) {
        Ok(paths) => paths,
        Err(error) => return bad(&format!("expected a JSON array of paths: {error}")),
    };
    if let Some(bad_path) = paths.iter().find(|p| !p.starts_with('/')) {
        return bad(&format!("{bad_path:?} does not start with /"));
    }
    let mut waiting = Vec::with_capacity(paths.len());
    for path in &paths {
        let (done, stored) = tokio::sync::oneshot::channel();
        snapshot.jobs.submit(Job {
            cache: cache.plan.name.clone(),
            host: host.to_owned(),
            path_and_query: path.clone(),
            done: Some(done),
        });
        waiting.push(stored);
    }
    let mut preloaded = 0;
    for stored in waiting {
        if stored.await.unwrap_or(false) {
            preloaded += 1;
        }
    }
    json_reply(
        StatusCode::OK,
        json!({
            "cache": cache.plan.name,
            "requested": paths.len(),
            "preloaded": preloaded,
            "failed": paths.len() - preloaded,
        }),
    )
}

fn purge(cache: &EdgeCache, query: &[(String, String)]) -> Response<Full<Bytes>> {
    let find = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let (path, prefix) = match (find("path"), find("prefix")) {
        (Some(path), None) => (path, false),
        (None, Some(prefix)) => (prefix, true),
        _ => return bad("give exactly one of ?path=/p or ?prefix=/takip/"),
    };
    if !path.starts_with('/') {
        return bad("the path must start with /");
    }
    let purged = cache.purge(&path, prefix);
    let key = if prefix { "prefix" } else { "path" };
    json_reply(
        StatusCode::OK,
        json!({ "cache": cache.plan.name, key: path, "purged": purged }),
    )
}

/// The query's pairs, percent-decoded; pairs that do not decode are left out.
pub(crate) fn query<B>(request: &Request<B>) -> Vec<(String, String)> {
    request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            Some((percent_decode(key)?, percent_decode(value)?))
        })
        .collect()
}

fn json_reply(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    reply(status, "application/json", body.to_string())
}

fn bad(message: &str) -> Response<Full<Bytes>> {
    json_reply(StatusCode::BAD_REQUEST, json!({ "error": message }))
}

fn not_found(message: &str) -> Response<Full<Bytes>> {
    json_reply(StatusCode::NOT_FOUND, json!({ "error": message }))
}

fn wrong_method(message: &'static str) -> Response<Full<Bytes>> {
    let mut response = reply(
        StatusCode::METHOD_NOT_ALLOWED,
        "text/plain",
        format!("{message}\n"),
    );
    let allow = if message.contains("PUT") {
        "PUT"
    } else {
        "POST"
    };
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

type CacheCounter = fn(&CacheCounters) -> &std::sync::atomic::AtomicU64;

/// The per-worker counters of a cache, with their names in `/status` and `/metrics`.
const CACHE_COUNTERS: [(&str, &str, CacheCounter); 8] = [
    (
        "hits",
        "Answers from the store without waiting for the origin.",
        |c| &c.hits,
    ),
    ("misses", "GET and HEAD requests that were not hits.", |c| {
        &c.misses
    }),
    (
        "coalesced",
        "Misses answered by another request's origin fetch.",
        |c| &c.coalesced,
    ),
    (
        "stale_served",
        "Stale copies served while refreshing or because the origin failed.",
        |c| &c.stale_served,
    ),
    (
        "revalidated",
        "Stored copies refreshed by a 304 from the origin.",
        |c| &c.revalidated,
    ),
    (
        "origin_requests",
        "Requests the cache sent to the origin.",
        |c| &c.origin_requests,
    ),
    (
        "origin_bytes",
        "Body bytes fetched from the origin for the store.",
        |c| &c.origin_bytes,
    ),
    (
        "invalidated",
        "Stored copies removed because a POST, PUT, DELETE or other unsafe request to their URI succeeded.",
        |c| &c.invalidated,
    ),
];

/// A value read from a cache: the admin API's counters (written off the request path), its size.
type AdminCounter = fn(&EdgeCache) -> u64;
const ADMIN_COUNTERS: [(&str, &str, AdminCounter); 3] = [
    ("purged", "Objects removed by purges.", |c| {
        c.purged.load(Ordering::Relaxed)
    }),
    ("pushed", "Objects stored by push.", |c| {
        c.pushed.load(Ordering::Relaxed)
    }),
    (
        "preloaded",
        "Objects fetched into the store by preload.",
        |c| c.preloaded.load(Ordering::Relaxed),
    ),
];

type SiteCounter = fn(&SiteCounters) -> &std::sync::atomic::AtomicU64;
const SITE_COUNTERS: [(&str, &str, SiteCounter); 5] = [
    ("requests", "Requests a static route answered.", |c| {
        &c.requests
    }),
    ("bytes", "Body bytes a static route sent.", |c| &c.bytes),
    (
        "sent_by_sendfile_bytes",
        "Body bytes sent from the page cache with sendfile(2), not copied through trafik.",
        |c| &c.sent_by_sendfile,
    ),
    (
        "not_modified",
        "304 answers to conditional requests.",
        |c| &c.not_modified,
    ),
    (
        "not_found",
        "Requests for files that are not there (or not under the root).",
        |c| &c.not_found,
    ),
];

/// `/status`'s `caches` array.
pub fn status(snapshot: &Snapshot) -> serde_json::Value {
    let caches: Vec<_> = snapshot
        .stateful
        .caches
        .iter()
        .map(|cache| {
            let mut entry = json!({
                "name": cache.plan.name,
                "entries": cache.store.entries(),
                "bytes": cache.store.bytes(),
            });
            for (name, _, counter) in CACHE_COUNTERS {
                entry[name] = json!(cache.total(counter));
            }
            for (name, _, counter) in ADMIN_COUNTERS {
                entry[name] = json!(counter(cache));
            }
            entry
        })
        .collect();
    json!(caches)
}

/// `/status`'s `static` array: one entry per static route.
pub fn sites(snapshot: &Snapshot) -> serde_json::Value {
    let sites: Vec<_> = snapshot
        .stateful
        .sites
        .iter()
        .map(|site| {
            let mut entry = json!({
                "root": site.root.display().to_string(),
                "prefix": site.prefix,
            });
            for (name, _, counter) in SITE_COUNTERS {
                entry[name] = json!(site.total(counter));
            }
            entry
        })
        .collect();
    json!(sites)
}

/// The same counters in Prometheus text.
pub fn metrics(snapshot: &Snapshot, exposition: &mut Exposition) {
    let caches = &snapshot.stateful.caches;
    let gauges: [(&str, &str, AdminCounter); 2] = [
        (
            "trafik_cache_entries",
            "Objects in the cache's store.",
            |c| c.store.entries() as u64,
        ),
        ("trafik_cache_bytes", "Bytes in the cache's store.", |c| {
            c.store.bytes()
        }),
    ];
    for (name, help, read) in gauges {
        let mut family = exposition.family(name, Kind::Gauge, help);
        for cache in caches {
            family.sample(&[("cache", &cache.plan.name)], read(cache));
        }
    }
    for (counter, help, read) in CACHE_COUNTERS {
        let name = format!("trafik_cache_{counter}_total");
        let mut family = exposition.family(&name, Kind::Counter, help);
        for cache in caches {
            family.sample(&[("cache", &cache.plan.name)], cache.total(read));
        }
    }
    for (counter, help, read) in ADMIN_COUNTERS {
        let name = format!("trafik_cache_{counter}_total");
        let mut family = exposition.family(&name, Kind::Counter, help);
        for cache in caches {
            family.sample(&[("cache", &cache.plan.name)], read(cache));
        }
    }
    for (counter, help, read) in SITE_COUNTERS {
        let name = format!("trafik_static_{counter}_total");
        let mut family = exposition.family(&name, Kind::Counter, help);
        for site in &snapshot.stateful.sites {
            let labels = [
                ("root", site.root.display().to_string()),
                ("prefix", site.prefix.clone()),
            ];
            family.sample(&labels, site.total(read));
        }
    }
}
