//! Request bodies the own engine streams: a `Content-Length` body that did not come whole with
//! its head, any chunked body, and any body whose client waits for `100 Continue`. The bytes
//! pass through the connection's own bounded buffers (never the whole body), the backend is
//! watched all the while so an early answer is relayed at once (the rest of the body is read
//! after it, as hyper does), and a chunked body is decoded strictly by [`super::chunked`] (as
//! hyper's decoder does) and framed anew: extensions and trailers do not cross, and a broken
//! chunk is never passed on.

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::chunked::{BadChunk, Chunked};
use super::head::RequestHead;
use crate::error::ProxyError;
use crate::http::body::MinRate;
use crate::plan::HeadLimits;

/// What hyper's server writes before it reads a body a client holds back.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Whether a request's body streams through [`Upload`] rather than going out with its head.
pub fn streams(request: &RequestHead, arrived: usize) -> bool {
    request.chunked
        || (arrived as u64) < request.body
        || (request.expect_continue && request.body > 0)
}

/// How much of the body is still to come from the client: for the fast path's upload and the
/// pipeline's pump alike.
pub enum Rest {
    Length(u64),
    Chunked(Chunked),
}

impl Rest {
    /// Whether the body has been read to its end.
    pub fn ended(&self) -> bool {
        match self {
            Rest::Length(rest) => *rest == 0,
            Rest::Chunked(chunked) => chunked.ended(),
        }
    }
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
    /// The listener's minimum rate (none when it allows any pace).
    min_rate: Option<MinRate>,
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
    /// whose first bytes already break the framing is refused before any backend is asked. A
    /// chunked body may end with as many trailer lines as a head may have fields: hyper's
    /// server takes as many.
    pub fn new(
        input: &[u8],
        request: &RequestHead,
        limits: HeadLimits,
    ) -> Result<Upload, ProxyError> {
        let arrived = &input[request.length..];
        let (rest, out, taken) = if request.chunked {
            let mut chunked = Chunked::new(limits.headers);
            let mut out = Vec::with_capacity(arrived.len().max(1024) + 32);
            let end = chunked
                .decode(arrived, &mut out)
                .map_err(|BadChunk { .. }| ProxyError::ClientAborted)?;
            (Rest::Chunked(chunked), out, end.unwrap_or(arrived.len()))
        } else {
            let take = (arrived.len() as u64).min(request.body);
            (Rest::Length(request.body - take), Vec::new(), take as usize)
        };
        Ok(Upload {
            rest,
            out,
            first: request.length..request.length + taken,
            expect_continue: request.expect_continue,
            min_rate: MinRate::starting_now(limits.min_body_rate),
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
        self.rest.ended()
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
            if client.write_all(CONTINUE).await.is_err() || client.flush().await.is_err() {
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
        if !self.out.is_empty()
            && (upstream.write_all(&self.out).await.is_err() || upstream.flush().await.is_err())
        {
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
            if self
                .min_rate
                .as_ref()
                .is_some_and(|min| min.fell_behind(self.passed))
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
                Rest::Chunked(chunked) => {
                    let end = chunked
                        .decode(input, &mut self.out)
                        .map_err(|BadChunk { .. }| Failed::Client(ProxyError::ClientAborted))?;
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
                // Behind TLS, the piece may still sit in the session's buffer.
                if passing && ready!(Pin::new(&mut *upstream).poll_flush(cx)).is_err() {
                    return Poll::Ready(false);
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
/// say first: then its bytes are read into `answer` (when one is given). Informational heads
/// (`100 Continue`, `103 Early Hints`) say nothing yet: a backend that sends `100 Continue`
/// waits for the body, so they are dropped (the client had trafik's own `100 Continue`, and
/// the relay drops them too) and the work goes on.
async fn watching<U, T>(
    upstream: &mut U,
    mut answer: Option<&mut Vec<u8>>,
    mut work: impl FnMut(&mut U, &mut Context<'_>) -> Poll<T>,
) -> Watch<T>
where
    U: AsyncRead + Unpin,
{
    poll_fn(|cx| {
        if let Some(answer) = answer.as_deref_mut() {
            loop {
                match pin!(upstream.read_buf(&mut *answer)).poll(cx) {
                    Poll::Pending => break,
                    Poll::Ready(Ok(1..)) if only_informational(answer) => {}
                    Poll::Ready(_) => return Poll::Ready(Watch::Answered),
                }
            }
        }
        work(upstream, cx).map(Watch::Done)
    })
    .await
}

/// Drops the whole informational heads (1xx but `101`) at the start of `answer`; true when
/// nothing is left but, perhaps, the first bytes of another such head.
fn only_informational(answer: &mut Vec<u8>) -> bool {
    loop {
        let mut fields = [httparse::EMPTY_HEADER; super::head::MAX_HEADERS];
        let mut head = httparse::Response::new(&mut fields);
        let parsed = head.parse(answer);
        let informational = head
            .code
            .is_none_or(|code| (100..200).contains(&code) && code != 101);
        match parsed {
            _ if !informational => return false,
            Ok(httparse::Status::Complete(length)) => {
                answer.drain(..length);
            }
            Ok(httparse::Status::Partial) => return true,
            Err(_) => return false,
        }
    }
}
