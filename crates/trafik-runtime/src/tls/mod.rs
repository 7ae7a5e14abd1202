//! TLS on both sides of the proxy, with rustls and its ring provider. [`certificates`] reads PEM
//! files (for `trafik check` as much as for serving); [`server`] terminates clients' TLS on
//! `https` listeners, picking the certificate by the name the client asks for; [`backend`]
//! speaks TLS to the backends of pools with `tls = true`.

pub mod acme;
pub mod backend;
pub mod certificates;
pub mod client_identity;
pub mod server;

use std::sync::{Arc, OnceLock};

use rustls::SupportedProtocolVersion;
use rustls::crypto::CryptoProvider;

pub use certificates::{Certificate, CertificateError, TrustRoots};
pub use client_identity::{ClientAuth, ClientIdentity, IdentityHeaders};

/// TLS 1.3 first, and 1.2 for the clients and backends that have nothing newer.
const VERSIONS: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13, &rustls::version::TLS12];

/// The one crypto provider, named explicitly rather than left to rustls' process default, so
/// no other provider in the dependency tree can change which one trafik uses.
fn provider() -> Arc<CryptoProvider> {
    static RING: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    RING.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}
