//! Layer 4: client connections relayed to backends as bytes, with one decision per connection
//! (the course's lesson "Katman 4 Dengeleme"). It knows pools and sockets
//! ([`trafik_runtime`]), never HTTP: the proxy's accept loop hands it the connections of its
//! `tcp` and `tls-passthrough` listeners with the configuration in force ([`Layer4Snapshot`]). A `tcp` listener sends every connection to its
//! pool; a `tls-passthrough` listener first reads the server name from the client's
//! ClientHello ([`sni`]) and lets it choose the pool ([`route`]), without decrypting anything.
//! Either way [`relay`] then connects (retrying elsewhere), optionally announces the client
//! with a PROXY protocol header ([`trafik_runtime::proxy_protocol`]) and copies bytes both ways ([`copy`]).

pub mod copy;
pub mod relay;
pub mod route;
pub mod sni;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use trafik_runtime::connections::{Connections, ListenerId, Watched};
use trafik_runtime::plan::SniRoutePlan;
use trafik_runtime::pool::PoolSet;

/// Where a layer-4 listener's connections go.
pub enum Destination<'a> {
    /// Every connection to the pool at this index of the configuration's pools (`tcp`).
    Pool(usize),
    /// The pool the ClientHello's server name chooses (`tls-passthrough`).
    ByServerName(&'a route::SniRoutes),
}

/// What the layer-4 path reads of the configuration in force (the proxy's snapshot).
pub trait Layer4Snapshot: PoolSet + 'static {
    /// Where connections to `listener` go, when it is a layer-4 listener of this configuration.
    fn destination(&self, listener: ListenerId) -> Option<Destination<'_>>;
    /// How long a client has to send its ClientHello (the time it has for a request head).
    fn header_read_timeout(&self) -> Duration;
    /// How long a relay may go on once its listener drains.
    fn drain_timeout(&self) -> Duration;
    /// Whether each finished relay is logged as an access line.
    fn access_log(&self) -> bool;
}

/// The worker a connection is served on: which shard of the per-worker counters it writes, and
/// the origin of its rules' clock.
#[derive(Clone, Copy)]
pub struct Worker {
    pub id: usize,
    pub epoch: Instant,
}

/// The pool (its index in `pools`, name → index) of the `tcp` listener `name` (for errors).
pub fn tcp_listener(name: &str, pool: &str, pools: &HashMap<&str, usize>) -> Result<usize, String> {
    pool_index(name, pool, pools)
}

/// The routes of the `tls-passthrough` listener `name` (for errors), their pools found in
/// `pools`.
pub fn passthrough_listener(
    name: &str,
    routes: &[SniRoutePlan],
    pools: &HashMap<&str, usize>,
) -> Result<route::SniRoutes, String> {
    let routes = routes
        .iter()
        .map(|route| {
            Ok((
                route.server_name.clone(),
                pool_index(name, &route.pool, pools)?,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(route::SniRoutes::new(routes))
}

fn pool_index(listener: &str, pool: &str, pools: &HashMap<&str, usize>) -> Result<usize, String> {
    pools
        .get(pool)
        .copied()
        .ok_or_else(|| format!("listener {listener:?} names pool {pool:?}, which does not exist"))
}

/// Serves one client connection of the layer-4 listener `listener`.
pub async fn serve<S: Layer4Snapshot>(
    worker: Worker,
    snapshot: Rc<S>,
    listener: ListenerId,
    stream: TcpStream,
    peer: SocketAddr,
    connections: Rc<Connections>,
) {
    let control = connections.register(listener);
    let mut stream = Watched::new(stream, control.clone(), connections);
    let (pool, read_ahead) = match snapshot.destination(listener) {
        Some(Destination::Pool(pool)) => (pool, Vec::new()),
        Some(Destination::ByServerName(routes)) => {
            // The ClientHello is the client's request head: it gets the same time to arrive.
            let timeout = snapshot.header_read_timeout();
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
        None => return,
    };
    let client = relay::Client {
        stream,
        peer,
        read_ahead,
    };
    relay::relay(worker, &snapshot, pool, client, &control).await;
}
