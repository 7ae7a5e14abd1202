//! Header rewriting at the proxy boundary: hop-by-hop headers never cross it (RFC 9110 §7.6.1),
//! and the forwarding headers say who the client was (RFC 7239 `Forwarded`, the de facto
//! `X-Forwarded-*`) and which proxies the message passed (`Via`).

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Headers that describe one connection, not the message, and so are dropped by a proxy.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
];

/// Removes hop-by-hop headers, including any that `Connection` names. `Transfer-Encoding` is
/// left to hyper, which re-frames every body it sends.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    if let Some(connection) = headers.get(header::CONNECTION) {
        let named: Vec<HeaderName> = connection
            .to_str()
            .unwrap_or("")
            .split(',')
            .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// The values a proxied request gains, computed from what the proxy knows of the client.
pub struct Forwarding<'a> {
    pub client: SocketAddr,
    pub host: Option<&'a HeaderValue>,
    pub trust_incoming: bool,
    pub via: &'a HeaderValue,
}

impl Forwarding<'_> {
    /// Adds `Forwarded`, `X-Forwarded-For/-Proto/-Host` and `Via` to a request on its way to a
    /// backend. Untrusted incoming forwarding headers are dropped first, so a client cannot
    /// claim another address.
    pub fn apply(&self, headers: &mut HeaderMap) {
        if !self.trust_incoming {
            headers.remove(header::FORWARDED);
            headers.remove(X_FORWARDED_FOR);
            headers.remove(X_FORWARDED_PROTO);
            headers.remove(X_FORWARDED_HOST);
        }
        let ip = self.client.ip();
        let mut forwarded = String::with_capacity(64);
        match ip {
            IpAddr::V4(v4) => {
                let _ = write!(forwarded, "for={v4}");
            }
            IpAddr::V6(v6) => {
                let _ = write!(forwarded, "for=\"[{v6}]\"");
            }
        }
        forwarded.push_str(";proto=http");
        let host = self
            .host
            .and_then(|h| h.to_str().ok())
            .filter(|h| is_token_safe(h));
        if let Some(host) = host {
            let _ = write!(forwarded, ";host=\"{host}\"");
        }
        append(headers, header::FORWARDED, &forwarded);
        append(headers, X_FORWARDED_FOR, &ip.to_string());
        if !headers.contains_key(X_FORWARDED_PROTO) {
            headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
        }
        if let (Some(value), false) = (self.host, headers.contains_key(X_FORWARDED_HOST)) {
            headers.insert(X_FORWARDED_HOST, value.clone());
        }
        append_via(headers, self.via);
    }
}

/// Adds this proxy to a message's `Via` list.
pub fn append_via(headers: &mut HeaderMap, via: &HeaderValue) {
    match headers.get(header::VIA).and_then(|v| v.to_str().ok()) {
        Some(existing) => {
            let joined = format!("{existing}, {}", via.to_str().unwrap_or(""));
            if let Ok(value) = HeaderValue::from_str(&joined) {
                headers.insert(header::VIA, value);
            }
        }
        None => {
            headers.insert(header::VIA, via.clone());
        }
    }
}

/// Appends `value` to a comma-separated list header, joining it to any existing values.
fn append(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    let joined = match headers.get(&name).and_then(|v| v.to_str().ok()) {
        Some(existing) => format!("{existing}, {value}"),
        None => value.to_owned(),
    };
    if let Ok(value) = HeaderValue::from_str(&joined) {
        headers.insert(name, value);
    }
}

/// A host may be quoted into `Forwarded` only if it cannot break out of the quotes.
fn is_token_safe(host: &str) -> bool {
    !host.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn hop_by_hop_headers_and_the_ones_connection_names_are_removed() {
        let mut h = headers(&[
            ("connection", "keep-alive, x-secret"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("accept", "*/*"),
        ]);
        remove_hop_by_hop(&mut h);
        let left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["accept"]);
    }

    fn forward(trust: bool, client: &str, h: &mut HeaderMap) {
        let via = HeaderValue::from_static("1.1 trafik");
        let host = h.get(header::HOST).cloned();
        Forwarding {
            client: client.parse().unwrap(),
            host: host.as_ref(),
            trust_incoming: trust,
            via: &via,
        }
        .apply(h);
    }

    #[test]
    fn untrusted_forwarding_headers_are_replaced() {
        let mut h = headers(&[
            ("host", "kargo.example"),
            ("x-forwarded-for", "6.6.6.6"),
            ("forwarded", "for=6.6.6.6"),
        ]);
        forward(false, "127.0.0.9:5000", &mut h);
        assert_eq!(h["x-forwarded-for"], "127.0.0.9");
        assert_eq!(
            h["forwarded"],
            "for=127.0.0.9;proto=http;host=\"kargo.example\""
        );
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "kargo.example");
        assert_eq!(h["via"], "1.1 trafik");
    }

    #[test]
    fn trusted_forwarding_headers_are_appended_to() {
        let mut h = headers(&[
            ("x-forwarded-for", "10.1.1.1"),
            ("forwarded", "for=10.1.1.1"),
            ("via", "1.1 edge"),
        ]);
        forward(true, "[::1]:5000", &mut h);
        assert_eq!(h["x-forwarded-for"], "10.1.1.1, ::1");
        assert_eq!(h["forwarded"], "for=10.1.1.1, for=\"[::1]\";proto=http");
        assert_eq!(h["via"], "1.1 edge, 1.1 trafik");
    }

    #[test]
    fn a_host_that_would_break_the_quotes_is_left_out() {
        let mut h = headers(&[("host", "a\"b")]);
        forward(false, "127.0.0.1:1", &mut h);
        assert_eq!(h["forwarded"], "for=127.0.0.1;proto=http");
    }
}
