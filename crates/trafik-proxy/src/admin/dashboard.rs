//! The dashboard: one self-contained page (`GET /`), embedded in the binary, that polls
//! `/status` and draws it; its drain, undrain and reload buttons call the same admin API, under
//! the same guards. The page holds no data, so it is served without the token; it asks for the
//! token when `/status` answers 401 and sends it as `Authorization: Bearer`.

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;

/// The page: HTML, CSS and script in one file, no external resource.
const PAGE: &str = include_str!("dashboard.html");

/// Whether `request` asks for the page.
pub fn is_page<B>(request: &Request<B>) -> bool {
    request.uri().path() == "/" && matches!(*request.method(), Method::GET | Method::HEAD)
}

pub fn page() -> Response<Full<Bytes>> {
    let mut response = super::reply(StatusCode::OK, "text/html; charset=utf-8", PAGE.to_owned());
    let headers = response.headers_mut();
    // Inline script and style only, requests to this origin only, and no framing (a page of
    // another site must not trick a click on Drain).
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
             connect-src 'self'; img-src data:; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
