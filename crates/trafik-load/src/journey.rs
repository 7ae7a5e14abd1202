//! Running a scenario. Arrivals stay open loop: the dispatcher starts one virtual user at each
//! intended time of the rate plan, whether or not earlier ones have finished, so a slow server
//! shows as latency and as users in flight, never as a slower schedule. A virtual user runs its
//! flow's steps in order (its `iterations` times) on its own connections, with its own cookie
//! jar and captures; each
//! step's latency counts from when the step was due (the arrival, or the previous answer plus
//! the think time), so a stall inside a journey is not hidden either.
//!
//! With `http2`, a user's connections speak HTTP/2 (`h2` by ALPN over TLS, prior knowledge
//! over cleartext), one stream at a time as the user's steps are in order.
//!
//! A step that fails (no answer, or an answer its checks refuse) ends the user's journey: the
//! steps after it would act on an answer they did not get.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use trafik_gateway::jq::{self, Value};

use crate::client::Stream;
use crate::merge::Buckets;
use crate::record::{
    CurvePoint, Outcome, Percentiles, Recorder, Sample, TlsReasons, histogram, percentile_curve,
};
use crate::runner::{Live, Progress, RunResult, dispatch};
use crate::scenario::{Capture, DataPer, Scenario, Step, StepCapture, Threshold};
use crate::schedule::RatePlan;

/// Distinct reasons for failed checks kept per step; further ones are counted as "other".
const MAX_REASONS: usize = 8;

#[derive(Clone, Debug)]
pub struct ScenarioOptions {
    /// When flows start.
    pub plan: RatePlan,
    /// Most virtual users in flight; an arrival beyond it is dropped (and counted).
    pub max_users: usize,
    /// Per-step timeout.
    pub timeout: Duration,
    /// A flow started this far behind its intended time counts as late.
    pub late_after: Duration,
    pub threshold_us: u64,
    pub keep_seconds: bool,
    /// The client configuration for `https://` steps.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub deal: Deal,
    /// Speak HTTP/2 on every connection (the TLS configuration then offers `h2` by ALPN).
    pub http2: bool,
}

/// Which of the scenario's arrivals this run's are: its `n`th is `first + n × every`. Agent
/// `k` of `N` runs arrivals k, k + N, k + 2N …, so the agents together take flows and rows in
/// turn as one machine would, rather than each starting again at the first row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deal {
    pub first: u64,
    pub every: u64,
}

impl Deal {
    /// A run on one machine: every arrival.
    pub const ALL: Deal = Deal { first: 0, every: 1 };

    fn nth(self, n: u64) -> u64 {
        self.first + n * self.every.max(1)
    }
}

/// What one step measured.
pub struct StepStats {
    pub sent: u64,
    /// Answered, and the answer passed the step's checks.
    pub completed: u64,
    pub failed_checks: u64,
    /// No answer: refused, reset, timed out, not HTTP.
    pub errors: u64,
    /// From when the step was due, for every answer and timeout.
    pub latency: Histogram<u64>,
    /// Why checks failed, with how often.
    pub failures: BTreeMap<String, u64>,
}

impl StepStats {
    fn new() -> Self {
        StepStats {
            sent: 0,
            completed: 0,
            failed_checks: 0,
            errors: 0,
            latency: histogram(),
            failures: BTreeMap::new(),
        }
    }

    fn count(&mut self, outcome: Outcome, latency_us: u64, reason: Option<String>) {
        self.sent += 1;
        match outcome {
            Outcome::Passed => self.completed += 1,
            Outcome::FailedCheck => self.failed_checks += 1,
            _ => self.errors += 1,
        }
        if outcome.is_measured() {
            let _ = self.latency.record(latency_us.max(1));
        }
        if let Some(reason) = reason {
            add_reason(&mut self.failures, reason, 1);
        }
    }
}

/// Flows by outcome.
#[derive(Default)]
struct FlowCounters {
    started: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
}

/// A step in the report.
#[derive(Clone, Debug, Serialize)]
pub struct StepReport {
    pub flow: String,
    pub name: String,
    pub sent: u64,
    pub completed: u64,
    pub failed_checks: u64,
    pub errors: u64,
    pub latency_ms: Percentiles,
    /// The step's latency by percentile, for the report's curve.
    pub percentile_curve: Vec<CurvePoint>,
    pub thresholds: Vec<ThresholdResult>,
    /// Why checks failed, with how often.
    pub failures: BTreeMap<String, u64>,
}

/// A flow in the report.
#[derive(Clone, Debug, Serialize)]
pub struct FlowReport {
    pub name: String,
    pub weight: u32,
    /// Virtual users that began it.
    pub started: u64,
    /// Users whose every step passed.
    pub completed: u64,
    /// Users stopped by a failed step.
    pub failed: u64,
    /// Users still on their way when the run ended.
    pub unfinished: u64,
}

/// A threshold with what was measured.
#[derive(Clone, Debug, Serialize)]
pub struct ThresholdResult {
    pub threshold: String,
    /// The limit, for the report's threshold lines.
    pub limit_ms: f64,
    /// The percentile measured; null when nothing was.
    pub value_ms: Option<f64>,
    pub passed: bool,
}

impl ThresholdResult {
    fn of(threshold: &Threshold, latency: &Histogram<u64>) -> Self {
        let (value_ms, passed) = threshold.judge(latency);
        ThresholdResult {
            threshold: threshold.to_string(),
            limit_ms: threshold.limit_ms,
            value_ms,
            passed,
        }
    }
}

/// What a scenario run measured beyond a plain run's numbers.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioReport {
    pub steps: Vec<StepReport>,
    pub flows: Vec<FlowReport>,
    /// The scenario's thresholds over every step's latency together.
    pub thresholds: Vec<ThresholdResult>,
}

impl ScenarioReport {
    /// Why the thresholds failed, one sentence each.
    pub fn failures(&self) -> Vec<String> {
        let overall = self
            .thresholds
            .iter()
            .filter(|t| !t.passed)
            .map(|t| ("every step".to_owned(), t));
        let per_step = self.steps.iter().flat_map(|s| {
            s.thresholds
                .iter()
                .filter(|t| !t.passed)
                .map(|t| (format!("step {}/{}", s.flow, s.name), t))
        });
        overall
            .chain(per_step)
            .map(|(place, t)| match t.value_ms {
                Some(value) => format!(
                    "threshold {} on {place} failed: it was {value:.2} ms",
                    t.threshold
                ),
                None => format!(
                    "threshold {} on {place} could not be measured: no answer",
                    t.threshold
                ),
            })
            .collect()
    }
}

struct Shared {
    scenario: Arc<Scenario>,
    options: ScenarioOptions,
    start: Instant,
    /// The index of each flow's first step in `steps`.
    first_step: Vec<usize>,
    steps: Vec<Mutex<StepStats>>,
    flows: Vec<FlowCounters>,
    in_flight: AtomicUsize,
    started: AtomicU64,
    late: AtomicU64,
    dropped: AtomicU64,
    connections_opened: AtomicU64,
    tls_failures: TlsReasons,
    /// Iterations begun by every user: the next row with `[data] per = "iteration"`.
    iterations: AtomicU64,
    /// Closed when the run is over: users still on their way stop.
    stop: Semaphore,
    runtime: tokio::runtime::Handle,
}

/// Runs `scenario` on `options.plan`; `progress` is called about once a second. Must run in a
/// multi-threaded tokio runtime (the dispatcher is an OS thread, as in [`crate::run`]).
pub async fn run(
    scenario: Arc<Scenario>,
    options: ScenarioOptions,
    mut progress: impl FnMut(Progress),
) -> (RunResult, StepsMeasured) {
    let start = Instant::now();
    let mut first_step = Vec::new();
    let mut steps = Vec::new();
    for flow in &scenario.flows {
        first_step.push(steps.len());
        steps.extend(flow.steps.iter().map(|_| Mutex::new(StepStats::new())));
    }
    let shared = Arc::new(Shared {
        flows: scenario
            .flows
            .iter()
            .map(|_| FlowCounters::default())
            .collect(),
        first_step,
        steps,
        scenario,
        start,
        in_flight: AtomicUsize::new(0),
        started: AtomicU64::new(0),
        late: AtomicU64::new(0),
        dropped: AtomicU64::new(0),
        connections_opened: AtomicU64::new(0),
        tls_failures: TlsReasons::default(),
        iterations: AtomicU64::new(0),
        stop: Semaphore::new(0),
        runtime: tokio::runtime::Handle::current(),
        options,
    });
    let (samples, mut incoming) = mpsc::unbounded_channel::<Vec<Sample>>();
    let (finished, mut dispatched) = tokio::sync::oneshot::channel();
    let plan = shared.options.plan.clone();
    let window = Duration::from_secs_f64(plan.duration());
    {
        let (shared, samples) = (shared.clone(), samples);
        std::thread::Builder::new()
            .name("trafik-load-dispatch".into())
            .spawn(move || {
                let planned = dispatch(shared.start, &plan, |n, intended, _| {
                    arrive(&shared, &samples, n, intended)
                });
                let _ = finished.send(planned);
            })
            .expect("the dispatcher thread starts");
    }

    let mut recorder = Recorder::new(shared.options.threshold_us, shared.options.keep_seconds);
    let longest = shared.scenario.longest_journey(shared.options.timeout);
    let settle = longest.as_secs() as u32 + 2;
    let mut tick = tokio::time::interval_at(start + Live::TICK, Live::TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut live = Live::new();
    let (planned, planned_per_second) = loop {
        tokio::select! {
            Some(batch) = incoming.recv() => batch.into_iter().for_each(|s| recorder.record(s)),
            _ = tick.tick() => {
                let elapsed = Instant::now() - start;
                recorder.close_before((elapsed.as_secs() as u32).saturating_sub(settle));
                recorder.close_tenths_before(
                    (elapsed.as_millis() as u32).saturating_sub(settle * 1000),
                );
                progress(live.progress(
                    &recorder,
                    elapsed,
                    shared.started.load(Ordering::Relaxed),
                    shared.in_flight.load(Ordering::Relaxed) as u64,
                    shared.connections_opened.load(Ordering::Relaxed),
                    Some(shared.options.plan.rate_at(elapsed.as_secs_f64())),
                ));
            }
            done = &mut dispatched => break done.unwrap_or_default(),
        }
    };

    // Users that started in the window may finish: as long as their longest journey takes.
    let drain = tokio::time::sleep(longest + Duration::from_secs(1));
    tokio::pin!(drain);
    loop {
        tokio::select! {
            batch = incoming.recv() => match batch {
                Some(batch) => batch.into_iter().for_each(|s| recorder.record(s)),
                None => break,
            },
            _ = &mut drain, if !shared.stop.is_closed() => shared.stop.close(),
        }
    }
    recorder.close_before(u32::MAX);
    recorder.close_tenths_before(u32::MAX);
    let report = measured(&shared);
    let result = RunResult {
        recorder,
        planned,
        planned_per_second,
        sent: shared.started.load(Ordering::Relaxed),
        late: shared.late.load(Ordering::Relaxed),
        dropped: shared.dropped.load(Ordering::Relaxed),
        window,
        connections_opened: shared.connections_opened.load(Ordering::Relaxed),
        tls_failures: shared.tls_failures.take(),
    };
    (result, report)
}

/// Starts virtual user `n`, due at `intended`, unless too many are in flight.
fn arrive(
    shared: &Arc<Shared>,
    samples: &mpsc::UnboundedSender<Vec<Sample>>,
    n: u64,
    intended: Instant,
) {
    if shared.in_flight.load(Ordering::Relaxed) >= shared.options.max_users {
        shared.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    shared.in_flight.fetch_add(1, Ordering::Relaxed);
    shared.started.fetch_add(1, Ordering::Relaxed);
    let (shared, samples) = (shared.clone(), samples.clone());
    shared.runtime.clone().spawn(async move {
        tokio::select! {
            _ = shared.stop.acquire() => {}
            _ = journey(&shared, &samples, n, intended) => {
                shared.in_flight.fetch_sub(1, Ordering::Relaxed);
            }
        }
    });
}

/// One virtual user's flow, every iteration from its first step to its last, until a step fails.
async fn journey(
    shared: &Shared,
    samples: &mpsc::UnboundedSender<Vec<Sample>>,
    n: u64,
    arrival: Instant,
) {
    let scenario = &shared.scenario;
    let deal = shared.options.deal;
    let n = deal.nth(n);
    let index = scenario.flow_of(n);
    let flow = &scenario.flows[index];
    let counters = &shared.flows[index];
    counters.started.fetch_add(1, Ordering::Relaxed);
    let mut user = User {
        connections: Vec::new(),
        cookies: Vec::new(),
        variables: vec![None; flow.variables.len()],
    };
    let timeout = shared.options.timeout;
    let mut batch = Vec::with_capacity(flow.steps.len() * flow.iterations as usize);
    let mut due = arrival;
    let mut passed = true;
    'iterations: for iteration in 0..flow.iterations {
        let row = match scenario.per {
            DataPer::User => n,
            DataPer::Iteration => deal.nth(shared.iterations.fetch_add(1, Ordering::Relaxed)),
        };
        let row = scenario.rows.row(row).unwrap_or(&[]);
        for (i, step) in flow.steps.iter().enumerate() {
            due += step.think;
            tokio::time::sleep_until(due).await;
            let sent_at = Instant::now();
            if iteration == 0
                && i == 0
                && sent_at.saturating_duration_since(due) > shared.options.late_after
            {
                shared.late.fetch_add(1, Ordering::Relaxed);
            }
            let exchange = user.step(step, row, shared);
            let (outcome, reason) = match tokio::time::timeout(timeout, exchange).await {
                Ok(result) => result,
                Err(_) => (Outcome::Timeout, None),
            };
            if outcome != Outcome::Passed && outcome != Outcome::FailedCheck {
                // Whatever went wrong on the way, the next user's connection starts afresh.
                user.connections
                    .retain(|(address, _)| *address != step.address);
            }
            let done = match outcome {
                Outcome::Timeout => sent_at + timeout,
                _ => Instant::now(),
            };
            let corrected_us = (done - due).as_micros() as u64;
            shared.steps[shared.first_step[index] + i]
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .count(outcome, corrected_us, reason);
            batch.push(Sample {
                second: (due.saturating_duration_since(shared.start)).as_secs() as u32,
                corrected_us,
                service_us: (done - sent_at).as_micros() as u64,
                done_ms: (done - shared.start).as_millis() as u32,
                outcome,
            });
            if outcome != Outcome::Passed {
                passed = false;
                break 'iterations;
            }
            due = done;
        }
    }
    let _ = samples.send(batch);
    let finished = if passed {
        &counters.completed
    } else {
        &counters.failed
    };
    finished.fetch_add(1, Ordering::Relaxed);
}

/// A connection's sending half, in the protocol the run speaks.
enum Sender {
    Http1(http1::SendRequest<Full<Bytes>>),
    Http2(http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    fn is_closed(&self) -> bool {
        match self {
            Sender::Http1(sender) => sender.is_closed(),
            Sender::Http2(sender) => sender.is_closed(),
        }
    }

    async fn ready(&mut self) -> hyper::Result<()> {
        match self {
            Sender::Http1(sender) => sender.ready().await,
            Sender::Http2(sender) => sender.ready().await,
        }
    }

    async fn send(
        &mut self,
        request: http::Request<Full<Bytes>>,
    ) -> hyper::Result<http::Response<Incoming>> {
        match self {
            Sender::Http1(sender) => sender.send_request(request).await,
            Sender::Http2(sender) => sender.send_request(request).await,
        }
    }
}

/// A virtual user's state between steps.
struct User {
    /// One keep-alive connection per address.
    connections: Vec<(SocketAddr, Sender)>,
    /// The cookie jar: (authority, name, value).
    cookies: Vec<(String, String, String)>,
    /// The flow's captured values, by index.
    variables: Vec<Option<String>>,
}

/// An answer read whole.
struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
}

impl User {
    /// Sends one step and judges its answer: the outcome, and why a check failed.
    async fn step(
        &mut self,
        step: &Step,
        row: &[String],
        shared: &Shared,
    ) -> (Outcome, Option<String>) {
        // A rendered value that is not valid in a URI or a header is the scenario's fault, and
        // may show only with some rows: the step fails its check, saying why.
        let request = match self.request(step, row, shared.options.http2) {
            Ok(request) => request,
            Err(error) => {
                let reason = format!("the request is not valid HTTP: {error}");
                return (Outcome::FailedCheck, Some(reason));
            }
        };
        let answer = match self.exchange(step, request, shared).await {
            Ok(answer) => answer,
            Err(outcome) => return (outcome, None),
        };
        self.keep_cookies(&step.authority, &answer.headers);
        match self.judge(step, &answer) {
            Ok(()) => (Outcome::Passed, None),
            Err(reason) => (Outcome::FailedCheck, Some(reason)),
        }
    }

    /// The step's request with this user's row, captures and cookies. HTTP/2 takes the
    /// authority from the URI (`:authority`), HTTP/1.1 from the Host header.
    fn request(
        &self,
        step: &Step,
        row: &[String],
        http2: bool,
    ) -> Result<http::Request<Full<Bytes>>, http::Error> {
        let mut path = String::new();
        step.path.render_in_url(row, &self.variables, &mut path);
        let request = http::Request::builder().method(step.method.clone());
        let mut request = if http2 {
            let scheme = if step.tls { "https" } else { "http" };
            request.uri(format!("{scheme}://{}{path}", step.authority))
        } else {
            request
                .uri(path)
                .header(http::header::HOST, &step.authority)
        };
        let mut value = String::new();
        for (name, template) in &step.headers {
            value.clear();
            template.render(row, &self.variables, &mut value);
            request = request.header(name, value.as_str());
        }
        let has_cookie = step.headers.iter().any(|(n, _)| n == http::header::COOKIE);
        let jar: Vec<String> = self
            .cookies
            .iter()
            .filter(|(authority, _, _)| *authority == step.authority)
            .map(|(_, name, value)| format!("{name}={value}"))
            .collect();
        if !jar.is_empty() && !has_cookie {
            request = request.header(http::header::COOKIE, jar.join("; "));
        }
        let mut body = String::new();
        if let Some(template) = &step.body {
            template.render(row, &self.variables, &mut body);
        }
        request.body(Full::new(Bytes::from(body)))
    }

    async fn exchange(
        &mut self,
        step: &Step,
        request: http::Request<Full<Bytes>>,
        shared: &Shared,
    ) -> Result<Answer, Outcome> {
        let sender = self.connection(step, shared).await?;
        let response = sender.send(request).await.map_err(failure)?;
        let status = response.status().as_u16();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(failure)?.to_bytes();
        Ok(Answer {
            status,
            headers: parts.headers,
            body,
        })
    }

    /// The open connection to `address`, or a new one.
    async fn connection(&mut self, step: &Step, shared: &Shared) -> Result<&mut Sender, Outcome> {
        let address = step.address;
        self.connections
            .retain(|(a, sender)| *a != address || !sender.is_closed());
        let position = match self.connections.iter().position(|(a, _)| *a == address) {
            Some(position) => position,
            None => {
                let stream = tokio::net::TcpStream::connect(address)
                    .await
                    .map_err(|e| match e.kind() {
                        io::ErrorKind::ConnectionRefused => Outcome::ConnectRefused,
                        _ => Outcome::ConnectFailed,
                    })?;
                let _ = stream.set_nodelay(true);
                let stream = match (step.tls, shared.options.tls.as_ref()) {
                    (false, _) => Stream::Plain(stream),
                    (true, Some(config)) => {
                        let name = ServerName::try_from(step.server_name.clone())
                            .map_err(|_| Outcome::ConnectFailed)?;
                        let connector = tokio_rustls::TlsConnector::from(config.clone());
                        let tls = connector.connect(name, stream).await.map_err(|error| {
                            shared.tls_failures.count(&error.to_string());
                            Outcome::Tls
                        })?;
                        Stream::Tls(Box::new(tls))
                    }
                    (true, None) => return Err(Outcome::Tls),
                };
                let sender = if shared.options.http2 {
                    let (sender, connection) =
                        http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                            .await
                            .map_err(|_| Outcome::ConnectFailed)?;
                    tokio::spawn(connection);
                    Sender::Http2(sender)
                } else {
                    let (sender, connection) = http1::handshake(TokioIo::new(stream))
                        .await
                        .map_err(|_| Outcome::ConnectFailed)?;
                    tokio::spawn(connection);
                    Sender::Http1(sender)
                };
                shared.connections_opened.fetch_add(1, Ordering::Relaxed);
                self.connections.push((address, sender));
                self.connections.len() - 1
            }
        };
        let sender = &mut self.connections[position].1;
        sender.ready().await.map_err(failure)?;
        Ok(sender)
    }

    /// Stores the answer's cookies for its authority; `Max-Age=0` removes one.
    fn keep_cookies(&mut self, authority: &str, headers: &http::HeaderMap) {
        for header in headers.get_all(http::header::SET_COOKIE) {
            let Ok(text) = header.to_str() else { continue };
            let mut attributes = text.split(';');
            let Some((name, value)) = attributes.next().and_then(|p| p.split_once('=')) else {
                continue;
            };
            let (name, value) = (name.trim(), value.trim());
            let expired = attributes.any(|a| {
                a.split_once('=').is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case("max-age") && v.trim().starts_with(['0', '-'])
                })
            });
            self.cookies
                .retain(|(a, n, _)| !(a == authority && n == name));
            if !expired {
                self.cookies
                    .push((authority.to_owned(), name.to_owned(), value.to_owned()));
            }
        }
    }

    /// The step's checks, then its captures; the first that fails says why.
    fn judge(&mut self, step: &Step, answer: &Answer) -> Result<(), String> {
        let status = answer.status;
        if step.statuses.is_empty() {
            if !(200..400).contains(&status) {
                return Err(format!("status {status}"));
            }
        } else if !step.statuses.contains(&status) {
            let expected: Vec<String> = step.statuses.iter().map(u16::to_string).collect();
            return Err(format!(
                "status {status}, expected {}",
                expected.join(" or ")
            ));
        }
        let needs_json = step.body_check.is_some()
            || step
                .captures
                .iter()
                .any(|c| matches!(c.source, Capture::Jq(_)));
        let json = if needs_json {
            jq::parse(&answer.body)
        } else {
            None
        };
        let not_json = || "the answer is not JSON".to_owned();
        if let Some(check) = &step.body_check {
            let input = json.clone().ok_or_else(not_json)?;
            match check.run(input, []) {
                Ok(Value::Bool(true)) => {}
                Ok(other) => return Err(format!("the body check gave {other}")),
                Err(error) => return Err(format!("the body check failed: {error}")),
            }
        }
        for StepCapture {
            name,
            variable,
            source,
        } in &step.captures
        {
            let value = match source {
                Capture::Jq(expression) => {
                    let input = json.clone().ok_or_else(not_json)?;
                    match expression.run(input, []) {
                        Ok(Value::Null) => return Err(format!("capture {name} gave null")),
                        Ok(Value::TStr(text)) => String::from_utf8_lossy(&text).into_owned(),
                        Ok(other) => other.to_string(),
                        Err(error) => return Err(format!("capture {name} failed: {error}")),
                    }
                }
                Capture::Header(header) => answer
                    .headers
                    .get(header)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
                    .ok_or_else(|| format!("capture {name}: no {header} header"))?,
            };
            self.variables[*variable] = Some(value);
        }
        Ok(())
    }
}

/// A failed exchange by the kind the report counts it as.
fn failure(error: hyper::Error) -> Outcome {
    if error.is_parse() {
        Outcome::Protocol
    } else if error.is_timeout() {
        Outcome::Timeout
    } else {
        Outcome::Reset
    }
}

/// What the run measured, from its shared counters.
fn measured(shared: &Shared) -> StepsMeasured {
    StepsMeasured {
        steps: shared
            .steps
            .iter()
            .map(|stats| {
                let stats = stats.lock().unwrap_or_else(|p| p.into_inner());
                StepMeasured {
                    sent: stats.sent,
                    completed: stats.completed,
                    failed_checks: stats.failed_checks,
                    errors: stats.errors,
                    latency: Buckets::of(&stats.latency),
                    failures: stats.failures.clone(),
                }
            })
            .collect(),
        flows: shared
            .flows
            .iter()
            .map(|counters| FlowMeasured {
                started: counters.started.load(Ordering::Relaxed),
                completed: counters.completed.load(Ordering::Relaxed),
                failed: counters.failed.load(Ordering::Relaxed),
            })
            .collect(),
    }
}

/// What a scenario run measured per step and per flow, before it is judged: an agent of a
/// distributed run sends it to the coordinator, where the parts add up exactly (each step's
/// histogram as its buckets, as [`crate::merge`] does for the run's own).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepsMeasured {
    /// Every step of every flow, in order.
    pub steps: Vec<StepMeasured>,
    pub flows: Vec<FlowMeasured>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepMeasured {
    pub sent: u64,
    pub completed: u64,
    pub failed_checks: u64,
    pub errors: u64,
    pub latency: Buckets,
    pub failures: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowMeasured {
    pub started: u64,
    pub completed: u64,
    pub failed: u64,
}

impl StepsMeasured {
    /// Adds another run's numbers (an agent's) to these.
    pub fn add(&mut self, other: &StepsMeasured) -> Result<(), String> {
        self.steps.resize(
            self.steps.len().max(other.steps.len()),
            StepMeasured::default(),
        );
        for (step, more) in self.steps.iter_mut().zip(&other.steps) {
            step.sent += more.sent;
            step.completed += more.completed;
            step.failed_checks += more.failed_checks;
            step.errors += more.errors;
            let mut latency = histogram();
            step.latency.add_to(&mut latency)?;
            more.latency.add_to(&mut latency)?;
            step.latency = Buckets::of(&latency);
            for (reason, times) in &more.failures {
                add_reason(&mut step.failures, reason.clone(), *times);
            }
        }
        self.flows.resize(
            self.flows.len().max(other.flows.len()),
            FlowMeasured::default(),
        );
        for (flow, more) in self.flows.iter_mut().zip(&other.flows) {
            flow.started += more.started;
            flow.completed += more.completed;
            flow.failed += more.failed;
        }
        Ok(())
    }

    /// The report for `scenario`: each step's latency and thresholds, the flows, and the
    /// scenario's thresholds over every step's latency together.
    pub fn report(&self, scenario: &Scenario) -> Result<ScenarioReport, String> {
        let mut all = histogram();
        let mut steps = Vec::new();
        let mut measured = self.steps.iter();
        for flow in &scenario.flows {
            for step in &flow.steps {
                let stats = measured.next().cloned().unwrap_or_default();
                let mut latency = histogram();
                stats.latency.add_to(&mut latency)?;
                let _ = all.add(&latency);
                steps.push(StepReport {
                    flow: flow.name.clone(),
                    name: step.name.clone(),
                    sent: stats.sent,
                    completed: stats.completed,
                    failed_checks: stats.failed_checks,
                    errors: stats.errors,
                    latency_ms: Percentiles::of(&latency),
                    percentile_curve: percentile_curve(&latency),
                    thresholds: step
                        .thresholds
                        .iter()
                        .map(|t| ThresholdResult::of(t, &latency))
                        .collect(),
                    failures: stats.failures,
                });
            }
        }
        let flows = scenario
            .flows
            .iter()
            .enumerate()
            .map(|(i, flow)| {
                let counts = self.flows.get(i).cloned().unwrap_or_default();
                FlowReport {
                    name: flow.name.clone(),
                    weight: flow.weight,
                    started: counts.started,
                    completed: counts.completed,
                    failed: counts.failed,
                    unfinished: counts
                        .started
                        .saturating_sub(counts.completed + counts.failed),
                }
            })
            .collect();
        Ok(ScenarioReport {
            steps,
            flows,
            thresholds: scenario
                .thresholds
                .iter()
                .map(|t| ThresholdResult::of(t, &all))
                .collect(),
        })
    }
}

/// Counts `reason` `times`, as "other" past the first few distinct ones.
fn add_reason(failures: &mut BTreeMap<String, u64>, reason: String, times: u64) {
    let key = if failures.len() < MAX_REASONS || failures.contains_key(&reason) {
        reason
    } else {
        "other".to_owned()
    };
    *failures.entry(key).or_default() += times;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(latencies_us: &[u64], reasons: &[&str]) -> StepsMeasured {
        let mut latency = histogram();
        for &us in latencies_us {
            latency.record(us).unwrap();
        }
        StepsMeasured {
            steps: vec![StepMeasured {
                sent: latencies_us.len() as u64,
                completed: latencies_us.len() as u64 - reasons.len() as u64,
                failed_checks: reasons.len() as u64,
                errors: 0,
                latency: Buckets::of(&latency),
                failures: reasons.iter().map(|r| (r.to_string(), 1)).collect(),
            }],
            flows: vec![FlowMeasured {
                started: latencies_us.len() as u64,
                completed: latencies_us.len() as u64 - reasons.len() as u64,
                failed: reasons.len() as u64,
            }],
        }
    }

    #[test]
    fn agents_steps_add_up_to_those_of_one_run_with_every_latency() {
        let fast: Vec<u64> = (1..=900).map(|i| i * 10).collect();
        let slow: Vec<u64> = (1..=100).map(|i| 50_000 + i * 1000).collect();
        let mut merged = part(&fast, &["status 500"]);
        merged
            .add(&part(&slow, &["status 500", "status 404"]))
            .unwrap();
        let all: Vec<u64> = fast.iter().chain(&slow).copied().collect();
        let together = part(&all, &[]);
        let step = &merged.steps[0];
        assert_eq!(step.sent, 1000);
        assert_eq!(step.failed_checks, 3);
        assert_eq!(step.latency, together.steps[0].latency);
        assert_eq!(
            step.failures,
            BTreeMap::from([("status 404".to_owned(), 1), ("status 500".to_owned(), 2)])
        );
        assert_eq!(merged.flows[0].started, 1000);
        assert_eq!(merged.flows[0].failed, 3);
    }

    #[test]
    fn agent_k_of_n_deals_every_nth_arrival() {
        let deal = Deal { first: 1, every: 3 };
        let arrivals: Vec<u64> = (0..4).map(|n| deal.nth(n)).collect();
        assert_eq!(arrivals, [1, 4, 7, 10]);
        assert_eq!(Deal::ALL.nth(5), 5);
    }

    #[test]
    fn the_cookie_jar_keeps_cookies_per_authority_and_forgets_expired_ones() {
        let mut user = User {
            connections: Vec::new(),
            cookies: Vec::new(),
            variables: Vec::new(),
        };
        let mut headers = http::HeaderMap::new();
        headers.append(
            "set-cookie",
            "oturum=abc; Path=/; HttpOnly".parse().unwrap(),
        );
        headers.append("set-cookie", "dil=tr".parse().unwrap());
        user.keep_cookies("a:1", &headers);
        let mut again = http::HeaderMap::new();
        again.append("set-cookie", "oturum=def".parse().unwrap());
        again.append("set-cookie", "dil=; Max-Age=0".parse().unwrap());
        user.keep_cookies("a:1", &again);
        user.keep_cookies("b:2", &headers);
        let jar: Vec<(&str, &str, &str)> = user
            .cookies
            .iter()
            .map(|(a, n, v)| (a.as_str(), n.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            jar,
            [
                ("a:1", "oturum", "def"),
                ("b:2", "oturum", "abc"),
                ("b:2", "dil", "tr")
            ]
        );
    }
}
