//! One stream wrapper for everything that watches bytes go by: the idle clock of a client
//! connection (`connections::Watched`), the byte counts of an upstream socket
//! (`meter::Metered`) and the bytes a reader gets again before the socket's (the own
//! HTTP/1 engine's handover). Each is an [`Observer`]; [`Observed`] delegates the stream's
//! methods once and calls its hooks.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a wrapper does around a stream's reads and writes. Every hook does nothing by default.
pub trait Observer {
    /// Bytes to hand the reader before the stream's own; `true` when it put some in `buf`
    /// (the stream is then not read this time).
    fn read_ahead(&mut self, _buf: &mut ReadBuf<'_>) -> bool {
        false
    }

    /// After a read of the stream returned `polled` with `read` new bytes in the buffer.
    fn read(&mut self, _polled: &Poll<io::Result<()>>, _read: usize) {}

    /// After a write to the stream returned `polled`.
    fn written(&mut self, _polled: &Poll<io::Result<usize>>) {}
}

/// A stream and its observer.
pub struct Observed<S, O> {
    stream: S,
    observer: O,
}

impl<S, O> Observed<S, O> {
    pub fn with(stream: S, observer: O) -> Self {
        Observed { stream, observer }
    }

    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    pub fn observer(&self) -> &O {
        &self.observer
    }

    /// The stream, for a serving loop that hands the connection on.
    pub fn into_inner(self) -> S {
        self.stream
    }
}

impl<S: AsyncRead + Unpin, O: Observer + Unpin> AsyncRead for Observed<S, O> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.observer.read_ahead(buf) {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        this.observer.read(&polled, buf.filled().len() - before);
        polled
    }
}

impl<S: AsyncWrite + Unpin, O: Observer + Unpin> AsyncWrite for Observed<S, O> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.observer.written(&polled);
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.observer.written(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
