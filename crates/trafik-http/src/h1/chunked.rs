//! The chunked transfer coding (RFC 9112 §7.1), read by one strict state machine fed slices,
//! and framed anew as it is read, whichever way the body goes: an answer's body in the buffer
//! it was read into ([`Chunked::relay`]), a request's into another one ([`Chunked::decode`]).
//! Framed anew, a body keeps its chunks and drops what the next hop must not be handed: chunk
//! extensions, blanks after a size, leading zeros of a size but one, and the trailer section
//! (a `Set-Cookie` there would reach a client that never saw it in a head). Every byte kept is
//! one that came, in order, so a body framed anew is never longer than it came and its first
//! bytes can be rewritten where they lie. Its grammar and limits are hyper's, so both engines
//! refuse the same bodies: hex digits, blanks, an extension of any bytes but CR and LF (16 KiB
//! in all), CRLF, the data, CRLF; after the last chunk, trailer field lines as httparse reads
//! them, bounded in bytes and lines.
//!
//! It is stricter than hyper in one place: hyper takes a bare LF inside a trailer line (httparse
//! reads it as a line's end). A reader that does not could find such a body ending elsewhere,
//! so a bare LF breaks it.

use std::io::{self, IoSlice, Write};
use std::ops::Range;

use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::scan::{is_field_value, is_token};

/// The chunk that ends a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Chunk-extension bytes over the whole body stay short of this (hyper's limit).
const EXTENSION_LIMIT: u64 = 16 * 1024;
/// The trailer section, its closing blank line included, stays short of this many bytes
/// (hyper's limit).
const TRAILER_LIMIT: usize = 16 * 1024;
/// The trailer lines an answer may end with: as many as hyper's client takes header fields.
pub const ANSWER_TRAILER_LINES: usize = 100;

/// A chunked body that breaks its framing at byte `at` of the slice fed last.
#[derive(Debug, PartialEq, Eq)]
pub struct BadChunk {
    pub at: usize,
}

/// What relaying one slice of a body came to.
#[derive(Debug, PartialEq, Eq)]
pub struct Relayed {
    /// The slice's first `framed` bytes now hold what the next hop gets of it.
    pub framed: usize,
    /// The offset just past the body's end once it is in the slice, or where it broke (what
    /// came before the break is framed).
    pub end: Result<Option<usize>, BadChunk>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before a chunk size's first digit.
    Start,
    Size,
    /// Blanks after the size.
    SizeBlank,
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// After the last chunk, or a trailer line: a blank line ends the body.
    EndCr,
    TrailerName,
    TrailerValue,
    TrailerLf,
    EndLf,
    Done,
}

/// Where a chunked body stands, fed its bytes as they come.
#[derive(Debug)]
pub struct Chunked {
    state: State,
    /// The size of the chunk being read, then how much of its data is still to come.
    size: u64,
    extension_bytes: u64,
    trailer_bytes: usize,
    trailer_lines: usize,
    trailer_line_limit: usize,
    carried_data: bool,
}

/// Where the bytes a body keeps go, in runs of the slice being read.
trait Kept {
    /// Whether only the chunks' data is kept (the body decoded), not the framing around it.
    const DATA_ONLY: bool = false;
    /// The slice being read.
    fn input(&self) -> &[u8];
    /// Keeps the slice's bytes in `run`: runs come in order and never overlap.
    fn keep(&mut self, run: Range<usize>);
}

/// Kept bytes moved to the front of the slice they were read from: a run starts at or after
/// where the bytes kept before it end, so what is still to be read is never overwritten. A
/// body that drops nothing moves nothing.
struct InPlace<'a> {
    slice: &'a mut [u8],
    framed: usize,
}

impl Kept for InPlace<'_> {
    fn input(&self) -> &[u8] {
        self.slice
    }

    fn keep(&mut self, run: Range<usize>) {
        let length = run.len();
        if run.start != self.framed {
            self.slice.copy_within(run, self.framed);
        }
        self.framed += length;
    }
}

/// Kept bytes appended to another buffer.
struct Appended<'a> {
    input: &'a [u8],
    out: &'a mut Vec<u8>,
}

impl Kept for Appended<'_> {
    fn input(&self) -> &[u8] {
        self.input
    }

    fn keep(&mut self, run: Range<usize>) {
        self.out.extend_from_slice(&self.input[run]);
    }
}

/// The chunks' data alone appended to another buffer: the body decoded.
struct Data<'a> {
    input: &'a [u8],
    out: &'a mut Vec<u8>,
}

impl Kept for Data<'_> {
    const DATA_ONLY: bool = true;

    fn input(&self) -> &[u8] {
        self.input
    }

    fn keep(&mut self, run: Range<usize>) {
        self.out.extend_from_slice(&self.input[run]);
    }
}

/// Bytes kept and not yet handed over: adjacent ones go in one run.
struct Run(Range<usize>);

impl Run {
    fn add(&mut self, kept: &mut impl Kept, bytes: Range<usize>) {
        if self.0.end != bytes.start {
            self.hand_over(kept);
            self.0 = bytes.start..bytes.start;
        }
        self.0.end = bytes.end;
    }

    fn hand_over(&mut self, kept: &mut impl Kept) {
        if !self.0.is_empty() {
            kept.keep(self.0.clone());
        }
        self.0.start = self.0.end;
    }
}

impl Chunked {
    /// A body that may end with up to `trailer_line_limit` trailer lines: the header-field
    /// limit of the hyper side that reads the same body on the other engine.
    pub fn new(trailer_line_limit: usize) -> Self {
        Chunked {
            state: State::Start,
            size: 0,
            extension_bytes: 0,
            trailer_bytes: 0,
            trailer_lines: 0,
            trailer_line_limit,
            carried_data: false,
        }
    }

    /// Follows the body over `slice`, framing it anew at the slice's front.
    pub fn relay(&mut self, slice: &mut [u8]) -> Relayed {
        let mut kept = InPlace { slice, framed: 0 };
        let end = self.read(&mut kept);
        Relayed {
            framed: kept.framed,
            end,
        }
    }

    /// Decodes `input`, appending it framed anew to `out`: the offset just past the body's end
    /// once it is in `input`.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<Option<usize>, BadChunk> {
        self.read(&mut Appended { input, out })
    }

    /// Decodes `input`, appending only the chunks' data to `out` (no framing at all): the
    /// offset just past the body's end once it is in `input`.
    pub fn data(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<Option<usize>, BadChunk> {
        self.read(&mut Data { input, out })
    }

    /// Whether the body has ended.
    pub fn ended(&self) -> bool {
        self.state == State::Done
    }

    /// Whether chunk data came before the end, or the break: hyper's server has not flushed an
    /// answer's head yet when its body breaks before any data in the read that brought the
    /// head, so that answer sends nothing.
    pub fn carried_data(&self) -> bool {
        self.carried_data
    }

    fn read<K: Kept>(&mut self, kept: &mut K) -> Result<Option<usize>, BadChunk> {
        let length = kept.input().len();
        let mut run = Run(0..0);
        let mut at = 0;
        let verdict = loop {
            if at == length {
                break Ok(None);
            }
            if self.state == State::Data {
                // Data goes in one piece, not byte by byte.
                let wanted = usize::try_from(self.size).unwrap_or(usize::MAX);
                let data = at..length.min(at.saturating_add(wanted));
                self.size -= data.len() as u64;
                self.carried_data = true;
                if self.size == 0 {
                    self.state = State::DataCr;
                }
                at = data.end;
                run.add(kept, data);
                continue;
            }
            let Some((state, keeps)) = self.next(kept.input()[at]) else {
                break Err(BadChunk { at });
            };
            self.state = state;
            if keeps && !K::DATA_ONLY {
                run.add(kept, at..at + 1);
            }
            at += 1;
            if state == State::Done {
                break Ok(Some(at));
            }
        };
        run.hand_over(kept);
        verdict
    }

    /// The state after `byte` and whether the body framed anew keeps it, or none when it
    /// breaks the framing.
    fn next(&mut self, byte: u8) -> Option<(State, bool)> {
        use State::*;
        if matches!(
            self.state,
            EndCr | TrailerName | TrailerValue | TrailerLf | EndLf
        ) {
            self.trailer_bytes += 1;
            if self.trailer_bytes >= TRAILER_LIMIT {
                return None;
            }
        }
        Some(match (self.state, byte) {
            (Start | Size, _) if byte.is_ascii_hexdigit() => {
                let digit = (byte as char).to_digit(16).map(u64::from)?;
                // A size's first digit is kept, and then every one but its leading zeros.
                let keeps = self.state == Start || self.size != 0 || digit != 0;
                self.size = self.size.checked_mul(16)?.checked_add(digit)?;
                (Size, keeps)
            }
            (Size | SizeBlank, b' ' | b'\t') => (SizeBlank, false),
            (Size | SizeBlank, b';') => (Extension, false),
            (Size | SizeBlank | Extension, b'\r') => (SizeLf, true),
            (Extension, b'\n') => return None,
            (Extension, _) => {
                self.extension_bytes += 1;
                if self.extension_bytes >= EXTENSION_LIMIT {
                    return None;
                }
                (Extension, false)
            }
            (SizeLf, b'\n') if self.size == 0 => (EndCr, true),
            (SizeLf, b'\n') => (Data, true),
            (DataCr, b'\r') => (DataLf, true),
            (DataLf, b'\n') => (Start, true),
            (EndCr, b'\r') => (EndLf, true),
            (EndCr | TrailerName, _) if is_token(byte) => (TrailerName, false),
            (TrailerName, b':') => (TrailerValue, false),
            (TrailerValue, b'\r') => (TrailerLf, false),
            (TrailerValue, _) if is_field_value(byte) => (TrailerValue, false),
            (TrailerLf, b'\n') if self.trailer_lines < self.trailer_line_limit => {
                self.trailer_lines += 1;
                (EndCr, false)
            }
            (EndLf, b'\n') => (Done, true),
            _ => return None,
        })
    }
}

/// Writes `head` (if any) and `data` as one chunk (none when `data` is empty) in one `writev`
/// where the socket takes it all.
pub async fn send_chunk<W: AsyncWrite + Unpin>(
    out: &mut W,
    head: &[u8],
    data: &[u8],
) -> io::Result<()> {
    let mut size = [0u8; 18];
    let size = if data.is_empty() {
        &[][..]
    } else {
        let mut cursor = &mut size[..];
        let _ = write!(cursor, "{:x}\r\n", data.len());
        let left = cursor.len();
        &size[..18 - left]
    };
    let end: &[u8] = if data.is_empty() { b"" } else { b"\r\n" };
    let mut slices = [
        IoSlice::new(head),
        IoSlice::new(size),
        IoSlice::new(data),
        IoSlice::new(end),
    ];
    let mut slices = &mut slices[..];
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        let written = out.write_vectored(slices).await?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, written);
    }
    Ok(())
}

/// RFC 9112 §7.1, clause by clause. Every body is read in both modes and fed in two pieces
/// split at every offset (a spread of them for a long body): the verdict must not depend on
/// either.
#[cfg(test)]
mod tests {
    use super::*;

    /// Where `body` ends (`Ok(Some)`), that it is not over yet (`Ok(None)`), or at which of its
    /// bytes it breaks (`Err`), after checking that relaying and decoding agree on it, and on
    /// how it is framed anew, fed in two pieces split anywhere.
    fn verdict(body: &[u8]) -> Result<Option<usize>, usize> {
        let (framed, whole) = relayed(body, body.len());
        // Every split of a short body; of a long one, a spread and the last few.
        let stride = body.len() / 256 + 1;
        let splits = (0..=body.len()).filter(|split| split % stride == 0 || body.len() - split < 8);
        for split in splits {
            assert_eq!(
                relayed(body, split),
                (framed.clone(), whole),
                "relayed, split at {split}"
            );
            assert_eq!(
                decoded(body, split),
                (framed.clone(), whole),
                "decoded, split at {split}"
            );
            // Decoded to its data alone, it ends (or breaks) at the same byte, with the data
            // the framed copy carries.
            let (plain, end) = unframed(body, split);
            assert_eq!(end, whole, "data, split at {split}");
            if let Ok(Some(_)) = whole {
                assert_eq!(plain, data(&framed), "data, split at {split}");
            }
        }
        whole
    }

    /// The body decoded to its data alone: the data, and the verdict.
    fn unframed(body: &[u8], split: usize) -> (Vec<u8>, Result<Option<usize>, usize>) {
        let mut chunked = Chunked::new(ANSWER_TRAILER_LINES);
        let mut out = Vec::new();
        let end = fed(body, split, |piece| chunked.data(piece, &mut out));
        (out, end)
    }

    /// `body` given to `read` in two pieces split at `split`: the verdict, in offsets of `body`.
    fn fed(
        body: &[u8],
        split: usize,
        mut read: impl FnMut(&[u8]) -> Result<Option<usize>, BadChunk>,
    ) -> Result<Option<usize>, usize> {
        match read(&body[..split]) {
            Ok(Some(end)) => return Ok(Some(end)),
            Ok(None) => {}
            Err(BadChunk { at }) => return Err(at),
        }
        match read(&body[split..]) {
            Ok(end) => Ok(end.map(|end| end + split)),
            Err(BadChunk { at }) => Err(at + split),
        }
    }

    /// The body relayed, each piece framed anew in a buffer of its own as it is read from a
    /// socket: what went on, and the verdict.
    fn relayed(body: &[u8], split: usize) -> (Vec<u8>, Result<Option<usize>, usize>) {
        let mut chunked = Chunked::new(ANSWER_TRAILER_LINES);
        let mut out = Vec::new();
        let end = fed(body, split, |piece| {
            let mut buffer = piece.to_vec();
            let relayed = chunked.relay(&mut buffer);
            out.extend_from_slice(&buffer[..relayed.framed]);
            relayed.end
        });
        (out, end)
    }

    /// The body decoded into another buffer: what went on, and the verdict.
    fn decoded(body: &[u8], split: usize) -> (Vec<u8>, Result<Option<usize>, usize>) {
        let mut chunked = Chunked::new(ANSWER_TRAILER_LINES);
        let mut out = Vec::new();
        let end = fed(body, split, |piece| chunked.decode(piece, &mut out));
        (out, end)
    }

    /// What goes on of a body that ends.
    fn framed(body: &[u8]) -> Vec<u8> {
        let (out, end) = relayed(body, body.len());
        assert!(end.is_ok_and(|end| end.is_some()), "{end:?}");
        out
    }

    fn ends(body: &[u8]) -> bool {
        verdict(body) == Ok(Some(body.len()))
    }

    /// The data of a chunked body framed as [`Chunked::decode`] frames it: plain sizes and
    /// CRLFs, nothing else.
    fn data(mut chunked: &[u8]) -> Vec<u8> {
        let mut data = Vec::new();
        loop {
            let line = chunked.iter().position(|&b| b == b'\n').unwrap();
            let size = std::str::from_utf8(&chunked[..line - 1]).unwrap();
            let size = usize::from_str_radix(size, 16).unwrap();
            chunked = &chunked[line + 1..];
            if size == 0 {
                assert_eq!(chunked, b"\r\n");
                return data;
            }
            data.extend_from_slice(&chunked[..size]);
            assert_eq!(&chunked[size..size + 2], b"\r\n");
            chunked = &chunked[size + 2..];
        }
    }

    #[test]
    fn chunk_size_is_one_or_more_hex_digits_of_either_case() {
        let body = [
            &b"1a\r\n"[..],
            &[b'x'; 26],
            b"\r\n1A\r\n",
            &[b'y'; 26],
            b"\r\n0\r\n\r\n",
        ];
        assert!(ends(&body.concat()));
        assert!(ends(b"000000000000000000000001\r\nx\r\n0000\r\n\r\n"));
        assert_eq!(verdict(b"\r\n"), Err(0));
        assert_eq!(verdict(b"g\r\n"), Err(0));
        assert_eq!(verdict(b" 4\r\n"), Err(0));
        assert_eq!(verdict(b"+4\r\n"), Err(0));
        assert_eq!(verdict(b";x\r\n"), Err(0));
        assert_eq!(verdict(b"0x4\r\n"), Err(1));
    }

    #[test]
    fn a_chunk_size_past_64_bits_is_refused_not_wrapped() {
        assert_eq!(verdict(b"ffffffffffffffff\r\n"), Ok(None));
        assert_eq!(verdict(b"1ffffffffffffffff\r\n"), Err(16));
        assert_eq!(verdict(b"10000000000000000\r\n"), Err(16));
    }

    #[test]
    fn only_blanks_an_extension_or_crlf_follow_the_chunk_size() {
        assert!(ends(b"4 \t \r\nwiki\r\n0\t\r\n\r\n"));
        assert_eq!(verdict(b"4 x\r\nwiki\r\n0\r\n\r\n"), Err(2));
        assert_eq!(verdict(b"4 4\r\n"), Err(2));
        assert_eq!(verdict(b"4x\r\n"), Err(1));
        assert_eq!(verdict(b"4\n"), Err(1));
        assert_eq!(verdict(b"4\r\r\n"), Err(2));
        assert_eq!(verdict(b"4\rwiki"), Err(2));
    }

    #[test]
    fn chunk_extensions_are_skipped_whatever_they_hold_and_never_passed_on() {
        let body = b"4;name=value;q=\"a;b\" \t\r\nwiki\r\n0 ; last\r\n\r\n";
        assert!(ends(body));
        assert_eq!(framed(body), b"4\r\nwiki\r\n0\r\n\r\n");
    }

    /// Framed anew in the buffer it came in: blanks, extensions, leading zeros but one and the
    /// trailer section go, the rest moves up, whatever the split.
    #[test]
    fn a_body_is_framed_anew_where_it_lies() {
        let body = b"0004 ;a=b\r\nwiki\r\n0a\r\n0123456789\r\n10\r\n0123456789abcdef\r\n000;z\r\nSet-Cookie: x=1\r\nT: 2\r\n\r\n";
        assert_eq!(
            framed(body),
            b"04\r\nwiki\r\n0a\r\n0123456789\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n"
        );
        assert!(ends(body));
        // One that drops nothing comes out as it came.
        let plain = b"4\r\nwiki\r\n5\r\npedia\r\n0\r\n\r\n";
        assert_eq!(framed(plain), plain);
        // What came before a break is framed; the bytes after the body stay where they were.
        let mut buffer = b"3;x\r\nabc\r\n4 y".to_vec();
        let mut chunked = Chunked::new(ANSWER_TRAILER_LINES);
        let relayed = chunked.relay(&mut buffer);
        assert_eq!(relayed.end, Err(BadChunk { at: 12 }));
        assert_eq!(&buffer[..relayed.framed], b"3\r\nabc\r\n4");
        let mut buffer = b"1\r\nx\r\n0\r\nT: 1\r\n\r\nNEXT".to_vec();
        let relayed = Chunked::new(ANSWER_TRAILER_LINES).relay(&mut buffer);
        assert_eq!(relayed.end, Ok(Some(buffer.len() - 4)));
        assert_eq!(&buffer[..relayed.framed], b"1\r\nx\r\n0\r\n\r\n");
        assert!(buffer.ends_with(b"NEXT"));
    }

    #[test]
    fn a_chunk_extension_cannot_hold_a_bare_lf() {
        assert_eq!(verdict(b"4;x\nwiki\r\n"), Err(3));
        assert_eq!(verdict(b"4;\n"), Err(2));
    }

    #[test]
    fn chunk_extensions_are_bounded_over_the_whole_body_as_hyper_bounds_them() {
        let extension = |bytes: usize| [&b"1;"[..], &vec![b'x'; bytes], b"\r\nx\r\n"].concat();
        let within = [extension(8191), extension(8192), LAST_CHUNK.to_vec()].concat();
        assert!(ends(&within));
        let past = [extension(8191), extension(8193), LAST_CHUNK.to_vec()].concat();
        assert_eq!(verdict(&past), Err(past.len() - 11));
    }

    #[test]
    fn chunk_data_is_chunk_size_octets_then_crlf() {
        assert!(ends(b"5\r\n\r\n\r\n\r\r\n0\r\n\r\n"));
        assert_eq!(verdict(b"4\r\nwikiXX"), Err(7));
        assert_eq!(verdict(b"4\r\nwiki\rX"), Err(8));
        assert_eq!(verdict(b"4\r\nwik\r\n0\r\n\r\n"), Err(7));
        assert_eq!(verdict(b"4\r\nwiki\n0\r\n\r\n"), Err(7));
    }

    #[test]
    fn the_last_chunk_and_a_blank_line_end_the_body_and_what_follows_is_not_read() {
        assert_eq!(verdict(b"0\r\n\r\nGET / HTTP/1.1\r\n"), Ok(Some(5)));
        assert_eq!(verdict(b"0\r\n\r"), Ok(None));
        assert_eq!(verdict(b"0\r\n\r\r"), Err(4));
        assert_eq!(verdict(b"0\r\n\n"), Err(3));
    }

    #[test]
    fn trailer_fields_are_field_lines_as_a_head_has_them() {
        assert!(ends(
            b"0\r\nExpires: never\r\nx-empty:\r\nx-tab:\ta\tb \r\n\r\n"
        ));
        assert!(ends(b"0\r\n!#$%&'*+-.^_`|~09aZ:\xe9\xff\r\n\r\n"));
        for (broken, at) in [
            (&b"0\r\nno colon\r\n\r\n"[..], 5),
            (b"0\r\n:empty name\r\n\r\n", 3),
            (b"0\r\nX : blank before the colon\r\n\r\n", 4),
            (b"0\r\nX: a\r\n folded\r\n\r\n", 9),
            (b"0\r\nX: a\rb\r\n\r\n", 8),
            (b"0\r\nX: bare\nLF\r\n\r\n", 10),
            (b"0\r\nX: a\0b\r\n\r\n", 7),
            (b"0\r\nX: a\x7fb\r\n\r\n", 7),
            (b"0\r\nX\xe9: a\r\n\r\n", 4),
        ] {
            assert_eq!(
                verdict(broken),
                Err(at),
                "{:?}",
                String::from_utf8_lossy(broken)
            );
        }
    }

    #[test]
    fn the_trailer_section_is_bounded_in_bytes_as_hyper_bounds_it() {
        // "x: " and a value, CRLF, and the closing CRLF: 16383 bytes at most.
        let section = |value: usize| [&b"0\r\nx: "[..], &vec![b'v'; value], b"\r\n\r\n"].concat();
        assert!(ends(&section(16383 - 7)));
        let past = section(16384 - 7);
        assert_eq!(verdict(&past), Err(past.len() - 1));
    }

    #[test]
    fn the_trailer_section_is_bounded_in_lines() {
        let lines = |count: usize| [&b"0\r\n"[..], &b"t: 1\r\n".repeat(count), b"\r\n"].concat();
        assert!(ends(&lines(ANSWER_TRAILER_LINES)));
        let past = lines(ANSWER_TRAILER_LINES + 1);
        assert_eq!(verdict(&past), Err(past.len() - 3));
        let mut tighter = Chunked::new(2);
        assert_eq!(tighter.relay(&mut lines(2)).end, Ok(Some(17)));
        let mut tighter = Chunked::new(2);
        assert_eq!(tighter.relay(&mut lines(3)).end, Err(BadChunk { at: 20 }));
    }

    /// Moved from the two decoders this one replaced.
    #[test]
    fn a_chunked_body_ends_after_its_trailers() {
        let body = b"4\r\nwiki\r\n5;x=1\r\npedia\r\n0\r\nExpires: never\r\n\r\nNEXT";
        assert_eq!(verdict(body), Ok(Some(body.len() - 4)));
        assert_eq!(verdict(b"zz\r\n"), Err(0));
        assert_eq!(verdict(b"\r\nabc\r\n"), Err(0));
        assert_eq!(verdict(b"3\r\nabc\r\n;x\r\n"), Err(8));
        assert_eq!(verdict(b"4\r\nwikiXX"), Err(7));
    }

    #[test]
    fn a_body_split_anywhere_decodes_to_its_data_without_extensions_or_trailers() {
        let body = b"4\r\nwiki\r\n5 ;x=1\r\npedia\r\nD\r\n in\r\n\r\nchunks\r\n0\r\nExpires: never\r\n\r\nNEXT";
        for split in 0..body.len() {
            let (out, end) = decoded(body, split);
            assert_eq!(end, Ok(Some(body.len() - 4)), "split at {split}");
            let data = data(&out);
            assert_eq!(data, b"wikipedia in\r\n\r\nchunks", "split at {split}");
        }
    }

    #[test]
    fn what_hyper_refuses_is_refused() {
        for bad in [
            &b"zz\r\n"[..],
            b"\r\n",
            b";x\r\n",
            b"4\r\nwikiXX",
            b"4 4\r\n",
            b"4;x\nwiki",
            b"4\n",
            b"1ffffffffffffffff\r\n",
            b"0\r\nno colon\r\n\r\n",
            b"0\r\n:empty\r\n\r\n",
            b"0\r\nX: a\rb\r\n\r\n",
            b"0\r\n\r\r",
        ] {
            assert!(verdict(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn data_is_carried_once_a_chunk_has_some() {
        let relay = |chunked: &mut Chunked, piece: &[u8]| chunked.relay(&mut piece.to_vec()).end;
        let mut chunked = Chunked::new(ANSWER_TRAILER_LINES);
        assert_eq!(relay(&mut chunked, b"0;x\r\n"), Ok(None));
        assert!(!chunked.carried_data());
        let mut chunked = Chunked::new(ANSWER_TRAILER_LINES);
        assert_eq!(relay(&mut chunked, b"4\r\nw"), Ok(None));
        assert!(chunked.carried_data());
        assert_eq!(relay(&mut chunked, b"iki\r\n0\r\n\r\n"), Ok(Some(10)));
        assert!(chunked.ended());
    }

    /// What hyper's client makes of an answer with `body` chunked, from a backend that closes
    /// after it: whether it reads the body whole.
    async fn hyper_reads(body: &[u8]) -> bool {
        use http_body_util::{BodyExt, Empty};
        use hyper_util::rt::TokioIo;
        use tokio::io::AsyncReadExt;
        let (near, mut far) = tokio::io::duplex(64 * 1024);
        let answer = [
            &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"[..],
            body,
        ]
        .concat();
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let _ = far.read(&mut request).await;
            let _ = far.write_all(&answer).await;
        });
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(near))
            .await
            .unwrap();
        tokio::spawn(connection);
        let request = http::Request::get("/")
            .header("host", "a")
            .body(Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        response.into_body().collect().await.is_ok()
    }

    #[tokio::test]
    async fn a_body_ends_here_exactly_when_hyper_reads_it_whole() {
        let long = |bytes: usize| vec![b'x'; bytes];
        let cases = [
            b"4\r\nwiki\r\n0\r\n\r\n".to_vec(),
            b"4 x\r\nwiki\r\n0\r\n\r\n".to_vec(),
            b"4 ;x\r\nwiki\r\n0\r\n\r\n".to_vec(),
            b"4\t\r\nwiki\r\n0\r\n\r\n".to_vec(),
            b"4;x\nwiki\r\n0\r\n\r\n".to_vec(),
            b"4\r\nwiki\n0\r\n\r\n".to_vec(),
            b"1ffffffffffffffff\r\n".to_vec(),
            [&b"4;"[..], &long(16383), b"\r\nwiki\r\n0\r\n\r\n"].concat(),
            [&b"4;"[..], &long(16384), b"\r\nwiki\r\n0\r\n\r\n"].concat(),
            b"0\r\nExpires: never\r\n\r\n".to_vec(),
            b"0\r\nno colon\r\n\r\n".to_vec(),
            b"0\r\nX : a\r\n\r\n".to_vec(),
            b"0\r\nX: a\r\n folded\r\n\r\n".to_vec(),
            b"0\r\nX: a\0\r\n\r\n".to_vec(),
            b"0\r\nX: \xe9\r\n\r\n".to_vec(),
            [&b"0\r\nx: "[..], &long(16376), b"\r\n\r\n"].concat(),
            [&b"0\r\nx: "[..], &long(16377), b"\r\n\r\n"].concat(),
            [&b"0\r\n"[..], &b"t: 1\r\n".repeat(100), b"\r\n"].concat(),
            [&b"0\r\n"[..], &b"t: 1\r\n".repeat(101), b"\r\n"].concat(),
        ];
        for body in cases {
            let shown = String::from_utf8_lossy(&body[..body.len().min(40)]).into_owned();
            assert_eq!(ends(&body), hyper_reads(&body).await, "{shown:?}");
        }
        // The one place this decoder is stricter: hyper takes a bare LF before a trailer
        // line's CRLF, a client reading it as the body's end would stop short.
        let bare_lf = b"0\r\nX: a\n\r\n\r\n";
        assert!(hyper_reads(bare_lf).await);
        assert_eq!(verdict(bare_lf), Err(7));
    }

    #[tokio::test]
    async fn a_chunk_goes_out_with_the_head_in_one_piece() {
        let mut out = Vec::new();
        send_chunk(&mut out, b"HEAD\r\n\r\n", b"hello")
            .await
            .unwrap();
        send_chunk(&mut out, b"", b"").await.unwrap();
        send_chunk(&mut out, b"", &[b'x'; 26]).await.unwrap();
        assert_eq!(
            out,
            [
                &b"HEAD\r\n\r\n5\r\nhello\r\n1a\r\n"[..],
                &[b'x'; 26],
                b"\r\n"
            ]
            .concat()
        );
    }
}
