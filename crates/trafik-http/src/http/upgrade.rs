//! HTTP/1.1 protocol upgrades (WebSocket, RFC 6455 §4; RFC 9110 §7.8): the request is relayed
//! with its `Upgrade` and `Connection: upgrade`, the backend's `101 Switching Protocols` is
//! relayed back, and then the two connections are spliced, bytes copied both ways until either
//! side closes.
//!
//! The steps, in the order a request meets them:
//! - [`UpstreamForm`](super::filter::UpstreamForm) asks [`wanted`]; a request that qualifies
//!   keeps its upgrade headers ([`keep_upgrade_headers`]) and its client side is set aside as a
//!   [`ClientUpgrade`]; any other request loses them with the rest of the hop-by-hop headers;
//! - the pool target sends it; on a 101 it builds a [`Tunnel`] from both sides and leaves it in
//!   the client connection's [`Handover`]; any other answer is relayed as usual;
//! - hyper writes the 101 and lets go of the client socket; the client connection then runs
//!   the tunnel ([`super::server`]), under its idle timeout.
//!
//! An upgraded upstream connection never goes back to the idle stack, and while the tunnel is
//! open it counts in its backend's `active_connections` and `open_connections`.

use std::cell::RefCell;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::body::RequestBody;
use super::headers::remove_hop_by_hop;
use super::upstream::UpstreamBody;
use crate::h1::client::Switched;
use crate::pool::InFlight;

/// The client side of a request that may switch protocols, set aside before the request is
/// sent so that the 101 can be joined to it.
#[derive(Clone)]
pub enum ClientUpgrade {
    /// hyper's server lets go of the client socket once it has written the 101.
    Hyper(OnUpgrade),
    /// The own HTTP/1 engine writes the 101 and keeps its socket: it takes the backend's side
    /// from the tunnel ([`Tunnel::into_upstream`]) and splices the two itself.
    OwnEngine,
}

/// Marks a request the own HTTP/1 engine read whose connection may switch protocols: the part
/// of hyper's `OnUpgrade` for [`wanted`].
#[derive(Clone, Copy)]
pub struct OwnEngineConnection;

/// Whether the client asks to switch protocols in a way trafik relays: an HTTP/1.1 `GET` with
/// `Upgrade` naming a protocol other than h2c, and `Connection: upgrade`. hyper prepares the
/// hand-over only for HTTP/1.1 requests with `Upgrade` (and CONNECT), so most requests are
/// answered by the first check. A request offering only h2c goes on as the plain HTTP/1.1
/// request it also is, without the offer.
pub fn wanted(request: &Request<RequestBody>) -> bool {
    let extensions = request.extensions();
    (extensions.get::<OnUpgrade>().is_some() || extensions.get::<OwnEngineConnection>().is_some())
        && request.method() == Method::GET
        && request.version() == Version::HTTP_11
        && request
            .headers()
            .get(header::UPGRADE)
            .and_then(relayed_protocols)
            .is_some()
        && names_upgrade(request.headers())
}

/// Whether an `Upgrade` value offers h2c (HTTP/2 over cleartext). A backend that took it would
/// speak HTTP/2 with the client through the tunnel, and the requests in it would pass no
/// route, gate or token check; RFC 9113 §3.1 retired the upgrade besides.
pub fn offers_h2c(protocols: &[u8]) -> bool {
    protocols.split(|&b| b == b',').any(is_h2c)
}

/// Whether one protocol of an `Upgrade` list (`name` or `name/version`) is h2c.
fn is_h2c(protocol: &[u8]) -> bool {
    let protocol = protocol.trim_ascii();
    let name = protocol.split(|&b| b == b'/').next().unwrap_or(protocol);
    name.eq_ignore_ascii_case(b"h2c")
}

/// The protocols of an `Upgrade` value trafik passes on: all but h2c; `None` when none is left.
fn relayed_protocols(value: &HeaderValue) -> Option<HeaderValue> {
    if !offers_h2c(value.as_bytes()) {
        return Some(value.clone());
    }
    let kept: Vec<&[u8]> = value
        .as_bytes()
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|protocol| !protocol.is_empty() && !is_h2c(protocol))
        .collect();
    if kept.is_empty() {
        return None;
    }
    HeaderValue::from_bytes(&kept.join(&b", "[..])).ok()
}

/// Whether `Connection` lists the `upgrade` token.
fn names_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// Readies a request that [`wanted`] an upgrade to cross the hop: its client side is set aside
/// as a [`ClientUpgrade`] and its headers keep only the upgrade among the hop-by-hop ones.
pub fn prepare(request: &mut Request<RequestBody>) {
    let client = match request.extensions().get::<OnUpgrade>() {
        Some(_) => ClientUpgrade::Hyper(hyper::upgrade::on(&mut *request)),
        None => ClientUpgrade::OwnEngine,
    };
    request.extensions_mut().insert(client);
    keep_upgrade_headers(request.headers_mut());
}

/// Removes the hop-by-hop headers but `Upgrade` (less any h2c offer), and says
/// `Connection: upgrade`: what the next hop needs to switch protocols, and nothing else about
/// this connection.
pub fn keep_upgrade_headers(headers: &mut HeaderMap) {
    let protocols = headers
        .remove(header::UPGRADE)
        .and_then(|value| relayed_protocols(&value));
    remove_hop_by_hop(headers);
    if let Some(protocols) = protocols {
        headers.insert(header::UPGRADE, protocols);
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// A relayed 101's two connections, to be spliced once hyper has let go of both.
pub struct Tunnel {
    client: ClientUpgrade,
    /// The backend's side, with what it sent after its 101 (`None` when it was lost).
    upstream: Option<Switched>,
    /// Keeps the tunnel in its backend's `active_connections` for as long as it is open.
    in_flight: InFlight,
}

impl Tunnel {
    /// Joins the client's side to the backend's 101, whose own side is taken from it.
    pub fn new(
        client: ClientUpgrade,
        response: &mut Response<UpstreamBody>,
        in_flight: InFlight,
    ) -> Self {
        let upstream = match response.body_mut() {
            UpstreamBody::Http1(body) => body.switched(),
            UpstreamBody::Http2(_) => None,
        };
        Tunnel {
            client,
            upstream,
            in_flight,
        }
    }

    /// Splices the two connections once hyper has let go of the client's (see [`splice`]).
    pub async fn splice(self) {
        let ClientUpgrade::Hyper(client) = self.client else {
            tracing::debug!("the own engine's tunnel reached hyper's server; closing");
            return;
        };
        let (client, Some(upstream)) = (client.await, self.upstream) else {
            tracing::debug!("upgrade abandoned: the backend's side was lost");
            return;
        };
        match client {
            Ok(client) => splice(TokioIo::new(client), upstream).await,
            Err(error) => tracing::debug!(%error, "upgrade abandoned"),
        }
    }

    /// The backend's side, for the own engine to splice with its client connection; the
    /// in-flight mark keeps the tunnel in its backend's `active_connections` while it lives.
    /// `None` when the backend's side was lost.
    pub fn into_upstream(self) -> Option<(impl AsyncRead + AsyncWrite + Unpin, InFlight)> {
        Some((self.upstream?, self.in_flight))
    }
}

/// Copies bytes both ways until either side closes or breaks: its close is passed on to the
/// other side (a shutdown of writing, so what was sent before still arrives), then both
/// connections are closed. A WebSocket ends so after its close handshake, with no half-open
/// connection left waiting for a peer that has finished. Also the own engine's tunnel.
pub async fn splice<C, U>(client: C, upstream: U)
where
    C: AsyncRead + AsyncWrite,
    U: AsyncRead + AsyncWrite,
{
    let (mut from_client, mut to_client) = tokio::io::split(client);
    let (mut from_upstream, mut to_upstream) = tokio::io::split(upstream);
    let up = async {
        let copied = tokio::io::copy(&mut from_client, &mut to_upstream).await;
        let _ = to_upstream.shutdown().await;
        copied
    };
    let down = async {
        let copied = tokio::io::copy(&mut from_upstream, &mut to_client).await;
        let _ = to_client.shutdown().await;
        copied
    };
    let (side, ended) = tokio::select! {
        copied = up => ("client", copied),
        copied = down => ("backend", copied),
    };
    match ended {
        Ok(bytes) => tracing::debug!(side, bytes, "tunnel closed"),
        Err(error) => tracing::debug!(side, %error, "tunnel broke"),
    }
}

/// Where a relayed 101 leaves its tunnel, for the client connection to run once hyper hands
/// over the socket.
#[derive(Default)]
pub struct Handover(RefCell<Option<Tunnel>>);

impl Handover {
    pub fn put(&self, tunnel: Tunnel) {
        *self.0.borrow_mut() = Some(tunnel);
    }

    pub fn take(&self) -> Option<Tunnel> {
        self.0.borrow_mut().take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn an_upgrade_keeps_its_protocol_and_loses_the_other_hop_by_hop_headers() {
        let mut h = headers(&[
            ("connection", "keep-alive, Upgrade, x-secret"),
            ("upgrade", "websocket"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ]);
        assert!(names_upgrade(&h));
        keep_upgrade_headers(&mut h);
        let mut left: Vec<_> = h
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap()))
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "connection: upgrade",
                "sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==",
                "upgrade: websocket"
            ]
        );
    }

    #[test]
    fn only_the_upgrade_token_in_connection_counts() {
        assert!(!names_upgrade(&headers(&[("connection", "keep-alive")])));
        assert!(!names_upgrade(&headers(&[("connection", "upgraded")])));
        assert!(names_upgrade(&headers(&[
            ("connection", "keep-alive"),
            ("connection", " UPGRADE ")
        ])));
    }

    #[test]
    fn an_h2c_offer_is_dropped_and_other_protocols_stay() {
        let relayed = |value: &str| {
            relayed_protocols(&HeaderValue::from_str(value).unwrap())
                .map(|v| v.to_str().unwrap().to_owned())
        };
        assert_eq!(relayed("websocket").as_deref(), Some("websocket"));
        assert_eq!(relayed("h2c"), None);
        assert_eq!(relayed(" H2C/1.0 ,"), None);
        assert_eq!(relayed("h2c, websocket, h2c").as_deref(), Some("websocket"));
        assert!(offers_h2c(b"websocket, h2c") && !offers_h2c(b"h2, websocket"));
        let mut upgrade = headers(&[
            ("upgrade", "h2c"),
            ("connection", "upgrade, http2-settings"),
        ]);
        upgrade.insert(
            "http2-settings",
            HeaderValue::from_static("AAMAAABkAARAAAAAAAIAAAAA"),
        );
        keep_upgrade_headers(&mut upgrade);
        assert!(upgrade.is_empty(), "{upgrade:?}");
    }
}
