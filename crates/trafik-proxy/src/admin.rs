//! The admin API: `GET /status` (JSON) and `GET /metrics` (Prometheus text), both read from the
//! same counters the data plane updates; `POST /reload`; drain and undrain.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use percent_encoding::percent_decode_str;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;
use trafik_metrics_text::{Exposition, Kind};

use crate::Instance;
use crate::counters::{BackendCounters, read, read_gauge};
use crate::http::path::escapes_are_well_formed;
use crate::http::policy::{gate, redis};
use crate::metrics::export::backend_labels;
use crate::plan::failover;
use crate::pool::Pool;
use crate::snapshot::Snapshot;

mod caches;
mod dashboard;
use trafik_runtime::admin_token as token;

pub use token::{AdminToken, Verdict};

/// Serves the admin API on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    instance: Arc<Instance>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(5);
    loop {
        let accepted = tokio::select! {
            _ = shutdown.wait_for(|stopping| *stopping) => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, client) = match accepted {
            Ok((stream, peer)) => {
                backoff = Duration::from_millis(5);
                (stream, peer.ip())
            }
            Err(error) => {
                // Out of descriptors: wait before trying again instead of spinning.
                tracing::warn!(%error, "admin accept failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let instance = instance.clone();
        let header_read_timeout = instance.snapshot().client.header_read_timeout;
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let instance = instance.clone();
                async move {
                    let page = dashboard::is_page(&request);
                    // The page needs no token (it asks for one), so a token sent with it
                    // is no guess to count.
                    let verdict = match &instance.admin_token {
                        Some(token) if !page => token.check(&request, client),
                        _ => Verdict::Admitted,
                    };
                    Ok::<_, Infallible>(if verdict == Verdict::Refused {
                        unauthorized()
                    } else if let Verdict::TooManyFailures { retry_after } = verdict {
                        too_many_failures(retry_after)
                    } else if let Some(refusal) = refusal(&instance, &request) {
                        refusal
                    } else if page {
                        dashboard::page()
                    } else if request.method() == Method::POST && request.uri().path() == "/explain"
                    {
                        explain(&instance, request).await
                    } else if request.method() == Method::POST
                        && request.uri().path() == "/explain/dns"
                    {
                        explain_dns(&instance, request).await
                    } else if caches::is_cache_path(request.uri().path()) {
                        caches::answer(&instance, request).await
                    } else {
                        answer(&instance, &request).await
                    })
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout)
                // A client may close its sending side after the request and still read the
                // answer (the fuzz target found the answer dropped when the close came first).
                .half_close(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn unauthorized() -> Response<Full<Bytes>> {
    let mut response = reply(
        StatusCode::UNAUTHORIZED,
        "text/plain",
        "the admin API needs Authorization: Bearer TOKEN ([admin] token)\n".into(),
    );
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The answer to a client that sent too many wrong tokens: its token was not looked at.
fn too_many_failures(retry_after: Duration) -> Response<Full<Bytes>> {
    let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    let mut response = reply(
        StatusCode::TOO_MANY_REQUESTS,
        "text/plain",
        format!("too many wrong admin tokens from this address; retry in {seconds} s\n"),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// The admin API's guards, before any endpoint (the cache endpoints change what every client
/// gets): a change from another origin's page, or any request to a name that is not this
/// machine's, is refused.
fn refusal(instance: &Instance, request: &Request<Incoming>) -> Option<Response<Full<Bytes>>> {
    if !request.method().is_safe() && from_a_foreign_page(request, instance.admin) {
        return Some(reply(
            StatusCode::FORBIDDEN,
            "text/plain",
            "a web page of another origin may not change trafik; use trafik reload, curl or the admin's own origin\n".into(),
        ));
    }
    let loopback = instance.admin.is_some_and(|admin| admin.ip().is_loopback());
    if loopback && !names_this_machine(request) {
        return Some(reply(
            StatusCode::FORBIDDEN,
            "text/plain",
            "the admin API answers only to an IP address or localhost in Host (a web page's name could be made to point here)\n".into(),
        ));
    }
    None
}

/// The largest `POST /explain` body read.
const MAX_EXPLAIN_BODY: usize = 64 * 1024;

/// The JSON body of an explain request, or the answer refusing it.
async fn explain_body(
    request: Request<Incoming>,
) -> Result<serde_json::Value, Response<Full<Bytes>>> {
    let body = match Limited::new(request.into_body(), MAX_EXPLAIN_BODY)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return Err(reply(
                StatusCode::BAD_REQUEST,
                "text/plain",
                format!("the body did not arrive whole within {MAX_EXPLAIN_BODY} bytes\n"),
            ));
        }
    };
    serde_json::from_slice::<serde_json::Value>(&body).map_err(|error| {
        reply(
            StatusCode::BAD_REQUEST,
            "application/json",
            json!({ "errors": [format!("the body is not JSON: {error}")] }).to_string(),
        )
    })
}

/// `POST /explain/dns`: what the live DNS server answers the question the body describes.
async fn explain_dns(instance: &Instance, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let value = match explain_body(request).await {
        Ok(value) => value,
        Err(refusal) => return refusal,
    };
    let told = trafik_dns::zone::explain::Question::from_json(&value).and_then(|question| {
        instance
            .explain_dns(&question)
            .ok_or_else(|| "this instance serves no DNS ([dns])".to_owned())
    });
    match told {
        Ok(document) => reply(StatusCode::OK, "application/json", document.to_string()),
        Err(error) => reply(
            StatusCode::BAD_REQUEST,
            "application/json",
            json!({ "errors": [error] }).to_string(),
        ),
    }
}

/// `POST /explain`: what the live instance would do with the request the body describes.
async fn explain(instance: &Arc<Instance>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let value = match explain_body(request).await {
        Ok(value) => value,
        Err(refusal) => return refusal,
    };
    let question = trafik_http::explain::Question::from_json(&value);
    match question {
        Ok(question) => {
            // A reload holds the listeners while it runs: wait for them off the admin's thread.
            let explaining = instance.clone();
            match tokio::task::spawn_blocking(move || explaining.explain(&question)).await {
                Ok(document) => reply(StatusCode::OK, "application/json", document.to_string()),
                Err(_) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    "the explanation stopped unexpectedly\n".into(),
                ),
            }
        }
        Err(error) => reply(
            StatusCode::BAD_REQUEST,
            "application/json",
            json!({ "errors": [error] }).to_string(),
        ),
    }
}

async fn answer(instance: &Arc<Instance>, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let method = request.method();
    let snapshot = instance.snapshot();
    match path {
        "/status" | "/metrics" if method != Method::GET => {
            reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "use GET\n".into())
        }
        "/status" => {
            let mut document = status(&snapshot);
            if let Some(dns) = instance.dns_status() {
                document["dns"] = dns;
            }
            document["names"] = crate::names::status(instance);
            document["certificates"] = crate::certificates::status();
            document["failover"] = failover_status(&instance.configured());
            crate::metrics::summary::add(&snapshot, &mut document);
            crate::metrics::summary::add_connection_limits(&snapshot, &mut document["listeners"]);
            reply(StatusCode::OK, "application/json", document.to_string())
        }
        "/metrics" => {
            let mut exposition = Exposition::default();
            metrics(&snapshot.pools, &mut exposition);
            caches::metrics(&snapshot, &mut exposition);
            crate::http::gateway::metrics(&snapshot, &mut exposition);
            gate::metrics(&snapshot.gates, &mut exposition);
            redis::metrics(&snapshot.global_limits, &mut exposition);
            crate::http::routing::metrics(&snapshot.routing, &mut exposition);
            snapshot.edge.metrics(&mut exposition);
            crate::concurrency::metrics(&snapshot.pools, &mut exposition);
            crate::metrics::export::write_connection_limits(&snapshot, &mut exposition);
            instance.dns_metrics(&mut exposition);
            crate::names::metrics(instance, &mut exposition);
            crate::certificates::metrics(&mut exposition);
            crate::metrics::export::write(&snapshot, &mut exposition);
            let text = exposition.into_text();
            reply(StatusCode::OK, "text/plain; version=0.0.4", text)
        }
        "/reload" if method != Method::POST => {
            reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "use POST\n".into())
        }
        "/reload" => {
            let reloading = instance.clone();
            let outcome = tokio::task::spawn_blocking(move || reloading.reload())
                .await
                .unwrap_or_else(|_| Err(vec!["the reload stopped unexpectedly".into()]));
            match outcome {
                Ok(generation) => reply(
                    StatusCode::OK,
                    "application/json",
                    json!({ "generation": generation }).to_string(),
                ),
                Err(errors) => reply(
                    StatusCode::BAD_REQUEST,
                    "application/json",
                    json!({ "errors": errors }).to_string(),
                ),
            }
        }
        "/certificates/renew" if method != Method::POST => {
            reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "use POST\n".into())
        }
        "/certificates/renew" => {
            let domain = caches::query(request)
                .into_iter()
                .find_map(|(key, value)| (key == "domain").then_some(value));
            let asked = crate::certificates::renew(domain.as_deref());
            let status = match asked.is_empty() {
                true => StatusCode::NOT_FOUND,
                false => StatusCode::ACCEPTED,
            };
            reply(
                status,
                "application/json",
                json!({ "renewing": asked }).to_string(),
            )
        }
        "/explain" | "/explain/dns" => {
            reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "use POST\n".into())
        }
        _ => match drain_target(path) {
            Some(_) if method != Method::POST => {
                reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "use POST\n".into())
            }
            Some((pool, backend, draining)) => drain(&snapshot.pools, &pool, &backend, draining),
            None => reply(
                StatusCode::NOT_FOUND,
                "text/plain",
                "unknown admin path; try / (the dashboard), /status, /metrics, POST /reload, POST /explain, POST /explain/dns, POST /certificates/renew or POST /pools/{pool}/backends/{address}/drain\n".into(),
            ),
        },
    }
}

/// Whether a browser sent this request from a page of another origin (a cross-site form or
/// script): browsers name the page's origin, other clients send none. Without this, any page a
/// user opens could drain backends or reload through a loopback admin API.
fn from_a_foreign_page<B>(request: &Request<B>, admin: Option<std::net::SocketAddr>) -> bool {
    let Some(origin) = request.headers().get(header::ORIGIN) else {
        return false;
    };
    let own = |host: &str| {
        admin.is_some_and(|admin| {
            host == admin.to_string() || host == format!("localhost:{}", admin.port())
        })
    };
    let host = origin
        .to_str()
        .ok()
        .and_then(|o| o.strip_prefix("http://"))
        .unwrap_or("");
    !own(host)
}

/// Whether `Host` names the admin listener by an IP address or `localhost` (or is absent, as
/// HTTP/1.0 allows). A page on any other name can point that name at 127.0.0.1 (DNS
/// rebinding) and then read a loopback admin API as its own origin; an address or localhost
/// it cannot. An admin API allowed remote access is reached by whatever name its users give it.
fn names_this_machine<B>(request: &Request<B>) -> bool {
    let Some(host) = request.headers().get(header::HOST) else {
        return true;
    };
    let Ok(host) = host.to_str() else {
        return false;
    };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if !host.ends_with(']') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    };
    let bracketed = name.strip_prefix('[').and_then(|n| n.strip_suffix(']'));
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::Ipv4Addr>().is_ok()
        || bracketed.is_some_and(|v6| v6.parse::<std::net::Ipv6Addr>().is_ok())
}

/// `/pools/{pool}/backends/{address}/drain` or `/undrain` → (pool, address, draining).
fn drain_target(path: &str) -> Option<(String, String, bool)> {
    let mut parts = path.strip_prefix("/pools/")?.split('/');
    let pool = percent_decode(parts.next()?)?;
    if parts.next()? != "backends" {
        return None;
    }
    let backend = percent_decode(parts.next()?)?;
    let draining = match parts.next()? {
        "drain" => true,
        "undrain" => false,
        _ => return None,
    };
    parts.next().is_none().then_some((pool, backend, draining))
}

fn drain(pools: &[Arc<Pool>], pool: &str, backend: &str, draining: bool) -> Response<Full<Bytes>> {
    let Some(found) = pools.iter().find(|p| p.plan.name == pool) else {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            format!("no pool named {pool:?}\n"),
        );
    };
    let Some(index) = found.backend_by_address(backend) else {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            format!(
                "pool {pool:?} has no backend {backend:?}; use the address as /status shows it\n"
            ),
        );
    };
    if found.backends.is_draining(index) != draining {
        found.backends.set_draining(index, draining);
        let why = match draining {
            true => "drained from the admin API",
            false => "undrained from the admin API",
        };
        found.changed(index, why);
    }
    tracing::info!(pool, backend, draining, "drain state changed");
    let body = json!({ "pool": pool, "backend": backend, "draining": draining });
    reply(StatusCode::OK, "application/json", body.to_string())
}

/// Decodes `%XX` escapes (for `[`, `]` and `:` in IPv6 addresses); `None` if malformed or
/// not UTF-8.
fn percent_decode(segment: &str) -> Option<String> {
    if !escapes_are_well_formed(segment.as_bytes()) {
        return None;
    }
    let decoded = percent_decode_str(segment).decode_utf8().ok()?;
    Some(decoded.into_owned())
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A failover budget in `/status`: its bound in seconds (null: none), whether retries hide it
/// from clients, and its text with its terms.
fn budget_json(budget: &failover::Budget) -> serde_json::Value {
    json!({
        "seconds": budget.seconds(),
        "hidden_by_retries": budget.exposure.is_some_and(|e| e.hidden()),
        "text": budget.to_string(),
    })
}

/// Each route's and each DNS policy name's failover budget in the configuration in force.
fn failover_status(plan: &crate::Plan) -> serde_json::Value {
    let budgets = failover::budgets(plan);
    let routes: Vec<_> = budgets
        .routes
        .iter()
        .map(|route| {
            let mut entry = budget_json(&route.budget);
            entry["route"] = route.route.clone().into();
            entry["pool"] = route.pool.clone().into();
            entry
        })
        .collect();
    let names: Vec<_> = budgets
        .names
        .iter()
        .map(|(name, budget)| {
            let mut entry = budget_json(budget);
            entry["name"] = name.clone().into();
            entry
        })
        .collect();
    json!({ "routes": routes, "dns": names })
}

/// The status document: the configuration in force, and every pool with its backends and
/// their counters.
pub fn status(snapshot: &Snapshot) -> serde_json::Value {
    let pools: Vec<_> = snapshot
        .pools
        .iter()
        .map(|pool| {
            let backends: Vec<_> = (0..pool.backends.len())
                .map(|i| {
                    let counters = &pool.members[i].counters;
                    let mut backend = json!({
                        "address": pool.address(i).to_string(),
                        "name": pool.display_name(i),
                        // Active checks' verdict; without checks the passive view: a backend
                        // whose latest connect failed is not called healthy.
                        "healthy": pool.backends.is_up(i)
                            && (pool.plan.health.is_some()
                                || counters.sum(|c| c.unreachable.load(Ordering::Relaxed) as i64) == 0),
                        "draining": pool.backends.is_draining(i),
                        "weight": pool.backends.spec(i).weight,
                        "decisions": counters.sum(|c| read(&c.decisions)),
                        "active_connections": counters.sum(|c| read_gauge(&c.in_flight)),
                        "open_connections": pool.members[i].endpoint.open_connections.sum(read_gauge),
                        "requests": counters.sum(|c| read(&c.requests)),
                        "failures": counters.sum(|c| read(&c.failures)),
                        "upgrades": counters.sum(|c| read(&c.upgrades)),
                        "connections": counters.sum(|c| read(&c.connections)),
                        "bytes_in": counters.sum(|c| read(&c.bytes_in)),
                        "bytes_out": counters.sum(|c| read(&c.bytes_out)),
                        "server_errors": counters.sum(|c| read(&c.served.traffic.classes[4])),
                        "state": pool.state(i).name(),
                        "flaps": pool.members[i].timeline.downs(),
                        "timeline": timeline(&pool.members[i].timeline),
                    });
                    if let Some(passive) = &pool.passive {
                        let standing = passive.standing(i);
                        backend["ejected"] = standing.ejected.into();
                        backend["ejections"] = standing.ejections.into();
                        backend["ejection_reason"] = standing.reason.map(|r| r.name()).into();
                    }
                    backend
                })
                .collect();
            let backend_errors: i64 = (0..pool.members.len())
                .map(|i| pool.members[i].counters.sum(|c| read(&c.served.traffic.classes[4])))
                .sum();
            let own: serde_json::Map<_, _> = pool
                .own_errors
                .counts()
                .map(|(reason, count)| (reason.to_owned(), count.into()))
                .collect();
            let mut entry = json!({
                "name": pool.plan.name,
                "errors": { "trafik": own, "backends": backend_errors },
                "algorithm": pool.plan.algorithm.name(),
                "unreachable": pool.unreachable.sum(read),
                "connection_skew": skew(pool, |c| read(&c.connections)),
                "request_skew": skew(pool, |c| read(&c.requests)),
                "backends": backends,
            });
            if pool.passive.is_some() {
                entry["ejected"] = pool.backends.ejected_count().into();
            }
            entry["failover"] = budget_json(&failover::pool(&pool.plan));
            entry["panic"] = pool.backends.is_panicking().into();
            entry["panics"] = pool.backends.panics().into();
            entry["retries"] = pool.retrying.sent.sum(read).into();
            entry["retries_refused"] = pool.retrying.refused.sum(read).into();
            entry["at_limit"] = pool.at_limit.sum(read).into();
            if pool.plan.max_pending > 0 {
                let queue = &pool.pending.counters;
                entry["queue"] = json!({
                    "pending": pool.pending.pending(),
                    "queued": queue.queued.load(Ordering::Relaxed),
                    "full": queue.full.load(Ordering::Relaxed),
                    "timed_out": queue.timed_out.load(Ordering::Relaxed),
                });
            }
            if let Some(concurrency) = crate::concurrency::status(pool) {
                entry["adaptive_concurrency"] = concurrency;
            }
            if let Some(sticky) = &pool.sticky {
                let counters = &sticky.counters;
                entry["sticky"] = json!({
                    "mode": sticky.mode(),
                    "bound": counters.bound.load(Ordering::Relaxed),
                    "lost": counters.lost.load(Ordering::Relaxed),
                    "rebinds": counters.rebinds.load(Ordering::Relaxed),
                });
            }
            entry
        })
        .collect();
    let (cors, compress) = snapshot.edge.status();
    json!({
        "config": {
            "generation": snapshot.generation,
            "loaded_at": humantime::format_rfc3339_seconds(snapshot.loaded_at).to_string(),
            "file": snapshot.file,
        },
        "pools": pools,
        "caches": caches::status(snapshot),
        "static": caches::sites(snapshot),
        "gateway": crate::http::gateway::status(snapshot),
        "gates": gate::status(&snapshot.gates),
        "rate_limits": redis::status(&snapshot.global_limits),
        "routing": crate::http::routing::status(&snapshot.routing),
        "cors": cors,
        "compress": compress,
    })
}

/// A backend's changes of state, oldest first: when (RFC 3339 and Unix milliseconds), the
/// state it led to, and why.
fn timeline(timeline: &crate::pool::timeline::Timeline) -> serde_json::Value {
    timeline
        .changes()
        .iter()
        .map(|change| {
            let millis = change
                .at
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_millis() as u64);
            json!({
                "at": humantime::format_rfc3339_millis(change.at).to_string(),
                "at_ms": millis,
                "state": change.state.name(),
                "reason": change.reason,
            })
        })
        .collect()
}

/// The same counters in the Prometheus text exposition format.
pub fn metrics(pools: &[Arc<Pool>], exposition: &mut Exposition) {
    type Read = fn(&Pool, usize) -> i64;
    let families: [(&str, Kind, &str, Read); 12] = [
        (
            "trafik_backend_decisions_total",
            Kind::Counter,
            "Times the selection rule chose the backend.",
            |p, i| p.members[i].counters.sum(|c| read(&c.decisions)),
        ),
        (
            "trafik_backend_requests_total",
            Kind::Counter,
            "Responses the backend sent.",
            |p, i| p.members[i].counters.sum(|c| read(&c.requests)),
        ),
        (
            "trafik_backend_failures_total",
            Kind::Counter,
            "Failed connects, timeouts and broken connections.",
            |p, i| p.members[i].counters.sum(|c| read(&c.failures)),
        ),
        (
            "trafik_backend_upgrades_total",
            Kind::Counter,
            "Connections the backend switched to another protocol (101), such as WebSockets.",
            |p, i| p.members[i].counters.sum(|c| read(&c.upgrades)),
        ),
        (
            "trafik_backend_connections_total",
            Kind::Counter,
            "TCP connections opened to the backend (upstream connections of HTTP pools, relayed client connections of tcp pools).",
            |p, i| p.members[i].counters.sum(|c| read(&c.connections)),
        ),
        (
            "trafik_backend_bytes_in_total",
            Kind::Counter,
            "Bytes read from the backend, counted on the socket.",
            |p, i| p.members[i].counters.sum(|c| read(&c.bytes_in)),
        ),
        (
            "trafik_backend_bytes_out_total",
            Kind::Counter,
            "Bytes written to the backend, counted on the socket.",
            |p, i| p.members[i].counters.sum(|c| read(&c.bytes_out)),
        ),
        (
            "trafik_backend_active_connections",
            Kind::Gauge,
            "Requests in flight to the backend.",
            |p, i| p.members[i].counters.sum(|c| read_gauge(&c.in_flight)),
        ),
        (
            "trafik_backend_open_connections",
            Kind::Gauge,
            "Upstream TCP connections open to the backend's address.",
            |p, i| p.members[i].endpoint.open_connections.sum(read_gauge),
        ),
        (
            "trafik_backend_healthy",
            Kind::Gauge,
            "1 when health checks consider the backend up.",
            |p, i| i64::from(p.backends.is_up(i)),
        ),
        (
            "trafik_backend_ejected",
            Kind::Gauge,
            "1 while passive health has ejected the backend.",
            |p, i| i64::from(p.backends.is_ejected(i)),
        ),
        (
            "trafik_backend_ejections_total",
            Kind::Counter,
            "Times passive health ejected the backend.",
            |p, i| {
                p.passive
                    .as_ref()
                    .map_or(0, |passive| passive.standing(i).ejections as i64)
            },
        ),
    ];
    for (name, kind, help, read) in families {
        let mut family = exposition.family(name, kind, help);
        for pool in pools {
            for i in 0..pool.backends.len() {
                family.sample(&backend_labels(pool, i), read(pool, i));
            }
        }
    }
    type PoolTotal = fn(&Pool) -> i64;
    let pool_totals: [(&str, &str, PoolTotal); 4] = [
        (
            "trafik_pool_panics_total",
            "Times every backend failed its health check at once and picks ignored the checks.",
            |p| p.backends.panics() as i64,
        ),
        (
            "trafik_pool_unreachable_total",
            "Requests answered 502/503 because no backend could be reached.",
            |p| p.unreachable.sum(read),
        ),
        (
            "trafik_pool_retries_total",
            "Requests sent again to another backend.",
            |p| p.retrying.sent.sum(read),
        ),
        (
            "trafik_pool_retries_refused_total",
            "Retries the retry budget refused (the client got the failure).",
            |p| p.retrying.refused.sum(read),
        ),
    ];
    for (name, help, total) in pool_totals {
        let mut family = exposition.family(name, Kind::Counter, help);
        for pool in pools {
            family.sample(&[("pool", &pool.plan.name)], total(pool));
        }
    }
    type Total = fn(&BackendCounters) -> i64;
    let skews: [(&str, &str, Total); 2] = [
        (
            "trafik_pool_connection_skew",
            "Most connections to one backend divided by the fewest; absent while a backend has none.",
            |c| read(&c.connections),
        ),
        (
            "trafik_pool_request_skew",
            "Most requests to one backend divided by the fewest; absent while a backend has none.",
            |c| read(&c.requests),
        ),
    ];
    for (name, help, total) in skews {
        let mut family = exposition.family(name, Kind::Gauge, help);
        for pool in pools {
            if let Some(skew) = skew(pool, total) {
                family.sample(&[("pool", &pool.plan.name)], skew);
            }
        }
    }
    type Sticky = fn(&crate::sticky::SessionCounters) -> u64;
    let sticky: [(&str, &str, Sticky); 3] = [
        (
            "trafik_pool_sticky_bound_total",
            "Clients bound to a backend for the first time.",
            |s| s.bound.load(Ordering::Relaxed),
        ),
        (
            "trafik_pool_sticky_lost_total",
            "Sessions lost because their backend could not take them.",
            |s| s.lost.load(Ordering::Relaxed),
        ),
        (
            "trafik_pool_sticky_rebinds_total",
            "Clients moved to another backend.",
            |s| s.rebinds.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, read) in sticky {
        let mut family = exposition.family(name, Kind::Counter, help);
        for pool in pools {
            if let Some(s) = &pool.sticky {
                let labels = [("pool", pool.plan.name.as_str()), ("mode", s.mode())];
                family.sample(&labels, read(&s.counters));
            }
        }
    }
}

/// How unevenly a pool spreads what `total` counts: the largest backend total divided by the
/// smallest. `None` where that is undefined: no backends, or one with nothing yet.
fn skew(pool: &Pool, total: fn(&BackendCounters) -> i64) -> Option<f64> {
    let totals = pool.members.iter().map(|m| m.counters.sum(total));
    let (min, max) = totals.fold((i64::MAX, 0), |(min, max), t| (min.min(t), max.max(t)));
    (!pool.members.is_empty() && min > 0).then(|| max as f64 / min as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_address_or_localhost_names_the_admin_api() {
        let with_host = |host: &str| {
            let request = Request::builder()
                .header(header::HOST, host)
                .body(())
                .unwrap();
            names_this_machine(&request)
        };
        for own in [
            "127.0.0.1:9090",
            "localhost:9090",
            "LOCALHOST",
            "[::1]:9090",
            "10.0.0.5",
        ] {
            assert!(with_host(own), "{own}");
        }
        for foreign in [
            "evil.example:9090",
            "127.0.0.1.nip.io",
            "[::1",
            "localhost.evil",
        ] {
            assert!(!with_host(foreign), "{foreign}");
        }
        assert!(names_this_machine(&Request::new(())));
    }

    #[test]
    fn drain_paths_are_parsed_and_ipv6_addresses_decoded() {
        assert_eq!(
            drain_target("/pools/takip/backends/127.0.0.1:8081/drain"),
            Some(("takip".into(), "127.0.0.1:8081".into(), true))
        );
        assert_eq!(
            drain_target("/pools/takip/backends/%5B::1%5D:8081/undrain"),
            Some(("takip".into(), "[::1]:8081".into(), false))
        );
        assert_eq!(drain_target("/pools/takip/backends/x/drain/more"), None);
        assert_eq!(drain_target("/pools/takip/kopya/x/drain"), None);
        assert_eq!(drain_target("/pools/takip/backends/%zz/drain"), None);
        assert_eq!(drain_target("/pools/takip/backends/%f"), None);
    }
}
