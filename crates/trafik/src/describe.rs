//! Human-readable descriptions of a plan, for `trafik check` and start-up.

use std::fmt::Write as _;

use trafik_balance::failover::seconds as failover_seconds;
use trafik_proxy::plan::failover;
use trafik_proxy::{HealthCheck, ListenerKind, Plan, Running};

use crate::config::Loaded;
use crate::config::values::Dur;

/// The resolved plan: listeners → routes → pools → backends.
pub fn plan(loaded: &Loaded) -> String {
    let plan = &loaded.plan;
    let budgets = failover::budgets(plan);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "instance {} ({} workers, drain {})",
        plan.name,
        plan.workers,
        Dur(plan.drain_timeout)
    );
    if let Some(header) = &plan.trace_header {
        let _ = writeln!(out, "hop trace in {header}");
    }
    if plan.tracing.start {
        let _ = writeln!(
            out,
            "trace context: a trace starts for requests without one"
        );
    }
    if let Some(otlp) = &plan.tracing.otlp {
        let _ = writeln!(
            out,
            "spans to {} as service {}",
            otlp.endpoint, otlp.service_name
        );
    }
    for (address, replica) in &loaded.upstreams {
        let _ = writeln!(out, "upstream {} (built in) on {address}", replica.name);
    }
    for listener in &plan.listeners {
        let _ = writeln!(
            out,
            "listener {} on {}://{}",
            listener.name,
            listener.kind.name(),
            listener.address
        );
        let (certificates, managed, client_auth) = match &listener.kind {
            ListenerKind::Https {
                certificates,
                managed,
                client_auth,
                ..
            }
            | ListenerKind::H3 {
                certificates,
                managed,
                client_auth,
                ..
            } => (&certificates[..], &managed[..], client_auth.as_ref()),
            _ => (&[][..], &[][..], None),
        };
        {
            if let Some(auth) = client_auth {
                let _ = writeln!(
                    out,
                    "  client certificates {} by {}",
                    if auth.required {
                        "required"
                    } else {
                        "optional"
                    },
                    auth.roots.source
                );
            }
            for (i, certificate) in certificates.iter().enumerate() {
                let names = match certificate.names.join(", ") {
                    names if names.is_empty() => "no DNS names".to_owned(),
                    names => names,
                };
                let default = if i == 0 { " (default)" } else { "" };
                let _ = writeln!(
                    out,
                    "  certificate {}: {names}{default}",
                    certificate.origin
                );
            }
            for managed in managed {
                let spec = &managed.spec;
                let _ = writeln!(
                    out,
                    "  certificate by ACME ({}) from {}: {}",
                    spec.challenge.name(),
                    spec.directory,
                    spec.domains.join(", ")
                );
            }
        }
        let routes = match &listener.kind {
            ListenerKind::Http { routes }
            | ListenerKind::Https { routes, .. }
            | ListenerKind::H3 { routes, .. } => routes,
            ListenerKind::Tcp { pool } => {
                let _ = writeln!(out, "  every connection → pool {pool}");
                continue;
            }
            ListenerKind::TlsPassthrough { routes } => {
                for route in routes {
                    let name = match &route.server_name {
                        Some(pattern) => format!("server name {pattern}"),
                        None => "any other server name, or none".to_owned(),
                    };
                    let _ = writeln!(out, "  route {name} → pool {}", route.pool);
                }
                continue;
            }
        };
        for route in routes {
            let _ = writeln!(
                out,
                "  route {} → {}",
                route.matched_text(),
                target_text(&route.target)
            );
            if let Some((pool, budget)) = failover::target(&budgets.pools, &route.target) {
                let _ = writeln!(out, "    {} (pool {pool})", budget.summary());
            }
            let routing = &route.routing;
            if routing.priority != 0 {
                let _ = writeln!(out, "    priority {}", routing.priority);
            }
            for rules in &routing.access {
                let refused = match (rules.allow.is_empty(), rules.deny.is_empty()) {
                    (false, true) => "others 403",
                    (true, false) => "these 403",
                    _ => "403 unless allowed and not denied",
                };
                let _ = writeln!(out, "    clients: {rules} ({refused})");
            }
            if let Some(mirror) = &routing.mirror {
                let _ = writeln!(
                    out,
                    "    mirror {}% to pool {} (bodies up to {} bytes, {} in flight per worker)",
                    mirror.percent, mirror.pool, mirror.max_body, mirror.max_in_flight
                );
            }
            for filter in &route.filters {
                let _ = writeln!(out, "    filter {}", filter_text(filter));
            }
        }
        let table = trafik_proxy::http::route::RouteTable::new(routes.clone());
        for (earlier, later) in table.shadowed() {
            let (earlier, later) = (&table.routes()[earlier], &table.routes()[later]);
            let _ = writeln!(
                out,
                "  warning: route {} never matches: route {} is tried first and takes all its requests",
                later.matched_text(),
                earlier.matched_text()
            );
        }
    }
    for pool in &plan.pools {
        let _ = writeln!(
            out,
            "pool {}: {}, retries {}, connect timeout {}, response timeout {}",
            pool.name,
            pool.algorithm,
            pool.retries,
            Dur(pool.connect_timeout),
            Dur(pool.response_timeout)
        );
        if let Some(key) = &pool.hash_key {
            let _ = writeln!(out, "  hash key: {key}");
        }
        if let Some(tls) = &pool.tls {
            let name = match &tls.server_name {
                Some(name) => format!("as {}", name.to_str()),
                None => "by each backend's IP address".to_owned(),
            };
            let _ = writeln!(out, "  tls: backends verified {name} against {}", tls.roots);
            if let Some(certificate) = &tls.client_certificate {
                let _ = writeln!(out, "  client certificate {certificate} shown to backends");
            }
        }
        if pool.protocol != trafik_proxy::plan::UpstreamProtocol::Http1 {
            let _ = writeln!(out, "  protocol {}", pool.protocol.name());
        }
        if let Some(version) = pool.proxy_protocol {
            let _ = writeln!(out, "  PROXY protocol {version} header to every backend");
        }
        match &pool.sticky {
            Some(trafik_proxy::StickyPlan::Cookie { name, .. }) => {
                let _ = writeln!(out, "  sticky: cookie {name} (HMAC-signed)");
            }
            Some(trafik_proxy::StickyPlan::Modulo) => {
                let _ = writeln!(
                    out,
                    "  sticky: key mod backends (re-binds most clients when the pool changes)"
                );
            }
            Some(trafik_proxy::StickyPlan::Consistent { virtual_nodes }) => {
                let _ = writeln!(
                    out,
                    "  sticky: key on a ring of {virtual_nodes} virtual nodes per backend"
                );
            }
            None => {}
        }
        match &pool.health {
            Some(health) => {
                let check = match &health.check {
                    HealthCheck::Http { path } => format!("GET {path}"),
                    HealthCheck::Tcp => "TCP connect".to_owned(),
                    HealthCheck::Grpc { service } => format!("gRPC health of {service:?}"),
                };
                let _ = writeln!(
                    out,
                    "  health: {check} every {}, timeout {}, fall {}, rise {}",
                    Dur(health.interval),
                    Dur(health.timeout),
                    health.fall,
                    health.rise
                );
            }
            None => {
                let _ = writeln!(out, "  health: no active checks");
            }
        }
        let _ = writeln!(out, "  {}", failover::pool(pool));
        for backend in &pool.backends {
            let name = backend.name.as_deref().unwrap_or("-");
            let _ = writeln!(
                out,
                "  backend {} {name} weight {}",
                backend.address, backend.weight
            );
        }
        for discover in &pool.discover {
            let each = match discover {
                trafik_proxy::Discover::Name { weight, .. } => {
                    format!("a backend of weight {weight} per address")
                }
                trafik_proxy::Discover::Srv { .. } => {
                    "a backend per record of the lowest priority, its port and weight".to_owned()
                }
            };
            let _ = writeln!(
                out,
                "  backends by name {discover}: {each}, resolved at run time"
            );
        }
    }
    if plan.pools.iter().any(|pool| !pool.discover.is_empty()) {
        let server = plan
            .resolver
            .server
            .map_or("the system's resolver".to_owned(), |s| s.to_string());
        let _ = writeln!(
            out,
            "names asked of {server}, again after their TTL (at least {}, at most {})",
            Dur(plan.resolver.min),
            Dur(plan.resolver.max)
        );
    }
    if let Some(dns) = &plan.dns {
        dns_plan(&mut out, dns, &budgets.names);
    }
    match plan.admin {
        Some(admin) => {
            let _ = writeln!(out, "admin on http://{admin} (/status, /metrics)");
        }
        None => {
            let _ = writeln!(out, "admin: off");
        }
    }
    out
}

/// What a started instance prints: where to reach it.
pub fn running(plan: &Plan, running: &Running) -> String {
    let addresses = running.listener_addresses();
    let mut lines: Vec<String> = plan
        .listeners
        .iter()
        .zip(&addresses)
        .map(|(listener, address)| {
            format!(
                "trafik listening on {}://{address} ({})",
                listener.kind.name(),
                listener.name
            )
        })
        .collect();
    if let Some(dns) = running.dns_address() {
        lines.push(format!("dns on {dns} (udp and tcp)"));
    }
    if let Some(admin) = running.admin_address() {
        lines.push(format!("admin on http://{admin}/status and /metrics"));
    }
    // The first HTTP(S) listener whose routes a plain GET can try.
    let first_try = plan
        .listeners
        .iter()
        .zip(&addresses)
        .find_map(|(listener, address)| {
            let routes = match &listener.kind {
                ListenerKind::Http { routes } | ListenerKind::Https { routes, .. } => routes,
                _ => return None,
            };
            routes
                .iter()
                .find_map(try_path)
                .map(|path| (listener, address, path))
        });
    if let Some((listener, address, path)) = first_try {
        let scheme = listener.kind.name();
        lines.push(if scheme == "https" {
            // The certificate is rarely issued for a bare address: -k, and how to check it.
            format!(
                "try: curl -k {scheme}://{address}{path}   (-k skips the certificate check; \
                 with its CA: curl --cacert CA.pem https://NAME:{}{path})",
                address.port()
            )
        } else {
            format!("try: curl {scheme}://{address}{path}")
        });
    }
    lines.join("\n")
}

/// A path a plain `GET` with no token or body can try on `route`, or `None` when the route
/// needs more (another method, a gate's checks, a bearer token): a hint that answers 404 or
/// 401 is worse than none.
fn try_path(route: &trafik_proxy::RoutePlan) -> Option<String> {
    use trafik_proxy::FilterPlan;
    if !route.methods.is_empty() && !route.methods.contains(&http::Method::GET) {
        return None;
    }
    if route
        .filters
        .iter()
        .any(|f| matches!(f, FilterPlan::Gate(_) | FilterPlan::Jwt(_)))
    {
        return None;
    }
    if let Some(template) = &route.path_template {
        // One capture is the tracking number; a second (a service name) cannot be guessed.
        return match template.names() {
            [_] => {
                let name = format!("{{{}}}", template.names()[0]);
                Some(template.text().replace(&name, "TR-4821"))
            }
            _ => None,
        };
    }
    Some(match route.path_prefix.trim_end_matches('/') {
        "" | "/takip" => "/takip/TR-4821".to_owned(),
        prefix => prefix.to_owned(),
    })
}

fn filter_text(filter: &trafik_proxy::FilterPlan) -> String {
    use trafik_proxy::FilterPlan;
    let show = |value: &http::HeaderValue| String::from_utf8_lossy(value.as_bytes()).into_owned();
    match filter {
        FilterPlan::RequestBodyLimit { bytes } => format!("request bodies up to {bytes} bytes"),
        FilterPlan::RequestBuffering { memory, most } => format!(
            "request bodies read whole first ({memory} bytes in memory, then a file; at most {most} bytes)"
        ),
        FilterPlan::SetRequestHeader { name, value } => {
            format!("request header {name}: {}", show(value))
        }
        FilterPlan::SetResponseHeader { name, value } => {
            format!("response header {name}: {}", show(value))
        }
        FilterPlan::AccessLog => "access log with every stage's verdict".into(),
        FilterPlan::RewritePath(rewrite) => format!("path: {rewrite}"),
        FilterPlan::Cors(cors) => {
            let list = |names: Vec<String>| match names.is_empty() {
                true => "none".to_owned(),
                false => names.join(", "),
            };
            format!(
                "cors: origins {}; methods {}; headers {}; expose {}; credentials {}{}; preflights answered here",
                cors.origins.patterns().join(", "),
                list(cors.methods.iter().map(|m| m.to_string()).collect()),
                list(cors.headers.clone()),
                list(cors.expose.iter().map(|h| h.to_string()).collect()),
                if cors.credentials { "yes" } else { "no" },
                cors.max_age
                    .map(|age| format!("; preflight kept {}s", age.as_secs()))
                    .unwrap_or_default(),
            )
        }
        FilterPlan::Compress(compress) => {
            let level = |coding| match coding {
                trafik_policy::negotiate::Coding::Gzip => compress.gzip_level as i32,
                trafik_policy::negotiate::Coding::Brotli => compress.br_level as i32,
                trafik_policy::negotiate::Coding::Zstd => compress.zstd_level,
            };
            let codings: Vec<String> = compress
                .encodings
                .iter()
                .map(|&c| format!("{} {}", c.token(), level(c)))
                .collect();
            format!(
                "compress: {} (preferred first); types {}; from {} bytes",
                codings.join(", "),
                compress.types.join(", "),
                compress.min_length
            )
        }
        FilterPlan::Gate(gate) => {
            let mut checks = Vec::new();
            if !gate.paths.is_empty() {
                checks.push(format!("paths {}", gate.paths.join(", ")));
            }
            for (name, pattern) in &gate.headers {
                checks.push(format!("{name} ~ {pattern}"));
            }
            if let Some(token) = &gate.token {
                checks.push(format!("token ~ {token}"));
            }
            if gate.query_schema.is_some() {
                checks.push("query schema".into());
            }
            if gate.body_schema.is_some() {
                checks.push("body schema".into());
            }
            checks.push(format!("body up to {} bytes", gate.body_limit));
            format!("gate: {}", checks.join("; "))
        }
        FilterPlan::Jwt(jwt) => {
            let keys = match &jwt.keys {
                trafik_proxy::plan::JwtKeys::Secret { algorithm, .. } => {
                    format!("{algorithm} secret")
                }
                trafik_proxy::plan::JwtKeys::Pem { algorithm, .. } => {
                    format!("{algorithm} key file")
                }
                trafik_proxy::plan::JwtKeys::Jwks { source, refresh } => {
                    format!("JWKS {source:?} every {refresh:?}")
                }
            };
            let forward: Vec<String> = jwt
                .forward
                .iter()
                .map(|(c, h)| format!("{c} → {h}"))
                .collect();
            format!(
                "jwt: {keys}; forwards {}",
                if forward.is_empty() {
                    "nothing".into()
                } else {
                    forward.join(", ")
                }
            )
        }
        FilterPlan::RateLimit(limit) => {
            let scope = match &limit.global {
                None => "in this instance".to_owned(),
                Some(global) => format!(
                    "in {} (fail {}, probed every {:?} while down)",
                    global.redis,
                    if global.fail_open { "open" } else { "closed" },
                    global.probe_interval
                ),
            };
            format!(
                "rate limit {} per {:?} (burst {}) by {:?} {scope}",
                limit.rate, limit.period, limit.burst, limit.key
            )
        }
    }
}

/// Where a route goes, in words: `pool takip`, `files in DIR`, `cache kenar → pool takip`.
fn target_text(target: &trafik_proxy::TargetPlan) -> String {
    use trafik_proxy::{ServiceChoice, TargetPlan};
    match target {
        TargetPlan::Pool { pool, .. } => format!("pool {pool}"),
        TargetPlan::Static { root, index } => match index {
            Some(index) => format!("files in {} (index {index})", root.display()),
            None => format!("files in {}", root.display()),
        },
        TargetPlan::Cached { cache, target } => {
            format!("cache {} → {}", cache.name, target_text(target))
        }
        TargetPlan::Split { pools, sticky, .. } => {
            let shares: Vec<String> = pools
                .iter()
                .map(|(pool, weight)| format!("pool {pool} weight {weight}"))
                .collect();
            let sticky = match sticky {
                Some(sticky) => format!(", clients kept by {sticky}"),
                None => String::new(),
            };
            format!("split: {}{sticky}", shares.join(", "))
        }
        TargetPlan::Redirect(redirect) => {
            let query = match redirect.keep_query {
                true => "query kept",
                false => "query dropped",
            };
            format!(
                "redirect {} to {} ({query})",
                redirect.status,
                redirect.to.text()
            )
        }
        TargetPlan::Service {
            service,
            upstream_path,
            ..
        } => {
            let service = match service {
                ServiceChoice::Named(pool) => format!("service {pool}"),
                ServiceChoice::Capture { services, .. } => {
                    format!("service by capture, one of {}", services.join(", "))
                }
            };
            match upstream_path {
                Some(path) => format!("{service} at {}", path.text()),
                None => service,
            }
        }
        TargetPlan::Aggregate(aggregate) => {
            let parts: Vec<String> = aggregate
                .parts
                .iter()
                .map(|p| {
                    let missing = p.missing.name();
                    format!(
                        "{} ({} {}, missing {missing})",
                        p.name,
                        p.service,
                        p.path.text()
                    )
                })
                .collect();
            let mut text = format!("aggregate of {}", parts.join(" + "));
            if let Some(batch) = &aggregate.batch {
                text += &format!(
                    ", batch ?{}= ({} at once)",
                    batch.parameter, batch.concurrency
                );
            }
            if let Some(views) = &aggregate.views {
                let clients: Vec<&str> = views.views.iter().map(|v| v.client.as_str()).collect();
                text += &format!(", views {}", clients.join(", "));
            }
            text
        }
        TargetPlan::Ambassador(ambassador) => {
            format!(
                "ambassador to {} {}",
                ambassador.service,
                ambassador.path.text()
            )
        }
    }
}

/// The DNS server: regions and how they are known live, zones and their policy names.
fn dns_plan(
    out: &mut String,
    dns: &trafik_proxy::dns::DnsServicePlan,
    budgets: &[(String, failover::Budget)],
) {
    use trafik_proxy::dns::RegionHealth;
    let _ = writeln!(out, "dns on {} (udp and tcp)", dns.listen);
    for (region, health) in dns.zones.regions.iter().zip(&dns.health) {
        let addresses: Vec<String> = region.addresses.iter().map(ToString::to_string).collect();
        let live = match health {
            RegionHealth::Always => "always live".to_owned(),
            RegionHealth::Pool(pool) => format!("live while pool {pool} has a backend up"),
            RegionHealth::Check { address, plan } => {
                let checks = failover::checks(plan);
                format!(
                    "checked at {address} every {}, dead within {} ({checks})",
                    Dur(plan.interval),
                    failover_seconds(checks.detection()),
                )
            }
        };
        let _ = writeln!(
            out,
            "  region {} → {}: {live}",
            region.name,
            addresses.join(", ")
        );
    }
    if let Some(geoip) = &dns.zones.geoip {
        let _ = writeln!(out, "  geoip {:?}", geoip.database);
    }
    for (index, (name, prefixes)) in dns.zones.groups.iter().enumerate() {
        let mut members: Vec<String> = prefixes
            .iter()
            .map(|p| format!("{}/{}", p.network, p.length))
            .collect();
        if let Some(places) = dns.zones.geoip.as_ref().and_then(|g| g.places.get(index)) {
            members.extend(places.countries.iter().map(|c| format!("country {c}")));
            members.extend(places.asns.iter().map(|a| format!("AS{a}")));
            members.extend(places.continents.iter().map(|c| format!("continent {c}")));
        }
        let _ = writeln!(out, "  group {name}: {}", members.join(", "));
    }
    for zone in &dns.zones.zones {
        let _ = writeln!(
            out,
            "  zone {} (ttl {} s, {} records)",
            zone.origin,
            zone.ttl,
            zone.records.len()
        );
        for name in &zone.names {
            let _ = writeln!(
                out,
                "    name {}: {}, ttl {} s",
                name.name,
                name.policy.kind(),
                name.ttl
            );
            if let Some((_, budget)) = budgets.iter().find(|(n, _)| *n == name.name) {
                let _ = writeln!(out, "      {budget}");
            }
        }
        if let Some(transfer) = &zone.transfer {
            let allow: Vec<String> = transfer
                .allow
                .iter()
                .map(|p| format!("{}/{}", p.network, p.length))
                .collect();
            let notify: Vec<String> = transfer.notify.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                out,
                "    transfers to {}{}; notify {}; serial managed",
                allow.join(", "),
                transfer
                    .tsig
                    .as_ref()
                    .map_or_else(String::new, |key| format!(" signed with {}", key.name)),
                if notify.is_empty() {
                    "nobody".to_owned()
                } else {
                    notify.join(", ")
                },
            );
        }
        if let Some(keys) = &zone.dnssec {
            let tag = |key: &trafik_dns::dnssec::ZoneKey| {
                key.signer
                    .dnskey()
                    .calculate_key_tag()
                    .map_or_else(|_| "?".to_owned(), |tag| tag.to_string())
            };
            let denial = match keys.denial {
                trafik_dns::dnssec::Denial::Nsec => "NSEC",
                trafik_dns::dnssec::Denial::Nsec3 => "NSEC3",
            };
            let _ = writeln!(
                out,
                "    signed: KSK {}, ZSK {} (ECDSA P-256), denial by {denial} black lies",
                tag(&keys.ksk),
                tag(&keys.zsk),
            );
        }
    }
}
