//! Sending a request again on another backend: after a failed connect (nothing was sent), or
//! after the backend lost it (the connection broke, or no answer came in time) or answered with
//! a status the pool retries. Only a request that may be repeated (idempotent, or a route that
//! allows it) and has no body is kept for the latter: its head is all there is to send again,
//! while a streamed body is gone once sent. A pool's budget bounds all retries, so a failing
//! pool gets a fifth more load, not several times its load.

use http::Request;

use super::body::RequestBody;

/// Whether `request` may be sent again after a backend received it: bodiless, and idempotent
/// unless `any_method`. Its transport only borrows its head, which then goes again as it is.
pub fn replayable(request: &Request<RequestBody>, retries: u32, any_method: bool) -> bool {
    let repeatable = request.method().is_idempotent() || any_method;
    retries > 0 && repeatable && request.body().upload().is_none()
}
