//! `[[listener.tls]] acme = { … }`: a certificate ordered and renewed with ACME (RFC 8555). The
//! settings are checked here; the order itself runs beside the proxy (`trafik_proxy::tls::acme::manager`).

use std::sync::Arc;

use toml::Spanned;
use trafik_proxy::tls::TrustRoots;
use trafik_proxy::tls::acme::{AcmeSpec, ChallengeKind, Managed, registry};

use super::report::Report;
use super::schema::Acme;

/// The managed certificate of `acme` (the one already serving when a reload keeps its settings).
pub fn check(
    report: &mut Report,
    field: &str,
    acme: Spanned<Acme>,
    has_plain: bool,
) -> Option<Arc<Managed>> {
    let span = acme.span();
    let acme = acme.into_inner();
    let field = format!("{field}.acme");
    let domains = report.required(
        acme.domains,
        span.clone(),
        &format!("{field}.domains"),
        "domains = [\"example.com\", \"www.example.com\"], the names the certificate is for",
    );
    let domains = domains.and_then(|domains| checked_domains(report, &field, domains));
    let directory = report.required(
        acme.directory,
        span.clone(),
        &format!("{field}.directory"),
        "directory = \"https://acme-v02.api.letsencrypt.org/directory\", the CA's ACME directory",
    );
    let directory = directory.and_then(|directory| {
        if directory.get_ref().starts_with("https://") {
            return Some(directory.into_inner());
        }
        report.error(
            directory.span(),
            &format!("{field}.directory"),
            "an ACME directory is an https:// URL (RFC 8555 §6.1)",
        );
        None
    });
    let directory_ca = match acme.directory_ca {
        None => Some(None),
        Some(ca) => {
            let path = report.path(ca.get_ref());
            match TrustRoots::from_file(&path) {
                Ok(_) => Some(Some(path)),
                Err(message) => {
                    report.error(ca.span(), &format!("{field}.directory_ca"), message);
                    None
                }
            }
        }
    };
    let email = match acme.email {
        Some(email) if !email.get_ref().contains('@') => {
            report.error(
                email.span(),
                &format!("{field}.email"),
                "expected an email address, such as \"ops@example.com\"",
            );
            None
        }
        email => Some(email.map(Spanned::into_inner)),
    };
    let challenge = match acme.challenge {
        None => Some(ChallengeKind::Http01),
        Some(challenge) => match challenge.get_ref().as_str() {
            "http-01" => Some(ChallengeKind::Http01),
            "tls-alpn-01" => Some(ChallengeKind::TlsAlpn01),
            other => {
                report.error(
                    challenge.span(),
                    &format!("{field}.challenge"),
                    format!(
                        "unknown challenge {other:?}: expected \"http-01\" (answered by a plain http listener) or \"tls-alpn-01\" (answered by this listener)"
                    ),
                );
                None
            }
        },
    };
    if challenge == Some(ChallengeKind::Http01) && !has_plain {
        report.error(
            span.clone(),
            &format!("{field}.challenge"),
            "http-01 is answered by a plain http listener on port 80, and this configuration has none: add one (a [[listener]] with protocol = \"http\"), or use challenge = \"tls-alpn-01\"",
        );
    }
    let storage = report.required(
        acme.storage,
        span,
        &format!("{field}.storage"),
        "storage = \"acme\", the folder the account key and certificates are kept in",
    );
    let spec = AcmeSpec {
        domains: domains?,
        directory: directory?,
        directory_ca: directory_ca?,
        email: email?,
        challenge: challenge?,
        storage: report.path(storage?.get_ref()),
    };
    Some(registry().managed(spec).0)
}

/// The names, in lower case: plain DNS names (no wildcard, which neither challenge can prove).
fn checked_domains(
    report: &mut Report,
    field: &str,
    domains: Spanned<Vec<Spanned<String>>>,
) -> Option<Vec<String>> {
    if domains.get_ref().is_empty() {
        report.error(
            domains.span(),
            &format!("{field}.domains"),
            "no domain: name at least one, such as domains = [\"example.com\"]",
        );
        return None;
    }
    let mut checked = Vec::new();
    let mut clean = true;
    for (i, domain) in domains.into_inner().into_iter().enumerate() {
        let name = domain.get_ref().to_ascii_lowercase();
        let problem = if name.starts_with("*.") {
            Some(
                "a wildcard needs the dns-01 challenge, which trafik does not answer: name each host",
            )
        } else if rustls_pki_types::DnsName::try_from(name.as_str()).is_err() || !name.contains('.')
        {
            Some("not a DNS name, such as \"example.com\"")
        } else {
            None
        };
        match problem {
            Some(problem) => {
                clean = false;
                report.error(domain.span(), &format!("{field}.domains[{i}]"), problem);
            }
            None => checked.push(name),
        }
    }
    clean.then_some(checked)
}
