//! Choosing a route for a request.

use http::{Method, Request, header};

use super::filter::Filter;
use super::target::Target;

/// One route at run time: what it matches, its pipeline and its target.
pub struct Route {
    /// Matches the request's host (without port), ASCII case-insensitively; `None` matches any.
    pub host: Option<String>,
    /// Matches a normalized path equal to it or continuing it at a `/` boundary.
    pub path_prefix: String,
    /// Methods this route takes; empty takes any.
    pub methods: Vec<Method>,
    /// The built-in steps, then the configured ones.
    pub filters: Vec<Box<dyn Filter>>,
    pub target: Target,
}

/// A listener's routes, most specific first: routes with a host before routes without, then
/// longer path prefixes before shorter ones; among equals, the order of the configuration.
pub struct RouteTable {
    routes: Vec<Route>,
}

impl RouteTable {
    pub fn new(mut routes: Vec<Route>) -> Self {
        // A stable sort keeps configuration order among equally specific routes.
        routes.sort_by_key(|r| (r.host.is_none(), std::cmp::Reverse(r.path_prefix.len())));
        RouteTable { routes }
    }

    /// The first route that matches the request's host, path and method.
    pub fn find<B>(&self, request: &Request<B>) -> Option<&Route> {
        let path = request.uri().path();
        let host = request_host(request);
        self.routes.iter().find(|route| {
            path_matches(&route.path_prefix, path)
                && method_matches(&route.methods, request.method())
                && route
                    .host
                    .as_deref()
                    .is_none_or(|want| host.is_some_and(|h| h.eq_ignore_ascii_case(want)))
        })
    }
}

fn method_matches(methods: &[Method], method: &Method) -> bool {
    methods.is_empty() || methods.contains(method)
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
fn request_host<B>(request: &Request<B>) -> Option<&str> {
    if let Some(host) = request.uri().host() {
        return Some(host);
    }
    let host = request.headers().get(header::HOST)?.to_str().ok()?;
    Some(strip_port(host))
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
            methods: methods.to_vec(),
            filters: Vec::new(),
            target: Target::Pool(PoolTarget {
                pool,
                retry_non_idempotent: false,
            }),
        }
    }

    fn pool_for(table: &RouteTable, method: Method, host: &str, uri: &str) -> Option<usize> {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", host)
            .body(())
            .unwrap();
        table.find(&request).and_then(|r| match &r.target {
            Target::Pool(target) => Some(target.pool),
            _ => None,
        })
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
