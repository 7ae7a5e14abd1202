//! An HTTP/3 client for the tests (curl here speaks no HTTP/3): hyperium's h3 over quinn,
//! trusting a test CA, on a UDP socket of its own.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use http::Request;
use rustls::ClientConfig;
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;

use super::Answer;
use super::tls::{Issued, TestCa};

/// One HTTP/3 connection; requests on it run one after the other or side by side.
pub struct H3Client {
    sender: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    /// The connection's driver: ends with the error that closed the connection.
    pub closed: tokio::task::JoinHandle<h3::error::ConnectionError>,
    endpoint: quinn::Endpoint,
}

impl H3Client {
    /// Connects to `address` asking for `server_name`, trusting `ca`.
    pub async fn connect(address: SocketAddr, server_name: &str, ca: &TestCa) -> H3Client {
        let local = std::net::Ipv4Addr::LOCALHOST.into();
        match H3Client::try_connect(local, address, server_name, ca).await {
            Ok(client) => client,
            Err(error) => panic!("no HTTP/3 connection to {address}: {error}"),
        }
    }

    /// [`H3Client::connect`] from the loopback address `from` (another client, to the server),
    /// or why the connection failed (a server refusing it, say).
    pub async fn try_connect(
        from: std::net::IpAddr,
        address: SocketAddr,
        server_name: &str,
        ca: &TestCa,
    ) -> Result<H3Client, String> {
        H3Client::open(from, address, server_name, ca, None).await
    }

    /// [`H3Client::try_connect`] from 127.0.0.1 showing the client certificate `identity`
    /// (mutual TLS).
    pub async fn try_connect_as(
        identity: &Issued,
        address: SocketAddr,
        server_name: &str,
        ca: &TestCa,
    ) -> Result<H3Client, String> {
        let local = std::net::Ipv4Addr::LOCALHOST.into();
        H3Client::open(local, address, server_name, ca, Some(identity)).await
    }

    async fn open(
        from: std::net::IpAddr,
        address: SocketAddr,
        server_name: &str,
        ca: &TestCa,
        identity: Option<&Issued>,
    ) -> Result<H3Client, String> {
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(&[&rustls::version::TLS13])
                .unwrap()
                .with_root_certificates(ca.roots());
        let mut tls = match identity {
            None => builder.with_no_client_auth(),
            Some(issued) => builder
                .with_client_auth_cert(
                    vec![issued.der.clone()],
                    PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).expect("a PEM key"),
                )
                .expect("a client certificate rustls takes"),
        };
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("QUIC TLS");
        let mut endpoint = quinn::Endpoint::client(SocketAddr::new(from, 0)).expect("a UDP socket");
        endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
        let connection = endpoint
            .connect(address, server_name)
            .expect("a QUIC connection starts")
            .await
            .map_err(|e| format!("QUIC handshake: {e}"))?;
        let (mut driver, sender) = h3::client::new(h3_quinn::Connection::new(connection))
            .await
            .map_err(|e| format!("HTTP/3 settings: {e}"))?;
        let closed = tokio::spawn(async move { driver.wait_idle().await });
        Ok(H3Client {
            sender,
            closed,
            endpoint,
        })
    }

    /// Sends `request` with `body` (none when empty) and reads the whole answer.
    pub async fn send(&mut self, request: Request<()>, body: Bytes) -> Answer {
        self.send_for_trailers(request, body).await.0
    }

    /// [`H3Client::send`], and the answer's trailers.
    pub async fn send_for_trailers(
        &mut self,
        request: Request<()>,
        body: Bytes,
    ) -> (Answer, Option<http::HeaderMap>) {
        let mut stream = self
            .sender
            .send_request(request)
            .await
            .expect("request sent");
        if !body.is_empty() {
            stream.send_data(body).await.expect("body sent");
        }
        stream.finish().await.expect("request finished");
        let response = stream.recv_response().await.expect("a response");
        let mut body = BytesMut::new();
        while let Some(mut data) = stream.recv_data().await.expect("answer body") {
            body.extend_from_slice(&data.copy_to_bytes(data.remaining()));
        }
        let trailers = stream.recv_trailers().await.expect("answer trailers");
        let answer = Answer {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: body.freeze(),
        };
        (answer, trailers)
    }

    /// `GET https://{authority}{path}`.
    pub async fn get(&mut self, authority: &str, path: &str) -> Answer {
        let request = Request::get(format!("https://{authority}{path}"))
            .body(())
            .unwrap();
        self.send(request, Bytes::new()).await
    }

    /// Waits until the UDP socket has sent everything (the connection's close included).
    pub async fn close(self) {
        drop(self.sender);
        self.endpoint.wait_idle().await;
    }
}
