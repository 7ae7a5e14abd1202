//! `[tracing]`: W3C trace context and the OTLP collector spans go to.

use http::Uri;
use toml::Spanned;
use trafik_proxy::{OtlpPlan, TracingPlan};

use super::report::Report;
use super::schema::Tracing;

pub fn check(report: &mut Report, tracing: Tracing, server_name: &str) -> TracingPlan {
    let written = |value: Option<Spanned<String>>| value.filter(|v| !v.get_ref().is_empty());
    let otlp = written(tracing.otlp_endpoint).and_then(|endpoint| {
        match endpoint.get_ref().parse::<Uri>() {
            Ok(uri) if uri.scheme_str() == Some("http") && uri.host().is_some() => Some(OtlpPlan {
                endpoint: uri,
                service_name: written(tracing.service_name)
                    .map_or_else(|| server_name.to_owned(), Spanned::into_inner),
            }),
            _ => {
                report.error(
                    endpoint.span(),
                    "tracing.otlp_endpoint",
                    format!(
                        "expected an http:// URL of an OTLP/HTTP collector, such as \"http://127.0.0.1:4318/v1/traces\", found {:?}",
                        endpoint.get_ref()
                    ),
                );
                None
            }
        }
    });
    TracingPlan {
        start: tracing.start,
        otlp,
    }
}
