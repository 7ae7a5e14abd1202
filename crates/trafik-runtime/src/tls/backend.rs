//! TLS to backends, for pools with `tls = true`: the backend's certificate is verified against
//! the pool's trust roots and the name the pool expects; the pool's own certificate is shown to
//! backends that ask for one (`client_cert`); ALPN offers what the pool's `protocol` speaks.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use rustls::sign::SingleCertAndKey;

use super::{Certificate, TrustRoots, VERSIONS, provider};

/// How a pool's connections to its backends speak TLS.
#[derive(Clone, Debug)]
pub struct BackendTls {
    config: Arc<ClientConfig>,
    /// The name sent in SNI and checked in the certificate; `None` checks each backend's IP
    /// address (and sends no SNI, which may not carry an address).
    pub server_name: Option<ServerName<'static>>,
    /// Where the roots came from, for `trafik check`.
    pub roots: String,
    /// Where the certificate shown to backends came from, if any.
    pub client_certificate: Option<String>,
    alpn: Vec<Vec<u8>>,
}

/// Settings are equal when they verify the same way (a reload compares pools by their plans).
impl PartialEq for BackendTls {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl BackendTls {
    /// `alpn`: the protocols offered, most wanted first (`http/1.1`, `h2`).
    pub fn new(
        roots: &TrustRoots,
        server_name: Option<ServerName<'static>>,
        client_certificate: Option<&Certificate>,
        alpn: &[&[u8]],
    ) -> Result<Self, String> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(|e| format!("TLS cannot be set up: {e}"))?
            .with_root_certificates(roots.store.clone());
        let mut config = match client_certificate {
            None => builder.with_no_client_auth(),
            Some(certificate) => builder.with_client_cert_resolver(Arc::new(
                SingleCertAndKey::from(certificate.key.clone()),
            )),
        };
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|protocol| protocol.to_vec()).collect();
        config.alpn_protocols = alpn.clone();
        Ok(BackendTls {
            config: Arc::new(config),
            server_name,
            roots: roots.source.clone(),
            client_certificate: client_certificate.map(|c| c.origin.clone()),
            alpn,
        })
    }

    /// What distinguishes connections made with these settings from others to the same
    /// address: a connection verified for one name or CA must not serve a pool expecting
    /// another.
    pub fn identity(&self) -> String {
        let name = match &self.server_name {
            Some(name) => name.to_str().into_owned(),
            None => "-".into(),
        };
        let certificate = self.client_certificate.as_deref().unwrap_or("-");
        let alpn = self
            .alpn
            .iter()
            .map(|p| String::from_utf8_lossy(p))
            .collect::<Vec<_>>();
        format!("tls {name} {} {certificate} {}", self.roots, alpn.join(","))
    }

    /// The client handshake with the backend at `address`, over `stream`.
    pub async fn connect<S>(&self, address: SocketAddr, stream: S) -> io::Result<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let name = self
            .server_name
            .clone()
            .unwrap_or_else(|| ServerName::IpAddress(address.ip().into()));
        TlsConnector::from(self.config.clone())
            .connect(name, stream)
            .await
    }
}

/// The name a pool's `sni` sets: a DNS name or an IP address.
pub fn server_name(text: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(text.to_owned()).map_err(|_| {
        format!("expected a DNS name such as \"kargo.internal\" or an IP address, found {text:?}")
    })
}
