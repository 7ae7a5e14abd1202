//! Mirroring: a copy of a share of a route's requests goes to another pool, on its own task,
//! its answer read and dropped. The client's request goes on untouched and at once; a copy
//! whose body is still coming is sent when the body has passed ([`BodyCopy`]). Copies are
//! bounded per worker (`max_in_flight`) and by body size; what is not sent is counted.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use http::Request;
use http_body_util::BodyExt;

use super::body::{BodyCopy, ProxyBody, RequestBody};
use super::routing::RoutingCounters;
use super::service::{ClientConnection, WorkerProxy};
use super::target::PoolTarget;
use super::upgrade::ClientUpgrade;
use crate::counters::{PerWorker, bump};
use crate::plan::MirrorPlan;
use crate::snapshot::{ListenerId, WorkerSnapshot};

/// A route's mirror.
pub struct Mirror {
    /// The pool's index in the snapshot.
    pool: usize,
    /// A request is copied when a draw falls at or below this (`None`: never).
    threshold: Option<u64>,
    max_body: u64,
    max_in_flight: i64,
    shared: Arc<Shared>,
}

/// What the copies on their way count into.
struct Shared {
    in_flight: PerWorker<AtomicI64>,
    counters: Arc<PerWorker<RoutingCounters>>,
}

impl Mirror {
    pub fn new(
        plan: &MirrorPlan,
        pool: usize,
        workers: usize,
        counters: Arc<PerWorker<RoutingCounters>>,
    ) -> Self {
        let threshold = (plan.percent > 0.0).then(|| {
            // Exact at 100: every draw is at or below u64::MAX.
            (plan.percent / 100.0 * u64::MAX as f64) as u64
        });
        Mirror {
            pool,
            threshold,
            max_body: plan.max_body,
            max_in_flight: i64::from(plan.max_in_flight),
            shared: Arc::new(Shared {
                in_flight: PerWorker::new(workers),
                counters,
            }),
        }
    }

    /// Hands a copy of `request`, as it goes to the target, to the worker's mirror task when
    /// the request falls in the share; its body, when it has one, is copied as it passes.
    pub fn copy(
        &self,
        worker: &WorkerProxy,
        snapshot: &Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        request: &mut Request<RequestBody>,
    ) {
        if self.threshold.is_none_or(|t| fastrand::u64(..) > t) {
            return;
        }
        let counters = self.shared.counters.mine(worker.id);
        let in_flight = self.shared.in_flight.mine(worker.id);
        let upgrade = request.extensions().get::<ClientUpgrade>().is_some();
        if upgrade || in_flight.load(Ordering::Relaxed) >= self.max_in_flight {
            bump(&counters.mirror_dropped);
            return;
        }
        let Some(body) = request.body_mut().copy_up_to(self.max_body) else {
            bump(&counters.mirror_dropped);
            return;
        };
        let mut head = Request::new(());
        *head.method_mut() = request.method().clone();
        *head.uri_mut() = request.uri().clone();
        *head.version_mut() = request.version();
        *head.headers_mut() = request.headers().clone();
        in_flight.fetch_add(1, Ordering::Relaxed);
        let copy = Copy {
            snapshot: snapshot.clone(),
            pool: self.pool,
            head,
            body,
            listener: connection.listener,
            peer: connection.peer,
            place: Place {
                shared: self.shared.clone(),
                worker: worker.id,
            },
        };
        worker.mirrors.send(copy);
    }
}

/// One copy on its way.
pub struct Copy {
    snapshot: Rc<WorkerSnapshot>,
    pool: usize,
    head: Request<()>,
    body: BodyCopy,
    listener: ListenerId,
    peer: SocketAddr,
    place: Place,
}

impl Copy {
    async fn send(self, worker: Rc<WorkerProxy>) {
        let Copy {
            snapshot,
            pool,
            head,
            body,
            listener,
            peer,
            place,
        } = self;
        let Some(body) = body.whole().await else {
            return place.finish(false, true);
        };
        let (parts, ()) = head.into_parts();
        let body = body.map_or_else(RequestBody::empty, RequestBody::whole);
        let connection = ClientConnection::new(listener, peer, "http", None);
        let target = PoolTarget {
            pool,
            retry_non_idempotent: false,
        };
        let (answer, _) = target
            .serve(
                &worker,
                &snapshot,
                &connection,
                Request::from_parts(parts, body),
            )
            .await;
        // The answer is thrown away; its body is read (so the connection can serve again) for
        // at most the pool's response timeout: a backend that trickles it would otherwise hold
        // the copy's place, and with every place held all later copies are dropped.
        let body_timeout = snapshot.pools[pool].plan.response_timeout;
        let failed = answer.status().is_server_error()
            || !matches!(
                tokio::time::timeout(body_timeout, drain(answer.into_body())).await,
                Ok(Ok(()))
            );
        place.finish(failed, false);
    }
}

/// A copy's place among those in flight on its worker.
struct Place {
    shared: Arc<Shared>,
    worker: usize,
}

impl Place {
    /// Counts how the copy ended and frees its place.
    fn finish(&self, failed: bool, dropped: bool) {
        let counters = self.shared.counters.mine(self.worker);
        bump(match (dropped, failed) {
            (true, _) => &counters.mirror_dropped,
            (false, true) => &counters.mirror_failed,
            (false, false) => &counters.mirror_sent,
        });
        self.shared
            .in_flight
            .mine(self.worker)
            .fetch_sub(1, Ordering::Relaxed);
    }
}

async fn drain(mut body: ProxyBody) -> Result<(), ()> {
    while let Some(frame) = body.frame().await {
        frame.map_err(drop)?;
    }
    Ok(())
}

/// A worker's queue of copies, run by [`run`] on the worker's thread.
pub struct Outbox {
    sender: tokio::sync::mpsc::UnboundedSender<Copy>,
    receiver: std::cell::RefCell<Option<tokio::sync::mpsc::UnboundedReceiver<Copy>>>,
}

impl Default for Outbox {
    fn default() -> Self {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        Outbox {
            sender,
            receiver: std::cell::RefCell::new(Some(receiver)),
        }
    }
}

impl Outbox {
    fn send(&self, copy: Copy) {
        if let Err(unsent) = self.sender.send(copy) {
            // No mirror task on this worker: the copy is dropped.
            unsent.0.place.finish(false, true);
        }
    }
}

/// Sends the worker's copies, each on a task of its own, for the life of the worker.
pub async fn run(worker: Rc<WorkerProxy>) {
    let Some(mut copies) = worker.mirrors.receiver.borrow_mut().take() else {
        return;
    };
    while let Some(copy) = copies.recv().await {
        tokio::task::spawn_local(copy.send(worker.clone()));
    }
}
