//! A protocol switch on the own engine (WebSocket, RFC 6455 §4): the request asked for it
//! ([`super::head::RequestHead::upgrade`]), the backend's 101 has been relayed, and now the two
//! connections are spliced as on hyper's path ([`crate::http::upgrade::splice`]). The upstream
//! stream never goes back to the idle stack; the exchange's in-flight mark stays while the
//! tunnel is open, and the connection's idle timeout still applies.

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// Runs the tunnel: first what the client sent after its request (the new protocol's first
/// bytes, already read), then both ways until either side closes.
pub async fn run<C, U>(client: &mut C, upstream: &mut U, early: &[u8])
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    if upstream.write_all(early).await.is_err() || upstream.flush().await.is_err() {
        return;
    }
    crate::http::upgrade::splice(client, upstream).await;
}
