//! One HTTP/2 connection (RFC 9113) as the worker's tasks share it, whichever end trafik is
//! ([`Side`]): its streams, its flow-control windows and the bytes waiting to be written. A
//! worker is one thread, so the state is a `RefCell`, never locked: a stream's tasks write its
//! frames into [`Connection::out`] themselves, and one driver per connection ([`poll_drive`])
//! writes those bytes and reads the peer's frames into the streams they belong to, waking
//! whoever waits on them. DATA reach the reader as the bytes that were read (only small pieces
//! queued behind others are copied, see `Stream::hold`). Whatever the peer sends is checked
//! before it is believed: a frame that breaks the protocol ends its stream or the connection
//! with the code RFC 9113 names.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::{Future, poll_fn};
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use h2::Reason;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::frame::{self, HeaderBlock, flag, kind, setting};
use super::hpack::{self, Name};
use crate::http::field_maps;
use crate::plan::AnswerLimits;
use crate::transport;

/// What a peer may send on one stream before trafik has read it: a stream whose reader stops
/// reading holds at most this much (haproxy's grant too).
const STREAM_WINDOW: u32 = 64 * 1024;
/// The most streams trafik opens on one connection to a backend, whatever the backend allows;
/// more requests open another connection. Also the most streams' windows a connection's own
/// window makes room for.
const MOST_STREAMS: usize = 128;
/// Requests a client may have cancelled (its RST_STREAM before the answer's end, or a stream
/// error it provoked) beyond the answers it let finish: past it the connection ends
/// (ENHANCE_YOUR_CALM). Refusals (REFUSED_STREAM) start no work and do not count. Opening streams
/// and resetting them at once makes a server start work the client never waits for ("rapid
/// reset", CVE-2023-44487); a browser cancels a few of its requests, never most.
const MOST_CANCELLED: u64 = 100;
/// Bytes waiting for the socket past which request bodies wait for them to leave: a backend
/// that reads slowly slows the uploads rather than filling memory.
pub(super) const QUEUED_MOST: usize = 256 * 1024;
/// DATA payloads this large are kept as read, smaller ones may be copied (see `Stream::hold`).
const SHARED_FROM: usize = 8 * 1024;
/// Bytes waiting for the socket past which the driver stops reading the backend.
const OWED_MOST: usize = 4 * QUEUED_MOST;
/// The streams assumed until the backend's SETTINGS say otherwise (the least RFC 9113 §6.5.2
/// recommends a server allow).
const ASSUMED_STREAMS: usize = 100;
/// How long a new connection waits for its backend's SETTINGS (its stream limit).
pub(super) const SETTINGS_WAIT: Duration = Duration::from_millis(50);
/// Room made in the read buffer before each read.
const READ_BYTES: usize = 32 * 1024;
/// The HPACK table size trafik allows a peer (`SETTINGS_HEADER_TABLE_SIZE`'s default).
const HEADER_TABLE_SIZE: usize = 4096;
/// How long a closing connection may take to say so.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Which end of the connection trafik is.
pub(super) enum Side {
    /// trafik opened the connection to a backend: the streams are its requests.
    Client {
        /// The id the next stream takes (odd: client-initiated).
        next_stream: u32,
        /// Requests name the `https` scheme.
        tls: bool,
    },
    /// A client opened the connection to trafik: the streams are the client's requests.
    Server(Serving),
}

/// The server's side of a connection: the client's streams as they come.
pub(super) struct Serving {
    /// The highest stream id the client opened (ids only grow, RFC 9113 §5.1.1): lower ones
    /// are no longer idle.
    highest_seen: u32,
    /// The highest stream id trafik took to answer: what a GOAWAY names, which never grows
    /// once said.
    last_taken: u32,
    /// Requests whose heads came, for the server to start: `None` for a head past the
    /// limits, answered 431.
    pub(super) accepted: Vec<Accepted>,
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` as trafik said it.
    max_streams: usize,
    /// Requests cancelled (see [`MOST_CANCELLED`]), and answers sent whole.
    cancelled: u64,
    answered: u64,
}

/// A request whose head came: the stream's id, its head (`None` past the head's limits), and
/// whether it has a body to come.
pub(super) struct Accepted {
    pub(super) id: u32,
    pub(super) head: Option<Request<()>>,
    pub(super) body: bool,
}

/// One connection's state, shared by its driver and the tasks of its streams.
pub(super) struct Connection {
    pub(super) side: Side,
    pub(super) streams: HashMap<u32, Stream, BuildHasherDefault<StreamIdHash>>,
    /// Frames waiting to be written.
    pub(super) out: BytesMut,
    pub(super) block: HeaderBlock,
    /// The driver, waiting for frames to write or bytes to read.
    pub(super) driver: Option<Waker>,
    /// Tasks waiting for the connection: a stream to open, its window, room in `out`, SETTINGS.
    pub(super) waiting: Vec<Waker>,
    /// What trafik may still send on the connection (the peer's window).
    pub(super) send_window: i64,
    /// What the peer may still send on the connection.
    pub(super) recv_window: i64,
    /// Bytes read by streams' readers, not yet given back to the connection's window.
    pub(super) unreleased: u32,
    pub(super) peer: PeerSettings,
    /// The peer's first SETTINGS came.
    pub(super) settings_seen: bool,
    /// No new stream may open: the peer said GOAWAY, trafik did, the connection failed or
    /// closed.
    pub(super) refusing: bool,
    /// The driver stopped: nothing more is read or written.
    pub(super) closed: bool,
    /// A connection error was found: its GOAWAY is written, then the connection closes.
    pub(super) closing: bool,
    /// No stream will open again (no handle is left to open one, or either end said GOAWAY):
    /// the connection closes when its streams are done.
    pub(super) abandoned: bool,
    /// trafik's GOAWAY is written.
    said_goaway: bool,
    pub(super) decoder: hpack::Decoder,
    /// The most a header block trafik reads may hold, in fields and bytes.
    pub(super) limits: AnswerLimits,
}

/// What the peer's SETTINGS said.
pub(super) struct PeerSettings {
    pub(super) initial_window: u32,
    pub(super) max_frame: usize,
    pub(super) max_streams: usize,
}

/// One request's stream. "Received" is what the peer sends (a backend's answer, a client's
/// request), "sent" what trafik does.
pub(super) struct Stream {
    /// A backend's answer head, until the request's task takes it.
    pub(super) head: Option<Response<()>>,
    /// The peer's head came (a later HEADERS frame is the trailers).
    pub(super) answered: bool,
    /// DATA read and not yet taken: `first`, then the rest as read, then `tail`, small pieces
    /// copied together. A small answer's one piece waits in `first`, no queue allocated.
    first: Option<Bytes>,
    data: VecDeque<Bytes>,
    tail: BytesMut,
    /// Boxed: few answers have trailers (gRPC's), and a stream is moved into and out of the
    /// connection's map whole.
    pub(super) trailers: Option<Box<HeaderMap>>,
    /// The peer's END_STREAM came: what it sends is whole.
    pub(super) ended: bool,
    /// The stream ended before what the peer sends ended (never set once it is whole).
    pub(super) stopped: Option<Stop>,
    /// trafik's frames may go no further: its end was sent, or the stream was reset either
    /// way (a reset after a whole answer stops only the upload, RFC 9113 §8.1).
    pub(super) sending_closed: bool,
    /// A RST_STREAM went or came: none is sent again.
    pub(super) reset: bool,
    /// The request was HEAD: its answer's `content-length` promises no DATA.
    bodiless: bool,
    /// What trafik may still send on the stream.
    pub(super) send_window: i64,
    /// What the peer may still send on the stream.
    pub(super) recv_window: i64,
    /// Bytes read by the reader, not yet given back to the stream's window.
    pub(super) unreleased: u32,
    pub(super) reader: Option<Waker>,
    pub(super) sender: Option<Waker>,
    /// The handles on the stream ([`super::stream::StreamRef`]) while they last: a backend's
    /// answer's reader and the upload; a client's request body's reader and the answer's task.
    pub(super) handles: u8,
    /// On a client's stream, the answer's waker: a client's reset (or the connection's end)
    /// sets `cancelled` and wakes it, and its work stops.
    pub(super) answer: Option<Waker>,
    pub(super) cancelled: bool,
}

/// How a stream ended before the end of what the peer sends.
#[derive(Clone, Copy)]
pub(super) enum Stop {
    /// The peer's RST_STREAM.
    Reset(Reason),
    /// trafik reset it (a malformed answer, a failed upload, a reader gone).
    Local(Reason),
    /// The connection failed or closed under it.
    Lost,
    /// The backend's GOAWAY named an earlier stream as the last it processes: it never saw
    /// this one's request (RFC 9113 §6.8).
    Unprocessed,
}

impl Stream {
    fn new(send_window: u32, sent_whole: bool, bodiless: bool) -> Stream {
        Stream {
            head: None,
            answered: false,
            first: None,
            data: VecDeque::new(),
            tail: BytesMut::new(),
            trailers: None,
            ended: false,
            stopped: None,
            sending_closed: sent_whole,
            reset: false,
            bodiless,
            send_window: i64::from(send_window),
            recv_window: i64::from(STREAM_WINDOW),
            unreleased: 0,
            reader: None,
            sender: None,
            handles: 1,
            answer: None,
            cancelled: false,
        }
    }

    pub(super) fn wake(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
        if let Some(sender) = self.sender.take() {
            sender.wake();
        }
    }

    /// Whether the stream is open as RFC 9113 §5.1 counts streams against the limit: not
    /// reset, nor ended both ways (its handles may still be held).
    fn is_open(&self) -> bool {
        let closed_both_ways = self.ended && self.sending_closed;
        !(self.cancelled || closed_both_ways)
    }

    /// Whether the stream is over for its reader: whole, or stopped.
    pub(super) fn is_done(&self) -> bool {
        self.ended || self.stopped.is_some()
    }

    /// Keeps a DATA payload for the reader. A large one, or the only one waiting, is kept as
    /// the bytes read (a slice of the read buffer, no copy); small ones behind others are
    /// copied together, so a backend sending many tiny frames to a client that does not read
    /// holds no more memory than its window's worth, never a read buffer per byte.
    fn hold(&mut self, payload: BytesMut) {
        if !self.holds_data() {
            self.first = Some(payload.freeze());
        } else if payload.len() >= SHARED_FROM {
            if !self.tail.is_empty() {
                self.data.push_back(self.tail.split().freeze());
            }
            self.data.push_back(payload.freeze());
        } else {
            self.tail.extend_from_slice(&payload);
        }
    }

    /// The next piece of DATA held, in the order it came.
    pub(super) fn take_data(&mut self) -> Option<Bytes> {
        self.first
            .take()
            .or_else(|| self.data.pop_front())
            .or_else(|| (!self.tail.is_empty()).then(|| self.tail.split().freeze()))
    }

    /// Whether DATA is held unread.
    pub(super) fn holds_data(&self) -> bool {
        self.first.is_some() || !self.data.is_empty() || !self.tail.is_empty()
    }

    /// The bytes of DATA held unread.
    pub(super) fn unread(&self) -> usize {
        self.first.as_ref().map_or(0, Bytes::len)
            + self.data.iter().map(Bytes::len).sum::<usize>()
            + self.tail.len()
    }

    /// Ends the stream before the end of what the peer sends (`stop`), unless that is
    /// whole: then only trafik's sending stops. A client's request stops being answered.
    fn stop(&mut self, stop: Stop) {
        self.sending_closed = true;
        if !self.is_done() {
            self.stopped = Some(stop);
        }
        self.cancelled = true;
        if let Some(answer) = self.answer.take() {
            answer.wake();
        }
        self.wake();
    }
}

/// Hashes a stream id by one multiplication (Fibonacci hashing). On a backend connection ids
/// are trafik's own odd counter; a client chooses its own, but it may have no more streams
/// open than trafik's `SETTINGS_MAX_CONCURRENT_STREAMS`, so ids chosen to collide cost a
/// lookup at most that many comparisons: SipHash's guard against chosen keys buys nothing.
#[derive(Default)]
pub(super) struct StreamIdHash(u64);

impl Hasher for StreamIdHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8 | u64::from(byte)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, id: u32) {
        self.0 = u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A connection error (RFC 9113 §5.4.1): the connection ends with a GOAWAY giving the reason.
struct ConnectionError(Reason);

impl Connection {
    /// Starts HTTP/2 on a new upstream connection: the preface and trafik's SETTINGS queued,
    /// its driver a task of this worker.
    pub(super) fn start(
        stream: transport::Upstream,
        limits: AnswerLimits,
    ) -> Rc<RefCell<Connection>> {
        let tls = matches!(stream, transport::Upstream::Tls(_));
        let mut out = BytesMut::with_capacity(READ_BYTES);
        out.extend_from_slice(frame::PREFACE);
        let side = Side::Client {
            next_stream: 1,
            tls,
        };
        let connection = Rc::new(RefCell::new(Connection::new(
            side,
            out,
            limits,
            &[(setting::ENABLE_PUSH, 0)],
            MOST_STREAMS,
        )));
        tokio::task::spawn_local(drive(stream, connection.clone()));
        connection
    }

    /// The server's side of a client's connection, its SETTINGS queued: at most `max_streams`
    /// requests at once, heads within `limits`. Its driver is the server's.
    pub(super) fn serve(limits: AnswerLimits, max_streams: u32) -> Connection {
        let side = Side::Server(Serving {
            highest_seen: 0,
            last_taken: 0,
            accepted: Vec::new(),
            max_streams: max_streams as usize,
            cancelled: 0,
            answered: 0,
        });
        Connection::new(
            side,
            BytesMut::with_capacity(READ_BYTES),
            limits,
            &[(setting::MAX_CONCURRENT_STREAMS, max_streams)],
            (max_streams as usize).min(MOST_STREAMS),
        )
    }

    /// A connection whose first SETTINGS (these `settings`, the window and header list size
    /// every connection gives, a window for `streams` streams) are queued after `out`.
    fn new(
        side: Side,
        mut out: BytesMut,
        limits: AnswerLimits,
        settings: &[(u16, u32)],
        streams: usize,
    ) -> Connection {
        let list_size = u32::try_from(limits.bytes).unwrap_or(u32::MAX);
        let mut all = vec![
            (setting::INITIAL_WINDOW_SIZE, STREAM_WINDOW),
            (setting::MAX_HEADER_LIST_SIZE, list_size),
        ];
        all.extend_from_slice(settings);
        frame::settings(&mut out, &all);
        // Room for every stream's window at once: streams whose readers stop reading hold only
        // their own windows, never the connection's, which the other streams need (RFC 9113
        // §5.2: streams "do not destructively interfere").
        let window = STREAM_WINDOW.saturating_mul(streams.max(1) as u32);
        let decoder = match side {
            Side::Client { .. } => hpack::Decoder::remembering(HEADER_TABLE_SIZE),
            Side::Server(_) => hpack::Decoder::new(HEADER_TABLE_SIZE),
        };
        if window > frame::DEFAULT_WINDOW {
            frame::window_update(&mut out, 0, window - frame::DEFAULT_WINDOW);
        }
        Connection {
            side,
            streams: HashMap::default(),
            out,
            block: HeaderBlock::default(),
            driver: None,
            waiting: Vec::new(),
            send_window: i64::from(frame::DEFAULT_WINDOW),
            recv_window: i64::from(window.max(frame::DEFAULT_WINDOW)),
            unreleased: 0,
            peer: PeerSettings {
                initial_window: frame::DEFAULT_WINDOW,
                max_frame: frame::DEFAULT_MAX_FRAME,
                max_streams: ASSUMED_STREAMS,
            },
            settings_seen: false,
            refusing: false,
            closed: false,
            closing: false,
            abandoned: false,
            said_goaway: false,
            decoder,
            limits,
        }
    }

    pub(super) fn wake_driver(&mut self) {
        if let Some(driver) = self.driver.take() {
            driver.wake();
        }
    }

    /// Wakes `waker` when the connection changes (a stream frees, the window opens, the queue
    /// drains, SETTINGS come), once however often its task asks.
    pub(super) fn wait(&mut self, waker: &Waker) {
        if !self.waiting.iter().any(|waiting| waiting.will_wake(waker)) {
            self.waiting.push(waker.clone());
        }
    }

    pub(super) fn wake_waiting(&mut self) {
        for waiting in self.waiting.drain(..) {
            waiting.wake();
        }
    }

    pub(super) fn max_streams(&self) -> usize {
        self.peer.max_streams.min(MOST_STREAMS)
    }

    /// Opens a stream to a backend for a request's head (sent whole when `end`), its
    /// HEADERS queued.
    pub(super) fn open(&mut self, head: &http::request::Parts, end: bool) -> u32 {
        let Side::Client { next_stream, tls } = &mut self.side else {
            unreachable!("only trafik's side of a backend connection opens streams");
        };
        let id = *next_stream;
        *next_stream += 2;
        if *next_stream > frame::MAX_STREAM_ID {
            // Stream ids are spent (RFC 9113 §5.1.1): this one is the last.
            self.refusing = true;
        }
        let block = self
            .block
            .request(&head.method, &head.uri, *tls, &head.headers);
        frame::headers(&mut self.out, id, block, end, self.peer.max_frame);
        let bodiless = head.method == http::Method::HEAD;
        self.streams
            .insert(id, Stream::new(self.peer.initial_window, end, bodiless));
        self.wake_driver();
        id
    }

    /// Gives `amount` bytes the reader of stream `id` took (or that no one will read) back
    /// to the windows they came through, with a WINDOW_UPDATE once half a stream's window is
    /// owed. The connection's is given back at the same pace, not at half its own size:
    /// streams whose clients stopped reading may hold most of it for good, and the others'
    /// returns must flow all the same.
    pub(super) fn release(&mut self, id: Option<u32>, amount: usize) {
        let amount = amount as u32;
        if let Some(stream) = id.and_then(|id| self.streams.get_mut(&id).map(|s| (id, s))) {
            let (id, stream) = stream;
            stream.unreleased += amount;
            if stream.unreleased >= STREAM_WINDOW / 2 && !stream.is_done() {
                frame::window_update(&mut self.out, id, stream.unreleased);
                stream.recv_window += i64::from(stream.unreleased);
                stream.unreleased = 0;
                self.wake_driver();
            }
        }
        self.unreleased += amount;
        if self.unreleased >= STREAM_WINDOW / 2 && !self.closed {
            frame::window_update(&mut self.out, 0, self.unreleased);
            self.recv_window += i64::from(self.unreleased);
            self.unreleased = 0;
            self.wake_driver();
        }
    }

    /// Ends stream `id` with RST_STREAM (a stream error, RFC 9113 §5.4.2).
    pub(super) fn reset(&mut self, id: u32, reason: Reason) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        if stream.reset || self.closed {
            return;
        }
        stream.reset = true;
        stream.stop(Stop::Local(reason));
        frame::reset(&mut self.out, id, reason);
        self.wake_driver();
    }

    /// Ends the connection with a GOAWAY: the streams not yet whole are lost.
    fn fail(&mut self, reason: Reason) {
        if !self.closing && !self.closed {
            let last = self.last_peer_stream();
            frame::goaway(&mut self.out, last, reason);
            self.said_goaway = true;
        }
        self.closing = true;
        self.lose_streams(|_| true, Stop::Lost);
    }

    /// Takes no new stream from now on and says so (GOAWAY with the last stream taken, so a
    /// client knows which requests to send again); the connection closes once the streams
    /// under way are done.
    pub(super) fn go_away(&mut self) {
        if !self.said_goaway && !self.closing && !self.closed {
            let last = self.last_peer_stream();
            frame::goaway(&mut self.out, last, Reason::NO_ERROR);
            self.said_goaway = true;
        }
        self.refusing = true;
        self.abandoned = true;
        self.wake_driver();
    }

    /// The last stream the peer opened, as a GOAWAY names it: none when trafik is the client
    /// (pushes are refused).
    fn last_peer_stream(&self) -> u32 {
        match &self.side {
            Side::Client { .. } => 0,
            Side::Server(serving) => serving.last_taken,
        }
    }

    /// Counts a client's request cancelled (its RST_STREAM), or reset for what the client
    /// sent on it (a stream error): the connection ends (ENHANCE_YOUR_CALM) once a client
    /// has far more requests cancelled than it lets finish. A stream error the client provokes
    /// starts a request's work and ends it as a cancel does ("MadeYouReset", CVE-2025-8671).
    fn cancelled(&mut self) {
        if let Side::Server(serving) = &mut self.side {
            serving.cancelled += 1;
            if serving.cancelled > serving.answered + MOST_CANCELLED {
                self.fail(Reason::ENHANCE_YOUR_CALM);
            }
        }
    }

    /// Ends stream `id` for what the peer sent on it (a stream error, RFC 9113 §5.4.2),
    /// counted against a client as a cancel.
    pub(super) fn stream_error(&mut self, id: u32, reason: Reason) {
        let live = self.streams.get(&id).is_some_and(|stream| !stream.reset);
        self.reset(id, reason);
        if live {
            self.cancelled();
        }
    }

    /// Counts an answer sent whole to a client.
    pub(super) fn answered(&mut self) {
        if let Side::Server(serving) = &mut self.side {
            serving.answered += 1;
        }
    }

    /// The streams `which` names that are not over are lost; no stream opens from now on.
    fn lose_streams(&mut self, which: impl Fn(u32) -> bool, how: Stop) {
        self.refusing = true;
        for (&id, stream) in self.streams.iter_mut() {
            if which(id) {
                stream.stop(how);
            }
        }
        self.wake_waiting();
        self.wake_driver();
    }

    /// Whether `id` names a stream not yet opened ("idle", RFC 9113 §5.1), or an even one,
    /// which only a server opens, and trafik neither pushes nor takes pushes.
    fn is_idle(&self, id: u32) -> bool {
        id.is_multiple_of(2)
            || match &self.side {
                Side::Client { next_stream, .. } => id >= *next_stream,
                Side::Server(serving) => id > serving.highest_seen,
            }
    }
}

/// How many bytes of DATA an answer's head promises: none for the answer to a HEAD request
/// (`head_request`) or a status without a body, else its `content-length` (checked sound when
/// the head came), if any.
pub(super) fn body_length(
    head_request: bool,
    status: StatusCode,
    fields: &HeaderMap,
) -> Option<u64> {
    if head_request || matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED) {
        return Some(0);
    }
    content_length(fields)
}

/// The length `content-length` gives (checked sound when the head came), if any.
pub(super) fn content_length(fields: &HeaderMap) -> Option<u64> {
    fields
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse().ok())
}

/// Whether an answer's `content-length` fields, if any, all give one valid length (RFC 9110
/// §8.6): anything else is a malformed answer (RFC 9113 §8.1.1), never relayed.
fn content_length_is_sound(fields: &HeaderMap) -> bool {
    let mut values = fields.get_all(header::CONTENT_LENGTH).iter();
    let Some(first) = values.next() else {
        return true;
    };
    let valid = |value: &HeaderValue| {
        !value.is_empty() && value.as_bytes().iter().all(u8::is_ascii_digit) && value.len() <= 19
    };
    valid(first) && values.all(|value| value == first)
}

/// Writes what the streams queued and reads the backend's frames until the connection ends,
/// then fails what was left open and closes it.
async fn drive(mut io: transport::Upstream, connection: Rc<RefCell<Connection>>) {
    let mut reader = Reader::new(Stage::Settings, BytesMut::new());
    poll_fn(|cx| poll_drive(cx, &mut io, &connection, &mut reader)).await;
    close(&mut io, &connection).await;
}

/// Ends a connection whose driver stopped: what was left open is lost, the socket shut down.
pub(super) async fn close<S: AsyncWrite + Unpin>(io: &mut S, connection: &RefCell<Connection>) {
    {
        // Marked closed before anyone woken by the loss runs.
        let mut shared = connection.borrow_mut();
        shared.closed = true;
        shared.lose_streams(|_| true, Stop::Lost);
    }
    let _ = tokio::time::timeout(CLOSE_WAIT, io.shutdown()).await;
}

/// One turn of the driver: `Ready` when the connection is over.
pub(super) fn poll_drive<S: AsyncRead + AsyncWrite + Unpin>(
    cx: &mut Context<'_>,
    io: &mut S,
    connection: &RefCell<Connection>,
    reader: &mut Reader,
) -> Poll<()> {
    loop {
        {
            let mut shared = connection.borrow_mut();
            let shared = &mut *shared;
            let queued = shared.out.len();
            while !shared.out.is_empty() {
                match Pin::new(&mut *io).poll_write(cx, &shared.out) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(()),
                    Poll::Ready(Ok(written)) => shared.out.advance(written),
                    Poll::Pending => break,
                }
            }
            if shared.out.is_empty() {
                if let Poll::Ready(Err(_)) = Pin::new(&mut *io).poll_flush(cx) {
                    return Poll::Ready(());
                }
                if shared.closing {
                    return Poll::Ready(());
                }
            }
            if queued >= QUEUED_MOST && shared.out.len() < QUEUED_MOST {
                shared.wake_waiting();
            }
            if shared.abandoned && shared.streams.is_empty() && !shared.closing {
                // No stream will open, and none is open: a graceful end.
                if !shared.said_goaway {
                    let last = shared.last_peer_stream();
                    frame::goaway(&mut shared.out, last, Reason::NO_ERROR);
                }
                shared.closing = true;
                shared.refusing = true;
                continue;
            }
            if shared.out.len() >= OWED_MOST {
                // A peer that keeps sending without reading what it is answered (PING and
                // SETTINGS acknowledgements, answers) is not read from until it does: what
                // trafik owes it stays bounded. The write's waker is set.
                return Poll::Pending;
            }
        }
        let read = match reader.buffered {
            // Bytes read before the driver began are framed before anything more is read.
            true => {
                reader.buffered = false;
                Ok(1)
            }
            false => match pin!(reader.read(io)).poll(cx) {
                Poll::Pending => {
                    let mut shared = connection.borrow_mut();
                    if !shared
                        .driver
                        .as_ref()
                        .is_some_and(|w| w.will_wake(cx.waker()))
                    {
                        shared.driver = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
                Poll::Ready(read) => read,
            },
        };
        match read {
            Ok(0) | Err(_) => return Poll::Ready(()),
            Ok(_) => {
                let mut shared = connection.borrow_mut();
                if let Err(ConnectionError(reason)) = reader.frames(&mut shared) {
                    shared.fail(reason);
                }
            }
        }
    }
}

/// The reading side: bytes read and not yet framed, a header block awaiting its
/// CONTINUATION frames.
pub(super) struct Reader {
    input: BytesMut,
    partial: Option<PartialHeaders>,
    stage: Stage,
    /// `input` holds bytes not yet framed, read before the driver began.
    buffered: bool,
}

/// What the reader expects next.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// A client's preface (RFC 9113 §3.4), then its SETTINGS.
    Preface,
    /// The peer's first frame, which must be SETTINGS.
    Settings,
    Frames,
}

/// A header block, whole or awaiting its CONTINUATION frames.
struct PartialHeaders {
    stream: u32,
    end_stream: bool,
    block: BytesMut,
    /// CONTINUATION frames so far.
    continuations: usize,
}

impl Reader {
    /// A reader expecting `stage`, with the bytes already read from the connection.
    pub(super) fn new(stage: Stage, input: BytesMut) -> Reader {
        Reader {
            buffered: !input.is_empty(),
            input,
            partial: None,
            stage,
        }
    }

    /// A header block's fragment taken: decoded once `header` ends it, else kept for the
    /// CONTINUATION frames to come.
    fn block_goes_on(
        &mut self,
        connection: &mut Connection,
        partial: PartialHeaders,
        header: frame::Header,
    ) -> Result<(), ConnectionError> {
        if header.has(flag::END_HEADERS) {
            return headers(connection, partial);
        }
        self.partial = Some(partial);
        Ok(())
    }

    fn read<'a, S: AsyncRead + Unpin>(
        &'a mut self,
        io: &'a mut S,
    ) -> impl Future<Output = io::Result<usize>> + 'a {
        if self.input.capacity() - self.input.len() < READ_BYTES / 2 {
            self.input.reserve(READ_BYTES);
        }
        io.read_buf(&mut self.input)
    }

    /// Handles every whole frame read so far.
    fn frames(&mut self, connection: &mut Connection) -> Result<(), ConnectionError> {
        if self.stage == Stage::Preface {
            let length = self.input.len().min(frame::PREFACE.len());
            if self.input[..length] != frame::PREFACE[..length] {
                return Err(ConnectionError(Reason::PROTOCOL_ERROR));
            }
            if length < frame::PREFACE.len() {
                return Ok(());
            }
            self.input.advance(length);
            self.stage = Stage::Settings;
        }
        while self.input.len() >= frame::HEADER_LEN {
            let header = frame::Header::parse(&self.input);
            if header.length > frame::DEFAULT_MAX_FRAME {
                return Err(ConnectionError(Reason::FRAME_SIZE_ERROR));
            }
            if self.input.len() < frame::HEADER_LEN + header.length {
                self.input.reserve(frame::HEADER_LEN + header.length);
                return Ok(());
            }
            self.input.advance(frame::HEADER_LEN);
            let payload = self.input.split_to(header.length);
            if self.stage == Stage::Settings {
                if header.kind != kind::SETTINGS || header.has(flag::ACK) {
                    return Err(ConnectionError(Reason::PROTOCOL_ERROR));
                }
                self.stage = Stage::Frames;
            }
            self.frame(connection, header, payload)?;
        }
        Ok(())
    }

    fn frame(
        &mut self,
        connection: &mut Connection,
        header: frame::Header,
        payload: BytesMut,
    ) -> Result<(), ConnectionError> {
        if self.partial.is_some() && header.kind != kind::CONTINUATION {
            return Err(ConnectionError(Reason::PROTOCOL_ERROR));
        }
        match header.kind {
            kind::DATA => data(connection, header, payload),
            kind::HEADERS => {
                let partial = PartialHeaders {
                    stream: header.stream,
                    end_stream: header.has(flag::END_STREAM),
                    block: header_block(header, payload)?,
                    continuations: 0,
                };
                self.block_goes_on(connection, partial, header)
            }
            kind::CONTINUATION => {
                let Some(mut partial) = self.partial.take() else {
                    return Err(ConnectionError(Reason::PROTOCOL_ERROR));
                };
                if header.stream != partial.stream {
                    return Err(ConnectionError(Reason::PROTOCOL_ERROR));
                }
                // A block no answer head may be (a flood of CONTINUATION frames), or more
                // frames than a head of that size needs in pieces of 1 KiB (empty ones cost
                // no memory, but each costs a turn).
                partial.continuations += 1;
                if partial.block.len() + payload.len()
                    > connection.limits.bytes + frame::DEFAULT_MAX_FRAME
                    || partial.continuations > most_continuations(connection.limits)
                {
                    return Err(ConnectionError(Reason::ENHANCE_YOUR_CALM));
                }
                partial.block.unsplit(payload);
                self.block_goes_on(connection, partial, header)
            }
            kind::RST_STREAM => reset(connection, header, &payload),
            kind::SETTINGS => settings(connection, header, &payload),
            kind::PING => {
                if header.length != 8 {
                    return Err(ConnectionError(Reason::FRAME_SIZE_ERROR));
                }
                if header.stream != 0 {
                    return Err(ConnectionError(Reason::PROTOCOL_ERROR));
                }
                if !header.has(flag::ACK) {
                    frame::ping_ack(&mut connection.out, &payload);
                }
                Ok(())
            }
            kind::GOAWAY => {
                if header.stream != 0 {
                    return Err(ConnectionError(Reason::PROTOCOL_ERROR));
                }
                if header.length < 8 {
                    return Err(ConnectionError(Reason::FRAME_SIZE_ERROR));
                }
                match connection.side {
                    Side::Client { .. } => {
                        let last = frame::be_u31(&payload);
                        // Streams past `last` were not processed; the others may still finish.
                        connection.lose_streams(|id| id > last, Stop::Unprocessed);
                    }
                    // A client opens no more streams (the id it names is of pushes): the
                    // requests under way finish.
                    Side::Server(_) => {
                        connection.refusing = true;
                        connection.abandoned = true;
                    }
                }
                Ok(())
            }
            kind::WINDOW_UPDATE => window_update(connection, header, &payload),
            // Pushes were refused in trafik's SETTINGS; a client never pushes.
            kind::PUSH_PROMISE => Err(ConnectionError(Reason::PROTOCOL_ERROR)),
            // PRIORITY and unknown frame types are ignored (RFC 9113 §5.5, §5.3.2).
            _ => Ok(()),
        }
    }
}

fn data(
    connection: &mut Connection,
    header: frame::Header,
    mut payload: BytesMut,
) -> Result<(), ConnectionError> {
    let length = header.length;
    if header.stream == 0 {
        return Err(ConnectionError(Reason::PROTOCOL_ERROR));
    }
    if length as i64 > connection.recv_window {
        return Err(ConnectionError(Reason::FLOW_CONTROL_ERROR));
    }
    connection.recv_window -= length as i64;
    if header.has(flag::PADDED) {
        let padding = payload.first().map_or(usize::MAX, |&p| usize::from(p));
        if padding >= length {
            return Err(ConnectionError(Reason::PROTOCOL_ERROR));
        }
        payload.advance(1);
        payload.truncate(payload.len() - padding);
    }
    let id = header.stream;
    let Some(stream) = connection.streams.get_mut(&id) else {
        if connection.is_idle(id) {
            return Err(ConnectionError(Reason::PROTOCOL_ERROR));
        }
        // A stream already forgotten: its bytes go straight back to the window.
        connection.release(None, length);
        return Ok(());
    };
    if stream.stopped.is_some() {
        connection.release(None, length);
        return Ok(());
    }
    if !stream.answered || stream.ended || length as i64 > stream.recv_window {
        // After the peer's END_STREAM the stream is half-closed for it (RFC 9113 §5.1).
        let reason = if stream.ended {
            Reason::STREAM_CLOSED
        } else if length as i64 > stream.recv_window {
            Reason::FLOW_CONTROL_ERROR
        } else {
            Reason::PROTOCOL_ERROR
        };
        connection.release(None, length);
        connection.stream_error(id, reason);
        return Ok(());
    }
    stream.recv_window -= length as i64;
    let padding = length - payload.len();
    if !payload.is_empty() {
        stream.hold(payload);
    }
    if header.has(flag::END_STREAM) {
        stream.ended = true;
    }
    if let Some(reader) = stream.reader.take() {
        reader.wake();
    }
    if padding > 0 {
        connection.release(Some(id), padding);
    }
    Ok(())
}

/// The most CONTINUATION frames one header block may take: a head of the largest size allowed,
/// in pieces of 1 KiB, and a few more.
fn most_continuations(limits: AnswerLimits) -> usize {
    8 + limits.bytes / 1024
}

/// A HEADERS frame's block fragment: its payload without padding and priority (RFC 9113 §6.2).
fn header_block(header: frame::Header, mut payload: BytesMut) -> Result<BytesMut, ConnectionError> {
    if header.stream == 0 {
        return Err(ConnectionError(Reason::PROTOCOL_ERROR));
    }
    let mut padding = 0;
    if header.has(flag::PADDED) {
        let Some(&length) = payload.first() else {
            return Err(ConnectionError(Reason::FRAME_SIZE_ERROR));
        };
        payload.advance(1);
        padding = usize::from(length);
    }
    if header.has(flag::PRIORITY) {
        if payload.len() < 5 {
            return Err(ConnectionError(Reason::FRAME_SIZE_ERROR));
        }
        payload.advance(5);
    }
    if padding > payload.len() {
        return Err(ConnectionError(Reason::PROTOCOL_ERROR));
    }
    payload.truncate(payload.len() - padding);
    Ok(payload)
}

/// A head or trailers as decoded, checked as RFC 9113 §8.1.1, §8.2 and §8.3 ask of either
/// end's.
struct Decoded {
    pseudo: Pseudo,
    fields: HeaderMap,
    /// A field HTTP/2 forbids, a pseudo-field twice or out of place, a value that is no field
    /// value.
    malformed: bool,
    /// More fields (or bytes of them) than `[server.limits]` lets a head have.
    too_large: bool,
}

/// The pseudo-fields of a block: a request's or an answer's.
#[derive(Default)]
struct Pseudo {
    status: Option<Bytes>,
    method: Option<Bytes>,
    scheme: Option<Bytes>,
    path: Option<Bytes>,
    authority: Option<Bytes>,
}

impl Pseudo {
    fn is_empty(&self) -> bool {
        self.status.is_none()
            && self.method.is_none()
            && self.scheme.is_none()
            && self.path.is_none()
            && self.authority.is_none()
    }
}

fn decode(connection: &mut Connection, block: Bytes) -> Result<Decoded, ConnectionError> {
    let limits = connection.limits;
    let mut decoded = Decoded {
        pseudo: Pseudo::default(),
        fields: field_maps::take(),
        malformed: false,
        too_large: false,
    };
    let mut size = 0;
    connection
        .decoder
        .decode(block, |name, value| {
            size += name.len() + value.len() + hpack::ENTRY_OVERHEAD;
            if size > limits.bytes || decoded.fields.len() >= limits.headers {
                decoded.too_large = true;
                return;
            }
            let pseudo = &mut decoded.pseudo;
            let slot = match name {
                Name::Field(name) => {
                    // No space or tab may open or close a value (RFC 9113 §8.2.1).
                    let padded = |byte: Option<&u8>| matches!(byte, Some(b' ' | b'\t'));
                    let padded = padded(value.first()) || padded(value.last());
                    let value = HeaderValue::from_maybe_shared(value);
                    match value {
                        Ok(value) if !padded && !frame::is_connection_specific(&name, &value) => {
                            decoded.fields.append(name, value);
                        }
                        _ => decoded.malformed = true,
                    }
                    return;
                }
                Name::Status => &mut pseudo.status,
                Name::Method => &mut pseudo.method,
                Name::Scheme => &mut pseudo.scheme,
                Name::Path => &mut pseudo.path,
                Name::Authority => &mut pseudo.authority,
                // `:protocol` needs SETTINGS_ENABLE_CONNECT_PROTOCOL, which trafik never sends.
                Name::Protocol | Name::Malformed(_) => {
                    decoded.malformed = true;
                    return;
                }
            };
            // Pseudo-fields come once each, before every field (RFC 9113 §8.3).
            if slot.is_some() || !decoded.fields.is_empty() {
                decoded.malformed = true;
            }
            *slot = Some(value);
        })
        .map_err(|_| ConnectionError(Reason::COMPRESSION_ERROR))?;
    Ok(decoded)
}

fn headers(connection: &mut Connection, partial: PartialHeaders) -> Result<(), ConnectionError> {
    let PartialHeaders {
        stream: id,
        end_stream,
        block,
        ..
    } = partial;
    // Decoded whatever becomes of it: the decoder's table is the connection's.
    let decoded = decode(connection, block.freeze())?;
    let Some(stream) = connection.streams.get_mut(&id) else {
        if connection.is_idle(id) {
            if let Side::Server(_) = connection.side {
                return open_request(connection, id, end_stream, decoded);
            }
            return Err(ConnectionError(Reason::PROTOCOL_ERROR));
        }
        return Ok(());
    };
    if stream.stopped.is_some() {
        return Ok(());
    }
    if stream.ended {
        // Half-closed for the peer (RFC 9113 §5.1).
        connection.stream_error(id, Reason::STREAM_CLOSED);
    } else if decoded.malformed || decoded.too_large || !stream.take_block(decoded, end_stream) {
        connection.stream_error(id, Reason::PROTOCOL_ERROR);
    }
    Ok(())
}

/// A client's new stream: its request is accepted for the server to answer, refused
/// (REFUSED_STREAM, which the client may send again) when the client has as many open as
/// trafik allows or said GOAWAY itself, reset (PROTOCOL_ERROR) when malformed, ignored once
/// trafik said GOAWAY (which told the client so).
fn open_request(
    connection: &mut Connection,
    id: u32,
    end_stream: bool,
    decoded: Decoded,
) -> Result<(), ConnectionError> {
    let Side::Server(serving) = &mut connection.side else {
        return Err(ConnectionError(Reason::PROTOCOL_ERROR));
    };
    if id.is_multiple_of(2) {
        return Err(ConnectionError(Reason::PROTOCOL_ERROR));
    }
    serving.highest_seen = id;
    if connection.said_goaway || connection.closing {
        return Ok(());
    }
    // A length must be sound, and END_STREAM with the head breaks a promise of DATA (RFC
    // 9113 §8.1.1).
    let broken_length = !content_length_is_sound(&decoded.fields)
        || (end_stream && content_length(&decoded.fields).is_some_and(|length| length > 0));
    // Streams stay in the map while their handles last; only those still open count (RFC
    // 9113 §5.1.2), counted only when the map is at the limit. Twice the limit held (a burst
    // of streams reset before their work was dropped) refuses outright: the count's cost, and
    // the map, stay bounded.
    let held = connection.streams.len();
    let full = held >= 2 * serving.max_streams
        || held >= serving.max_streams
            && connection
                .streams
                .values()
                .filter(|stream| stream.is_open())
                .count()
                >= serving.max_streams;
    let refusal = if full || connection.refusing {
        Some(Reason::REFUSED_STREAM)
    } else if decoded.malformed || broken_length {
        Some(Reason::PROTOCOL_ERROR)
    } else {
        None
    };
    let head = match (refusal, decoded.too_large) {
        (Some(_), _) => None,
        // Answered 431, as HTTP/1.1's parser answers a head past the limits.
        (None, true) => Some(None),
        (None, false) => request_head(decoded).map(Some),
    };
    let Some(head) = head else {
        let reason = refusal.unwrap_or(Reason::PROTOCOL_ERROR);
        frame::reset(&mut connection.out, id, reason);
        connection.wake_driver();
        // A refusal starts no work: only a malformed request counts as a cancel.
        if reason != Reason::REFUSED_STREAM {
            connection.cancelled();
        }
        return Ok(());
    };
    serving.last_taken = id;
    let mut stream = Stream::new(connection.peer.initial_window, false, false);
    stream.answered = true;
    stream.ended = end_stream;
    connection.streams.insert(id, stream);
    serving.accepted.push(Accepted {
        id,
        head,
        body: !end_stream,
    });
    Ok(())
}

/// A request's head from a client's well-formed block: `None` when its pseudo-fields are not a
/// request's (RFC 9113 §8.3.1).
fn request_head(decoded: Decoded) -> Option<Request<()>> {
    let Decoded { pseudo, fields, .. } = decoded;
    if pseudo.status.is_some() {
        return None;
    }
    let method = Method::from_bytes(&pseudo.method?).ok()?;
    let mut parts = http::uri::Parts::default();
    if let Some(authority) = pseudo.authority {
        parts.authority = Some(http::uri::Authority::from_maybe_shared(authority).ok()?);
    }
    if method == Method::CONNECT {
        // CONNECT names only the authority (RFC 9113 §8.5).
        if pseudo.scheme.is_some() || pseudo.path.is_some() || parts.authority.is_none() {
            return None;
        }
    } else {
        let (scheme, path) = (pseudo.scheme?, pseudo.path?);
        if path.is_empty() {
            return None;
        }
        parts.path_and_query = Some(http::uri::PathAndQuery::from_maybe_shared(path).ok()?);
        if parts.authority.is_some() {
            parts.scheme = Some(match &scheme[..] {
                b"http" => http::uri::Scheme::HTTP,
                b"https" => http::uri::Scheme::HTTPS,
                other => other.try_into().ok()?,
            });
        }
    }
    let mut head = Request::new(());
    *head.method_mut() = method;
    *head.uri_mut() = http::Uri::from_parts(parts).ok()?;
    *head.version_mut() = http::Version::HTTP_2;
    *head.headers_mut() = fields;
    Some(head)
}

impl Stream {
    /// Takes a well-formed block as a backend's answer head, an interim head, or the peer's
    /// trailers; false when it has no place here (a stream error).
    fn take_block(&mut self, decoded: Decoded, end_stream: bool) -> bool {
        let Decoded { pseudo, fields, .. } = decoded;
        if self.answered {
            // The trailers: they end the stream, and carry no pseudo-field (RFC 9113 §8.1).
            if !end_stream || !pseudo.is_empty() {
                return false;
            }
            self.trailers = Some(Box::new(fields));
            self.ended = true;
        } else {
            let status = match pseudo {
                Pseudo {
                    status: Some(status),
                    method: None,
                    scheme: None,
                    path: None,
                    authority: None,
                } if status.len() == 3 => StatusCode::from_bytes(&status).ok(),
                _ => None,
            };
            let Some(status) = status else {
                return false;
            };
            if status.is_informational() {
                // An interim answer (103, 100): the final one follows. 101 has no place in
                // HTTP/2 (RFC 9113 §8.6).
                return !end_stream && status != StatusCode::SWITCHING_PROTOCOLS;
            }
            // A length is a promise of DATA that an END_STREAM here breaks (RFC 9113 §8.1.1).
            let broken_promise = end_stream
                && body_length(self.bodiless, status, &fields).is_some_and(|length| length > 0);
            if !content_length_is_sound(&fields) || broken_promise {
                return false;
            }
            let mut head = Response::new(());
            *head.status_mut() = status;
            *head.version_mut() = http::Version::HTTP_2;
            *head.headers_mut() = fields;
            self.head = Some(head);
            self.answered = true;
            self.ended = end_stream;
        }
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
        true
    }
}

fn reset(
    connection: &mut Connection,
    header: frame::Header,
    payload: &[u8],
) -> Result<(), ConnectionError> {
    if header.length != 4 {
        return Err(ConnectionError(Reason::FRAME_SIZE_ERROR));
    }
    if header.stream == 0 || connection.is_idle(header.stream) {
        return Err(ConnectionError(Reason::PROTOCOL_ERROR));
    }
    let reason = Reason::from(frame::be_u32(payload));
    if let Some(stream) = connection.streams.get_mut(&header.stream)
        && !stream.reset
    {
        let answering = !stream.sending_closed;
        stream.reset = true;
        stream.stop(Stop::Reset(reason));
        if answering {
            connection.cancelled();
        }
    }
    Ok(())
}

fn settings(
    connection: &mut Connection,
    header: frame::Header,
    payload: &[u8],
) -> Result<(), ConnectionError> {
    if header.stream != 0 {
        return Err(ConnectionError(Reason::PROTOCOL_ERROR));
    }
    if header.has(flag::ACK) {
        return match header.length {
            0 => Ok(()),
            _ => Err(ConnectionError(Reason::FRAME_SIZE_ERROR)),
        };
    }
    if !header.length.is_multiple_of(6) {
        return Err(ConnectionError(Reason::FRAME_SIZE_ERROR));
    }
    // Before any MAX_CONCURRENT_STREAMS the backend allows any number (RFC 9113 §6.5.2).
    if !connection.settings_seen {
        connection.peer.max_streams = usize::MAX;
    }
    for entry in payload.chunks_exact(6) {
        let id = u16::from_be_bytes([entry[0], entry[1]]);
        let value = frame::be_u32(&entry[2..]);
        match id {
            setting::MAX_CONCURRENT_STREAMS => connection.peer.max_streams = value as usize,
            setting::INITIAL_WINDOW_SIZE => {
                if i64::from(value) > frame::MAX_WINDOW {
                    return Err(ConnectionError(Reason::FLOW_CONTROL_ERROR));
                }
                let change = i64::from(value) - i64::from(connection.peer.initial_window);
                connection.peer.initial_window = value;
                for stream in connection.streams.values_mut() {
                    stream.send_window += change;
                    if stream.send_window > frame::MAX_WINDOW {
                        return Err(ConnectionError(Reason::FLOW_CONTROL_ERROR));
                    }
                    if let Some(sender) = stream.sender.take() {
                        sender.wake();
                    }
                }
            }
            // A server may only say 0, a client 0 or 1 (RFC 9113 §6.5.2).
            setting::ENABLE_PUSH
                if value > 1 || (value == 1 && matches!(connection.side, Side::Client { .. })) =>
            {
                return Err(ConnectionError(Reason::PROTOCOL_ERROR));
            }
            setting::MAX_FRAME_SIZE => {
                if !(frame::DEFAULT_MAX_FRAME as u32..1 << 24).contains(&value) {
                    return Err(ConnectionError(Reason::PROTOCOL_ERROR));
                }
                connection.peer.max_frame = value as usize;
            }
            // trafik's encoder uses no table, but a smaller one must still be acknowledged.
            setting::HEADER_TABLE_SIZE => connection.block.peer_table_size(value),
            // The rest say nothing trafik acts on.
            _ => {}
        }
    }
    frame::settings_ack(&mut connection.out);
    connection.settings_seen = true;
    connection.wake_waiting();
    Ok(())
}

fn window_update(
    connection: &mut Connection,
    header: frame::Header,
    payload: &[u8],
) -> Result<(), ConnectionError> {
    if header.length != 4 {
        return Err(ConnectionError(Reason::FRAME_SIZE_ERROR));
    }
    let increment = i64::from(frame::be_u31(payload));
    if header.stream == 0 {
        if increment == 0 {
            return Err(ConnectionError(Reason::PROTOCOL_ERROR));
        }
        connection.send_window += increment;
        if connection.send_window > frame::MAX_WINDOW {
            return Err(ConnectionError(Reason::FLOW_CONTROL_ERROR));
        }
        connection.wake_waiting();
        return Ok(());
    }
    if connection.is_idle(header.stream) {
        return Err(ConnectionError(Reason::PROTOCOL_ERROR));
    }
    let Some(stream) = connection.streams.get_mut(&header.stream) else {
        return Ok(());
    };
    stream.send_window += increment;
    if increment == 0 || stream.send_window > frame::MAX_WINDOW {
        let reason = match increment {
            0 => Reason::PROTOCOL_ERROR,
            _ => Reason::FLOW_CONTROL_ERROR,
        };
        connection.stream_error(header.stream, reason);
        return Ok(());
    }
    if let Some(sender) = stream.sender.take() {
        sender.wake();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_asking_again_and_again_waits_once() {
        let mut connection = Connection::serve(AnswerLimits::default(), 100);
        let waker = futures_util::task::noop_waker();
        for _ in 0..1000 {
            connection.wait(&waker);
        }
        assert_eq!(connection.waiting.len(), 1);
        connection.wake_waiting();
        connection.wait(&waker);
        assert_eq!(connection.waiting.len(), 1);
    }

    #[test]
    fn content_length_must_be_one_valid_length() {
        let fields = |values: &[&str]| {
            let mut fields = HeaderMap::new();
            for value in values {
                fields.append(
                    header::CONTENT_LENGTH,
                    HeaderValue::from_str(value).unwrap(),
                );
            }
            fields
        };
        assert!(content_length_is_sound(&fields(&[])));
        assert!(content_length_is_sound(&fields(&["12"])));
        assert!(content_length_is_sound(&fields(&["12", "12"])));
        assert!(!content_length_is_sound(&fields(&["12", "13"])));
        assert!(!content_length_is_sound(&fields(&["+12"])));
        assert!(!content_length_is_sound(&fields(&["1 2"])));
        assert!(!content_length_is_sound(&fields(&[""])));
        assert!(!content_length_is_sound(&fields(&["99999999999999999999"])));
    }
}
