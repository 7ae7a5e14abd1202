//! Serves one QUIC connection of an `h3` listener as HTTP/3: every request through the same
//! [`WorkerProxy::handle`] as HTTP/1 and HTTP/2 (its body a [`RequestBody`] read from the
//! request stream), the answer's body written as DATA frames and its trailers as a trailing
//! HEADERS frame. The connection's requests run within its own task, on the worker's thread.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use http::{Response, header};
use http_body_util::BodyExt;

use super::body::{H3Body, ProxyBody, RequestBody};
use super::service::{ClientConnection, WorkerProxy};
use crate::connections::{Connections, Control};
use crate::snapshot::ListenerId;

type SendStream = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
type Resolver = h3::server::RequestResolver<h3_quinn::Connection, Bytes>;

/// Serves `connection` until the client closes it, it idles out (QUIC's own idle timeout, set
/// from `client.idle_timeout`), or it must drain: then GOAWAY, the requests under way finish,
/// and the connection closes.
pub async fn serve(
    proxy: Rc<WorkerProxy>,
    listener: ListenerId,
    connection: quinn::Connection,
    identity: Option<Arc<crate::tls::ClientIdentity>>,
    connections: Rc<Connections>,
) {
    let peer = connection.remote_address();
    let control = connections.register(listener);
    let snapshot = proxy.snapshot();
    let head_timeout = snapshot.client.header_read_timeout;
    let mut h3 = match h3::server::builder()
        .max_field_section_size(snapshot.client.limits.bytes as u64)
        .build::<_, Bytes>(h3_quinn::Connection::new(connection.clone()))
        .await
    {
        Ok(h3) => h3,
        Err(error) => {
            tracing::debug!(%peer, %error, "HTTP/3 connection failed to start");
            return;
        }
    };
    drop(snapshot);
    let client = ClientConnection::new(listener, peer, "https", identity);
    let mut requests = FuturesUnordered::new();
    let mut shut_down = false;
    loop {
        tokio::select! {
            accepted = h3.accept() => match accepted {
                Ok(Some(resolver)) => {
                    requests.push(request(&proxy, &client, resolver, head_timeout, peer));
                }
                Ok(None) => break,
                Err(error) => {
                    tracing::debug!(%peer, %error, "HTTP/3 connection ended");
                    break;
                }
            },
            Some(()) = requests.next(), if !requests.is_empty() => {}
            () = drain_asked(&control), if !shut_down => {
                shut_down = true;
                // GOAWAY naming the last request taken: the client sends later ones elsewhere.
                if h3.shutdown(0).await.is_err() {
                    break;
                }
            }
        }
        if shut_down && requests.is_empty() {
            connection.close(
                quinn::VarInt::from_u64(h3::error::Code::H3_NO_ERROR.value()).unwrap_or_default(),
                b"",
            );
            break;
        }
    }
    // The client left or broke the connection: the requests under way finish their answers
    // as far as the connection lets them.
    while requests.next().await.is_some() {}
}

/// Ready once the worker drains, or this connection's listener was removed.
async fn drain_asked(control: &Control) {
    std::future::poll_fn(|cx| {
        control.remember(cx.waker());
        match control.should_drain() {
            true => std::task::Poll::Ready(()),
            false => std::task::Poll::Pending,
        }
    })
    .await
}

/// One request stream: its head (within the head timeout), its body as a [`RequestBody`], the
/// pipeline, the answer.
async fn request(
    proxy: &WorkerProxy,
    client: &ClientConnection,
    resolver: Resolver,
    head_timeout: Duration,
    peer: SocketAddr,
) {
    let (head, stream) = match tokio::time::timeout(head_timeout, resolver.resolve_request()).await
    {
        Ok(Ok(resolved)) => resolved,
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "HTTP/3 request refused");
            return;
        }
        Err(_) => return,
    };
    let (mut send, receive) = stream.split();
    let length = head
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok()?.parse().ok());
    // A body without a length is awaited for its first piece, within the head's time too.
    let body = match tokio::time::timeout(head_timeout, H3Body::start(receive, length)).await {
        Ok(Ok(body)) => body,
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "HTTP/3 request body failed");
            return;
        }
        Err(_) => return,
    };
    let answer = proxy
        .handle(client, head.map(|()| RequestBody::h3(body)))
        .await;
    if let Err(error) = respond(&mut send, answer).await {
        tracing::debug!(%peer, %error, "HTTP/3 answer cut short");
    }
}

/// The fields HTTP/3 forbids (RFC 9114 §4.2): the connection's own, which QUIC replaces.
static CONNECTION_FIELDS: [header::HeaderName; 5] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::HeaderName::from_static("keep-alive"),
    header::HeaderName::from_static("proxy-connection"),
];

/// Writes `answer`: its head, its body as DATA frames as they come, its trailers if any, then
/// the end of the stream; a body that breaks resets the stream, so the client never takes a
/// cut answer for a whole one.
async fn respond(
    send: &mut SendStream,
    answer: Response<ProxyBody>,
) -> Result<(), h3::error::StreamError> {
    let (mut head, body) = answer.into_parts();
    for name in &CONNECTION_FIELDS {
        head.headers.remove(name);
    }
    send.send_response(Response::from_parts(head, ())).await?;
    let mut body = std::pin::pin!(body);
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(_) => {
                send.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                return Ok(());
            }
        };
        match frame.into_data() {
            Ok(data) => {
                if !data.is_empty() {
                    send.send_data(data).await?;
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    send.send_trailers(trailers).await?;
                    return Ok(());
                }
            }
        }
    }
    send.finish().await
}
