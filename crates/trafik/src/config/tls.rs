//! `[[listener.tls]]` and a pool's `tls`, `ca` and `sni`: the files are read and checked here,
//! so `trafik check` (and a reload) finds a missing file, bad PEM or a key of another
//! certificate at the value that names it, and nothing starts (or changes) until it is fixed.

use std::sync::Arc;

use http::HeaderName;
use toml::Spanned;
use trafik_proxy::plan::UpstreamProtocol;
use trafik_proxy::tls::acme::Managed;
use trafik_proxy::tls::backend::{self, BackendTls};
use trafik_proxy::tls::{Certificate, CertificateError, ClientAuth, IdentityHeaders, TrustRoots};

use super::report::Report;
use super::schema::{Listener, ListenerTls, Pool, Protocol};

/// A listener's certificates from files, and those ordered with ACME.
pub type ListenerCertificates = (Vec<Arc<Certificate>>, Vec<Arc<Managed>>);

/// The certificates of listener `field`, from files and ordered with ACME: required for
/// `https`, refused for other protocols.
pub fn listener(
    report: &mut Report,
    field: &str,
    protocol: &Spanned<Protocol>,
    entries: Vec<Spanned<ListenerTls>>,
    has_plain: bool,
) -> Option<ListenerCertificates> {
    match (*protocol.get_ref(), entries.first()) {
        (Protocol::Https, None) => {
            report.error(
                protocol.span(),
                &format!("{field}.tls"),
                "an https listener needs a certificate: add [[listener.tls]] with cert = \"site.pem\" and key = \"site.key\", or acme = { domains = [\"example.com\"], directory = \"https://acme-v02.api.letsencrypt.org/directory\", storage = \"acme\" }",
            );
            return None;
        }
        (Protocol::H3, None) => {
            report.error(
                protocol.span(),
                &format!("{field}.tls"),
                "an h3 listener with routes of its own needs a certificate of its own: add [[listener.tls]], or leave out both its routes and certificates to serve those of the https listener on the same address",
            );
            return None;
        }
        (Protocol::Https | Protocol::H3, Some(_)) => {}
        (_, Some(first)) => {
            report.error(
                first.span(),
                &format!("{field}.tls"),
                "certificates are for https listeners (and h3 ones): set protocol = \"https\" or remove [[listener.tls]]",
            );
            return None;
        }
        (_, None) => return Some((Vec::new(), Vec::new())),
    }
    let mut certificates = Vec::new();
    let mut managed = Vec::new();
    for (i, mut entry) in entries.into_iter().enumerate() {
        let field = format!("{field}.tls[{i}]");
        if let Some(acme) = entry.get_mut().acme.take() {
            for (key, value) in [
                ("cert", &entry.get_ref().cert),
                ("key", &entry.get_ref().key),
            ] {
                if let Some(value) = value {
                    report.error(
                        value.span(),
                        &format!("{field}.{key}"),
                        "a certificate comes from files or from ACME, not both: remove cert and key, or acme",
                    );
                }
            }
            managed.push(super::acme::check(report, &field, acme, has_plain));
            continue;
        }
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
    let certificates = certificates.into_iter().collect::<Option<Vec<_>>>();
    let managed = managed.into_iter().collect::<Option<Vec<_>>>();
    certificates.zip(managed)
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
    let loaded = load(
        report,
        (&format!("{field}.cert"), &cert),
        (&format!("{field}.key"), &key),
    );
    Some((loaded?, cert.span()))
}

/// Reads a certificate and its key, each problem reported at the value (and field) of the file
/// it is in.
fn load(
    report: &mut Report,
    (cert_field, cert): (&str, &Spanned<String>),
    (key_field, key): (&str, &Spanned<String>),
) -> Option<Certificate> {
    match Certificate::load(&report.path(cert.get_ref()), &report.path(key.get_ref())) {
        Ok(certificate) => Some(certificate),
        Err(errors) => {
            for error in errors {
                match error {
                    CertificateError::Certificate(message) => {
                        report.error(cert.span(), cert_field, message);
                    }
                    CertificateError::Key(message) => report.error(key.span(), key_field, message),
                }
            }
            None
        }
    }
}

/// A listener's mutual TLS (`client_ca`, `client_auth`, `client_headers`); `Some(None)` when
/// it has none, `None` after an error.
pub fn client_auth(
    report: &mut Report,
    field: &str,
    listener: &Listener,
) -> Option<Option<ClientAuth>> {
    let Some(ca) = &listener.client_ca else {
        for (key, span) in [
            (
                "client_auth",
                listener.client_auth.as_ref().map(Spanned::span),
            ),
            (
                "client_headers",
                listener.client_headers.as_ref().map(Spanned::span),
            ),
        ] {
            if let Some(span) = span {
                report.error(
                    span,
                    &format!("{field}.{key}"),
                    "client certificates need the CA they are verified against: add client_ca = \"clients-ca.pem\"",
                );
            }
        }
        return Some(None);
    };
    let mut ok = true;
    if !matches!(listener.protocol.get_ref(), Protocol::Https | Protocol::H3) {
        report.error(
            ca.span(),
            &format!("{field}.client_ca"),
            "client certificates are asked for in the TLS handshake: set protocol = \"https\" (or \"h3\")",
        );
        ok = false;
    }
    let roots = TrustRoots::from_file(&report.path(ca.get_ref()))
        .map_err(|message| report.error(ca.span(), &format!("{field}.client_ca"), message))
        .ok();
    let required = match listener
        .client_auth
        .as_ref()
        .map(|v| (v.get_ref().as_str(), v.span()))
    {
        None | Some(("required", _)) => Some(true),
        Some(("optional", _)) => Some(false),
        Some((other, span)) => {
            report.error(
                span,
                &format!("{field}.client_auth"),
                format!("expected \"required\" (no certificate, no connection) or \"optional\" (served without the identity headers), found {other:?}"),
            );
            None
        }
    };
    let mut headers = IdentityHeaders::default();
    if let Some(written) = &listener.client_headers {
        let written = written.get_ref();
        for (key, value, slot) in [
            ("subject", &written.subject, &mut headers.subject),
            ("sans", &written.sans, &mut headers.sans),
            (
                "fingerprint",
                &written.fingerprint,
                &mut headers.fingerprint,
            ),
        ] {
            let Some(value) = value else { continue };
            match HeaderName::from_bytes(value.get_ref().as_bytes()) {
                Ok(name) => *slot = Some(name),
                Err(_) => {
                    report.error(
                        value.span(),
                        &format!("{field}.client_headers.{key}"),
                        format!("not a header name: {:?}", value.get_ref()),
                    );
                    ok = false;
                }
            }
        }
    }
    let (roots, required) = (roots?, required?);
    ok.then(|| {
        Some(ClientAuth {
            roots,
            required,
            headers: Arc::new(headers),
        })
    })
}

/// A pool's `protocol`.
pub fn protocol(report: &mut Report, field: &str, pool: &Pool) -> Option<UpstreamProtocol> {
    let Some(written) = &pool.protocol else {
        return Some(UpstreamProtocol::Http1);
    };
    let protocol = match written.get_ref().as_str() {
        "http1" => UpstreamProtocol::Http1,
        "h2" => UpstreamProtocol::H2,
        "h2c" => UpstreamProtocol::H2c,
        "auto" => UpstreamProtocol::Auto,
        other => {
            report.error(
                written.span(),
                &format!("{field}.protocol"),
                format!("expected \"http1\", \"h2\" (HTTP/2 over TLS), \"h2c\" (HTTP/2 in the clear) or \"auto\" (by ALPN), found {other:?}"),
            );
            return None;
        }
    };
    let tls = *pool.tls.get_ref();
    let problem = match protocol {
        UpstreamProtocol::H2 if !tls => Some(
            "h2 is HTTP/2 over TLS: add tls = true, or use protocol = \"h2c\" for HTTP/2 in the clear",
        ),
        UpstreamProtocol::H2c if tls => {
            Some("h2c is HTTP/2 in the clear: use protocol = \"h2\" with tls = true")
        }
        UpstreamProtocol::Auto if !tls => Some(
            "auto chooses by ALPN, which needs TLS: add tls = true, or say \"http1\" or \"h2c\"",
        ),
        _ => None,
    };
    if let Some(problem) = problem {
        report.error(written.span(), &format!("{field}.protocol"), problem);
        return None;
    }
    Some(protocol)
}

/// A pool's TLS to its backends; `Some(None)` for a plain pool, `None` after an error.
pub fn pool(
    report: &mut Report,
    field: &str,
    pool: &Pool,
    protocol: UpstreamProtocol,
) -> Option<Option<BackendTls>> {
    if !*pool.tls.get_ref() {
        for (key, value) in [
            ("ca", &pool.ca),
            ("sni", &pool.sni),
            ("client_cert", &pool.client_cert),
            ("client_key", &pool.client_key),
        ] {
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
    let client_certificate = match (&pool.client_cert, &pool.client_key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => load(
            report,
            (&format!("{field}.client_cert"), cert),
            (&format!("{field}.client_key"), key),
        )
        .map(Some)
        .ok_or(()),
        (Some(cert), None) => {
            report.error(
                cert.span(),
                &format!("{field}.client_key"),
                "missing `client_key`: the private key (PEM) of client_cert",
            );
            Err(())
        }
        (None, Some(key)) => {
            report.error(
                key.span(),
                &format!("{field}.client_cert"),
                "missing `client_cert`: the certificate (PEM chain) client_key belongs to",
            );
            Err(())
        }
    };
    let (roots, server_name, client_certificate) =
        (roots.ok()?, server_name.ok()?, client_certificate.ok()?);
    BackendTls::new(
        &roots,
        server_name,
        client_certificate.as_ref(),
        protocol.alpn(),
    )
    .map(Some)
    .map_err(|message| report.error(pool.tls.span(), &format!("{field}.tls"), message))
    .ok()
}
