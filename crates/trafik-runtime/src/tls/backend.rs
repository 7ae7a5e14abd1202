//! TLS to backends, for pools with `tls = true`: the backend's certificate is verified against
//! the pool's trust roots and the name the pool expects, and only HTTP/1.1 is offered, since
//! that is what trafik speaks upstream.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::{TrustRoots, VERSIONS, provider};

/// How a pool's connections to its backends speak TLS.
#[derive(Clone, Debug)]
pub struct BackendTls {
    config: Arc<ClientConfig>,
    /// The name sent in SNI and checked in the certificate; `None` checks each backend's IP
    /// address (and sends no SNI, which may not carry an address).
    pub server_name: Option<ServerName<'static>>,
    /// Where the roots came from, for `trafik check`.
    pub roots: String,
}

/// Settings are equal when they verify the same way (a reload compares pools by their plans).
impl PartialEq for BackendTls {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl BackendTls {
    pub fn new(
        roots: &TrustRoots,
        server_name: Option<ServerName<'static>>,
    ) -> Result<Self, String> {
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(|e| format!("TLS cannot be set up: {e}"))?
            .with_root_certificates(roots.store.clone())
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(BackendTls {
            config: Arc::new(config),
            server_name,
            roots: roots.source.clone(),
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
        format!("tls {name} {}", self.roots)
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
