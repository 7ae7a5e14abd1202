//! A route's routing keys: header, query, cookie and client conditions, `priority`, `allow` and
//! `deny` (also a listener's), `split` and `split_sticky`, `mirror`, `redirect` and the path
//! rewrites; and `redirect_https` on a listener.

use std::collections::BTreeMap;

use http::HeaderName;
use toml::Spanned;
use trafik_policy::rewrite::{PathRewrite, RedirectTemplate};
use trafik_policy::route_match::{Conditions, IpNet, IpRules, ValueMatch, parse_net};
use trafik_proxy::{FilterPlan, MirrorPlan, RedirectPlan, RoutingPlan, SplitSticky, TargetPlan};

use super::listener::named_pool;
use super::report::Report;
use super::schema::Route;

/// Whether the route names a target of its own here (`split` or `redirect`) instead of `pool`.
pub fn has_target(route: &Route) -> bool {
    route.split.is_some() || route.redirect.is_some()
}

/// Each routing key the route writes, and where: for listeners that read no requests.
pub fn written(route: &Route) -> Vec<(&'static str, Option<std::ops::Range<usize>>)> {
    let first = |map: &BTreeMap<String, Spanned<String>>| map.values().next().map(Spanned::span);
    vec![
        ("headers", first(&route.headers)),
        ("query", first(&route.query)),
        ("cookies", first(&route.cookies)),
        ("clients", route.clients.first().map(Spanned::span)),
        ("priority", route.priority.as_ref().map(Spanned::span)),
        ("split", route.split.as_ref().map(Spanned::span)),
        (
            "split_sticky",
            route.split_sticky.as_ref().map(Spanned::span),
        ),
        ("mirror", route.mirror.as_ref().map(Spanned::span)),
        ("redirect", route.redirect.as_ref().map(Spanned::span)),
        (
            "strip_prefix",
            route.strip_prefix.as_ref().map(Spanned::span),
        ),
        (
            "replace_prefix",
            route.replace_prefix.as_ref().map(Spanned::span),
        ),
        ("rewrite", route.rewrite.as_ref().map(Spanned::span)),
        ("allow", route.allow.first().map(Spanned::span)),
        ("deny", route.deny.first().map(Spanned::span)),
    ]
}

/// The route's conditions, priority, address rules (after the listener's `access`) and
/// mirror.
pub fn check(
    report: &mut Report,
    field: &str,
    route: &Route,
    listener_access: &Option<IpRules>,
    pools: &[Option<String>],
) -> RoutingPlan {
    let mut conditions = Conditions {
        headers: values(report, &format!("{field}.headers"), &route.headers),
        query: values(report, &format!("{field}.query"), &route.query),
        cookies: values(report, &format!("{field}.cookies"), &route.cookies),
        clients: nets(report, &format!("{field}.clients"), &route.clients),
    };
    for (name, _) in &conditions.headers {
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            report.error(
                route.headers[name].span(),
                &format!("{field}.headers"),
                format!("{name:?} is not a header name"),
            );
        }
    }
    conditions.headers = conditions
        .headers
        .into_iter()
        .map(|(name, want)| (name.to_ascii_lowercase(), want))
        .collect();
    let mut access: Vec<IpRules> = listener_access.iter().cloned().collect();
    let rules = IpRules {
        allow: nets(report, &format!("{field}.allow"), &route.allow),
        deny: nets(report, &format!("{field}.deny"), &route.deny),
    };
    if !rules.is_empty() {
        access.push(rules);
    }
    let mirror = route.mirror.as_ref().and_then(|mirror| {
        let field = format!("{field}.mirror");
        let pool = report.required(
            mirror.get_ref().pool.as_ref(),
            mirror.span(),
            &format!("{field}.pool"),
            "pool = \"golge\", the pool that gets the copies",
        )?;
        named_pool(report, &format!("{field}.pool"), pool, pools)?;
        let percent = &mirror.get_ref().percent;
        if !(0.0..=100.0).contains(percent.get_ref()) {
            report.error(
                percent.span(),
                &format!("{field}.percent"),
                format!(
                    "expected a share from 0 to 100, found {}",
                    percent.get_ref()
                ),
            );
        }
        let in_flight = &mirror.get_ref().max_in_flight;
        if *in_flight.get_ref() == 0 {
            report.error(
                in_flight.span(),
                &format!("{field}.max_in_flight"),
                "expected at least 1 (0 would drop every copy)",
            );
        }
        Some(MirrorPlan {
            pool: pool.get_ref().clone(),
            percent: *percent.get_ref(),
            max_body: mirror.get_ref().max_body.0,
            max_in_flight: *in_flight.get_ref(),
        })
    });
    RoutingPlan {
        conditions,
        priority: route.priority.as_ref().map_or(0, |p| *p.get_ref()),
        access,
        mirror,
    }
}

/// A listener's `allow` and `deny`, when it has either.
pub fn listener_access(
    report: &mut Report,
    field: &str,
    allow: &[Spanned<String>],
    deny: &[Spanned<String>],
) -> Option<IpRules> {
    let rules = IpRules {
        allow: nets(report, &format!("{field}.allow"), allow),
        deny: nets(report, &format!("{field}.deny"), deny),
    };
    (!rules.is_empty()).then_some(rules)
}

/// The `split` or `redirect` target; `captures` are the names the route's path template
/// captures. Either refuses `pool` beside it.
pub fn target(
    report: &mut Report,
    field: &str,
    route: &Route,
    captures: &[String],
    pools: &[Option<String>],
) -> Option<TargetPlan> {
    if let Some(pool) = &route.pool {
        report.error(
            pool.span(),
            &format!("{field}.pool"),
            "a route with `split` or `redirect` has no `pool`: they are its target",
        );
    }
    if let (Some(split), Some(redirect)) = (&route.split, &route.redirect) {
        report.error(
            redirect.span().start.min(split.span().start)..redirect.span().end,
            &format!("{field}.redirect"),
            "a route has one target: `split` or `redirect`, not both",
        );
        return None;
    }
    if let Some(redirect) = &route.redirect {
        return redirect_target(report, &format!("{field}.redirect"), redirect, captures);
    }
    let split = route.split.as_ref()?;
    let errors_before = report.error_count();
    let mut shares = Vec::new();
    for (i, share) in split.get_ref().iter().enumerate() {
        let key = format!("{field}.split[{i}]");
        let pool = report.required(
            share.get_ref().pool.as_ref(),
            share.span(),
            &format!("{key}.pool"),
            "pool = \"v1\"",
        );
        let weight = report.required(
            share.get_ref().weight.as_ref(),
            share.span(),
            &format!("{key}.weight"),
            "weight = 90, its share against the others' weights",
        );
        if let Some(pool) = pool
            && named_pool(report, &format!("{key}.pool"), pool, pools).is_some()
            && let Some(weight) = weight
        {
            shares.push((pool.get_ref().clone(), *weight.get_ref()));
        }
    }
    // Weights are judged once every share is known.
    if report.error_count() == errors_before && shares.iter().all(|(_, weight)| *weight == 0) {
        report.error(
            split.span(),
            &format!("{field}.split"),
            "expected pools with a weight above zero: [{ pool = \"v1\", weight = 90 }, { pool = \"v2\", weight = 10 }]",
        );
    }
    let sticky =
        route
            .split_sticky
            .as_ref()
            .and_then(|sticky| match sticky.get_ref().split_once(':') {
                None if sticky.get_ref() == "cookie" => {
                    Some(SplitSticky::Cookie(SplitSticky::COOKIE.to_owned()))
                }
                Some(("header", name)) if HeaderName::from_bytes(name.as_bytes()).is_ok() => {
                    HeaderName::from_bytes(name.as_bytes())
                        .ok()
                        .map(SplitSticky::Header)
                }
                _ => {
                    report.error(
                        sticky.span(),
                        &format!("{field}.split_sticky"),
                        format!(
                            "expected \"cookie\" or \"header:NAME\", found {:?}",
                            sticky.get_ref()
                        ),
                    );
                    None
                }
            });
    (report.error_count() == errors_before).then_some(TargetPlan::Split {
        pools: shares,
        sticky,
        retry_non_idempotent: route.retry_non_idempotent,
    })
}

fn redirect_target(
    report: &mut Report,
    field: &str,
    redirect: &Spanned<super::schema::Redirect>,
    captures: &[String],
) -> Option<TargetPlan> {
    let written = redirect.get_ref();
    let to = report.required(
        written.to.as_ref(),
        redirect.span(),
        &format!("{field}.to"),
        "to = \"https://yeni.example{path}\"",
    )?;
    let names: Vec<&str> = captures.iter().map(String::as_str).collect();
    let template = RedirectTemplate::parse(to.get_ref(), &names)
        .map_err(|message| report.error(to.span(), &format!("{field}.to"), message))
        .ok();
    let status = *written.status.get_ref();
    if ![301, 302, 307, 308].contains(&status) {
        report.error(
            written.status.span(),
            &format!("{field}.status"),
            format!("expected 301, 302, 307 or 308, found {status}"),
        );
    }
    let keep_query = match written.query.get_ref().as_str() {
        "keep" => true,
        "drop" => false,
        other => {
            report.error(
                written.query.span(),
                &format!("{field}.query"),
                format!("expected \"keep\" or \"drop\", found {other:?}"),
            );
            true
        }
    };
    Some(TargetPlan::Redirect(RedirectPlan {
        to: template?,
        status,
        keep_query,
    }))
}

/// The route's path rewrites as filters, in the order `strip_prefix`, `replace_prefix`,
/// `rewrite`.
pub fn rewrites(report: &mut Report, field: &str, route: &Route) -> Vec<FilterPlan> {
    let mut filters = Vec::new();
    if let Some(prefix) = &route.strip_prefix
        && path_like(report, &format!("{field}.strip_prefix"), prefix)
    {
        filters.push(PathRewrite::StripPrefix(prefix.get_ref().clone()));
    }
    if let Some(replace) = &route.replace_prefix {
        let key = format!("{field}.replace_prefix");
        let from = report.required(
            replace.get_ref().from.as_ref(),
            replace.span(),
            &format!("{key}.from"),
            "from = \"/api\"",
        );
        let to = report.required(
            replace.get_ref().to.as_ref(),
            replace.span(),
            &format!("{key}.to"),
            "to = \"/v2\"",
        );
        if let (Some(from), Some(to)) = (from, to)
            && path_like(report, &format!("{key}.from"), from)
            && path_like(report, &format!("{key}.to"), to)
        {
            filters.push(PathRewrite::ReplacePrefix {
                from: from.get_ref().clone(),
                to: to.get_ref().clone(),
            });
        }
    }
    if let Some(rewrite) = &route.rewrite {
        let key = format!("{field}.rewrite");
        let regex = report.required(
            rewrite.get_ref().regex.as_ref(),
            rewrite.span(),
            &format!("{key}.regex"),
            "regex = \"^/eski/(.*)\"",
        );
        let to = report.required(
            rewrite.get_ref().to.as_ref(),
            rewrite.span(),
            &format!("{key}.to"),
            "to = \"/yeni/$1\"",
        );
        if let (Some(regex), Some(to)) = (regex, to) {
            match PathRewrite::regex(regex.get_ref(), to.get_ref()) {
                Ok(rewrite) => filters.push(rewrite),
                Err(message) => report.error(regex.span(), &format!("{key}.regex"), message),
            }
        }
    }
    filters.into_iter().map(FilterPlan::RewritePath).collect()
}

fn path_like(report: &mut Report, field: &str, path: &Spanned<String>) -> bool {
    let fine = path.get_ref().starts_with('/');
    if !fine {
        report.error(
            path.span(),
            field,
            format!(
                "expected a path starting with \"/\", found {:?}",
                path.get_ref()
            ),
        );
    }
    fine
}

fn values(
    report: &mut Report,
    field: &str,
    written: &BTreeMap<String, Spanned<String>>,
) -> Vec<(String, ValueMatch)> {
    written
        .iter()
        .filter_map(|(name, want)| match ValueMatch::parse(want.get_ref()) {
            Ok(parsed) => Some((name.clone(), parsed)),
            Err(message) => {
                report.error(want.span(), field, message);
                None
            }
        })
        .collect()
}

fn nets(report: &mut Report, field: &str, written: &[Spanned<String>]) -> Vec<IpNet> {
    written
        .iter()
        .filter_map(|net| match parse_net(net.get_ref()) {
            Ok(parsed) => Some(parsed),
            Err(message) => {
                report.error(net.span(), field, message);
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::load;
    use trafik_proxy::{ListenerKind, TargetPlan};

    const POOLS: &str = "[[pool]]\nname = \"v1\"\nbackends = [{ address = \"127.0.0.1:2\" }]\n\
        [[pool]]\nname = \"v2\"\nbackends = [{ address = \"127.0.0.1:3\" }]\n\
        [[listener]]\nname = \"web\"\nlisten = \"127.0.0.1:1\"\n";

    fn errors(routes: &str) -> Vec<(String, String)> {
        let text = format!("{POOLS}{routes}");
        let errors = load("t.toml", &text).unwrap_err();
        errors.into_iter().map(|e| (e.field, e.message)).collect()
    }

    #[test]
    fn every_bad_routing_value_is_reported_at_its_key() {
        let found = errors(
            "[[listener.route]]\nheaders = { \"x-a\" = \"~(\" }\nclients = [\"10.0.0.0/33\"]\n\
             split = [{ pool = \"v3\", weight = 1 }]\nsplit_sticky = \"kuki\"\n\
             mirror = { pool = \"v2\", percent = 150.0 }\n\
             [[listener.route]]\npath_prefix = \"/r\"\nredirect = { to = \"/{yok}\", status = 303, query = \"sil\" }\n\
             [[listener.route]]\npath_prefix = \"/w\"\npool = \"v1\"\nstrip_prefix = \"api\"\nrewrite = { regex = \"(\", to = \"/\" }\n",
        );
        let fields: Vec<&str> = found.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "listener[0].route[0].headers",
                "listener[0].route[0].clients",
                "listener[0].route[0].split[0].pool",
                "listener[0].route[0].split_sticky",
                "listener[0].route[0].mirror.percent",
                "listener[0].route[1].redirect.to",
                "listener[0].route[1].redirect.status",
                "listener[0].route[1].redirect.query",
                "listener[0].route[2].strip_prefix",
                "listener[0].route[2].rewrite.regex",
            ],
            "{found:#?}"
        );
    }

    #[test]
    fn a_split_and_a_redirect_are_targets_and_redirect_https_is_a_listener_s_only_route() {
        let text = format!(
            "{POOLS}[[listener.route]]\nsplit = [{{ pool = \"v1\", weight = 9 }}, {{ pool = \"v2\", weight = 1 }}]\n\
             split_sticky = \"header:x-kullanici\"\n\
             [[listener]]\nname = \"duz\"\nlisten = \"127.0.0.1:4\"\nredirect_https = true\ndeny = [\"10.0.0.0/8\"]\n"
        );
        let loaded = load("t.toml", &text).unwrap();
        let routes = loaded.plan.listeners[0].kind.routes();
        assert!(matches!(&routes[0].target, TargetPlan::Split { pools, .. } if pools.len() == 2));
        let ListenerKind::Http { routes } = &loaded.plan.listeners[1].kind else {
            panic!("a plain listener");
        };
        assert!(matches!(&routes[0].target, TargetPlan::Redirect(r) if r.status == 308));
        assert_eq!(routes[0].routing.access.len(), 1);
        let both =
            errors("[[listener.route]]\npool = \"v1\"\nsplit = [{ pool = \"v1\", weight = 1 }]\n");
        assert_eq!(both[0].0, "listener[0].route[0].pool");
    }
}
