//! Which requests a configuration change sends elsewhere (`trafik plan`): example requests
//! derived from both configurations' routes, each chosen by the proxy's own [`RouteTable`] under
//! the old and the new routes.

use http::Method;
use trafik_gateway::template::Captures;

use crate::http::route::RouteTable;
use crate::plan::ServiceChoice;
use crate::plan::{ListenerPlan, RoutePlan, TargetPlan};

/// A request whose target differs between the two configurations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteChange {
    pub listener: String,
    pub method: String,
    pub host: Option<String>,
    pub path: String,
    /// The target before and after, as [`target_label`] names it; `404` when no route matches.
    pub before: String,
    pub after: String,
}

/// A path no configured route is likely to hold, so the catch-all (or its absence) is probed.
const UNMATCHED_PATH: &str = "/trafik-plan-unmatched";

/// The requests of each HTTP listener (by name, in either configuration) whose target changes.
pub fn changed_targets(before: &[ListenerPlan], after: &[ListenerPlan]) -> Vec<RouteChange> {
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
        for (method, host, path) in examples {
            let target = |table: &RouteTable<RoutePlan>| {
                table
                    .find_parts(host.as_deref(), &path, &method)
                    .map_or("404".to_owned(), |(route, captures)| {
                        target_label(route, captures.as_ref())
                    })
            };
            let (was, will) = (target(&old), target(&new));
            if was != will {
                changes.push(RouteChange {
                    listener: name.to_owned(),
                    method: method.to_string(),
                    host: host.clone(),
                    path: path.clone(),
                    before: was,
                    after: will,
                });
            }
        }
    }
    changes
}

/// One request per route (its first method, its host, its prefix or its template with each
/// capture filled in), then one that no route names; without repeats.
fn examples<'a>(
    routes: impl Iterator<Item = &'a RoutePlan>,
) -> Vec<(Method, Option<String>, String)> {
    let mut list: Vec<(Method, Option<String>, String)> = routes
        .map(|route| {
            let path = match &route.path_template {
                Some(template) => fill_captures(template.text()),
                None => route.path_prefix.clone(),
            };
            let method = route.methods.first().cloned().unwrap_or(Method::GET);
            (method, route.host.clone(), path)
        })
        .collect();
    list.push((Method::GET, None, UNMATCHED_PATH.to_owned()));
    let mut seen = std::collections::HashSet::new();
    list.retain(|example| seen.insert(example.clone()));
    list
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
        let changes = changed_targets(&before, &after);
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
        let changes = changed_targets(&before, &after);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].path, "/takip/no-1");
        assert_eq!(changes[0].after, "pool ayrinti");
    }
}
