//! gRPC through the pipeline: a gRPC call is an HTTP/2 POST whose status travels in trailers,
//! so trafik relays a gRPC answer's trailers, honours `grpc-timeout` as the call's deadline
//! for the backend's answer, and answers its own failures as gRPC statuses (a trailers-only
//! answer, HTTP 200) that gRPC clients read, instead of HTTP errors they could only guess at.

use std::time::Duration;

use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode};
use http_body::Frame;

use super::body::ProxyBody;
use crate::error::ProxyError;

pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// The gRPC status codes trafik answers with (grpc/doc/statuscodes.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Cancelled = 1,
    DeadlineExceeded = 4,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    Unauthenticated = 16,
}

/// Whether a message is gRPC's (`application/grpc`, `application/grpc+proto`, …).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).is_some_and(|value| {
        let value = value.as_bytes();
        value.len() >= 16
            && value[..16].eq_ignore_ascii_case(b"application/grpc")
            && matches!(value.get(16), None | Some(b'+' | b';'))
    })
}

/// The call's deadline from `grpc-timeout` (at most 8 digits and a unit: H, M, S, m, u, n);
/// `None` when absent or malformed (the call then has none, as gRPC servers treat it).
pub fn timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(GRPC_TIMEOUT)?.as_bytes();
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let amount: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(amount * 3600),
        b'M' => Duration::from_secs(amount * 60),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// The gRPC status for one of trafik's own failures.
pub fn code_of(error: ProxyError) -> Code {
    match error {
        ProxyError::UpstreamTimeout => Code::DeadlineExceeded,
        ProxyError::BackendsAtLimit
        | ProxyError::QueueFull
        | ProxyError::QueueTimeout
        | ProxyError::ConcurrencyLimited
        | ProxyError::RequestBodyTooLarge => Code::ResourceExhausted,
        ProxyError::NoHealthyBackend | ProxyError::ConnectFailed | ProxyError::UpstreamFailed => {
            Code::Unavailable
        }
        ProxyError::NoRoute => Code::Unimplemented,
        ProxyError::ClientAborted | ProxyError::BodyTooSlow => Code::Cancelled,
        _ => Code::Internal,
    }
}

/// The gRPC status for an answer a step made itself without a [`ProxyError`] (a rate limit's
/// 429, an auth step's 401), as gRPC maps HTTP statuses, limits being exhausted resources.
fn code_of_status(status: StatusCode) -> Code {
    match status.as_u16() {
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        413 | 429 => Code::ResourceExhausted,
        502..=504 => Code::Unavailable,
        _ => Code::Internal,
    }
}

/// A gRPC call's answer: a failure trafik answered itself becomes a trailers-only gRPC answer
/// (HTTP 200, `grpc-status`, `grpc-message`); a backend's answer passes as it is. The
/// [`ProxyError`] stays in the extensions for the steps and logs that look for it.
pub fn own_answer(mut response: Response<ProxyBody>) -> Response<ProxyBody> {
    let relayed = matches!(response.body(), ProxyBody::Upstream { .. });
    let error = response.extensions().get::<ProxyError>().copied();
    let code = match error {
        Some(error) => code_of(error),
        None if relayed || response.status().as_u16() < 400 => return response,
        None => code_of_status(response.status()),
    };
    let message = match error {
        Some(error) => error.body().trim(),
        None => response.status().canonical_reason().unwrap_or("failed"),
    };
    *response.status_mut() = StatusCode::OK;
    *response.body_mut() = ProxyBody::Local(None);
    let headers = response.headers_mut();
    headers.clear();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from(code as u16));
    if let Ok(message) = HeaderValue::from_str(&percent_encoded(message)) {
        headers.insert(GRPC_MESSAGE, message);
    }
    response
}

/// The trailers that end a gRPC answer whose backend went away mid-stream: UNAVAILABLE, which
/// a client may retry, rather than a reset stream it would read as INTERNAL.
pub fn lost_trailers() -> Frame<bytes::Bytes> {
    let mut trailers = HeaderMap::new();
    trailers.insert(GRPC_STATUS, HeaderValue::from(Code::Unavailable as u16));
    trailers.insert(
        GRPC_MESSAGE,
        HeaderValue::from_static("the backend closed the call"),
    );
    Frame::trailers(trailers)
}

/// `grpc-message` is percent-encoded: printable ASCII but `%` stays as it is.
fn percent_encoded(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..0x7f).contains(&byte) && byte != b'%' {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::body::ErrorAnswer;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                )
            })
            .collect()
    }

    #[test]
    fn grpc_is_told_by_its_content_type() {
        assert!(is_grpc(&headers(&[("content-type", "application/grpc")])));
        assert!(is_grpc(&headers(&[(
            "content-type",
            "application/grpc+proto"
        )])));
        assert!(!is_grpc(&headers(&[("content-type", "application/grpcx")])));
        assert!(!is_grpc(&headers(&[("content-type", "application/json")])));
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn grpc_timeout_reads_every_unit_and_refuses_the_rest() {
        let read = |value| timeout(&headers(&[("grpc-timeout", value)]));
        assert_eq!(read("2S"), Some(Duration::from_secs(2)));
        assert_eq!(read("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(read("3M"), Some(Duration::from_secs(180)));
        assert_eq!(read("250m"), Some(Duration::from_millis(250)));
        assert_eq!(read("99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(read("7n"), Some(Duration::from_nanos(7)));
        for bad in ["", "S", "100000000S", "1s", "-1S", "1.5S"] {
            assert_eq!(read(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn own_failures_become_grpc_statuses() {
        let failed = own_answer(ProxyError::UpstreamTimeout.response());
        assert_eq!(failed.status(), StatusCode::OK);
        assert_eq!(failed.headers()[GRPC_STATUS], "4");
        assert_eq!(failed.headers()[CONTENT_TYPE], "application/grpc");
        assert_eq!(code_of(ProxyError::ConnectFailed), Code::Unavailable);
        assert_eq!(code_of(ProxyError::QueueFull), Code::ResourceExhausted);
        assert_eq!(
            code_of_status(StatusCode::TOO_MANY_REQUESTS),
            Code::ResourceExhausted
        );
        assert_eq!(percent_encoded("50% ü"), "50%25 %C3%BC");
    }
}
