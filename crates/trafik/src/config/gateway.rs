//! The gateway's keys of a `[[listener.route]]`: a path template (`path = "/takip/{no}"`), a
//! service of the map (`service`, by name or by a capture among `services`), `upstream_path`,
//! and the targets `aggregate` (`[[listener.route.part]]`, `merge`, views, batch) and
//! `ambassador` (`answer`, `status`). jq expressions are compiled here, so a config that passes
//! `trafik check` never fails on them in `serve`; their errors are placed at the line and column
//! inside the TOML string.

use std::ops::Range;
use std::sync::Arc;

use http::HeaderName;
use toml::Spanned;
use trafik_gateway::jq::Expression;
use trafik_gateway::parts::Missing;
use trafik_proxy::{
    AggregatePlan, AmbassadorPlan, BatchPlan, ClientChooser, PartPlan, PathTemplate, ServiceChoice,
    TargetPlan, UpstreamTemplate, ViewPlan, ViewsPlan,
};

use super::listener::{named_pool, pool_index};
use super::report::Report;
use super::schema::{Part, Route, View, is_written};

/// Whether the route is the gateway's rather than a plain pool route.
pub fn is_gateway(route: &Route) -> bool {
    route.path.is_some()
        || route.target.is_some()
        || route.service.is_some()
        || route.upstream_path.is_some()
}

/// The route's `path` template, if it has one.
pub fn path_template(report: &mut Report, field: &str, route: &Route) -> Option<PathTemplate> {
    let path = route.path.as_ref()?;
    if is_written(&route.path_prefix) {
        report.error(
            route.path_prefix.span(),
            &format!("{field}.path_prefix"),
            "a route matches either `path` (a template, by segments) or `path_prefix`, not both",
        );
    }
    match PathTemplate::parse(path.get_ref()) {
        Ok(template) => Some(template),
        Err(message) => {
            report.error(path.span(), &format!("{field}.path"), message);
            None
        }
    }
}

/// The target of a gateway route. `captures` are the names its template captures.
pub fn target(
    report: &mut Report,
    field: &str,
    span: Range<usize>,
    route: &Route,
    captures: &[String],
    pools: &[Option<String>],
) -> Option<TargetPlan> {
    let check = Check {
        field,
        captures,
        pools,
    };
    let kind = route.target.as_ref().map(|t| t.get_ref().as_str());
    check.only_for(report, route, kind);
    match kind {
        None => check.service_route(report, span, route),
        Some("aggregate") => check.aggregate(report, span, route),
        Some("ambassador") => check.ambassador(report, span, route),
        Some(other) => {
            report.error(
                route.target.as_ref().map_or(span, Spanned::span),
                &format!("{field}.target"),
                format!("expected \"aggregate\" or \"ambassador\" (or no target, for a pool or a service), found {other:?}"),
            );
            None
        }
    }
}

struct Check<'c> {
    field: &'c str,
    captures: &'c [String],
    pools: &'c [Option<String>],
}

impl Check<'_> {
    /// Keys that belong to another kind of target are refused, so none is silently ignored.
    fn only_for(&self, report: &mut Report, route: &Route, kind: Option<&str>) {
        let aggregate = kind == Some("aggregate");
        let ambassador = kind == Some("ambassador");
        let mut refuse = |span: Option<Range<usize>>, key: &str, belongs: &str| {
            if let Some(span) = span {
                report.error(
                    span,
                    &format!("{}.{key}", self.field),
                    format!("`{key}` belongs to {belongs}"),
                );
            }
        };
        let aggregate_only = "target = \"aggregate\"";
        if !aggregate {
            refuse(
                route.merge.as_ref().map(Spanned::span),
                "merge",
                aggregate_only,
            );
            refuse(
                route.parts.first().map(Spanned::span),
                "part",
                aggregate_only,
            );
            refuse(
                route.views.first().map(Spanned::span),
                "view",
                aggregate_only,
            );
            refuse(
                route.client_header.as_ref().map(Spanned::span),
                "client_header",
                aggregate_only,
            );
            refuse(
                route.batch.as_ref().map(Spanned::span),
                "batch",
                aggregate_only,
            );
            if is_written(&route.batch_concurrency) {
                refuse(
                    Some(route.batch_concurrency.span()),
                    "batch_concurrency",
                    aggregate_only,
                );
            }
        }
        if !ambassador {
            let ambassador_only = "target = \"ambassador\"";
            refuse(
                route.answer.as_ref().map(Spanned::span),
                "answer",
                ambassador_only,
            );
            refuse(
                route.status.as_ref().map(Spanned::span),
                "status",
                ambassador_only,
            );
            if is_written(&route.timeout) {
                refuse(
                    Some(route.timeout.span()),
                    "timeout",
                    "target = \"ambassador\" (an aggregate's parts have their own)",
                );
            }
        }
        if aggregate || ambassador {
            refuse(
                route.pool.as_ref().map(Spanned::span),
                "pool",
                "a pool route; a gateway target names a `service`",
            );
        }
        if aggregate {
            refuse(
                route.service.as_ref().map(Spanned::span),
                "service",
                "each [[listener.route.part]] of an aggregate",
            );
            refuse(
                route.upstream_path.as_ref().map(Spanned::span),
                "upstream_path",
                "each part of an aggregate, as `path`",
            );
        }
    }

    /// A pool or a service of the map, relayed to `upstream_path`.
    fn service_route(
        &self,
        report: &mut Report,
        span: Range<usize>,
        route: &Route,
    ) -> Option<TargetPlan> {
        let field = self.field;
        let service = match (&route.pool, &route.service) {
            (Some(pool), Some(service)) => {
                report.error(
                    service.span(),
                    &format!("{field}.service"),
                    format!(
                        "a route names either a `pool` or a `service`, not both (pool {:?})",
                        pool.get_ref()
                    ),
                );
                None
            }
            (Some(pool), None) => {
                if let Some(first) = route.services.first() {
                    report.error(
                        first.span(),
                        &format!("{field}.services"),
                        "`services` limits a service chosen by a capture (service = \"{part}\"), not a `pool`",
                    );
                }
                pool_index(report, field, pool, self.pools)
                    .map(|_| ServiceChoice::Named(pool.get_ref().clone()))
            }
            (None, service) => {
                let service = report.required(
                    service.as_ref(),
                    span,
                    &format!("{field}.service"),
                    "service = \"durum\" (a pool), or service = \"{part}\" with services = [...]",
                )?;
                self.service_choice(report, service, &route.services)
            }
        };
        let upstream_path = match &route.upstream_path {
            Some(path) => Some(self.upstream(report, path, "upstream_path", &[])?),
            None => None,
        };
        Some(TargetPlan::Service {
            service: service?,
            upstream_path,
            retry_non_idempotent: route.retry_non_idempotent,
        })
    }

    /// `service = "durum"` or `service = "{part}"` with its `services`.
    fn service_choice(
        &self,
        report: &mut Report,
        service: &Spanned<String>,
        services: &[Spanned<String>],
    ) -> Option<ServiceChoice> {
        let field = self.field;
        let text = service.get_ref();
        let Some(name) = text.strip_prefix('{').and_then(|t| t.strip_suffix('}')) else {
            if let Some(first) = services.first() {
                report.error(
                    first.span(),
                    &format!("{field}.services"),
                    "`services` limits a service chosen by a capture (service = \"{part}\")",
                );
            }
            return self
                .pool(report, service, "service")
                .map(|_| ServiceChoice::Named(text.clone()));
        };
        let Some(capture) = self.captures.iter().position(|c| c == name) else {
            report.error(
                service.span(),
                &format!("{field}.service"),
                format!(
                    "{{{name}}} is not captured by the route's `path` (its captures: {})",
                    names(self.captures)
                ),
            );
            return None;
        };
        if services.is_empty() {
            report.error(
                service.span(),
                &format!("{field}.services"),
                "missing `services`: a capture may choose only among the map's names, e.g. services = [\"durum\", \"ucret\"]",
            );
            return None;
        }
        let known: Vec<Option<String>> = services
            .iter()
            .map(|s| {
                self.pool(report, s, "services")
                    .map(|_| s.get_ref().clone())
            })
            .collect();
        Some(ServiceChoice::Capture {
            capture,
            services: known.into_iter().collect::<Option<_>>()?,
        })
    }

    fn pool(&self, report: &mut Report, name: &Spanned<String>, key: &str) -> Option<usize> {
        named_pool(report, &format!("{}.{key}", self.field), name, self.pools)
    }

    fn upstream(
        &self,
        report: &mut Report,
        path: &Spanned<String>,
        key: &str,
        extra: &[String],
    ) -> Option<UpstreamTemplate> {
        let names: Vec<String> = self.captures.iter().chain(extra).cloned().collect();
        UpstreamTemplate::parse(path.get_ref(), &names)
            .map_err(|message| report.error(path.span(), &format!("{}.{key}", self.field), message))
            .ok()
    }

    fn aggregate(
        &self,
        report: &mut Report,
        span: Range<usize>,
        route: &Route,
    ) -> Option<TargetPlan> {
        let field = self.field;
        let batch = route.batch.as_ref().and_then(|batch| {
            let name = batch.get_ref();
            if !is_variable(name) || self.captures.contains(name) {
                report.error(batch.span(), &format!("{field}.batch"), format!("expected a query parameter name (letters, digits, _) that the path does not capture, found {name:?}"));
                return None;
            }
            let concurrency = *route.batch_concurrency.get_ref();
            if concurrency == 0 {
                report.error(route.batch_concurrency.span(), &format!("{field}.batch_concurrency"), "expected at least 1 record fetched at once");
                return None;
            }
            Some(BatchPlan { parameter: name.clone(), concurrency })
        });
        let extra: Vec<String> = batch.iter().map(|b| b.parameter.clone()).collect();
        if route.batch.is_some() && batch.is_none() {
            return None;
        }
        if route.parts.is_empty() {
            report.error(span.clone(), &format!("{field}.part"), "an aggregate needs at least one [[listener.route.part]] with a name, a service, a path and its `missing` contract");
        }
        let mut seen: Vec<&str> = Vec::new();
        let parts: Vec<Option<PartPlan>> = route
            .parts
            .iter()
            .enumerate()
            .map(|(i, part)| {
                if let Some(name) = &part.get_ref().name {
                    if seen.contains(&name.get_ref().as_str()) {
                        report.error(
                            name.span(),
                            &format!("{field}.part[{i}].name"),
                            format!(
                                "part {:?} is defined twice; names must be unique",
                                name.get_ref()
                            ),
                        );
                    }
                    seen.push(name.get_ref());
                }
                self.part(report, &format!("{field}.part[{i}]"), part, &extra)
            })
            .collect();
        let variables: Vec<&str> = self
            .captures
            .iter()
            .chain(&extra)
            .map(String::as_str)
            .collect();
        let merge = report
            .required(
                route.merge.as_ref(),
                span,
                &format!("{field}.merge"),
                "merge = '.durum + {ucret: .ucret}', a jq expression over the parts",
            )
            .and_then(|merge| expression(report, &format!("{field}.merge"), merge, &variables));
        let views = self.views(report, route, &variables);
        let parts: Option<Vec<PartPlan>> = parts.into_iter().collect();
        Some(TargetPlan::Aggregate(Arc::new(AggregatePlan {
            parts: parts?,
            merge: merge?,
            views: views?,
            batch,
        })))
    }

    fn part(
        &self,
        report: &mut Report,
        field: &str,
        part: &Spanned<Part>,
        extra: &[String],
    ) -> Option<PartPlan> {
        let span = part.span();
        let part = part.get_ref();
        let name = report.required(
            part.name.as_ref(),
            span.clone(),
            &format!("{field}.name"),
            "name = \"ucret\", the part's key in the merge expression",
        );
        let service = report
            .required(
                part.service.as_ref(),
                span.clone(),
                &format!("{field}.service"),
                "service = \"ucret\", the pool that answers the part",
            )
            .and_then(|service| {
                let inner = Check { field, ..*self };
                inner
                    .pool(report, service, "service")
                    .map(|_| service.get_ref().clone())
            });
        let path = report
            .required(
                part.path.as_ref(),
                span.clone(),
                &format!("{field}.path"),
                "path = \"/ucret/{no}\", the upstream path",
            )
            .and_then(|path| Check { field, ..*self }.upstream(report, path, "path", extra));
        let missing = report
            .required(
                part.missing.as_ref(),
                span,
                &format!("{field}.missing"),
                "missing = \"null\", \"omit\" or \"fail\": what the answer is without this part",
            )
            .and_then(|missing| {
                missing
                    .get_ref()
                    .parse::<Missing>()
                    .map_err(|message| {
                        report.error(missing.span(), &format!("{field}.missing"), message)
                    })
                    .ok()
            });
        let timeout = report.above_zero(
            &part.timeout,
            &format!("{field}.timeout"),
            "a timeout",
            "the part could never answer",
        );
        Some(PartPlan {
            name: name?.get_ref().clone(),
            service: service?,
            path: path?,
            timeout,
            missing: missing?,
        })
    }

    /// `client_header` and the `[[listener.route.view]]`s; `Some(None)` when there are none.
    fn views(
        &self,
        report: &mut Report,
        route: &Route,
        variables: &[&str],
    ) -> Option<Option<ViewsPlan>> {
        let field = self.field;
        if route.views.is_empty() {
            if let Some(header) = &route.client_header {
                report.error(
                    header.span(),
                    &format!("{field}.client_header"),
                    "`client_header` chooses among [[listener.route.view]]s; add at least one",
                );
            }
            return Some(None);
        }
        let header = report
            .required(
                route.client_header.as_ref(),
                route.views[0].span(),
                &format!("{field}.client_header"),
                "client_header = \"x-istemci\", the request header that names the client type",
            )
            .and_then(|header| {
                HeaderName::from_bytes(header.get_ref().as_bytes())
                    .map_err(|_| {
                        report.error(
                            header.span(),
                            &format!("{field}.client_header"),
                            format!("{:?} is not a valid header name", header.get_ref()),
                        )
                    })
                    .ok()
            });
        let views: Vec<Option<ViewPlan>> = route
            .views
            .iter()
            .enumerate()
            .map(|(i, view)| view_plan(report, &format!("{field}.view[{i}]"), view, variables))
            .collect();
        let views: Option<Vec<ViewPlan>> = views.into_iter().collect();
        Some(Some(ViewsPlan {
            chooser: ClientChooser::Header(header?),
            views: views?,
        }))
    }

    fn ambassador(
        &self,
        report: &mut Report,
        span: Range<usize>,
        route: &Route,
    ) -> Option<TargetPlan> {
        let field = self.field;
        let service = report
            .required(
                route.service.as_ref(),
                span.clone(),
                &format!("{field}.service"),
                "service = \"tasiyici\", the pool of the external service",
            )
            .and_then(|service| {
                self.pool(report, service, "service")
                    .map(|_| service.get_ref().clone())
            });
        let path = report
            .required(
                route.upstream_path.as_ref(),
                span.clone(),
                &format!("{field}.upstream_path"),
                "upstream_path = \"/v1/durum?no={no}\", the external contract's path",
            )
            .and_then(|path| self.upstream(report, path, "upstream_path", &[]));
        let variables: Vec<&str> = self
            .captures
            .iter()
            .map(String::as_str)
            .chain(["status"])
            .collect();
        let answer = report
            .required(route.answer.as_ref(), span, &format!("{field}.answer"), "answer = '{durum: .state}', a jq expression from the external answer to the local one")
            .and_then(|answer| expression(report, &format!("{field}.answer"), answer, &variables));
        let status = match &route.status {
            Some(status) => Some(expression(
                report,
                &format!("{field}.status"),
                status,
                &variables,
            )?),
            None => None,
        };
        let timeout = report.above_zero(
            &route.timeout,
            &format!("{field}.timeout"),
            "a timeout",
            "the call could never answer",
        );
        Some(TargetPlan::Ambassador(Arc::new(AmbassadorPlan {
            service: service?,
            path: path?,
            timeout,
            answer: answer?,
            status,
        })))
    }
}

fn view_plan(
    report: &mut Report,
    field: &str,
    view: &Spanned<View>,
    variables: &[&str],
) -> Option<ViewPlan> {
    let client = report.required(
        view.get_ref().client.as_ref(),
        view.span(),
        &format!("{field}.client"),
        "client = \"mobil\", the client type's name",
    );
    let project = report
        .required(
            view.get_ref().project.as_ref(),
            view.span(),
            &format!("{field}.project"),
            "project = '{takipNo, durum}', the client's fields",
        )
        .and_then(|project| expression(report, &format!("{field}.project"), project, variables));
    Some(ViewPlan {
        client: client?.get_ref().clone(),
        project: project?,
    })
}

/// Compiles a jq expression, each error placed at its line and column inside the TOML string.
fn expression(
    report: &mut Report,
    field: &str,
    code: &Spanned<String>,
    variables: &[&str],
) -> Option<Arc<Expression>> {
    match Expression::compile(code.get_ref(), variables) {
        Ok(expression) => Some(Arc::new(expression)),
        Err(errors) => {
            let start = report
                .file_text()
                .and_then(|text| content_start(text, code.span(), code.get_ref()));
            let known = if variables.is_empty() {
                String::new()
            } else {
                format!(
                    " (variables here: {})",
                    variables
                        .iter()
                        .map(|v| format!("${v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            for error in errors {
                let span = match start {
                    Some(start) => start + error.span.start..start + error.span.end,
                    None => code.span(),
                };
                report.error(span, field, format!("jq: {}{known}", error.message));
            }
            None
        }
    }
}

/// Where a string's content begins in the file, when the file holds it verbatim (a literal
/// string, or a basic one without escapes); `None` otherwise (errors then point at the string).
fn content_start(text: &str, span: Range<usize>, value: &str) -> Option<usize> {
    let written = text.get(span.clone())?;
    let mut start = span.start
        + if written.starts_with("'''") || written.starts_with("\"\"\"") {
            3
        } else {
            1
        };
    // A newline right after a multi-line string's opening is not part of the value.
    if written.len() > 3 && (written.starts_with("'''") || written.starts_with("\"\"\"")) {
        if text[start..].starts_with("\r\n") {
            start += 2;
        } else if text[start..].starts_with('\n') {
            start += 1;
        }
    }
    (text.get(start..start + value.len()) == Some(value)).then_some(start)
}

fn is_variable(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn names(captures: &[String]) -> String {
    if captures.is_empty() {
        "none".to_owned()
    } else {
        captures
            .iter()
            .map(|c| format!("{{{c}}}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ConfigError, load};

    const BASE: &str = r#"
[[pool]]
name = "durum"
backends = [{ address = "127.0.0.1:8471" }]

[[pool]]
name = "ucret"
backends = [{ address = "127.0.0.1:8472" }]

[[listener]]
name = "gecit"
listen = "127.0.0.1:8473"
"#;

    fn errors(routes: &str) -> Vec<ConfigError> {
        load("g.toml", &format!("{BASE}{routes}")).expect_err("an invalid config")
    }

    fn line_of(routes: &str, needle: &str) -> usize {
        format!("{BASE}{routes}")
            .lines()
            .position(|line| line.contains(needle))
            .unwrap()
            + 1
    }

    #[test]
    fn a_jq_error_is_placed_at_its_line_and_column_inside_the_toml_string() {
        let routes = r#"
[[listener.route]]
path = "/takip/{no}"
target = "aggregate"
merge = '''
.durum + {
  ucret: (.ucret | if . then {tarife} else null end),
  no: $numara
}'''

[[listener.route.part]]
name = "durum"
service = "durum"
path = "/durum/{no}"
missing = "fail"
"#;
        let found = errors(routes);
        assert_eq!(found.len(), 1, "{found:?}");
        let line = line_of(routes, "no: $numara");
        assert_eq!(found[0].place, format!("g.toml:{line}:7"));
        assert_eq!(found[0].field, "listener[0].route[0].merge");
        assert!(
            found[0].message.contains("undefined variable"),
            "{}",
            found[0]
        );
        assert!(
            found[0].message.contains("$no"),
            "names the variables there are: {}",
            found[0]
        );

        let syntax = errors(&routes.replace("no: $numara", "no: (.a | "));
        assert!(
            syntax[0]
                .place
                .starts_with(&format!("g.toml:{}:", line + 1)),
            "{syntax:?}"
        );
    }

    #[test]
    fn every_problem_of_a_gateway_route_is_reported_at_once() {
        let routes = r#"
[[listener.route]]
path = "/takip/{no}/{part}"
service = "{parca}"
services = ["durum"]

[[listener.route]]
path = "/takip/{no}"
target = "aggregate"
merge = "."
pool = "durum"

[[listener.route.part]]
name = "ucret"
service = "ucrett"
path = "/ucret/{numara}"
missing = "maybe"

[[listener.route]]
path = "/x/{no}"
target = "ambassador"
service = "durum"
upstream_path = "/v1?no={no}"
answer = ".code | ("
"#;
        let found = errors(routes);
        let text: Vec<String> = found.iter().map(ToString::to_string).collect();
        let expect = [
            ("route[0].service", "{parca} is not captured"),
            ("route[1].pool", "`pool` belongs to a pool route"),
            (
                "route[1].part[0].service",
                "no pool is named \"ucrett\"; did you mean \"ucret\"?",
            ),
            ("route[1].part[0].path", "{numara} is not captured"),
            (
                "route[1].part[0].missing",
                "expected \"null\", \"omit\" or \"fail\"",
            ),
            ("route[2].answer", "jq: expected"),
        ];
        for (field, message) in expect {
            assert!(
                text.iter()
                    .any(|t| t.contains(field) && t.contains(message)),
                "{field}: {message} not in {text:#?}"
            );
        }
        assert_eq!(found.len(), expect.len(), "{text:#?}");
    }

    #[test]
    fn a_capture_needs_the_map_and_a_template_needs_no_prefix() {
        let found = errors(
            r#"
[[listener.route]]
path = "/takip/{no}/{part}"
path_prefix = "/takip"
service = "{part}"
"#,
        );
        let text: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert!(text.iter().any(|t| t.contains("either `path`")), "{text:?}");
        assert!(
            text.iter().any(|t| t.contains("missing `services`")),
            "{text:?}"
        );
    }
}
