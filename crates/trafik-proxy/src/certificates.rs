//! ACME certificates in the admin API: their expiry, renewal time and last error in `/status`
//! and `/metrics`, and `POST /certificates/renew` (`trafik cert renew`) to order now.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use trafik_metrics_text::{Exposition, Kind};

use crate::tls::acme::{Managed, registry};

fn seconds(time: Option<SystemTime>) -> Option<u64> {
    time.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
}

fn label(managed: &Managed) -> String {
    managed.spec.domains.join(",")
}

/// Each managed certificate: whether one is served, its validity, when it is renewed, and
/// the last failure (cleared by the next success).
pub fn status() -> Value {
    let entries: Vec<Value> = registry()
        .all()
        .iter()
        .map(|managed| {
            let state = managed.state().clone();
            json!({
                "domains": managed.spec.domains,
                "challenge": managed.spec.challenge.name(),
                "directory": managed.spec.directory,
                "serving": managed.current().is_some(),
                "not_before": seconds(state.not_before),
                "not_after": seconds(state.not_after),
                "renew_at": seconds(state.renew_at),
                "renewals": state.renewals,
                "ordered": state.ordered,
                "failures": state.failures,
                "last_error": state.last_error,
                "last_error_at": seconds(state.last_error_at),
            })
        })
        .collect();
    Value::Array(entries)
}

/// A family's name, kind and help, and its value for one certificate.
type MetricFamily = (&'static str, Kind, &'static str, fn(&Managed) -> u64);

pub fn metrics(exposition: &mut Exposition) {
    let all = registry().all();
    if all.is_empty() {
        return;
    }
    let families: [MetricFamily; 4] = [
        (
            "trafik_certificate_expiry_timestamp_seconds",
            Kind::Gauge,
            "When the ACME certificate served ends (Unix time; 0 while none is served).",
            |managed| {
                let not_after = seconds(managed.state().not_after);
                managed.current().and(not_after).unwrap_or(0)
            },
        ),
        (
            "trafik_certificate_renewals_total",
            Kind::Counter,
            "ACME certificates obtained or taken from the store since start.",
            |managed| managed.state().renewals,
        ),
        (
            "trafik_certificate_failures_total",
            Kind::Counter,
            "ACME orders that failed since start (the served certificate stayed).",
            |managed| managed.state().failures,
        ),
        (
            "trafik_certificate_failing",
            Kind::Gauge,
            "1 while the last ACME order of the certificate failed.",
            |managed| u64::from(managed.state().last_error.is_some()),
        ),
    ];
    for (name, kind, help, value) in families {
        let mut family = exposition.family(name, kind, help);
        for managed in &all {
            family.sample(&[("domains", label(managed))], value(managed));
        }
    }
}

/// Asks for a new certificate now: every managed one, or those naming `domain`. Returns the
/// domains of the certificates asked.
pub fn renew(domain: Option<&str>) -> Vec<Vec<String>> {
    registry()
        .all()
        .into_iter()
        .filter(|managed| domain.is_none_or(|name| managed.serves(name)))
        .map(|managed| {
            managed.request_renewal();
            managed.spec.domains.clone()
        })
        .collect()
}
