//! Sending a request again on another backend: after a failed connect (nothing was sent), or
//! after the backend lost it (the connection broke, or no answer came in time) or answered with
//! a status the pool retries. Only a request that may be repeated (idempotent, or a route that
//! allows it) and has no body is kept for the latter: its head is all there is to send again,
//! while a streamed body is gone once sent. A pool's budget bounds all retries, so a failing
//! pool gets a fifth more load, not several times its load.

use http::{HeaderMap, Method, Request, Uri, Version};

use super::body::RequestBody;

/// The head of a request, kept to send it again.
pub struct Replay {
    method: Method,
    uri: Uri,
    version: Version,
    headers: HeaderMap,
}

impl Replay {
    /// A copy of `request`'s head when it may be sent twice: bodiless, and idempotent unless
    /// `any_method`. `None` costs nothing, so a pool without retries copies no headers.
    pub fn of(request: &Request<RequestBody>, retries: u32, any_method: bool) -> Option<Self> {
        let repeatable = request.method().is_idempotent() || any_method;
        let bodiless = request.body().upload().is_none();
        (retries > 0 && repeatable && bodiless).then(|| Replay {
            method: request.method().clone(),
            uri: request.uri().clone(),
            version: request.version(),
            headers: request.headers().clone(),
        })
    }

    /// The request again, to send to another backend.
    pub fn request(&self) -> Request<RequestBody> {
        let mut request = Request::new(RequestBody::empty());
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.version_mut() = self.version;
        *request.headers_mut() = self.headers.clone();
        request
    }
}
