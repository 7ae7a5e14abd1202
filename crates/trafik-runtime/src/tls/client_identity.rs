//! Mutual TLS on an `https` or `h3` listener: clients' certificates verified against the listener's
//! `client_ca`, and who they are told to the backends in headers the configuration names. A
//! client's own copies of those headers are always removed, so a backend can trust them.

use std::fmt::Write;
use std::sync::Arc;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use super::TrustRoots;

/// A listener's `client_ca`, `client_auth` and `client_headers`.
#[derive(Clone, Debug)]
pub struct ClientAuth {
    pub roots: TrustRoots,
    /// `required`: a client without a valid certificate fails the handshake; `optional`: it is
    /// served, without the identity headers.
    pub required: bool,
    pub headers: Arc<IdentityHeaders>,
}

/// The request headers that carry a verified client certificate's identity; each is optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdentityHeaders {
    /// The subject's distinguished name, RFC 4514 style (`CN=alice,O=Kargo`).
    pub subject: Option<HeaderName>,
    /// The subject alternative names, `DNS:a.example, URI:spiffe://…, IP:10.0.0.1`.
    pub sans: Option<HeaderName>,
    /// The SHA-256 of the leaf certificate's DER, in lower-case hex.
    pub fingerprint: Option<HeaderName>,
}

impl IdentityHeaders {
    fn names(&self) -> impl Iterator<Item = &HeaderName> {
        [&self.subject, &self.sans, &self.fingerprint]
            .into_iter()
            .flatten()
    }
}

/// What one client connection proved, ready to be written on each of its requests.
#[derive(Debug)]
pub struct ClientIdentity {
    headers: Arc<IdentityHeaders>,
    /// The verified leaf's subject, when the client sent a certificate.
    pub subject: Option<String>,
    /// The header values, computed once per connection.
    values: Vec<(HeaderName, HeaderValue)>,
}

impl ClientIdentity {
    /// The identity of a connection whose handshake verified `chain` (leaf first), or of one
    /// without a certificate (`optional` client auth).
    pub fn of(headers: &Arc<IdentityHeaders>, chain: Option<&[CertificateDer<'_>]>) -> Self {
        let leaf = chain
            .and_then(|chain| chain.first())
            .and_then(|der| Some((der, X509Certificate::from_der(der).ok()?.1)));
        let Some((der, leaf)) = leaf else {
            return ClientIdentity {
                headers: headers.clone(),
                subject: None,
                values: Vec::new(),
            };
        };
        let subject = leaf.subject().to_string();
        let mut sans = String::new();
        if let Ok(Some(names)) = leaf.subject_alternative_name() {
            for name in &names.value.general_names {
                let separator = if sans.is_empty() { "" } else { ", " };
                let _ = match name {
                    GeneralName::DNSName(dns) => write!(sans, "{separator}DNS:{dns}"),
                    GeneralName::URI(uri) => write!(sans, "{separator}URI:{uri}"),
                    GeneralName::RFC822Name(mail) => write!(sans, "{separator}email:{mail}"),
                    GeneralName::IPAddress(bytes) => match ip_address(bytes) {
                        Some(ip) => write!(sans, "{separator}IP:{ip}"),
                        None => Ok(()),
                    },
                    _ => Ok(()),
                };
            }
        }
        let fingerprint =
            Sha256::digest(der.as_ref())
                .iter()
                .fold(String::with_capacity(64), |mut hex, byte| {
                    let _ = write!(hex, "{byte:02x}");
                    hex
                });
        let values = [
            (&headers.subject, &subject),
            (&headers.sans, &sans),
            (&headers.fingerprint, &fingerprint),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name.clone()?, header_value(value))))
        .collect();
        ClientIdentity {
            headers: headers.clone(),
            subject: Some(subject),
            values,
        }
    }

    /// Removes whatever the client sent under the identity headers' names, then writes the
    /// verified identity.
    pub fn apply(&self, fields: &mut HeaderMap) {
        for name in self.headers.names() {
            fields.remove(name);
        }
        for (name, value) in &self.values {
            fields.insert(name.clone(), value.clone());
        }
    }
}

fn ip_address(bytes: &[u8]) -> Option<std::net::IpAddr> {
    match bytes.len() {
        4 => Some(<[u8; 4]>::try_from(bytes).ok()?.into()),
        16 => Some(<[u8; 16]>::try_from(bytes).ok()?.into()),
        _ => None,
    }
}

/// A header value for text from a certificate: control characters (never valid in a field)
/// become `?`.
fn header_value(text: &str) -> HeaderValue {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    HeaderValue::from_str(&clean).unwrap_or_else(|_| HeaderValue::from_static("?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_becomes_its_headers_and_spoofed_ones_go() {
        let mut params =
            rcgen::CertificateParams::new(vec!["kurye.kargo.test".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kurye");
        params.subject_alt_names.push(rcgen::SanType::IpAddress(
            std::net::Ipv4Addr::new(10, 0, 0, 7).into(),
        ));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let headers = Arc::new(IdentityHeaders {
            subject: Some(HeaderName::from_static("x-client-subject")),
            sans: Some(HeaderName::from_static("x-client-sans")),
            fingerprint: Some(HeaderName::from_static("x-client-fingerprint")),
        });
        let identity = ClientIdentity::of(&headers, Some(&[cert.der().clone()]));
        let mut fields = HeaderMap::new();
        fields.insert("x-client-subject", HeaderValue::from_static("CN=admin"));
        identity.apply(&mut fields);
        assert_eq!(fields["x-client-subject"], "CN=kurye");
        assert_eq!(fields["x-client-sans"], "DNS:kurye.kargo.test, IP:10.0.0.7");
        assert_eq!(fields["x-client-fingerprint"].len(), 64);

        let anonymous = ClientIdentity::of(&headers, None);
        let mut fields = HeaderMap::new();
        fields.insert("x-client-subject", HeaderValue::from_static("CN=admin"));
        anonymous.apply(&mut fields);
        assert!(fields.is_empty(), "{fields:?}");
    }
}
