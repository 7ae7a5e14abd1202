//! The edge cache: the stage a route runs after its filters, in front of its target. A GET or
//! HEAD is answered from the cache's store when a fresh copy is there; otherwise one request
//! per key goes to the target (concurrent misses on any worker wait for it: coalescing), and
//! what it brings back is stored when RFC 9111 allows. Stale copies are served while one
//! request refreshes them (`stale_while_revalidate`) or when the origin fails
//! (`stale_if_error`); a stale copy with a validator is revalidated (a 304 refreshes it).
//! Every answer carries `Cache-Status` (RFC 9211). The rules themselves (freshness, keys, the
//! store) are `trafik-cache`'s; this module only moves requests and bytes.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::Body as _;
use http_body_util::BodyExt;
use tokio::sync::{Notify, Semaphore, oneshot, watch};
use trafik_cache::{Cache, CacheControl, FieldValues, Limits, Rules, Stored, Use, key, storable};
use trafik_gateway::template::Captures;

use super::body::{HeldAnswer, ProxyBody, RequestBody};
use super::compress::Negotiated;
use super::conditional::not_modified;
use super::headers::remove_hop_by_hop;
use super::service::{ClientConnection, WorkerProxy};
use super::target::Target;
use crate::counters::{PerWorker, add, bump, read};
use crate::http::body::ErrorAnswer;
use crate::http::filter::Fields;
use crate::plan::CachePlan;
use crate::snapshot::{Listener, WorkerSnapshot};

/// RFC 9211's response header.
pub const CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");
/// The same, for fields lent out by reference.
static CACHE_STATUS_NAME: HeaderName = CACHE_STATUS;
/// `Age`, for fields lent out by reference.
static AGE_NAME: HeaderName = header::AGE;

/// What happened to requests on one worker.
#[derive(Debug, Default)]
pub struct CacheCounters {
    /// Answered from the store without waiting for the origin (fresh, or stale while it is
    /// refreshed).
    pub hits: AtomicU64,
    /// GET and HEAD requests that were not hits.
    pub misses: AtomicU64,
    /// Misses answered by another request's origin fetch.
    pub coalesced: AtomicU64,
    /// Stale copies served: while revalidating, or because the origin failed.
    pub stale_served: AtomicU64,
    /// Copies refreshed by a 304.
    pub revalidated: AtomicU64,
    pub origin_requests: AtomicU64,
    /// Body bytes of the answers fetched for the store.
    pub origin_bytes: AtomicU64,
    /// Stored copies removed because an unsafe request to their URI succeeded (RFC 9111 §4.4);
    /// the admin API's removals are `purged`.
    pub invalidated: AtomicU64,
}

/// One `[[cache]]`: its store and counters, shared by every worker and route that names it,
/// and kept across reloads that leave its settings alone.
pub struct EdgeCache {
    pub plan: Arc<CachePlan>,
    pub store: Cache,
    rules: Rules,
    /// Origin fetches in flight, by key: later misses for the key wait for the first.
    flights: Mutex<HashMap<String, watch::Receiver<Flight>>>,
    pub counters: PerWorker<CacheCounters>,
    /// Written by the admin API, off the request path.
    pub purged: AtomicU64,
    pub pushed: AtomicU64,
    pub preloaded: AtomicU64,
}

#[derive(Clone)]
enum Flight {
    Pending,
    /// The copy stored, or `None` when the answer could not be stored (the waiters then ask
    /// the origin themselves).
    Done(Option<Arc<Stored>>),
}

/// The request that fetches a key for everyone waiting on it; dropping it (its client went
/// away) releases the waiters.
struct Lead<'a> {
    cache: &'a EdgeCache,
    key: String,
    done: watch::Sender<Flight>,
}

impl Lead<'_> {
    fn finish(self, stored: Option<Arc<Stored>>) {
        self.done.send_replace(Flight::Done(stored));
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        lock(&self.cache.flights).remove(&self.key);
        self.done.send_if_modified(|flight| match flight {
            Flight::Pending => {
                *flight = Flight::Done(None);
                true
            }
            Flight::Done(_) => false,
        });
    }
}

enum Role<'a> {
    Lead(Lead<'a>),
    Follow(watch::Receiver<Flight>),
}

impl EdgeCache {
    pub fn new(plan: Arc<CachePlan>, workers: usize) -> Self {
        let limits = Limits {
            max_entries: plan.max_entries,
            max_bytes: plan.max_bytes,
        };
        EdgeCache {
            store: Cache::new(plan.policy, limits),
            rules: Rules {
                default_ttl: plan.default_ttl,
                stale_while_revalidate: plan.stale_while_revalidate,
                stale_if_error: plan.stale_if_error,
            },
            plan,
            flights: Mutex::default(),
            counters: PerWorker::new(workers),
            purged: AtomicU64::new(0),
            pushed: AtomicU64::new(0),
            preloaded: AtomicU64::new(0),
        }
    }

    fn join(&self, key: &str) -> Role<'_> {
        let mut flights = lock(&self.flights);
        if let Some(waiting) = flights.get(key) {
            return Role::Follow(waiting.clone());
        }
        let (done, waiting) = watch::channel(Flight::Pending);
        flights.insert(key.to_owned(), waiting);
        Role::Lead(Lead {
            cache: self,
            key: key.to_owned(),
            done,
        })
    }

    /// Stores `body` under `path` as if the origin had answered it: 200, the content type,
    /// a version and an `ETag` naming it; fresh for `Cache-Control` when given, else for
    /// `default_ttl`. Returns the version.
    pub fn push(
        &self,
        host: &str,
        path_and_query: &str,
        content_type: Option<HeaderValue>,
        cache_control: Option<HeaderValue>,
        body: Bytes,
    ) -> Result<u64, &'static str> {
        let version = self.store.next_version();
        let mut headers = HeaderMap::new();
        if let Some(content_type) = content_type {
            headers.insert(header::CONTENT_TYPE, content_type);
        }
        if let Some(cache_control) = cache_control {
            headers.insert(header::CACHE_CONTROL, cache_control);
        }
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        let etag = format!("\"trafik-{version}\"");
        headers.insert(
            header::ETAG,
            HeaderValue::from_str(&etag).expect("digits and quotes"),
        );
        let control = CacheControl::parse(&headers);
        if control.no_store || control.private {
            return Err("Cache-Control forbids storing it");
        }
        let now = self.plan.clock.now();
        let stored = Stored::new(
            StatusCode::OK,
            headers,
            body,
            &control,
            &self.rules,
            now,
            now,
            version,
        )
        .map_err(|_| "it would never be fresh")?;
        let primary = key::primary(host, path_and_query);
        self.store
            .insert(&primary, &HeaderMap::new(), Arc::new(stored));
        self.pushed.fetch_add(1, Ordering::Relaxed);
        Ok(version)
    }

    /// Removes `path` exactly (`prefix` false) or everything under it; returns how many.
    pub fn purge(&self, path: &str, prefix: bool) -> usize {
        let removed = if prefix {
            self.store.purge_prefix(path)
        } else {
            self.store.purge_path(path)
        };
        self.purged.fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }

    /// The sum over workers of one counter.
    pub fn total(&self, counter: fn(&CacheCounters) -> &AtomicU64) -> i64 {
        self.counters.sum(|c| read(counter(c)))
    }
}

/// A route's target behind its cache.
pub struct CachedTarget {
    pub cache: Arc<EdgeCache>,
    /// The key's host: the route's `host` (lowercase), or empty when the route takes any host
    /// (it then serves one site, whatever name it is reached by).
    pub host: String,
    pub inner: Arc<Target>,
}

/// The cache's verdict on a request, as `trafik explain` tells it.
pub struct CacheVerdict {
    pub told: serde_json::Value,
    /// The status and why, when the store answers without the origin.
    pub answer: Option<(u16, String)>,
}

/// How one answer came about, for `Cache-Status` and the custom header.
struct Outcome {
    hit: bool,
    detail: Detail,
}

/// The `Cache-Status` parameters after the cache's name.
enum Detail {
    /// A fresh copy's hit, with the seconds it stays fresh: every hit says it, so it is
    /// written straight into the field, without the formatting machinery.
    Fresh {
        ttl_seconds: u64,
    },
    Said(Cow<'static, str>),
}

/// What the store has for a request.
enum Looked<'p> {
    /// A fresh copy, or a stale one served while one request refreshes it, as of `now`.
    Hit {
        stored: Arc<Stored>,
        now: SystemTime,
        outcome: Outcome,
    },
    /// Nothing to answer with as it is: the origin is asked under `key`, with the stale copy
    /// (and whether it may stand in when the origin fails) when there is one.
    Missed {
        stale: Option<(Arc<Stored>, bool)>,
        key: Cow<'p, str>,
    },
}

impl Outcome {
    fn hit(detail: String) -> Self {
        Outcome {
            hit: true,
            detail: Detail::Said(detail.into()),
        }
    }

    fn fresh(ttl: std::time::Duration) -> Self {
        Outcome {
            hit: true,
            detail: Detail::Fresh {
                ttl_seconds: ttl.as_secs(),
            },
        }
    }

    fn miss(detail: impl Into<Cow<'static, str>>) -> Self {
        Outcome {
            hit: false,
            detail: Detail::Said(detail.into()),
        }
    }
}

impl CachedTarget {
    pub async fn serve(
        &self,
        worker: &WorkerProxy,
        snapshot: &Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        request: Request<RequestBody>,
    ) -> (Response<ProxyBody>, Option<SocketAddr>) {
        let (mut response, backend, outcome) =
            self.answer(worker, snapshot, connection, request).await;
        self.labels(&snapshot.name, &outcome)
            .apply(response.headers_mut());
        (response, backend)
    }

    /// The cache's verdict on `request` (`trafik explain`): the key, and what the store holds
    /// under it — fresh, stale, or nothing — read without marking anything used, counting, or
    /// joining a fetch. `answer` is the status when the cache would answer itself.
    pub fn explain(&self, request: &Request<RequestBody>) -> CacheVerdict {
        let name = &self.cache.plan.name;
        let method = request.method();
        let told = |verdict: &str, why: String| CacheVerdict {
            told: serde_json::json!({ "cache": name, "verdict": verdict, "why": why }),
            answer: None,
        };
        if method != Method::GET && method != Method::HEAD {
            return told(
                "bypass",
                format!(
                    "{method} goes to the origin; when it succeeds, the copies stored for its URI are removed"
                ),
            );
        }
        let asked = CacheControl::parse(request.headers());
        if asked.no_store {
            return told("bypass", "the request says Cache-Control: no-store".into());
        }
        let path_and_query = request.uri().path_and_query().map_or("/", |p| p.as_str());
        let primary = key::primary(&self.host, path_and_query);
        let now = self.cache.plan.clock.now();
        let found = self.cache.store.peek(&primary, request.headers());
        let vary: Vec<&str> = found.vary.iter().map(HeaderName::as_str).collect();
        let Some(stored) = found.stored else {
            return CacheVerdict {
                told: serde_json::json!({
                    "cache": name,
                    "key": found.key,
                    "vary": vary,
                    "verdict": "miss",
                    "why": "nothing stored under the key: the request goes to the origin (one per key; others wait for it)",
                }),
                answer: None,
            };
        };
        let usable = stored.usable(now);
        let (verdict, why, answers) = match usable {
            Use::Fresh { ttl } if !asked.no_cache => (
                "fresh",
                format!(
                    "answered from the store, fresh for {} s more",
                    ttl.as_secs()
                ),
                true,
            ),
            Use::StaleWhileRevalidate { by } if !asked.no_cache => (
                "stale",
                format!(
                    "stale by {} s: answered from the store while one request refreshes it",
                    by.as_secs()
                ),
                true,
            ),
            Use::Fresh { .. } | Use::StaleWhileRevalidate { .. } => (
                "fresh",
                "stored, but the request says Cache-Control: no-cache: the origin is asked".into(),
                false,
            ),
            Use::Revalidate { by, if_error } => (
                "stale",
                format!(
                    "stale by {} s: revalidated with the origin{}",
                    by.as_secs(),
                    if if_error {
                        " (served if the origin fails)"
                    } else {
                        ""
                    }
                ),
                false,
            ),
        };
        CacheVerdict {
            told: serde_json::json!({
                "cache": name,
                "key": found.key,
                "vary": vary,
                "verdict": verdict,
                "age_seconds": stored.age(now).as_secs(),
                "version": stored.version,
                "status": stored.status.as_u16(),
                "why": why,
            }),
            answer: answers.then(|| (stored.status.as_u16(), format!("from cache {name}: {why}"))),
        }
    }

    /// A hit answered by the own HTTP/1 engine from the head it parsed, without the pipeline:
    /// the stored copy and its labels when the store holds one this GET or HEAD may use as it
    /// is.
    /// `None` leaves the request to the pipeline's [`CachedTarget::serve`] (a miss, a bypass,
    /// a copy to revalidate), which looks again and counts it.
    pub fn hit<F: FieldValues + Fields>(
        &self,
        worker: usize,
        snapshot: &WorkerSnapshot,
        method: &Method,
        path_and_query: &str,
        request: &F,
    ) -> Option<Hit<'_>> {
        if method != Method::GET && method != Method::HEAD {
            return None;
        }
        let asked = CacheControl::parse(request);
        if asked.no_store {
            return None;
        }
        let primary = key::primary(&self.host, path_and_query);
        let counters = self.cache.counters.mine(worker);
        match self.look(
            counters,
            snapshot,
            &primary,
            path_and_query,
            &asked,
            request,
        ) {
            Looked::Hit {
                stored,
                now,
                outcome,
            } => Some(Hit {
                reply: Reply::new(stored, now, request),
                labels: self.labels(&snapshot.name, &outcome),
            }),
            Looked::Missed { .. } => None,
        }
    }

    /// What the store holds for a GET or HEAD under `primary`: a copy to answer with (counted
    /// as a hit), or what a miss knows for its trip to the origin.
    fn look<'p, F: FieldValues + ?Sized>(
        &self,
        counters: &CacheCounters,
        snapshot: &WorkerSnapshot,
        primary: &'p str,
        path_and_query: &str,
        asked: &CacheControl,
        request: &F,
    ) -> Looked<'p> {
        let now = self.cache.plan.clock.now();
        let (found, key) = self.cache.store.lookup(primary, request);
        let Some(stored) = found else {
            return Looked::Missed { stale: None, key };
        };
        let stale = match stored.usable(now) {
            Use::Fresh { ttl } if !asked.no_cache => {
                bump(&counters.hits);
                let outcome = Outcome::fresh(ttl);
                return Looked::Hit {
                    stored,
                    now,
                    outcome,
                };
            }
            Use::StaleWhileRevalidate { by } if !asked.no_cache => {
                bump(&counters.hits);
                bump(&counters.stale_served);
                self.refresh_later(snapshot, &key, path_and_query);
                let outcome = Outcome::hit(format!(
                    "hit; ttl=-{}; detail=stale-while-revalidate",
                    by.as_secs()
                ));
                return Looked::Hit {
                    stored,
                    now,
                    outcome,
                };
            }
            Use::Fresh { .. } | Use::StaleWhileRevalidate { .. } => (stored, false),
            Use::Revalidate { if_error, .. } => (stored, if_error),
        };
        Looked::Missed {
            stale: Some(stale),
            key,
        }
    }

    async fn answer(
        &self,
        worker: &WorkerProxy,
        snapshot: &Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        request: Request<RequestBody>,
    ) -> (Response<ProxyBody>, Option<SocketAddr>, Outcome) {
        let counters = self.cache.counters.mine(worker.id);
        let method = request.method().clone();
        if method != Method::GET && method != Method::HEAD {
            bump(&counters.origin_requests);
            let target = request
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_owned());
            let request_host = request_host(&request);
            let (response, backend) = self.origin(worker, snapshot, connection, request).await;
            // A change that succeeded makes the stored copies of its URI stale (RFC 9111 §4.4);
            // a safe method changes nothing, so it removes nothing.
            let succeeded = response.status().is_success() || response.status().is_redirection();
            if succeeded && !is_safe(&method) {
                let named = [header::LOCATION, header::CONTENT_LOCATION].map(|name| {
                    response.headers().get(name).and_then(|value| {
                        same_host_target(value.to_str().ok()?, request_host.as_deref())
                    })
                });
                let mut removed = 0;
                for path_and_query in std::iter::once(target).chain(named).flatten() {
                    let primary = key::primary(&self.host, &path_and_query);
                    removed += self.cache.store.invalidate(&primary);
                }
                add(&counters.invalidated, removed);
            }
            return (response, backend, Outcome::miss("fwd=method"));
        }
        let asked = CacheControl::parse(request.headers());
        if asked.no_store {
            bump(&counters.misses);
            bump(&counters.origin_requests);
            let (response, backend) = self.origin(worker, snapshot, connection, request).await;
            return (response, backend, Outcome::miss("fwd=request"));
        }
        let path_and_query = request.uri().path_and_query().map_or("/", |p| p.as_str());
        let primary = key::primary(&self.host, path_and_query);
        let looked = self.look(
            counters,
            snapshot,
            &primary,
            path_and_query,
            &asked,
            request.headers(),
        );
        let (stale, mut key) = match looked {
            Looked::Hit {
                stored,
                now,
                outcome,
            } => {
                let response = from_store(&stored, now, request.headers());
                return (response, None, outcome);
            }
            Looked::Missed { stale, key } => (stale, key),
        };
        bump(&counters.misses);
        let forward = if stale.is_some() {
            "fwd=stale"
        } else {
            "fwd=uri-miss"
        };
        loop {
            match self.cache.join(&key) {
                Role::Lead(lead) => {
                    // A fetch that ended between the lookup above and now stored its copy
                    // before it let go of the key: use that copy rather than fetch again.
                    let now = self.cache.plan.clock.now();
                    if let (Some(stored), _) = self.cache.store.lookup(&primary, request.headers())
                        && let Use::Fresh { ttl } = stored.usable(now)
                        && !asked.no_cache
                    {
                        drop(lead);
                        bump(&counters.hits);
                        let outcome = Outcome::fresh(ttl);
                        return (from_store(&stored, now, request.headers()), None, outcome);
                    }
                    return self
                        .fetch(worker, snapshot, connection, request, &primary, stale, lead)
                        .await;
                }
                Role::Follow(mut waiting) => {
                    let done = waiting
                        .wait_for(|f| matches!(f, Flight::Done(_)))
                        .await
                        .map(|f| f.clone());
                    if let Ok(Flight::Done(Some(stored))) = &done
                        && !trafik_cache::freshness::vary_names(&stored.headers)
                            .is_none_or(|names| names.is_empty())
                    {
                        // The answer varies: which variant this request needs is known only
                        // now. Look again, and wait on that variant's fetch if it has one.
                        let (found, variant) = self.cache.store.lookup(&primary, request.headers());
                        let now = self.cache.plan.clock.now();
                        if let Some(stored) = found
                            && let Use::Fresh { .. } = stored.usable(now)
                        {
                            bump(&counters.coalesced);
                            let response = from_store(&stored, now, request.headers());
                            return (
                                response,
                                None,
                                Outcome::miss(format!("{forward}; collapsed")),
                            );
                        }
                        if variant != key {
                            key = variant;
                            continue;
                        }
                    }
                    if let Ok(Flight::Done(Some(stored))) = done {
                        bump(&counters.coalesced);
                        let now = self.cache.plan.clock.now();
                        let response = from_store(&stored, now, request.headers());
                        return (
                            response,
                            None,
                            Outcome::miss(format!("{forward}; collapsed")),
                        );
                    }
                    // The first request brought nothing storable: this one asks for itself,
                    // without waiting on others again.
                    if !matches!(done, Ok(Flight::Done(None))) {
                        continue;
                    }
                    bump(&counters.origin_requests);
                    let (response, backend) =
                        self.origin(worker, snapshot, connection, request).await;
                    return (response, backend, Outcome::miss(forward));
                }
            }
        }
    }

    /// The leader's fetch: asks the origin (conditionally, when a stale copy has a validator),
    /// stores what may be stored and wakes the waiters.
    #[allow(clippy::too_many_arguments)]
    async fn fetch(
        &self,
        worker: &WorkerProxy,
        snapshot: &Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        mut request: Request<RequestBody>,
        primary: &str,
        stale: Option<(Arc<Stored>, bool)>,
        lead: Lead<'_>,
    ) -> (Response<ProxyBody>, Option<SocketAddr>, Outcome) {
        let counters = self.cache.counters.mine(worker.id);
        let client_headers = request.headers().clone();
        let head = request.method() == Method::HEAD;
        // The route compresses: the copy stored is the variant in the client's coding.
        let compress = request.extensions().get::<Negotiated>().cloned();
        // The store wants the whole representation, whatever this client asked for.
        *request.method_mut() = Method::GET;
        let headers = request.headers_mut();
        for conditional in [
            header::IF_NONE_MATCH,
            header::IF_MODIFIED_SINCE,
            header::IF_MATCH,
            header::IF_UNMODIFIED_SINCE,
            header::IF_RANGE,
            header::RANGE,
        ] {
            headers.remove(conditional);
        }
        if let Some((stored, _)) = &stale {
            if let Some(etag) = stored.etag() {
                headers.insert(header::IF_NONE_MATCH, etag.clone());
            } else if let Some(modified) = stored.last_modified() {
                headers.insert(header::IF_MODIFIED_SINCE, modified.clone());
            }
        }
        bump(&counters.origin_requests);
        let sent = self.cache.plan.clock.now();
        let (response, backend) = self.origin(worker, snapshot, connection, request).await;
        let received = self.cache.plan.clock.now();
        let status = response.status();
        let answer = |stored: &Arc<Stored>| from_store(stored, received, &client_headers);
        if let Some((stored, if_error)) = stale {
            if status == StatusCode::NOT_MODIFIED {
                let version = self.cache.store.next_version();
                let refreshed = Arc::new(stored.refreshed(
                    response.headers(),
                    &self.cache.rules,
                    sent,
                    received,
                    version,
                ));
                self.cache
                    .store
                    .insert(primary, &client_headers, refreshed.clone());
                bump(&counters.revalidated);
                lead.finish(Some(refreshed.clone()));
                let outcome = Outcome::miss("fwd=stale; fwd-status=304");
                return (answer(&refreshed), backend, outcome);
            }
            if status.is_server_error() && if_error {
                bump(&counters.stale_served);
                lead.finish(Some(stored.clone()));
                let outcome = Outcome::hit(format!(
                    "fwd=stale; fwd-status={}; detail=stale-if-error",
                    status.as_u16()
                ));
                return (answer(&stored), backend, outcome);
            }
        }
        let forward = "fwd=uri-miss";
        let control = match storable(&Method::GET, &client_headers, status, response.headers()) {
            Ok(control) => control,
            Err(reason) => {
                lead.finish(None);
                let detail = format!(
                    "{forward}; fwd-status={}; detail={}",
                    status.as_u16(),
                    reason.detail()
                );
                return (response, backend, Outcome::miss(detail));
            }
        };
        let length = response.body().size_hint().exact();
        if length.is_none_or(|length| length > self.cache.plan.max_bytes) {
            lead.finish(None);
            let detail = format!("{forward}; fwd-status={}; detail=size", status.as_u16());
            return (response, backend, Outcome::miss(detail));
        }
        let (mut parts, body) = response.into_parts();
        let Ok(collected) = body.collect().await else {
            lead.finish(None);
            return (
                crate::ProxyError::UpstreamFailed.response(),
                backend,
                Outcome::miss(forward),
            );
        };
        let mut body = collected.to_bytes();
        add(&counters.origin_bytes, body.len());
        if let Some(negotiated) = &compress {
            let length = Some(body.len() as u64);
            if let Some(coding) =
                negotiated.prepare(parts.status, &mut parts.headers, length, worker.id)
            {
                match negotiated.compress_whole(coding, &body, worker.id) {
                    Ok(compressed) => body = compressed,
                    Err(_) => {
                        lead.finish(None);
                        let failed = crate::ProxyError::UpstreamFailed.response();
                        return (failed, backend, Outcome::miss(forward));
                    }
                }
            }
        }
        length_of(&mut parts.headers, parts.status, body.len());
        let mut stored_headers = parts.headers.clone();
        remove_hop_by_hop(&mut stored_headers);
        let version = self.cache.store.next_version();
        let stored = Stored::new(
            parts.status,
            stored_headers,
            body.clone(),
            &control,
            &self.cache.rules,
            sent,
            received,
            version,
        );
        let (detail, stored) = match stored {
            Ok(stored) => {
                let stored = Arc::new(stored);
                self.cache
                    .store
                    .insert(primary, &client_headers, stored.clone());
                ("stored".to_owned(), Some(stored))
            }
            Err(reason) => (format!("detail={}", reason.detail()), None),
        };
        lead.finish(stored);
        // This client gets the origin's own answer (its cookies included), from the bytes read.
        let mut response = Response::from_parts(parts, ProxyBody::local(body));
        remove_hop_by_hop(response.headers_mut());
        if head {
            *response.body_mut() = ProxyBody::Local(None);
        }
        let outcome = Outcome::miss(format!(
            "{forward}; fwd-status={}; {detail}",
            status.as_u16()
        ));
        (response, backend, outcome)
    }

    /// The inner target; boxed, since a target may contain this one.
    async fn origin(
        &self,
        worker: &WorkerProxy,
        snapshot: &Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        request: Request<RequestBody>,
    ) -> (Response<ProxyBody>, Option<SocketAddr>) {
        Box::pin(self.inner.serve(worker, snapshot, connection, request)).await
    }

    /// Queues a refresh of `key` for a worker to run after this answer, unless one is running.
    fn refresh_later(&self, snapshot: &WorkerSnapshot, key: &str, path_and_query: &str) {
        if lock(&self.cache.flights).contains_key(key) {
            return;
        }
        snapshot.jobs.submit(Job {
            cache: self.cache.plan.name.clone(),
            host: self.host.clone(),
            path_and_query: path_and_query.to_owned(),
            done: None,
        });
    }

    /// Fetches `path_and_query` from the origin into the store now (a preload, or a refresh),
    /// unless another request is fetching it already; true when a copy is stored.
    pub async fn refresh(
        &self,
        worker: &WorkerProxy,
        snapshot: &Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        request: Request<RequestBody>,
    ) -> bool {
        let path_and_query = request.uri().path_and_query().map_or("/", |p| p.as_str());
        let primary = key::primary(&self.host, path_and_query);
        let headers = request.headers().clone();
        let (found, key) = self.cache.store.lookup(&primary, &headers);
        let stale = found.map(|stored| (stored, false));
        match self.cache.join(&key) {
            Role::Lead(lead) => {
                let (response, _, _) = self
                    .fetch(worker, snapshot, connection, request, &primary, stale, lead)
                    .await;
                drop(response);
                let (now, _) = self.cache.store.lookup(&primary, &headers);
                now.is_some()
            }
            Role::Follow(mut waiting) => matches!(
                waiting
                    .wait_for(|f| matches!(f, Flight::Done(_)))
                    .await
                    .map(|f| f.clone()),
                Ok(Flight::Done(Some(_)))
            ),
        }
    }

    /// The fields this cache adds to the answer `outcome` describes.
    fn labels(&self, name: &str, outcome: &Outcome) -> Labels<'_> {
        let mut digits = itoa::Buffer::new();
        let detail: [&str; 2] = match &outcome.detail {
            Detail::Fresh { ttl_seconds } => ["hit; ttl=", digits.format(*ttl_seconds)],
            Detail::Said(text) => [text, ""],
        };
        let mut status = String::with_capacity(name.len() + 2 + detail[0].len() + detail[1].len());
        for part in [name, "; ", detail[0], detail[1]] {
            status.push_str(part);
        }
        let custom = self.cache.plan.header.as_ref().map(|custom| {
            let value = if outcome.hit {
                &custom.hit
            } else {
                &custom.miss
            };
            (&custom.name, value)
        });
        Labels { status, custom }
    }
}

/// The fields a cache adds to each of its answers: `Cache-Status` and the configured custom
/// header. The status text is the instance's name (checked to be a field value when the
/// configuration is resolved) and trafik's own parameters.
struct Labels<'a> {
    status: String,
    custom: Option<(&'a HeaderName, &'a HeaderValue)>,
}

impl Labels<'_> {
    fn apply(self, headers: &mut HeaderMap) {
        // Taken as it is, not copied again.
        if let Ok(value) = HeaderValue::from_maybe_shared(Bytes::from(self.status)) {
            headers.insert(CACHE_STATUS, value);
        }
        if let Some((name, value)) = self.custom {
            headers.insert(name.clone(), value.clone());
        }
    }

    /// The fields [`Labels::apply`] leaves: a custom header named `Cache-Status` replaces the
    /// cache's own.
    fn fields(&self) -> impl Iterator<Item = (&HeaderName, &[u8])> {
        let replaced = self.custom.is_some_and(|(name, _)| *name == CACHE_STATUS);
        (!replaced)
            .then_some((&CACHE_STATUS_NAME, self.status.as_bytes()))
            .into_iter()
            .chain(self.custom.map(|(name, value)| (name, value.as_bytes())))
    }
}

/// The length the read bytes have, which the answers sent from them must say: an origin's 204
/// (whose body hyper drops) may still name one, and hyper then panics on the mismatch (or,
/// built without debug checks, sends a length and no body).
/// GET, HEAD, OPTIONS and TRACE are safe (RFC 9110 §9.2.1); any other method, known or not,
/// may change its target (RFC 9111 §4.4).
fn is_safe(method: &Method) -> bool {
    [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE].contains(method)
}

/// The host the request names (its URI's, else `Host`'s), without port.
fn request_host<B>(request: &Request<B>) -> Option<String> {
    if let Some(host) = request.uri().host() {
        return Some(host.to_owned());
    }
    let host = request.headers().get(header::HOST)?.to_str().ok()?;
    let authority: http::uri::Authority = host.parse().ok()?;
    Some(authority.host().to_owned())
}

/// The path and query a `Location` or `Content-Location` names, when it is on the request's
/// host: an absolute path, or an absolute URI of that host (RFC 9111 §4.4 forbids invalidating
/// another host's URIs). Anything else names nothing.
fn same_host_target(value: &str, request_host: Option<&str>) -> Option<String> {
    let value = value.split('#').next().unwrap_or(value);
    if value.starts_with('/') && !value.starts_with("//") {
        let path: http::uri::PathAndQuery = value.parse().ok()?;
        return Some(path.as_str().to_owned());
    }
    let uri: http::Uri = value.parse().ok()?;
    let host = uri.host()?;
    if uri.scheme().is_none() || !request_host.is_some_and(|h| h.eq_ignore_ascii_case(host)) {
        return None;
    }
    Some(uri.path_and_query().map_or("/", |p| p.as_str()).to_owned())
}

fn length_of(headers: &mut HeaderMap, status: StatusCode, len: usize) {
    if status == StatusCode::NO_CONTENT {
        headers.remove(header::CONTENT_LENGTH);
    } else {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
}

/// The answer from a stored copy, as the pipeline sends it.
fn from_store(stored: &Arc<Stored>, now: SystemTime, request: &dyn Fields) -> Response<ProxyBody> {
    Reply::new(stored.clone(), now, request).into_response()
}

/// What a stored copy answers one request with: 304 when the client's validators match it,
/// else the copy, with its `Age`. Decided once; the pipeline takes it as a `Response`, the own
/// HTTP/1 engine writes its fields as they are stored ([`HeldAnswer`]).
struct Reply {
    stored: Arc<Stored>,
    not_modified: bool,
    /// `Age`'s digits, and how many.
    age: ([u8; 20], usize),
}

impl Reply {
    fn new(stored: Arc<Stored>, now: SystemTime, request: &dyn Fields) -> Self {
        let conditional = [header::IF_NONE_MATCH, header::IF_MODIFIED_SINCE]
            .iter()
            .any(|name| request.get(name).is_some());
        let not_modified = conditional && stored.status == StatusCode::OK && {
            let modified = stored
                .last_modified()
                .and_then(trafik_cache::freshness::http_date);
            not_modified(request, stored.etag(), modified)
        };
        let mut digits = itoa::Buffer::new();
        let text = digits.format(stored.age(now).as_secs()).as_bytes();
        let mut age = ([0; 20], text.len());
        age.0[..text.len()].copy_from_slice(text);
        Reply {
            stored,
            not_modified,
            age,
        }
    }

    fn status(&self) -> StatusCode {
        match self.not_modified {
            true => StatusCode::NOT_MODIFIED,
            false => self.stored.status,
        }
    }

    /// The stored fields (a stored copy has no `Age`: `Stored::new` takes it out), then `Age`.
    /// A 304's `Content-Length` stays among them: a writer frames a 304 without one.
    fn fields(&self) -> impl Iterator<Item = (&HeaderName, &[u8])> {
        self.stored
            .headers
            .iter()
            .map(|(name, value)| (name, value.as_bytes()))
            .chain(std::iter::once((&AGE_NAME, &self.age.0[..self.age.1])))
    }

    fn body(&self) -> ProxyBody {
        match self.not_modified {
            true => ProxyBody::Local(None),
            false => ProxyBody::local(self.stored.body.clone()),
        }
    }

    fn into_response(self) -> Response<ProxyBody> {
        // A clone: cheaper than a map sized for the fields a hit adds and filled anew (measured).
        let mut headers = self.stored.headers.clone();
        if let Ok(age) = HeaderValue::from_bytes(&self.age.0[..self.age.1]) {
            headers.insert(header::AGE, age);
        }
        if self.not_modified {
            headers.remove(header::CONTENT_LENGTH);
        }
        let mut response = Response::new(self.body());
        *response.status_mut() = self.status();
        *response.headers_mut() = headers;
        response
    }
}

/// A stored copy the own HTTP/1 engine answers with, and the cache's labels for it.
pub struct Hit<'a> {
    reply: Reply,
    labels: Labels<'a>,
}

impl HeldAnswer for Hit<'_> {
    fn status(&self) -> StatusCode {
        self.reply.status()
    }

    /// The stored fields but those the labels replace (an origin's own `Cache-Status`), then
    /// the labels, as [`Labels::apply`] leaves them in a `Response`.
    fn fields(&self) -> impl Iterator<Item = (&HeaderName, &[u8])> {
        let custom = self.labels.custom.map(|(name, _)| name);
        self.reply
            .fields()
            .filter(move |(name, _)| *name != CACHE_STATUS && custom.is_none_or(|c| c != *name))
            .chain(self.labels.fields())
    }

    fn body(&self) -> ProxyBody {
        self.reply.body()
    }
}

/// An origin fetch a worker runs for the admin API (a preload) or after a stale answer (a
/// refresh).
pub struct Job {
    pub cache: String,
    pub host: String,
    pub path_and_query: String,
    /// Told whether a copy was stored.
    pub done: Option<oneshot::Sender<bool>>,
}

/// The instance's queue of [`Job`]s; any worker takes the next one.
#[derive(Default)]
pub struct Jobs {
    queue: Mutex<VecDeque<Job>>,
    ready: Notify,
}

impl Jobs {
    pub fn submit(&self, job: Job) {
        lock(&self.queue).push_back(job);
        self.ready.notify_one();
    }

    async fn next(&self) -> Job {
        loop {
            if let Some(job) = lock(&self.queue).pop_front() {
                return job;
            }
            self.ready.notified().await;
        }
    }
}

/// The most jobs one worker runs at once: a preload of a long list goes to the origin a few
/// paths at a time, not as one connection per path all at once.
pub const JOBS_AT_ONCE: usize = 32;

/// A worker's share of the jobs: each is run as its own task on this worker, at most
/// [`JOBS_AT_ONCE`] at a time (the rest wait in the queue, for any worker to take).
pub async fn run_jobs(worker: Rc<WorkerProxy>) {
    let jobs = worker.snapshot().jobs.clone();
    let running = Arc::new(Semaphore::new(JOBS_AT_ONCE));
    loop {
        let Ok(turn) = running.clone().acquire_owned().await else {
            return;
        };
        let job = jobs.next().await;
        let worker = worker.clone();
        tokio::task::spawn_local(async move {
            run_job(worker, job).await;
            drop(turn);
        });
    }
}

async fn run_job(worker: Rc<WorkerProxy>, job: Job) {
    let snapshot = worker.snapshot();
    let stored = match find_route(&snapshot, &job) {
        Some((listener, cached, captures)) => {
            let connection = ClientConnection::new(
                listener,
                SocketAddr::from(([127, 0, 0, 1], 0)),
                "http",
                None,
            );
            let mut request = job_request(&job);
            // A gateway target writes its upstream path from them, as for a client's request.
            if let Some(captures) = captures {
                request.extensions_mut().insert(captures);
            }
            let stored = cached
                .refresh(&worker, &snapshot, &connection, request)
                .await;
            if stored && job.done.is_some() {
                cached.cache.preloaded.fetch_add(1, Ordering::Relaxed);
            }
            stored
        }
        None => false,
    };
    if let Some(done) = job.done {
        let _ = done.send(stored);
    }
}

fn job_request(job: &Job) -> Request<RequestBody> {
    let host = if job.host.is_empty() {
        "localhost"
    } else {
        &job.host
    };
    let mut request = Request::new(RequestBody::empty());
    if let Ok(uri) = job.path_and_query.parse() {
        *request.uri_mut() = uri;
    }
    if let Ok(host) = HeaderValue::from_str(host) {
        request.headers_mut().insert(header::HOST, host);
    }
    request
}

/// The cached route a client's request for the job's path would take, on any listener, and
/// what its path template captured.
fn find_route<'a>(
    snapshot: &'a WorkerSnapshot,
    job: &Job,
) -> Option<(
    crate::snapshot::ListenerId,
    &'a CachedTarget,
    Option<Captures>,
)> {
    let request = job_request(job);
    snapshot.listener_ids().find_map(|id| {
        let routes = match snapshot.listener(id)? {
            Listener::Http { routes }
            | Listener::Https { routes, .. }
            | Listener::H3 { routes, .. } => routes,
            _ => return None,
        };
        // Trafik's own fetches come from the loopback address (as `run_job` says).
        let client = std::net::IpAddr::from([127, 0, 0, 1]);
        let (route, captures) = routes.find(&request, client)?;
        match &route.target {
            Target::Cached(cached) if cached.cache.plan.name == job.cache => {
                Some((id, cached, captures))
            }
            _ => None,
        }
    })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
