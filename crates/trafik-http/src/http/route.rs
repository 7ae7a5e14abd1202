//! Choosing a route for a request.

use std::net::{IpAddr, SocketAddr};

use http::{HeaderMap, Method, Request, header};
use trafik_gateway::template::{Captures, PathTemplate};
use trafik_policy::route_match::Asked;

use crate::plan::RoutingPlan;
use crate::sticky::find_cookie;
use crate::view::RequestView;

use super::filter::Filter;
use super::target::Target;

/// One route at run time: what it matches, its pipeline and its target.
pub struct Route {
    /// Matches the request's host (without port), ASCII case-insensitively; `None` matches any.
    pub host: Option<String>,
    /// Matches a normalized path equal to it or continuing it at a `/` boundary.
    pub path_prefix: String,
    /// When set, matches instead of the prefix: the path's segments, capturing the named ones
    /// (`/takip/{no}`); the captures travel in the request's extensions to the target.
    pub path_template: Option<PathTemplate>,
    /// Methods this route takes; empty takes any.
    pub methods: Vec<Method>,
    /// The built-in steps, then the configured ones.
    pub filters: Vec<Box<dyn Filter>>,
    /// What its steps need, told once when it is built.
    pub steps: StepKinds,
    pub target: Target,
    /// Its requests' durations and status classes, kept across reloads while the route is.
    pub traffic: crate::metrics::RouteTraffic,
    /// Conditions, priority, address rules and mirror, as planned.
    pub routing: RoutingPlan,
    /// The copies of its requests to the mirror's pool, when it has one.
    pub mirror: Option<super::mirror::Mirror>,
    /// Refusals and copies counted, for a route with address rules or a mirror.
    pub routing_counters:
        Option<std::sync::Arc<crate::counters::PerWorker<super::routing::RoutingCounters>>>,
}

/// What a route's steps need of the engine that serves it.
#[derive(Clone, Copy, Debug, Default)]
pub struct StepKinds {
    /// Every step is head-only or fields-only: the own HTTP/1 engine can serve it inline.
    pub inline: bool,
    /// Some step reads and edits fields ([`Filter::fields_only`]).
    pub edits_fields: bool,
}

impl StepKinds {
    pub fn of(filters: &[Box<dyn Filter>]) -> Self {
        StepKinds {
            inline: filters
                .iter()
                .all(|filter| filter.head_only() || filter.fields_only()),
            edits_fields: filters.iter().any(|filter| filter.fields_only()),
        }
    }
}

/// What a route matches. The run-time [`Route`] and the configuration's
/// [`RoutePlan`](crate::plan::RoutePlan) both answer it, so `trafik plan` chooses routes with the
/// very table the proxy uses.
pub trait Matching {
    fn host(&self) -> Option<&str>;
    fn path_prefix(&self) -> &str;
    fn path_template(&self) -> Option<&PathTemplate>;
    fn methods(&self) -> &[Method];
    fn routing(&self) -> &RoutingPlan;
}

impl Matching for Route {
    fn host(&self) -> Option<&str> {
        self.host.as_deref()
    }
    fn path_prefix(&self) -> &str {
        &self.path_prefix
    }
    fn path_template(&self) -> Option<&PathTemplate> {
        self.path_template.as_ref()
    }
    fn methods(&self) -> &[Method] {
        &self.methods
    }
    fn routing(&self) -> &RoutingPlan {
        &self.routing
    }
}

impl Matching for crate::plan::RoutePlan {
    fn host(&self) -> Option<&str> {
        self.host.as_deref()
    }
    fn path_prefix(&self) -> &str {
        &self.path_prefix
    }
    fn path_template(&self) -> Option<&PathTemplate> {
        self.path_template.as_ref()
    }
    fn methods(&self) -> &[Method] {
        &self.methods
    }
    fn routing(&self) -> &RoutingPlan {
        &self.routing
    }
}

/// A listener's routes: a higher `priority` first; then the most specific: routes with a host
/// before routes without, then path templates (more segments first) before prefixes, then
/// longer path prefixes before shorter ones, then routes with conditions (headers, query,
/// cookies, clients) before those without; among equals, the order of the configuration.
pub struct RouteTable<R = Route> {
    routes: Vec<R>,
    /// Whether a route asks more than host, path and method: only then need an engine read the
    /// request's fields to route it.
    asks_more: bool,
}

impl<R: Matching> RouteTable<R> {
    pub fn new(mut routes: Vec<R>) -> Self {
        // A stable sort keeps configuration order among equally specific routes.
        routes.sort_by_key(|r| {
            let length = r.path_template().map_or(r.path_prefix().len(), |t| t.len());
            (
                std::cmp::Reverse(r.routing().priority),
                r.host().is_none(),
                r.path_template().is_none(),
                std::cmp::Reverse(length),
                r.routing().conditions.is_empty(),
            )
        });
        let asks_more = routes.iter().any(|r| !r.routing().conditions.is_empty());
        RouteTable { routes, asks_more }
    }

    /// Whether a route has conditions beyond host, path and method.
    pub fn asks_more(&self) -> bool {
        self.asks_more
    }

    /// The routes in the order they are tried.
    pub fn routes(&self) -> &[R] {
        &self.routes
    }

    /// The first route that matches the request from `client`, with what its path template
    /// captured.
    pub fn find<B>(&self, request: &Request<B>, client: IpAddr) -> Option<(&R, Option<Captures>)> {
        self.find_parts(
            request_host(request),
            request.uri().path(),
            request.method(),
            &Asking {
                view: request,
                client,
            },
        )
    }

    /// [`RouteTable::find`] for a request given by its host (without port), normalized path
    /// and method, and what its conditions read (only for routes that have any).
    pub fn find_parts(
        &self,
        host: Option<&str>,
        path: &str,
        method: &Method,
        asked: &impl Asked,
    ) -> Option<(&R, Option<Captures>)> {
        self.routes
            .iter()
            .find_map(|route| Some((route, test(route, host, path, method, asked).ok()?)))
    }

    /// Every route in the order they are tried, each with what [`test`] — the very function
    /// [`RouteTable::find_parts`] chooses with — said of the request: the first that passes is
    /// the one that serves it; later ones that pass too are shadowed by it.
    pub fn considered<'t, A: Asked>(
        &'t self,
        host: Option<&'t str>,
        path: &'t str,
        method: &'t Method,
        asked: &'t A,
    ) -> impl Iterator<Item = (&'t R, Result<Option<Captures>, Miss>)> {
        self.routes
            .iter()
            .map(move |route| (route, test(route, host, path, method, asked)))
    }

    /// Pairs of routes (by their place in [`RouteTable::routes`]) where the earlier takes
    /// every request the later would: the later can never be chosen.
    pub fn shadowed(&self) -> Vec<(usize, usize)> {
        let mut pairs = Vec::new();
        for (later, route) in self.routes.iter().enumerate() {
            if let Some(earlier) = self.routes[..later]
                .iter()
                .position(|earlier| takes_all_of(earlier, route))
            {
                pairs.push((earlier, later));
            }
        }
        pairs
    }
}

/// Whether `earlier` matches every request `later` does (prefix routes compared by their
/// prefixes; a template route is covered by the same template, or by the catch-all `/`).
fn takes_all_of<R: Matching>(earlier: &R, later: &R) -> bool {
    let host = match (earlier.host(), later.host()) {
        (None, _) => true,
        (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
        (Some(_), None) => false,
    };
    let methods = earlier.methods().is_empty()
        || (!later.methods().is_empty()
            && later
                .methods()
                .iter()
                .all(|m| earlier.methods().contains(m)));
    let path = match (earlier.path_template(), later.path_template()) {
        (None, None) => path_matches(earlier.path_prefix(), later.path_prefix()),
        (None, Some(_)) => earlier.path_prefix() == "/",
        (Some(a), Some(b)) => a.text() == b.text(),
        (Some(_), None) => false,
    };
    host && methods
        && path
        && later
            .routing()
            .conditions
            .covered_by(&earlier.routing().conditions)
}

/// A request as route conditions read it: the view any engine gives, and its client.
pub struct Asking<'a, V> {
    pub view: &'a V,
    pub client: IpAddr,
}

impl<V: RequestView> Asked for Asking<'_, V> {
    fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> {
        self.view.header_values(name)
    }
    fn query(&self) -> Option<&str> {
        self.view.query()
    }
    fn cookie(&self, name: &str) -> Option<&str> {
        find_cookie(self.view, name)
    }
    fn client(&self) -> IpAddr {
        self.client
    }
}

/// The client's address as route conditions and address rules see it: the socket's peer, or,
/// when forwarding headers are trusted, the first address of `X-Forwarded-For`.
pub fn client_address(peer: SocketAddr, headers: &HeaderMap, trust_forwarded: bool) -> IpAddr {
    let forwarded = || {
        let first = headers
            .get("x-forwarded-for")?
            .to_str()
            .ok()?
            .split(',')
            .next()?;
        first.trim().parse::<IpAddr>().ok()
    };
    match trust_forwarded {
        true => forwarded().unwrap_or(peer.ip()),
        false => peer.ip(),
    }
}

/// The first of a route's tests a request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    Method,
    Host,
    Path,
    /// The route's conditions (headers, query, cookies, client).
    Conditions,
}

/// A route's tests, in order: method, host, path (a template's captures come with a match),
/// then its conditions as `asked` reads the request. The one place a route is matched, for
/// serving and for explaining; a new kind of matcher is one more test here and one more
/// [`Miss`].
pub fn test<R: Matching>(
    route: &R,
    host: Option<&str>,
    path: &str,
    method: &Method,
    asked: &impl Asked,
) -> Result<Option<Captures>, Miss> {
    if !method_matches(route.methods(), method) {
        return Err(Miss::Method);
    }
    if !host_matches(route.host(), host) {
        return Err(Miss::Host);
    }
    let captures = path_test(route, path)?;
    let conditions = &route.routing().conditions;
    if !conditions.is_empty() && !conditions.matches(asked) {
        return Err(Miss::Conditions);
    }
    Ok(captures)
}

/// The path test alone, with its captures: explanations ask it of a route whose host or
/// method failed, to tell a near miss.
pub fn path_test<R: Matching>(route: &R, path: &str) -> Result<Option<Captures>, Miss> {
    match route.path_template() {
        Some(template) => template.matches(path).map(Some).ok_or(Miss::Path),
        None => path_matches(route.path_prefix(), path)
            .then_some(None)
            .ok_or(Miss::Path),
    }
}

/// Why `route` did not take the request (`miss`), saying what of it did match: "host matched,
/// path `/takipx` is not under `/takip`".
pub fn why_not<R: Matching>(
    route: &R,
    miss: Miss,
    host: Option<&str>,
    path: &str,
    method: &Method,
) -> String {
    let path_fits = path_test(route, path).is_ok();
    let path_wanted = || match route.path_template() {
        Some(template) => format!(
            "path `{path}` does not fit the template `{}`",
            template.text()
        ),
        None => format!("path `{path}` is not under `{}`", route.path_prefix()),
    };
    match miss {
        Miss::Method => {
            let wanted: Vec<&str> = route.methods().iter().map(Method::as_str).collect();
            let mut why = format!("method {method} is not one of {}", wanted.join(", "));
            if path_fits && host_matches(route.host(), host) {
                why.push_str(" (host and path matched)");
            }
            why
        }
        Miss::Host => {
            let wanted = route.host().unwrap_or_default();
            let mut why = match host {
                Some(host) => format!("host `{host}` is not `{wanted}`"),
                None => format!("the request names no host; the route wants `{wanted}`"),
            };
            if path_fits {
                why.push_str(" (path matched)");
            }
            why
        }
        Miss::Conditions => {
            "host, path and method matched; its conditions (headers, query, cookies, client) do not"
                .to_owned()
        }
        Miss::Path => {
            let mut matched = Vec::new();
            if route.host().is_some() {
                matched.push("host");
            }
            if !route.methods().is_empty() {
                matched.push("method");
            }
            if matched.is_empty() {
                path_wanted()
            } else {
                format!("{} matched, {}", matched.join(" and "), path_wanted())
            }
        }
    }
}

fn method_matches(methods: &[Method], method: &Method) -> bool {
    methods.is_empty() || methods.contains(method)
}

fn host_matches(wanted: Option<&str>, host: Option<&str>) -> bool {
    wanted.is_none_or(|want| host.is_some_and(|h| h.eq_ignore_ascii_case(want)))
}

/// `prefix` matches `path` if equal, or if `path` continues it at a `/` boundary. `OPTIONS *`
/// (a question to the server as a whole) goes to the catch-all route `/`.
fn path_matches(prefix: &str, path: &str) -> bool {
    if path == "*" {
        return prefix == "/";
    }
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

/// The request's host name without a port, from the URI or the `Host` header.
pub fn request_host<B>(request: &Request<B>) -> Option<&str> {
    if let Some(host) = request.uri().host() {
        return Some(host);
    }
    let host = request.headers().get(header::HOST)?.to_str().ok()?;
    Some(strip_port(host))
}

/// The request's host as it named it, port included: the URI's authority, else `Host`.
pub fn request_authority<B>(request: &Request<B>) -> Option<&str> {
    if let Some(authority) = request.uri().authority() {
        return Some(authority.as_str());
    }
    request.headers().get(header::HOST)?.to_str().ok()
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        // An IPv6 literal: up to and including the closing bracket (all of it if there is none).
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::target::PoolTarget;

    fn route(host: Option<&str>, prefix: &str, methods: &[Method], pool: usize) -> Route {
        Route {
            host: host.map(str::to_owned),
            path_prefix: prefix.to_owned(),
            path_template: None,
            methods: methods.to_vec(),
            filters: Vec::new(),
            steps: StepKinds::default(),
            target: Target::Pool(PoolTarget {
                pool,
                retry_non_idempotent: false,
            }),
            traffic: std::sync::Arc::new(crate::counters::PerWorker::new(1)),
            routing: RoutingPlan::default(),
            mirror: None,
            routing_counters: None,
        }
    }

    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    fn pool_for(table: &RouteTable, method: Method, host: &str, uri: &str) -> Option<usize> {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", host)
            .body(())
            .unwrap();
        table.find(&request, CLIENT).map(|(r, _)| match &r.target {
            Target::Pool(target) => target.pool,
            _ => usize::MAX,
        })
    }

    #[test]
    fn considered_routes_tell_their_near_misses_and_shadows_in_the_order_find_tries_them() {
        let table = RouteTable::new(vec![
            route(None, "/", &[], 0),
            route(None, "/takip", &[], 1),
            route(Some("yonetim.local"), "/takip", &[], 2),
            route(None, "/olay", &[Method::POST], 3),
        ]);
        let request = Request::builder().body(()).unwrap();
        let asking = Asking {
            view: &request,
            client: CLIENT,
        };
        let why = |host: Option<&str>, path: &str, method: Method| -> Vec<String> {
            table
                .considered(host, path, &method, &asking)
                .map(|(r, verdict)| match verdict {
                    Ok(_) => "ok".to_owned(),
                    Err(miss) => why_not(r, miss, host, path, &method),
                })
                .collect()
        };
        assert_eq!(
            why(Some("a"), "/takipx", Method::GET),
            [
                "host `a` is not `yonetim.local`",
                "path `/takipx` is not under `/takip`",
                "method GET is not one of POST",
                "ok",
            ]
        );
        assert_eq!(
            why(Some("yonetim.local"), "/takipx", Method::GET)[0],
            "host matched, path `/takipx` is not under `/takip`"
        );
        assert_eq!(
            why(None, "/olay", Method::GET)[2],
            "method GET is not one of POST (host and path matched)"
        );
        // The first that passes is the one find chooses; the catch-all after it is shadowed.
        let verdicts = why(Some("a"), "/takip/1", Method::GET);
        assert_eq!(verdicts[1..], ["ok", "method GET is not one of POST", "ok"]);
        assert_eq!(pool_for(&table, Method::GET, "a", "/takip/1"), Some(1));
    }

    #[test]
    fn prefixes_match_at_segment_boundaries_and_the_longest_wins() {
        let table = RouteTable::new(vec![
            route(None, "/", &[], 0),
            route(None, "/takip", &[], 1),
            route(None, "/takip/ozel/", &[], 2),
        ]);
        assert_eq!(pool_for(&table, Method::GET, "a", "/takip"), Some(1));
        assert_eq!(
            pool_for(&table, Method::GET, "a", "/takip/TR-1?x=1"),
            Some(1)
        );
        assert_eq!(pool_for(&table, Method::GET, "a", "/takipx"), Some(0));
        assert_eq!(pool_for(&table, Method::GET, "a", "/takip/ozel/1"), Some(2));
    }

    #[test]
    fn host_and_method_narrow_a_route() {
        let table = RouteTable::new(vec![
            route(None, "/olay", &[Method::POST], 0),
            route(Some("yonetim.local"), "/", &[], 1),
        ]);
        assert_eq!(pool_for(&table, Method::POST, "x", "/olay"), Some(0));
        assert_eq!(pool_for(&table, Method::GET, "x", "/olay"), None);
        assert_eq!(
            pool_for(&table, Method::GET, "YONETIM.local:8080", "/olay"),
            Some(1)
        );
    }

    #[test]
    fn templates_match_by_segments_before_prefixes_and_carry_their_captures() {
        let mut aggregate = route(None, "/", &[], 1);
        aggregate.path_template = Some(PathTemplate::parse("/takip/{no}").unwrap());
        let mut routed = route(None, "/", &[], 2);
        routed.path_template = Some(PathTemplate::parse("/takip/{no}/{part}").unwrap());
        let table = RouteTable::new(vec![route(None, "/takip", &[], 0), aggregate, routed]);
        let request = |uri: &str| Request::builder().uri(uri).body(()).unwrap();
        let found = table.find(&request("/takip/TR-1/ucret"), CLIENT).unwrap();
        assert_eq!(found.1, Some(Captures(vec!["TR-1".into(), "ucret".into()])));
        assert_eq!(pool_for(&table, Method::GET, "a", "/takip/TR-1"), Some(1));
        assert_eq!(
            pool_for(&table, Method::GET, "a", "/takip/TR-1/ucret"),
            Some(2)
        );
        // More segments than any template: the prefix route takes it.
        assert_eq!(
            pool_for(&table, Method::GET, "a", "/takip/TR-1/ucret/x"),
            Some(0)
        );
        assert_eq!(pool_for(&table, Method::GET, "a", "/takip"), Some(0));
    }

    #[test]
    fn conditions_and_priority_choose_among_routes_of_one_path() {
        use trafik_policy::route_match::{ValueMatch, parse_net};
        let mut beta = route(None, "/api", &[], 1);
        beta.routing.conditions.headers =
            vec![("x-surum".into(), ValueMatch::parse("beta").unwrap())];
        let mut inside = route(None, "/api", &[], 2);
        inside.routing.conditions.clients = vec![parse_net("10.0.0.0/8").unwrap()];
        let mut first = route(None, "/", &[], 3);
        first.routing.conditions.query = vec![("oncelik".into(), ValueMatch::Present)];
        first.routing.priority = 10;
        let table = RouteTable::new(vec![route(None, "/api", &[], 0), beta, inside, first]);
        assert!(table.asks_more());
        let find = |headers: &[(&str, &str)], uri: &str, client: &str| {
            let mut request = Request::get(uri);
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let request = request.body(()).unwrap();
            table
                .find(&request, client.parse().unwrap())
                .map(|(r, _)| match &r.target {
                    Target::Pool(target) => target.pool,
                    _ => usize::MAX,
                })
        };
        assert_eq!(find(&[], "/api/x", "127.0.0.1"), Some(0));
        assert_eq!(find(&[("x-surum", "beta")], "/api/x", "127.0.0.1"), Some(1));
        assert_eq!(find(&[], "/api/x", "10.1.1.1"), Some(2));
        // A higher priority goes first although its prefix is shorter.
        assert_eq!(
            find(&[("x-surum", "beta")], "/api/x?oncelik", "10.1.1.1"),
            Some(3)
        );
        assert_eq!(
            client_address(
                "127.0.0.1:1".parse().unwrap(),
                &{
                    let mut headers = HeaderMap::new();
                    headers.insert("x-forwarded-for", "10.2.3.4, 127.0.0.1".parse().unwrap());
                    headers
                },
                true
            ),
            "10.2.3.4".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn a_route_an_earlier_one_always_takes_is_shadowed() {
        use trafik_policy::route_match::ValueMatch;
        let mut beta = route(None, "/api", &[], 1);
        beta.routing.conditions.headers =
            vec![("x-surum".into(), ValueMatch::parse("beta").unwrap())];
        let mut catch_all = route(None, "/", &[], 2);
        catch_all.routing.priority = 5;
        let table = RouteTable::new(vec![route(None, "/api/v1", &[Method::GET], 0), beta]);
        assert!(table.shadowed().is_empty());
        let table = RouteTable::new(vec![route(None, "/api", &[], 0), catch_all]);
        assert_eq!(table.shadowed(), vec![(0, 1)]);
    }

    #[test]
    fn ports_are_stripped_from_hosts() {
        assert_eq!(strip_port("a.b:80"), "a.b");
        assert_eq!(strip_port("a.b"), "a.b");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        // Malformed hosts come from clients: they must not panic.
        assert_eq!(strip_port("[::1"), "[::1");
        assert_eq!(strip_port("["), "[");
        assert_eq!(strip_port(":"), "");
        assert_eq!(strip_port(""), "");
        assert_eq!(strip_port("é:1"), "é");
    }
}
