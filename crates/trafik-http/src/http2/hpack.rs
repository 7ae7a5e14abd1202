//! HPACK decoding (RFC 7541): header blocks a peer compressed, read into names and values that
//! share the block's bytes where they can (a string sent as is is a slice of the block; only a
//! Huffman-coded one is decoded into bytes of its own). Malformed input is an error, never a
//! panic: lengths and indexes are checked against what is there.

use std::collections::VecDeque;
use std::sync::OnceLock;

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderName;

/// A decoded field's name: a pseudo-field, or a field name. A literal name that is neither (an
/// unknown pseudo-field, a character HTTP/2 forbids, upper case) is [`Name::Malformed`]: the
/// block is still decoded through, for its table entries are the connection's; the name's
/// length is kept for the table's size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Name {
    Authority,
    Method,
    Scheme,
    Path,
    Status,
    Protocol,
    Field(HeaderName),
    Malformed(usize),
}

impl Name {
    fn parse(bytes: &[u8]) -> Name {
        match bytes {
            b":authority" => Name::Authority,
            b":method" => Name::Method,
            b":scheme" => Name::Scheme,
            b":path" => Name::Path,
            b":status" => Name::Status,
            b":protocol" => Name::Protocol,
            _ => {
                HeaderName::from_lowercase(bytes).map_or(Name::Malformed(bytes.len()), Name::Field)
            }
        }
    }

    /// The name's length as HPACK counts it (RFC 7541 §4.1).
    pub fn len(&self) -> usize {
        match self {
            Name::Authority => 10,
            Name::Method | Name::Scheme | Name::Status => 7,
            Name::Path => 5,
            Name::Protocol => 9,
            Name::Field(name) => name.as_str().len(),
            Name::Malformed(length) => *length,
        }
    }
}

/// Why a block could not be decoded: the connection's decoding state is lost with it
/// (a `COMPRESSION_ERROR`, RFC 9113 §4.3).
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The block ends inside a representation.
    Truncated,
    /// An index names no entry.
    BadIndex,
    /// An integer past any length a block may carry.
    Overflow,
    /// A Huffman string with a bad code or padding.
    Huffman,
    /// A table size update past the size allowed, or after the block's first field.
    BadSizeUpdate,
}

/// The static table (RFC 7541 Appendix A), from index 1.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The static table as decoded fields: names parsed once, not at every use.
fn static_table() -> &'static [(Name, Bytes); 61] {
    static TABLE: OnceLock<[(Name, Bytes); 61]> = OnceLock::new();
    TABLE.get_or_init(|| {
        STATIC.map(|(name, value)| {
            (
                Name::parse(name.as_bytes()),
                Bytes::from_static(value.as_bytes()),
            )
        })
    })
}

/// Each entry's overhead beside its name and value (RFC 7541 §4.1), counted in a header list's
/// size too (RFC 9113 §6.5.2).
pub const ENTRY_OVERHEAD: usize = 32;

/// One connection's decoding state: its dynamic table.
pub struct Decoder {
    /// Newest first.
    table: VecDeque<(Name, Bytes)>,
    size: usize,
    max_size: usize,
    /// The most the peer may set `max_size` to: what this side's SETTINGS allow.
    allowed: usize,
    /// Where Huffman-coded strings are decoded, each split off as the bytes of its field: one
    /// allocation serves many.
    decoded: BytesMut,
}

/// Room made in [`Decoder::decoded`] when it runs short.
const DECODED_ROOM: usize = 4096;

impl Decoder {
    pub fn new(allowed: usize) -> Decoder {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max_size: allowed,
            allowed,
            decoded: BytesMut::new(),
        }
    }

    /// Decodes the whole block, handing each field to `field` in order.
    pub fn decode(
        &mut self,
        mut block: Bytes,
        mut field: impl FnMut(Name, Bytes),
    ) -> Result<(), DecodeError> {
        let mut fields_seen = false;
        while let Some(&first) = block.first() {
            if first & 0x80 != 0 {
                // Indexed (§6.1).
                let index = integer(&mut block, 7)?;
                let (name, value) = self.entry(index)?;
                field(name, value);
            } else if first & 0xc0 == 0x40 {
                // Literal with incremental indexing (§6.2.1). The table keeps a copy: a
                // slice of the block would keep the whole read buffer it came in.
                let (name, value) = self.literal(&mut block, 6)?;
                self.decoded.extend_from_slice(&value);
                let value = self.decoded.split().freeze();
                self.insert(name.clone(), value.clone());
                field(name, value);
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only before the block's first field.
                if fields_seen {
                    return Err(DecodeError::BadSizeUpdate);
                }
                let size = integer(&mut block, 5)?;
                if size > self.allowed {
                    return Err(DecodeError::BadSizeUpdate);
                }
                self.max_size = size;
                self.evict(0);
                continue;
            } else {
                // Literal without indexing or never indexed (§6.2.2, §6.2.3).
                let (name, value) = self.literal(&mut block, 4)?;
                field(name, value);
            }
            fields_seen = true;
        }
        Ok(())
    }

    fn entry(&self, index: usize) -> Result<(Name, Bytes), DecodeError> {
        match index {
            0 => Err(DecodeError::BadIndex),
            1..=61 => Ok(static_table()[index - 1].clone()),
            _ => self
                .table
                .get(index - 62)
                .cloned()
                .ok_or(DecodeError::BadIndex),
        }
    }

    fn literal(&mut self, block: &mut Bytes, prefix: u32) -> Result<(Name, Bytes), DecodeError> {
        let index = integer(block, prefix)?;
        let name = match index {
            0 => Name::parse(&self.string(block)?),
            _ => self.entry(index)?.0,
        };
        Ok((name, self.string(block)?))
    }

    /// A string literal (§5.2): its bytes, a slice of the block unless Huffman-coded.
    fn string(&mut self, block: &mut Bytes) -> Result<Bytes, DecodeError> {
        let huffman = block.first().is_some_and(|&first| first & 0x80 != 0);
        let length = integer(block, 7)?;
        if length > block.len() {
            return Err(DecodeError::Truncated);
        }
        let raw = block.split_to(length);
        if !huffman {
            return Ok(raw);
        }
        // A code is 5 bits or more: at most 8 symbols in 5 bytes.
        let most = length * 8 / 5 + 1;
        if self.decoded.capacity() < most {
            self.decoded.reserve(most.max(DECODED_ROOM));
        }
        huffman_decode(&raw, &mut self.decoded)?;
        Ok(self.decoded.split().freeze())
    }

    fn insert(&mut self, name: Name, value: Bytes) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            // An entry larger than the table empties it (§4.4).
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        self.table.push_front((name, value));
    }

    /// Evicts the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max_size {
            let Some((name, value)) = self.table.pop_back() else {
                break;
            };
            self.size -= name.len() + value.len() + ENTRY_OVERHEAD;
        }
    }
}

/// An integer with an `prefix`-bit prefix (§5.1), at most what fits a block's lengths.
fn integer(block: &mut Bytes, prefix: u32) -> Result<usize, DecodeError> {
    let most = (1usize << prefix) - 1;
    let first = *block.first().ok_or(DecodeError::Truncated)?;
    block.advance(1);
    let mut value = usize::from(first) & most;
    if value < most {
        return Ok(value);
    }
    let mut shift = 0;
    loop {
        let byte = *block.first().ok_or(DecodeError::Truncated)?;
        block.advance(1);
        value += usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        // Past 2^28: no length or index in a block is that large.
        if shift > 21 {
            return Err(DecodeError::Overflow);
        }
    }
}

/// Each symbol's code length in bits (RFC 7541 Appendix B), symbol 256 being EOS. The code is
/// canonical: codes follow from lengths alone, shorter first and, within a length, in symbol
/// order, so the decoder needs no more than this table.
#[rustfmt::skip]
const CODE_LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26,
    30,
];

const EOS: u16 = 256;
const LONGEST: usize = 30;

/// The canonical code laid out for decoding: a table for the codes of 8 bits or fewer, read
/// by the next byte's worth of bits, and for longer ones each length's first code.
struct Huffman {
    /// By the next 8 bits: the symbol and its length, length 0 when the code is longer.
    short: [(u16, u8); 256],
    /// By length: the first code, how many codes, where their symbols start in `symbols`.
    lengths: [(u32, u32, usize); LONGEST + 1],
    /// Symbols in code order.
    symbols: Vec<u16>,
}

fn huffman() -> &'static Huffman {
    static TABLE: OnceLock<Huffman> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut symbols: Vec<u16> = (0..=EOS).collect();
        symbols.sort_by_key(|&symbol| (CODE_LENGTHS[usize::from(symbol)], symbol));
        let mut short = [(0, 0); 256];
        let mut lengths = [(0, 0, 0); LONGEST + 1];
        let mut code: u32 = 0;
        let mut previous = 0;
        for (at, &symbol) in symbols.iter().enumerate() {
            let length = usize::from(CODE_LENGTHS[usize::from(symbol)]);
            if at > 0 {
                code = (code + 1) << (length - previous);
            }
            previous = length;
            let entry = &mut lengths[length];
            if entry.1 == 0 {
                *entry = (code, 0, at);
            }
            entry.1 += 1;
            if length <= 8 {
                let first = (code << (8 - length)) as usize;
                for slot in &mut short[first..first + (1 << (8 - length))] {
                    *slot = (symbol, length as u8);
                }
            }
        }
        Huffman {
            short,
            lengths,
            symbols,
        }
    })
}

/// Decodes a Huffman-coded string (§5.2): a bad code, the EOS symbol, or padding that is not
/// the EOS code's first bits or is 8 bits or more, is an error. Input is taken 7 bytes at a
/// time, when a short code might not fit in what is held; output a stack buffer at a time.
fn huffman_decode(coded: &[u8], decoded: &mut BytesMut) -> Result<(), DecodeError> {
    let table = huffman();
    let mut bits: u64 = 0;
    let mut held = 0usize;
    let mut input = coded.iter();
    let mut exhausted = false;
    let mut out = [0u8; 64];
    let mut written = 0;
    loop {
        if held < 8 && !exhausted {
            exhausted = refill(&mut input, &mut bits, &mut held);
        }
        if held == 0 {
            break;
        }
        let next8 = match held >= 8 {
            true => (bits >> (held - 8)) as usize & 0xff,
            false => (bits << (8 - held)) as usize & 0xff,
        };
        let (symbol, length) = table.short[next8];
        let (symbol, length) = match usize::from(length) {
            length if length > 0 && length <= held => (symbol, length),
            // A longer code may need more than is held.
            _ if held < LONGEST && !exhausted => {
                exhausted = refill(&mut input, &mut bits, &mut held);
                continue;
            }
            _ => match long_code(table, bits, held) {
                Some(found) => found,
                // What is left must be padding: fewer than 8 bits, all ones (EOS's first).
                None if held < 8 && bits & ((1 << held) - 1) == (1 << held) - 1 => break,
                None => return Err(DecodeError::Huffman),
            },
        };
        if symbol == EOS {
            return Err(DecodeError::Huffman);
        }
        if written == out.len() {
            decoded.extend_from_slice(&out);
            written = 0;
        }
        out[written] = symbol as u8;
        written += 1;
        // Bits above `held` are left in place: every read masks them off.
        held -= length;
    }
    decoded.extend_from_slice(&out[..written]);
    Ok(())
}

/// Takes input bytes into `bits` while they fit (at most 64 bits held); true once the input
/// is spent.
fn refill(input: &mut std::slice::Iter<'_, u8>, bits: &mut u64, held: &mut usize) -> bool {
    while *held <= 56 {
        let Some(&byte) = input.next() else {
            return true;
        };
        *bits = *bits << 8 | u64::from(byte);
        *held += 8;
    }
    false
}

/// The symbol of a code longer than 8 bits starting the `held` bits of `bits`.
fn long_code(table: &Huffman, bits: u64, held: usize) -> Option<(u16, usize)> {
    for length in 9..=LONGEST.min(held) {
        let (first, count, start) = table.lengths[length];
        let code = (bits >> (held - length)) as u32 & ((1 << length) - 1);
        if count > 0 && code >= first && code < first + count {
            return Some((table.symbols[start + (code - first) as usize], length));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Bytes {
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect::<Vec<u8>>()
            .into()
    }

    fn decode(decoder: &mut Decoder, block: &str) -> Vec<(Name, String)> {
        let mut fields = Vec::new();
        decoder
            .decode(hex(block), |name, value| {
                fields.push((name, String::from_utf8(value.to_vec()).unwrap()))
            })
            .unwrap();
        fields
    }

    fn field(name: &str, value: &str) -> (Name, String) {
        (Name::parse(name.as_bytes()), value.to_owned())
    }

    /// RFC 7541 Appendix C.4: requests with Huffman coding, one connection's table.
    #[test]
    fn the_specs_huffman_coded_requests() {
        let mut decoder = Decoder::new(4096);
        assert_eq!(
            decode(&mut decoder, "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"),
            [
                field(":method", "GET"),
                field(":scheme", "http"),
                field(":path", "/"),
                field(":authority", "www.example.com"),
            ]
        );
        assert_eq!(decoder.size, 57);
        assert_eq!(
            decode(&mut decoder, "8286 84be 5886 a8eb 1064 9cbf"),
            [
                field(":method", "GET"),
                field(":scheme", "http"),
                field(":path", "/"),
                field(":authority", "www.example.com"),
                field("cache-control", "no-cache"),
            ]
        );
        assert_eq!(
            decode(
                &mut decoder,
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"
            ),
            [
                field(":method", "GET"),
                field(":scheme", "https"),
                field(":path", "/index.html"),
                field(":authority", "www.example.com"),
                field("custom-key", "custom-value"),
            ]
        );
        assert_eq!(decoder.size, 164);
    }

    /// RFC 7541 Appendix C.5: responses that evict entries from a 256-byte table.
    #[test]
    fn the_specs_responses_evict_the_oldest_entries() {
        let mut decoder = Decoder::new(256);
        let first = "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 \
                     3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 \
                     7861 6d70 6c65 2e63 6f6d";
        let date = "Mon, 21 Oct 2013 20:13:21 GMT";
        assert_eq!(
            decode(&mut decoder, first),
            [
                field(":status", "302"),
                field("cache-control", "private"),
                field("date", date),
                field("location", "https://www.example.com"),
            ]
        );
        assert_eq!(decoder.size, 222);
        // ":status: 307" evicts ":status: 302".
        assert_eq!(
            decode(&mut decoder, "4803 3330 37c1 c0bf"),
            [
                field(":status", "307"),
                field("cache-control", "private"),
                field("date", date),
                field("location", "https://www.example.com"),
            ]
        );
        assert_eq!(decoder.size, 222);
        assert_eq!(decoder.table.len(), 4);
    }

    #[test]
    fn every_octet_decodes_from_its_code() {
        // Each symbol written with its canonical code, then padded with ones.
        let table = huffman();
        let mut codes = vec![0u32; 257];
        for (length, &(first, count, start)) in table.lengths.iter().enumerate() {
            let _ = length;
            for offset in 0..count {
                codes[usize::from(table.symbols[start + offset as usize])] = first + offset;
            }
        }
        let mut coded = Vec::new();
        let (mut bits, mut held) = (0u64, 0usize);
        for symbol in 0..=255u8 {
            bits =
                bits << CODE_LENGTHS[usize::from(symbol)] | u64::from(codes[usize::from(symbol)]);
            held += usize::from(CODE_LENGTHS[usize::from(symbol)]);
            while held >= 8 {
                coded.push((bits >> (held - 8)) as u8);
                held -= 8;
                bits &= (1 << held) - 1;
            }
        }
        if held > 0 {
            coded.push(((bits << (8 - held)) | ((1 << (8 - held)) - 1)) as u8);
        }
        let mut decoded = BytesMut::new();
        huffman_decode(&coded, &mut decoded).unwrap();
        assert_eq!(decoded, (0..=255u8).collect::<Vec<_>>());
    }

    #[test]
    fn bad_input_is_an_error_never_a_panic() {
        let cases: [(&str, DecodeError); 8] = [
            // An index past both tables.
            ("be", DecodeError::BadIndex),
            ("80", DecodeError::BadIndex),
            // A string longer than the block.
            ("400a 6b", DecodeError::Truncated),
            // An integer that never ends.
            ("7fff ffff ffff ff", DecodeError::Overflow),
            ("7f", DecodeError::Truncated),
            // Padding of zeros; padding of a whole byte; EOS itself.
            ("4081 00 80", DecodeError::Huffman),
            ("4082 1fff 80", DecodeError::Huffman),
            ("4084 ffff ffff 80", DecodeError::Huffman),
        ];
        for (block, expected) in cases {
            let mut decoder = Decoder::new(4096);
            assert_eq!(
                decoder.decode(hex(block), |_, _| {}),
                Err(expected),
                "{block}"
            );
        }
        let mut decoder = Decoder::new(4096);
        // A size update past what SETTINGS allow, and one after a field.
        assert_eq!(
            decoder.decode(hex("3fe2 1f"), |_, _| {}),
            Err(DecodeError::BadSizeUpdate)
        );
        assert_eq!(
            decoder.decode(hex("8220"), |_, _| {}),
            Err(DecodeError::BadSizeUpdate)
        );
    }

    #[test]
    fn a_name_http2_forbids_is_malformed_but_decoded_through() {
        let mut decoder = Decoder::new(4096);
        // "Upper: x" (upper case), then ":status: 200" from the static table.
        let fields = decode(&mut decoder, "0005 5570 7065 7201 7888");
        assert_eq!(
            fields,
            [
                (Name::Malformed(5), "x".to_owned()),
                field(":status", "200")
            ]
        );
    }
}
