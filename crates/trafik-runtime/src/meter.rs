//! Bytes to and from backends, counted on the upstream socket itself: HTTP pools and layer-4
//! relays share one count, and whatever runs above the socket (HTTP/1.1, TLS, a relay) is
//! counted the same way, on the wire.

use std::io;
use std::sync::Arc;
use std::task::Poll;

use arc_swap::ArcSwap;
use arc_swap::cache::Cache;

use crate::counters::{BackendCounters, PerWorker, add, bump, move_alone};
use crate::observed::{Observed, Observer};
use crate::pool::Endpoint;

/// Which backend's counters a connection's traffic goes to. A kept-alive HTTP connection
/// belongs to an address, not to a pool, and may next carry a request of another pool that
/// names the same address: the pool that checks it out is the one charged from then on. (An
/// `ArcSwap`, not a `RefCell`, because an upgraded connection's socket must be `Send`.)
#[derive(Clone)]
pub struct Meter {
    charged: Arc<ArcSwap<PerWorker<BackendCounters>>>,
    /// The shard this worker writes.
    worker: usize,
}

impl Meter {
    pub fn new(counters: &Arc<PerWorker<BackendCounters>>, worker: usize) -> Self {
        Meter {
            charged: Arc::new(ArcSwap::new(counters.clone())),
            worker,
        }
    }

    /// Charges what moves from now on to `counters`: for a connection shared out of reach
    /// (an HTTP/2 one); [`Metered::charge`] is the cheaper way for a stream at hand.
    pub fn charge(&self, counters: &Arc<PerWorker<BackendCounters>>) {
        if !Arc::ptr_eq(&self.charged.load(), counters) {
            self.charged.store(counters.clone());
        }
    }

    /// Counts one connection opened.
    pub fn opened(&self) {
        bump(&self.charged.load().mine(self.worker).connections);
    }

    /// Counts how long opening a connection took.
    pub fn connected(&self, took: std::time::Duration) {
        let micros = took.as_micros().min(u64::MAX as u128) as u64;
        self.charged.load().mine(self.worker).connect.record(micros);
    }
}

/// An upstream stream and its accounting: it counts the bytes read from it and written to it,
/// and holds its place in the endpoint's gauge of open connections while it lives.
pub type Metered<S> = Observed<S, Metering>;

/// What [`Metered`] charges: the meter's counters, checked for a change of charge with one
/// atomic load (a plain `ArcSwap` load on every read and write cost a request ~2 % of its
/// instructions), and the connection's place in its endpoint's gauge.
pub struct Metering {
    meter: Meter,
    charged: Cache<Arc<ArcSwap<PerWorker<BackendCounters>>>, Arc<PerWorker<BackendCounters>>>,
    _open: OpenConnection,
}

impl<S> Metered<S> {
    pub fn new(stream: S, meter: Meter, open: OpenConnection) -> Self {
        Observed::with(
            stream,
            Metering {
                charged: Cache::new(meter.charged.clone()),
                meter,
                _open: open,
            },
        )
    }

    pub fn meter(&self) -> &Meter {
        &self.observer().meter
    }

    /// [`Meter::charge`], the current charge read through the cache: one atomic load (an
    /// `ArcSwap` load cost each reused connection ~80 instructions).
    pub fn charge(&mut self, counters: &Arc<PerWorker<BackendCounters>>) {
        let metering = self.observer_mut();
        if !Arc::ptr_eq(metering.charged.load(), counters) {
            metering.meter.charged.store(counters.clone());
        }
    }
}

impl Metering {
    fn counters(&mut self) -> &BackendCounters {
        self.charged.load().mine(self.meter.worker)
    }
}

impl Observer for Metering {
    fn read(&mut self, polled: &Poll<io::Result<()>>, read: usize) {
        if let (Poll::Ready(Ok(())), 1..) = (polled, read) {
            add(&self.counters().bytes_in, read);
        }
    }

    fn written(&mut self, polled: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(written)) = polled {
            add(&self.counters().bytes_out, *written);
        }
    }
}

/// One open upstream connection in its endpoint's gauge: counted from creation to drop.
pub struct OpenConnection {
    endpoint: Arc<Endpoint>,
    worker: usize,
}

impl OpenConnection {
    pub fn new(endpoint: &Arc<Endpoint>, worker: usize) -> Self {
        move_alone(endpoint.open_connections.mine(worker), 1);
        OpenConnection {
            endpoint: endpoint.clone(),
            worker,
        }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        move_alone(self.endpoint.open_connections.mine(self.worker), -1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::read;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_each_way_go_to_the_backend_charged_at_the_time() {
        let first = Arc::new(PerWorker::<BackendCounters>::new(2));
        let second = Arc::new(PerWorker::<BackendCounters>::new(2));
        let (near, mut far) = tokio::io::duplex(64);
        let endpoint = crate::pool::Endpoints::new(2).get(
            "127.0.0.1:9".parse().unwrap(),
            crate::plan::UpstreamProtocol::Http1,
            None,
        );
        let open = OpenConnection::new(&endpoint, 1);
        let mut metered = Metered::new(near, Meter::new(&first, 1), open);
        metered.meter().opened();
        metered.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        far.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
        let mut answer = [0u8; 17];
        metered.read_exact(&mut answer).await.unwrap();

        metered.charge(&second);
        metered.write_all(b"x").await.unwrap();

        let total = |c: &PerWorker<BackendCounters>, f: fn(&BackendCounters) -> i64| c.sum(f);
        assert_eq!(total(&first, |c| read(&c.connections)), 1);
        assert_eq!(total(&first, |c| read(&c.bytes_out)), 18);
        assert_eq!(total(&first, |c| read(&c.bytes_in)), 17);
        assert_eq!(read(&first.mine(1).bytes_out), 18, "worker 1's shard");
        assert_eq!(total(&second, |c| read(&c.bytes_out)), 1);
        assert_eq!(total(&second, |c| read(&c.connections)), 0);
    }
}
