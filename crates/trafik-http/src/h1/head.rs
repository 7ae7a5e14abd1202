//! Request and response heads for the own engine: parsed into a stack array ([`super::scan`])
//! rewritten for the next hop by copying their bytes into one reused buffer. Pure: no I/O.
//!
//! A request head is taken only when it is plainly valid; anything doubtful (a parse error, a
//! second `Content-Length`, a transfer coding other than `chunked` alone, an upgrade, an
//! `Expect` other than `100-continue`, forwarding headers to keep, an unusual target) is
//! [`Request::Defer`]red to hyper and `http/validate.rs`, so the verdicts on hostile input stay
//! exactly theirs.

use std::fmt::Write;
use std::ops::Range;

use http::{HeaderName, Method, header};

use super::scan;
use crate::http::path;
use crate::http::validate::is_host;
use crate::plan::HeadLimits;
use crate::view::RequestView;

/// The most header fields the fast path parses; a longer head goes to hyper, which applies the
/// configured limit.
pub const MAX_HEADERS: usize = 64;

/// What the start of a client's buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// A head not complete yet.
    Partial,
    /// Not an HTTP/1 head: a field or request line `httparse` refuses (what hyper answers 400).
    Malformed,
    /// One for the full pipeline (hyper), whatever it turns out to be.
    Defer,
    /// A plain request, its rewritten head written out.
    Ready(RequestHead),
}

/// A request head fit for the fast path; ranges index the client's buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes of the head, blank line included.
    pub length: usize,
    pub method: Method,
    /// The path without its query.
    pub path: Range<usize>,
    /// The request target as sent, query included (for the access log).
    pub target: Range<usize>,
    /// The `Host` value without its port.
    pub host: Range<usize>,
    /// Bytes of body that follow the head (0 when chunked).
    pub body: u64,
    /// The body is chunked ([`super::body`] decodes it and frames it anew).
    pub chunked: bool,
    /// The client waits for `100 Continue` before it sends its body.
    pub expect_continue: bool,
    /// A bodiless `GET` with `Upgrade` and `Connection: upgrade`: a 101 may switch protocols
    /// ([`super::tunnel`]), as `http/upgrade.rs` decides on hyper's path.
    pub upgrade: bool,
    /// The client asked to close after this exchange.
    pub close: bool,
    /// A valid head the fast path does not rewrite itself (a `Via` or trace context to carry
    /// on, forwarding headers to keep, a path to normalize, a chunked `GET`): only the
    /// pipeline serves it, and nothing is written for the next hop.
    pub pipeline: bool,
    /// The client sent `Cache-Control`, `Range` or a conditional field (`If-*`): what an
    /// answer from the store or a file depends on. Without any, none needs a search.
    pub cache_fields: bool,
}

/// A request's head as the pool's rules read it (hash keys, cookie stickiness): its fields
/// parsed again, only for a pool that reads them.
pub struct HeadView<'a> {
    fields: &'a [httparse::Header<'a>],
    path: &'a str,
    query: Option<&'a str>,
}

impl<'a> HeadView<'a> {
    /// The view of `head`, whose bytes start `input`, its fields parsed into `fields`.
    pub fn parse(
        input: &'a [u8],
        head: &RequestHead,
        fields: &'a mut [httparse::Header<'a>; MAX_HEADERS],
    ) -> Self {
        let mut parsed = httparse::Request::new(fields);
        // The head parsed once already: this cannot fail, and a view without fields is the
        // request without the key.
        let fields = match parsed.parse(&input[..head.length]) {
            Ok(httparse::Status::Complete(_)) => parsed.headers,
            _ => &mut [],
        };
        let target = ascii(&input[head.target.clone()]);
        HeadView {
            fields,
            path: ascii(&input[head.path.clone()]),
            query: target.split_once('?').map(|(_, query)| query),
        }
    }
}

impl HeadView<'_> {
    /// A view of nothing, for a route table that reads no fields.
    pub fn empty() -> Self {
        HeadView {
            fields: &[],
            path: "",
            query: None,
        }
    }
}

impl RequestView for HeadView<'_> {
    fn header_values<'v>(&'v self, name: &'v str) -> impl Iterator<Item = &'v [u8]> {
        self.fields
            .iter()
            .filter(move |field| field.name.eq_ignore_ascii_case(name))
            .map(|field| field.value)
    }

    fn path(&self) -> &str {
        self.path
    }

    fn query(&self) -> Option<&str> {
        self.query
    }
}

/// Replaces the path of the request line at the start of a head written out (`GET /a?q
/// HTTP/1.1`), keeping the query.
pub fn replace_path(head: &mut Vec<u8>, path: &[u8]) {
    let Some(start) = head.iter().position(|&b| b == b' ').map(|space| space + 1) else {
        return;
    };
    let Some(length) = head[start..].iter().position(|&b| b == b'?' || b == b' ') else {
        return;
    };
    head.splice(start..start + length, path.iter().copied());
}

/// Adds the field `name: value` to the end of a head written out (ending in its blank line).
pub fn add_field(head: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    if head.ends_with(b"\r\n\r\n") {
        head.truncate(head.len() - 2);
        write_field(head, name, value);
        head.extend_from_slice(b"\r\n");
    }
}

/// Writes the field line `name: value`.
pub fn write_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// What a connection adds to every request it forwards: its client's address in the
/// forwarding headers, and this instance in `Via`. Kept inline: a connection that serves one
/// request pays no allocation for it.
pub struct Forwarding {
    /// The added headers up to the first copy of the `Host` value: `forwarded: for=…;proto=…;host="`.
    before_host: Inline,
    /// Those between its two copies: `"`, `X-Forwarded-For`, `-Proto` and `x-forwarded-host: `.
    between_hosts: Inline,
}

impl Forwarding {
    pub fn new(client: std::net::SocketAddr, scheme: &'static str) -> Self {
        let mut client_ip = Inline::default();
        let mut for_parameter = Inline::default();
        match client.ip() {
            std::net::IpAddr::V4(v4) => {
                // By hand: the formatting machinery costs more than the rest of this.
                for (at, octet) in v4.octets().into_iter().enumerate() {
                    if at > 0 {
                        client_ip.push(b'.');
                    }
                    if octet >= 100 {
                        client_ip.push(b'0' + octet / 100);
                    }
                    if octet >= 10 {
                        client_ip.push(b'0' + octet / 10 % 10);
                    }
                    client_ip.push(b'0' + octet % 10);
                }
                for_parameter.extend(b"for=");
                for_parameter.extend(client_ip.as_bytes());
            }
            std::net::IpAddr::V6(v6) => {
                let _ = write!(client_ip, "{v6}");
                let _ = write!(for_parameter, "for=\"[{v6}]\"");
            }
        }
        let mut before_host = Inline::default();
        for part in [
            b"forwarded: ",
            for_parameter.as_bytes(),
            b";proto=",
            scheme.as_bytes(),
        ] {
            before_host.extend(part);
        }
        before_host.extend(b";host=\"");
        let mut between_hosts = Inline::default();
        for part in [
            b"\"\r\nx-forwarded-for: ",
            client_ip.as_bytes(),
            b"\r\nx-forwarded-proto: ",
            scheme.as_bytes(),
            b"\r\nx-forwarded-host: ",
        ] {
            between_hosts.extend(part);
        }
        Forwarding {
            before_host,
            between_hosts,
        }
    }
}

/// Text short enough for the stack: the longest held is `forwarded: for="[` an IPv6 address
/// `]";proto=https;host="` (76 bytes).
struct Inline {
    bytes: [u8; 96],
    length: usize,
}

impl Default for Inline {
    fn default() -> Self {
        Inline {
            bytes: [0; 96],
            length: 0,
        }
    }
}

impl Inline {
    fn push(&mut self, byte: u8) {
        self.extend(&[byte]);
    }

    fn extend(&mut self, bytes: &[u8]) {
        let end = (self.length + bytes.len()).min(self.bytes.len());
        self.bytes[self.length..end].copy_from_slice(&bytes[..end - self.length]);
        self.length = end;
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.length]
    }
}

impl std::fmt::Write for Inline {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        self.extend(text.as_bytes());
        Ok(())
    }
}

/// The fields the rewriters act on, told apart once per field: by length first (most names
/// are none of them), then by one comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Other,
    Host,
    ContentLength,
    TransferEncoding,
    Connection,
    Upgrade,
    Expect,
    Via,
    Traceparent,
    Date,
    RetryAfter,
    /// Hop-by-hop (RFC 9110 §7.6.1) but none of the above: `TE`, `Trailer`, `Keep-Alive`,
    /// `HTTP2-Settings`, `Proxy-Connection`, `Proxy-Authenticate`, `Proxy-Authorization`.
    OtherHop,
    /// Through which a client claims where a request came from: `Forwarded`,
    /// `X-Forwarded-For`, `-Host`, `-Proto`.
    Forwarding,
    /// `x-trafik-explain`: the pipeline takes it off, and answers it when the admin token
    /// comes with it.
    Explain,
    /// `Cache-Control`, `Range` and the conditional fields (`If-Match`, `If-None-Match`,
    /// `If-Modified-Since`, `If-Unmodified-Since`, `If-Range`): read by a cache or a file answer.
    Conditional,
}

/// The names [`Field::Conditional`] stands for.
pub static CACHE_FIELDS: [HeaderName; 7] = [
    header::CACHE_CONTROL,
    header::RANGE,
    header::IF_MATCH,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
];

impl Field {
    fn of(name: &str) -> Field {
        let name = name.as_bytes();
        match name.len() {
            2 if is_lowercase(name, b"te") => Field::OtherHop,
            3 if is_lowercase(name, b"via") => Field::Via,
            4 if is_lowercase(name, b"host") => Field::Host,
            4 if is_lowercase(name, b"date") => Field::Date,
            5 if is_lowercase(name, b"range") => Field::Conditional,
            6 if is_lowercase(name, b"expect") => Field::Expect,
            7 if is_lowercase(name, b"upgrade") => Field::Upgrade,
            7 if is_lowercase(name, b"trailer") => Field::OtherHop,
            8 if is_lowercase(name, b"if-match") => Field::Conditional,
            8 if is_lowercase(name, b"if-range") => Field::Conditional,
            9 if is_lowercase(name, b"forwarded") => Field::Forwarding,
            10 if is_lowercase(name, b"connection") => Field::Connection,
            10 if is_lowercase(name, b"keep-alive") => Field::OtherHop,
            11 if is_lowercase(name, b"traceparent") => Field::Traceparent,
            11 if is_lowercase(name, b"retry-after") => Field::RetryAfter,
            13 if is_lowercase(name, b"cache-control") => Field::Conditional,
            13 if is_lowercase(name, b"if-none-match") => Field::Conditional,
            14 if is_lowercase(name, b"content-length") => Field::ContentLength,
            14 if is_lowercase(name, b"http2-settings") => Field::OtherHop,
            15 if is_lowercase(name, b"x-forwarded-for") => Field::Forwarding,
            16 if is_lowercase(name, b"x-forwarded-host") => Field::Forwarding,
            16 if is_lowercase(name, b"x-trafik-explain") => Field::Explain,
            16 if is_lowercase(name, b"proxy-connection") => Field::OtherHop,
            17 if is_lowercase(name, b"transfer-encoding") => Field::TransferEncoding,
            17 if is_lowercase(name, b"x-forwarded-proto") => Field::Forwarding,
            17 if is_lowercase(name, b"if-modified-since") => Field::Conditional,
            18 if is_lowercase(name, b"proxy-authenticate") => Field::OtherHop,
            19 if is_lowercase(name, b"proxy-authorization") => Field::OtherHop,
            19 if is_lowercase(name, b"if-unmodified-since") => Field::Conditional,
            _ => Field::Other,
        }
    }

    /// Headers no hop passes on (RFC 9110 §7.6.1).
    fn is_hop_by_hop(self) -> bool {
        matches!(
            self,
            Field::OtherHop | Field::Connection | Field::Upgrade | Field::TransferEncoding
        )
    }

    /// Fields the fast path leaves out of a request it forwards: hop-by-hop ones, and the
    /// client's forwarding claims, written anew.
    fn is_dropped_from_requests(self) -> bool {
        self.is_hop_by_hop() || self == Field::Forwarding
    }
}

/// Whether the header name `name` is `lower` (lower-case letters, digits, `-`) in any case,
/// compared without a branch per byte. Sound for names `httparse` took, which hold token
/// characters only: setting bit 0x20 turns an upper-case letter into its lower-case one and
/// leaves every other token character that could equal a byte of `lower` as it is (0x0D and
/// 0x10–0x19, which would become `-` and digits, are no token characters).
#[inline(always)]
fn is_lowercase<const N: usize>(name: &[u8], lower: &[u8; N]) -> bool {
    let Ok(name) = <&[u8; N]>::try_from(name) else {
        return false;
    };
    let mut differ = 0;
    for (byte, expected) in name.iter().zip(lower) {
        differ |= (byte | 0x20) ^ expected;
    }
    differ == 0
}

/// What a `Connection` value says: close after this exchange, upgrade, and whether it names
/// other headers as hop-by-hop (the pipeline's hop-by-hop step removes those; the fast path's
/// rewriter does not).
struct ConnectionTokens {
    close: bool,
    upgrade: bool,
    names_others: bool,
}

fn connection_tokens(value: &[u8]) -> ConnectionTokens {
    let mut tokens = ConnectionTokens {
        close: false,
        upgrade: false,
        names_others: false,
    };
    for token in value.split(|&b| b == b',') {
        let token = token.trim_ascii();
        if token.eq_ignore_ascii_case(b"close") {
            tokens.close = true;
        } else if token.eq_ignore_ascii_case(b"upgrade") {
            tokens.upgrade = true;
        } else if !(token.eq_ignore_ascii_case(b"keep-alive") || token.is_empty()) {
            tokens.names_others = true;
        }
    }
    tokens
}

/// Bytes a request target may hold on the fast path: RFC 3986's unreserved, sub-delims, `:@/?%`.
pub(super) const TARGET_BYTES: [bool; 256] =
    crate::http::validate::alphanumeric_and(b"-._~!$&'()*+,;=:@/?%");

/// Text the fast path found to be ASCII (a target, a `Host`); empty should it not be.
#[allow(unsafe_code)]
pub fn ascii(bytes: &[u8]) -> &str {
    if bytes.is_ascii() {
        // SAFETY: ASCII is UTF-8. (`from_utf8` costs a request ~2 % of its instructions.)
        unsafe { std::str::from_utf8_unchecked(bytes) }
    } else {
        ""
    }
}

/// A `Content-Length` value: 1 to 15 decimal digits, nothing else.
fn decimal(value: &[u8]) -> Option<u64> {
    let digits = !value.is_empty() && value.len() <= 15 && value.iter().all(u8::is_ascii_digit);
    digits.then(|| value.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// Offset of `part` (a slice of `buffer`) in `buffer`.
fn range_in(buffer: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buffer.as_ptr() as usize;
    start..start + part.len()
}

/// Parses the request head at the start of `buffer` and, when it is one for the fast path,
/// writes it into `out` as the next hop gets it: hop-by-hop headers and untrusted forwarding
/// headers dropped; `Forwarded`, `X-Forwarded-For/-Proto/-Host` and `via` added.
pub fn request(
    buffer: &[u8],
    limits: HeadLimits,
    forwarding: &Forwarding,
    trust_forwarded: bool,
    via: &[u8],
    out: &mut Vec<u8>,
) -> Request {
    // Uninitialised: filling 64 fields first costs a request more than parsing its few.
    let mut fields =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let scan::Head {
        line,
        length,
        fields: headers,
        canonical,
    } = match scan::request(buffer, &mut fields) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => return Request::Partial,
        // Too many fields for the stack array: hyper, which reads up to the configured limit,
        // decides. Another version than 1.x: perhaps HTTP/2's preface, which hyper takes.
        Err(httparse::Error::TooManyHeaders | httparse::Error::Version) => return Request::Defer,
        Err(_) => return Request::Malformed,
    };
    // Near a limit, hyper decides (431).
    if headers.len() >= limits.headers || length >= limits.bytes || line.minor_version != 1 {
        return Request::Defer;
    }
    let (method_text, target) = (line.method, line.target);
    let Ok(method) = Method::from_bytes(method_text.as_bytes()) else {
        return Request::Defer;
    };
    if method == Method::CONNECT
        || !target.starts_with('/')
        || target.len() > 8 * 1024
        || !line.plain_target
    {
        return Request::Defer;
    }
    let path = &target[..line.path_end];
    // A path to normalize (or to refuse) is the pipeline's, as on hyper's path.
    let mut pipeline = !(line.plain_path || matches!(path::normalize(path), Ok(None)));
    let (mut host, mut body, mut close) = (None, None, false);
    let (mut chunked, mut expect_continue, mut cache_fields) = (false, false, false);
    let (mut upgrade, mut connection_upgrade) = (None, false);
    // Each field's kind, told once for both passes.
    let mut kinds = [Field::Other; MAX_HEADERS];
    let mut drops_any = false;
    for (field, slot) in headers.iter().zip(&mut kinds) {
        *slot = Field::of(field.name);
        drops_any |= slot.is_dropped_from_requests();
        match *slot {
            Field::Host => {
                if host.is_some() || !is_host(field.value) {
                    return Request::Defer;
                }
                host = Some(field.value);
            }
            Field::ContentLength => match decimal(field.value) {
                Some(length) if body.is_none() => body = Some(length),
                _ => return Request::Defer,
            },
            Field::Connection => {
                let tokens = connection_tokens(field.value);
                close |= tokens.close;
                connection_upgrade |= tokens.upgrade;
                pipeline |= tokens.names_others;
            }
            Field::Upgrade if upgrade.is_none() => upgrade = Some(field.value),
            Field::TransferEncoding if !chunked && field.value.eq_ignore_ascii_case(b"chunked") => {
                chunked = true
            }
            Field::Expect
                if !expect_continue && field.value.eq_ignore_ascii_case(b"100-continue") =>
            {
                expect_continue = true
            }
            Field::TransferEncoding | Field::Upgrade | Field::Expect => return Request::Defer,
            // Trace context gets its span from the trace-context step of the pipeline.
            Field::Via | Field::Traceparent | Field::Explain => pipeline = true,
            Field::Forwarding if trust_forwarded => pipeline = true,
            Field::Conditional => cache_fields = true,
            _ => {}
        }
    }
    // A length beside a coding: hyper reads by the chunks and closes after (RFC 9112 §6.3).
    // A chunked GET or HEAD: rare, left to the pipeline, which frames its body for hyper's
    // client (it would send a GET or HEAD of unknown length without one).
    let (Some(host), false) = (host, chunked && body.is_some()) else {
        return Request::Defer;
    };
    pipeline |= chunked && (method == Method::GET || method == Method::HEAD);
    // An h2c offer is the pipeline's, which drops it; anything else short of a plain upgrade
    // request is hyper's to judge.
    pipeline |= upgrade.is_some_and(crate::http::upgrade::offers_h2c);
    let upgrading = upgrade.is_some() || connection_upgrade;
    if upgrading
        && (upgrade.is_none()
            || !connection_upgrade
            || method != Method::GET
            || chunked
            || expect_continue
            || body.is_some_and(|length| length > 0))
    {
        return Request::Defer;
    }
    out.clear();
    let name = match host.first() {
        // An IPv6 literal: up to and including the closing bracket.
        Some(b'[') => host
            .iter()
            .position(|&b| b == b']')
            .map_or(host.len(), |end| end + 1),
        _ => host.iter().rposition(|&b| b == b':').unwrap_or(host.len()),
    };
    let ready = RequestHead {
        length,
        method,
        path: range_in(buffer, path.as_bytes()),
        target: range_in(buffer, target.as_bytes()),
        host: range_in(buffer, &host[..name]),
        body: body.unwrap_or(0),
        chunked,
        expect_continue,
        upgrade: upgrading,
        close,
        pipeline,
        cache_fields,
    };
    if pipeline {
        return Request::Ready(ready);
    }
    let mut lines = Lines::new(buffer, out);
    // The request line as it came when it is already the one to send.
    let line_end = method_text.len() + 1 + target.len() + " HTTP/1.1\r\n".len();
    let start = &buffer[..line_end.min(buffer.len())];
    if start.ends_with(b" HTTP/1.1\r\n") && start[method_text.len()] == b' ' {
        lines.run = 0..line_end;
    } else {
        let out = lines.out();
        for part in [
            method_text.as_bytes(),
            b" ",
            target.as_bytes(),
            b" HTTP/1.1\r\n",
        ] {
            out.extend_from_slice(part);
        }
    }
    if canonical && !drops_any {
        // Every line as it came, in one copy with the request line's.
        lines.copy(line_end..length - 2);
    } else {
        for (field, &kind) in headers.iter().zip(&kinds) {
            if !kind.is_dropped_from_requests() {
                lines.push(field.name, field.value);
            }
        }
    }
    let out = lines.out();
    for part in [
        forwarding.before_host.as_bytes(),
        host,
        forwarding.between_hosts.as_bytes(),
        host,
        b"\r\nvia: ",
        via,
        b"\r\n",
    ] {
        out.extend_from_slice(part);
    }
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if let Some(protocols) = upgrade {
        out.extend_from_slice(b"upgrade: ");
        out.extend_from_slice(protocols);
        out.extend_from_slice(b"\r\nconnection: upgrade\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Request::Ready(ready)
}

/// Header lines copied from a parsed head into a rewritten one. A line the head holds as
/// `name: value` CRLF is that same text, so adjacent ones go in one copy.
struct Lines<'a> {
    source: &'a [u8],
    out: &'a mut Vec<u8>,
    /// Source bytes to copy next, not yet copied.
    run: Range<usize>,
}

impl<'a> Lines<'a> {
    fn new(source: &'a [u8], out: &'a mut Vec<u8>) -> Self {
        Lines {
            source,
            out,
            run: 0..0,
        }
    }

    #[inline]
    fn push(&mut self, name: &str, value: &[u8]) {
        let name_at = range_in(self.source, name.as_bytes());
        let value_at = range_in(self.source, value);
        let byte = |at: usize| self.source.get(at).copied();
        let plain = value_at.start == name_at.end + 2
            && (byte(name_at.end), byte(name_at.end + 1)) == (Some(b':'), Some(b' '))
            && (byte(value_at.end), byte(value_at.end + 1)) == (Some(b'\r'), Some(b'\n'));
        if plain {
            self.copy(name_at.start..value_at.end + 2);
        } else {
            let out = self.out();
            for part in [name.as_bytes(), b": ", value, b"\r\n"] {
                out.extend_from_slice(part);
            }
        }
    }

    /// Copies the source's `lines` as they are: with the run before them when they follow it.
    fn copy(&mut self, lines: Range<usize>) {
        if self.run.end == lines.start {
            self.run.end = lines.end;
        } else {
            self.out();
            self.run = lines;
        }
    }

    /// The rewritten head so far, for text of one's own.
    fn out(&mut self) -> &mut Vec<u8> {
        let run = std::mem::replace(&mut self.run, 0..0);
        self.out.extend_from_slice(&self.source[run]);
        self.out
    }
}

/// How a response body ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body (HEAD, 204, 304).
    Empty,
    Length(u64),
    Chunked,
    /// At the backend's close: relayed as chunks to a client that stays, else as it comes,
    /// the client connection closing after it.
    Close,
    /// A 101 to a request that asked for it: the bytes after it are the new protocol's.
    Switched,
}

/// What the start of an upstream's buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Response {
    Partial,
    /// An informational (1xx) head of this length, to skip.
    Interim(usize),
    /// A head with framing no peer agrees on (two lengths, a coding other than chunked alone
    /// or twice), or not HTTP at all: 502.
    Bad,
    /// `101 Switching Protocols` to a request that did not ask for it: 502.
    Switched,
    Ready(ResponseHead),
}

#[derive(Debug, PartialEq, Eq)]
pub struct ResponseHead {
    pub length: usize,
    pub status: u16,
    pub framing: Framing,
    /// The upstream connection may carry another request after this one.
    pub reusable: bool,
    /// It has a `Date` field (else [`super::date`] adds one).
    pub dated: bool,
    /// It has a `Retry-After` field: the backend says when to ask again, so the answer is not
    /// retried elsewhere.
    pub retry_after: bool,
}

/// The bytes an answer's heads may take before its final head is in hand, as both HTTP/1
/// readers of answers (the fast path's and the pipeline's client) judge them: the interim
/// (1xx) heads skipped count toward the limit too, so endless ones cannot hold a request.
pub struct HeadBytes {
    limit: usize,
    interim: usize,
}

impl HeadBytes {
    pub fn new(limit: usize) -> Self {
        HeadBytes { limit, interim: 0 }
    }

    /// Counts an interim head of `length` bytes, skipped.
    pub fn skip(&mut self, length: usize) {
        self.interim += length;
    }

    /// Whether any interim head came.
    pub fn skipped_any(&self) -> bool {
        self.interim > 0
    }

    /// Whether a final head of `length` bytes is within the limit.
    pub fn fits(&self, length: usize) -> bool {
        self.interim + length <= self.limit
    }

    /// Whether a head not complete in `buffered` bytes may still end within the limit: only
    /// then is more read. At the limit it cannot (its end is still to come).
    pub fn may_grow(&self, buffered: usize) -> bool {
        self.interim + buffered < self.limit
    }
}

/// A response head read from the start of a buffer: what decides its framing and reuse, and
/// its fields, for the own engine's rewrite ([`response`]) and for the pipeline's HTTP/1
/// client ([`super::client`]) alike.
pub struct ReadResponse<'b, 'f> {
    pub head: ResponseHead,
    pub fields: &'f [httparse::Header<'b>],
    /// Each field's kind, told once (past the stack's room, told again).
    kinds: [Field; MAX_HEADERS],
    /// How many field names `Connection` gives ([`named_by_connection`]): hop-by-hop too.
    named_count: usize,
    existing_via: Option<&'b [u8]>,
    protocols: Option<&'b [u8]>,
    chunked: bool,
    coded: bool,
    /// Where the `\n` that ends the status line is.
    newline: usize,
    /// See [`scan::Head::canonical`].
    canonical: bool,
}

/// The most fields an answer's `Connection` may name: past it the answer is [`Response::Bad`].
const MOST_NAMED_BY_CONNECTION: usize = 16;

/// The fields a `Connection` value names as hop-by-hop: its tokens but `close`, `keep-alive`
/// and the framing fields (which the framing rules handle).
fn named_by_connection(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|token| {
            !token.is_empty()
                && !["close", "keep-alive", "content-length", "transfer-encoding"]
                    .iter()
                    .any(|kept| token.eq_ignore_ascii_case(kept.as_bytes()))
        })
}

/// Reads the response head at the start of `buffer` into `fields` (`many` when it has more
/// than they hold and `headers_allowed` lets it): [`Response::Ready`] is never returned as an
/// error, every other outcome is. More than `headers_allowed` fields make it
/// [`Response::Bad`]. Inlined: its answer is large, and moved out of a call costs a request
/// a copy of it.
#[inline(always)]
pub fn read_response<'b, 'f>(
    buffer: &'b [u8],
    head_request: bool,
    upgrading: bool,
    headers_allowed: usize,
    fields: &'f mut [std::mem::MaybeUninit<httparse::Header<'b>>],
    many: &'f mut Vec<httparse::Header<'b>>,
) -> Result<ReadResponse<'b, 'f>, Response> {
    let scan::Head {
        line,
        length,
        fields: headers,
        canonical,
    } = match scan::response(buffer, fields, many, headers_allowed) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => return Err(Response::Partial),
        Err(_) => return Err(Response::Bad),
    };
    if headers.len() > headers_allowed {
        return Err(Response::Bad);
    }
    let (version, status, newline) = (line.minor_version, line.code, line.newline);
    let switched = status == 101 && upgrading;
    if (100..200).contains(&status) && !switched {
        return Err(if status == 101 {
            Response::Switched
        } else {
            Response::Interim(length)
        });
    }
    let (mut content_length, mut chunked, mut coded) = (None, false, false);
    let mut reusable = version == 1;
    let mut existing_via = None;
    let mut dated = false;
    let mut retry_after = false;
    let mut protocols = None;
    let mut named_count = 0;
    let mut kinds = [Field::Other; MAX_HEADERS];
    for (field, index) in headers.iter().zip(0..) {
        let kind = Field::of(field.name);
        if let Some(slot) = kinds.get_mut(index) {
            *slot = kind;
        }
        let value = field.value;
        match kind {
            Field::ContentLength => {
                let Some(n) = decimal(value) else {
                    return Err(Response::Bad);
                };
                if content_length.is_some_and(|before| before != n) {
                    return Err(Response::Bad);
                }
                content_length = Some(n);
            }
            Field::TransferEncoding => {
                // Only a final `chunked` frames the body; otherwise it runs to the close
                // (RFC 9112 §6.3).
                let last = value
                    .rsplit(|&b| b == b',')
                    .next()
                    .unwrap_or(b"")
                    .trim_ascii();
                chunked = last.eq_ignore_ascii_case(b"chunked");
                coded = true;
            }
            Field::Connection => {
                let mut tokens = value.split(|&b| b == b',').map(<[u8]>::trim_ascii);
                if tokens.any(|token| token.eq_ignore_ascii_case(b"close")) {
                    reusable = false;
                }
                named_count += named_by_connection(value).count();
                if named_count > MOST_NAMED_BY_CONNECTION {
                    return Err(Response::Bad);
                }
            }
            Field::Via => existing_via = Some(value),
            Field::Date => dated = true,
            Field::RetryAfter => retry_after = true,
            Field::Upgrade => protocols = Some(value),
            _ => {}
        }
    }
    let framing = if switched {
        reusable = false;
        Framing::Switched
    } else if head_request || status == 204 || status == 304 {
        Framing::Empty
    } else if chunked {
        Framing::Chunked
    } else if let (Some(n), false) = (content_length, coded) {
        Framing::Length(n)
    } else {
        reusable = false;
        Framing::Close
    };
    Ok(ReadResponse {
        head: ResponseHead {
            length,
            status,
            framing,
            reusable,
            dated,
            retry_after,
        },
        fields: headers,
        kinds,
        named_count,
        existing_via,
        protocols,
        chunked,
        coded,
        newline,
        canonical,
    })
}

/// Parses the response head at the start of `buffer` and writes the client's version into
/// `out`: hop-by-hop headers dropped (but `Transfer-Encoding: chunked`, the coding the body is
/// framed anew in), framing fields dropped from a 204 or 304, `via` added, `alt-svc` too unless
/// empty (the backend's own then dropped), `Connection: close` when `closing`, else
/// `Transfer-Encoding: chunked` when the body ends at the close. More than `headers_allowed`
/// fields make it [`Response::Bad`].
#[allow(clippy::too_many_arguments)]
pub fn response(
    buffer: &[u8],
    head_request: bool,
    closing: bool,
    upgrading: bool,
    via: &[u8],
    alt_svc: &[u8],
    headers_allowed: usize,
    out: &mut Vec<u8>,
) -> Response {
    // Fields past the stack's room, for a limit above it: the rare answer that needs them.
    let mut many = Vec::new();
    // Uninitialised: filling 64 fields first costs an answer more than parsing its few.
    let mut fields =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let read = match read_response(
        buffer,
        head_request,
        upgrading,
        headers_allowed,
        &mut fields,
        &mut many,
    ) {
        Ok(read) => read,
        Err(other) => return other,
    };
    let ReadResponse {
        head,
        fields: headers,
        kinds,
        named_count,
        existing_via,
        protocols,
        chunked,
        coded,
        newline,
        canonical,
    } = read;
    let status = head.status;
    out.clear();
    let status_line = buffer[..newline].trim_ascii_end();
    let mut lines = Lines::new(buffer, out);
    let crlf = status_line.len()..status_line.len() + 2;
    if buffer.starts_with(b"HTTP/1.1 ") && buffer.get(crlf.clone()) == Some(b"\r\n") {
        lines.run = 0..crlf.end;
    } else {
        let out = lines.out();
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(status_line.get(9..).unwrap_or(b"502"));
        out.extend_from_slice(b"\r\n");
    }
    // No body follows a 204 or a 304, and no field says how long it is (RFC 9110 §8.6: never
    // on a 204; hyper's server drops it on a 304 too).
    let bodiless = status == 204 || status == 304;
    // Fields dropped for their kind (an `alt-svc` of the backend's is dropped too when the
    // listener writes its own, and those `Connection` names).
    let dropped = |kind: Field| match kind {
        Field::Via => true,
        // No body follows an answer to HEAD: its coding is not relayed, as hyper's
        // server does not (its length is: it says how long the GET's body would be).
        Field::TransferEncoding => !chunked || head_request || bodiless,
        // A length beside a coding is the coding's (RFC 9112 §6.3): it goes.
        Field::ContentLength => coded || bodiless,
        kind => kind.is_hop_by_hop(),
    };
    let all_kept = alt_svc.is_empty()
        && named_count == 0
        && kinds
            .get(..headers.len())
            .is_some_and(|kinds| !kinds.iter().any(|&kind| dropped(kind)));
    if canonical && all_kept {
        // Every line as it came, in one copy (with the status line's, when it is kept too).
        lines.copy(newline + 1..head.length - 2);
    } else {
        // Read once: few answers have any.
        let named: Vec<&[u8]> = match named_count {
            0 => Vec::new(),
            _ => headers
                .iter()
                .filter(|field| Field::of(field.name) == Field::Connection)
                .flat_map(|connection| named_by_connection(connection.value))
                .collect(),
        };
        for (field, index) in headers.iter().zip(0..) {
            let kind = kinds
                .get(index)
                .copied()
                .unwrap_or_else(|| Field::of(field.name));
            let withdrawn = (!alt_svc.is_empty() && field.name.eq_ignore_ascii_case("alt-svc"))
                || named
                    .iter()
                    .any(|named| named.eq_ignore_ascii_case(field.name.as_bytes()));
            if !(dropped(kind) || withdrawn) {
                lines.push(field.name, field.value);
            }
        }
    }
    let out = lines.out();
    out.extend_from_slice(b"via: ");
    if let Some(existing) = existing_via {
        out.extend_from_slice(existing);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(via);
    if !alt_svc.is_empty() {
        out.extend_from_slice(b"\r\nalt-svc: ");
        out.extend_from_slice(alt_svc);
    }
    if let (Framing::Switched, Some(protocols)) = (head.framing, protocols) {
        out.extend_from_slice(b"\r\nupgrade: ");
        out.extend_from_slice(protocols);
        out.extend_from_slice(b"\r\nconnection: upgrade");
    } else if closing {
        out.extend_from_slice(b"\r\nconnection: close");
    } else if head.framing == Framing::Close {
        out.extend_from_slice(b"\r\ntransfer-encoding: chunked");
    }
    out.extend_from_slice(b"\r\n\r\n");
    Response::Ready(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_a_cache_or_file_answer_reads_is_told_in_any_case() {
        for name in &CACHE_FIELDS {
            let upper = name.as_str().to_ascii_uppercase();
            assert!(Field::of(name.as_str()) == Field::Conditional, "{name}");
            assert!(Field::of(&upper) == Field::Conditional, "{upper}");
        }
        assert!(Field::of("if-none-matc") == Field::Other);
    }

    #[test]
    fn a_path_is_replaced_in_the_request_line_with_the_query_kept() {
        let mut head = b"GET /api/takip?x=1 HTTP/1.1\r\nhost: a\r\n\r\n".to_vec();
        replace_path(&mut head, b"/takip");
        assert_eq!(head, b"GET /takip?x=1 HTTP/1.1\r\nhost: a\r\n\r\n");
        let mut head = b"DELETE /a HTTP/1.1\r\n\r\n".to_vec();
        replace_path(&mut head, b"/v2/uzun/yol");
        assert_eq!(head, b"DELETE /v2/uzun/yol HTTP/1.1\r\n\r\n");
    }

    fn forwarding() -> Forwarding {
        Forwarding::new("127.0.0.9:4000".parse().unwrap(), "http")
    }

    fn head(raw: &str) -> (Request, String) {
        let mut out = Vec::new();
        let parsed = request(
            raw.as_bytes(),
            HeadLimits::default(),
            &forwarding(),
            false,
            b"1.1 trafik",
            &mut out,
        );
        (parsed, String::from_utf8(out).unwrap())
    }

    #[test]
    fn a_plain_get_is_rewritten_for_the_next_hop() {
        let (parsed, out) = head(
            "GET /takip?no=1 HTTP/1.1\r\nHost: kargo.test:8080\r\nConnection: keep-alive\r\nX-Forwarded-For: 6.6.6.6\r\nAccept: */*\r\n\r\n",
        );
        let Request::Ready(head) = parsed else {
            panic!("{parsed:?}")
        };
        assert_eq!(head.method, Method::GET);
        assert_eq!(head.path, 4..10);
        assert!(!head.close);
        assert_eq!(
            out,
            "GET /takip?no=1 HTTP/1.1\r\nHost: kargo.test:8080\r\nAccept: */*\r\nforwarded: for=127.0.0.9;proto=http;host=\"kargo.test:8080\"\r\nx-forwarded-for: 127.0.0.9\r\nx-forwarded-proto: http\r\nx-forwarded-host: kargo.test:8080\r\nvia: 1.1 trafik\r\n\r\n"
        );
    }

    #[test]
    fn lines_copied_as_they_came_read_as_lines_written_anew() {
        // Plain lines, lines without the space or with more, and dropped ones in between.
        let (parsed, out) = head(
            "GET /a HTTP/1.1\r\nHost: h\r\nA: 1\r\nB:2\r\nC:  3\r\nConnection: close\r\nD: 4\r\nE: 5\r\n\r\n",
        );
        assert!(matches!(
            parsed,
            Request::Ready(RequestHead { close: true, .. })
        ));
        assert_eq!(
            out,
            "GET /a HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nforwarded: for=127.0.0.9;proto=http;host=\"h\"\r\nx-forwarded-for: 127.0.0.9\r\nx-forwarded-proto: http\r\nx-forwarded-host: h\r\nvia: 1.1 trafik\r\n\r\n"
        );
        let v6 = Forwarding::new("[2001:db8::7]:4000".parse().unwrap(), "https");
        let mut out = Vec::new();
        let raw = b"DELETE /b?c=d HTTP/1.1\r\nHost: [2001:db8::1]:443\r\n\r\n";
        let parsed = request(raw, HeadLimits::default(), &v6, false, b"1.1 t", &mut out);
        assert!(matches!(parsed, Request::Ready(_)));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "DELETE /b?c=d HTTP/1.1\r\nHost: [2001:db8::1]:443\r\nforwarded: for=\"[2001:db8::7]\";proto=https;host=\"[2001:db8::1]:443\"\r\nx-forwarded-for: 2001:db8::7\r\nx-forwarded-proto: https\r\nx-forwarded-host: [2001:db8::1]:443\r\nvia: 1.1 t\r\n\r\n"
        );
        let (_, out) = answer(
            "HTTP/1.1 404 Not Found  \r\nA: 1\r\nKeep-Alive: x\r\nB:2\r\nContent-Length: 0\r\n\r\n",
            false,
        );
        assert_eq!(
            out,
            "HTTP/1.1 404 Not Found\r\nA: 1\r\nB: 2\r\nContent-Length: 0\r\nvia: 1.1 trafik\r\n\r\n"
        );
        let (_, out) = answer("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false);
        assert_eq!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nvia: 1.1 trafik\r\n\r\n"
        );
    }

    #[test]
    fn doubtful_heads_are_left_to_hyper() {
        for raw in [
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n",
            "GET http://a/ HTTP/1.1\r\nHost: b\r\n\r\n",
            "GET / HTTP/1.0\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: a\r\nUpgrade: b\r\nConnection: upgrade\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: a\r\nConnection: upgrade\r\nContent-Length: 1\r\n\r\nx",
        ] {
            assert_eq!(head(raw).0, Request::Defer, "{raw:?}");
        }
        assert_eq!(head("GET / HTTP/1.1\r\nHost: a\r\n").0, Request::Partial);
    }

    #[test]
    fn heads_that_are_not_http_are_malformed_and_hyper_keeps_what_it_may_take() {
        for raw in [
            "GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n folded\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\rX: 1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nBad Name: 1\r\n\r\n",
            "G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            assert_eq!(head(raw).0, Request::Malformed, "{raw:?}");
        }
        // HTTP/2's preface (h2c with prior knowledge) and a head of more fields than the stack
        // array holds stay hyper's.
        assert_eq!(head("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").0, Request::Defer);
        let many: String = (0..MAX_HEADERS + 1)
            .map(|n| format!("X-{n}: 1\r\n"))
            .collect();
        let raw = format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n");
        assert_eq!(head(&raw).0, Request::Defer);
    }

    #[test]
    fn valid_heads_the_fast_path_does_not_rewrite_are_the_pipelines() {
        for raw in [
            "GET /a/../b HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: a\r\nVia: 1.1 onceki\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: a\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: a\r\nConnection: x-secret\r\nX-Secret: 1\r\n\r\n",
            "GET /a HTTP/1.1\r\nHost: a\r\nX-Trafik-Explain: 1\r\n\r\n",
        ] {
            let (parsed, out) = head(raw);
            let Request::Ready(ready) = parsed else {
                panic!("{raw:?}: {parsed:?}")
            };
            assert!(ready.pipeline, "{raw:?}");
            assert!(out.is_empty(), "nothing rewritten for {raw:?}: {out}");
        }
        let (Request::Ready(plain), _) = head("GET /a HTTP/1.1\r\nHost: a\r\n\r\n") else {
            panic!("a plain head is the fast path's")
        };
        assert!(!plain.pipeline);
    }

    #[test]
    fn a_chunked_body_and_a_wait_for_100_continue_stay_on_the_fast_path() {
        let (parsed, out) = head(
            "POST /olay HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
        );
        let Request::Ready(ready) = parsed else {
            panic!("{parsed:?}")
        };
        assert!(ready.chunked && ready.expect_continue);
        assert_eq!(ready.body, 0);
        assert!(out.contains("Expect: 100-continue\r\n"), "{out}");
        assert!(!out.contains("Transfer-Encoding"), "{out}");
        assert!(out.ends_with("transfer-encoding: chunked\r\n\r\n"), "{out}");
        for doubtful in [
            "Transfer-Encoding: gzip\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
            "Expect: 100-continue\r\nExpect: 100-continue\r\n",
            "Expect: something-else\r\n",
        ] {
            let raw = format!("POST / HTTP/1.1\r\nHost: a\r\n{doubtful}\r\n");
            assert_eq!(head(&raw).0, Request::Defer, "{raw:?}");
        }
    }

    fn answer(raw: &str, head_request: bool) -> (Response, String) {
        let mut out = Vec::new();
        let parsed = response(
            raw.as_bytes(),
            head_request,
            false,
            false,
            b"1.1 trafik",
            b"",
            MAX_HEADERS,
            &mut out,
        );
        (parsed, String::from_utf8(out).unwrap())
    }

    /// `Field::of` against `eq_ignore_ascii_case`: every spelling of a known name in any case
    /// is that field, and a name one token character away from it is not (the bit trick of
    /// `is_lowercase` must never take a neighbour for the name).
    #[test]
    fn fields_are_told_apart_in_any_case_and_never_by_a_neighbour() {
        let known = [
            ("te", Field::OtherHop),
            ("via", Field::Via),
            ("host", Field::Host),
            ("date", Field::Date),
            ("expect", Field::Expect),
            ("upgrade", Field::Upgrade),
            ("trailer", Field::OtherHop),
            ("forwarded", Field::Forwarding),
            ("connection", Field::Connection),
            ("keep-alive", Field::OtherHop),
            ("traceparent", Field::Traceparent),
            ("retry-after", Field::RetryAfter),
            ("content-length", Field::ContentLength),
            ("http2-settings", Field::OtherHop),
            ("x-forwarded-for", Field::Forwarding),
            ("x-forwarded-host", Field::Forwarding),
            ("proxy-connection", Field::OtherHop),
            ("transfer-encoding", Field::TransferEncoding),
            ("x-forwarded-proto", Field::Forwarding),
            ("proxy-authenticate", Field::OtherHop),
            ("proxy-authorization", Field::OtherHop),
        ];
        // RFC 9110 §5.6.2's tchar: what httparse lets through in a name.
        let token =
            (0u8..=127).filter(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b));
        for (name, field) in known {
            assert_eq!(Field::of(name), field, "{name}");
            assert_eq!(Field::of(&name.to_ascii_uppercase()), field, "{name}");
            for at in 0..name.len() {
                for byte in token.clone() {
                    let mut other = name.as_bytes().to_vec();
                    other[at] = byte;
                    let other = String::from_utf8(other).unwrap();
                    let expected = known
                        .iter()
                        .find(|(known, _)| known.eq_ignore_ascii_case(&other))
                        .map_or(Field::Other, |(_, field)| *field);
                    assert_eq!(Field::of(&other), expected, "{other}");
                }
            }
        }
    }

    /// Fields an answer's `Connection` names are hop-by-hop: dropped with it, in any case, in
    /// one field or several; the framing ones it names stay; more than 16 make it bad.
    #[test]
    fn fields_an_answer_names_in_connection_go_with_it() {
        let (_, out) = answer(
            "HTTP/1.1 200 OK\r\nConnection: X-A, keep-alive\r\nx-a: 1\r\nX-B: 2\r\n\
             connection: x-c, content-length\r\nX-C: 3\r\nContent-Length: 0\r\n\r\n",
            false,
        );
        assert_eq!(
            out,
            "HTTP/1.1 200 OK\r\nX-B: 2\r\nContent-Length: 0\r\nvia: 1.1 trafik\r\n\r\n"
        );
        let names = |count: usize| (0..count).map(|n| format!("x-{n}")).collect::<Vec<_>>();
        let head = |count: usize| {
            format!(
                "HTTP/1.1 200 OK\r\nConnection: {}\r\nContent-Length: 0\r\n\r\n",
                names(count).join(", ")
            )
        };
        assert!(matches!(answer(&head(16), false).0, Response::Ready(_)));
        assert_eq!(answer(&head(17), false).0, Response::Bad);
    }

    #[test]
    fn response_framing_and_rewriting() {
        let (parsed, out) = answer(
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=5\r\nVia: 1.0 edge\r\n\r\nhi",
            false,
        );
        assert_eq!(
            parsed,
            Response::Ready(ResponseHead {
                length: 76,
                status: 200,
                framing: Framing::Length(2),
                reusable: true,
                dated: false,
                retry_after: false,
            })
        );
        assert_eq!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nvia: 1.0 edge, 1.1 trafik\r\n\r\n"
        );
        let chunked = answer(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        );
        assert!(chunked.1.contains("Transfer-Encoding: chunked\r\n"));
        assert!(matches!(
            chunked.0,
            Response::Ready(ResponseHead {
                framing: Framing::Chunked,
                ..
            })
        ));
        let closed = answer("HTTP/1.0 200 OK\r\n\r\n", false);
        assert!(closed.1.ends_with("transfer-encoding: chunked\r\n\r\n"));
        assert!(matches!(
            closed.0,
            Response::Ready(ResponseHead {
                framing: Framing::Close,
                reusable: false,
                ..
            })
        ));
        let two_lengths = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(answer(two_lengths, false).0, Response::Bad);
        let unknown_coding = answer(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\n",
            false,
        );
        assert!(matches!(
            unknown_coding.0,
            Response::Ready(ResponseHead {
                framing: Framing::Close,
                ..
            })
        ));
        assert_eq!(
            answer("HTTP/1.1 100 Continue\r\n\r\n", false).0,
            Response::Interim(25)
        );
        for bodiless in [
            "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nX-A: 1\r\n\r\n",
            "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n",
        ] {
            let (parsed, out) = answer(bodiless, false);
            assert!(
                matches!(
                    parsed,
                    Response::Ready(ResponseHead {
                        framing: Framing::Empty,
                        ..
                    })
                ),
                "{parsed:?}"
            );
            assert!(
                out.ends_with("\r\nX-A: 1\r\nvia: 1.1 trafik\r\n\r\n"),
                "{out}"
            );
            assert!(!out.contains("Content-Length") && !out.contains("Transfer-Encoding"));
        }
        // An answer to HEAD names its length, as the one to GET would.
        let (_, out) = answer("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true);
        assert!(out.contains("Content-Length: 5\r\n"), "{out}");
    }
}
