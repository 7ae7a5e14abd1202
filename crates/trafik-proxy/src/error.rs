//! Every way the proxy can fail a request, mapped to an HTTP status in one place.

use std::fmt;

use http::StatusCode;

/// Why the proxy answered a request itself instead of relaying the upstream's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyError {
    /// No route of the listener matches the request.
    NoRoute,
    /// The pool has no backend that is up and not draining.
    NoHealthyBackend,
    /// Connecting to the chosen backend failed (and retries, if any, failed too).
    ConnectFailed,
    /// The backend did not send a response head within the response timeout.
    UpstreamTimeout,
    /// The connection to the backend broke before a response head arrived.
    UpstreamFailed,
}

impl ProxyError {
    /// The status the client receives.
    pub fn status(self) -> StatusCode {
        match self {
            ProxyError::NoRoute => StatusCode::NOT_FOUND,
            ProxyError::NoHealthyBackend => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ConnectFailed | ProxyError::UpstreamFailed => StatusCode::BAD_GATEWAY,
            ProxyError::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The short plain-text body that says which failure it was.
    pub fn body(self) -> &'static str {
        match self {
            ProxyError::NoRoute => "no route matches this request\n",
            ProxyError::NoHealthyBackend => "no healthy backend in the pool\n",
            ProxyError::ConnectFailed => "could not connect to a backend\n",
            ProxyError::UpstreamTimeout => "the backend did not answer in time\n",
            ProxyError::UpstreamFailed => "the backend closed the connection without answering\n",
        }
    }

    /// True when the failure means no backend could be reached at all (counted as the pool's
    /// `unreachable`, the course's "ulasilamayan").
    pub fn is_unreachable(self) -> bool {
        matches!(
            self,
            ProxyError::NoHealthyBackend | ProxyError::ConnectFailed
        )
    }
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.body().trim_end())
    }
}

impl std::error::Error for ProxyError {}
