//! What a route does beyond one pool: the split and redirect targets, path rewrites (a
//! filter), the address rules checked before its pipeline, and their counters for `/status`.

use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use trafik_balance::WeightedSplit;
use trafik_balance::hash::stable_hash;
use trafik_gateway::template::Captures;
use trafik_metrics_text::{Exposition, Kind};
use trafik_policy::rewrite::{Asked, PathRewrite};
use trafik_policy::route_match::IpRules;

use super::body::{ProxyBody, RequestBody};
use super::filter::{Exchange, Filter, Step};
use super::service::{ClientConnection, WorkerProxy};
use super::target::PoolTarget;
use crate::counters::{PerWorker, bump, read};
use crate::plan::{RedirectPlan, SplitSticky};
use crate::snapshot::WorkerSnapshot;
use crate::sticky::find_cookie;

/// A route's routing counters, per worker.
#[derive(Default)]
pub struct RoutingCounters {
    /// Requests the address rules refused (403).
    pub denied: AtomicU64,
    /// Copies the mirror sent and whose answer came below 500…
    pub mirror_sent: AtomicU64,
    /// …not sent: outside the in-flight bound, a body too long or cut short, an upgrade…
    pub mirror_dropped: AtomicU64,
    /// …and sent but answered with 500 or more, or broken.
    pub mirror_failed: AtomicU64,
}

/// The routing counters of one route, for the admin API (they start again with each reload).
pub struct RoutingStats {
    /// `LISTENER PATH`.
    pub route: String,
    pub counters: Arc<PerWorker<RoutingCounters>>,
    pub mirror_pool: Option<String>,
    pub split: Option<Arc<SplitStats>>,
}

/// `/status`'s `routing`: one entry per route that uses address rules, a mirror or a split.
pub fn status(stats: &[RoutingStats]) -> serde_json::Value {
    let routes: Vec<_> = stats
        .iter()
        .map(|stats| {
            let counters = &stats.counters;
            let mut entry = serde_json::json!({
                "route": stats.route,
                "denied": counters.sum(|c| read(&c.denied)),
            });
            if let Some(pool) = &stats.mirror_pool {
                entry["mirror"] = serde_json::json!({
                    "pool": pool,
                    "sent": counters.sum(|c| read(&c.mirror_sent)),
                    "dropped": counters.sum(|c| read(&c.mirror_dropped)),
                    "failed": counters.sum(|c| read(&c.mirror_failed)),
                });
            }
            if let Some(split) = &stats.split {
                let pools: Vec<_> = split
                    .pools
                    .iter()
                    .zip(&split.picks)
                    .map(|(pool, picks)| {
                        serde_json::json!({"pool": pool, "picks": picks.load(Ordering::Relaxed)})
                    })
                    .collect();
                entry["split"] = serde_json::json!({
                    "pools": pools,
                    "kept": split.kept.load(Ordering::Relaxed),
                });
            }
            entry
        })
        .collect();
    serde_json::Value::Array(routes)
}

/// The same counters in Prometheus text; nothing without a route that has any.
pub fn metrics(stats: &[RoutingStats], exposition: &mut Exposition) {
    if stats.is_empty() {
        return;
    }
    let mut denied = exposition.family(
        "trafik_route_denied_total",
        Kind::Counter,
        "Requests a route's address rules refused (403).",
    );
    for route in stats {
        let count = route.counters.sum(|c| read(&c.denied));
        denied.sample(&[("route", route.route.as_str())], count);
    }
    let mut mirrored = exposition.family(
        "trafik_route_mirror_copies_total",
        Kind::Counter,
        "Copies a route's mirror sent (answered below 500), dropped unsent, or saw fail.",
    );
    for route in stats.iter().filter(|r| r.mirror_pool.is_some()) {
        let counters = &route.counters;
        let outcomes = [
            ("sent", counters.sum(|c| read(&c.mirror_sent))),
            ("dropped", counters.sum(|c| read(&c.mirror_dropped))),
            ("failed", counters.sum(|c| read(&c.mirror_failed))),
        ];
        for (outcome, count) in outcomes {
            mirrored.sample(
                &[("route", route.route.as_str()), ("outcome", outcome)],
                count,
            );
        }
    }
    let mut picks = exposition.family(
        "trafik_route_split_picks_total",
        Kind::Counter,
        "Requests a route's split sent to each pool.",
    );
    for route in stats {
        let Some(split) = &route.split else {
            continue;
        };
        for (pool, count) in split.pools.iter().zip(&split.picks) {
            let labels = [("route", route.route.as_str()), ("pool", pool.as_str())];
            picks.sample(&labels, count.load(Ordering::Relaxed));
        }
    }
}

/// Whether every address rule of the route admits `client`; a refusal is counted.
pub fn admitted(
    access: &[IpRules],
    client: IpAddr,
    counters: &PerWorker<RoutingCounters>,
    worker: usize,
) -> bool {
    let admitted = access.iter().all(|rules| rules.admits(client));
    if !admitted {
        bump(&counters.mine(worker).denied);
    }
    admitted
}

/// A split's picks by pool, and how many requests a sticky client's key kept where it was.
pub struct SplitStats {
    pub pools: Vec<String>,
    pub picks: Box<[AtomicU64]>,
    pub kept: AtomicU64,
}

/// Pools by weight: each request draws one, or keeps the one its cookie or header names.
pub struct SplitTarget {
    shares: Vec<PoolTarget>,
    choice: WeightedSplit,
    sticky: Option<SplitSticky>,
    /// With cookie stickiness: each share's `Set-Cookie`.
    cookies: Vec<HeaderValue>,
    pub stats: Arc<SplitStats>,
}

impl SplitTarget {
    /// `shares` are the pools' indices and names with their weights.
    pub fn new(
        shares: Vec<(usize, String, u32)>,
        sticky: Option<SplitSticky>,
        retry: bool,
    ) -> Self {
        let weights: Vec<u32> = shares.iter().map(|(_, _, weight)| *weight).collect();
        let cookies = match &sticky {
            Some(SplitSticky::Cookie(name)) => shares
                .iter()
                .filter_map(|(_, pool, _)| {
                    let text = format!("{name}={pool}; Path=/; HttpOnly; SameSite=Lax");
                    HeaderValue::from_str(&text).ok()
                })
                .collect(),
            _ => Vec::new(),
        };
        let stats = Arc::new(SplitStats {
            pools: shares.iter().map(|(_, pool, _)| pool.clone()).collect(),
            picks: shares.iter().map(|_| AtomicU64::new(0)).collect(),
            kept: AtomicU64::new(0),
        });
        SplitTarget {
            shares: shares
                .into_iter()
                .map(|(pool, _, _)| PoolTarget {
                    pool,
                    retry_non_idempotent: retry,
                })
                .collect(),
            choice: WeightedSplit::new(&weights),
            sticky,
            cookies,
            stats,
        }
    }

    /// The share for `request`, and whether the answer gives the client a cookie naming it.
    fn choose<B>(&self, request: &Request<B>) -> (usize, bool) {
        let draw = match self.draw(request) {
            Draw::Cookie(index) => {
                self.stats.kept.fetch_add(1, Ordering::Relaxed);
                return (index, false);
            }
            Draw::Header(hash) => {
                self.stats.kept.fetch_add(1, Ordering::Relaxed);
                hash
            }
            Draw::Random => fastrand::u64(..),
        };
        let index = self.choice.pick(draw).unwrap_or(0);
        let bind = matches!(self.sticky, Some(SplitSticky::Cookie(_)));
        (index, bind)
    }

    /// How `request`'s share is drawn, without counting it.
    fn draw<B>(&self, request: &Request<B>) -> Draw {
        match &self.sticky {
            Some(SplitSticky::Cookie(name)) => find_cookie(request, name)
                .and_then(|pool| self.stats.pools.iter().position(|p| p == pool))
                .map_or(Draw::Random, Draw::Cookie),
            Some(SplitSticky::Header(name)) => {
                request.headers().get(name).map_or(Draw::Random, |value| {
                    Draw::Header(stable_hash(value.as_bytes()))
                })
            }
            None => Draw::Random,
        }
    }

    /// The pool `request` would go to when its stickiness decides it, and why (`trafik
    /// explain`); `None` for a random draw, which no explanation can foretell.
    pub fn explain<B>(&self, request: &Request<B>) -> (Option<&PoolTarget>, String) {
        let shares = self.share_list();
        match self.draw(request) {
            Draw::Cookie(index) => (
                self.shares.get(index),
                format!(
                    "a weighted split ({shares}): the client's cookie keeps it on {}",
                    self.stats.pools[index]
                ),
            ),
            Draw::Header(hash) => {
                let index = self.choice.pick(hash).unwrap_or(0);
                (
                    self.shares.get(index),
                    format!(
                        "a weighted split ({shares}): the sticky header's value hashes to {}",
                        self.stats.pools[index]
                    ),
                )
            }
            Draw::Random => (
                None,
                format!(
                    "a weighted split ({shares}): a random draw by weight picks the pool, which no explanation can foretell"
                ),
            ),
        }
    }

    fn share_list(&self) -> String {
        let weights = self.choice.weights();
        self.stats
            .pools
            .iter()
            .zip(weights)
            .map(|(pool, weight)| format!("{pool} {weight}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub async fn serve(
        &self,
        worker: &WorkerProxy,
        snapshot: &Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        request: Request<RequestBody>,
    ) -> (Response<ProxyBody>, Option<std::net::SocketAddr>) {
        let (index, bind) = self.choose(&request);
        self.stats.picks[index].fetch_add(1, Ordering::Relaxed);
        let (mut response, backend) = self.shares[index]
            .serve(worker, snapshot, connection, request)
            .await;
        if bind && let Some(cookie) = self.cookies.get(index) {
            response
                .headers_mut()
                .append(header::SET_COOKIE, cookie.clone());
        }
        (response, backend)
    }
}

/// How a split's share is drawn for one request.
enum Draw {
    /// The cookie names this share.
    Cookie(usize),
    /// The sticky header's value, hashed.
    Header(u64),
    Random,
}

/// Answers every request with a redirect written from its template.
pub struct RedirectTarget {
    pub plan: RedirectPlan,
}

impl RedirectTarget {
    pub fn serve(
        &self,
        connection: &ClientConnection,
        request: &Request<RequestBody>,
    ) -> Response<ProxyBody> {
        let host = request
            .uri()
            .authority()
            .map(|a| a.as_str())
            .or_else(|| request.headers().get(header::HOST)?.to_str().ok())
            .unwrap_or("");
        let captures = request
            .extensions()
            .get::<Captures>()
            .map_or(&[][..], |c| &c.0);
        let location = self.plan.to.location(
            &Asked {
                scheme: connection.forwarding.scheme(),
                host,
                path: request.uri().path(),
                query: request.uri().query(),
                captures,
            },
            self.plan.keep_query,
        );
        let Ok(location) = HeaderValue::from_str(&location) else {
            return super::policy::refusal(
                StatusCode::BAD_REQUEST,
                "this request cannot be redirected",
            );
        };
        let mut response = Response::new(ProxyBody::local(Bytes::new()));
        *response.status_mut() =
            StatusCode::from_u16(self.plan.status).unwrap_or(StatusCode::FOUND);
        response.headers_mut().insert(header::LOCATION, location);
        response
    }
}

/// Rewrites the path sent upstream (and seen by the cache's key after it), keeping the query.
pub struct RewritePath(pub PathRewrite);

impl Filter for RewritePath {
    fn head_only(&self) -> bool {
        true
    }

    fn upstream_path(&self, path: &str) -> Option<String> {
        self.0.apply(path)
    }

    fn on_request(&self, request: &mut Request<RequestBody>, _: &Exchange<'_>) -> Step {
        if let Some(path) = self.0.apply(request.uri().path()) {
            super::service::replace_path(request.uri_mut(), &path);
        }
        Step::Continue
    }
}
