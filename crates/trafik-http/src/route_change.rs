//! Which requests a configuration change sends elsewhere or treats otherwise (`trafik plan`):
//! example requests derived from both configurations' routes, each chosen by the proxy's own
//! [`RouteTable`] under the old and the new routes; their targets compared, and the settings of
//! the routes that take them, field by field ([`route_fields`](crate::route_fields)).

use std::net::IpAddr;

use http::{Method, Request};
use trafik_gateway::template::Captures;
use trafik_policy::route_match::Conditions;

use crate::http::route::RouteTable;
use crate::plan::ServiceChoice;
use crate::plan::{ListenerPlan, RoutePlan, TargetPlan};
use crate::route_fields::{self, FieldChange};

/// A request whose target, or the settings of the route that takes it, differ between the two
/// configurations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteChange {
    pub listener: String,
    pub method: String,
    pub host: Option<String>,
    pub path: String,
    /// What else the request carries to meet a route's conditions (`header x-surum=beta`);
    /// empty for none.
    pub asking: String,
    /// The target before and after, as [`target_label`] names it; `404` when no route matches.
    pub before: String,
    pub after: String,
    /// The settings of the route that takes it that differ (CORS, compression, mirror, …);
    /// empty when either configuration has no route for it.
    pub fields: Vec<FieldChange>,
}

/// A path no configured route is likely to hold, so the catch-all (or its absence) is probed.
const UNMATCHED_PATH: &str = "/trafik-plan-unmatched";

/// The requests of each HTTP listener (by name, in either configuration) whose target changes
/// or whose route's settings do; a pair of routes whose settings differ is listed once, with the
/// first request that reaches it.
pub fn changed_routes(before: &[ListenerPlan], after: &[ListenerPlan]) -> Vec<RouteChange> {
    let mut names: Vec<&str> = before
        .iter()
        .chain(after)
        .map(|l| l.name.as_str())
        .collect();
    names.dedup();
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(*n));
    let routes_of = |listeners: &[ListenerPlan], name: &str| -> Vec<RoutePlan> {
        listeners
            .iter()
            .find(|l| l.name == name)
            .map_or_else(Vec::new, |l| l.kind.routes().to_vec())
    };
    let mut changes = Vec::new();
    for name in names {
        let (old, new) = (routes_of(before, name), routes_of(after, name));
        let examples = examples(old.iter().chain(&new));
        let (old, new) = (RouteTable::new(old), RouteTable::new(new));
        let mut compared = std::collections::HashSet::new();
        for example in examples {
            let request = example.request();
            // The route that takes the request, by its place in the table, and its target.
            let found = |table: &RouteTable<RoutePlan>| {
                let (route, captures) = table.find(&request, example.client)?;
                let place = table.routes().iter().position(|r| std::ptr::eq(r, route))?;
                Some((place, target_label(route, captures.as_ref())))
            };
            let (was, will) = (found(&old), found(&new));
            let label = |found: &Option<(usize, String)>| {
                found
                    .as_ref()
                    .map_or_else(|| "404".to_owned(), |(_, label)| label.clone())
            };
            let (before, after) = (label(&was), label(&will));
            let retargeted = before != after;
            let mut fields = Vec::new();
            if let (Some((a, _)), Some((b, _))) = (was, will) {
                // The same pair of routes reached again by another example says nothing new.
                if compared.insert((a, b)) || retargeted {
                    fields = route_fields::changes(&old.routes()[a], &new.routes()[b]);
                }
            }
            if retargeted || !fields.is_empty() {
                changes.push(RouteChange {
                    listener: name.to_owned(),
                    method: example.method.to_string(),
                    host: example.host.clone(),
                    path: example.path.clone(),
                    asking: example.conditions.to_string(),
                    before,
                    after,
                    fields,
                });
            }
        }
    }
    changes
}

/// An example request: a route's method, host and path, and what meets its conditions.
#[derive(Clone, PartialEq)]
struct Example {
    method: Method,
    host: Option<String>,
    path: String,
    conditions: Conditions,
    client: IpAddr,
}

impl Example {
    /// The request as the route table reads it: header, query and cookie values that meet the
    /// conditions (a regular expression or an absence is left unmet: nothing is sent for it).
    fn request(&self) -> Request<()> {
        let mut query: Vec<String> = Vec::new();
        for (name, want) in &self.conditions.query {
            if let Some(value) = want.example() {
                query.push(form_pair(name, value));
            }
        }
        let uri = match query.is_empty() {
            true => self.path.clone(),
            false => format!("{}?{}", self.path, query.join("&")),
        };
        let mut request = Request::builder().method(self.method.clone()).uri(uri);
        if let Some(host) = &self.host {
            request = request.header(http::header::HOST, host.as_str());
        }
        for (name, want) in &self.conditions.headers {
            if let Some(value) = want.example() {
                request = request.header(name.as_str(), value);
            }
        }
        let cookies: Vec<String> = self
            .conditions
            .cookies
            .iter()
            .filter_map(|(name, want)| Some(format!("{name}={}", want.example()?)))
            .collect();
        if !cookies.is_empty() {
            request = request.header(http::header::COOKIE, cookies.join("; "));
        }
        // A value the builder refuses leaves the example without it.
        request.body(()).unwrap_or_else(|_| Request::new(()))
    }
}

fn form_pair(name: &str, value: &str) -> String {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    format!(
        "{}={}",
        utf8_percent_encode(name, NON_ALPHANUMERIC),
        utf8_percent_encode(value, NON_ALPHANUMERIC)
    )
}

/// One request per route (its first method, its host, its prefix or its template with each
/// capture filled in, values meeting its conditions, a client in its first network), then one
/// that no route names; without repeats.
fn examples<'a>(routes: impl Iterator<Item = &'a RoutePlan>) -> Vec<Example> {
    let loopback = IpAddr::from([127, 0, 0, 1]);
    let mut list: Vec<Example> = routes
        .map(|route| {
            let path = match &route.path_template {
                Some(template) => fill_captures(template.text()),
                None => route.path_prefix.clone(),
            };
            let conditions = route.routing.conditions.clone();
            let client = conditions
                .clients
                .first()
                .map_or(loopback, |net| net.network());
            Example {
                method: route.methods.first().cloned().unwrap_or(Method::GET),
                host: route.host.clone(),
                path,
                conditions,
                client,
            }
        })
        .collect();
    list.push(Example {
        method: Method::GET,
        host: None,
        path: UNMATCHED_PATH.to_owned(),
        conditions: Conditions::default(),
        client: loopback,
    });
    let mut unique: Vec<Example> = Vec::with_capacity(list.len());
    for example in list {
        if !unique.contains(&example) {
            unique.push(example);
        }
    }
    unique
}

/// `/takip/{no}` → `/takip/no-1`: a path the template matches.
fn fill_captures(template: &str) -> String {
    template
        .split('/')
        .map(
            |segment| match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => format!("{name}-1"),
                None => segment.to_owned(),
            },
        )
        .collect::<Vec<_>>()
        .join("/")
}

/// Where a matched route sends the request: `pool NAME`, `service NAME`, `static ROOT`, or the
/// gateway target and the route it belongs to.
pub fn target_label(route: &RoutePlan, captures: Option<&Captures>) -> String {
    let path = route
        .path_template
        .as_ref()
        .map_or(route.path_prefix.as_str(), |t| t.text());
    label(&route.target, path, captures)
}

fn label(target: &TargetPlan, path: &str, captures: Option<&Captures>) -> String {
    match target {
        TargetPlan::Pool { pool, .. } => format!("pool {pool}"),
        TargetPlan::Service { service, .. } => match service {
            ServiceChoice::Named(name) => format!("service {name}"),
            ServiceChoice::Capture { capture, services } => {
                let chosen = captures.and_then(|c| c.0.get(*capture));
                match chosen.filter(|c| services.contains(c)) {
                    Some(name) => format!("service {name}"),
                    None => "404".to_owned(),
                }
            }
        },
        TargetPlan::Aggregate(_) => format!("aggregate of {path}"),
        TargetPlan::Ambassador(plan) => format!("ambassador to {}", plan.service),
        TargetPlan::Static { root, .. } => format!("static {}", root.display()),
        TargetPlan::Cached { cache, target } => {
            format!("cache {} → {}", cache.name, label(target, path, captures))
        }
        TargetPlan::Split { pools, .. } => {
            let shares: Vec<String> = pools.iter().map(|(p, w)| format!("{p} {w}")).collect();
            format!("split {}", shares.join(" / "))
        }
        TargetPlan::Redirect(redirect) => {
            format!("redirect {} {}", redirect.status, redirect.to.text())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ConnectionLimits, ListenerKind};

    fn route(host: Option<&str>, prefix: &str, methods: &[Method], pool: &str) -> RoutePlan {
        RoutePlan {
            host: host.map(str::to_owned),
            path_prefix: prefix.to_owned(),
            methods: methods.to_vec(),
            filters: Vec::new(),
            target: TargetPlan::Pool {
                pool: pool.to_owned(),
                retry_non_idempotent: false,
            },
            path_template: None,
            routing: Default::default(),
        }
    }

    fn listener(routes: Vec<RoutePlan>) -> ListenerPlan {
        ListenerPlan {
            name: "web".into(),
            address: "127.0.0.1:0".parse().unwrap(),
            kind: ListenerKind::Http { routes },
            connections: ConnectionLimits::default(),
        }
    }

    #[test]
    fn a_retargeted_prefix_and_a_dropped_catch_all_are_listed_and_nothing_else() {
        let before = [listener(vec![
            route(None, "/", &[], "genel"),
            route(None, "/takip", &[], "takip"),
            route(Some("yonetim.local"), "/", &[Method::POST], "yonetim"),
        ])];
        let after = [listener(vec![
            route(None, "/takip", &[], "takip-yeni"),
            route(Some("yonetim.local"), "/", &[Method::POST], "yonetim"),
        ])];
        let changes = changed_routes(&before, &after);
        let summary: Vec<(&str, &str, &str)> = changes
            .iter()
            .map(|c| (c.path.as_str(), c.before.as_str(), c.after.as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                ("/", "pool genel", "404"),
                ("/takip", "pool takip", "pool takip-yeni"),
                (UNMATCHED_PATH, "pool genel", "404"),
            ]
        );
    }

    #[test]
    fn templates_are_probed_with_their_captures_filled() {
        assert_eq!(fill_captures("/takip/{no}/{part}"), "/takip/no-1/part-1");
        let mut templated = route(None, "/", &[], "ayrinti");
        templated.path_template =
            Some(trafik_gateway::template::PathTemplate::parse("/takip/{no}").unwrap());
        let before = [listener(vec![route(None, "/takip", &[], "takip")])];
        let after = [listener(vec![
            route(None, "/takip", &[], "takip"),
            templated,
        ])];
        let changes = changed_routes(&before, &after);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].path, "/takip/no-1");
        assert_eq!(changes[0].after, "pool ayrinti");
    }

    #[test]
    fn a_route_s_conditions_are_met_by_its_example_and_a_new_split_is_listed() {
        use trafik_policy::route_match::ValueMatch;
        let mut beta = route(None, "/api", &[], "v2");
        beta.routing.conditions.headers =
            vec![("x-surum".into(), ValueMatch::parse("beta").unwrap())];
        let before = [listener(vec![route(None, "/api", &[], "v1"), beta.clone()])];
        let mut split = route(None, "/api", &[], "v1");
        split.target = TargetPlan::Split {
            pools: vec![("v1".into(), 90), ("v2".into(), 10)],
            sticky: None,
            retry_non_idempotent: false,
        };
        let after = [listener(vec![split, beta])];
        let changes = changed_routes(&before, &after);
        let summary: Vec<(&str, &str, &str)> = changes
            .iter()
            .map(|c| (c.asking.as_str(), c.before.as_str(), c.after.as_str()))
            .collect();
        // The beta request still goes to v2; the others now split.
        assert_eq!(summary, [("", "pool v1", "split v1 90 / v2 10")]);
    }

    /// A change to a route's filters alone moves no request, yet `trafik plan` must say it: a
    /// CORS-only change and a compression-only change each show as that route's fields.
    #[test]
    fn a_cors_only_and_a_compression_only_change_are_listed_with_their_fields() {
        use crate::plan::{CompressPlan, CorsPlan, FilterPlan};
        use trafik_policy::negotiate::Coding;
        let cors = |origin: &str| {
            FilterPlan::Cors(CorsPlan {
                origins: trafik_policy::cors::Origins::parse(&[origin.to_owned()]).unwrap(),
                methods: vec![Method::GET],
                headers: Vec::new(),
                expose: Vec::new(),
                credentials: false,
                max_age: None,
            })
        };
        let compress = |min_length| {
            FilterPlan::Compress(CompressPlan {
                encodings: vec![Coding::Zstd, Coding::Gzip],
                types: vec!["application/json".into()],
                min_length,
                gzip_level: 5,
                br_level: 4,
                zstd_level: 3,
            })
        };
        let with = |filters: Vec<FilterPlan>, prefix: &str| {
            let mut route = route(None, prefix, &[], "takip");
            route.filters = filters;
            route
        };
        let before = [listener(vec![
            with(vec![cors("https://a.test")], "/takip"),
            with(vec![compress(256)], "/olay"),
            with(Vec::new(), "/"),
        ])];
        let after = [listener(vec![
            with(vec![cors("https://b.test")], "/takip"),
            with(vec![compress(64)], "/olay"),
            with(Vec::new(), "/"),
        ])];
        let changes = changed_routes(&before, &after);
        let summary: Vec<(&str, &str, Vec<&str>)> = changes
            .iter()
            .map(|c| {
                let fields = c.fields.iter().map(|f| f.field.as_str()).collect();
                (c.path.as_str(), c.after.as_str(), fields)
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("/takip", "pool takip", vec!["filters.Cors.origins.exact"]),
                ("/olay", "pool takip", vec!["filters.Compress.min_length"]),
            ]
        );
        let olay = &changes[1].fields[0];
        assert_eq!(
            (olay.before.as_deref(), olay.after.as_deref()),
            (Some("256"), Some("64"))
        );
        assert!(changed_routes(&after, &after).is_empty());
    }
}
