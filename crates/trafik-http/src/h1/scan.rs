//! A quick scanner for the heads most traffic sends: `CRLF` line ends, one space between the
//! parts of the start line, a request target of plain URI bytes, no leading blank line, no
//! line folding, every field whole in the buffer. It takes such a head in one pass, eight
//! value bytes at a time, and gives up (`None`) on anything else — then `httparse` parses the
//! head as before. What it takes, it reads exactly as `httparse` does (field names as
//! RFC 9110's tokens, values trimmed of surrounding blanks); `tests::agrees_with_httparse`
//! holds it to that over many heads, mangled byte by byte.
//!
//! `httparse` reads each value byte by byte below 32 bytes, with a dispatch to its vector
//! code per field: over a third of the instructions of parsing a proxied GET's two heads.
//!
//! The byte classes of the field grammar ([`is_token`], [`is_field_value`]) live here too, for
//! the chunked decoder's trailer fields.

use std::mem::MaybeUninit;

use httparse::Header;

use super::head::TARGET_BYTES;

/// A request line.
pub struct RequestLine<'b> {
    pub method: &'b str,
    pub target: &'b str,
    /// 0 or 1: `HTTP/1.0` or `HTTP/1.1`.
    pub minor_version: u8,
    /// The target holds only the bytes of `TARGET_BYTES` (always so when the scanner took it).
    pub plain_target: bool,
}

/// A status line.
pub struct StatusLine {
    pub minor_version: u8,
    pub code: u16,
    /// Where the `\n` that ends it is.
    pub newline: usize,
}

/// A parsed head: its start line, its length (blank line included) and its fields.
pub struct Head<'b, 'f, Line> {
    pub line: Line,
    pub length: usize,
    pub fields: &'f [Header<'b>],
}

type Parsed<'b, 'f, Line> = Result<httparse::Status<Head<'b, 'f, Line>>, httparse::Error>;

/// Parses the request head at the start of `buffer` into `fields`: by the scanner when it
/// takes the head, else by `httparse`.
pub fn request<'b, 'f>(
    buffer: &'b [u8],
    fields: &'f mut [MaybeUninit<Header<'b>>],
) -> Parsed<'b, 'f, RequestLine<'b>> {
    if let Some((line, length, count)) = scan_request(buffer, fields) {
        let fields = initialized(fields, count);
        return Ok(httparse::Status::Complete(Head {
            line,
            length,
            fields,
        }));
    }
    let mut parsed = httparse::Request::new(&mut []);
    let length = match parsed.parse_with_uninit_headers(buffer, fields)? {
        httparse::Status::Complete(length) => length,
        httparse::Status::Partial => return Ok(httparse::Status::Partial),
    };
    let (Some(method), Some(target), Some(minor_version)) =
        (parsed.method, parsed.path, parsed.version)
    else {
        return Err(httparse::Error::Version);
    };
    Ok(httparse::Status::Complete(Head {
        line: RequestLine {
            method,
            target,
            minor_version,
            plain_target: target.bytes().all(|b| TARGET_BYTES[usize::from(b)]),
        },
        length,
        fields: parsed.headers,
    }))
}

/// Parses the response head at the start of `buffer` into `fields`, or into `spill` when it
/// has more fields than `fields` holds and `allowed` lets it: by the scanner when it takes the
/// head, else by `httparse`.
pub fn response<'b, 'f>(
    buffer: &'b [u8],
    fields: &'f mut [MaybeUninit<Header<'b>>],
    spill: &'f mut Vec<Header<'b>>,
    allowed: usize,
) -> Parsed<'b, 'f, StatusLine> {
    if let Some((line, length, count)) = scan_response(buffer, fields) {
        let fields = initialized(fields, count);
        return Ok(httparse::Status::Complete(Head {
            line,
            length,
            fields,
        }));
    }
    let room = fields.len();
    let mut parsed = httparse::Response::new(&mut []);
    let config = httparse::ParserConfig::default();
    let mut status = config.parse_response_with_uninit_headers(&mut parsed, buffer, fields);
    if matches!(status, Err(httparse::Error::TooManyHeaders)) && allowed > room {
        *spill = vec![httparse::EMPTY_HEADER; allowed];
        parsed = httparse::Response::new(spill);
        status = parsed.parse(buffer);
    }
    let length = match status? {
        httparse::Status::Complete(length) => length,
        httparse::Status::Partial => return Ok(httparse::Status::Partial),
    };
    let (Some(minor_version), Some(code)) = (parsed.version, parsed.code) else {
        return Err(httparse::Error::Version);
    };
    Ok(httparse::Status::Complete(Head {
        line: StatusLine {
            minor_version,
            code,
            newline: buffer.iter().position(|&b| b == b'\n').unwrap_or(0),
        },
        length,
        fields: parsed.headers,
    }))
}

/// Takes a request head at the start of `buffer`, if it is one the scanner reads: its line,
/// length and number of fields.
fn scan_request<'b>(
    buffer: &'b [u8],
    fields: &mut [MaybeUninit<Header<'b>>],
) -> Option<(RequestLine<'b>, usize, usize)> {
    let method_end = token_end(buffer, 0);
    let target_start = method_end + 1;
    if method_end == 0 || buffer.get(method_end) != Some(&b' ') {
        return None;
    }
    let target_length = buffer[target_start..]
        .iter()
        .position(|&b| !TARGET_BYTES[usize::from(b)])?;
    let target_end = target_start + target_length;
    let minor_version = match buffer.get(target_end..target_end + 11)? {
        b" HTTP/1.1\r\n" => 1,
        b" HTTP/1.0\r\n" => 0,
        _ => return None,
    };
    if target_length == 0 {
        return None;
    }
    let (length, count) = scan_fields(buffer, target_end + 11, fields)?;
    let line = RequestLine {
        method: ascii(&buffer[..method_end]),
        target: ascii(&buffer[target_start..target_end]),
        minor_version,
        plain_target: true,
    };
    Some((line, length, count))
}

/// Takes a response head at the start of `buffer`, if it is one the scanner reads: its line,
/// length and number of fields.
fn scan_response<'b>(
    buffer: &'b [u8],
    fields: &mut [MaybeUninit<Header<'b>>],
) -> Option<(StatusLine, usize, usize)> {
    let minor_version = match buffer.get(..9)? {
        b"HTTP/1.1 " => 1,
        b"HTTP/1.0 " => 0,
        _ => return None,
    };
    let code = match *buffer.get(9..13)? {
        [a @ b'0'..=b'9', b @ b'0'..=b'9', c @ b'0'..=b'9', b' '] => {
            u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
        }
        _ => return None,
    };
    // The reason phrase: what a field value may hold.
    let line_end = text_end(buffer, 13);
    if buffer.get(line_end..line_end + 2)? != b"\r\n" {
        return None;
    }
    let (length, count) = scan_fields(buffer, line_end + 2, fields)?;
    let line = StatusLine {
        minor_version,
        code,
        newline: line_end + 1,
    };
    Some((line, length, count))
}

/// Scans the field lines from `at` to the blank line that ends the head, writing each into
/// `fields`: the head's length and the number of fields.
fn scan_fields<'b>(
    buffer: &'b [u8],
    mut at: usize,
    fields: &mut [MaybeUninit<Header<'b>>],
) -> Option<(usize, usize)> {
    let mut count = 0;
    loop {
        if buffer.get(at..at + 2)? == b"\r\n" {
            return Some((at + 2, count));
        }
        let name_start = at;
        at = token_end(buffer, at);
        if at == name_start || buffer.get(at)? != &b':' {
            return None;
        }
        let name = ascii(&buffer[name_start..at]);
        at += 1;
        while matches!(buffer.get(at), Some(b' ' | b'\t')) {
            at += 1;
        }
        let value_start = at;
        at = text_end(buffer, at);
        if buffer.get(at..at + 2)? != b"\r\n" {
            return None;
        }
        let value = buffer[value_start..at].trim_ascii_end();
        fields.get_mut(count)?.write(Header { name, value });
        count += 1;
        at += 2;
    }
}

/// Where the token from `at` ends: the first byte that is no `tchar`, or the buffer's end.
/// Eight bytes at a time while they are letters, digits and `-`, what field names are made of.
fn token_end(buffer: &[u8], mut at: usize) -> usize {
    while let Some(word) = buffer.get(at..at + 8) {
        let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
        let others = !name_bytes(word) & HIGHS;
        if others == 0 {
            at += 8;
            continue;
        }
        at += (others.trailing_zeros() / 8) as usize;
        break;
    }
    at + buffer[at..]
        .iter()
        .position(|&b| !is_token(b))
        .unwrap_or(buffer.len() - at)
}

/// The bytes of `word` that are ASCII letters, digits or `-`, flagged in their high bit. Each
/// sum below stays under 0x100 per byte (the high bits cleared first), so no byte carries
/// into the next: every flag is exact.
fn name_bytes(word: u64) -> u64 {
    let ascii = !word & HIGHS;
    let low = word & !HIGHS;
    // Upper-case letters to lower-case; control characters land below 0x40, not on a letter.
    let folded = low | (ONES * 0x20);
    let letter = folded.wrapping_add(ONES * (0x80 - b'a' as u64))
        & !folded.wrapping_add(ONES * (0x7f - b'z' as u64));
    let digit = low.wrapping_add(ONES * (0x80 - b'0' as u64))
        & !low.wrapping_add(ONES * (0x7f - b'9' as u64));
    let not_dash = low ^ (ONES * b'-' as u64);
    let dash = !(not_dash.wrapping_add(ONES * 0x7f) | not_dash);
    (letter | digit | dash) & ascii
}

const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);

/// Where the text from `at` ends: the first byte a field value may not hold (a control
/// character other than tab, or DEL), or the buffer's end. Eight bytes at a time.
fn text_end(buffer: &[u8], mut at: usize) -> usize {
    while let Some(word) = buffer.get(at..at + 8) {
        let word = u64::from_le_bytes(word.try_into().unwrap_or_default());
        // Bytes below 0x20, and bytes equal to 0x7F, flagged in their high bit; a borrow may
        // flag bytes above the first flagged one, never below it.
        let below_space = word.wrapping_sub(ONES * 0x20) & !word;
        let delete = word ^ (ONES * 0x7f);
        let flagged = (below_space | (delete.wrapping_sub(ONES) & !delete)) & HIGHS;
        if flagged == 0 {
            at += 8;
            continue;
        }
        let first = at + (flagged.trailing_zeros() / 8) as usize;
        if buffer[first] != b'\t' {
            return first;
        }
        at = first + 1;
    }
    at + buffer[at..]
        .iter()
        .position(|&b| !is_field_value(b))
        .unwrap_or(buffer.len() - at)
}

/// Whether a field value may hold `byte`: tab, visible ASCII, space, obs-text (RFC 9110 §5.5),
/// what httparse takes in one.
pub(super) fn is_field_value(byte: u8) -> bool {
    byte == b'\t' || (byte >= 0x20 && byte != 0x7f)
}

/// RFC 9110's `tchar`: what a method and a field name are made of.
pub(super) fn is_token(byte: u8) -> bool {
    TOKEN_BYTES[usize::from(byte)]
}

const TOKEN_BYTES: [bool; 256] = crate::http::validate::alphanumeric_and(b"!#$%&'*+-.^_`|~");

/// Token bytes, which the scan that found them took only as ASCII.
#[allow(unsafe_code)]
fn ascii(bytes: &[u8]) -> &str {
    debug_assert!(bytes.is_ascii());
    // SAFETY: every caller passes bytes `is_token` or `TARGET_BYTES` accepted, all ASCII, and
    // ASCII is UTF-8.
    unsafe { std::str::from_utf8_unchecked(bytes) }
}

/// The first `count` fields, which the scan wrote.
#[allow(unsafe_code)]
fn initialized<'f, 'b>(fields: &'f [MaybeUninit<Header<'b>>], count: usize) -> &'f [Header<'b>] {
    let written = &fields[..count];
    // SAFETY: `scan_fields` wrote each of the first `count` elements before counting it, and
    // `MaybeUninit<T>` has `T`'s layout.
    unsafe { std::slice::from_raw_parts(written.as_ptr().cast::<Header<'b>>(), count) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h1::head::MAX_HEADERS;

    fn uninit<'b>() -> [MaybeUninit<Header<'b>>; MAX_HEADERS] {
        [const { MaybeUninit::uninit() }; MAX_HEADERS]
    }

    /// The scanner's reading of a request head, or `None`, as text to compare.
    fn scanned_request(head: &[u8]) -> Option<String> {
        let mut fields = uninit();
        let (line, length, count) = scan_request(head, &mut fields)?;
        Some(describe(
            &format!("{} {} 1.{}", line.method, line.target, line.minor_version),
            length,
            initialized(&fields, count),
        ))
    }

    fn httparse_request(head: &[u8]) -> Option<String> {
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut fields);
        let httparse::Status::Complete(length) = parsed.parse(head).ok()? else {
            return None;
        };
        Some(describe(
            &format!("{} {} 1.{}", parsed.method?, parsed.path?, parsed.version?),
            length,
            parsed.headers,
        ))
    }

    fn scanned_response(head: &[u8]) -> Option<String> {
        let mut fields = uninit();
        let (line, length, count) = scan_response(head, &mut fields)?;
        Some(describe(
            &format!("1.{} {} ({})", line.minor_version, line.code, line.newline),
            length,
            initialized(&fields, count),
        ))
    }

    fn httparse_response(head: &[u8]) -> Option<String> {
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut fields);
        let httparse::Status::Complete(length) = parsed.parse(head).ok()? else {
            return None;
        };
        Some(describe(
            &format!(
                "1.{} {} ({})",
                parsed.version?,
                parsed.code?,
                head.iter().position(|&b| b == b'\n')?
            ),
            length,
            parsed.headers,
        ))
    }

    fn describe(line: &str, length: usize, fields: &[Header<'_>]) -> String {
        let mut text = format!("{line} ({length} bytes)");
        for field in fields {
            text.push_str(&format!("\n{:?}: {:?}", field.name, field.value));
        }
        text
    }

    const REQUESTS: [&[u8]; 4] = [
        b"GET /takip/TR-4821 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
        b"POST /api/v1/kargo?durum=yolda&x=%20 HTTP/1.0\r\nhost: kargo.test\r\ncontent-length: 5\r\nx-bos:\r\nx-tab:\tiki\t kelime \t\r\nuser-agent: curl/8.5 (x86_64)\r\n\r\nhello",
        b"DELETE * HTTP/1.1\r\nX: \x80\xff obs-text\r\nAccept: */*\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
    ];

    const RESPONSES: [&[u8]; 4] = [
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-kopya: k1\r\ncontent-length: 105\r\ndate: Wed, 02 Dec 2026 13:38:30 GMT\r\n\r\n{}",
        b"HTTP/1.0 404 \r\nserver: a  \r\n\r\n",
        b"HTTP/1.1 503 Service Unavailable, try again\tlater\r\nretry-after: 2\r\nconnection: close\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\n\r\n",
    ];

    #[test]
    fn plain_heads_are_taken_as_httparse_reads_them() {
        for head in REQUESTS {
            let scanned = scanned_request(head);
            assert!(scanned.is_some(), "not taken: {head:?}");
            assert_eq!(scanned, httparse_request(head), "{head:?}");
        }
        for head in RESPONSES {
            let scanned = scanned_response(head);
            assert!(scanned.is_some(), "not taken: {head:?}");
            assert_eq!(scanned, httparse_response(head), "{head:?}");
        }
    }

    #[test]
    fn heads_out_of_the_plain_shape_are_left_to_httparse() {
        for head in [
            "GET /a HTTP/1.1\r\nHost: a\r\n",           // not whole yet
            "\r\nGET /a HTTP/1.1\r\nHost: a\r\n\r\n",   // a blank line first
            "GET /a HTTP/1.1\nHost: a\n\n",             // bare LF line ends
            "GET  /a HTTP/1.1\r\nHost: a\r\n\r\n",      // two spaces
            "GET /a HTTP/1.1\r\nHost : a\r\n\r\n",      // a space before the colon
            "GET /a HTTP/1.1\r\nHost: a\r\n b\r\n\r\n", // line folding
            "GET /a HTTP/1.1\r\nHost: a\0b\r\n\r\n",    // NUL in a value
            "GET /a HTTP/1.1\r\nHost: a\rb\r\n\r\n",    // a lone CR
            "GET /\"a HTTP/1.1\r\nHost: a\r\n\r\n",     // a target byte off the plain set
            "GET /a HTTP/2.0\r\nHost: a\r\n\r\n",
            "GET /a HTTP/1.1\r\n\x7fHost: a\r\n\r\n",
        ] {
            assert!(scanned_request(head.as_bytes()).is_none(), "{head:?}");
        }
        for head in [
            "HTTP/1.1 200\r\n\r\n", // no reason, no space: httparse's
            "HTTP/1.1 20 OK\r\n\r\n",
            "HTTP/1.1 200 O\x7fK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nx: \x01\r\n\r\n",
        ] {
            assert!(scanned_response(head.as_bytes()).is_none(), "{head:?}");
        }
    }

    /// The eight-at-a-time test of name bytes agrees with the byte table on every byte, in
    /// every position, beside any neighbour.
    #[test]
    fn name_bytes_are_told_exactly() {
        let quick = |b: u8| b.is_ascii_alphanumeric() || b == b'-';
        for byte in 0..=255u8 {
            for neighbour in [0x00, b'-', b'z', 0x7f, 0x80, 0xff] {
                for at in 0..8 {
                    let mut bytes = [neighbour; 8];
                    bytes[at] = byte;
                    let flags = name_bytes(u64::from_le_bytes(bytes));
                    for (i, &b) in bytes.iter().enumerate() {
                        let flagged = (flags >> (i * 8 + 7)) & 1 == 1;
                        assert_eq!(flagged, quick(b), "{b:#x} at {i} in {bytes:x?}");
                    }
                }
            }
        }
    }

    #[test]
    fn more_fields_than_the_array_holds_are_left_to_httparse() {
        let mut head = String::from("GET / HTTP/1.1\r\n");
        for n in 0..=MAX_HEADERS {
            head.push_str(&format!("x-{n}: {n}\r\n"));
        }
        head.push_str("\r\n");
        assert!(scanned_request(head.as_bytes()).is_none());
    }

    /// Every head the scanner takes, of the plain ones with each byte replaced in turn by each
    /// byte that matters to the grammar and cut at each length, `httparse` reads the same.
    #[test]
    fn agrees_with_httparse() {
        let replacements = [
            b'\0', b'\t', b'\n', b'\r', b' ', b'"', b'(', b',', b'/', b':', b';', b'?', b'A',
            b'\\', b'{', 0x7f, 0x80, 0xff,
        ];
        let mut taken = 0;
        let heads = REQUESTS.iter().map(|h| (h, true));
        for (head, is_request) in heads.chain(RESPONSES.iter().map(|h| (h, false))) {
            let original = *head;
            let mut variants: Vec<Vec<u8>> = (0..original.len())
                .map(|cut| original[..cut].to_vec())
                .collect();
            for at in 0..original.len() {
                for &byte in &replacements {
                    let mut variant = original.to_vec();
                    variant[at] = byte;
                    variants.push(variant);
                }
            }
            for variant in &variants {
                let (scanned, reference) = if is_request {
                    (scanned_request(variant), httparse_request(variant))
                } else {
                    (scanned_response(variant), httparse_response(variant))
                };
                if let Some(scanned) = scanned {
                    taken += 1;
                    assert_eq!(
                        Some(scanned),
                        reference,
                        "{:?}",
                        String::from_utf8_lossy(variant)
                    );
                }
            }
        }
        // The battery is no vacuous one: most mangled heads are still plain.
        assert!(taken > 1_000, "{taken}");
    }
}
