//! Layer 4: client connections relayed to backends as bytes, with one decision per connection
//! (the course's lesson "Katman 4 Dengeleme"). A `tcp` listener sends every connection to its
//! pool; a `tls-passthrough` listener first reads the server name from the client's
//! ClientHello ([`sni`]) and lets it choose the pool ([`route`]), without decrypting anything.
//! Either way [`relay`] then connects (retrying elsewhere), optionally announces the client
//! with a PROXY protocol header ([`crate::proxy_protocol`]) and copies bytes both ways ([`copy`]).

pub mod copy;
pub mod relay;
pub mod route;
pub mod sni;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;

use tokio::net::TcpStream;

use crate::connections::{Connections, Watched};
use crate::http::service::WorkerProxy;
use crate::plan::SniRoutePlan;
use crate::snapshot::{Listener, ListenerId};

/// The `tcp` listener `name` (for errors), whose connections go to `pool`, found in `pools`
/// (name → index).
pub fn tcp_listener(
    name: &str,
    pool: &str,
    pools: &HashMap<&str, usize>,
) -> Result<Listener, String> {
    Ok(Listener::Tcp {
        pool: pool_index(name, pool, pools)?,
    })
}

/// The `tls-passthrough` listener `name` (for errors) with `routes`, their pools found in
/// `pools`.
pub fn passthrough_listener(
    name: &str,
    routes: &[SniRoutePlan],
    pools: &HashMap<&str, usize>,
) -> Result<Listener, String> {
    let routes = routes
        .iter()
        .map(|route| {
            Ok((
                route.server_name.clone(),
                pool_index(name, &route.pool, pools)?,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Listener::TlsPassthrough {
        routes: route::SniRoutes::new(routes),
    })
}

fn pool_index(listener: &str, pool: &str, pools: &HashMap<&str, usize>) -> Result<usize, String> {
    pools
        .get(pool)
        .copied()
        .ok_or_else(|| format!("listener {listener:?} names pool {pool:?}, which does not exist"))
}

/// Serves one client connection of the layer-4 listener `listener`.
pub async fn serve(
    proxy: Rc<WorkerProxy>,
    listener: ListenerId,
    stream: TcpStream,
    peer: SocketAddr,
    connections: Rc<Connections>,
) {
    let snapshot = proxy.snapshot();
    let Ok(local) = stream.local_addr() else {
        return;
    };
    let control = connections.register(listener);
    let mut stream = Watched::new(stream, control.clone(), connections);
    let (pool, read_ahead) = match snapshot.listener(listener) {
        Some(Listener::Tcp { pool, .. }) => (*pool, Vec::new()),
        Some(Listener::TlsPassthrough { routes, .. }) => {
            // The ClientHello is the client's request head: it gets the same time to arrive.
            let timeout = snapshot.client.header_read_timeout;
            let hello = tokio::time::timeout(timeout, sni::read_client_hello(&mut stream)).await;
            let (bytes, name) = match hello {
                Ok(Ok(read)) => read,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, ?error, "not a TLS ClientHello; closing");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "no ClientHello in time; closing");
                    return;
                }
            };
            let Some(pool) = routes.pool_for(name.as_deref()) else {
                tracing::debug!(%peer, ?name, "no route takes this server name; closing");
                return;
            };
            (pool, bytes)
        }
        _ => return,
    };
    let client = relay::Client {
        stream,
        peer,
        local,
        read_ahead,
    };
    relay::relay(&proxy, &snapshot, pool, client, &control).await;
}
