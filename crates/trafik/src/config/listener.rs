//! `[[listener]]` and its `[[listener.route]]`s: where clients connect, and which pool gets
//! which request.

use http::{HeaderName, HeaderValue, Method};
use toml::Spanned;
use trafik_proxy::{FilterPlan, ListenerKind, ListenerPlan, RoutePlan, TargetPlan};

use super::gateway;
use super::report::Report;
use super::schema::{Listener, Protocol, Route};
use super::tls;
use super::values::Buffering;
use super::{cache, compress, cors, gate, jwt, layer4, rate_limit, routing, static_files};
use crate::suggest::did_you_mean;

/// The most a buffered request body may hold when its route sets no `request_body_limit`.
const BUFFERED_BODY_LIMIT: u64 = 1 << 30;

/// `pools` is every pool's name by position; `layer4_pools` those that layer-4 listeners use.
pub fn check_all(
    report: &mut Report,
    listeners: Vec<Spanned<Listener>>,
    pools: &[Option<String>],
    layer4_pools: &[String],
    caches: &cache::Known,
) -> Option<Vec<ListenerPlan>> {
    if listeners.is_empty() {
        report.error(
            0..0,
            "listener",
            "no listener: add a [[listener]] with a name, a listen address and at least one [[listener.route]]",
        );
    }
    // HTTP-01 challenges are answered by the plain listeners.
    let has_plain = listeners
        .iter()
        .any(|listener| *listener.get_ref().protocol.get_ref() == Protocol::Http);
    let mut names: Vec<String> = Vec::new();
    let mut addresses = Vec::new();
    let mut plans = Vec::new();
    let mut protocol_spans = Vec::new();
    for (i, listener) in listeners.into_iter().enumerate() {
        let field = format!("listener[{i}]");
        protocol_spans.push(listener.get_ref().protocol.span());
        if let Some(listen) = &listener.get_ref().listen {
            // An h3 listener's UDP port may be an https listener's TCP port.
            let address = (
                listen.get_ref().0,
                *listener.get_ref().protocol.get_ref() == Protocol::H3,
            );
            if address.0.port() != 0 && addresses.contains(&address) {
                report.error(
                    listen.span(),
                    &format!("{field}.listen"),
                    format!(
                        "another listener already listens on {}; give each its own address",
                        address.0
                    ),
                );
            }
            addresses.push(address);
        }
        if let Some(name) = &listener.get_ref().name {
            if names.contains(name.get_ref()) {
                report.error(
                    name.span(),
                    &format!("{field}.name"),
                    format!(
                        "listener {:?} is defined twice; names must be unique",
                        name.get_ref()
                    ),
                );
            }
            names.push(name.get_ref().clone());
        }
        plans.push(check(
            report,
            &field,
            listener,
            (pools, layer4_pools),
            caches,
            has_plain,
        ));
    }
    for (i, span) in protocol_spans.into_iter().enumerate() {
        inherit_from_https(
            report,
            &format!("listener[{i}]"),
            span.clone(),
            &mut plans,
            i,
        );
        refuse_a_way_round_mutual_tls(report, &format!("listener[{i}]"), span, &plans, i);
    }
    plans.into_iter().collect()
}

/// An h3 listener with routes of its own beside an https listener that asks clients for
/// certificates must ask for them too: its answers are advertised by that listener's
/// `Alt-Svc`, so clients would move to it and go round mutual TLS.
fn refuse_a_way_round_mutual_tls(
    report: &mut Report,
    field: &str,
    span: std::ops::Range<usize>,
    plans: &[Option<ListenerPlan>],
    index: usize,
) {
    let Some(ListenerPlan {
        address,
        kind: ListenerKind::H3 {
            client_auth: None, ..
        },
        ..
    }) = &plans[index]
    else {
        return;
    };
    let twin_asks = plans.iter().flatten().any(|plan| {
        plan.address == *address
            && matches!(
                plan.kind,
                ListenerKind::Https {
                    client_auth: Some(_),
                    ..
                }
            )
    });
    if twin_asks {
        report.error(
            span,
            &format!("{field}.client_ca"),
            format!(
                "the https listener on {address} asks clients for certificates, and its Alt-Svc sends them here: ask for them too (client_ca), or name no routes and certificates to serve that listener's, mutual TLS included"
            ),
        );
    }
}

/// An h3 listener that names neither routes nor certificates serves those of the https
/// listener on the same address (its TCP twin), mutual TLS included: a client the twin asks
/// for a certificate cannot go round it over QUIC. Without a twin it has no certificate.
fn inherit_from_https(
    report: &mut Report,
    field: &str,
    span: std::ops::Range<usize>,
    plans: &mut [Option<ListenerPlan>],
    index: usize,
) {
    let Some(ListenerPlan {
        address,
        kind:
            ListenerKind::H3 {
                routes,
                certificates,
                managed,
                ..
            },
        ..
    }) = &plans[index]
    else {
        return;
    };
    if !(routes.is_empty() && certificates.is_empty() && managed.is_empty()) {
        return;
    }
    let address = *address;
    let twin = plans.iter().flatten().find_map(|plan| match &plan.kind {
        ListenerKind::Https {
            routes,
            certificates,
            managed,
            client_auth,
        } if plan.address == address => Some(ListenerKind::H3 {
            routes: routes.clone(),
            certificates: certificates.clone(),
            managed: managed.clone(),
            client_auth: client_auth.clone(),
        }),
        _ => None,
    });
    match twin {
        Some(twin) => {
            if let Some(plan) = &mut plans[index] {
                plan.kind = twin;
            }
        }
        None => report.error(
            span,
            &format!("{field}.tls"),
            format!(
                "an h3 listener needs a certificate: put it on the address of an https listener ({address}, which has none) to serve that listener's certificates and routes, or give it [[listener.tls]] and [[listener.route]]s of its own"
            ),
        ),
    }
}

fn check(
    report: &mut Report,
    field: &str,
    listener: Spanned<Listener>,
    (pools, layer4_pools): (&[Option<String>], &[String]),
    caches: &cache::Known,
    has_plain: bool,
) -> Option<ListenerPlan> {
    let span = listener.span();
    let mut listener = listener.into_inner();
    let name = report.required(
        listener.name.take(),
        span.clone(),
        &format!("{field}.name"),
        "name = \"web\", the name logs and the plan use",
    );
    let listen = report.required(
        listener.listen.take(),
        span.clone(),
        &format!("{field}.listen"),
        "listen = \"127.0.0.1:8080\", where clients connect",
    );
    let protocol = listener.protocol.clone();
    let connections = trafik_proxy::ConnectionLimits {
        max_connections: listener.max_connections,
        max_connections_per_client: listener.max_connections_per_client,
    };
    if protocol.get_ref().is_layer4()
        && (listener.redirect_https || !listener.allow.is_empty() || !listener.deny.is_empty())
    {
        report.error(
            protocol.span(),
            &format!("{field}.protocol"),
            "redirect_https, allow and deny are for http and https listeners; a layer-4 listener relays bytes without answering requests",
        );
    }
    let kind = match protocol.get_ref() {
        // Neither routes nor certificates: those of the https listener on the same address.
        Protocol::H3 if listener.routes.is_empty() && listener.tls.is_empty() => {
            refuse_a_twins_own_client_ca(report, field, &listener);
            if listener.redirect_https
                || !listener.allow.is_empty()
                || !listener.deny.is_empty()
                || listener.pool.is_some()
            {
                report.error(
                    protocol.span(),
                    &format!("{field}.protocol"),
                    "an h3 listener without routes serves the https listener's routes as they are: set allow, deny (or anything else about routes) on that listener",
                );
            }
            Some(ListenerKind::H3 {
                routes: Vec::new(),
                certificates: Vec::new(),
                managed: Vec::new(),
                client_auth: None,
            })
        }
        Protocol::Http | Protocol::Https | Protocol::H3 => http(
            report,
            field,
            span,
            listener,
            (pools, layer4_pools),
            caches,
            has_plain,
        ),
        Protocol::Tcp => layer4::tcp(report, field, span, listener, pools),
        Protocol::TlsPassthrough => layer4::passthrough(report, field, span, listener, pools),
    };
    Some(ListenerPlan {
        name: name?.into_inner(),
        address: listen?.get_ref().0,
        kind: kind?,
        connections,
    })
}

/// A bare h3 twin asks for client certificates as its https listener does: a `client_ca` of
/// its own would be ignored, so it is refused rather than seem to apply.
fn refuse_a_twins_own_client_ca(report: &mut Report, field: &str, listener: &Listener) {
    if let Some(client_ca) = &listener.client_ca {
        report.error(
            client_ca.span(),
            &format!("{field}.client_ca"),
            "an h3 listener without certificates takes the https listener's, mutual TLS included: set client_ca on that listener (or give this one [[listener.tls]] and routes of its own)",
        );
    }
}

/// An `http` or `https` listener: each request to the pool of the route it matches.
fn http(
    report: &mut Report,
    field: &str,
    span: std::ops::Range<usize>,
    listener: Listener,
    (pools, layer4_pools): (&[Option<String>], &[String]),
    caches: &cache::Known,
    has_plain: bool,
) -> Option<ListenerKind> {
    if let Some(pool) = &listener.pool {
        report.error(
            pool.span(),
            &format!("{field}.pool"),
            "an http listener sends each request to the pool of the route it matches; `pool` is for tcp listeners (protocol = \"tcp\")",
        );
    }
    let client_auth = tls::client_auth(report, field, &listener);
    let certificates = tls::listener(report, field, &listener.protocol, listener.tls, has_plain);
    let access = routing::listener_access(report, field, &listener.allow, &listener.deny);
    if listener.redirect_https {
        if *listener.protocol.get_ref() != Protocol::Http {
            report.error(
                listener.protocol.span(),
                &format!("{field}.redirect_https"),
                "redirect_https sends a plain listener's clients to https; this listener is not plain http",
            );
        }
        if let Some(route) = listener.routes.first() {
            report.error(
                route.span(),
                &format!("{field}.route"),
                "a listener with redirect_https answers every request with the redirect itself; it has no routes",
            );
        }
        let mut route = RoutePlan::redirect_https();
        route.routing.access = access.into_iter().collect();
        return Some(ListenerKind::Http {
            routes: vec![route],
        });
    }
    if listener.routes.is_empty() {
        report.error(
            span,
            &format!("{field}.route"),
            "a listener needs at least one [[listener.route]] saying which pool gets its requests",
        );
    }
    let routes: Option<Vec<RoutePlan>> = listener
        .routes
        .into_iter()
        .enumerate()
        .map(|(r, route)| {
            let field = format!("{field}.route[{r}]");
            check_route(report, &field, route, &access, pools, layer4_pools, caches)
        })
        .collect::<Vec<_>>()
        .into_iter()
        .collect();
    let (routes, (certificates, managed), client_auth) = (routes?, certificates?, client_auth?);
    Some(match listener.protocol.into_inner() {
        Protocol::H3 => ListenerKind::H3 {
            routes,
            certificates,
            managed,
            client_auth,
        },
        Protocol::Https => ListenerKind::Https {
            routes,
            certificates,
            managed,
            client_auth,
        },
        _ => ListenerKind::Http { routes },
    })
}

fn check_route(
    report: &mut Report,
    field: &str,
    route: Spanned<Route>,
    access: &Option<trafik_policy::route_match::IpRules>,
    pools: &[Option<String>],
    layer4_pools: &[String],
    caches: &cache::Known,
) -> Option<RoutePlan> {
    let span = route.span();
    let route = route.into_inner();
    if let Some(sni) = &route.sni {
        report.error(
            sni.span(),
            &format!("{field}.sni"),
            "`sni` matches the server name of TLS connections relayed by a tls-passthrough listener; an http route matches `host` and `path_prefix`",
        );
    }
    if let Some(pool) = &route.pool
        && layer4_pools.contains(pool.get_ref())
    {
        report.error(
            pool.span(),
            &format!("{field}.pool"),
            format!(
                "pool {:?} also takes the connections of a tcp or tls-passthrough listener; HTTP routes and layer-4 listeners need pools of their own (one counts requests, the other connections)",
                pool.get_ref()
            ),
        );
    }
    let template = gateway::path_template(report, field, &route);
    let files = static_files::check(report, field, &route);
    let target = if routing::has_target(&route) {
        let captures = template.as_ref().map_or(&[][..], |t| t.names());
        routing::target(report, field, &route, captures, pools)
    } else if gateway::is_gateway(&route) {
        let captures = template.as_ref().map_or(&[][..], |t| t.names());
        let broken_template = route.path.is_some() && template.is_none();
        (!broken_template)
            .then(|| gateway::target(report, field, span, &route, captures, pools))
            .flatten()
    } else if let Some(files) = files {
        files
    } else {
        report
            .required(
                route.pool.as_ref(),
                span,
                &format!("{field}.pool"),
                "pool = \"takip\", the pool that answers this route (or static = \"DIR\" for files)",
            )
            .and_then(|pool| pool_index(report, field, pool, pools))
            .and_then(|index| pools[index].clone())
            .map(|pool| TargetPlan::Pool {
                pool,
                retry_non_idempotent: route.retry_non_idempotent,
            })
    };
    let cache = route
        .cache
        .as_ref()
        .and_then(|name| cache_named(report, field, name, caches));
    let prefix = route.path_prefix.get_ref();
    if !prefix.starts_with('/') {
        report.error(
            route.path_prefix.span(),
            &format!("{field}.path_prefix"),
            format!("expected a path starting with \"/\", found {prefix:?}"),
        );
    } else {
        // Requests are matched in normal form, so a prefix in another form would never match.
        match trafik_proxy::http::path::normalize(prefix) {
            Ok(None) => {}
            Ok(Some(normal)) => report.error(
                route.path_prefix.span(),
                &format!("{field}.path_prefix"),
                format!("requests are matched in normal form, so {prefix:?} would never match: write {normal:?}"),
            ),
            Err(_) => report.error(
                route.path_prefix.span(),
                &format!("{field}.path_prefix"),
                format!("{prefix:?} has a malformed escape, an encoded slash or backslash, or a dot segment with parameters; such paths are refused"),
            ),
        }
    }
    let mut methods = Vec::new();
    for method in &route.methods {
        let text = method.get_ref();
        match Method::from_bytes(text.as_bytes()) {
            Ok(parsed) if text.bytes().all(|b| b.is_ascii_uppercase()) => methods.push(parsed),
            _ => report.error(
                method.span(),
                &format!("{field}.methods"),
                format!(
                    "expected an HTTP method in capitals such as \"GET\" or \"POST\", found {text:?}"
                ),
            ),
        }
    }
    let mut filters = check_filters(report, field, &route);
    filters.extend(routing::rewrites(report, field, &route));
    let routing = routing::check(report, field, &route, access, pools);
    let target = match (route.cache.is_some(), cache) {
        // The cache's own errors, or the name's, are reported.
        (true, None) => return None,
        (_, Some(cache)) => TargetPlan::Cached {
            cache,
            target: Box::new(target?),
        },
        (false, None) => target?,
    };
    let mut plan = route_plan(route, methods, filters, target, template);
    plan.routing = routing;
    Some(plan)
}

/// The plan of the cache a route names, or an error naming the caches there are.
fn cache_named(
    report: &mut Report,
    field: &str,
    wanted: &Spanned<String>,
    caches: &cache::Known,
) -> Option<std::sync::Arc<trafik_proxy::CachePlan>> {
    let found = caches.iter().find(|(name, _)| name == wanted.get_ref());
    if found.is_none() {
        let defined: Vec<&str> = caches.iter().map(|(n, _)| n.as_str()).collect();
        let hint = did_you_mean(wanted.get_ref(), defined.iter().copied())
            .map(|s| format!("; did you mean {s:?}?"))
            .unwrap_or_default();
        let defined = if defined.is_empty() {
            "none: add a [[cache]] with this name".to_owned()
        } else {
            defined.join(", ")
        };
        report.error(
            wanted.span(),
            &format!("{field}.cache"),
            format!(
                "no cache is named {:?}{hint} (defined caches: {defined})",
                wanted.get_ref()
            ),
        );
    }
    found.and_then(|(_, plan)| plan.clone())
}

/// The route's configured filters, in the fixed order they run (`trafik_policy::stage`): the
/// access log, CORS, the gate, the token, the rate limit, the body limit, request buffering,
/// headers, then compression.
fn check_filters(report: &mut Report, field: &str, route: &Route) -> Vec<FilterPlan> {
    let mut filters = Vec::new();
    if route.access_log {
        filters.push(FilterPlan::AccessLog);
    }
    // Before any check: a preflight carries no credentials, and is answered here.
    if let Some(settings) = &route.cors
        && let Some(plan) = cors::check(report, field, route, settings)
    {
        filters.push(FilterPlan::Cors(plan));
    }
    if let Some(gate) = &route.gate
        && let Some(plan) = gate::check(report, field, gate)
    {
        filters.push(FilterPlan::Gate(plan));
    }
    if let Some(jwt) = &route.jwt
        && let Some(plan) = jwt::check(report, field, jwt)
    {
        filters.push(FilterPlan::Jwt(plan));
    }
    if let Some(limit) = &route.rate_limit {
        let prefix = route.path_prefix.get_ref();
        if let Some(plan) = rate_limit::check(report, field, prefix, limit, route.jwt.is_some()) {
            filters.push(FilterPlan::RateLimit(plan));
        }
    }
    if let Some(limit) = &route.request_body_limit {
        filters.push(FilterPlan::RequestBodyLimit {
            bytes: limit.get_ref().0,
        });
    }
    // After the checks: a request they refuse is not waited for.
    if let Some(Buffering::InMemoryUpTo(memory)) =
        route.request_buffering.as_ref().map(|b| *b.get_ref())
    {
        // The file has a bound too: the route's body limit, or a gibibyte.
        let most = route
            .request_body_limit
            .as_ref()
            .map_or(BUFFERED_BODY_LIMIT, |limit| limit.get_ref().0);
        filters.push(FilterPlan::RequestBuffering { memory, most });
    }
    let mut headers = |key: &str, lines: &[Spanned<String>]| {
        let mut parsed = Vec::new();
        for line in lines {
            match header_line(line.get_ref()) {
                Ok(header) => parsed.push(header),
                Err(message) => report.error(line.span(), &format!("{field}.{key}"), message),
            }
        }
        parsed
    };
    for (name, value) in headers("request_headers", &route.request_headers) {
        filters.push(FilterPlan::SetRequestHeader { name, value });
    }
    for (name, value) in headers("response_headers", &route.response_headers) {
        filters.push(FilterPlan::SetResponseHeader { name, value });
    }
    // Last: its answer side runs first, on the answer as the target gave it.
    if let Some(settings) = &route.compress
        && let Some(plan) = compress::check(report, field, settings)
    {
        filters.push(FilterPlan::Compress(plan));
    }
    filters
}

/// `Name: value`, as curl's `-H` takes it; not a header trafik manages itself.
fn header_line(line: &str) -> Result<(HeaderName, HeaderValue), String> {
    let expected = format!("expected \"Name: value\" such as \"x-kaynak: trafik\", found {line:?}");
    let (name, value) = line.split_once(':').ok_or_else(|| expected.clone())?;
    let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| expected.clone())?;
    let value = HeaderValue::from_str(value.trim()).map_err(|_| expected)?;
    if !trafik_proxy::http::headers::is_settable(&name) {
        return Err(format!(
            "{name} frames or addresses the message and is managed by trafik; it cannot be set"
        ));
    }
    Ok((name, value))
}

/// The data plane's form of a checked route.
fn route_plan(
    route: Route,
    methods: Vec<Method>,
    filters: Vec<FilterPlan>,
    target: TargetPlan,
    path_template: Option<trafik_proxy::PathTemplate>,
) -> RoutePlan {
    RoutePlan {
        host: route.host,
        path_prefix: route.path_prefix.into_inner(),
        methods,
        filters,
        target,
        path_template,
        routing: Default::default(),
    }
}

/// The position of the pool named `wanted` (at `{field}.pool`), or an error naming the pools
/// there are.
pub fn pool_index(
    report: &mut Report,
    field: &str,
    wanted: &Spanned<String>,
    pools: &[Option<String>],
) -> Option<usize> {
    named_pool(report, &format!("{field}.pool"), wanted, pools)
}

/// The position of the pool named `wanted`, written at `key` (a field such as
/// `listener[0].route[1].service`), or an error naming the pools there are.
pub fn named_pool(
    report: &mut Report,
    key: &str,
    wanted: &Spanned<String>,
    pools: &[Option<String>],
) -> Option<usize> {
    let index = pools
        .iter()
        .position(|p| p.as_ref() == Some(wanted.get_ref()));
    if index.is_none() {
        let defined: Vec<&str> = pools.iter().flatten().map(String::as_str).collect();
        let hint = did_you_mean(wanted.get_ref(), defined.iter().copied())
            .map(|s| format!("; did you mean {s:?}?"))
            .unwrap_or_default();
        let defined = if defined.is_empty() {
            "none".to_owned()
        } else {
            defined.join(", ")
        };
        report.error(
            wanted.span(),
            key,
            format!(
                "no pool is named {:?}{hint} (defined pools: {defined})",
                wanted.get_ref()
            ),
        );
    }
    index
}
