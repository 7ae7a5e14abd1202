//! HTTPS: rustls (ring provider, as the rest of trafik) with the TLS versions asked for, the
//! system's roots or a CA file, and rustls' in-memory session cache, so a reconnect resumes
//! its session instead of a full handshake (as a browser's second visit does). `--insecure`
//! accepts any certificate but still checks the handshake's signatures.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// How to speak TLS (sent to a distributed run's agents as it is).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct TlsOptions {
    /// A PEM file of trusted CA certificates' contents; `None`: the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Accept any server certificate (a test server's self-signed one).
    pub insecure: bool,
    /// "1.2" and/or "1.3"; empty: both.
    pub versions: Vec<String>,
}

/// A client configuration for `options`, offering `h2` or `http/1.1` by ALPN.
pub fn client_config(
    options: &TlsOptions,
    http2: bool,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut versions = Vec::new();
    for version in &options.versions {
        versions.push(match version.as_str() {
            "1.2" => &rustls::version::TLS12,
            "1.3" => &rustls::version::TLS13,
            other => return Err(format!("TLS version {other:?}: expected 1.2 or 1.3")),
        });
    }
    if versions.is_empty() {
        versions = vec![&rustls::version::TLS13, &rustls::version::TLS12];
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("TLS versions {:?}: {e}", options.versions))?;
    let mut config = if options.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth()
    } else {
        builder
            .with_root_certificates(roots(options.ca_pem.as_deref())?)
            .with_no_client_auth()
    };
    config.alpn_protocols = vec![if http2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    Ok(Arc::new(config))
}

fn roots(ca_pem: Option<&[u8]>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match ca_pem {
        Some(pem) => {
            for certificate in CertificateDer::pem_slice_iter(pem) {
                let certificate = certificate.map_err(|e| format!("--cacert: {e}"))?;
                store.add(certificate).map_err(|e| {
                    format!("--cacert: a certificate cannot be a trust anchor: {e}")
                })?;
            }
            if store.is_empty() {
                return Err("--cacert: the file holds no PEM certificate".into());
            }
        }
        None => {
            store.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if store.is_empty() {
                return Err(
                    "the system has no trusted root certificates: install ca-certificates, or give --cacert FILE or --insecure".into(),
                );
            }
        }
    }
    Ok(store)
}

/// `--insecure`: any certificate for any name; the handshake's signatures are still checked
/// (with the provider's algorithms), so the connection is TLS, only not authenticated.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            certificate,
            signature,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            certificate,
            signature,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_roots_are_checked() {
        let only_13 = TlsOptions {
            insecure: true,
            versions: vec!["1.3".into()],
            ..TlsOptions::default()
        };
        let config = client_config(&only_13, true).unwrap();
        assert_eq!(config.alpn_protocols, [b"h2".to_vec()]);
        let bad = TlsOptions {
            versions: vec!["1.1".into()],
            ..only_13.clone()
        };
        assert!(
            client_config(&bad, false)
                .unwrap_err()
                .contains("expected 1.2 or 1.3")
        );
        let empty = TlsOptions {
            ca_pem: Some(b"not a certificate".to_vec()),
            ..TlsOptions::default()
        };
        assert!(
            client_config(&empty, false)
                .unwrap_err()
                .contains("--cacert")
        );
    }
}
