//! A quick scanner for the heads most traffic sends: `CRLF` line ends, one space between the
//! parts of the start line, a request target of plain URI bytes, no leading blank line, no
//! line folding, every field whole in the buffer. It takes such a head in one pass, sixteen
//! bytes at a time on x86-64 (eight elsewhere), and gives up (`None`) on anything else — then
//! `httparse` parses the head as before. What it takes, it reads exactly as `httparse` does
//! (field names as RFC 9110's tokens, values trimmed of surrounding blanks);
//! `tests::agrees_with_httparse` holds it to that over many heads, mangled byte by byte.
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
    /// Where the target's path ends: at its `?`, else with the target.
    pub path_end: usize,
    /// The scanner saw the path hold no `%`, `//` or `/.`: one
    /// [`crate::http::path::normalize`] leaves as it is. `false` also when it did not look.
    pub plain_path: bool,
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
    /// Every field line is `name: value` CRLF, the value with no blank around it: the lines
    /// are, byte for byte, what a rewrite would write for them, so the ones a hop keeps may be
    /// copied in one run. Only the scanner tells; `httparse`'s heads never are.
    pub canonical: bool,
}

impl<'b, 'f, Line> Head<'b, 'f, Line> {
    /// The head the scanner took, its fields written at the start of `fields`.
    fn scanned(line: Line, scanned: Scanned, fields: &'f [MaybeUninit<Header<'b>>]) -> Self {
        Head {
            line,
            length: scanned.length,
            fields: initialized(fields, scanned.count),
            canonical: scanned.canonical,
        }
    }
}

type Parsed<'b, 'f, Line> = Result<httparse::Status<Head<'b, 'f, Line>>, httparse::Error>;

/// Parses the request head at the start of `buffer` into `fields`: by the scanner when it
/// takes the head, else by `httparse`.
pub fn request<'b, 'f>(
    buffer: &'b [u8],
    fields: &'f mut [MaybeUninit<Header<'b>>],
) -> Parsed<'b, 'f, RequestLine<'b>> {
    if let Some((line, scanned)) = scan_request(buffer, fields) {
        return Ok(httparse::Status::Complete(Head::scanned(
            line, scanned, fields,
        )));
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
            path_end: target.find('?').unwrap_or(target.len()),
            plain_path: false,
        },
        length,
        fields: parsed.headers,
        canonical: false,
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
    if let Some((line, scanned)) = scan_response(buffer, fields) {
        return Ok(httparse::Status::Complete(Head::scanned(
            line, scanned, fields,
        )));
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
        canonical: false,
    }))
}

/// What the scan of a head's fields found.
struct Scanned {
    /// The head's length, blank line included.
    length: usize,
    /// How many fields it wrote.
    count: usize,
    /// See [`Head::canonical`].
    canonical: bool,
}

/// Takes a request head at the start of `buffer`, if it is one the scanner reads.
fn scan_request<'b>(
    buffer: &'b [u8],
    fields: &mut [MaybeUninit<Header<'b>>],
) -> Option<(RequestLine<'b>, Scanned)> {
    let method_end = token_end(buffer, 0);
    let target_start = method_end + 1;
    if method_end == 0 || buffer.get(method_end) != Some(&b' ') {
        return None;
    }
    let target = wide::target(buffer, target_start).unwrap_or_else(|| {
        let length = buffer[target_start..]
            .iter()
            .position(|&b| !TARGET_BYTES[usize::from(b)])
            .unwrap_or(buffer.len() - target_start);
        let target = &buffer[target_start..target_start + length];
        Target {
            length,
            path_end: target.iter().position(|&b| b == b'?').unwrap_or(length),
            plain_path: false,
        }
    });
    let target_length = target.length;
    let target_end = target_start + target_length;
    let minor_version = match buffer.get(target_end..target_end + 11)? {
        b" HTTP/1.1\r\n" => 1,
        b" HTTP/1.0\r\n" => 0,
        _ => return None,
    };
    if target_length == 0 {
        return None;
    }
    let scanned = scan_fields(buffer, target_end + 11, fields)?;
    let line = RequestLine {
        method: ascii(&buffer[..method_end]),
        target: ascii(&buffer[target_start..target_end]),
        minor_version,
        plain_target: true,
        path_end: target.path_end,
        plain_path: target.plain_path,
    };
    Some((line, scanned))
}

/// Takes a response head at the start of `buffer`, if it is one the scanner reads.
fn scan_response<'b>(
    buffer: &'b [u8],
    fields: &mut [MaybeUninit<Header<'b>>],
) -> Option<(StatusLine, Scanned)> {
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
    let scanned = scan_fields(buffer, line_end + 2, fields)?;
    let line = StatusLine {
        minor_version,
        code,
        newline: line_end + 1,
    };
    Some((line, scanned))
}

/// Scans the field lines from `at` to the blank line that ends the head, writing each into
/// `fields`.
fn scan_fields<'b>(
    buffer: &'b [u8],
    mut at: usize,
    fields: &mut [MaybeUninit<Header<'b>>],
) -> Option<Scanned> {
    let mut count = 0;
    let mut canonical = true;
    loop {
        if buffer.get(at..at + 2)? == b"\r\n" {
            return Some(Scanned {
                length: at + 2,
                count,
                canonical,
            });
        }
        let name_start = at;
        at = token_end(buffer, at);
        if at == name_start || buffer.get(at)? != &b':' {
            return None;
        }
        let name = ascii(&buffer[name_start..at]);
        let colon = at;
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
        canonical &= value_start == colon + 2
            && buffer[colon + 1] == b' '
            && value_start + value.len() == at;
        fields.get_mut(count)?.write(Header { name, value });
        count += 1;
        at += 2;
    }
}

/// Where the token from `at` ends: the first byte that is no `tchar`, or the buffer's end.
/// Sixteen bytes at a time, then eight, while they are letters, digits and `-`, what field
/// names are made of.
#[inline(always)]
fn token_end(buffer: &[u8], mut at: usize) -> usize {
    at = match wide::name_end(buffer, at) {
        Ok(stop) => stop,
        Err(left) => {
            let mut at = left;
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
            at
        }
    };
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
/// character other than tab, or DEL), or the buffer's end. Sixteen bytes at a time, then
/// eight.
#[inline(always)]
fn text_end(buffer: &[u8], mut at: usize) -> usize {
    at = match wide::text_end(buffer, at) {
        Ok(stop) => return stop,
        Err(left) => left,
    };
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

/// What the scan of a request target found.
struct Target {
    length: usize,
    /// Where its path ends, from its start: at its `?`, else with the target.
    path_end: usize,
    /// See [`RequestLine::plain_path`].
    plain_path: bool,
}

/// The scans above, sixteen bytes at a time with SSE2 (which every x86-64 processor has).
/// Each stops at the first byte of its 16 it cannot take (`Ok`), or where fewer than 16 are
/// left (`Err`), for the eight-at-a-time and byte-by-byte code to go on from.
#[cfg(target_arch = "x86_64")]
mod wide {
    use super::Target;
    use std::arch::x86_64::{
        __m128i, _mm_andnot_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8,
        _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8, _mm_sub_epi8,
    };

    /// A request target, read from its start to the first byte that is none of
    /// `TARGET_BYTES` (see [`Target`]); `None` if fewer than 16 bytes were left before that.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(super) fn target(buffer: &[u8], start: usize) -> Option<Target> {
        // SAFETY: SSE2 is part of every x86-64 processor (the target's baseline).
        unsafe { target_sse2(buffer, start) }
    }

    /// Past the letters, digits and `-` from `at`.
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(super) fn name_end(buffer: &[u8], at: usize) -> Result<usize, usize> {
        // SAFETY: SSE2 is part of every x86-64 processor (the target's baseline).
        unsafe { name_end_sse2(buffer, at) }
    }

    /// Past the bytes from `at` a field value may hold (see [`super::is_field_value`]).
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(super) fn text_end(buffer: &[u8], at: usize) -> Result<usize, usize> {
        // SAFETY: as in `name_end`.
        unsafe { text_end_sse2(buffer, at) }
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn target_sse2(buffer: &[u8], start: usize) -> Option<Target> {
        let mut at = start;
        let mut path_end = None;
        let mut plain_path = true;
        // Bit 0: the byte before `at` is a `/`.
        let mut slash_before = 0;
        loop {
            let vector = load(buffer, at)?;
            // `TARGET_BYTES`: `!`, `$` to `;`, `=`, `?` to `Z`, `_`, `a` to `z`, `~`.
            let ranges = _mm_or_si128(
                _mm_or_si128(within(vector, b'$', b';'), within(vector, b'?', b'Z')),
                within(vector, b'a', b'z'),
            );
            let singles = _mm_or_si128(
                _mm_or_si128(equal(vector, b'!'), equal(vector, b'=')),
                _mm_or_si128(equal(vector, b'_'), equal(vector, b'~')),
            );
            let stop = !mask(_mm_or_si128(ranges, singles)) & 0xffff;
            let in_target = match stop {
                0 => 0xffff,
                stop => (1 << stop.trailing_zeros()) - 1,
            };
            if path_end.is_none() {
                let query = mask(equal(vector, b'?')) & in_target;
                let in_path = match query {
                    0 => in_target,
                    query => (1 << query.trailing_zeros()) - 1,
                };
                let slash = mask(equal(vector, b'/'));
                let after_slash = (slash << 1) | slash_before;
                let doubtful =
                    mask(equal(vector, b'%')) | (after_slash & (slash | mask(equal(vector, b'.'))));
                plain_path &= doubtful & in_path == 0;
                slash_before = slash >> 15;
                if query != 0 {
                    path_end = Some(at - start + query.trailing_zeros() as usize);
                }
            }
            if stop != 0 {
                let length = at - start + stop.trailing_zeros() as usize;
                return Some(Target {
                    length,
                    path_end: path_end.unwrap_or(length),
                    plain_path,
                });
            }
            at += 16;
        }
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn name_end_sse2(buffer: &[u8], at: usize) -> Result<usize, usize> {
        first_outside(buffer, at, |vector| {
            // Setting 0x20 turns upper-case letters into lower-case ones, and no other byte
            // into one.
            let folded = _mm_or_si128(vector, _mm_set1_epi8(0x20));
            let letter = within(folded, b'a', b'z');
            let digit = within(vector, b'0', b'9');
            mask(_mm_or_si128(
                _mm_or_si128(letter, digit),
                equal(vector, b'-'),
            ))
        })
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn text_end_sse2(buffer: &[u8], at: usize) -> Result<usize, usize> {
        first_outside(buffer, at, |vector| {
            let control = _mm_andnot_si128(equal(vector, b'\t'), at_most(vector, 0x1f));
            !mask(_mm_or_si128(control, equal(vector, 0x7f)))
        })
    }

    /// The first byte from `at` outside the class `inside` flags (one bit per byte of 16).
    #[inline]
    #[target_feature(enable = "sse2")]
    fn first_outside(
        buffer: &[u8],
        mut at: usize,
        inside: impl Fn(__m128i) -> u32,
    ) -> Result<usize, usize> {
        while let Some(vector) = load(buffer, at) {
            let outside = !inside(vector) & 0xffff;
            if outside != 0 {
                return Ok(at + outside.trailing_zeros() as usize);
            }
            at += 16;
        }
        Err(at)
    }

    /// The 16 bytes of `buffer` from `at`, if it has that many.
    #[inline]
    #[target_feature(enable = "sse2")]
    #[allow(unsafe_code)]
    fn load(buffer: &[u8], at: usize) -> Option<__m128i> {
        let bytes: &[u8; 16] = buffer.get(at..at + 16)?.try_into().ok()?;
        // SAFETY: `bytes` is 16 readable bytes; the load takes any alignment.
        Some(unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) })
    }

    /// One bit per byte of `flags`: its high bit.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn mask(flags: __m128i) -> u32 {
        _mm_movemask_epi8(flags) as u32
    }

    /// Bytes equal to `byte`, all ones.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn equal(vector: __m128i, byte: u8) -> __m128i {
        _mm_cmpeq_epi8(vector, _mm_set1_epi8(byte as i8))
    }

    /// Bytes no greater than `most` (unsigned), all ones.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn at_most(vector: __m128i, most: u8) -> __m128i {
        _mm_cmpeq_epi8(_mm_min_epu8(vector, _mm_set1_epi8(most as i8)), vector)
    }

    /// Bytes from `low` to `high`, all ones.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn within(vector: __m128i, low: u8, high: u8) -> __m128i {
        at_most(_mm_sub_epi8(vector, _mm_set1_epi8(low as i8)), high - low)
    }
}

/// Elsewhere the eight-at-a-time and byte-by-byte scans start at once.
#[cfg(not(target_arch = "x86_64"))]
mod wide {
    use super::Target;

    pub(super) fn target(_: &[u8], _: usize) -> Option<Target> {
        None
    }

    pub(super) fn name_end(_: &[u8], at: usize) -> Result<usize, usize> {
        Err(at)
    }

    pub(super) fn text_end(_: &[u8], at: usize) -> Result<usize, usize> {
        Err(at)
    }
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
        let (line, scanned) = scan_request(head, &mut fields)?;
        let fields = initialized(&fields, scanned.count);
        check_canonical(head, &scanned, fields);
        Some(describe(
            &format!("{} {} 1.{}", line.method, line.target, line.minor_version),
            scanned.length,
            fields,
        ))
    }

    /// A head is told canonical exactly when its field lines, each written anew as
    /// `name: value` CRLF, are the bytes it came with.
    fn check_canonical(head: &[u8], scanned: &Scanned, fields: &[Header<'_>]) {
        let start = head.windows(2).position(|w| w == b"\r\n").unwrap() + 2;
        let mut written = Vec::new();
        for field in fields {
            written.extend_from_slice(field.name.as_bytes());
            written.extend_from_slice(b": ");
            written.extend_from_slice(field.value);
            written.extend_from_slice(b"\r\n");
        }
        let came = &head[start..scanned.length - 2];
        assert_eq!(
            scanned.canonical,
            written == came,
            "{:?}",
            String::from_utf8_lossy(head)
        );
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
        let (line, scanned) = scan_response(head, &mut fields)?;
        let fields = initialized(&fields, scanned.count);
        check_canonical(head, &scanned, fields);
        Some(describe(
            &format!("1.{} {} ({})", line.minor_version, line.code, line.newline),
            scanned.length,
            fields,
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

    /// Both scans stop at the first byte their class does not hold, wherever it is in a
    /// buffer long enough for every width, beside any neighbour, and run to the end of one
    /// that holds none.
    #[test]
    fn the_scans_stop_at_the_first_byte_out_of_their_class() {
        let in_text = |b: u8| is_field_value(b);
        for byte in 0..=255u8 {
            for filler in [b'a', b'Z', b'7', b'-', b'\t', 0x80, 0xff, b' '] {
                for length in [0, 1, 7, 8, 15, 16, 17, 31, 40] {
                    for at in 0..length {
                        let mut buffer = vec![filler; length];
                        buffer[at] = byte;
                        let first = |taken: &dyn Fn(u8) -> bool| {
                            buffer.iter().position(|&b| !taken(b)).unwrap_or(length)
                        };
                        assert_eq!(text_end(&buffer, 0), first(&in_text), "{buffer:x?}");
                        assert_eq!(token_end(&buffer, 0), first(&is_token), "{buffer:x?}");
                    }
                }
            }
        }
    }

    /// The request target's scan ends where `TARGET_BYTES` does, finds the path's end at the
    /// first `?`, and tells a plain path (no `%`, `//` or `/.`, the same as
    /// [`crate::http::path::normalize`]'s quick test) exactly, over targets of every length
    /// up to three vectors, and with every byte in every place of one.
    #[test]
    fn the_target_scan_finds_its_end_its_path_and_whether_that_is_plain() {
        let reference = |target: &[u8]| {
            let length = target
                .iter()
                .position(|&b| !TARGET_BYTES[usize::from(b)])
                .unwrap_or(target.len());
            let path_end = target[..length]
                .iter()
                .position(|&b| b == b'?')
                .unwrap_or(length);
            let path = &target[..path_end];
            let doubtful = path.contains(&b'%')
                || path
                    .windows(2)
                    .any(|pair| pair[0] == b'/' && matches!(pair[1], b'/' | b'.'));
            (length, path_end, !doubtful)
        };
        let check = |target: &[u8]| {
            let mut head = b"GET ".to_vec();
            head.extend_from_slice(target);
            head.extend_from_slice(b" HTTP/1.1\r\nHost: a\r\n\r\n");
            let (length, path_end, plain_path) = reference(target);
            let mut fields = uninit();
            let scanned = scan_request(&head, &mut fields);
            if length < target.len() || length == 0 {
                assert!(scanned.is_none(), "{target:?}");
                return;
            }
            let (line, _) = scanned.unwrap_or_else(|| panic!("{target:?}"));
            assert_eq!(line.target.as_bytes(), target);
            assert_eq!(
                (line.path_end, line.plain_path),
                (path_end, plain_path),
                "{:?}",
                String::from_utf8_lossy(target)
            );
            if plain_path {
                let path = &line.target[..line.path_end];
                assert_eq!(crate::http::path::normalize(path), Ok(None), "{path}");
            }
        };
        let alphabet = b"/.%?a-~!=_";
        let mut seed = 0x2545_f491_u64;
        for _ in 0..20_000 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let length = 1 + (seed >> 33) as usize % 48;
            let target: Vec<u8> = (0..length)
                .map(|i| {
                    let pick = (seed.rotate_left(i as u32 * 5) >> 40) as usize;
                    alphabet[pick % alphabet.len()]
                })
                .collect();
            check(&target);
        }
        let base = b"/takip/TR-4821?durum=yolda&x=1";
        for at in 0..base.len() {
            for byte in 0..=255u8 {
                let mut target = base.to_vec();
                target[at] = byte;
                check(&target);
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
