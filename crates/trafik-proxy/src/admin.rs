//! The admin API: `GET /status` (JSON) and `GET /metrics` (Prometheus text), both read from the
//! same counters the data plane updates.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::pool::Pool;

/// Serves the admin API on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    pools: Arc<[Arc<Pool>]>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stopping| *stopping) => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let pools = pools.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let pools = pools.clone();
                        async move { Ok::<_, Infallible>(answer(&pools, &request)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        }
    }
}

fn answer(pools: &[Arc<Pool>], request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    let known = matches!(path, "/status" | "/metrics");
    if !known {
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "unknown admin path; try /status or /metrics\n".into(),
        );
    }
    if request.method() != Method::GET {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "use GET\n".into(),
        );
    }
    if path == "/status" {
        reply(
            StatusCode::OK,
            "application/json",
            status(pools).to_string(),
        )
    } else {
        reply(StatusCode::OK, "text/plain; version=0.0.4", metrics(pools))
    }
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The status document: every pool with its backends and their counters.
pub fn status(pools: &[Arc<Pool>]) -> serde_json::Value {
    let pools: Vec<_> = pools
        .iter()
        .map(|pool| {
            let backends: Vec<_> = (0..pool.backends.len())
                .map(|i| {
                    let stats = &pool.stats[i];
                    json!({
                        "address": pool.address(i).to_string(),
                        "name": pool.display_name(i),
                        "healthy": pool.backends.is_up(i),
                        "draining": pool.backends.is_draining(i),
                        "weight": pool.backends.spec(i).weight,
                        "decisions": stats.decisions.load(Ordering::Relaxed),
                        "active_connections": pool.backends.in_flight(i),
                        "open_connections": stats.connections.load(Ordering::Relaxed),
                        "requests": stats.requests.load(Ordering::Relaxed),
                        "failures": stats.failures.load(Ordering::Relaxed),
                    })
                })
                .collect();
            json!({
                "name": pool.plan.name,
                "algorithm": pool.plan.algorithm.name(),
                "unreachable": pool.unreachable.load(Ordering::Relaxed),
                "backends": backends,
            })
        })
        .collect();
    json!({ "pools": pools })
}

/// The same counters in the Prometheus text exposition format.
pub fn metrics(pools: &[Arc<Pool>]) -> String {
    type Read = fn(&Pool, usize) -> u64;
    let families: [(&str, &str, &str, Read); 6] = [
        (
            "trafik_backend_decisions_total",
            "counter",
            "Times the selection rule chose the backend.",
            |p, i| p.stats[i].decisions.load(Ordering::Relaxed),
        ),
        (
            "trafik_backend_requests_total",
            "counter",
            "Responses the backend sent.",
            |p, i| p.stats[i].requests.load(Ordering::Relaxed),
        ),
        (
            "trafik_backend_failures_total",
            "counter",
            "Failed connects, timeouts and broken connections.",
            |p, i| p.stats[i].failures.load(Ordering::Relaxed),
        ),
        (
            "trafik_backend_active_connections",
            "gauge",
            "Requests in flight to the backend.",
            |p, i| u64::from(p.backends.in_flight(i)),
        ),
        (
            "trafik_backend_open_connections",
            "gauge",
            "Upstream TCP connections open to the backend.",
            |p, i| p.stats[i].connections.load(Ordering::Relaxed),
        ),
        (
            "trafik_backend_healthy",
            "gauge",
            "1 when health checks consider the backend up.",
            |p, i| u64::from(p.backends.is_up(i)),
        ),
    ];
    let mut out = String::with_capacity(1024);
    for (name, kind, help, read) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for pool in pools {
            for i in 0..pool.backends.len() {
                let _ = writeln!(
                    out,
                    "{name}{{pool=\"{}\",backend=\"{}\",name=\"{}\"}} {}",
                    escape(&pool.plan.name),
                    pool.address(i),
                    escape(&pool.display_name(i)),
                    read(pool, i)
                );
            }
        }
    }
    let name = "trafik_pool_unreachable_total";
    let _ = writeln!(
        out,
        "# HELP {name} Requests answered 502/503 because no backend could be reached.\n# TYPE {name} counter"
    );
    for pool in pools {
        let _ = writeln!(
            out,
            "{name}{{pool=\"{}\"}} {}",
            escape(&pool.plan.name),
            pool.unreachable.load(Ordering::Relaxed)
        );
    }
    out
}

/// Escapes a Prometheus label value.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
