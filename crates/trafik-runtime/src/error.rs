//! Every way the proxy can fail a request, mapped to an HTTP status in one place.

use std::borrow::Cow;
use std::{fmt, io};

use http::StatusCode;
use http::header::{self, HeaderName};

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
    /// The backend answered `101 Switching Protocols` to a request that did not ask to switch.
    UnexpectedUpgrade,
    /// The client's request body broke off (an aborted or stalled upload); not the backend's
    /// fault, so not counted against it.
    ClientAborted,
    /// The request body is longer than the route allows.
    RequestBodyTooLarge,
    /// The request could not be parsed; hyper refuses it before trafik sees it.
    MalformedRequest,
    /// CONNECT (a tunnel) is not something an HTTP listener does.
    ConnectNotSupported,
    /// The request target is neither a path nor `*` (for OPTIONS), or carries user information.
    BadTarget,
    /// No `Host` (HTTP/1.1), more than one, or one that is not a valid authority.
    BadHost,
    /// A transfer coding other than `chunked`, which trafik could not pass on intact.
    UnsupportedTransferCoding,
    /// The path is spelled so that a backend may resolve it across a segment boundary trafik
    /// cannot see (an encoded slash or backslash, `..;`), or with a malformed escape.
    AmbiguousPath,
    /// The request target is longer than hyper accepts.
    UriTooLong,
    /// The request head is larger than hyper accepts.
    HeadTooLarge,
    /// A gateway expression failed on an answer, or a part's answer was not what it needs.
    ShapingFailed,
    /// A gateway request's part answers together came past what one answer may gather
    /// (`PARTS_BUDGET` of trafik-http's gateway): the rest were not fetched.
    PartsTooLarge,
    /// A list in the query names an item that cannot stand in an upstream path, or more items
    /// than a batch takes.
    BadListItem,
    /// `Transfer-Encoding` names `chunked` twice or beside `identity`: where the body ends
    /// would depend on who reads it.
    AmbiguousFraming,
    /// The request carries this instance's own name in `Via` twice: it is going round a loop.
    LoopDetected,
    /// Every backend tried had as many requests in flight as the pool allows one.
    BackendsAtLimit,
    /// The client sent its body slower than the minimum rate; not the backend's fault.
    BodyTooSlow,
    /// Every backend was at its request limit and the pool's queue held `max_pending` already.
    QueueFull,
    /// Every backend stayed at its request limit for the pool's whole `queue_timeout`.
    QueueTimeout,
    /// The pool had as many requests in flight as its adaptive concurrency limit allows.
    ConcurrencyLimited,
    /// Request buffering could not keep the body: its temporary file could not be written.
    BodyNotBuffered,
}

impl ProxyError {
    /// The status the client receives.
    pub fn status(self) -> StatusCode {
        match self {
            ProxyError::NoRoute => StatusCode::NOT_FOUND,
            ProxyError::NoHealthyBackend
            | ProxyError::BackendsAtLimit
            | ProxyError::QueueFull
            | ProxyError::QueueTimeout
            | ProxyError::ConcurrencyLimited => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ConnectFailed
            | ProxyError::UpstreamFailed
            | ProxyError::UnexpectedUpgrade => StatusCode::BAD_GATEWAY,
            ProxyError::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::ClientAborted
            | ProxyError::MalformedRequest
            | ProxyError::AmbiguousPath
            | ProxyError::BadTarget
            | ProxyError::BadHost
            | ProxyError::AmbiguousFraming => StatusCode::BAD_REQUEST,
            ProxyError::LoopDetected => StatusCode::LOOP_DETECTED,
            ProxyError::ConnectNotSupported | ProxyError::UnsupportedTransferCoding => {
                StatusCode::NOT_IMPLEMENTED
            }
            ProxyError::RequestBodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ProxyError::BodyTooSlow => StatusCode::REQUEST_TIMEOUT,
            ProxyError::UriTooLong => StatusCode::URI_TOO_LONG,
            ProxyError::HeadTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ProxyError::ShapingFailed | ProxyError::PartsTooLarge => StatusCode::BAD_GATEWAY,
            ProxyError::BadListItem => StatusCode::BAD_REQUEST,
            ProxyError::BodyNotBuffered => StatusCode::INTERNAL_SERVER_ERROR,
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
            ProxyError::UnexpectedUpgrade => "the backend switched protocols unasked\n",
            ProxyError::ClientAborted => "the request body ended early\n",
            ProxyError::RequestBodyTooLarge => {
                "the request body is larger than this route allows\n"
            }
            ProxyError::MalformedRequest => "malformed request\n",
            ProxyError::ConnectNotSupported => "CONNECT is not supported here\n",
            ProxyError::BadTarget => "the request target must be a path\n",
            ProxyError::BadHost => "the request needs exactly one valid Host header\n",
            ProxyError::UnsupportedTransferCoding => {
                "only the chunked transfer coding is supported\n"
            }
            ProxyError::AmbiguousPath => {
                "the path has a malformed escape, an encoded slash or backslash, or a dot segment with parameters\n"
            }
            ProxyError::UriTooLong => "the request target is too long\n",
            ProxyError::HeadTooLarge => "the request head is too large\n",
            ProxyError::ShapingFailed => "the gateway could not shape the upstream answer\n",
            ProxyError::PartsTooLarge => {
                "the upstream answers this request gathers came to more than one answer may hold\n"
            }
            ProxyError::BadListItem => {
                "the query's list has an item that cannot name a record, or too many items\n"
            }
            ProxyError::AmbiguousFraming => {
                "the body's framing is ambiguous (chunked twice, or with identity)\n"
            }
            ProxyError::LoopDetected => {
                "this request already passed through this trafik twice (its name is in Via): a loop\n"
            }
            ProxyError::BackendsAtLimit => {
                "every backend has as many requests in flight as the pool allows\n"
            }
            ProxyError::BodyTooSlow => "the request body came slower than this listener allows\n",
            ProxyError::QueueFull => {
                "every backend is at its request limit and the pool's queue is full\n"
            }
            ProxyError::QueueTimeout => {
                "every backend stayed at its request limit while the request waited in the queue\n"
            }
            ProxyError::ConcurrencyLimited => {
                "the pool has as many requests in flight as its latency allows\n"
            }
            ProxyError::BodyNotBuffered => "the request body could not be buffered\n",
        }
    }

    /// Whether the backend is to blame (and its `failures` counter grows).
    pub fn is_backend_fault(self) -> bool {
        matches!(
            self,
            ProxyError::ConnectFailed
                | ProxyError::UpstreamTimeout
                | ProxyError::UpstreamFailed
                | ProxyError::UnexpectedUpgrade
        )
    }

    /// Whether the backend received the request and then gave no answer: its connection
    /// broke or the response timeout passed. Another backend may be asked, if the request can
    /// be sent twice.
    pub fn is_lost_request(self) -> bool {
        matches!(
            self,
            ProxyError::UpstreamFailed | ProxyError::UpstreamTimeout
        )
    }

    /// The word written after the hop chain on this answer (`tv > yd > unreachable`), when
    /// `[server] trace_header` is set: one per failure, so a chain says where and why it broke.
    pub fn trace_reason(self) -> &'static str {
        match self {
            ProxyError::NoRoute => "no-route",
            ProxyError::NoHealthyBackend => "no-healthy-backend",
            // The course's "ulasilamadi".
            ProxyError::ConnectFailed => "unreachable",
            ProxyError::UpstreamTimeout => "timeout",
            ProxyError::UpstreamFailed => "no-answer",
            ProxyError::UnexpectedUpgrade => "unasked-upgrade",
            ProxyError::ClientAborted => "client-aborted",
            ProxyError::RequestBodyTooLarge => "body-too-large",
            ProxyError::MalformedRequest => "malformed-request",
            ProxyError::UriTooLong => "uri-too-long",
            ProxyError::HeadTooLarge => "head-too-large",
            ProxyError::ConnectNotSupported => "connect-not-supported",
            ProxyError::BadTarget => "bad-target",
            ProxyError::BadHost => "bad-host",
            ProxyError::UnsupportedTransferCoding => "unsupported-transfer-coding",
            ProxyError::AmbiguousPath => "ambiguous-path",
            ProxyError::ShapingFailed => "shaping-failed",
            ProxyError::PartsTooLarge => "parts-too-large",
            ProxyError::BadListItem => "bad-list-item",
            ProxyError::AmbiguousFraming => "ambiguous-framing",
            ProxyError::LoopDetected => "loop",
            ProxyError::BackendsAtLimit => "backends-at-limit",
            ProxyError::BodyTooSlow => "body-too-slow",
            ProxyError::QueueFull => "queue-full",
            ProxyError::QueueTimeout => "queue-timeout",
            ProxyError::ConcurrencyLimited => "concurrency-limit",
            ProxyError::BodyNotBuffered => "body-not-buffered",
        }
    }

    /// Headers the answer carries beside its body, the same on every engine: when to try
    /// again, which overload turned the request away, and whether the connection can go on
    /// (not after a request body that was left unread).
    pub fn headers(self) -> &'static [(HeaderName, &'static str)] {
        const RETRY_SOON: &[(HeaderName, &str)] = &[(header::RETRY_AFTER, "1")];
        const CLOSE: &[(HeaderName, &str)] = &[(header::CONNECTION, "close")];
        /// Overload, not failure: the client (or a proxy before it) learns which.
        const fn overloaded(reason: &'static str) -> [(HeaderName, &'static str); 2] {
            [
                (header::RETRY_AFTER, "1"),
                (HeaderName::from_static("x-trafik-reason"), reason),
            ]
        }
        static AT_LIMIT: [(HeaderName, &str); 2] = overloaded("backends-at-limit");
        static QUEUE_FULL: [(HeaderName, &str); 2] = overloaded("queue-full");
        static QUEUE_TIMEOUT: [(HeaderName, &str); 2] = overloaded("queue-timeout");
        static CONCURRENCY: [(HeaderName, &str); 2] = overloaded("concurrency-limit");
        match self {
            ProxyError::NoHealthyBackend => RETRY_SOON,
            ProxyError::BackendsAtLimit => &AT_LIMIT,
            ProxyError::QueueFull => &QUEUE_FULL,
            ProxyError::QueueTimeout => &QUEUE_TIMEOUT,
            ProxyError::ConcurrencyLimited => &CONCURRENCY,
            ProxyError::ClientAborted
            | ProxyError::RequestBodyTooLarge
            | ProxyError::ConnectNotSupported
            | ProxyError::BadTarget
            | ProxyError::BadHost
            | ProxyError::UnsupportedTransferCoding
            | ProxyError::AmbiguousPath
            | ProxyError::AmbiguousFraming
            | ProxyError::LoopDetected
            | ProxyError::BodyTooSlow => CLOSE,
            _ => &[],
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

impl ProxyError {
    /// The body with the backend to blame named, when one is: its name or address and the
    /// class of what went wrong, nothing more (no system message reaches the client).
    pub fn body_blaming(self, blame: Option<&Blame>) -> Cow<'static, str> {
        match blame {
            None => Cow::Borrowed(self.body()),
            Some(blame) => Cow::Owned(format!(
                "{}: {}, {}\n",
                self.body().trim_end(),
                blame.backend,
                blame.cause.words()
            )),
        }
    }

    /// The class of a backend's failure this error is, when the backend is to blame.
    pub fn cause(self) -> Option<Cause> {
        match self {
            ProxyError::ConnectFailed => Some(Cause::ConnectFailed),
            ProxyError::UpstreamTimeout => Some(Cause::Timeout),
            ProxyError::UpstreamFailed => Some(Cause::NoAnswer),
            ProxyError::UnexpectedUpgrade => Some(Cause::UnaskedUpgrade),
            _ => None,
        }
    }
}

/// What went wrong with a backend, as its client may learn it: the class, never the system's
/// message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Nothing listens on the backend's port: its host refused the connection.
    Refused,
    /// The connect (or its TLS handshake) took longer than the pool's connect timeout.
    ConnectTimeout,
    /// No route to the backend's host or network.
    Unreachable,
    /// The connect failed otherwise (the backend broke off the TLS handshake, say).
    ConnectFailed,
    /// No answer within the pool's response timeout.
    Timeout,
    /// The backend closed or reset the connection, or broke its answer's head, before an answer.
    NoAnswer,
    /// The backend switched protocols unasked.
    UnaskedUpgrade,
}

impl Cause {
    /// The class of a failed connect.
    pub fn of_connect(error: &io::Error) -> Cause {
        match error.kind() {
            io::ErrorKind::ConnectionRefused => Cause::Refused,
            io::ErrorKind::TimedOut => Cause::ConnectTimeout,
            io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
                Cause::Unreachable
            }
            _ => Cause::ConnectFailed,
        }
    }

    /// A few words for the client's answer.
    pub fn words(self) -> &'static str {
        match self {
            Cause::Refused => "connection refused",
            Cause::ConnectTimeout => "connect timed out",
            Cause::Unreachable => "host unreachable",
            Cause::ConnectFailed => "connect failed",
            Cause::Timeout => "no answer within the response timeout",
            Cause::NoAnswer => "connection closed or reset before an answer",
            Cause::UnaskedUpgrade => "101 Switching Protocols",
        }
    }
}

/// The backend a failed request is blamed on, named for its client: the backend's name and
/// address (or its address alone), and the class of its failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blame {
    pub backend: String,
    pub cause: Cause,
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.body().trim_end())
    }
}

impl std::error::Error for ProxyError {}
