//! Copying bytes both ways between a client and a backend, with half-close: when one side ends
//! its sending, the other side's writing half is shut down and the opposite direction goes on
//! (unless that one ends too before the next look at the events: then closing both tells all).
//!
//! tokio's `copy_bidirectional_with_sizes` does the same with buffers of one size, allocated
//! zeroed for every connection. Measured with `bench/l4.sh`: 64 KiB buffers take half the CPU
//! per GiB that tokio's default 8 KiB take, but zeroing two of them (and faulting their pages
//! back in) was 8–9 % of trafik's CPU under a stream of short connections, against about 1 %
//! for 8 KiB. So each direction here starts with 8 KiB and moves to 64 KiB once a read fills
//! the small buffer: short exchanges stay cheap, transfers get the large buffer. The small
//! buffers of finished relays are kept by their worker thread for the next connections (a
//! bounded few), so a short connection allocates and zeroes none.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The buffer every direction starts with.
const SMALL: usize = 8 * 1024;
/// The buffer a direction moves to once a read fills the small one.
const LARGE: usize = 64 * 1024;

/// Copies `a` to `b` and `b` to `a` until both have ended their sending, or until an error on
/// either side. Returns the bytes copied each way.
///
/// A side that ends while the other way goes on is passed on as a shutdown of the other side's
/// writing half, but only after the runtime has looked for new events once: the other side
/// often ends at the same moment (a client closing once it has its answer, a backend closing
/// after it), and when both have ended no shutdown is needed, as the caller closes both
/// connections once this returns, which tells each side as much. A relay of short connections
/// so makes one system call fewer each and closes like haproxy does. That holds for TCP
/// streams, which the relay copies; a stream whose end is a message of its own (TLS's
/// close_notify) would have to be shut down by the caller.
///
/// The look at the events is tokio's `yield_now`, which wakes the task once the runtime has
/// polled its driver; were it to wake at once, a half-close would only come a poll later.
///
/// # Cancel safety
///
/// Not cancel safe: bytes read and not yet written are lost when the future is dropped (which
/// is when the relay closes both connections anyway).
pub async fn copy_both_ways<A, B>(a: &mut A, b: &mut B) -> io::Result<(u64, u64)>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let mut a_to_b = Direction::new();
    let mut b_to_a = Direction::new();
    std::future::poll_fn(|cx| {
        let forward = a_to_b.poll_copy(cx, &mut *a, &mut *b)?.is_ready();
        let backward = b_to_a.poll_copy(cx, &mut *b, &mut *a)?.is_ready();
        match (forward, backward) {
            (true, true) => return Poll::Ready(Ok((a_to_b.copied, b_to_a.copied))),
            (true, false) => ready!(a_to_b.poll_half_close(cx, &mut *b))?,
            (false, true) => ready!(b_to_a.poll_half_close(cx, &mut *a))?,
            (false, false) => {}
        }
        Poll::Pending
    })
    .await
}

/// One direction's state.
struct Direction {
    buffer: Vec<u8>,
    /// Bytes `buffer[written..filled]` are read and not yet written.
    written: usize,
    filled: usize,
    /// The reader has ended its sending.
    read_done: bool,
    /// Bytes were written since the last flush.
    unflushed: bool,
    /// The reader has ended and every byte read is written and flushed.
    ended: bool,
    copied: u64,
    /// The end was passed on to the writer's side by a shutdown, or is waiting for one round
    /// of events first (see [`copy_both_ways`]).
    half_close: HalfClose,
}

/// Where a direction's half-close stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HalfClose {
    NotYet,
    /// Waiting for the runtime to look for new events once.
    Deferred,
    Done,
}

impl Direction {
    fn new() -> Self {
        Direction {
            buffer: SPARE_BUFFERS
                .with_borrow_mut(Vec::pop)
                .unwrap_or_else(|| vec![0; SMALL]),
            written: 0,
            filled: 0,
            read_done: false,
            unflushed: false,
            ended: false,
            copied: 0,
            half_close: HalfClose::NotYet,
        }
    }

    /// Reads when the buffer is empty and writes out what it holds; ready once the reader has
    /// ended and every byte read is written and flushed.
    fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut R,
        writer: &mut W,
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin + ?Sized,
        W: AsyncWrite + Unpin + ?Sized,
    {
        if self.ended {
            return Poll::Ready(Ok(()));
        }
        loop {
            if self.written == self.filled && !self.read_done {
                let mut read = ReadBuf::new(&mut self.buffer);
                match Pin::new(&mut *reader).poll_read(cx, &mut read) {
                    Poll::Ready(Ok(())) => {
                        let count = read.filled().len();
                        if count == 0 {
                            self.read_done = true;
                        } else if count == self.buffer.len() && count < LARGE {
                            // More is likely waiting: move to the large buffer, bytes and all.
                            let mut large = vec![0; LARGE];
                            large[..count].copy_from_slice(&self.buffer[..count]);
                            keep_spare(std::mem::replace(&mut self.buffer, large));
                        }
                        (self.written, self.filled) = (0, count);
                    }
                    Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                    Poll::Pending => {
                        // Nothing more to read now, so what was written must not wait.
                        if self.unflushed {
                            ready!(Pin::new(&mut *writer).poll_flush(cx))?;
                            self.unflushed = false;
                        }
                        return Poll::Pending;
                    }
                }
            }
            while self.written < self.filled {
                let chunk = &self.buffer[self.written..self.filled];
                let count = ready!(Pin::new(&mut *writer).poll_write(cx, chunk))?;
                if count == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.written += count;
                self.copied += count as u64;
                self.unflushed = true;
            }
            if self.read_done {
                // Whatever the writer holds goes out before the end is passed on or closed.
                ready!(Pin::new(&mut *writer).poll_flush(cx))?;
                self.ended = true;
                return Poll::Ready(Ok(()));
            }
        }
    }

    /// Shuts the writer down after this direction has ended while the other goes on: the
    /// writer's side learns that nothing more comes. The first poll only asks to be polled
    /// again once the runtime has looked for new events (tokio's `yield_now`), in case the
    /// other side has ended meanwhile.
    fn poll_half_close<W>(&mut self, cx: &mut Context<'_>, writer: &mut W) -> Poll<io::Result<()>>
    where
        W: AsyncWrite + Unpin + ?Sized,
    {
        match self.half_close {
            HalfClose::NotYet => {
                self.half_close = HalfClose::Deferred;
                // Its first poll hands the waker to the runtime's list of those woken after
                // the next look at the events.
                let _ = std::pin::pin!(tokio::task::yield_now()).poll(cx);
                Poll::Pending
            }
            HalfClose::Deferred => {
                ready!(Pin::new(&mut *writer).poll_shutdown(cx))?;
                self.half_close = HalfClose::Done;
                Poll::Ready(Ok(()))
            }
            HalfClose::Done => Poll::Ready(Ok(())),
        }
    }
}

/// Small buffers a worker thread keeps for its next relays: enough for a burst of short
/// connections, 2 MiB at most.
const SPARE_LIMIT: usize = 256;

thread_local! {
    static SPARE_BUFFERS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Keeps a small buffer for the next relay on this thread, if there is room.
fn keep_spare(buffer: Vec<u8>) {
    if buffer.len() == SMALL {
        SPARE_BUFFERS.with_borrow_mut(|spare| {
            if spare.len() < SPARE_LIMIT {
                spare.push(buffer);
            }
        });
    }
}

impl Drop for Direction {
    fn drop(&mut self) {
        keep_spare(std::mem::take(&mut self.buffer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use trafik_runtime::observed::{Observed, Observer};

    async fn drain(direction: &mut Direction, mut from: &[u8]) -> Vec<u8> {
        let mut to = Vec::new();
        std::future::poll_fn(|cx| direction.poll_copy(cx, &mut from, &mut to))
            .await
            .unwrap();
        assert_eq!(direction.copied as usize, to.len());
        to
    }

    /// Counts the shutdowns of a stream's writing half.
    struct Shutdowns(Rc<Cell<usize>>);

    impl Observer for Shutdowns {
        fn shut_down(&mut self, _polled: &Poll<io::Result<()>>) {
            self.0.set(self.0.get() + 1);
        }
    }

    type Counted = Observed<tokio::io::DuplexStream, Shutdowns>;

    /// A client and a backend, each joined to its side of a relay by a stream whose shutdowns
    /// are counted.
    struct Joined {
        client: tokio::io::DuplexStream,
        backend: tokio::io::DuplexStream,
        near: Counted,
        far: Counted,
        near_shutdowns: Rc<Cell<usize>>,
        far_shutdowns: Rc<Cell<usize>>,
    }

    fn joined() -> Joined {
        let (client, near) = tokio::io::duplex(4096);
        let (far, backend) = tokio::io::duplex(4096);
        let (near_shutdowns, far_shutdowns) = (Rc::default(), Rc::default());
        Joined {
            client,
            backend,
            near: Observed::with(near, Shutdowns(Rc::clone(&near_shutdowns))),
            far: Observed::with(far, Shutdowns(Rc::clone(&far_shutdowns))),
            near_shutdowns,
            far_shutdowns,
        }
    }

    #[tokio::test]
    async fn sides_that_end_at_once_get_no_half_close_and_every_byte() {
        let mut j = joined();
        j.client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        j.client.shutdown().await.unwrap();
        j.backend
            .write_all(b"HTTP/1.1 200 OK\r\n\r\n")
            .await
            .unwrap();
        j.backend.shutdown().await.unwrap();
        let copied = copy_both_ways(&mut j.near, &mut j.far).await.unwrap();
        assert_eq!(copied, (18, 19));
        assert_eq!(
            (j.near_shutdowns.get(), j.far_shutdowns.get()),
            (0, 0),
            "both ended: closing the two connections tells each side"
        );
        drop((j.near, j.far));
        let (mut request, mut answer) = (Vec::new(), Vec::new());
        j.backend.read_to_end(&mut request).await.unwrap();
        j.client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(request, b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(answer, b"HTTP/1.1 200 OK\r\n\r\n");
    }

    /// The client sends PING and ends, and the relay is polled; then the backend answers PONG
    /// and ends, either at once or after a second poll. Returns the shutdowns each side saw.
    async fn client_ends_first(backend_ends_meanwhile: bool) -> (usize, usize) {
        let mut j = joined();
        let mut relay = std::pin::pin!(copy_both_ways(&mut j.near, &mut j.far));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        j.client.write_all(b"PING").await.unwrap();
        j.client.shutdown().await.unwrap();
        assert!(relay.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            j.far_shutdowns.get(),
            0,
            "the client's end waits for a look"
        );
        if !backend_ends_meanwhile {
            assert!(relay.as_mut().poll(&mut cx).is_pending());
            assert_eq!(
                j.far_shutdowns.get(),
                1,
                "the backend is told after one look"
            );
            let mut request = Vec::new();
            j.backend.read_to_end(&mut request).await.unwrap();
            assert_eq!(request, b"PING");
        }
        j.backend.write_all(b"PONG").await.unwrap();
        j.backend.shutdown().await.unwrap();
        let copied = relay.as_mut().poll(&mut cx);
        assert!(matches!(copied, Poll::Ready(Ok((4, 4)))));
        (j.near_shutdowns.get(), j.far_shutdowns.get())
    }

    #[tokio::test]
    async fn the_other_side_ending_during_the_wait_spares_the_half_close() {
        assert_eq!(client_ends_first(true).await, (0, 0));
    }

    #[tokio::test]
    async fn an_end_is_passed_on_after_that_look_while_the_other_way_goes_on() {
        assert_eq!(
            client_ends_first(false).await,
            (0, 1),
            "the second end goes with the close"
        );
    }

    #[tokio::test]
    async fn a_short_exchange_keeps_the_small_buffer_and_a_transfer_takes_the_large_one() {
        let mut short = Direction::new();
        assert_eq!(drain(&mut short, b"GET / HTTP/1.1\r\n\r\n").await.len(), 18);
        assert_eq!(short.buffer.len(), SMALL);
        let bulk: Vec<u8> = (0..1_000_000u32).map(|i| i as u8).collect();
        let mut transfer = Direction::new();
        assert_eq!(
            drain(&mut transfer, &bulk).await,
            bulk,
            "every byte, in order"
        );
        assert_eq!(transfer.buffer.len(), LARGE);
    }

    #[tokio::test]
    async fn a_small_buffer_is_left_to_the_next_relay_and_a_large_one_is_not() {
        let mut short = Direction::new();
        assert_eq!(drain(&mut short, b"PING\r\n").await, b"PING\r\n");
        let small = short.buffer.as_ptr();
        drop(short);
        let mut next = Direction::new();
        assert_eq!(
            next.buffer.as_ptr(),
            small,
            "the same allocation, taken again"
        );
        let bulk = vec![1u8; 3 * SMALL];
        assert_eq!(drain(&mut next, &bulk).await, bulk);
        assert_eq!(next.buffer.len(), LARGE);
        let again = Direction::new();
        assert_eq!(again.buffer.as_ptr(), small, "left when the transfer grew");
        drop(next);
        let after = Direction::new();
        assert_eq!(after.buffer.len(), SMALL, "a large buffer is not kept");
    }

    #[tokio::test]
    async fn each_side_ending_its_sending_is_passed_on_while_the_other_way_goes_on() {
        let (mut client, mut near) = tokio::io::duplex(4096);
        let (mut far, mut backend) = tokio::io::duplex(4096);
        let relay = tokio::spawn(async move { copy_both_ways(&mut near, &mut far).await });
        let upload = vec![7u8; 300_000];
        let sent = upload.clone();
        let uploading = tokio::spawn(async move {
            client.write_all(&sent).await.unwrap();
            client.shutdown().await.unwrap();
            let mut answer = Vec::new();
            client.read_to_end(&mut answer).await.unwrap();
            answer
        });
        let mut received = Vec::new();
        backend.read_to_end(&mut received).await.unwrap();
        assert_eq!(received, upload, "the backend saw the upload end");
        backend.write_all(b"got it").await.unwrap();
        backend.shutdown().await.unwrap();
        assert_eq!(uploading.await.unwrap(), b"got it");
        assert_eq!(relay.await.unwrap().unwrap(), (300_000, 6));
    }
}
