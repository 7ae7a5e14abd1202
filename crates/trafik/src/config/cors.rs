//! `[listener.route.cors]`: the origins (exact, or wildcard subdomains) that may call a route
//! from a browser, with which methods and headers, and whether with credentials. Checked here
//! so what passes `trafik check` builds at `serve`.

use http::{HeaderName, Method};
use toml::Spanned;
use trafik_policy::cors::Origins;
use trafik_proxy::plan::CorsPlan;

use super::report::Report;
use super::schema::{Cors, Route};

pub fn check(
    report: &mut Report,
    route_field: &str,
    route: &Route,
    settings: &Spanned<Cors>,
) -> Option<CorsPlan> {
    let field = format!("{route_field}.cors");
    let cors = settings.get_ref();
    let errors_before = report.error_count();
    let listed = report.required(
        cors.origins.as_ref(),
        settings.span(),
        &format!("{field}.origins"),
        "origins = [\"https://a.test\"], the origins whose pages may call this route (exact, \"https://*.a.test\" for its subdomains, or \"*\")",
    );
    if let Some(listed) = listed
        && listed.get_ref().is_empty()
    {
        report.error(
            listed.span(),
            &format!("{field}.origins"),
            "expected at least one origin such as \"https://a.test\"",
        );
    }
    let mut origins = Vec::new();
    for origin in listed.map_or(&[][..], |l| l.get_ref()) {
        let text = origin.get_ref();
        match Origins::parse(std::slice::from_ref(text)) {
            Ok(_) => origins.push(text.clone()),
            Err(message) => report.error(origin.span(), &format!("{field}.origins"), message),
        }
        if text == "*" && cors.credentials {
            report.error(
                origin.span(),
                &format!("{field}.origins"),
                "credentials = true needs the origins listed: browsers refuse \"*\" with credentials, and answering any origin with credentials would let every site read its visitors' data",
            );
        }
    }
    let methods = match &cors.methods {
        None => vec![Method::GET, Method::HEAD, Method::POST],
        Some(listed) => listed
            .iter()
            .filter_map(|method| {
                let text = method.get_ref();
                match Method::from_bytes(text.as_bytes()) {
                    Ok(parsed) if text.bytes().all(|b| b.is_ascii_uppercase()) => Some(parsed),
                    _ => {
                        report.error(
                            method.span(),
                            &format!("{field}.methods"),
                            format!("expected an HTTP method in capitals such as \"PUT\", found {text:?}"),
                        );
                        None
                    }
                }
            })
            .collect(),
    };
    let mut names = |key: &str, list: &[Spanned<String>]| -> Vec<String> {
        let mut names = Vec::new();
        for name in list {
            let text = name.get_ref();
            if text == "*" && cors.credentials {
                report.error(
                    name.span(),
                    &format!("{field}.{key}"),
                    "with credentials = true, browsers read \"*\" as a header named *: list the names",
                );
            } else if text != "*" && HeaderName::from_bytes(text.as_bytes()).is_err() {
                report.error(
                    name.span(),
                    &format!("{field}.{key}"),
                    format!("expected a header name such as \"x-takip\", found {text:?}"),
                );
            } else {
                names.push(text.to_ascii_lowercase());
            }
        }
        names
    };
    let headers = names("headers", &cors.headers);
    let expose = names("expose", &cors.expose);
    if !route.methods.is_empty() && !route.methods.iter().any(|m| m.get_ref() == "OPTIONS") {
        report.error(
            settings.span(),
            &field,
            "the route's `methods` leave out OPTIONS, so no browser's preflight would reach this CORS step: add \"OPTIONS\" to them",
        );
    }
    if report.error_count() != errors_before {
        return None;
    }
    Some(CorsPlan {
        origins: Origins::parse(&origins).ok()?,
        methods,
        headers,
        expose: expose
            .iter()
            .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
            .collect(),
        credentials: cors.credentials,
        max_age: cors.max_age.as_ref().map(|age| age.get_ref().0),
    })
}
