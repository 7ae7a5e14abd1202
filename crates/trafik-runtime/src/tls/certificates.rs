//! Certificates, keys and trust anchors read from PEM files. Everything is read and checked when
//! the configuration is (by `trafik check`, at start and on every reload), so a missing file,
//! bad PEM or a key that does not belong to its certificate is a configuration error that
//! changes nothing, never a failure at the first handshake.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use super::provider;

/// A certificate chain with its private key, checked to belong together, and the names it
/// serves.
#[derive(Debug)]
pub struct Certificate {
    /// Where it was read from, for `trafik check` and logs.
    pub origin: String,
    /// The DNS names of its subject alternative names, in lower case (`*.example.com` for a
    /// wildcard). The common name is ignored, as browsers ignore it.
    pub names: Vec<String>,
    pub key: Arc<CertifiedKey>,
}

/// What is wrong, and in which of the two files, so the configuration can point at the `cert`
/// or the `key` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertificateError {
    Certificate(String),
    /// A key that does not match its certificate is the key's error.
    Key(String),
}

impl Certificate {
    /// Reads `cert` (the chain, leaf first) and `key` (PEM files), reporting the problems of both
    /// files at once.
    pub fn load(cert: &Path, key: &Path) -> Result<Certificate, Vec<CertificateError>> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
        };
        match (read(cert), read(key)) {
            (Ok(cert_pem), Ok(key_pem)) => {
                Certificate::from_pem(&cert.display().to_string(), &cert_pem, &key_pem)
            }
            (cert_read, key_read) => Err(cert_read
                .err()
                .map(CertificateError::Certificate)
                .into_iter()
                .chain(key_read.err().map(CertificateError::Key))
                .collect()),
        }
    }

    /// A certificate from PEM text already read; `origin` says where it came from.
    pub fn from_pem(
        origin: &str,
        cert_pem: &[u8],
        key_pem: &[u8],
    ) -> Result<Certificate, Vec<CertificateError>> {
        let chain = chain(cert_pem).map_err(CertificateError::Certificate);
        let key = private_key(key_pem).map_err(CertificateError::Key);
        let names = match &chain {
            Ok(chain) => dns_names(&chain[0]).map_err(CertificateError::Certificate),
            Err(_) => Ok(Vec::new()),
        };
        let (chain, key, names) = match (chain, key, names) {
            (Ok(chain), Ok(key), Ok(names)) => (chain, key, names),
            (chain, key, names) => {
                let errors = [chain.err(), names.err(), key.err()];
                return Err(errors.into_iter().flatten().collect());
            }
        };
        let key = CertifiedKey::from_der(chain, key, &provider()).map_err(|error| {
            vec![CertificateError::Key(match error {
                rustls::Error::InconsistentKeys(_) => {
                    "this key does not belong to the certificate (their public keys differ)".into()
                }
                other => format!("the private key cannot be used: {other}"),
            })]
        })?;
        Ok(Certificate {
            origin: origin.to_owned(),
            names,
            key: Arc::new(key),
        })
    }
}

/// The certificates of a PEM file, leaf first; at least one.
fn chain(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a valid PEM certificate file: {}", pem_problem(&e)))?;
    if chain.is_empty() {
        return Err(
            "no certificate in this file (expected a -----BEGIN CERTIFICATE----- block)".into(),
        );
    }
    Ok(chain)
}

/// The first private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
fn private_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|error| match error {
        pem::Error::NoItemsFound => {
            "no private key in this file (expected a -----BEGIN PRIVATE KEY----- block)".into()
        }
        other => format!("not a valid PEM key file: {}", pem_problem(&other)),
    })
}

/// The DNS names a leaf certificate is valid for.
fn dns_names(leaf: &CertificateDer<'_>) -> Result<Vec<String>, String> {
    let parsed = webpki::EndEntityCert::try_from(leaf)
        .map_err(|e| format!("the first certificate cannot be parsed: {e}"))?;
    Ok(parsed
        .valid_dns_names()
        .map(|name| name.to_ascii_lowercase())
        .collect())
}

/// A PEM problem in words; pki-types would print the offending bytes as a list of numbers.
fn pem_problem(error: &pem::Error) -> String {
    match error {
        pem::Error::MissingSectionEnd { end_marker } => format!(
            "no -----END {}----- line (is the file cut short?)",
            String::from_utf8_lossy(end_marker)
        ),
        pem::Error::IllegalSectionStart { line } => {
            format!("a malformed BEGIN line: {}", String::from_utf8_lossy(line))
        }
        pem::Error::Base64Decode(problem) => format!("bad base64 ({problem})"),
        other => other.to_string(),
    }
}

/// The trust anchors a pool verifies its backends' certificates against.
#[derive(Clone, Debug)]
pub struct TrustRoots {
    pub store: Arc<RootCertStore>,
    /// Where they came from: the CA file, or the system's store.
    pub source: String,
}

impl TrustRoots {
    /// The certificates of a PEM file (a private CA, or a backend's self-signed certificate).
    pub fn from_file(path: &Path) -> Result<TrustRoots, String> {
        let pem =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut store = RootCertStore::empty();
        for certificate in chain(&pem)? {
            store
                .add(certificate)
                .map_err(|e| format!("a certificate in this file cannot be a trust anchor: {e}"))?;
        }
        Ok(TrustRoots {
            store: Arc::new(store),
            source: path.display().to_string(),
        })
    }

    /// The operating system's store (`/etc/ssl/certs` on Debian, or `SSL_CERT_FILE` /
    /// `SSL_CERT_DIR`), read anew with every configuration so updated CA packages apply on
    /// reload.
    pub fn system() -> Result<TrustRoots, String> {
        let found = rustls_native_certs::load_native_certs();
        let mut store = RootCertStore::empty();
        store.add_parsable_certificates(found.certs);
        if store.is_empty() {
            let why = found
                .errors
                .first()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            return Err(format!(
                "the system has no trusted root certificates{why}: install ca-certificates or name a CA file with ca = \"FILE\""
            ));
        }
        Ok(TrustRoots {
            store: Arc::new(store),
            source: "the system's trusted roots".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generated(names: &[&str]) -> (String, String) {
        let made = rcgen::generate_simple_self_signed(
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        )
        .unwrap();
        (made.cert.pem(), made.signing_key.serialize_pem())
    }

    #[test]
    fn a_certificate_knows_its_dns_names_and_not_its_addresses() {
        let (cert, key) = generated(&["Kargo.Example", "*.kargo.example", "127.0.0.1"]);
        let loaded = Certificate::from_pem("test", cert.as_bytes(), key.as_bytes()).unwrap();
        assert_eq!(loaded.names, ["kargo.example", "*.kargo.example"]);
    }

    #[test]
    fn a_key_of_another_certificate_is_the_keys_error() {
        let (cert, _) = generated(&["a.example"]);
        let (_, other_key) = generated(&["b.example"]);
        let errors =
            Certificate::from_pem("test", cert.as_bytes(), other_key.as_bytes()).unwrap_err();
        assert!(
            matches!(&errors[..], [CertificateError::Key(m)] if m.contains("does not belong")),
            "{errors:?}"
        );
    }

    #[test]
    fn both_files_are_judged_at_once() {
        let errors = Certificate::from_pem("test", b"not pem", b"").unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            matches!(&errors[0], CertificateError::Certificate(m) if m.contains("no certificate"))
        );
        assert!(matches!(&errors[1], CertificateError::Key(m) if m.contains("no private key")));
        let (cert, _) = generated(&["a.example"]);
        let truncated = &cert[..cert.len() / 2];
        let errors = Certificate::from_pem("test", truncated.as_bytes(), b"").unwrap_err();
        assert!(
            matches!(&errors[0], CertificateError::Certificate(m) if m.contains("no -----END CERTIFICATE----- line")),
            "{errors:?}"
        );
    }
}
