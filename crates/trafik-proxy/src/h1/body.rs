//! Request bodies the own engine streams: a `Content-Length` body that did not come whole with
//! its head, any chunked body, and any body whose client waits for `100 Continue`. The bytes
//! pass through the connection's own bounded buffers (never the whole body), the backend is
//! watched all the while so an early answer is relayed at once (the rest of the body is read
//! after it, as hyper does), and a chunked body is decoded strictly (as hyper's decoder does)
//! and framed anew: extensions and trailers do not cross, and a broken chunk is never passed
//! on.

use std::future::{Future, poll_fn};
use std::io::{self, IoSlice, Write};
use std::pin::{Pin, pin};
use std::task::{Context, Poll, ready};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::head::RequestHead;
use crate::error::ProxyError;
use crate::http::body::BODY_RATE_GRACE;

/// What hyper's server writes before it reads a body a client holds back.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The chunk that ends a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Chunk-extension bytes a body may carry in all (hyper's limit).
const EXTENSION_LIMIT: u64 = 16 * 1024;
/// Trailer bytes and lines a body may end with.
const TRAILER_BYTES: usize = 16 * 1024;
const TRAILER_LINES: usize = 64;

/// Whether a request's body streams through [`Upload`] rather than going out with its head.
pub fn streams(request: &RequestHead, arrived: usize) -> bool {
    request.chunked
        || (arrived as u64) < request.body
        || (request.expect_continue && request.body > 0)
}

/// A chunked body that breaks its framing.
#[derive(Debug, PartialEq, Eq)]
pub struct BadChunk;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before a chunk size's first digit.
    #[default]
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

/// A strict chunked decoder that writes the data it finds as chunks of its own.
#[derive(Debug, Default)]
pub struct Dechunker {
    state: State,
    size: u64,
    extension: u64,
    trailer_bytes: usize,
    trailer_lines: usize,
    /// Data bytes found so far.
    data: u64,
}

impl Dechunker {
    /// Decodes `input`, appending its data, framed anew, to `out` (and the last chunk once the
    /// body ends). The offset just past the body's end once it is in `input`.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<Option<usize>, BadChunk> {
        use State::*;
        let mut at = 0;
        while at < input.len() {
            let b = input[at];
            at += 1;
            self.state = match self.state {
                Start | Size => match (b as char).to_digit(16) {
                    Some(digit) => {
                        self.size = self
                            .size
                            .checked_mul(16)
                            .and_then(|size| size.checked_add(u64::from(digit)))
                            .ok_or(BadChunk)?;
                        Size
                    }
                    None if self.state == Start => return Err(BadChunk),
                    None => self.after_size(b)?,
                },
                SizeBlank => self.after_size(b)?,
                Extension => match b {
                    b'\r' => SizeLf,
                    b'\n' => return Err(BadChunk),
                    _ => {
                        self.extension += 1;
                        if self.extension >= EXTENSION_LIMIT {
                            return Err(BadChunk);
                        }
                        Extension
                    }
                },
                SizeLf if b == b'\n' && self.size == 0 => EndCr,
                SizeLf if b == b'\n' => {
                    let _ = write!(out, "{:x}\r\n", self.size);
                    Data
                }
                Data => {
                    at -= 1;
                    let take =
                        (input.len() - at).min(usize::try_from(self.size).unwrap_or(usize::MAX));
                    out.extend_from_slice(&input[at..at + take]);
                    at += take;
                    self.data += take as u64;
                    self.size -= take as u64;
                    if self.size > 0 {
                        continue;
                    }
                    out.extend_from_slice(b"\r\n");
                    DataCr
                }
                DataCr if b == b'\r' => DataLf,
                DataLf if b == b'\n' => Start,
                EndCr if b == b'\r' => EndLf,
                EndCr | TrailerName if is_token(b) => self.trailer(TrailerName)?,
                TrailerName if b == b':' => self.trailer(TrailerValue)?,
                TrailerValue if b == b'\r' => TrailerLf,
                TrailerValue if b == b'\t' || b >= b' ' && b != 0x7f => {
                    self.trailer(TrailerValue)?
                }
                TrailerLf if b == b'\n' => {
                    self.trailer_lines += 1;
                    if self.trailer_lines > TRAILER_LINES {
                        return Err(BadChunk);
                    }
                    EndCr
                }
                EndLf if b == b'\n' => {
                    self.state = Done;
                    out.extend_from_slice(LAST_CHUNK);
                    return Ok(Some(at));
                }
                _ => return Err(BadChunk),
            };
        }
        Ok(None)
    }

    fn after_size(&self, b: u8) -> Result<State, BadChunk> {
        match b {
            b' ' | b'\t' => Ok(State::SizeBlank),
            b';' => Ok(State::Extension),
            b'\r' => Ok(State::SizeLf),
            _ => Err(BadChunk),
        }
    }

    fn trailer(&mut self, next: State) -> Result<State, BadChunk> {
        self.trailer_bytes += 1;
        if self.trailer_bytes > TRAILER_BYTES {
            return Err(BadChunk);
        }
        Ok(next)
    }
}

/// Whether the start of a chunked body holds any data: hyper's server sends an answer's head
/// with its first data, so a body broken before any sends nothing. Only on that error path.
pub fn carries_data(chunked: &[u8]) -> bool {
    let mut dechunker = Dechunker::default();
    let _ = dechunker.decode(chunked, &mut Vec::new());
    dechunker.data > 0
}

/// RFC 9110's `tchar`: what a field name is made of.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// How much of the body is still to come from the client.
enum Rest {
    Length(u64),
    Chunked(Dechunker),
}

/// One request body on its way to the backend.
pub struct Upload {
    rest: Rest,
    /// The body's bytes that came with the head, as they go out (framed anew when chunked),
    /// then each piece the client sends; unused for a length-framed body, whose bytes go out
    /// from the client's buffer as they are.
    out: Vec<u8>,
    /// Where in the client's buffer the bytes that came with the head begin and end (and the
    /// next request may begin).
    first: std::ops::Range<usize>,
    expect_continue: bool,
    min_rate: u64,
    started: Instant,
    passed: u64,
    /// Whether the backend still takes the body (after an early answer it may stop).
    passing: bool,
    /// The whole body came with the head (the client waited for nothing but `100 Continue`).
    came_whole: bool,
}

/// Why an upload failed.
#[derive(Debug, PartialEq, Eq)]
pub enum Failed {
    /// The head could not be written: the stream was closed, and nothing was used up.
    Unsent,
    /// The client broke its body or sent it too slowly: not the backend's fault.
    Client(ProxyError),
    /// The backend's stream broke mid-upload.
    Upstream,
}

impl Upload {
    /// Readies the body of `request`, whose head and first bytes are in `input`; a chunked body
    /// whose first bytes already break the framing is refused before any backend is asked.
    pub fn new(input: &[u8], request: &RequestHead, min_rate: u64) -> Result<Upload, ProxyError> {
        let arrived = &input[request.length..];
        let (rest, out, taken) = if request.chunked {
            let mut dechunker = Dechunker::default();
            let mut out = Vec::with_capacity(arrived.len().max(1024) + 32);
            let end = dechunker
                .decode(arrived, &mut out)
                .map_err(|BadChunk| ProxyError::ClientAborted)?;
            (Rest::Chunked(dechunker), out, end.unwrap_or(arrived.len()))
        } else {
            let take = (arrived.len() as u64).min(request.body);
            (Rest::Length(request.body - take), Vec::new(), take as usize)
        };
        Ok(Upload {
            rest,
            out,
            first: request.length..request.length + taken,
            expect_continue: request.expect_continue,
            min_rate,
            started: Instant::now(),
            passed: taken as u64,
            passing: true,
            came_whole: false,
        }
        .settled())
    }

    fn settled(mut self) -> Self {
        self.came_whole = self.whole();
        self
    }

    /// Whether the request may be sent again as it is: all of it came with the head.
    pub fn replayable(&self) -> bool {
        self.came_whole
    }

    /// The bytes of the client's buffer this request still holds after its exchange (its head
    /// and body, when they came whole; a streamed body left only what followed it).
    pub fn consumed(&self) -> usize {
        if self.came_whole { self.first.end } else { 0 }
    }

    /// Whether all of the body has been read: not when the backend answered first (see
    /// [`Upload::finish`]).
    pub fn whole(&self) -> bool {
        match &self.rest {
            Rest::Length(rest) => *rest == 0,
            Rest::Chunked(dechunker) => dechunker.state == State::Done,
        }
    }

    /// Sends `head` and the body to `upstream`: first what came with the head (`input` holds
    /// it after the head), then the rest as the client sends it, read into `input`, which
    /// afterwards holds only what followed the body. `100 Continue` goes to the client once
    /// the head is out, when it asked for it. An early answer (or close) stops it, its first
    /// bytes in `answer`.
    pub async fn send<U, C>(
        &mut self,
        upstream: &mut U,
        head: &[u8],
        input: &mut Vec<u8>,
        client: &mut C,
        answer: &mut Vec<u8>,
    ) -> Result<(), Failed>
    where
        U: AsyncRead + AsyncWrite + Unpin,
        C: AsyncRead + AsyncWrite + Unpin,
    {
        let first = match self.rest {
            Rest::Chunked(_) => &self.out[..],
            Rest::Length(_) => &input[self.first.clone()],
        };
        if super::send(upstream, head, first).await.is_err() {
            return Err(Failed::Unsent);
        }
        if self.expect_continue {
            self.expect_continue = false;
            if client.write_all(CONTINUE).await.is_err() {
                return Err(Failed::Client(ProxyError::ClientAborted));
            }
        }
        if self.came_whole {
            // Kept as they are, to be sent again should a reused stream turn out closed.
            return Ok(());
        }
        // All of the buffer was body.
        input.clear();
        self.out.clear();
        self.pump(upstream, input, client, Some(answer)).await
    }

    /// Reads the rest of a body whose backend answered early, as hyper does, so the client
    /// connection can carry its next request: passed on while the backend takes it (what an
    /// early answer cut short first), dropped after.
    pub async fn finish<U, C>(
        &mut self,
        upstream: &mut U,
        input: &mut Vec<u8>,
        client: &mut C,
    ) -> Result<(), ProxyError>
    where
        U: AsyncRead + AsyncWrite + Unpin,
        C: AsyncRead + AsyncWrite + Unpin,
    {
        if !self.out.is_empty() && upstream.write_all(&self.out).await.is_err() {
            self.passing = false;
        }
        self.out.clear();
        match self.pump(upstream, input, client, None).await {
            Ok(()) => Ok(()),
            Err(Failed::Client(error)) => Err(error),
            Err(_) => Err(ProxyError::ClientAborted),
        }
    }

    /// Moves the body from the client to the backend until it ends, or, when `answer` is
    /// given, until the backend has something to say (read into it). The unsent rest of a
    /// piece an answer cut short is kept in `out`.
    async fn pump<U, C>(
        &mut self,
        upstream: &mut U,
        input: &mut Vec<u8>,
        client: &mut C,
        mut answer: Option<&mut Vec<u8>>,
    ) -> Result<(), Failed>
    where
        U: AsyncRead + AsyncWrite + Unpin,
        C: AsyncRead + AsyncWrite + Unpin,
    {
        while !self.whole() {
            // Nothing is left in the buffer while the body goes on: all of it went out.
            input.clear();
            let read = watching(upstream, answer.as_deref_mut(), |_, cx| {
                pin!(client.read_buf(&mut *input)).poll(cx)
            })
            .await;
            match read {
                Watch::Answered => return Ok(()),
                Watch::Done(Ok(0) | Err(_)) => {
                    return Err(Failed::Client(ProxyError::ClientAborted));
                }
                Watch::Done(Ok(read)) => self.passed += read as u64,
            }
            let elapsed = self.started.elapsed();
            if self.min_rate > 0
                && elapsed > BODY_RATE_GRACE
                && (self.passed as f64) < self.min_rate as f64 * elapsed.as_secs_f64()
            {
                return Err(Failed::Client(ProxyError::BodyTooSlow));
            }
            let chunked = matches!(self.rest, Rest::Chunked(_));
            let (mut out, used): (&[u8], usize) = match &mut self.rest {
                Rest::Length(rest) => {
                    let take = (input.len() as u64).min(*rest) as usize;
                    *rest -= take as u64;
                    (&input[..take], take)
                }
                Rest::Chunked(dechunker) => {
                    let end = dechunker
                        .decode(input, &mut self.out)
                        .map_err(|BadChunk| Failed::Client(ProxyError::ClientAborted))?;
                    (&self.out[..], end.unwrap_or(input.len()))
                }
            };
            let passing = self.passing;
            let written = watching(upstream, answer.as_deref_mut(), |upstream, cx| {
                while passing && !out.is_empty() {
                    match ready!(Pin::new(&mut *upstream).poll_write(cx, out)) {
                        Ok(0) | Err(_) => return Poll::Ready(false),
                        Ok(written) => out = &out[written..],
                    }
                }
                Poll::Ready(true)
            })
            .await;
            let unsent = out.len();
            match written {
                Watch::Answered if chunked => {
                    let sent = self.out.len() - unsent;
                    self.out.drain(..sent);
                }
                Watch::Answered => self.out.extend_from_slice(&input[used - unsent..used]),
                Watch::Done(false) if answer.is_some() => return Err(Failed::Upstream),
                Watch::Done(false) => self.passing = false,
                Watch::Done(true) => {}
            }
            input.drain(..used);
            if let Watch::Answered = written {
                return Ok(());
            }
            self.out.clear();
        }
        Ok(())
    }
}

enum Watch<T> {
    Done(T),
    /// The backend sent something (or closed) first.
    Answered,
}

/// Runs `work` (given the upstream stream, to write on) unless the upstream has something to
/// say first: then its bytes are read into `answer` (when one is given).
async fn watching<U, T>(
    upstream: &mut U,
    mut answer: Option<&mut Vec<u8>>,
    mut work: impl FnMut(&mut U, &mut Context<'_>) -> Poll<T>,
) -> Watch<T>
where
    U: AsyncRead + Unpin,
{
    poll_fn(|cx| {
        if let Some(answer) = answer.as_deref_mut()
            && pin!(upstream.read_buf(&mut *answer)).poll(cx).is_ready()
        {
            return Poll::Ready(Watch::Answered);
        }
        work(upstream, cx).map(Watch::Done)
    })
    .await
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `body` fed in two pieces split at `split`: the re-framed data and where it ended.
    fn decoded(body: &[u8], split: usize) -> Result<(Vec<u8>, Option<usize>), BadChunk> {
        let mut dechunker = Dechunker::default();
        let mut out = Vec::new();
        if let Some(end) = dechunker.decode(&body[..split], &mut out)? {
            return Ok((out, Some(end)));
        }
        let end = dechunker.decode(&body[split..], &mut out)?;
        Ok((out, end.map(|end| end + split)))
    }

    /// The data of a chunked body, framing removed.
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
    fn a_body_split_anywhere_decodes_to_its_data_without_extensions_or_trailers() {
        let body = b"4\r\nwiki\r\n5 ;x=1\r\npedia\r\nD\r\n in\r\n\r\nchunks\r\n0\r\nExpires: never\r\n\r\nNEXT";
        for split in 0..body.len() {
            let (out, end) = decoded(body, split).unwrap();
            assert_eq!(end, Some(body.len() - 4), "split at {split}");
            assert_eq!(
                data(&out),
                b"wikipedia in\r\n\r\nchunks",
                "split at {split}"
            );
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
            for split in 0..bad.len() {
                assert_eq!(
                    decoded(bad, split),
                    Err(BadChunk),
                    "{bad:?} split at {split}"
                );
            }
        }
        let long_extension = [b"1;".to_vec(), vec![b'x'; 17 * 1024]].concat();
        assert_eq!(decoded(&long_extension, 0), Err(BadChunk));
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
