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
    if !transfer_coding_is_chunked(request.headers()) {
        return Some(ProxyError::UnsupportedTransferCoding);
    }
    None
}

/// One `Host`, a name or address with an optional port; HTTP/1.0 may omit it, and HTTP/2 says
/// it in `:authority` instead (RFC 9113 §8.3.1).
fn host_is_valid(
    headers: &HeaderMap,
    version: Version,
    authority: Option<&http::uri::Authority>,
) -> bool {
    let mut hosts = headers.get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if version == Version::HTTP_2 => {
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
fn is_host(host: &[u8]) -> bool {
    let (name, port) = match host.iter().rposition(|&b| b == b':') {
        Some(colon) if !host.ends_with(b"]") => (&host[..colon], &host[colon + 1..]),
        _ => (host, &b""[..]),
    };
    let name_ok = match name {
        [b'[', inner @ .., b']'] => {
            !inner.is_empty()
                && inner
                    .iter()
                    .all(|b| b.is_ascii_hexdigit() || b".:".contains(b))
        }
        _ => {
            !name.is_empty()
                && name
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(b))
        }
    };
    name_ok && port.len() <= 5 && port.iter().all(u8::is_ascii_digit)
}

/// No `Transfer-Encoding`, or exactly `chunked`: other codings would reach the backend undone.
fn transfer_coding_is_chunked(headers: &HeaderMap) -> bool {
    let mut codings = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("?").split(','))
        .map(str::trim);
    match (codings.next(), codings.next()) {
        (None, _) => true,
        (Some(only), None) => only.eq_ignore_ascii_case("chunked"),
        _ => false,
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
        for bad in ["gzip, chunked", "chunked, chunked", "identity"] {
            assert_eq!(
                with(bad),
                Some(ProxyError::UnsupportedTransferCoding),
                "{bad}"
            );
        }
    }
}
