//! Header rewriting at the proxy boundary: hop-by-hop headers never cross it (RFC 9110 §7.6.1),
//! and the forwarding headers say who the client was (RFC 7239 `Forwarded`, the de facto
//! `X-Forwarded-*`) and which proxies the message passed (`Via`).

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};

use http::header::{self, Entry, HeaderMap, HeaderName, HeaderValue};

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

// Names are told apart by their text in one `match`: a const array of `HeaderName`s is built
// and dropped anew at every use, which cost the pipeline ~700 instructions a request, and a
// static one compares each name in turn.

/// Whether a client claims through `name` where a request came from.
fn is_forwarding(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "forwarded" | "x-forwarded-for" | "x-forwarded-proto" | "x-forwarded-host"
    )
}

/// Headers `Connection` cannot withdraw: without them the message would change meaning or
/// framing on the other side.
static END_TO_END: [HeaderName; 2] = [header::HOST, header::CONTENT_LENGTH];

/// Whether a configured filter may set `name`: not a hop-by-hop header nor one that frames or
/// addresses the message, which trafik and hyper manage.
pub fn is_settable(name: &HeaderName) -> bool {
    !is_hop_by_hop(name) && !END_TO_END.contains(name)
}

/// Whether `name` is a header every proxy drops at its hop (those `Connection` names aside):
/// it describes one connection, not the message. `Transfer-Encoding` is among them: hyper
/// frames every body it sends anew; so is `HTTP2-Settings`, what an h2c upgrade offers (RFC
/// 7540 §3.2.1), about one connection only (the offer itself is never passed on, see
/// `upgrade`).
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "http2-settings"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}

/// Removes every field whose name `which` tells; the rare message that has one pays for a list.
fn remove_all(headers: &mut HeaderMap, which: fn(&HeaderName) -> bool) {
    let names: Vec<HeaderName> = headers.keys().filter(|name| which(name)).cloned().collect();
    for name in names {
        headers.remove(name);
    }
}

/// Removes hop-by-hop headers, including any that `Connection` names. A message that came
/// with `Transfer-Encoding` loses `Content-Length` too (RFC 9112 §6.3): the coding framed it.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over their few names spares a hash lookup per name.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    if let Some(connection) = headers.get(header::CONNECTION) {
        let named: Vec<HeaderName> = connection
            .to_str()
            .unwrap_or("")
            .split(',')
            .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
            .filter(|name| !END_TO_END.contains(name))
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    if headers.contains_key(header::TRANSFER_ENCODING) {
        headers.remove(header::CONTENT_LENGTH);
    }
    remove_all(headers, is_hop_by_hop);
}

/// Joins the `cookie` fields of a request received over HTTP/2 into one, as RFC 9113 §8.2.3
/// asks of a request going on over HTTP/1.1, where a second `cookie` line is not allowed (RFC
/// 6265 §5.4): an HTTP/2 client may send each cookie in a field of its own.
pub fn join_cookies(headers: &mut HeaderMap) {
    let mut cookies = headers.get_all(header::COOKIE).iter();
    let (Some(first), Some(_)) = (cookies.next(), cookies.next()) else {
        return;
    };
    let mut joined = first.as_bytes().to_vec();
    for cookie in headers.get_all(header::COOKIE).iter().skip(1) {
        joined.extend_from_slice(b"; ");
        joined.extend_from_slice(cookie.as_bytes());
    }
    // Valid values joined by "; " are valid.
    if let Ok(joined) = HeaderValue::from_bytes(&joined) {
        headers.insert(header::COOKIE, joined);
    }
}

/// The forwarding headers of one client connection. The client's address does not change
/// between its requests, so its parts are written once; the `Forwarded` value is kept for the
/// last `Host` seen, which on a kept-alive connection is nearly always the next one too.
pub struct ClientForwarding {
    client_ip: HeaderValue,
    /// `for=…;proto=…`, for requests without a usable host.
    without_host: HeaderValue,
    for_parameter: String,
    proto: HeaderValue,
    last: RefCell<Option<(HeaderValue, HeaderValue)>>,
}

impl ClientForwarding {
    pub fn new(client: SocketAddr, scheme: &'static str) -> Self {
        let for_parameter = match client.ip() {
            IpAddr::V4(v4) => format!("for={v4}"),
            IpAddr::V6(v6) => format!("for=\"[{v6}]\""),
        };
        let value =
            |text: &str| HeaderValue::from_str(text).unwrap_or(HeaderValue::from_static("unknown"));
        ClientForwarding {
            client_ip: value(&client.ip().to_string()),
            without_host: value(&format!("{for_parameter};proto={scheme}")),
            for_parameter,
            proto: HeaderValue::from_static(scheme),
            last: RefCell::new(None),
        }
    }

    /// The scheme the client spoke: `http`, or `https` behind TLS.
    pub fn scheme(&self) -> &str {
        self.proto.to_str().unwrap_or("http")
    }

    /// Adds `Forwarded`, `X-Forwarded-For/-Proto/-Host` and `Via` to a request on its way to a
    /// backend. Untrusted incoming forwarding headers are dropped first, so a client cannot
    /// claim another address.
    pub fn apply(&self, headers: &mut HeaderMap, trust_incoming: bool, via: &HeaderValue) {
        if !trust_incoming {
            remove_all(headers, is_forwarding);
        }
        // Room for the five fields at once (a map at its size limit grows field by field as
        // before), and one hash per field: each goes in by its entry.
        let _ = headers.try_reserve(5);
        let (forwarded, host) = self.forwarded(headers.get(header::HOST));
        append(headers, header::FORWARDED, forwarded);
        append(headers, X_FORWARDED_FOR, self.client_ip.clone());
        headers
            .entry(X_FORWARDED_PROTO)
            .or_insert_with(|| self.proto.clone());
        if let Some(value) = host {
            headers.entry(X_FORWARDED_HOST).or_insert(value);
        }
        append_via(headers, via);
    }

    /// `for=…;proto=http;host="…"` for `host`, reusing the last one built, and `host` itself:
    /// the last one's copy when it is the same (a request's own would be copied again to be
    /// shared).
    fn forwarded(&self, host: Option<&HeaderValue>) -> (HeaderValue, Option<HeaderValue>) {
        let Some(host) = host.filter(|h| h.to_str().is_ok_and(is_token_safe)) else {
            return (self.without_host.clone(), host.cloned());
        };
        let mut last = self.last.borrow_mut();
        if let Some((seen, value)) = last.as_ref()
            && seen == host
        {
            return (value.clone(), Some(seen.clone()));
        }
        let text = format!(
            "{};proto={};host=\"{}\"",
            self.for_parameter,
            self.proto.to_str().unwrap_or("http"),
            host.to_str().unwrap_or("")
        );
        let value = HeaderValue::from_str(&text).unwrap_or_else(|_| self.without_host.clone());
        *last = Some((host.clone(), value.clone()));
        (value, Some(host.clone()))
    }
}

/// Adds this proxy to a message's `Via` list.
pub fn append_via(headers: &mut HeaderMap, via: &HeaderValue) {
    append(headers, header::VIA, via.clone());
}

/// Adds `name` (lowercase) to the answer's `Vary` unless it is there already or `Vary` is `*`:
/// the answer depends on that request header, which caches must key it by.
pub fn vary_on(headers: &mut HeaderMap, name: &'static str) {
    let named = headers.get_all(header::VARY).iter().any(|value| {
        value.as_bytes().split(|&b| b == b',').any(|member| {
            let member = member.trim_ascii();
            member == b"*" || member.eq_ignore_ascii_case(name.as_bytes())
        })
    });
    if !named {
        headers.append(header::VARY, HeaderValue::from_static(name));
    }
}

/// Appends `value` to a comma-separated list header, joining it to any existing values.
fn append(headers: &mut HeaderMap, name: HeaderName, value: HeaderValue) {
    match headers.entry(name) {
        Entry::Vacant(vacant) => {
            vacant.insert(value);
        }
        // A value that is not visible text is replaced, not joined.
        Entry::Occupied(mut occupied) => match occupied.get().to_str() {
            Ok(existing) => {
                let joined = format!("{existing}, {}", value.to_str().unwrap_or(""));
                if let Ok(joined) = HeaderValue::from_str(&joined) {
                    occupied.insert(joined);
                }
            }
            Err(_) => {
                occupied.insert(value);
            }
        },
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

    #[test]
    fn every_hop_by_hop_name_goes_with_all_its_values_and_no_other_name_does() {
        let hop_by_hop = [
            "connection",
            "http2-settings",
            "keep-alive",
            "proxy-connection",
            "proxy-authenticate",
            "proxy-authorization",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
        ];
        // Names one letter off, or a prefix, of a hop-by-hop one are the message's.
        let kept = [
            "accept",
            "tee",
            "t",
            "upgrades",
            "connectio",
            "x-upgrade",
            "trailers",
        ];
        let mut fields = Vec::new();
        for name in hop_by_hop.iter().chain(&kept) {
            fields.extend([(*name, "1"), (*name, "2")]);
        }
        let mut h = headers(&fields);
        remove_hop_by_hop(&mut h);
        let mut left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        let mut expected = kept.to_vec();
        expected.sort_unstable();
        assert_eq!(left, expected);
        assert!(kept.iter().all(|name| h.get_all(*name).iter().count() == 2));
        for name in hop_by_hop {
            assert!(is_hop_by_hop(&HeaderName::from_static(name)), "{name}");
            assert!(!is_settable(&HeaderName::from_static(name)), "{name}");
        }
    }

    #[test]
    fn every_forwarding_name_a_client_sent_is_replaced_with_all_its_values() {
        let mut h = headers(&[
            ("host", "kargo.example"),
            ("forwarded", "for=6.6.6.6"),
            ("forwarded", "for=7.7.7.7"),
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "evil.example"),
            ("x-forwarded-port", "1"),
        ]);
        forward(false, "127.0.0.9:5000", &mut h);
        let values = |name: &str| h.get_all(name).iter().collect::<Vec<_>>();
        assert_eq!(
            values("forwarded"),
            ["for=127.0.0.9;proto=http;host=\"kargo.example\""]
        );
        assert_eq!(values("x-forwarded-for"), ["127.0.0.9"]);
        assert_eq!(values("x-forwarded-proto"), ["http"]);
        assert_eq!(values("x-forwarded-host"), ["kargo.example"]);
        // Not a forwarding field trafik writes: the backend judges it.
        assert_eq!(values("x-forwarded-port"), ["1"]);
    }

    #[test]
    fn cookie_fields_are_joined_into_one_with_semicolons() {
        let mut h = headers(&[("cookie", "a=1"), ("accept", "*/*"), ("cookie", "b=2; c=3")]);
        join_cookies(&mut h);
        let cookies: Vec<_> = h.get_all("cookie").iter().collect();
        assert_eq!(cookies, ["a=1; b=2; c=3"]);
        assert_eq!(h["accept"], "*/*");
        let mut one = headers(&[("cookie", "a=1")]);
        join_cookies(&mut one);
        assert_eq!(one.get_all("cookie").iter().count(), 1);
    }

    fn forward(trust: bool, client: &str, h: &mut HeaderMap) {
        let via = HeaderValue::from_static("1.1 trafik");
        ClientForwarding::new(client.parse().unwrap(), "http").apply(h, trust, &via);
    }

    #[test]
    fn a_connection_reuses_its_forwarded_value_until_the_host_changes() {
        let via = HeaderValue::from_static("1.1 trafik");
        let client = ClientForwarding::new("127.0.0.2:9".parse().unwrap(), "http");
        for host in ["a.test", "a.test", "b.test", "a.test"] {
            let mut h = headers(&[("host", host)]);
            client.apply(&mut h, false, &via);
            assert_eq!(
                h["forwarded"],
                format!("for=127.0.0.2;proto=http;host=\"{host}\"").as_str()
            );
            assert_eq!(h["x-forwarded-host"], host);
        }
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
        assert_eq!(h["x-forwarded-host"], "a\"b");
    }
}
