//! The response body the proxy sends: relayed from a backend, or a short local answer.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::upstream::Lease;

/// A response body: streamed from a backend, or written by trafik itself.
pub enum ProxyBody {
    /// Relayed frame by frame; the upstream connection goes back to its pool at the end.
    Upstream {
        body: Incoming,
        lease: Option<Lease>,
    },
    /// A body trafik wrote (errors, admin answers).
    Local(Option<Bytes>),
}

impl ProxyBody {
    /// Wraps a backend's body. An empty body releases its connection at once.
    pub fn upstream(body: Incoming, lease: Lease) -> Self {
        let lease = if body.is_end_stream() {
            lease.release();
            None
        } else {
            Some(lease)
        };
        ProxyBody::Upstream { body, lease }
    }

    pub fn local(text: impl Into<Bytes>) -> Self {
        ProxyBody::Local(Some(text.into()))
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ProxyBody::Upstream { body, lease } => {
                let polled = Pin::new(&mut *body).poll_frame(cx);
                // hyper stops polling once `is_end_stream` is true, so the connection is
                // released with the last frame rather than on a poll that may never come.
                let finished = match &polled {
                    Poll::Ready(None) => true,
                    Poll::Ready(Some(Ok(_))) => body.is_end_stream(),
                    Poll::Ready(Some(Err(_))) | Poll::Pending => false,
                };
                if finished && let Some(lease) = lease.take() {
                    lease.release();
                }
                polled
            }
            ProxyBody::Local(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Upstream { body, .. } => body.is_end_stream(),
            ProxyBody::Local(data) => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Upstream { body, .. } => body.size_hint(),
            ProxyBody::Local(Some(data)) => SizeHint::with_exact(data.len() as u64),
            ProxyBody::Local(None) => SizeHint::with_exact(0),
        }
    }
}
