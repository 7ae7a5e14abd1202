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
    /// On a connection to a backend: the values it sent to be indexed lately.
    remembered: Option<Box<Remembered>>,
}

/// The Huffman-coded values a peer sent to be indexed lately, by their code. A peer that keeps
/// no encoder table sends the same fields as new literals in every block (nginx does so with
/// `server`, `date`, `content-type` and `content-length` in every answer), and a code seen
/// before costs a comparison instead of a decoding. Kept for backends only: a client's
/// encoder (browsers, h2load, curl) indexes what it repeats.
#[derive(Default)]
struct Remembered {
    slots: [(Code, Bytes); REMEMBERED],
}

/// Slots in [`Remembered`], chosen by a code's length and first byte.
const REMEMBERED: usize = 8;

/// The longest code [`Remembered`] keeps: a date's takes 22 bytes.
const CODE_KEPT: usize = 32;

/// A short code's bytes, kept by value: a slice of the block would hold its whole read buffer.
#[derive(Default)]
struct Code {
    length: u8,
    bytes: [u8; CODE_KEPT],
}

impl Remembered {
    fn slot(code: &[u8]) -> usize {
        (code.len() ^ usize::from(code[0])) % REMEMBERED
    }

    fn get(&self, code: &[u8]) -> Option<Bytes> {
        let (kept, value) = &self.slots[Self::slot(code)];
        (usize::from(kept.length) == code.len() && kept.bytes[..code.len()] == *code)
            .then(|| value.clone())
    }

    fn keep(&mut self, code: &[u8], value: &Bytes) {
        let (kept, kept_value) = &mut self.slots[Self::slot(code)];
        kept.length = code.len() as u8;
        kept.bytes[..code.len()].copy_from_slice(code);
        *kept_value = value.clone();
    }
}

/// A string literal's bytes: where they live says whether the table may keep them as they are.
enum Literal {
    /// Sent as is: a slice of the block.
    Slice(Bytes),
    /// Huffman-decoded into bytes of its own.
    Decoded(Bytes),
}

impl Literal {
    fn into_bytes(self) -> Bytes {
        match self {
            Literal::Slice(bytes) | Literal::Decoded(bytes) => bytes,
        }
    }
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
            remembered: None,
        }
    }

    /// A decoder for a backend's blocks: it remembers the values sent to be indexed
    /// ([`Remembered`]).
    pub fn remembering(allowed: usize) -> Decoder {
        Decoder {
            remembered: Some(Box::default()),
            ..Decoder::new(allowed)
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
                // Literal with incremental indexing (§6.2.1). The table keeps a value sent as
                // is as a copy: a slice of the block would keep the whole read buffer it came
                // in. A Huffman-coded one was decoded into bytes of its own already.
                let (name, value) = self.literal(&mut block, 6, true)?;
                let value = match value {
                    Literal::Decoded(value) => value,
                    Literal::Slice(value) => {
                        self.decoded.extend_from_slice(&value);
                        self.decoded.split().freeze()
                    }
                };
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
                let (name, value) = self.literal(&mut block, 4, false)?;
                field(name, value.into_bytes());
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

    /// A literal field's name and value; the value is looked up in and kept in what the
    /// decoder remembers when it is to be indexed (`indexing`).
    fn literal(
        &mut self,
        block: &mut Bytes,
        prefix: u32,
        indexing: bool,
    ) -> Result<(Name, Literal), DecodeError> {
        let index = integer(block, prefix)?;
        let name = match index {
            0 => Name::parse(&self.string(block, false)?.into_bytes()),
            _ => self.entry(index)?.0,
        };
        Ok((name, self.string(block, indexing)?))
    }

    /// A string literal (§5.2): a slice of the block unless Huffman-coded. A short Huffman
    /// code is looked up in and kept in what the decoder remembers when `remember` says so.
    fn string(&mut self, block: &mut Bytes, remember: bool) -> Result<Literal, DecodeError> {
        let huffman = block.first().is_some_and(|&first| first & 0x80 != 0);
        let length = integer(block, 7)?;
        if length > block.len() {
            return Err(DecodeError::Truncated);
        }
        if !huffman {
            return Ok(Literal::Slice(block.split_to(length)));
        }
        let code = &block[..length];
        let remembered = match self.remembered.as_deref_mut() {
            Some(remembered) if remember && (1..=CODE_KEPT).contains(&length) => {
                if let Some(value) = remembered.get(code) {
                    block.advance(length);
                    return Ok(Literal::Decoded(value));
                }
                Some(remembered)
            }
            _ => None,
        };
        // A code is 5 bits or more: at most 8 symbols in 5 bytes.
        let most = length * 8 / 5 + 1;
        if self.decoded.capacity() < most {
            self.decoded.reserve(most.max(DECODED_ROOM));
        }
        huffman_decode(code, &mut self.decoded)?;
        let value = self.decoded.split().freeze();
        if let Some(remembered) = remembered {
            remembered.keep(code, &value);
        }
        block.advance(length);
        Ok(Literal::Decoded(value))
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

/// Each symbol's canonical code (RFC 7541 Appendix B) and its length in bits, by symbol.
fn codes() -> [(u32, u8); 257] {
    let mut symbols: Vec<u16> = (0..=EOS).collect();
    symbols.sort_by_key(|&symbol| (CODE_LENGTHS[usize::from(symbol)], symbol));
    let mut codes = [(0, 0); 257];
    let (mut code, mut previous) = (0u32, 0u8);
    for (at, &symbol) in symbols.iter().enumerate() {
        let length = CODE_LENGTHS[usize::from(symbol)];
        if at > 0 {
            code = (code + 1) << (length - previous);
        }
        previous = length;
        codes[usize::from(symbol)] = (code, length);
    }
    codes
}

/// One step of the decoding automaton: where four more bits lead from a state, and what they
/// complete on the way.
#[derive(Clone, Copy, Default)]
struct Step {
    /// The state after the four bits: an inner node of the code's tree (0 is its root).
    next: u8,
    /// The symbol completed within the four bits, when [`EMITS`] says one was (codes are 5
    /// bits or longer, so four bits complete at most one).
    symbol: u8,
    flags: u8,
}

/// A symbol was completed.
const EMITS: u8 = 1;
/// The bits reached EOS, which a string must never hold (§5.2).
const FAILS: u8 = 2;
/// Input may end at the state reached: it is the root, or fewer than 8 bits, all ones, into a
/// code (padding, EOS's first bits).
const MAY_END: u8 = 4;

/// The canonical code as an automaton read four bits at a time: 256 states (the code tree's
/// inner nodes) by 16 nibbles, each step one table read, whatever the codes' lengths.
fn huffman() -> &'static [[Step; 16]; 256] {
    static TABLE: OnceLock<Box<[[Step; 16]; 256]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        // The tree: inner nodes by number, each child another node or a leaf's symbol.
        #[derive(Clone, Copy)]
        enum Child {
            Empty,
            Node(u8),
            Leaf(u16),
        }
        let mut tree: Vec<[Child; 2]> = vec![[Child::Empty; 2]];
        // Whether a node may end a string: its path is fewer than 8 ones.
        let mut may_end = vec![true];
        for (symbol, &(code, length)) in codes().iter().enumerate() {
            let mut node = 0;
            for depth in (0..length).rev() {
                let bit = (code >> depth & 1) as usize;
                if depth == 0 {
                    tree[node][bit] = Child::Leaf(symbol as u16);
                    break;
                }
                node = match tree[node][bit] {
                    Child::Node(next) => usize::from(next),
                    _ => {
                        let next = tree.len();
                        tree.push([Child::Empty; 2]);
                        let path_len = usize::from(length - depth);
                        may_end.push(may_end[node] && bit == 1 && path_len < 8);
                        tree[node][bit] = Child::Node(next as u8);
                        next
                    }
                };
            }
        }
        let mut table = Box::new([[Step::default(); 16]; 256]);
        for (state, steps) in table.iter_mut().enumerate().take(tree.len()) {
            for (nibble, step) in steps.iter_mut().enumerate() {
                let mut node = state;
                for shift in (0..4).rev() {
                    match tree[node][nibble >> shift & 1] {
                        Child::Node(next) => node = usize::from(next),
                        Child::Leaf(EOS) | Child::Empty => {
                            step.flags = FAILS;
                            break;
                        }
                        Child::Leaf(symbol) => {
                            step.symbol = symbol as u8;
                            step.flags = EMITS;
                            node = 0;
                        }
                    }
                }
                if step.flags != FAILS {
                    step.next = node as u8;
                    if may_end[node] {
                        step.flags |= MAY_END;
                    }
                }
            }
        }
        table
    })
}

/// Decodes a Huffman-coded string (§5.2): a bad code, the EOS symbol, or padding that is not
/// the EOS code's first bits or is 8 bits or more, is an error. Each half byte is one step of
/// the automaton; output goes a stack buffer at a time.
fn huffman_decode(coded: &[u8], decoded: &mut BytesMut) -> Result<(), DecodeError> {
    let table = huffman();
    let mut state = 0u8;
    let mut may_end = true;
    let mut out = [0u8; 64];
    let mut written = 0;
    for &byte in coded {
        // Two nibbles make at most two symbols.
        if written + 2 > out.len() {
            decoded.extend_from_slice(&out[..written]);
            written = 0;
        }
        for nibble in [byte >> 4, byte & 0x0f] {
            let step = table[usize::from(state)][usize::from(nibble)];
            if step.flags & FAILS != 0 {
                return Err(DecodeError::Huffman);
            }
            out[written] = step.symbol;
            written += usize::from(step.flags & EMITS);
            state = step.next;
            may_end = step.flags & MAY_END != 0;
        }
    }
    if !may_end {
        return Err(DecodeError::Huffman);
    }
    decoded.extend_from_slice(&out[..written]);
    Ok(())
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

    /// `text` in the canonical code, padded with ones (§5.2).
    fn huffman_encode(text: &[u8]) -> Vec<u8> {
        let codes = codes();
        let mut coded = Vec::new();
        let (mut bits, mut held) = (0u64, 0usize);
        for &symbol in text {
            let (code, length) = codes[usize::from(symbol)];
            bits = bits << length | u64::from(code);
            held += usize::from(length);
            while held >= 8 {
                coded.push((bits >> (held - 8)) as u8);
                held -= 8;
                bits &= (1 << held) - 1;
            }
        }
        if held > 0 {
            coded.push(((bits << (8 - held)) | ((1 << (8 - held)) - 1)) as u8);
        }
        coded
    }

    #[test]
    fn every_octet_decodes_from_its_code() {
        let octets: Vec<u8> = (0..=255u8).collect();
        let mut decoded = BytesMut::new();
        huffman_decode(&huffman_encode(&octets), &mut decoded).unwrap();
        assert_eq!(decoded, octets);
    }

    /// A backend's decoder remembers the values sent to be indexed by their codes: a code seen
    /// again gives its value without a decoding, another code in the same slot gives its own,
    /// and the dynamic table ends as a decoder's that remembers nothing.
    #[test]
    fn a_remembering_decoder_gives_each_code_its_own_value() {
        // `server` (static name 54) with a Huffman value, to be indexed (§6.2.1).
        let block = |value: &str| {
            let code = huffman_encode(value.as_bytes());
            let mut block = vec![0x40 | 54, 0x80 | code.len() as u8];
            block.extend_from_slice(&code);
            Bytes::from(block)
        };
        let values = [
            "nginx/1.22.1",
            "nginx/1.22.1",
            // The same length and first byte: the same slot.
            "nginx/1.22.2",
            "nginx/1.22.1",
            "nginx/1.22.2",
            "caddy",
            "nginx/1.22.1",
        ];
        assert_eq!(
            Remembered::slot(&huffman_encode(b"nginx/1.22.1")),
            Remembered::slot(&huffman_encode(b"nginx/1.22.2"))
        );
        let mut remembering = Decoder::remembering(4096);
        let mut plain = Decoder::new(4096);
        for value in values {
            let mut given = Vec::new();
            for decoder in [&mut remembering, &mut plain] {
                decoder
                    .decode(block(value), |name, value| given.push((name, value)))
                    .unwrap();
            }
            assert_eq!(given[0], (Name::parse(b"server"), Bytes::from(value)));
            assert_eq!(given[0], given[1]);
        }
        assert_eq!(remembering.table, plain.table);
        assert_eq!(remembering.size, plain.size);
        // Literals without indexing are neither looked up nor kept.
        let code = huffman_encode(b"kept?");
        let mut unindexed = vec![0x0f, 54 - 15, 0x80 | code.len() as u8];
        unindexed.extend_from_slice(&code);
        remembering
            .decode(Bytes::from(unindexed), |_, _| {})
            .unwrap();
        assert!(remembering.remembered.unwrap().get(&code).is_none());
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
