//! Layer-4 listeners and the pools they use. A `tcp` listener names its `pool`; a
//! `tls-passthrough` listener has routes that match the server name (`sni`) of the client's
//! ClientHello, one of them possibly without `sni` for the rest. Their pools see connections,
//! not requests, so a few pool settings mean something else there, or nothing.

use toml::Spanned;
use trafik_proxy::{ListenerKind, ProxyProtocol, ServerNamePattern, SniRoutePlan};

use super::listener::pool_index;
use super::report::Report;
use super::schema::{Listener, Pool, Route, is_written};

/// The names of the pools that layer-4 listeners send connections to.
pub fn pools(listeners: &[Spanned<Listener>]) -> Vec<String> {
    let mut names = Vec::new();
    for listener in listeners.iter().map(Spanned::get_ref) {
        if !listener.protocol.get_ref().is_layer4() {
            continue;
        }
        let routes = listener
            .routes
            .iter()
            .filter_map(|r| r.get_ref().pool.as_ref());
        for pool in listener.pool.iter().chain(routes) {
            names.push(pool.get_ref().clone());
        }
    }
    names
}

/// A `tcp` listener: every connection to its `pool`.
pub fn tcp(
    report: &mut Report,
    field: &str,
    span: std::ops::Range<usize>,
    listener: Listener,
    pools: &[Option<String>],
) -> Option<ListenerKind> {
    if let Some(route) = listener.routes.first() {
        report.error(
            route.span(),
            &format!("{field}.route"),
            "a tcp listener sends every connection to its `pool` and has no routes; to choose the pool by the TLS server name, use protocol = \"tls-passthrough\"",
        );
    }
    let pool = report
        .required(
            listener.pool.as_ref(),
            span,
            &format!("{field}.pool"),
            "pool = \"takip\", the pool that gets every connection",
        )
        .and_then(|pool| pool_index(report, field, pool, pools))?;
    Some(ListenerKind::Tcp {
        pool: pools[pool].clone()?,
    })
}

/// A `tls-passthrough` listener: routes by server name.
pub fn passthrough(
    report: &mut Report,
    field: &str,
    span: std::ops::Range<usize>,
    listener: Listener,
    pools: &[Option<String>],
) -> Option<ListenerKind> {
    if let Some(pool) = &listener.pool {
        report.error(
            pool.span(),
            &format!("{field}.pool"),
            "a tls-passthrough listener chooses the pool by its routes' `sni`; a [[listener.route]] without `sni` takes the other connections",
        );
    }
    if listener.routes.is_empty() {
        report.error(
            span,
            &format!("{field}.route"),
            "a tls-passthrough listener needs at least one [[listener.route]] with a pool (and sni = \"kargo.example\" to match a server name)",
        );
    }
    let mut taken = Vec::new();
    let routes: Vec<Option<SniRoutePlan>> = listener
        .routes
        .into_iter()
        .enumerate()
        .map(|(r, route)| {
            let field = format!("{field}.route[{r}]");
            sni_route(report, &field, route, pools, &mut taken)
        })
        .collect();
    Some(ListenerKind::TlsPassthrough {
        routes: routes.into_iter().collect::<Option<_>>()?,
    })
}

/// `taken` holds the server names (and `None`, the rest) earlier routes took.
fn sni_route(
    report: &mut Report,
    field: &str,
    route: Spanned<Route>,
    pools: &[Option<String>],
    taken: &mut Vec<Option<ServerNamePattern>>,
) -> Option<SniRoutePlan> {
    let span = route.span();
    let route = route.into_inner();
    // Each HTTP key written, and where (the route, for keys read without a place).
    let http_only = [
        (
            "path_prefix",
            is_written(&route.path_prefix).then(|| route.path_prefix.span()),
        ),
        ("host", route.host.is_some().then(|| span.clone())),
        ("methods", route.methods.first().map(Spanned::span)),
        (
            "retry_non_idempotent",
            route.retry_non_idempotent.then(|| span.clone()),
        ),
        (
            "request_body_limit",
            route.request_body_limit.as_ref().map(Spanned::span),
        ),
        (
            "request_buffering",
            route.request_buffering.as_ref().map(Spanned::span),
        ),
        (
            "request_headers",
            route.request_headers.first().map(Spanned::span),
        ),
        (
            "response_headers",
            route.response_headers.first().map(Spanned::span),
        ),
    ];
    for (key, place) in http_only.into_iter().chain(super::routing::written(&route)) {
        let Some(place) = place else {
            continue;
        };
        report.error(
            place,
            &format!("{field}.{key}"),
            format!(
                "`{key}` reads HTTP requests, which a tls-passthrough listener never decrypts; match the server name with sni = \"kargo.example\""
            ),
        );
    }
    let pool = report
        .required(
            route.pool.as_ref(),
            span.clone(),
            &format!("{field}.pool"),
            "pool = \"takip\", the pool that gets these connections",
        )
        .and_then(|pool| pool_index(report, field, pool, pools));
    let (server_name, place) = match &route.sni {
        Some(sni) => match sni.get_ref().parse::<ServerNamePattern>() {
            Ok(pattern) => (Some(pattern), sni.span()),
            Err(message) => {
                report.error(sni.span(), &format!("{field}.sni"), message);
                return None;
            }
        },
        None => (None, span),
    };
    if taken.contains(&server_name) {
        let what = match &server_name {
            Some(pattern) => format!("server name {pattern}"),
            None => "the connections no `sni` matches (a route without `sni`)".to_owned(),
        };
        report.error(
            place,
            &format!("{field}.sni"),
            format!("another route of this listener already takes {what}"),
        );
    }
    taken.push(server_name.clone());
    Some(SniRoutePlan {
        server_name,
        pool: pools[pool?].clone()?,
    })
}

/// What only layer-4 pools may set, or must not: a pool of a layer-4 listener sees a client's
/// address and nothing of its requests. Returns the PROXY protocol version to send.
pub fn check_pool(
    report: &mut Report,
    field: &str,
    pool: &Pool,
    layer4: bool,
) -> Option<ProxyProtocol> {
    let proxy_protocol = pool.proxy_protocol.as_ref().and_then(|version| {
        if !layer4 {
            report.error(
                version.span(),
                &format!("{field}.proxy_protocol"),
                "the PROXY protocol header goes on layer-4 connections only: this pool serves HTTP routes, whose kept-alive upstream connections carry many clients (name the pool from a tcp or tls-passthrough listener)",
            );
        }
        version
            .get_ref()
            .parse::<ProxyProtocol>()
            .map_err(|message| {
                report.error(version.span(), &format!("{field}.proxy_protocol"), message)
            })
            .ok()
    });
    if !layer4 {
        return proxy_protocol;
    }
    if let Some(key) = &pool.hash_key
        && key.get_ref() != "client-ip"
    {
        report.error(
            key.span(),
            &format!("{field}.hash_key"),
            format!(
                "a pool of a tcp or tls-passthrough listener sees connections, not requests: it can key on client-ip only, found {:?}",
                key.get_ref()
            ),
        );
    }
    if let Some(sticky) = &pool.sticky
        && sticky.get_ref().mode.get_ref() == "cookie"
    {
        let mode = &sticky.get_ref().mode;
        report.error(
            if is_written(mode) { mode.span() } else { sticky.span() },
            &format!("{field}.sticky.mode"),
            "cookie stickiness needs HTTP; a pool of a tcp or tls-passthrough listener can stick by hash_key = \"client-ip\" with mode = \"modulo\" or \"consistent\"",
        );
    }
    if let Some(adaptive) = &pool.adaptive_concurrency {
        report.error(
            adaptive.span(),
            &format!("{field}.adaptive_concurrency"),
            "the adaptive concurrency limit follows the latency of HTTP answers; a pool of a tcp or tls-passthrough listener sees none (name it from an http listener's route)",
        );
    }
    // Settings about answers mean nothing to a relay that never reads one: refused rather than
    // accepted and ignored. (Retries, their budget, passive health, slow start, the circuit
    // breaker and its queue all work on connections.)
    let about_answers = [
        (
            "retry_statuses",
            is_written(&pool.retry_statuses).then(|| pool.retry_statuses.span()),
            "statuses are in HTTP answers; a layer-4 pool retries failed connects only (remove it)",
        ),
        (
            "retry_backoff",
            is_written(&pool.retry_backoff).then(|| pool.retry_backoff.span()),
            "a failed connect is retried at once, as on HTTP pools; the backoff is for requests a backend lost, which a layer-4 relay cannot send again (remove it)",
        ),
        (
            "timeouts.response",
            is_written(&pool.timeouts.response).then(|| pool.timeouts.response.span()),
            "a layer-4 relay waits for no answer; the listener's idle timeout ends a silent connection (remove it, or set [server.timeouts] idle)",
        ),
        (
            "protocol",
            pool.protocol.as_ref().map(Spanned::span),
            "a layer-4 relay copies bytes and speaks no HTTP to its backends (remove it)",
        ),
        (
            "tls",
            (*pool.tls.get_ref()).then(|| pool.tls.span()),
            "a layer-4 relay passes the client's bytes as they are and cannot speak TLS to the backends (serve the route from an http or https listener, or use tls-passthrough)",
        ),
    ];
    for (key, span, message) in about_answers {
        if let Some(span) = span {
            report.error(span, &format!("{field}.{key}"), message);
        }
    }
    proxy_protocol
}
