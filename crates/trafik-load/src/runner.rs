//! The engine. Open loop: a dispatcher releases each request at its intended time into a
//! queue; connection workers take from it, and when every worker is busy a new connection is
//! opened (up to a limit) rather than letting the schedule wait — so the generator never turns
//! into a closed loop. What it cannot send in time is counted (late, dropped), not hidden.
//! Closed loop (`--max`): every connection sends as fast as the server answers.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use crate::client::{Connection, Scratch};
use crate::record::{Errors, Outcome, Percentiles, Recorder, Sample, TlsReasons};
use crate::schedule::RatePlan;
use crate::target::Target;

/// Queued sends beyond this are dropped at once: memory stays bounded when a server stalls.
const MAX_QUEUED: usize = 1_000_000;
/// Samples a worker collects before handing them to the aggregator.
const BATCH: usize = 64;

/// How requests are paced (sent to a distributed run's agents as it is).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum Pacing {
    /// Open loop on a rate plan.
    Open(RatePlan),
    /// Closed loop for `duration`: each connection sends its next request when the last ends.
    Closed(Duration),
}

impl Pacing {
    /// Whether it can be run (see [`RatePlan::check`]): for pacing read from another process.
    pub fn check(&self) -> Result<(), String> {
        match self {
            Pacing::Open(plan) => plan.check(),
            Pacing::Closed(duration) if *duration > crate::schedule::LONGEST_RUN => Err(format!(
                "a closed loop of {}s: expected at most {}s",
                duration.as_secs(),
                crate::schedule::LONGEST_RUN.as_secs()
            )),
            Pacing::Closed(_) => Ok(()),
        }
    }
}

#[derive(Clone, Debug)]
pub struct RunOptions {
    pub target: Target,
    pub pacing: Pacing,
    /// Connections opened at the start (closed loop: the fixed number).
    pub connections: usize,
    /// Most connections the open loop may grow to.
    pub max_connections: usize,
    pub http2: bool,
    /// HTTP/2: requests in flight on one connection at once (its streams); each stream is a
    /// worker of its own sharing the connection.
    pub streams: usize,
    /// The client configuration for an `https://` target.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub timeout: Duration,
    /// A send this far behind its intended time counts as late.
    pub late_after: Duration,
    pub threshold_us: u64,
    /// Keep each second's histogram (for quarter tables).
    pub keep_seconds: bool,
}

impl RunOptions {
    /// Requests one connection carries at once: `streams` over HTTP/2, one over HTTP/1.1.
    fn streams_per_connection(&self) -> usize {
        if self.http2 { self.streams.max(1) } else { 1 }
    }

    /// Workers started at once: a stream each on every first connection.
    fn workers(&self) -> usize {
        self.connections.max(1) * self.streams_per_connection()
    }
}

/// What a run measured, before it is turned into a report.
pub struct RunResult {
    pub recorder: Recorder,
    pub planned: u64,
    pub planned_per_second: Vec<u64>,
    pub sent: u64,
    pub late: u64,
    pub dropped: u64,
    /// The send window: the plan's length, or the closed loop's duration.
    pub window: Duration,
    pub connections_opened: u64,
    /// Why TLS handshakes failed, with how often.
    pub tls_failures: BTreeMap<String, u64>,
}

/// The live view's numbers, every 100 ms; a distributed run's agents publish them to etcd.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Progress {
    pub elapsed: Duration,
    /// Requests sent (a scenario: flows started).
    pub sent: u64,
    pub completed: u64,
    pub errors: Errors,
    pub connections: u64,
    /// Sent per second over the last second.
    pub rate: f64,
    /// The plan's rate now; `None` in a closed loop.
    pub target_rate: Option<f64>,
    /// Requests sent and not finished (a scenario: virtual users on their way).
    pub in_flight: u64,
    /// Requests finished in the last second, and their latency from the intended send.
    pub last_second: (u64, Percentiles),
    /// The same latencies as buckets, so a coordinator merges agents' last seconds exactly.
    pub last_second_latency: crate::merge::Buckets,
}

/// What the live view needs between ticks: the sent count over the last second.
pub(crate) struct Live {
    sends: VecDeque<(Duration, u64)>,
}

impl Live {
    /// How often the live view is refreshed.
    pub(crate) const TICK: Duration = Duration::from_millis(100);

    pub(crate) fn new() -> Live {
        Live {
            sends: VecDeque::new(),
        }
    }

    pub(crate) fn progress(
        &mut self,
        recorder: &Recorder,
        elapsed: Duration,
        sent: u64,
        in_flight: u64,
        connections: u64,
        target_rate: Option<f64>,
    ) -> Progress {
        self.sends.push_back((elapsed, sent));
        while self
            .sends
            .front()
            .is_some_and(|(at, _)| elapsed - *at > Duration::from_secs(1))
        {
            self.sends.pop_front();
        }
        let rate = match self.sends.front() {
            Some((at, before)) if elapsed > *at => {
                (sent - before) as f64 / (elapsed - *at).as_secs_f64()
            }
            _ => 0.0,
        };
        let (finished, latency) = recorder.last_second(elapsed.as_millis() as u32);
        Progress {
            elapsed,
            sent,
            completed: recorder.completed,
            errors: recorder.errors.clone(),
            connections,
            rate,
            target_rate,
            in_flight,
            last_second: (finished, Percentiles::of(&latency)),
            last_second_latency: crate::merge::Buckets::of(&latency),
        }
    }
}

/// An HTTP/2 connection and how many workers send on it.
struct SharedConnection {
    id: u64,
    sender: hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>,
    users: usize,
}

struct Job {
    n: u64,
    intended: Instant,
    second: u32,
}

struct Shared {
    options: RunOptions,
    start: Instant,
    queue: Mutex<VecDeque<Job>>,
    ready: Semaphore,
    idle: AtomicUsize,
    workers: AtomicUsize,
    sent: AtomicU64,
    late: AtomicU64,
    dropped: AtomicU64,
    connections_opened: AtomicU64,
    tls_failures: TlsReasons,
    stop: AtomicBool,
    /// HTTP/2 connections shared by up to `streams` workers each; held while one is opened,
    /// so the workers that start together share it instead of each opening its own.
    shared_connections: tokio::sync::Mutex<Vec<SharedConnection>>,
    /// Every worker task, to abort the ones still waiting when the run is over.
    handles: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    runtime: tokio::runtime::Handle,
}

/// Runs the load and returns what it measured. `progress` is called about once a second.
///
/// Must run inside a multi-threaded tokio runtime: the open loop's dispatcher is an OS thread
/// of its own, because tokio's timer rounds every deadline up to the next millisecond and a
/// dispatcher on it would send nearly every request late.
pub async fn run(options: RunOptions, mut progress: impl FnMut(Progress)) -> RunResult {
    let start = Instant::now();
    let (samples, mut incoming) = mpsc::unbounded_channel::<Vec<Sample>>();
    let shared = Arc::new(Shared {
        start,
        queue: Mutex::new(VecDeque::new()),
        ready: Semaphore::new(0),
        idle: AtomicUsize::new(0),
        workers: AtomicUsize::new(0),
        sent: AtomicU64::new(0),
        late: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        connections_opened: AtomicU64::new(0),
        tls_failures: TlsReasons::default(),
        stop: AtomicBool::new(false),
        shared_connections: tokio::sync::Mutex::new(Vec::new()),
        handles: Mutex::new(Vec::new()),
        runtime: tokio::runtime::Handle::current(),
        options,
    });
    for _ in 0..shared.options.workers() {
        spawn_worker(&shared, &samples);
    }

    let (finished, mut dispatched) = tokio::sync::oneshot::channel();
    let window = match shared.options.pacing.clone() {
        Pacing::Open(plan) => {
            let window = Duration::from_secs_f64(plan.duration());
            let (dispatcher, senders) = (shared.clone(), samples.clone());
            std::thread::Builder::new()
                .name("trafik-load-dispatch".into())
                .spawn(move || {
                    let planned = dispatch(dispatcher.start, &plan, |n, intended, second| {
                        let job = Job {
                            n,
                            intended,
                            second,
                        };
                        enqueue(&dispatcher, job, &senders);
                    });
                    let _ = finished.send(planned);
                })
                .expect("the dispatcher thread starts");
            window
        }
        Pacing::Closed(duration) => {
            let waiter = shared.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(waiter.start + duration).await;
                let _ = finished.send((0, Vec::new()));
            });
            duration
        }
    };

    // The aggregator owns the recorder; it closes seconds that can no longer change.
    let mut recorder = Recorder::new(shared.options.threshold_us, shared.options.keep_seconds);
    let settle = shared.options.timeout.as_secs() as u32 + 2;
    let mut tick = tokio::time::interval_at(start + Live::TICK, Live::TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut live = Live::new();
    let target_rate = |elapsed: Duration| match &shared.options.pacing {
        Pacing::Open(plan) => Some(plan.rate_at(elapsed.as_secs_f64())),
        Pacing::Closed(_) => None,
    };
    let (planned, planned_per_second) = loop {
        tokio::select! {
            Some(batch) = incoming.recv() => batch.into_iter().for_each(|s| recorder.record(s)),
            _ = tick.tick() => {
                let elapsed = Instant::now() - start;
                recorder.close_before((elapsed.as_secs() as u32).saturating_sub(settle));
                recorder.close_tenths_before(
                    (elapsed.as_millis() as u32).saturating_sub(settle * 1000),
                );
                let sent = shared.sent.load(Ordering::Relaxed);
                let finished = recorder.completed + recorder.errors.total();
                progress(live.progress(
                    &recorder,
                    elapsed,
                    sent,
                    sent.saturating_sub(finished),
                    shared.connections_opened.load(Ordering::Relaxed),
                    target_rate(elapsed),
                ));
            }
            done = &mut dispatched => break done.unwrap_or_default(),
        }
    };

    // The window is over: what is still queued was never sent.
    shared.stop.store(true, Ordering::Relaxed);
    let unsent = {
        let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        let unsent = queue.len() as u64;
        queue.clear();
        unsent
    };
    shared.dropped.fetch_add(unsent, Ordering::Relaxed);
    shared.ready.close();
    drop(samples);
    // Requests in flight get their timeout to finish.
    let drain = tokio::time::sleep(shared.options.timeout + Duration::from_secs(1));
    tokio::pin!(drain);
    loop {
        tokio::select! {
            batch = incoming.recv() => match batch {
                Some(batch) => batch.into_iter().for_each(|s| recorder.record(s)),
                None => break,
            },
            _ = &mut drain => break,
        }
    }
    for handle in shared
        .handles
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain(..)
    {
        handle.abort();
    }
    recorder.close_before(u32::MAX);
    recorder.close_tenths_before(u32::MAX);
    RunResult {
        recorder,
        planned,
        planned_per_second,
        sent: shared.sent.load(Ordering::Relaxed),
        late: shared.late.load(Ordering::Relaxed),
        dropped: shared.dropped.load(Ordering::Relaxed),
        window,
        connections_opened: shared.connections_opened.load(Ordering::Relaxed),
        tls_failures: shared.tls_failures.take(),
    }
}

/// A new connection to the target, counted.
async fn open(shared: &Shared) -> Result<Connection, Outcome> {
    let options = &shared.options;
    let connection = Connection::open(&options.target, options.http2, options.tls.as_ref())
        .await
        .map_err(|error| match error.kind() {
            io::ErrorKind::ConnectionRefused => Outcome::ConnectRefused,
            io::ErrorKind::InvalidData => {
                shared.tls_failures.count(&error.to_string());
                Outcome::Tls
            }
            _ => Outcome::ConnectFailed,
        })?;
    shared.connections_opened.fetch_add(1, Ordering::Relaxed);
    Ok(connection)
}

/// The open loop's clock: sleeps to each intended send time and hands it to `release` with
/// the send's number and its second of the run. Returns the planned total and its count per
/// second. Used by the plain runner and by scenarios alike.
pub(crate) fn dispatch(
    start: Instant,
    plan: &RatePlan,
    mut release: impl FnMut(u64, Instant, u32),
) -> (u64, Vec<u64>) {
    let start = start.into_std();
    let mut per_second = vec![0u64; plan.duration().ceil() as usize];
    let mut planned = 0u64;
    for (n, t) in plan.send_times().enumerate() {
        let due = start + t;
        let now = std::time::Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let second = t.as_secs() as u32;
        if let Some(count) = per_second.get_mut(second as usize) {
            *count += 1;
        }
        planned += 1;
        release(n as u64, Instant::from_std(due), second);
    }
    let end = start + Duration::from_secs_f64(plan.duration());
    let now = std::time::Instant::now();
    if end > now {
        std::thread::sleep(end - now);
    }
    (planned, per_second)
}

/// Queues one send; opens another connection when every worker is busy.
fn enqueue(shared: &Arc<Shared>, job: Job, samples: &mpsc::UnboundedSender<Vec<Sample>>) {
    {
        let mut queue = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        if queue.len() >= MAX_QUEUED {
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        queue.push_back(job);
    }
    shared.ready.add_permits(1);
    let busy = shared.idle.load(Ordering::Relaxed) == 0;
    let most = shared.options.max_connections.max(1) * shared.options.streams_per_connection();
    if busy && shared.workers.load(Ordering::Relaxed) < most {
        spawn_worker(shared, samples);
    }
}

fn spawn_worker(shared: &Arc<Shared>, samples: &mpsc::UnboundedSender<Vec<Sample>>) {
    let id = shared.workers.fetch_add(1, Ordering::Relaxed) as u64;
    let handle = shared
        .runtime
        .spawn(worker(shared.clone(), samples.clone(), id));
    shared
        .handles
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(handle);
}

async fn worker(shared: Arc<Shared>, samples: mpsc::UnboundedSender<Vec<Sample>>, id: u64) {
    {
        let mut worker = Worker {
            id,
            connection: None,
            shared_connection: None,
            scratch: Scratch::default(),
            batch: Vec::with_capacity(BATCH),
        };
        match shared.options.pacing {
            Pacing::Open(_) => worker.open_loop(&shared, &samples).await,
            Pacing::Closed(duration) => {
                worker
                    .closed_loop(&shared, &samples, shared.start + duration)
                    .await
            }
        }
        if !worker.batch.is_empty() {
            let _ = samples.send(std::mem::take(&mut worker.batch));
        }
    }
}

struct Worker {
    /// The worker's number: in a closed loop, worker i sends requests i, i + W, i + 2W, …
    id: u64,
    connection: Option<Connection>,
    /// The id of the shared HTTP/2 connection `connection` is a handle on.
    shared_connection: Option<u64>,
    scratch: Scratch,
    batch: Vec<Sample>,
}

impl Worker {
    async fn open_loop(&mut self, shared: &Shared, samples: &mpsc::UnboundedSender<Vec<Sample>>) {
        loop {
            shared.idle.fetch_add(1, Ordering::Relaxed);
            let permit = shared.ready.acquire().await;
            shared.idle.fetch_sub(1, Ordering::Relaxed);
            let Ok(permit) = permit else { return };
            permit.forget();
            let job = shared
                .queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
            let Some(job) = job else { continue };
            let sent_at = Instant::now();
            if sent_at.saturating_duration_since(job.intended) > shared.options.late_after {
                shared.late.fetch_add(1, Ordering::Relaxed);
            }
            shared.sent.fetch_add(1, Ordering::Relaxed);
            let sample = self
                .request(shared, job.n, job.intended, sent_at, job.second)
                .await;
            self.batch.push(sample);
            // One permit per queued send: none left means nothing waits, so hand over now.
            let queue_empty = shared.ready.available_permits() == 0;
            if self.batch.len() >= BATCH || queue_empty {
                let _ = samples.send(std::mem::take(&mut self.batch));
            }
        }
    }

    async fn closed_loop(
        &mut self,
        shared: &Shared,
        samples: &mpsc::UnboundedSender<Vec<Sample>>,
        deadline: Instant,
    ) {
        // Request numbers and the sent count stay local and are published with each batch: at
        // full speed, atomics shared by every connection would cost more than the sends.
        let stride = shared.options.workers() as u64;
        let mut n = self.id;
        // A batch also goes every 100 ms, so the live view and its buckets stay current when
        // the server is slow.
        let mut batch_start = Instant::now();
        loop {
            let sent_at = Instant::now();
            if sent_at >= deadline || shared.stop.load(Ordering::Relaxed) {
                shared
                    .sent
                    .fetch_add(self.batch.len() as u64, Ordering::Relaxed);
                return;
            }
            let second = (sent_at - shared.start).as_secs() as u32;
            let sample = self.request(shared, n, sent_at, sent_at, second).await;
            n += stride;
            self.batch.push(sample);
            if self.batch.len() >= BATCH || sent_at - batch_start >= Live::TICK {
                shared
                    .sent
                    .fetch_add(self.batch.len() as u64, Ordering::Relaxed);
                let _ = samples.send(std::mem::take(&mut self.batch));
                batch_start = sent_at;
            }
        }
    }

    /// One request with its timeout; the connection is reopened after any failure. A timeout
    /// is measured at the timeout, so a server that never answers shows as slow, not as absent.
    async fn request(
        &mut self,
        shared: &Shared,
        n: u64,
        intended: Instant,
        sent_at: Instant,
        second: u32,
    ) -> Sample {
        let options = &shared.options;
        let outcome = match tokio::time::timeout(options.timeout, self.exchange(shared, n)).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(outcome)) => {
                self.drop_connection(shared).await;
                outcome
            }
            Err(_) => {
                self.drop_connection(shared).await;
                Outcome::Timeout
            }
        };
        let done = match outcome {
            Outcome::Timeout => sent_at + options.timeout,
            _ => Instant::now(),
        };
        Sample {
            second,
            corrected_us: (done - intended).as_micros() as u64,
            service_us: (done - sent_at).as_micros() as u64,
            done_ms: (done - shared.start).as_millis() as u32,
            outcome,
        }
    }

    /// Takes a stream on a shared HTTP/2 connection that has one free, or opens one.
    async fn share_connection(&mut self, shared: &Shared) -> Result<(), Outcome> {
        let most = shared.options.streams_per_connection();
        let mut pool = shared.shared_connections.lock().await;
        pool.retain(|c| !c.sender.is_closed());
        if let Some(free) = pool.iter_mut().find(|c| c.users < most) {
            free.users += 1;
            self.shared_connection = Some(free.id);
            self.connection = Some(Connection::Http2(free.sender.clone()));
            return Ok(());
        }
        let connection = open(shared).await?;
        if let Connection::Http2(sender) = &connection {
            let id = shared.connections_opened.load(Ordering::Relaxed);
            pool.push(SharedConnection {
                id,
                sender: sender.clone(),
                users: 1,
            });
            self.shared_connection = Some(id);
        }
        self.connection = Some(connection);
        Ok(())
    }

    /// Lets go of the connection after a failure or a close; a shared one loses a user, and
    /// leaves the pool when it failed (its other users find out on their next request).
    async fn drop_connection(&mut self, shared: &Shared) {
        self.connection = None;
        if let Some(id) = self.shared_connection.take() {
            shared
                .shared_connections
                .lock()
                .await
                .retain(|c| c.id != id);
        }
    }

    async fn exchange(&mut self, shared: &Shared, n: u64) -> Result<Outcome, Outcome> {
        let options = &shared.options;
        if self.connection.is_none() {
            if options.streams_per_connection() > 1 {
                self.share_connection(shared).await?;
            } else {
                self.connection = Some(open(shared).await?);
            }
        }
        let connection = self.connection.as_mut().ok_or(Outcome::ConnectFailed)?;
        match connection.send(&options.target, n, &mut self.scratch).await {
            Ok(answer) => {
                if answer.close {
                    self.drop_connection(shared).await;
                }
                Ok(Outcome::Status(answer.status))
            }
            Err(error) if error.kind() == io::ErrorKind::InvalidData => Err(Outcome::Protocol),
            Err(_) => Err(Outcome::Reset),
        }
    }
}
