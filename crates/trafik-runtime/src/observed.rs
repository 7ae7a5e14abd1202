//! One stream wrapper for everything that watches bytes go by: the idle clock of a client
//! connection (`connections::Watched`), the byte counts of an upstream socket
//! (`meter::Metered`) and the bytes a reader gets again before the socket's (the own
//! HTTP/1 engine's handover). Each is an [`Observer`]; [`Observed`] delegates the stream's
//! methods once and calls its hooks.
//!
//! [`SendFile`] is what a stream can do besides writing buffers: plain TCP sends a file's
//! bytes from the page cache with sendfile(2), and writes a head with `MSG_MORE` so that the
//! head and the file's first bytes leave together; a TLS stream cannot, and says so.

use std::fs::File;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

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

    /// After a shutdown of the stream's writing half returned `polled`.
    fn shut_down(&mut self, _polled: &Poll<io::Result<()>>) {}
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

    pub fn observer_mut(&mut self) -> &mut O {
        &mut self.observer
    }

    /// The stream, for a serving loop that hands the connection on.
    pub fn into_inner(self) -> S {
        self.stream
    }

    /// A write of any kind to the stream, which the observer then sees.
    fn observe_write(
        self: Pin<&mut Self>,
        write: impl FnOnce(Pin<&mut S>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>>
    where
        S: Unpin,
        O: Observer + Unpin,
    {
        let this = self.get_mut();
        let polled = write(Pin::new(&mut this.stream));
        this.observer.written(&polled);
        polled
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
        self.observe_write(|stream| stream.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.observe_write(|stream| stream.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_shutdown(cx);
        this.observer.shut_down(&polled);
        polled
    }
}

/// A stream that may send a file's bytes without copying them through user space. Every
/// method's default says it cannot: a writer asks [`SendFile::sends_files`] first and writes
/// bytes otherwise.
pub trait SendFile {
    /// Whether [`SendFile::poll_send_file`] and [`SendFile::poll_write_more`] work here.
    fn sends_files(&self) -> bool {
        false
    }

    /// Sends up to `len` bytes of `file` from `offset`, as `poll_write` sends a buffer: how
    /// many went, which may be fewer; 0 when the file ends at `offset` (it was cut short).
    fn poll_send_file(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        _file: &File,
        _offset: u64,
        _len: usize,
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::ErrorKind::Unsupported.into()))
    }

    /// Writes `bytes`, telling the kernel more follows at once (`MSG_MORE`): they wait for the
    /// next send to leave in the same segment.
    fn poll_write_more(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        _bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::ErrorKind::Unsupported.into()))
    }
}

/// A readiness-driven call on a non-blocking socket: waits until the socket takes bytes, and
/// again whenever `call` finds it full (`EAGAIN`) or is interrupted.
fn poll_writing(
    stream: &TcpStream,
    cx: &mut Context<'_>,
    mut call: impl FnMut() -> io::Result<usize>,
) -> Poll<io::Result<usize>> {
    loop {
        ready!(stream.poll_write_ready(cx))?;
        match stream.try_io(Interest::WRITABLE, &mut call) {
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            done => return Poll::Ready(done),
        }
    }
}

impl SendFile for TcpStream {
    fn sends_files(&self) -> bool {
        cfg!(target_os = "linux")
    }

    #[cfg(target_os = "linux")]
    fn poll_send_file(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        file: &File,
        offset: u64,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        let stream = self.get_mut();
        poll_writing(stream, cx, || {
            let mut at = offset;
            Ok(rustix::fs::sendfile(&*stream, file, Some(&mut at), len)?)
        })
    }

    #[cfg(target_os = "linux")]
    fn poll_write_more(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let stream = self.get_mut();
        poll_writing(stream, cx, || {
            socket2::SockRef::from(&*stream).send_with_flags(bytes, libc::MSG_MORE)
        })
    }
}

/// TLS encrypts every byte in user space: it writes buffers only.
impl<S> SendFile for tokio_rustls::server::TlsStream<S> {}

/// Test streams write buffers only.
impl SendFile for tokio::io::DuplexStream {}
impl SendFile for Vec<u8> {}

/// An observed stream sends files as its stream does, and its observer sees what went as it
/// sees a write.
impl<S: SendFile + Unpin, O: Observer + Unpin> SendFile for Observed<S, O> {
    fn sends_files(&self) -> bool {
        self.stream.sends_files()
    }

    fn poll_send_file(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        file: &File,
        offset: u64,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        self.observe_write(|stream| stream.poll_send_file(cx, file, offset, len))
    }

    fn poll_write_more(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.observe_write(|stream| stream.poll_write_more(cx, bytes))
    }
}

impl<S: SendFile + Unpin + ?Sized> SendFile for &mut S {
    fn sends_files(&self) -> bool {
        (**self).sends_files()
    }

    fn poll_send_file(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        file: &File,
        offset: u64,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut **self.get_mut()).poll_send_file(cx, file, offset, len)
    }

    fn poll_write_more(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut **self.get_mut()).poll_write_more(cx, bytes)
    }
}
