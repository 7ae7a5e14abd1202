//! `[listener.route.gate]`: the gatekeeper's rules, each pattern and schema compiled here so a
//! config that passes `trafik check` cannot fail to build at `serve`.

use http::HeaderName;
use toml::Spanned;
use trafik_policy::gate;
use trafik_proxy::plan::GatePlan;

use super::report::Report;
use super::schema::Gate;

pub fn check(report: &mut Report, route: &str, settings: &Spanned<Gate>) -> Option<GatePlan> {
    let field = format!("{route}.gate");
    let gate = settings.get_ref();
    let errors_before = report.error_count();
    for path in &gate.paths {
        if !path.get_ref().starts_with('/') {
            report.error(
                path.span(),
                &format!("{field}.paths"),
                format!(
                    "expected a path starting with \"/\", found {:?}",
                    path.get_ref()
                ),
            );
        }
    }
    let mut headers = Vec::new();
    for line in &gate.headers {
        let parsed = line
            .get_ref()
            .split_once(':')
            .ok_or_else(|| {
                format!(
                    "expected \"Name: regex\" such as \"x-istemci: ^[a-z]+$\", found {:?}",
                    line.get_ref()
                )
            })
            .and_then(|(name, pattern)| {
                let name = HeaderName::from_bytes(name.trim().as_bytes())
                    .map_err(|_| format!("{:?} is not a header name", name.trim()))?;
                gate::pattern(pattern.trim())?;
                Ok((name, pattern.trim().to_owned()))
            });
        match parsed {
            Ok(header) => headers.push(header),
            Err(message) => report.error(line.span(), &format!("{field}.headers"), message),
        }
    }
    if let Some(token) = &gate.token
        && let Err(message) = gate::pattern(token.get_ref())
    {
        report.error(token.span(), &format!("{field}.token"), message);
    }
    let mut schema = |key: &str, value: &Option<Spanned<toml::Value>>| {
        let value = value.as_ref()?;
        let json = serde_json::to_value(value.get_ref()).map_err(|e| e.to_string());
        match json.and_then(|json| gate::schema(&json).map(|_| json.to_string())) {
            Ok(text) => Some(text),
            Err(message) => {
                report.error(value.span(), &format!("{field}.{key}"), message);
                None
            }
        }
    };
    let query_schema = schema("query_schema", &gate.query_schema);
    let body_schema = schema("body_schema", &gate.body_schema);
    (report.error_count() == errors_before).then(|| GatePlan {
        paths: gate.paths.iter().map(|p| p.get_ref().clone()).collect(),
        headers,
        token: gate.token.as_ref().map(|t| t.get_ref().clone()),
        query_schema,
        body_schema,
        body_limit: gate.body_limit.get_ref().0,
    })
}
