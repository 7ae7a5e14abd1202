//! What a request must be before trafik routes it (RFC 9112 §3.2, §6): a request target trafik
//! can route, one valid `Host`, and a transfer coding it can re-frame. hyper has already refused
//! what it cannot parse; these are the requests it parses but a proxy must not pass on.

use http::{HeaderMap, Method, Request, Version, header};

use crate::error::ProxyError;

/// Why `request` must be answered by trafik instead of routed, if it must.
pub fn refusal<B>(request: &Request<B>) -> Option<ProxyError> {
    let uri = request.uri();
    if request.method() == Method::CONNECT {
        return Some(ProxyError::ConnectNotSupported);
    }
    let path = uri.path();
    let asterisk = path == "*" && request.method() == Method::OPTIONS;
    if !(path.starts_with('/') || asterisk)
        || uri.authority().is_some_and(|a| a.as_str().contains('@'))
    {
        return Some(ProxyError::BadTarget);
    }
    if !host_is_valid(request.headers(), request.version(), uri.authority()) {
        return Some(ProxyError::BadHost);
    }
    match transfer_coding(request.headers()) {
        Coding::None | Coding::Chunked => None,
        Coding::Ambiguous => Some(ProxyError::AmbiguousFraming),
        Coding::Unsupported => Some(ProxyError::UnsupportedTransferCoding),
    }
}

/// Passes through one instance a request may have made already: one is a deliberate hop back
/// into trafik (a pool reaching its own HTTPS listener), a second is a loop.
const OWN_HOPS_ALLOWED: usize = 1;

/// Whether a request is going round a loop: this instance's own name in `Via` (RFC 9110
/// §7.6.3) more often than a deliberate hop explains means a backend address leads back to a
/// listener that routes it there again, which would go on until sockets or memory run out.
pub fn loops_back(headers: &HeaderMap, name: &str) -> bool {
    headers
        .get_all(header::VIA)
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("").split(','))
        .filter_map(|entry| entry.split_whitespace().nth(1))
        .filter(|received_by| *received_by == name)
        .count()
        > OWN_HOPS_ALLOWED
}

/// One `Host`, a name or address with an optional port; HTTP/1.0 may omit it, and HTTP/2 and
/// HTTP/3 say it in `:authority` instead (RFC 9113 §8.3.1, RFC 9114 §4.3.1).
fn host_is_valid(
    headers: &HeaderMap,
    version: Version,
    authority: Option<&http::uri::Authority>,
) -> bool {
    let mut hosts = headers.get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if version >= Version::HTTP_2 => {
            authority.is_some_and(|a| is_host(a.as_str().as_bytes()))
        }
        (None, _) => version == Version::HTTP_10,
        (Some(host), None) => is_host(host.as_bytes()),
        (Some(_), Some(_)) => false,
    }
}

/// `name[:port]` or `[v6]:port` in the characters of DNS names and addresses: the reg-name
/// grammar also allows `,;=!$&'()*+`, which no real host has and which would pass unchecked
/// into `Forwarded` and `X-Forwarded-Host`.
pub(crate) fn is_host(host: &[u8]) -> bool {
    let (name, port) = match host.iter().rposition(|&b| b == b':') {
        Some(colon) if !host.ends_with(b"]") => (&host[..colon], &host[colon + 1..]),
        _ => (host, &b""[..]),
    };
    let name_ok = match name {
        [b'[', inner @ .., b']'] => {
            !inner.is_empty()
                && inner
                    .iter()
                    .all(|&b| b.is_ascii_hexdigit() || matches!(b, b'.' | b':'))
        }
        _ => !name.is_empty() && name.iter().all(|&b| HOST_NAME_BYTES[usize::from(b)]),
    };
    name_ok && port.len() <= 5 && port.iter().all(u8::is_ascii_digit)
}

/// Bytes a host name (or an IPv4 address) may hold: letters, digits, `-`, `.`, `_`. A table:
/// every request's `Host` goes through it.
const HOST_NAME_BYTES: [bool; 256] = alphanumeric_and(b"-._");

/// A table of the bytes that are ASCII letters, digits or one of `others`: the byte classes of
/// the HTTP grammar every request's head goes through, looked up rather than matched.
pub(crate) const fn alphanumeric_and(others: &[u8]) -> [bool; 256] {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = (byte as u8).is_ascii_alphanumeric();
        byte += 1;
    }
    let mut other = 0;
    while other < others.len() {
        table[others[other] as usize] = true;
        other += 1;
    }
    table
}

/// What a request's `Transfer-Encoding` says about its framing.
enum Coding {
    None,
    Chunked,
    /// `chunked` more than once or beside `identity`: peers disagree on where such a body ends
    /// (request smuggling), so it is refused as malformed and the connection closed. (With
    /// `Content-Length` too, hyper has already dropped the length, as RFC 9112 §6.3 allows,
    /// and closes the connection after the answer.)
    Ambiguous,
    /// A coding trafik cannot re-frame (`gzip, chunked`): it would reach the backend undone.
    Unsupported,
}

fn transfer_coding(headers: &HeaderMap) -> Coding {
    let codings = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("?").split(','))
        .map(str::trim);
    let (mut chunked, mut others, mut ambiguous) = (0, 0, false);
    for coding in codings {
        if coding.eq_ignore_ascii_case("chunked") {
            chunked += 1;
        } else if coding.eq_ignore_ascii_case("identity") || coding.is_empty() {
            ambiguous = true;
        } else {
            others += 1;
        }
    }
    match (chunked, others) {
        (0, 0) if !ambiguous => Coding::None,
        _ if ambiguous || chunked > 1 => Coding::Ambiguous,
        (1, 0) => Coding::Chunked,
        _ => Coding::Unsupported,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, target: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut builder = Request::builder().method(method).uri(target);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn targets_and_hosts_a_proxy_must_refuse() {
        let host = [("host", "kargo.test")];
        assert_eq!(refusal(&request(Method::GET, "/takip", &host)), None);
        assert_eq!(refusal(&request(Method::OPTIONS, "*", &host)), None);
        assert_eq!(
            refusal(&request(Method::GET, "*", &host)),
            Some(ProxyError::BadTarget)
        );
        assert_eq!(
            refusal(&request(Method::CONNECT, "kargo.test:443", &host)),
            Some(ProxyError::ConnectNotSupported)
        );
        assert_eq!(
            refusal(&request(Method::GET, "http://u:p@kargo.test/", &host)),
            Some(ProxyError::BadTarget)
        );
        assert_eq!(
            refusal(&request(Method::GET, "/", &[])),
            Some(ProxyError::BadHost)
        );
        for bad in ["a b", "a,for=6.6.6.6", "u@a", ""] {
            assert_eq!(
                refusal(&request(Method::GET, "/", &[("host", bad)])),
                Some(ProxyError::BadHost),
                "{bad:?}"
            );
        }
        let twice = [("host", "a"), ("host", "b")];
        assert_eq!(
            refusal(&request(Method::GET, "/", &twice)),
            Some(ProxyError::BadHost)
        );
    }

    #[test]
    fn only_chunked_is_a_transfer_coding_trafik_passes() {
        let with = |value: &str| {
            refusal(&request(
                Method::POST,
                "/",
                &[("host", "a"), ("transfer-encoding", value)],
            ))
        };
        assert_eq!(with("chunked"), None);
        assert_eq!(with("ChUnKeD"), None);
        for bad in ["gzip, chunked", "gzip"] {
            assert_eq!(
                with(bad),
                Some(ProxyError::UnsupportedTransferCoding),
                "{bad}"
            );
        }
        for ambiguous in [
            "chunked, chunked",
            "identity, chunked",
            "identity",
            "chunked,",
        ] {
            assert_eq!(
                with(ambiguous),
                Some(ProxyError::AmbiguousFraming),
                "{ambiguous}"
            );
        }
        let twice = refusal(&request(
            Method::POST,
            "/",
            &[
                ("host", "a"),
                ("transfer-encoding", "chunked"),
                ("transfer-encoding", "chunked"),
            ],
        ));
        assert_eq!(twice, Some(ProxyError::AmbiguousFraming));
    }

    #[test]
    fn its_own_name_twice_in_via_is_a_loop() {
        let via = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::VIA, value.parse().unwrap());
            loops_back(&headers, "trafik")
        };
        assert!(!via("1.1 trafik"), "one hop back into trafik is no loop");
        assert!(via("1.1 trafik, 1.1 trafik"));
        assert!(via("1.1 trafik, 1.1 edge, 2 trafik (comment)"));
        assert!(!via("1.1 trafikx, 1.1 trafik, 1.1 edge"));
        assert!(!via("trafik"));
        assert!(!loops_back(&HeaderMap::new(), "trafik"));
    }
}
