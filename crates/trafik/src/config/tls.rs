//! `[[listener.tls]]` and a pool's `tls`, `ca` and `sni`: the files are read and checked here,
//! so `trafik check` (and a reload) finds a missing file, bad PEM or a key of another
//! certificate at the value that names it, and nothing starts (or changes) until it is fixed.

use std::sync::Arc;

use toml::Spanned;
use trafik_proxy::tls::backend::{self, BackendTls};
use trafik_proxy::tls::{Certificate, CertificateError, TrustRoots};

use super::report::Report;
use super::schema::{ListenerTls, Pool, Protocol};

/// The certificates of listener `field`: required for `https`, refused for other protocols.
pub fn listener(
    report: &mut Report,
    field: &str,
    protocol: &Spanned<Protocol>,
    entries: Vec<Spanned<ListenerTls>>,
) -> Option<Vec<Arc<Certificate>>> {
    match (*protocol.get_ref(), entries.first()) {
        (Protocol::Https, None) => {
            report.error(
                protocol.span(),
                &format!("{field}.tls"),
                "an https listener needs a certificate: add [[listener.tls]] with cert = \"site.pem\" and key = \"site.key\"",
            );
            return None;
        }
        (Protocol::Https, Some(_)) => {}
        (_, Some(first)) => {
            report.error(
                first.span(),
                &format!("{field}.tls"),
                "certificates are for https listeners: set protocol = \"https\" or remove [[listener.tls]]",
            );
            return None;
        }
        (_, None) => return Some(Vec::new()),
    }
    let mut certificates = Vec::new();
    for (i, entry) in entries.into_iter().enumerate() {
        let field = format!("{field}.tls[{i}]");
        let certificate = certificate(report, &field, entry);
        if let Some((loaded, cert_span)) = &certificate
            && loaded.names.is_empty()
            && i > 0
        {
            report.error(
                cert_span.clone(),
                &format!("{field}.cert"),
                "this certificate names no DNS host (subject alternative names), so it could never be chosen: only a listener's first certificate, the default, may lack names",
            );
        }
        certificates.push(certificate.map(|(certificate, _)| Arc::new(certificate)));
    }
    certificates.into_iter().collect()
}

/// One `[[listener.tls]]` entry, read, with the span of its `cert` value.
fn certificate(
    report: &mut Report,
    field: &str,
    entry: Spanned<ListenerTls>,
) -> Option<(Certificate, std::ops::Range<usize>)> {
    let span = entry.span();
    let entry = entry.into_inner();
    let cert_example = format!(
        "{}, the certificate chain (PEM, leaf first)",
        report.setting(&format!("{field}.cert"), "\"site.pem\"")
    );
    let cert = report.required(
        entry.cert,
        span.clone(),
        &format!("{field}.cert"),
        &cert_example,
    );
    let key_example = format!(
        "{}, the certificate's private key (PEM)",
        report.setting(&format!("{field}.key"), "\"site.key\"")
    );
    let key = report.required(entry.key, span, &format!("{field}.key"), &key_example);
    let (cert, key) = (cert?, key?);
    match Certificate::load(&report.path(cert.get_ref()), &report.path(key.get_ref())) {
        Ok(certificate) => Some((certificate, cert.span())),
        Err(errors) => {
            for error in errors {
                match error {
                    CertificateError::Certificate(message) => {
                        report.error(cert.span(), &format!("{field}.cert"), message);
                    }
                    CertificateError::Key(message) => {
                        report.error(key.span(), &format!("{field}.key"), message);
                    }
                }
            }
            None
        }
    }
}

/// A pool's TLS to its backends; `Some(None)` for a plain pool, `None` after an error.
pub fn pool(report: &mut Report, field: &str, pool: &Pool) -> Option<Option<BackendTls>> {
    if !*pool.tls.get_ref() {
        for (key, value) in [("ca", &pool.ca), ("sni", &pool.sni)] {
            if let Some(value) = value {
                report.error(
                    value.span(),
                    &format!("{field}.{key}"),
                    format!("`{key}` applies to TLS: add tls = true to this pool, or remove it"),
                );
            }
        }
        return Some(None);
    }
    let roots = match &pool.ca {
        Some(ca) => TrustRoots::from_file(&report.path(ca.get_ref()))
            .map_err(|message| report.error(ca.span(), &format!("{field}.ca"), message)),
        None => TrustRoots::system()
            .map_err(|message| report.error(pool.tls.span(), &format!("{field}.tls"), message)),
    };
    let server_name = match &pool.sni {
        Some(sni) => backend::server_name(sni.get_ref())
            .map(Some)
            .map_err(|message| report.error(sni.span(), &format!("{field}.sni"), message)),
        None => Ok(None),
    };
    let (roots, server_name) = (roots.ok()?, server_name.ok()?);
    BackendTls::new(&roots, server_name)
        .map(Some)
        .map_err(|message| report.error(pool.tls.span(), &format!("{field}.tls"), message))
        .ok()
}
