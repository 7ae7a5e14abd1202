//! TLS for the tests: a certificate authority made per test, clients that speak HTTP/1.1 or
//! HTTP/2 over TLS (and h2c), and a TLS backend that says which name the client asked for.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Request, Response, Version};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use trafik_proxy::tls::Certificate;
use trafik_proxy::{ListenerKind, Plan};

use super::{Answer, LOOPBACK_ANY_PORT, read, routes};

/// `plan` with its listener made https, serving `certificates` (the first is the default).
pub fn https(mut plan: Plan, certificates: &[&Issued]) -> Plan {
    let routes = std::mem::take(routes(&mut plan));
    plan.listeners[0].kind = ListenerKind::Https {
        routes,
        certificates: certificates.iter().map(|c| c.for_listener()).collect(),
        managed: Vec::new(),
        client_auth: None,
    };
    plan
}

/// A certificate authority that exists for one test.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
    pub der: CertificateDer<'static>,
}

/// A certificate the test CA issued, with its key.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let key = KeyPair::generate().unwrap();
        let certificate = params.self_signed(&key).unwrap();
        TestCa {
            pem: certificate.pem(),
            der: certificate.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for `names` (DNS names, wildcards or IP addresses).
    pub fn issue(&self, names: &[&str]) -> Issued {
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Issued {
        let key = KeyPair::generate().unwrap();
        let certificate = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
            der: certificate.der().clone(),
        }
    }

    /// A client certificate for mutual TLS: subject `CN=common_name`, SANs `names` (DNS names,
    /// or `spiffe://…` URIs).
    pub fn issue_client(&self, common_name: &str, names: &[&str]) -> Issued {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        for name in names {
            params
                .subject_alt_names
                .push(match name.strip_prefix("spiffe:") {
                    Some(_) => rcgen::SanType::URI(name.to_string().try_into().unwrap()),
                    None => rcgen::SanType::DnsName(name.to_string().try_into().unwrap()),
                });
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    pub fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.der.clone()).unwrap();
        roots
    }
}

impl Issued {
    /// The certificate as an https listener serves it.
    pub fn for_listener(&self) -> Arc<Certificate> {
        let origin = format!("test certificate {:?}", &self.der[..8]);
        Arc::new(
            Certificate::from_pem(&origin, self.cert_pem.as_bytes(), self.key_pem.as_bytes())
                .unwrap(),
        )
    }

    /// A rustls server configuration serving this certificate alone.
    pub fn server_config(&self) -> ServerConfig {
        self.server_config_with(None)
    }

    /// [`Issued::server_config`] that also demands a client certificate `clients` signed.
    pub fn server_config_with(&self, clients: Option<&TestCa>) -> ServerConfig {
        let certificate = self.for_listener();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match clients {
            None => builder.with_no_client_auth(),
            Some(ca) => builder.with_client_cert_verifier(
                rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(ca.roots()),
                    provider,
                )
                .build()
                .unwrap(),
            ),
        };
        builder
            .with_single_cert(
                certificate.key.cert.clone(),
                rustls::pki_types::PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).unwrap(),
            )
            .unwrap()
    }
}

use rustls::pki_types::pem::PemObject;

/// A client connection over TLS, HTTP/1.1 or HTTP/2 as ALPN agreed.
pub struct TlsClient {
    sender: Sender,
    /// The leaf certificate the server presented.
    pub served: CertificateDer<'static>,
}

enum Sender {
    Http1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    Http2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl TlsClient {
    /// Connects to `address` asking for `server_name`, trusting `ca` and offering `alpn`.
    pub async fn connect(
        address: SocketAddr,
        server_name: &str,
        ca: &TestCa,
        alpn: &[&[u8]],
    ) -> TlsClient {
        let mut config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(ca.roots())
                .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let stream = TcpStream::connect(address).await.expect("connects");
        let name = ServerName::try_from(server_name.to_owned()).unwrap();
        let stream = TlsConnector::from(Arc::new(config))
            .connect(name, stream)
            .await
            .expect("TLS handshake");
        let connection = stream.get_ref().1;
        let served = connection.peer_certificates().expect("a certificate")[0].clone();
        let http2 = connection.alpn_protocol() == Some(b"h2");
        TlsClient {
            sender: handshake(stream, http2).await,
            served,
        }
    }

    pub async fn send(&mut self, request: Request<Full<Bytes>>) -> (Answer, Version) {
        let response = match &mut self.sender {
            Sender::Http1(sender) => {
                sender.ready().await.expect("ready");
                sender.send_request(request).await
            }
            Sender::Http2(sender) => {
                sender.ready().await.expect("ready");
                sender.send_request(request).await
            }
        }
        .expect("a response");
        let version = response.version();
        (read(response).await, version)
    }

    /// `GET https://kargo.test{path}`: HTTP/2 sends the authority, HTTP/1.1 the `Host` header.
    pub async fn get(&mut self, path: &str) -> (Answer, Version) {
        let request = match self.sender {
            Sender::Http1(_) => Request::get(path).header("host", "kargo.test"),
            Sender::Http2(_) => Request::get(format!("https://kargo.test{path}")),
        };
        self.send(request.body(Full::default()).unwrap()).await
    }
}

/// HTTP/1.1 or HTTP/2 (with prior knowledge) over `stream`.
async fn handshake<S>(stream: S, http2: bool) -> Sender
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if http2 {
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .expect("HTTP/2 handshake");
        tokio::spawn(connection);
        Sender::Http2(sender)
    } else {
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("HTTP/1.1 handshake");
        tokio::spawn(connection);
        Sender::Http1(sender)
    }
}

/// A fresh HTTP/2 connection with prior knowledge (h2c) to `address`.
pub async fn h2c(address: SocketAddr) -> hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(address).await.expect("connects");
    let Sender::Http2(sender) = handshake(stream, true).await else {
        unreachable!("asked for HTTP/2");
    };
    sender
}

/// `GET http://kargo.test{path}` over HTTP/2 with prior knowledge (h2c) on a fresh connection.
pub async fn h2c_get(address: SocketAddr, path: &str) -> (Answer, Version) {
    let mut sender = h2c(address).await;
    let request = Request::get(format!("http://kargo.test{path}"))
        .body(Full::default())
        .unwrap();
    let response = sender.send_request(request).await.expect("a response");
    let version = response.version();
    (read(response).await, version)
}

/// What a TLS backend has seen.
#[derive(Default)]
pub struct Seen {
    pub requests: AtomicUsize,
    /// Requests from trafik's health checks.
    pub probes: AtomicUsize,
}

/// A backend that speaks HTTPS with `config` and answers every request with the name the
/// client asked for in its hello (`x-sni`, `-` for none) and the request's path; `x-client-certificate`
/// says whether the client showed a certificate (`yes`, `no`).
pub async fn tls_backend(config: ServerConfig) -> (SocketAddr, Arc<Seen>) {
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind(LOOPBACK_ANY_PORT)
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let seen = Arc::new(Seen::default());
    let counting = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), counting.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else {
                    return;
                };
                let sni = stream.get_ref().1.server_name().unwrap_or("-").to_owned();
                let shown = match stream.get_ref().1.peer_certificates() {
                    Some(_) => "yes",
                    None => "no",
                };
                let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                    let probe = request
                        .headers()
                        .get("user-agent")
                        .is_some_and(|agent| agent == "trafik-health");
                    let counter = if probe { &seen.probes } else { &seen.requests };
                    counter.fetch_add(1, Ordering::Relaxed);
                    let answer = Response::builder()
                        .header("x-sni", sni.clone())
                        .header("x-client-certificate", shown)
                        .body(Full::new(Bytes::from(request.uri().path().to_owned())));
                    async move { answer }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (address, seen)
}

/// What an HTTP/2 backend has seen: connections, requests (health probes apart), the most
/// streams open at once, and probes (`user-agent: trafik-health`) that came as HTTP/2.
#[derive(Default)]
pub struct SeenHttp2 {
    pub connections: AtomicUsize,
    pub requests: AtomicUsize,
    pub probes: AtomicUsize,
    open: AtomicUsize,
    pub most_open: AtomicUsize,
    /// The request body bytes read, all requests together.
    pub body_bytes: AtomicUsize,
}

/// A backend that speaks HTTP/2 only (h2c, or h2 by ALPN over TLS with `tls`), allowing
/// `max_streams` streams per connection; it reads each request's body, and answers after
/// `delay` with
/// `HTTP/2 PATH` and trailers `x-trailer: end` (with the request's `application/grpc…`
/// content type, when it has one).
pub async fn h2_backend(
    tls: Option<ServerConfig>,
    max_streams: u32,
    delay: std::time::Duration,
) -> (SocketAddr, Arc<SeenHttp2>) {
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind(LOOPBACK_ANY_PORT)
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    let acceptor = tls.map(|mut config| {
        config.alpn_protocols = vec![b"h2".to_vec()];
        TlsAcceptor::from(Arc::new(config))
    });
    let seen = Arc::new(SeenHttp2::default());
    let counting = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), counting.clone());
            seen.connections.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let probe = request
                            .headers()
                            .get("user-agent")
                            .is_some_and(|agent| agent == "trafik-health");
                        if probe {
                            seen.probes.fetch_add(1, Ordering::Relaxed);
                        } else {
                            seen.requests.fetch_add(1, Ordering::Relaxed);
                        }
                        let open = seen.open.fetch_add(1, Ordering::Relaxed) + 1;
                        seen.most_open.fetch_max(open, Ordering::Relaxed);
                        let (head, body) = request.into_parts();
                        let body = http_body_util::BodyExt::collect(body).await;
                        let read = body.map_or(0, |body| body.to_bytes().len());
                        seen.body_bytes.fetch_add(read, Ordering::Relaxed);
                        let request = Request::from_parts(head, ());
                        tokio::time::sleep(delay).await;
                        seen.open.fetch_sub(1, Ordering::Relaxed);
                        let mut trailers = http::HeaderMap::new();
                        trailers.insert("x-trailer", http::HeaderValue::from_static("end"));
                        let text = format!("{:?} {}", request.version(), request.uri().path());
                        let body = http_body_util::BodyExt::with_trailers(
                            Full::new(Bytes::from(text)),
                            std::future::ready(Some(Ok(trailers))),
                        );
                        let mut response = Response::new(body);
                        // A gRPC call's answer says so, as gRPC's do (the proxy passes
                        // trailers on for those).
                        if let Some(grpc) = request
                            .headers()
                            .get("content-type")
                            .filter(|kind| kind.as_bytes().starts_with(b"application/grpc"))
                        {
                            response.headers_mut().insert("content-type", grpc.clone());
                        }
                        Ok::<_, std::convert::Infallible>(response)
                    }
                });
                let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
                builder.max_concurrent_streams(max_streams);
                match acceptor {
                    None => {
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                    Some(acceptor) => {
                        let Ok(stream) = acceptor.accept(stream).await else {
                            return;
                        };
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                }
            });
        }
    });
    (address, seen)
}
