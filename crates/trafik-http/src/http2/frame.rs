//! HTTP/2 frames as trafik writes them (RFC 9113 §4, §6), and the frame header it reads.
//! Header blocks are written by [`HeaderBlock`] without HPACK's dynamic table or Huffman
//! coding: every field a literal that is never indexed (RFC 7541 §6.2.2), the pseudo-fields
//! by their static-table index. That costs a few bytes on a backend's link and spares the
//! table's upkeep and Huffman's per-byte work on every request (haproxy's encoder does the same).

use bytes::{BufMut, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};

/// What opens an HTTP/2 connection, before the client's SETTINGS (RFC 9113 §3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// A frame header's length.
pub const HEADER_LEN: usize = 9;
/// The largest frame payload until the peer's SETTINGS allow more, and the largest trafik
/// takes (it never raises its own `SETTINGS_MAX_FRAME_SIZE`).
pub const DEFAULT_MAX_FRAME: usize = 16_384;
/// A stream's and the connection's flow-control window until SETTINGS or WINDOW_UPDATE
/// change it (RFC 9113 §6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;
/// The largest a window may grow (RFC 9113 §6.9.1).
pub const MAX_WINDOW: i64 = (1 << 31) - 1;
/// The largest stream id (31 bits, RFC 9113 §5.1.1).
pub const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// Frame types (RFC 9113 §6).
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags (RFC 9113 §6).
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS parameters (RFC 9113 §6.5.2).
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// A frame's header as read.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub length: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Header {
    /// Reads the first [`HEADER_LEN`] bytes of `bytes`, which holds at least that many.
    pub fn parse(bytes: &[u8]) -> Header {
        Header {
            length: usize::from(bytes[0]) << 16
                | usize::from(bytes[1]) << 8
                | usize::from(bytes[2]),
            kind: bytes[3],
            flags: bytes[4],
            // The reserved bit is ignored (RFC 9113 §4.1).
            stream: be_u31(&bytes[5..]),
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// The big-endian 32-bit word `bytes` starts with (at least 4 bytes): how HTTP/2 writes stream
/// ids, error codes, window increments and setting values.
pub fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// The 31-bit field `bytes` starts with, its reserved first bit ignored: stream ids and window
/// increments.
pub fn be_u31(bytes: &[u8]) -> u32 {
    be_u32(bytes) & MAX_STREAM_ID
}

/// Writes a frame header for a payload of `length` bytes.
pub fn header(out: &mut BytesMut, length: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(length < 1 << 24);
    out.reserve(HEADER_LEN + length);
    out.put_uint(length as u64, 3);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream);
}

pub fn settings(out: &mut BytesMut, values: &[(u16, u32)]) {
    header(out, values.len() * 6, kind::SETTINGS, 0, 0);
    for &(id, value) in values {
        out.put_u16(id);
        out.put_u32(value);
    }
}

pub fn settings_ack(out: &mut BytesMut) {
    header(out, 0, kind::SETTINGS, flag::ACK, 0);
}

pub fn ping_ack(out: &mut BytesMut, payload: &[u8]) {
    header(out, 8, kind::PING, flag::ACK, 0);
    out.put_slice(payload);
}

pub fn window_update(out: &mut BytesMut, stream: u32, increment: u32) {
    header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.put_u32(increment);
}

pub fn reset(out: &mut BytesMut, stream: u32, reason: h2::Reason) {
    header(out, 4, kind::RST_STREAM, 0, stream);
    out.put_u32(reason.into());
}

pub fn goaway(out: &mut BytesMut, last_stream: u32, reason: h2::Reason) {
    header(out, 8, kind::GOAWAY, 0, 0);
    out.put_u32(last_stream);
    out.put_u32(reason.into());
}

pub fn data(out: &mut BytesMut, stream: u32, payload: &[u8], end: bool) {
    let flags = if end { flag::END_STREAM } else { 0 };
    header(out, payload.len(), kind::DATA, flags, stream);
    out.put_slice(payload);
}

/// Writes the header block in `block` as a HEADERS frame, followed by CONTINUATION frames
/// when it is larger than `max_frame`.
pub fn headers(out: &mut BytesMut, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let mut pieces = block.chunks(max_frame.max(1));
    let first = pieces.next().unwrap_or_default();
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    let mut kind = kind::HEADERS;
    let mut piece = first;
    loop {
        let next = pieces.next();
        if next.is_none() {
            flags |= flag::END_HEADERS;
        }
        header(out, piece.len(), kind, flags, stream);
        out.put_slice(piece);
        match next {
            Some(next) => piece = next,
            None => return,
        }
        kind = kind::CONTINUATION;
        flags = 0;
    }
}

/// A header block being written (RFC 7541), reused from request to request.
#[derive(Default)]
pub struct HeaderBlock {
    bytes: Vec<u8>,
    /// The peer's decoder allowed a table smaller than HPACK's default since the last block:
    /// the next one must say the table's size fits it (RFC 7541 §4.2).
    size_update: bool,
}

/// Static-table indexes (RFC 7541 Appendix A) of the fields a block starts with, and of the
/// fields a server adds.
mod index {
    pub const AUTHORITY: u8 = 1;
    pub const METHOD: u8 = 2;
    pub const METHOD_GET: u8 = 2;
    pub const METHOD_POST: u8 = 3;
    pub const PATH: u8 = 4;
    pub const PATH_ROOT: u8 = 4;
    pub const SCHEME: u8 = 6;
    pub const SCHEME_HTTP: u8 = 6;
    pub const SCHEME_HTTPS: u8 = 7;
    pub const STATUS: u8 = 8;
    pub const CONTENT_LENGTH: u8 = 28;
    pub const DATE: u8 = 33;

    /// The entry that is `:status` with this value, if one is.
    pub fn status(code: u16) -> Option<u8> {
        Some(match code {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => return None,
        })
    }
}

impl HeaderBlock {
    /// The peer's `SETTINGS_HEADER_TABLE_SIZE` said `size`.
    pub fn peer_table_size(&mut self, size: u32) {
        if size < 4096 {
            self.size_update = true;
        }
    }

    /// Starts a block: a table size update first when one is owed. trafik's blocks use no
    /// table, so a size of 0 fits whatever the peer allows (§6.3).
    fn start(&mut self) {
        self.bytes.clear();
        if std::mem::take(&mut self.size_update) {
            self.bytes.push(0x20);
        }
    }

    /// A request's block: its pseudo-fields (RFC 9113 §8.3.1), then its fields.
    pub fn request(
        &mut self,
        method: &Method,
        uri: &http::Uri,
        tls: bool,
        fields: &HeaderMap,
    ) -> &[u8] {
        self.start();
        match *method {
            Method::GET => self.indexed(index::METHOD_GET),
            Method::POST => self.indexed(index::METHOD_POST),
            _ => self.literal_with_name(index::METHOD, method.as_str().as_bytes()),
        }
        // CONNECT names only the authority (RFC 9113 §8.5).
        if *method != Method::CONNECT {
            match uri
                .scheme_str()
                .unwrap_or(if tls { "https" } else { "http" })
            {
                "http" => self.indexed(index::SCHEME_HTTP),
                "https" => self.indexed(index::SCHEME_HTTPS),
                other => self.literal_with_name(index::SCHEME, other.as_bytes()),
            }
            match uri.path_and_query().map_or("/", |path| path.as_str()) {
                "/" => self.indexed(index::PATH_ROOT),
                path => self.literal_with_name(index::PATH, path.as_bytes()),
            }
        }
        // The target's authority, else `Host`'s: the pipeline forwards every request in origin
        // form with `Host` (RFC 9113 §8.3.1), which `:authority` then replaces.
        let authority = uri
            .authority()
            .map(|authority| authority.as_str().as_bytes());
        let authority = authority.or_else(|| fields.get(header::HOST).map(|host| host.as_bytes()));
        if let Some(authority) = authority {
            self.literal_with_name(index::AUTHORITY, authority);
        }
        for (name, value) in fields {
            let replaced = *name == header::HOST && authority.is_some();
            if replaced || is_connection_specific(name, value) {
                continue;
            }
            self.field(name, value);
        }
        &self.bytes
    }

    /// An answer's block: its `:status`, its fields but those HTTP/2 forbids (an HTTP/1.1
    /// answer relayed may carry them), then the `date` and `content-length` given, each only
    /// when the fields have none (found as they are written: no lookup).
    pub fn response(
        &mut self,
        status: StatusCode,
        fields: &HeaderMap,
        date: Option<&[u8]>,
        length: Option<u64>,
    ) -> &[u8] {
        self.start();
        match index::status(status.as_u16()) {
            Some(entry) => self.indexed(entry),
            None => self.literal_with_name(index::STATUS, status.as_str().as_bytes()),
        }
        let (mut date, mut length) = (date, length);
        for (name, value) in fields {
            match *name {
                header::DATE => date = None,
                header::CONTENT_LENGTH => length = None,
                _ if is_connection_field(name) => continue,
                _ => {}
            }
            self.field(name, value);
        }
        if let Some(date) = date {
            self.literal_with_name(index::DATE, date);
        }
        if let Some(length) = length {
            self.literal_with_name(
                index::CONTENT_LENGTH,
                itoa::Buffer::new().format(length).as_bytes(),
            );
        }
        &self.bytes
    }

    /// A trailer section's block.
    pub fn trailers(&mut self, fields: &HeaderMap) -> &[u8] {
        self.start();
        for (name, value) in fields {
            self.field(name, value);
        }
        &self.bytes
    }

    /// A literal with a new name, never indexed (0x10) when the value says it is sensitive,
    /// else without indexing (0x00): neither enters a table.
    fn field(&mut self, name: &HeaderName, value: &HeaderValue) {
        self.bytes
            .push(if value.is_sensitive() { 0x10 } else { 0x00 });
        self.string(name.as_str().as_bytes());
        self.string(value.as_bytes());
    }

    fn indexed(&mut self, index: u8) {
        self.bytes.push(0x80 | index);
    }

    /// A literal without indexing (0x00) whose name is the static table's `index`.
    fn literal_with_name(&mut self, index: u8, value: &[u8]) {
        self.integer(usize::from(index), 4, 0x00);
        self.string(value);
    }

    /// A string without Huffman coding: its length (a 7-bit prefix integer), then its bytes.
    fn string(&mut self, value: &[u8]) {
        self.integer(value.len(), 7, 0x00);
        self.bytes.extend_from_slice(value);
    }

    /// An integer with an `prefix`-bit prefix in a first byte carrying `first` (RFC 7541 §5.1).
    fn integer(&mut self, value: usize, prefix: u32, first: u8) {
        let most = (1usize << prefix) - 1;
        if value < most {
            self.bytes.push(first | value as u8);
            return;
        }
        self.bytes.push(first | most as u8);
        let mut rest = value - most;
        while rest >= 128 {
            self.bytes.push((rest % 128) as u8 | 0x80);
            rest /= 128;
        }
        self.bytes.push(rest as u8);
    }
}

/// Fields about one HTTP/1.1 connection, which HTTP/2 forbids (RFC 9113 §8.2.2; `te` but for
/// `te: trailers`).
pub fn is_connection_field(name: &HeaderName) -> bool {
    // Compared as names, not text: a standard name never equals a custom one, at no cost.
    const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
    const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
    matches!(
        *name,
        header::CONNECTION | header::TRANSFER_ENCODING | header::UPGRADE | header::TE
    ) || *name == KEEP_ALIVE
        || *name == PROXY_CONNECTION
}

/// A field about one connection, as a request may not carry it in HTTP/2 (RFC 9113 §8.2.2):
/// a connection field, `te: trailers` excepted.
pub(super) fn is_connection_specific(name: &HeaderName, value: &HeaderValue) -> bool {
    is_connection_field(name) && !(*name == header::TE && value == "trailers")
}

#[cfg(test)]
mod tests {
    use super::super::hpack::Name;
    use super::*;

    /// Decodes `block` as a peer would (trafik's decoder is tested on the RFC's examples).
    fn decoded(block: &[u8]) -> Vec<(String, String)> {
        let mut decoder = super::super::hpack::Decoder::new(4096);
        let mut fields = Vec::new();
        decoder
            .decode(bytes::Bytes::copy_from_slice(block), |name, value| {
                let name = match name {
                    Name::Field(name) => name.as_str().to_owned(),
                    Name::Authority => ":authority".into(),
                    Name::Method => ":method".into(),
                    Name::Scheme => ":scheme".into(),
                    Name::Path => ":path".into(),
                    Name::Status => ":status".into(),
                    other => panic!("{other:?} in a block trafik writes"),
                };
                fields.push((name, String::from_utf8(value.to_vec()).unwrap()));
            })
            .unwrap();
        fields
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_request_block_reads_back_as_written() {
        let mut fields = HeaderMap::new();
        fields.insert("x-forwarded-for", HeaderValue::from_static("127.0.0.1"));
        fields.append("accept", HeaderValue::from_static("*/*"));
        let long = "v".repeat(300);
        fields.insert("x-long", HeaderValue::from_str(&long).unwrap());
        let uri: http::Uri = "http://example.test:8080/a/b?c=d".parse().unwrap();
        let mut block = HeaderBlock::default();
        let written = block.request(&Method::GET, &uri, false, &fields).to_vec();
        assert_eq!(
            decoded(&written),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/a/b?c=d"),
                (":authority", "example.test:8080"),
                ("x-forwarded-for", "127.0.0.1"),
                ("accept", "*/*"),
                ("x-long", &long),
            ])
        );
    }

    /// A request the pipeline forwards: origin form, its authority in `Host` (RFC 9113 §8.3.1),
    /// with fields about the HTTP/1.1 connection it came on (§8.2.2).
    #[test]
    fn host_becomes_the_authority_and_connection_fields_stay_behind() {
        let mut fields = HeaderMap::new();
        fields.insert(header::HOST, HeaderValue::from_static("kargo.test:8080"));
        fields.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        fields.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        fields.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        fields.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        fields.insert("proxy-connection", HeaderValue::from_static("close"));
        fields.insert(header::TE, HeaderValue::from_static("trailers"));
        fields.insert("accept", HeaderValue::from_static("*/*"));
        let uri: http::Uri = "/takip?no=7".parse().unwrap();
        let mut block = HeaderBlock::default();
        let written = block.request(&Method::POST, &uri, true, &fields).to_vec();
        assert_eq!(
            decoded(&written),
            pairs(&[
                (":method", "POST"),
                (":scheme", "https"),
                (":path", "/takip?no=7"),
                (":authority", "kargo.test:8080"),
                ("te", "trailers"),
                ("accept", "*/*"),
            ])
        );
        // Any other `te` is about the connection too.
        fields.insert(header::TE, HeaderValue::from_static("gzip"));
        let written = block.request(&Method::POST, &uri, true, &fields).to_vec();
        assert!(!decoded(&written).iter().any(|(name, _)| name == "te"));
    }

    #[test]
    fn methods_and_schemes_off_the_static_table_are_literals() {
        let uri: http::Uri = "/".parse().unwrap();
        let mut block = HeaderBlock::default();
        let written = block
            .request(&Method::DELETE, &uri, true, &HeaderMap::new())
            .to_vec();
        assert_eq!(
            decoded(&written),
            pairs(&[(":method", "DELETE"), (":scheme", "https"), (":path", "/")])
        );
        let connect: http::Uri = "example.test:443".parse().unwrap();
        let written = block
            .request(&Method::CONNECT, &connect, true, &HeaderMap::new())
            .to_vec();
        assert_eq!(
            decoded(&written),
            pairs(&[(":method", "CONNECT"), (":authority", "example.test:443")])
        );
    }

    #[test]
    fn an_answer_gets_a_date_and_length_only_when_it_has_none_and_loses_hop_by_hop_fields() {
        let mut block = HeaderBlock::default();
        let mut fields = HeaderMap::new();
        fields.insert("connection", HeaderValue::from_static("keep-alive"));
        fields.insert("x-kargo", HeaderValue::from_static("1"));
        let date = b"Fri, 04 Dec 2026 03:00:00 GMT";
        let written = block
            .response(StatusCode::IM_A_TEAPOT, &fields, Some(date), Some(5))
            .to_vec();
        assert_eq!(
            decoded(&written),
            pairs(&[
                (":status", "418"),
                ("x-kargo", "1"),
                ("date", "Fri, 04 Dec 2026 03:00:00 GMT"),
                ("content-length", "5"),
            ])
        );
        fields.insert("date", HeaderValue::from_static("then"));
        fields.insert("content-length", HeaderValue::from_static("7"));
        let written = block
            .response(StatusCode::OK, &fields, Some(date), Some(5))
            .to_vec();
        assert_eq!(
            decoded(&written),
            pairs(&[
                (":status", "200"),
                ("x-kargo", "1"),
                ("date", "then"),
                ("content-length", "7"),
            ])
        );
    }

    #[test]
    fn a_smaller_peer_table_is_acknowledged_at_the_next_block_only() {
        let mut block = HeaderBlock::default();
        block.peer_table_size(8192);
        let fields = HeaderMap::new();
        assert_eq!(
            block.response(StatusCode::OK, &fields, None, None),
            [0x88],
            "a larger table needs no update"
        );
        block.peer_table_size(0);
        let written = block.response(StatusCode::OK, &fields, None, None).to_vec();
        assert_eq!(written, [0x20, 0x88], "size 0, then `:status: 200`");
        let mut decoder = super::super::hpack::Decoder::new(4096);
        let mut names = Vec::new();
        decoder
            .decode(bytes::Bytes::from(written), |name, _| names.push(name))
            .unwrap();
        assert_eq!(names, [Name::Status]);
        assert_eq!(block.trailers(&fields), [] as [u8; 0], "said once");
    }

    #[test]
    fn a_block_larger_than_a_frame_goes_on_in_continuation_frames() {
        let block = vec![0x82u8; 40];
        let mut out = BytesMut::new();
        headers(&mut out, 3, &block, true, 16);
        let mut frames = Vec::new();
        let mut rest = &out[..];
        while !rest.is_empty() {
            let frame = Header::parse(rest);
            frames.push((frame.kind, frame.flags, frame.length, frame.stream));
            rest = &rest[HEADER_LEN + frame.length..];
        }
        assert_eq!(
            frames,
            [
                (kind::HEADERS, flag::END_STREAM, 16, 3),
                (kind::CONTINUATION, 0, 16, 3),
                (kind::CONTINUATION, flag::END_HEADERS, 8, 3),
            ]
        );
    }
}
