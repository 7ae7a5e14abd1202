//! One HTTP/2 connection to a backend (RFC 9113) as the worker's tasks share it: its streams,
//! its flow-control windows and the bytes waiting to be written. A worker is one thread, so
//! the state is a `RefCell`, never locked: a request's task writes its HEADERS into
//! [`Connection::out`] itself, its body's task its DATA, and one driver task per connection
//! ([`drive`]) writes those bytes and reads the backend's frames into the streams they
//! belong to, waking whoever waits on them. DATA reach the reader as the bytes that were
//! read (only small pieces queued behind others are copied, see `Stream::hold`). Whatever the backend sends is checked before it is believed: a frame
//! that breaks the protocol ends its stream or the connection with the code RFC 9113 names.

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
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::frame::{self, HeaderBlock, flag, kind, setting};
use super::hpack::{self, Name};
use crate::plan::AnswerLimits;
use crate::transport;

/// What a backend may send on one stream before trafik has read it: a stream whose client
/// stops reading holds at most this much (haproxy's grant too).
const STREAM_WINDOW: u32 = 64 * 1024;
/// The most streams trafik opens on one connection, whatever the backend allows; more
/// requests open another connection.
const MOST_STREAMS: usize = 128;
/// Room for every stream's window at once: streams whose clients stop reading hold only their
/// own windows, never the connection's, which the other streams need (RFC 9113 §5.2: streams
/// "do not destructively interfere").
const CONNECTION_WINDOW: u32 = STREAM_WINDOW * MOST_STREAMS as u32;
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
/// The HPACK table size trafik allows a backend (`SETTINGS_HEADER_TABLE_SIZE`'s default).
const HEADER_TABLE_SIZE: usize = 4096;
/// How long a closing connection may take to say so.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// One connection's state, shared by its driver and the tasks of its streams.
pub(super) struct Connection {
    pub(super) streams: HashMap<u32, Stream, BuildHasherDefault<StreamIdHash>>,
    /// The id the next stream takes (odd: client-initiated).
    pub(super) next_stream: u32,
    /// Frames waiting to be written.
    pub(super) out: BytesMut,
    pub(super) block: HeaderBlock,
    /// The driver, waiting for frames to write or bytes to read.
    pub(super) driver: Option<Waker>,
    /// Tasks waiting for the connection: a stream to open, its window, room in `out`, SETTINGS.
    pub(super) waiting: Vec<Waker>,
    /// What trafik may still send on the connection (the backend's window).
    pub(super) send_window: i64,
    /// What the backend may still send on the connection.
    pub(super) recv_window: i64,
    /// Bytes read by streams' readers, not yet given back to the connection's window.
    pub(super) unreleased: u32,
    pub(super) peer: PeerSettings,
    /// The backend's first SETTINGS came.
    pub(super) settings_seen: bool,
    /// No new stream may open: the backend said GOAWAY, the connection failed or closed.
    pub(super) refusing: bool,
    /// The driver stopped: nothing more is read or written.
    pub(super) closed: bool,
    /// A connection error was found: its GOAWAY is written, then the connection closes.
    pub(super) closing: bool,
    /// No handle is left to open a stream: the connection closes when its streams are done.
    pub(super) abandoned: bool,
    pub(super) decoder: hpack::Decoder,
    pub(super) limits: AnswerLimits,
    pub(super) tls: bool,
}

/// What the backend's SETTINGS said.
pub(super) struct PeerSettings {
    pub(super) initial_window: u32,
    pub(super) max_frame: usize,
    pub(super) max_streams: usize,
}

/// One request's stream.
pub(super) struct Stream {
    /// The answer's head, until the request's task takes it.
    pub(super) head: Option<Response<()>>,
    /// The head came (a later HEADERS frame is the trailers).
    pub(super) answered: bool,
    /// DATA read and not yet taken, as read; then `tail`, small pieces copied together.
    data: VecDeque<Bytes>,
    tail: BytesMut,
    pub(super) trailers: Option<HeaderMap>,
    /// The backend's END_STREAM came: the answer is whole.
    pub(super) ended: bool,
    /// The stream ended before the answer's end (never set once it is whole).
    pub(super) stopped: Option<Stop>,
    /// The request's frames may go no further: its end was sent, or the stream was reset
    /// either way (a reset after a whole answer stops only the upload, RFC 9113 §8.1).
    pub(super) sending_closed: bool,
    /// A RST_STREAM went or came: none is sent again.
    reset: bool,
    /// The request was HEAD: its answer's `content-length` promises no DATA.
    bodiless: bool,
    /// What trafik may still send on the stream.
    pub(super) send_window: i64,
    /// What the backend may still send on the stream.
    pub(super) recv_window: i64,
    /// Bytes read by the reader, not yet given back to the stream's window.
    pub(super) unreleased: u32,
    pub(super) reader: Option<Waker>,
    pub(super) sender: Option<Waker>,
    /// The request's task or answer's body, and the body's upload task, while they last.
    pub(super) handles: u8,
}

/// How a stream ended before its answer's end.
#[derive(Clone, Copy)]
pub(super) enum Stop {
    /// The backend's RST_STREAM.
    Reset(Reason),
    /// trafik reset it (a malformed answer, a failed upload, a reader gone).
    Local(Reason),
    /// The connection failed or closed under it, or the backend's GOAWAY left it unprocessed.
    Lost,
}

impl Stream {
    fn new(send_window: u32, sent_whole: bool, bodiless: bool) -> Stream {
        Stream {
            head: None,
            answered: false,
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

    /// Whether the stream is over for its reader: whole, or stopped.
    pub(super) fn is_done(&self) -> bool {
        self.ended || self.stopped.is_some()
    }

    /// Keeps a DATA payload for the reader. A large one, or the only one waiting, is kept as
    /// the bytes read (a slice of the read buffer, no copy); small ones behind others are
    /// copied together, so a backend sending many tiny frames to a client that does not read
    /// holds no more memory than its window's worth, never a read buffer per byte.
    fn hold(&mut self, payload: BytesMut) {
        if payload.len() >= SHARED_FROM || (self.data.is_empty() && self.tail.is_empty()) {
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
        self.data
            .pop_front()
            .or_else(|| (!self.tail.is_empty()).then(|| self.tail.split().freeze()))
    }

    /// Whether DATA is held unread.
    pub(super) fn holds_data(&self) -> bool {
        !self.data.is_empty() || !self.tail.is_empty()
    }

    /// The bytes of DATA held unread.
    pub(super) fn unread(&self) -> usize {
        self.data.iter().map(Bytes::len).sum::<usize>() + self.tail.len()
    }

    /// Ends the stream before its answer's end (`stop`), unless the answer is whole: then
    /// only the request's sending stops.
    fn stop(&mut self, stop: Stop) {
        self.sending_closed = true;
        if !self.is_done() {
            self.stopped = Some(stop);
        }
        self.wake();
    }
}

/// Hashes a stream id by one multiplication (Fibonacci hashing): ids are a connection's own
/// odd counter, so no peer chooses them, and SipHash's guard against chosen keys buys nothing.
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
        let list_size = u32::try_from(limits.bytes).unwrap_or(u32::MAX);
        frame::settings(
            &mut out,
            &[
                (setting::ENABLE_PUSH, 0),
                (setting::INITIAL_WINDOW_SIZE, STREAM_WINDOW),
                (setting::MAX_HEADER_LIST_SIZE, list_size),
            ],
        );
        frame::window_update(&mut out, 0, CONNECTION_WINDOW - frame::DEFAULT_WINDOW);
        let connection = Rc::new(RefCell::new(Connection {
            streams: HashMap::default(),
            next_stream: 1,
            out,
            block: HeaderBlock::default(),
            driver: None,
            waiting: Vec::new(),
            send_window: i64::from(frame::DEFAULT_WINDOW),
            recv_window: i64::from(CONNECTION_WINDOW),
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
            decoder: hpack::Decoder::new(HEADER_TABLE_SIZE),
            limits,
            tls,
        }));
        tokio::task::spawn_local(drive(stream, connection.clone()));
        connection
    }

    pub(super) fn wake_driver(&mut self) {
        if let Some(driver) = self.driver.take() {
            driver.wake();
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

    /// Opens a stream for a request's head (sent whole when `end`), its HEADERS queued.
    pub(super) fn open(&mut self, head: &http::request::Parts, end: bool) -> u32 {
        let id = self.next_stream;
        self.next_stream += 2;
        if self.next_stream > frame::MAX_STREAM_ID {
            // Stream ids are spent (RFC 9113 §5.1.1): this one is the last.
            self.refusing = true;
        }
        let block = self
            .block
            .request(&head.method, &head.uri, self.tls, &head.headers);
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

    /// Ends the connection with a GOAWAY: the streams not yet answered in full are lost.
    fn fail(&mut self, reason: Reason) {
        if !self.closing && !self.closed {
            frame::goaway(&mut self.out, 0, reason);
        }
        self.closing = true;
        self.lose_streams(|_| true);
    }

    /// The streams `which` names that are not over are lost; no stream opens from now on.
    fn lose_streams(&mut self, which: impl Fn(u32) -> bool) {
        self.refusing = true;
        for (&id, stream) in self.streams.iter_mut() {
            if which(id) {
                stream.stop(Stop::Lost);
            }
        }
        self.wake_waiting();
        self.wake_driver();
    }

    /// Whether `id` names a stream trafik never opened: one not yet ("idle", RFC 9113 §5.1),
    /// or an even one, which only a server opens, and pushes were refused.
    fn is_idle(&self, id: u32) -> bool {
        id >= self.next_stream || id.is_multiple_of(2)
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
    let mut reader = Reader::default();
    poll_fn(|cx| poll_drive(cx, &mut io, &connection, &mut reader)).await;
    {
        // Marked closed before anyone woken by the loss runs.
        let mut shared = connection.borrow_mut();
        shared.closed = true;
        shared.lose_streams(|_| true);
    }
    let _ = tokio::time::timeout(CLOSE_WAIT, io.shutdown()).await;
}

/// One turn of the driver: `Ready` when the connection is over.
fn poll_drive(
    cx: &mut Context<'_>,
    io: &mut transport::Upstream,
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
                // No handle is left to open a stream, and none is open: a graceful end.
                frame::goaway(&mut shared.out, 0, Reason::NO_ERROR);
                shared.closing = true;
                shared.refusing = true;
                continue;
            }
            if shared.out.len() >= OWED_MOST {
                // A backend that keeps sending without reading what it is answered (PING and
                // SETTINGS acknowledgements) is not read from until it does: what trafik owes
                // it stays bounded. The write's waker is set.
                return Poll::Pending;
            }
        }
        let read = match pin!(reader.read(io)).poll(cx) {
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
#[derive(Default)]
struct Reader {
    input: BytesMut,
    partial: Option<PartialHeaders>,
    /// The backend's first frame (which must be SETTINGS) came.
    started: bool,
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

    fn read<'a>(
        &'a mut self,
        io: &'a mut transport::Upstream,
    ) -> impl Future<Output = io::Result<usize>> + 'a {
        if self.input.capacity() - self.input.len() < READ_BYTES / 2 {
            self.input.reserve(READ_BYTES);
        }
        io.read_buf(&mut self.input)
    }

    /// Handles every whole frame read so far.
    fn frames(&mut self, connection: &mut Connection) -> Result<(), ConnectionError> {
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
            if !self.started {
                if header.kind != kind::SETTINGS || header.has(flag::ACK) {
                    return Err(ConnectionError(Reason::PROTOCOL_ERROR));
                }
                self.started = true;
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
                let last = frame::be_u31(&payload);
                // Streams past `last` were not processed; the others may still finish.
                connection.lose_streams(|id| id > last);
                Ok(())
            }
            kind::WINDOW_UPDATE => window_update(connection, header, &payload),
            // Pushes were refused in trafik's SETTINGS.
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
        let reason = match length as i64 > stream.recv_window {
            true => Reason::FLOW_CONTROL_ERROR,
            false => Reason::PROTOCOL_ERROR,
        };
        connection.release(None, length);
        connection.reset(id, reason);
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

/// An answer's head or trailers as decoded, checked as RFC 9113 §8.1.1 and §8.3.2 ask.
struct Decoded {
    status: Option<StatusCode>,
    fields: HeaderMap,
    /// A field HTTP/2 forbids, a pseudo-field out of place, a value that is no field value,
    /// or more fields (or bytes of them) than `[server.limits]` lets an answer's head have.
    malformed: bool,
}

fn decode(connection: &mut Connection, block: Bytes) -> Result<Decoded, ConnectionError> {
    let limits = connection.limits;
    let mut decoded = Decoded {
        status: None,
        fields: HeaderMap::new(),
        malformed: false,
    };
    let mut size = 0;
    connection
        .decoder
        .decode(block, |name, value| {
            size += name.len() + value.len() + hpack::ENTRY_OVERHEAD;
            if size > limits.bytes || decoded.fields.len() >= limits.headers {
                decoded.malformed = true;
                return;
            }
            match name {
                Name::Status if decoded.status.is_none() && decoded.fields.is_empty() => {
                    match StatusCode::from_bytes(&value) {
                        Ok(status) if value.len() == 3 => decoded.status = Some(status),
                        _ => decoded.malformed = true,
                    }
                }
                Name::Field(name) => {
                    // No space or tab may open or close a value (RFC 9113 §8.2.1).
                    let padded = |byte: Option<&u8>| matches!(byte, Some(b' ' | b'\t'));
                    let padded = padded(value.first()) || padded(value.last());
                    let value = HeaderValue::from_maybe_shared(value);
                    match value {
                        Ok(value) if !padded && !is_connection_specific(&name, &value) => {
                            decoded.fields.append(name, value);
                        }
                        _ => decoded.malformed = true,
                    }
                }
                _ => decoded.malformed = true,
            }
        })
        .map_err(|_| ConnectionError(Reason::COMPRESSION_ERROR))?;
    Ok(decoded)
}

/// Fields that are about one connection, which HTTP/2 forbids (RFC 9113 §8.2.2).
fn is_connection_specific(name: &header::HeaderName, value: &HeaderValue) -> bool {
    matches!(
        *name,
        header::CONNECTION | header::TRANSFER_ENCODING | header::UPGRADE
    ) || name == "keep-alive"
        || name == "proxy-connection"
        || (*name == header::TE && value != "trailers")
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
            return Err(ConnectionError(Reason::PROTOCOL_ERROR));
        }
        return Ok(());
    };
    if stream.stopped.is_some() {
        return Ok(());
    }
    if decoded.malformed || stream.ended || !stream.take_block(decoded, end_stream) {
        connection.reset(id, Reason::PROTOCOL_ERROR);
    }
    Ok(())
}

impl Stream {
    /// Takes a well-formed block as the answer's head, an interim head, or its trailers;
    /// false when it has no place here (a stream error).
    fn take_block(&mut self, decoded: Decoded, end_stream: bool) -> bool {
        let Decoded { status, fields, .. } = decoded;
        if self.answered {
            // The trailers: they end the stream, and carry no pseudo-field (RFC 9113 §8.1).
            if !end_stream || status.is_some() {
                return false;
            }
            self.trailers = Some(fields);
            self.ended = true;
        } else {
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
        stream.reset = true;
        stream.stop(Stop::Reset(reason));
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
            // A server may only say 0 (RFC 9113 §6.5.2).
            setting::ENABLE_PUSH if value != 0 => {
                return Err(ConnectionError(Reason::PROTOCOL_ERROR));
            }
            setting::MAX_FRAME_SIZE => {
                if !(frame::DEFAULT_MAX_FRAME as u32..1 << 24).contains(&value) {
                    return Err(ConnectionError(Reason::PROTOCOL_ERROR));
                }
                connection.peer.max_frame = value as usize;
            }
            // The table size only bounds an encoder that indexes, and trafik's does not;
            // the rest say nothing a client acts on.
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
        connection.reset(header.stream, reason);
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
