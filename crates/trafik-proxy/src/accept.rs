//! The accept loop: each worker accepts on its share of every listener and hands each
//! connection to what the listener is in the current snapshot (sockets themselves are
//! [`crate::transport`]'s).

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::connections::Connections;
use crate::http;
use crate::http::server::Protocol;
use crate::http::service::WorkerProxy;
use crate::snapshot::{Listener, ListenerId};
use crate::tls;

/// Accepts on one listener of one worker until `stop` (this listener removed) or `shutdown`,
/// handing each connection to what the listener is in the current snapshot.
pub async fn accept_loop(
    proxy: Rc<WorkerProxy>,
    id: ListenerId,
    listener: TcpListener,
    connections: Rc<Connections>,
    mut stop: watch::Receiver<bool>,
    alive: mpsc::Sender<()>,
    budget: Arc<Semaphore>,
) {
    let mut backoff = Duration::from_millis(5);
    loop {
        // At the descriptor budget, wait for a connection to close before taking another.
        let slot = tokio::select! {
            _ = stop.wait_for(|stopping| *stopping) => return,
            slot = budget.clone().acquire_owned() => slot,
        };
        let Ok(slot) = slot else {
            return;
        };
        let accepted = tokio::select! {
            _ = stop.wait_for(|stopping| *stopping) => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                backoff = Duration::from_millis(5);
                accepted
            }
            Err(error) => {
                // Out of descriptors, or a reset before accept: back off, longer each time.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        // Inherited from the listening socket on Linux (see `socket`).
        #[cfg(not(target_os = "linux"))]
        let _ = stream.set_nodelay(true);
        let snapshot = proxy.snapshot();
        let Some(kind) = snapshot.listener(id) else {
            continue;
        };
        // At the listener's cap this loop waits here, accepting nothing more, until a
        // connection closes; a client over its own cap is closed at once.
        let admitted = match snapshot.connection_limit(id) {
            Some(limit) => {
                let admitted = tokio::select! {
                    _ = stop.wait_for(|stopping| *stopping) => return,
                    admitted = limit.admit(peer.ip()) => admitted,
                };
                match admitted {
                    Some(admitted) => Some(admitted),
                    None => continue,
                }
            }
            None => None,
        };
        let open = snapshot
            .metrics
            .listener_stats(id)
            .map(|stats| crate::metrics::OpenClient::new(stats, proxy.id));
        let alive = (alive.clone(), slot, admitted, open);
        let (proxy, connections, scheme) = (proxy.clone(), connections.clone(), kind.scheme());
        match kind {
            Listener::Http { .. } if snapshot.client.engine == crate::plan::Engine::Trafik => {
                // Boxed, as hyper's below: copied whole as the task is spawned and finished.
                let serving = Box::pin(crate::h1::serve(
                    proxy,
                    id,
                    scheme,
                    Protocol::Detect,
                    stream,
                    http::server::Client::at(peer),
                    connections,
                ));
                spawn_counted(serving, alive);
            }
            Listener::Http { .. } => {
                // h2c with prior knowledge is told from HTTP/1.1 by the connection's first 24
                // bytes; measured, that costs HTTP/1.1 about 0.5 % of its instructions and no
                // CPU time that could be told from noise (README, "HTTPS and HTTP/2").
                // Boxed: a task's future is copied several times as it is spawned and
                // finished, and hyper's is kilobytes (the box costs less than the copies).
                let serving = Box::pin(http::server::serve(
                    proxy,
                    id,
                    scheme,
                    Protocol::Detect,
                    stream,
                    http::server::Client::at(peer),
                    connections,
                ));
                spawn_counted(serving, alive);
            }
            Listener::Https { tls, identity, .. } => {
                let identity = identity.clone();
                let timeout = snapshot.client.header_read_timeout;
                let own_engine = snapshot.client.engine == crate::plan::Engine::Trafik;
                let handshake = tls::server::handshake(tls.clone(), stream, timeout);
                tokio::task::spawn_local(async move {
                    let handshake = handshake.await;
                    if let Some(open) = &alive.3 {
                        open.handshake(handshake.is_ok());
                    }
                    // What the client's certificate says, once for the connection's requests.
                    let handshake = handshake.map(|(stream, protocol)| {
                        let identity = identity.map(|headers| {
                            let chain = stream.get_ref().1.peer_certificates();
                            Arc::new(tls::ClientIdentity::of(&headers, chain))
                        });
                        (stream, protocol, identity)
                    });
                    match handshake {
                        // HTTP/1.1 behind TLS takes the own engine as plain TCP does.
                        Ok((stream, Protocol::Http1, identity)) if own_engine => {
                            Box::pin(crate::h1::serve(
                                proxy,
                                id,
                                scheme,
                                Protocol::Http1,
                                stream,
                                http::server::Client { peer, identity },
                                connections,
                            ))
                            .await;
                        }
                        // So does HTTP/2 on the own server.
                        Ok((stream, Protocol::Http2, identity)) if own_engine => {
                            Box::pin(crate::http2::server::serve(
                                proxy,
                                id,
                                scheme,
                                stream,
                                bytes::BytesMut::new(),
                                http::server::Client { peer, identity },
                                connections,
                            ))
                            .await;
                        }
                        Ok((stream, protocol, identity)) => {
                            http::server::serve(
                                proxy,
                                id,
                                scheme,
                                protocol,
                                stream,
                                http::server::Client { peer, identity },
                                connections,
                            )
                            .await;
                        }
                        Err(error) => tracing::debug!(%peer, %error, "TLS handshake failed"),
                    }
                    drop(alive);
                });
            }
            // Its endpoint takes its connections in `quic_accept_loop`, never from a TCP socket.
            Listener::H3 { .. } => {}
            Listener::Tcp { .. } | Listener::TlsPassthrough { .. } => {
                // Boxed as the HTTP listeners' are: measured with callgrind, spawning the
                // relay's future by value copied it into the task three times (~1,000
                // instructions per connection).
                let serving = Box::pin(trafik_l4::serve(
                    proxy.worker(),
                    proxy.snapshot(),
                    id,
                    stream,
                    peer,
                    connections,
                ));
                spawn_counted(serving, alive);
            }
        }
    }
}

/// This worker's QUIC endpoint of `h3` listener `id`, on its own `SO_REUSEPORT` socket: each
/// worker runs its endpoint and its connections on its own thread, as it does with TCP, and
/// the kernel keeps a client's datagrams on one socket by their source address.
pub fn quic_endpoint(
    proxy: &WorkerProxy,
    id: ListenerId,
    socket: std::net::UdpSocket,
) -> std::io::Result<quinn::Endpoint> {
    let snapshot = proxy.snapshot();
    let Some(Listener::H3 { quic, .. }) = snapshot.listener(id) else {
        return Err(std::io::Error::other("the listener is not an h3 listener"));
    };
    quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some((**quic).clone()),
        socket,
        Arc::new(quinn::TokioRuntime),
    )
}

/// Takes the QUIC connections of one `h3` listener on one worker until `stop` or `shutdown`,
/// each with the certificates of the current snapshot, and serves each as HTTP/3. Then it
/// takes no new ones and holds the worker's drain until those open have closed.
pub async fn quic_accept_loop(
    proxy: Rc<WorkerProxy>,
    id: ListenerId,
    endpoint: quinn::Endpoint,
    connections: Rc<Connections>,
    mut stop: watch::Receiver<bool>,
    alive: mpsc::Sender<()>,
) {
    loop {
        let incoming = tokio::select! {
            _ = stop.wait_for(|stopping| *stopping) => break,
            incoming = endpoint.accept() => incoming,
        };
        let Some(incoming) = incoming else {
            break;
        };
        let snapshot = proxy.snapshot();
        let Some(Listener::H3 { quic, identity, .. }) = snapshot.listener(id) else {
            incoming.refuse();
            continue;
        };
        // Over the listener's caps a QUIC connection is refused: it has no backlog to wait in.
        let admitted = match snapshot.connection_limit(id) {
            Some(limit) => match limit.admit_now(incoming.remote_address().ip()) {
                Some(admitted) => Some(admitted),
                None => {
                    incoming.refuse();
                    continue;
                }
            },
            None => None,
        };
        let connecting = match incoming.accept_with(quic.clone()) {
            Ok(connecting) => connecting,
            Err(error) => {
                tracing::debug!(%error, "QUIC connection refused");
                continue;
            }
        };
        let open = snapshot
            .metrics
            .listener_stats(id)
            .map(|stats| crate::metrics::OpenClient::new(stats, proxy.id));
        let timeout = snapshot.client.header_read_timeout;
        let identity = identity.clone();
        let (proxy, connections, alive) = (proxy.clone(), connections.clone(), alive.clone());
        tokio::task::spawn_local(async move {
            let connected = tokio::time::timeout(timeout, connecting).await;
            if let Some(open) = &open {
                open.handshake(matches!(connected, Ok(Ok(_))));
            }
            match connected {
                Ok(Ok(connection)) => {
                    // What the client's certificate says, once for the connection's requests.
                    let identity = identity.map(|headers| {
                        let chain = connection.peer_identity().and_then(|chain| {
                            chain.downcast::<Vec<CertificateDer<'static>>>().ok()
                        });
                        Arc::new(tls::ClientIdentity::of(
                            &headers,
                            chain.as_deref().map(Vec::as_slice),
                        ))
                    });
                    Box::pin(http::h3::serve(
                        proxy,
                        id,
                        connection,
                        identity,
                        connections,
                    ))
                    .await;
                }
                Ok(Err(error)) => tracing::debug!(%error, "QUIC handshake failed"),
                Err(_) => tracing::debug!("QUIC handshake timed out"),
            }
            drop((alive, open, admitted));
        });
    }
    // New clients are refused from now on; those open drain (GOAWAY) and close.
    endpoint.set_server_config(None);
    endpoint.wait_idle().await;
    drop(alive);
}

/// Runs a connection's serving future as a task of this worker, holding `alive` (what counts the
/// connection: the drain's wait, its descriptor slot, its listener caps' admission, its gauge)
/// until the future ends.
fn spawn_counted<T: 'static>(serving: impl Future<Output = ()> + 'static, alive: T) {
    tokio::task::spawn_local(async move {
        serving.await;
        drop(alive);
    });
}
