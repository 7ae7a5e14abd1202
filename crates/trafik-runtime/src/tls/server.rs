//! TLS termination on `https` listeners: the certificate is chosen by the name the client asks
//! for (SNI), ALPN offers HTTP/2 and HTTP/1.1, and the handshake runs on the worker that
//! accepted the connection, bounded in time.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::WantsServerCert;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ConfigBuilder, ServerConfig, SupportedProtocolVersion};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;
use tokio_rustls::{LazyConfigAcceptor, TlsAcceptor};

use super::acme::{ACME_TLS_ALPN, Managed, registry};
use super::{Certificate, ClientAuth, VERSIONS, provider};

/// Which HTTP versions a client connection may speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 alone, as over TLS when the client did not choose h2.
    Http1,
    /// HTTP/2 alone, as TLS agreed by ALPN.
    Http2,
    /// HTTP/2 when the connection opens with its preface (h2c with prior knowledge), else
    /// HTTP/1.1.
    Detect,
}

/// The server side of an `https` listener's connections; with `client_auth`, clients'
/// certificates are asked for and verified against its roots (rustls' WebPKI verifier).
pub fn acceptor(
    certificates: &[Arc<Certificate>],
    managed: &[Arc<Managed>],
    client_auth: Option<&ClientAuth>,
) -> Result<TlsAcceptor, String> {
    if certificates.is_empty() && managed.is_empty() {
        return Err("an https listener needs at least one certificate".into());
    }
    let mut config = verifying_clients(VERSIONS, client_auth)?
        .with_cert_resolver(ByServerName::of(certificates, managed));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // Marks a listener that answers TLS-ALPN-01 validation ([`accept`] reads the hello first).
    if !managed.is_empty() {
        config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
    }
    // Resumption by ticket spares a returning client the full handshake, in any worker.
    config.ticketer = rustls::crypto::ring::Ticketer::new()
        .map_err(|e| format!("TLS session tickets cannot be set up: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A server configuration of these TLS versions; with `client_auth`, clients' certificates are
/// asked for and verified against its roots (rustls' WebPKI verifier). The same for an https
/// listener and its h3 twin: a client cannot pass by the other transport.
fn verifying_clients(
    versions: &[&'static SupportedProtocolVersion],
    client_auth: Option<&ClientAuth>,
) -> Result<ConfigBuilder<ServerConfig, WantsServerCert>, String> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS cannot be set up: {e}"))?;
    let Some(auth) = client_auth else {
        return Ok(builder.with_no_client_auth());
    };
    let verifier =
        WebPkiClientVerifier::builder_with_provider(auth.roots.store.clone(), provider());
    let verifier = match auth.required {
        true => verifier,
        false => verifier.allow_unauthenticated(),
    };
    let verifier = verifier
        .build()
        .map_err(|e| format!("client certificates cannot be verified: {e}"))?;
    Ok(builder.with_client_cert_verifier(verifier))
}

/// The QUIC side of an `h3` listener: TLS 1.3 only (QUIC has no other), ALPN `h3`, the
/// certificate by the client's server name as on `https` listeners. Connection migration is
/// off: each worker's socket of a listener gets the datagrams the kernel hashes to it by the
/// client's address and port, so a client that moves would reach a worker that does not know
/// its connection. 0-RTT is off (rustls accepts no early data by default): a replayed request
/// could repeat a side effect. `idle` closes a connection after that long without packets;
/// `streams` requests may be open at once on one connection. With `client_auth`, clients'
/// certificates are asked for and verified as on https listeners.
pub fn quic(
    certificates: &[Arc<Certificate>],
    managed: &[Arc<Managed>],
    client_auth: Option<&ClientAuth>,
    (idle, streams): (Duration, u32),
) -> Result<Arc<quinn::ServerConfig>, String> {
    if certificates.is_empty() && managed.is_empty() {
        return Err("an h3 listener needs at least one certificate".into());
    }
    let mut config = verifying_clients(&[&rustls::version::TLS13], client_auth)?
        .with_cert_resolver(ByServerName::of(certificates, managed));
    config.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(config)
        .map_err(|e| format!("QUIC cannot be set up: {e}"))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.migration(false);
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(quinn::IdleTimeout::try_from(idle).ok());
    // What one connection may send ahead of what trafik has read: quinn's defaults leave the
    // connection unbounded (100 streams of 1.25 MB each); these are HTTP/2's orders of size.
    transport.receive_window(quinn::VarInt::from_u32(H3_CONNECTION_WINDOW));
    transport.stream_receive_window(quinn::VarInt::from_u32(H3_STREAM_WINDOW));
    // HTTP/3 needs three unidirectional streams of the client's (control, QPACK encoder and
    // decoder); a few more leave room for extensions it ignores.
    transport.max_concurrent_uni_streams(quinn::VarInt::from_u32(8));
    transport.max_concurrent_bidi_streams(quinn::VarInt::from_u32(streams));
    server.transport_config(Arc::new(transport));
    Ok(Arc::new(server))
}

/// The most request bytes one HTTP/3 connection may send before trafik reads them.
const H3_CONNECTION_WINDOW: u32 = 4 << 20;

/// The most request bytes one HTTP/3 stream may send before trafik reads them.
const H3_STREAM_WINDOW: u32 = 1 << 20;

/// Runs the server handshake within `timeout`, and says which HTTP version ALPN chose. Any
/// failure (a plain-HTTP client, bytes that are no TLS, a client that stalls or rejects the
/// certificate) is returned for the caller to close the connection.
pub async fn handshake<S>(
    acceptor: TlsAcceptor,
    stream: S,
    timeout: Duration,
) -> io::Result<(TlsStream<S>, Protocol)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let stream = tokio::time::timeout(timeout, accept(&acceptor, stream))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    let protocol = match stream.get_ref().1.alpn_protocol() {
        Some(b"h2") => Protocol::Http2,
        // A CA's TLS-ALPN-01 check ends with the handshake (RFC 8737 §3).
        Some(ACME_TLS_ALPN) => {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "an ACME TLS-ALPN-01 check ends with its handshake",
            ));
        }
        _ => Protocol::Http1,
    };
    Ok((stream, protocol))
}

/// The server handshake. A listener with ACME certificates reads the client's hello first: a
/// TLS-ALPN-01 validation (a hello offering only `acme-tls/1`) gets the challenge certificate
/// for its name, pending here or, in a fleet, at the instance that ordered (asked of etcd, which
/// a certificate resolver, being synchronous, could not do).
async fn accept<S>(acceptor: &TlsAcceptor, stream: S) -> io::Result<TlsStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let config = acceptor.config();
    if !config.alpn_protocols.iter().any(|p| p == ACME_TLS_ALPN) {
        return acceptor.accept(stream).await;
    }
    let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream).await?;
    let hello = start.client_hello();
    let validation = hello
        .alpn()
        .is_some_and(|mut offered| offered.all(|protocol| protocol == ACME_TLS_ALPN));
    if !validation {
        return start.into_stream(config.clone()).await;
    }
    let no_challenge =
        || io::Error::new(io::ErrorKind::NotFound, "no TLS-ALPN-01 challenge pending");
    let name = hello.server_name().ok_or_else(no_challenge)?.to_owned();
    let key = registry()
        .answer_alpn_anywhere(&name)
        .await
        .ok_or_else(no_challenge)?;
    let mut challenge = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(VERSIONS)
        .map_err(io::Error::other)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Challenge(key)));
    challenge.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
    start.into_stream(Arc::new(challenge)).await
}

/// The one certificate of a TLS-ALPN-01 validation.
#[derive(Debug)]
struct Challenge(Arc<CertifiedKey>);

impl ResolvesServerCert for Challenge {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// Picks a listener's certificate for the name in the client's hello: a certificate naming it
/// exactly, else one whose wildcard covers it, else the first (also for clients that send no
/// name, as they do when connecting to an IP address).
#[derive(Debug)]
struct ByServerName {
    certificates: Vec<Arc<Certificate>>,
    managed: Vec<Arc<Managed>>,
}

impl ByServerName {
    /// The resolver of a listener serving these certificates.
    fn of(certificates: &[Arc<Certificate>], managed: &[Arc<Managed>]) -> Arc<Self> {
        Arc::new(ByServerName {
            certificates: certificates.to_vec(),
            managed: managed.to_vec(),
        })
    }

    /// A managed certificate naming `requested` (once obtained), else a file's by
    /// [`Self::choose`], else the first managed one obtained.
    fn resolve_name(&self, requested: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let managed = |name: &str| {
            self.managed
                .iter()
                .filter(|m| m.serves(name))
                .find_map(|m| m.current())
        };
        if let Some(found) = requested.and_then(managed) {
            return Some(found.key.clone());
        }
        if !self.certificates.is_empty() {
            return Some(self.choose(requested).key.clone());
        }
        self.managed
            .iter()
            .find_map(|m| m.current())
            .map(|c| c.key.clone())
    }

    fn choose(&self, requested: Option<&str>) -> &Certificate {
        let found = requested.and_then(|name| {
            let names = || {
                self.certificates
                    .iter()
                    .flat_map(|c| c.names.iter().map(move |n| (c, n)))
            };
            names()
                .find(|(_, candidate)| candidate.eq_ignore_ascii_case(name))
                .or_else(|| names().find(|(_, candidate)| wildcard_covers(candidate, name)))
                .map(|(certificate, _)| &**certificate)
        });
        // Never empty: called only when there are certificates from files.
        found.unwrap_or(&self.certificates[0])
    }
}

impl ResolvesServerCert for ByServerName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.resolve_name(hello.server_name())
    }
}

/// Whether `*.example.com` covers `name`: exactly one label in place of the `*` (RFC 6125
/// §6.4.3), so it covers `a.example.com` but neither `example.com` nor `a.b.example.com`.
fn wildcard_covers(pattern: &str, name: &str) -> bool {
    let Some(suffix) = pattern.strip_prefix("*.") else {
        return false;
    };
    name.split_once('.')
        .is_some_and(|(label, rest)| !label.is_empty() && rest.eq_ignore_ascii_case(suffix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(names: &[&str]) -> Arc<Certificate> {
        Arc::new(owned(names))
    }

    fn owned(names: &[&str]) -> Certificate {
        let made = rcgen::generate_simple_self_signed(
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        )
        .unwrap();
        let pem = (made.cert.pem(), made.signing_key.serialize_pem());
        Certificate::from_pem(names[0], pem.0.as_bytes(), pem.1.as_bytes()).unwrap()
    }

    #[test]
    fn an_exact_name_beats_a_wildcard_and_the_first_is_the_default() {
        let resolver = ByServerName {
            managed: Vec::new(),
            certificates: vec![
                certificate(&["default.test"]),
                certificate(&["*.kargo.test"]),
                certificate(&["api.kargo.test"]),
            ],
        };
        let chosen = |name: Option<&str>| resolver.choose(name).origin.clone();
        assert_eq!(chosen(Some("api.kargo.test")), "api.kargo.test");
        assert_eq!(chosen(Some("www.kargo.test")), "*.kargo.test");
        assert_eq!(chosen(Some("kargo.test")), "default.test");
        assert_eq!(chosen(Some("a.b.kargo.test")), "default.test");
        assert_eq!(chosen(Some("elsewhere.test")), "default.test");
        assert_eq!(chosen(None), "default.test");
    }

    #[test]
    fn an_acme_certificate_is_served_for_its_names_once_obtained_and_swapped_in_place() {
        let spec = super::super::acme::AcmeSpec {
            domains: vec!["www.kargo.test".into()],
            directory: "https://ca.test/dir".into(),
            directory_ca: None,
            email: None,
            challenge: super::super::acme::ChallengeKind::Http01,
            storage: "acme".into(),
        };
        let managed = Arc::new(Managed::new(spec));
        let resolver = ByServerName {
            certificates: vec![certificate(&["default.test"])],
            managed: vec![managed.clone()],
        };
        let chosen = |name| resolver.resolve_name(Some(name)).unwrap();
        // None obtained yet: the file's certificate, the default, is all there is.
        assert!(Arc::ptr_eq(
            &chosen("www.kargo.test"),
            &resolver.certificates[0].key
        ));
        let validity = (
            std::time::SystemTime::UNIX_EPOCH,
            std::time::SystemTime::now(),
        );
        managed.install(owned(&["www.kargo.test"]), validity, true);
        assert!(Arc::ptr_eq(
            &chosen("www.kargo.test"),
            &managed.current().unwrap().key
        ));
        let served = managed.current().unwrap().key.clone();
        managed.install(owned(&["www.kargo.test"]), validity, true);
        assert!(
            !Arc::ptr_eq(&chosen("www.kargo.test"), &served),
            "the new one"
        );
        // Other names keep the default.
        assert!(Arc::ptr_eq(
            &chosen("default.test"),
            &resolver.certificates[0].key
        ));
    }

    #[test]
    fn a_wildcard_covers_one_label() {
        assert!(wildcard_covers("*.kargo.test", "a.kargo.test"));
        assert!(wildcard_covers("*.kargo.test", "A.KARGO.test"));
        assert!(!wildcard_covers("*.kargo.test", ".kargo.test"));
        assert!(!wildcard_covers("*.kargo.test", "kargo.test"));
        assert!(!wildcard_covers("kargo.test", "kargo.test"));
    }
}
