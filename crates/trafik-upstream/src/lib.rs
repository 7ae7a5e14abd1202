//! The course's parcel-tracking replica ("kopya"), used by trafik's demo, tests and benchmarks.
//!
//! - `GET /takip/<no>` and `GET /takip?no=<no>`: a JSON tracking body (durum, bolge, adim, rota);
//!   without a number, `"no": "-"`, as the course's replica answers;
//! - `POST /olay`: 201, the event is accepted;
//! - `POST /takip` with a JSON body `{"takipNo": …}`: the application behind lessons 13 and 16's
//!   gateway. It judges what only it can — whether the shipment exists (404 `kayit yok`),
//!   whether the caller owns it (403 `yetki yok`; the caller is `x-kullanici`, set by a gateway
//!   that verified a JWT, else the `M…` of a `Bearer b.M….imza` token) and the caller's contract
//!   quota (429 `kota doldu`) — and answers 200 otherwise. It counts the body bytes it received
//!   and its refusals in `/sayac` (`govde`, `ret`);
//! - `GET /varlik/<name>`: 200, a short fixed asset (the course's content path, which lesson 9's
//!   `statik` replica serves);
//! - `GET /yanki`: a WebSocket echo (RFC 6455): text and binary messages come back as sent,
//!   a ping gets its pong, a close is answered and ends the connection;
//! - `GET /saglik`: 200 `ayakta` (the health check);
//! - `GET /sayac`: `{"ad": NAME, "istek": N, "yol": {"/takip": N, ...}}`, the requests this
//!   replica answered, by first path segment (`/sayac` and `/saglik` are not counted).
//!
//! - `GET /olcut`: the load lesson's counters `{"istek", "kayit", "bakim", "bakimAdim", "kat"}`
//!   and `sonBakimAdim`, the steps of the latest maintenance pass.
//!
//! Every response carries `x-kopya: NAME`, so a client can see which replica answered, and
//! `x-durak`, the hop chain the request came with and this replica at its end (`tv > yd > k1`,
//! or `k1` alone), as the end of the chain does in the course's lesson 9 (`vekil/uc.mjs`).
//!
//! With [`LoadLesson`] settings (such as [`LoadLesson::course`]) the replica is the load-testing
//! lesson's server (`yuk/sunucu.mjs`): every path and method but `/olcut` is a tracking request
//! answered `{"durum": "aktarma merkezinde", "adim": N mod 7}`; each waits and burns CPU, and
//! every N-th runs a maintenance pass over all the records accumulated so far — work that grows
//! with the run, so a soak test's tail grows. `/saglik` and `/sayac` stay trafik's own and are
//! not counted, so a balancer's health checks leave the lesson's counters alone.
//! With another [`Role`] the replica plays one of the gateway lessons' Node.js services instead.
//! HTTP/1.1 and HTTP/2 (cleartext, prior knowledge) are both served.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use http::{
    HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Version, header,
};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role as SocketRole, WebSocketConfig};

/// Distinct first path segments counted by `/sayac`; the rest are counted under `other`, so a
/// client sending random paths cannot grow the map without bound.
const MAX_COUNTED_PATHS: usize = 64;

/// The hop-chain header of the course's lesson 9, echoed with this replica's name appended.
const TRACE_HEADER: HeaderName = HeaderName::from_static("x-durak");

/// The largest WebSocket message `/yanki` takes: an echo for tests and demos holds one message
/// at a time, so a peer cannot make it buffer more than this.
const MAX_ECHO_MESSAGE: usize = 1 << 20;

/// How one replica behaves.
#[derive(Clone, Debug, Default)]
pub struct ReplicaConfig {
    /// The name written in `x-kopya` and `/sayac`.
    pub name: String,
    /// A pause before every counted answer, to model a slow replica.
    pub delay: Duration,
    pub load_lesson: LoadLesson,
    pub role: Role,
}

/// Which of the course's services the replica plays. The gateway lessons' services are
/// Node.js scripts in the course's harness; these answers are theirs byte for byte, so the
/// gateway examples run from the repository alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// The parcel-tracking replica described above.
    #[default]
    Tracking,
    /// The delivery operations service (`gecit/servis.mjs` on 8471): `GET …/<no>` → the
    /// shipment's status record, 404 `{"hata":"bulunamadi"}` for an unknown number.
    TrackingStatus,
    /// The pricing service (`gecit/servis.mjs` on 8472): `GET …/<no>` → the fee record; only
    /// TR-4821 has one.
    TrackingFee,
    /// The external carrier (`elci/tasiyici.mjs` on 8481), both contracts at once:
    /// `GET /v1/durum?no=<no>` (code, zone, ts in unix seconds) and `GET /v2/status/<no>`
    /// (state, region.code, updatedAt in RFC 3339).
    Carrier,
}

/// The course services' fixed answers: status and body, as the Node.js scripts send them.
mod course_services {
    use http::StatusCode;

    const NOT_FOUND: (StatusCode, &str) = (StatusCode::NOT_FOUND, r#"{"hata":"bulunamadi"}"#);

    /// `gecit/servis.mjs`'s delivery operations table, keyed by the path's last segment.
    pub fn status(number: &str) -> (StatusCode, &'static str) {
        match number {
            "TR-4821" => (
                StatusCode::OK,
                r#"{"takipNo":"TR-4821","durum":"dagitimda","bolge":"35","guncellenme":"2026-03-11T08:24:00Z","rota":["34","41","35"]}"#,
            ),
            "TR-9007" => (
                StatusCode::OK,
                r#"{"takipNo":"TR-9007","durum":"kabul","bolge":"34","guncellenme":"2026-03-11T07:02:00Z","rota":["34"]}"#,
            ),
            _ => NOT_FOUND,
        }
    }

    /// `gecit/servis.mjs`'s pricing table.
    pub fn fee(number: &str) -> (StatusCode, &'static str) {
        match number {
            "TR-4821" => (
                StatusCode::OK,
                r#"{"takipNo":"TR-4821","tarife":9600,"indirim":1440,"net":8160,"sozlesmeNo":"S7"}"#,
            ),
            _ => NOT_FOUND,
        }
    }

    /// `elci/tasiyici.mjs`: the contract version is the path's first segment.
    pub fn carrier(path: &str, query: Option<&str>) -> (StatusCode, &'static str) {
        let mut segments = path.split('/').filter(|s| !s.is_empty());
        let version = segments.next();
        let number = if version == Some("v1") {
            query
                .unwrap_or_default()
                .split('&')
                .find_map(|pair| pair.strip_prefix("no="))
        } else {
            segments.nth(1)
        };
        match (number, version) {
            (Some("TR-4821"), Some("v1")) => (
                StatusCode::OK,
                r#"{"code":"OFD","zone":"35","ts":1773217440}"#,
            ),
            (Some("TR-4821"), _) => (
                StatusCode::OK,
                r#"{"state":"out_for_delivery","region":{"code":"35"},"updatedAt":"2026-03-11T08:24:00Z"}"#,
            ),
            _ => (StatusCode::NOT_FOUND, r#"{"error":"not_found"}"#),
        }
    }
}

/// The load-testing lesson's server behaviour; all zero (the default) turns it off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadLesson {
    /// Waited per request (the lesson's 3 ms record lookup).
    pub wait: Duration,
    /// CPU burnt per request, blocking (the lesson's 0.85 ms).
    pub work: Duration,
    /// Every this many requests, a maintenance pass (0: never).
    pub maintenance_every: u64,
    /// How many times a pass scans every accumulated record.
    pub maintenance_scan: u64,
}

impl LoadLesson {
    /// The lesson's server as the course runs it: a 3 ms wait and 0.85 ms of CPU per request,
    /// and every 100th request a pass that scans all records so far 600 times.
    pub fn course() -> LoadLesson {
        LoadLesson {
            wait: Duration::from_millis(3),
            work: Duration::from_micros(850),
            maintenance_every: 100,
            maintenance_scan: 600,
        }
    }

    /// Whether any of it is on: the replica then answers as the lesson's server does.
    pub fn is_on(&self) -> bool {
        *self != LoadLesson::default()
    }
}

/// The load lesson's counters; the records are kept only in the lesson's mode.
#[derive(Default)]
struct LessonState {
    /// Each record's step (its request number mod 7), the data a pass scans.
    records: Vec<u32>,
    passes: u64,
    steps: u64,
    /// Steps of the latest pass: it grows with the records.
    last_steps: u64,
}

/// One replica's counters, shared by its connections.
struct Replica {
    config: ReplicaConfig,
    name_header: HeaderValue,
    requests: AtomicU64,
    by_path: Mutex<BTreeMap<String, u64>>,
    /// `POST /takip`: body bytes received, requests refused, and each caller's use of its quota.
    body_bytes: AtomicU64,
    refused: AtomicU64,
    quota_used: Mutex<BTreeMap<String, u32>>,
    lesson: Mutex<LessonState>,
    /// Turns true when the replica stops; ends the WebSocket echoes, which outlive the HTTP
    /// connections they were upgraded from.
    stopped: watch::Receiver<bool>,
}

/// A running replica; dropping it does not stop it, [`RunningReplica::stop`] does.
pub struct RunningReplica {
    address: SocketAddr,
    stop: watch::Sender<bool>,
    finished: tokio::task::JoinHandle<()>,
}

impl RunningReplica {
    /// The address the replica listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops accepting, closes every open connection at once (as a crashed process would) and
    /// waits until the port is released.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.finished.await;
    }
}

/// Binds `address` and serves the replica on the current tokio runtime.
pub async fn spawn(address: SocketAddr, config: ReplicaConfig) -> std::io::Result<RunningReplica> {
    let listener = TcpListener::bind(address).await?;
    let address = listener.local_addr()?;
    let name_header = HeaderValue::from_str(&config.name).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("replica name {:?} is not a valid header value", config.name),
        )
    })?;
    let (stop, mut stopped) = watch::channel(false);
    let replica = Arc::new(Replica {
        config,
        name_header,
        requests: AtomicU64::new(0),
        by_path: Mutex::new(BTreeMap::new()),
        body_bytes: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        quota_used: Mutex::new(BTreeMap::new()),
        lesson: Mutex::new(LessonState::default()),
        stopped: stopped.clone(),
    });
    let finished = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                _ = stopped.changed() => break,
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    let _ = stream.set_nodelay(true);
                    let replica = replica.clone();
                    connections.spawn(async move {
                        let service = service_fn(move |request| {
                            let replica = replica.clone();
                            async move { Ok::<_, Infallible>(replica.answer(request).await) }
                        });
                        let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                            .serve_connection_with_upgrades(TokioIo::new(stream), service)
                            .await;
                    });
                }
                // Reap finished connections so the set does not grow over a long run.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        // Dropping the set aborts every connection: the replica is gone, like a killed process.
        drop(connections);
    });
    Ok(RunningReplica {
        address,
        stop,
        finished,
    })
}

impl Replica {
    /// Answers a request, with the hop chain it came with and this replica at its end.
    async fn answer(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let chain = self.chain(request.headers());
        let mut response = self.respond(request).await;
        response.headers_mut().insert(TRACE_HEADER, chain);
        response
    }

    /// `RECEIVED > NAME`, or `NAME` for a request that came without a chain.
    fn chain(&self, headers: &HeaderMap) -> HeaderValue {
        let mut received = headers.get_all(TRACE_HEADER).iter().peekable();
        if received.peek().is_none() {
            return self.name_header.clone();
        }
        let mut chain = BytesMut::new();
        for received in received {
            chain.put_slice(received.as_bytes());
            chain.put_slice(b" > ");
        }
        chain.put_slice(self.name_header.as_bytes());
        HeaderValue::from_maybe_shared(chain.freeze()).unwrap_or_else(|_| self.name_header.clone())
    }

    async fn respond(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = request.uri().path();
        if path == "/saglik" {
            return self.reply(StatusCode::OK, "text/plain", Bytes::from_static(b"ayakta"));
        }
        if path == "/sayac" {
            return self.reply(StatusCode::OK, "application/json", self.counters());
        }
        if path == "/olcut" {
            return self.reply(StatusCode::OK, "application/json", self.lesson_counters());
        }
        // The request's number is fixed on the way in, as in the lesson.
        let number = self.count(path);
        if !self.config.delay.is_zero() {
            tokio::time::sleep(self.config.delay).await;
        }
        if self.config.load_lesson.is_on() {
            return self.lesson_answer(request, number).await;
        }
        let last_segment = path.rsplit('/').next().unwrap_or_default();
        let course_service = match self.config.role {
            Role::Tracking => None,
            Role::TrackingStatus => Some(course_services::status(last_segment)),
            Role::TrackingFee => Some(course_services::fee(last_segment)),
            Role::Carrier => Some(course_services::carrier(path, request.uri().query())),
        };
        if let Some((status, body)) = course_service {
            return self.reply(
                status,
                "application/json",
                Bytes::from_static(body.as_bytes()),
            );
        }
        if path == "/yanki" {
            return self.echo_socket(request);
        }
        let method = request.method().clone();
        let tracking = path == "/takip" || path.starts_with("/takip/");
        match method {
            Method::GET | Method::HEAD if tracking => {
                let number = tracking_number(request.uri());
                let body = tracking_body(number.as_deref().unwrap_or("-"));
                self.reply(StatusCode::OK, "application/json", body)
            }
            Method::POST if path == "/takip" => self.shipment_query(request).await,
            Method::GET | Method::HEAD if path.starts_with("/varlik/") => self.reply(
                StatusCode::OK,
                "text/plain; charset=utf-8",
                Bytes::from_static(b"varlik\n"),
            ),
            Method::POST if path == "/olay" => {
                // Read the event frame by frame so the connection stays usable; it is not kept,
                // so a client cannot make the replica buffer an arbitrarily large body.
                let mut body = request.into_body();
                while let Some(Ok(_)) = body.frame().await {}
                self.reply(
                    StatusCode::CREATED,
                    "application/json",
                    Bytes::from_static(b"{\"kabul\":true}"),
                )
            }
            _ => {
                // A body sent to an unknown path has still reached the application.
                self.read_counted(request.into_body()).await;
                self.reply(
                    StatusCode::NOT_FOUND,
                    "text/plain",
                    Bytes::from_static(b"bulunamadi\n"),
                )
            }
        }
    }

    /// `/yanki`: accepts a WebSocket handshake and echoes on the upgraded connection; anything
    /// else gets 426 and the version it should have asked for.
    fn echo_socket(&self, mut request: Request<Incoming>) -> Response<Full<Bytes>> {
        let Some(accept) = websocket_accept(&request) else {
            let mut refusal = self.reply(
                StatusCode::UPGRADE_REQUIRED,
                "text/plain; charset=utf-8",
                Bytes::from_static(b"websocket bekleniyor\n"),
            );
            refusal.headers_mut().insert(
                header::SEC_WEBSOCKET_VERSION,
                HeaderValue::from_static("13"),
            );
            return refusal;
        };
        let upgrade = hyper::upgrade::on(&mut request);
        let mut stopped = self.stopped.clone();
        tokio::spawn(async move {
            let Ok(upgraded) = upgrade.await else {
                return;
            };
            let config = WebSocketConfig::default()
                .max_message_size(Some(MAX_ECHO_MESSAGE))
                .max_frame_size(Some(MAX_ECHO_MESSAGE));
            let socket = WebSocketStream::from_raw_socket(
                TokioIo::new(upgraded),
                SocketRole::Server,
                Some(config),
            )
            .await;
            tokio::select! {
                () = echo(socket) => {}
                _ = stopped.wait_for(|stopped| *stopped) => {}
            }
        });
        let mut response = Response::new(Full::default());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert("x-kopya", self.name_header.clone());
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
        response
    }

    /// The lesson's server answers every path alike, after its wait, work and maintenance.
    async fn lesson_answer(
        &self,
        request: Request<Incoming>,
        number: u64,
    ) -> Response<Full<Bytes>> {
        // The body is read and dropped, so the connection stays usable and nothing is buffered.
        let mut body = request.into_body();
        while let Some(Ok(_)) = body.frame().await {}
        self.load_lesson(number).await;
        let answer = serde_json::json!({"durum": "aktarma merkezinde", "adim": number % 7});
        self.reply(
            StatusCode::OK,
            "application/json",
            Bytes::from(answer.to_string()),
        )
    }

    /// `POST /takip`: the checks that read the application's records (lesson 13's ownership and
    /// contract quota, lesson 16's existence and ownership). The body is read whole and counted,
    /// but only its first 64 KiB are kept.
    async fn shipment_query(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let (parts, body) = request.into_parts();
        let kept = self.read_counted(body).await;
        let number = serde_json::from_slice::<serde_json::Value>(&kept)
            .ok()
            .and_then(|v| v.get("takipNo")?.as_str().map(str::to_owned));
        let caller = caller(&parts.headers);
        let verdict = match (number.as_deref().and_then(shipment_owner), caller) {
            (None, _) => Err((StatusCode::NOT_FOUND, "kayit yok\n")),
            (Some(owner), Some(caller)) if owner == caller => {
                let mut used = self.quota_used.lock().unwrap_or_else(|p| p.into_inner());
                let count = used.entry(caller.clone()).or_default();
                *count += 1;
                if *count > contract_quota(&caller) {
                    Err((StatusCode::TOO_MANY_REQUESTS, "kota doldu\n"))
                } else {
                    Ok(())
                }
            }
            (Some(_), _) => Err((StatusCode::FORBIDDEN, "yetki yok\n")),
        };
        match verdict {
            Ok(()) => {
                let body = tracking_body(number.as_deref().unwrap_or("-"));
                self.reply(StatusCode::OK, "application/json", body)
            }
            Err((status, reason)) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                self.reply(
                    status,
                    "text/plain; charset=utf-8",
                    Bytes::from_static(reason.as_bytes()),
                )
            }
        }
    }

    /// Reads a request body whole, counting its bytes in `govde`; keeps the first 64 KiB.
    async fn read_counted(&self, mut body: Incoming) -> BytesMut {
        let mut kept = BytesMut::new();
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(data) = frame.data_ref() {
                self.body_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                if kept.len() + data.len() <= 64 << 10 {
                    kept.extend_from_slice(data);
                }
            }
        }
        kept
    }

    /// Counts a request; returns its number (1 for the first).
    fn count(&self, path: &str) -> u64 {
        let number = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        if self.config.load_lesson.is_on() {
            let mut state = self.lesson.lock().unwrap_or_else(|p| p.into_inner());
            state.records.push((number % 7) as u32);
        }
        let segment = first_segment(path);
        let mut by_path = self.by_path.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = by_path.get_mut(segment) {
            *count += 1;
        } else if by_path.len() < MAX_COUNTED_PATHS {
            by_path.insert(segment.to_owned(), 1);
        } else {
            *by_path.entry("other".to_owned()).or_default() += 1;
        }
        number
    }

    /// The lesson's per-request wait, CPU work and periodic maintenance pass.
    async fn load_lesson(&self, number: u64) {
        let lesson = &self.config.load_lesson;
        if !lesson.wait.is_zero() {
            tokio::time::sleep(lesson.wait).await;
        }
        if !lesson.work.is_zero() {
            // Busy, as the lesson's server is: CPU time, not a sleep.
            let end = std::time::Instant::now() + lesson.work;
            while std::time::Instant::now() < end {
                std::hint::spin_loop();
            }
        }
        if lesson.maintenance_every > 0 && number.is_multiple_of(lesson.maintenance_every) {
            // The pass holds the records while it scans them, so requests arriving meanwhile
            // wait for it, as they wait for the lesson's single-threaded server.
            let mut state = self.lesson.lock().unwrap_or_else(|p| p.into_inner());
            let mut total = 0u64;
            for _ in 0..lesson.maintenance_scan {
                for &step in &state.records {
                    total = total.wrapping_add(u64::from(std::hint::black_box(step)));
                }
            }
            std::hint::black_box(total);
            state.passes += 1;
            state.last_steps = lesson.maintenance_scan * state.records.len() as u64;
            state.steps += state.last_steps;
        }
    }

    fn lesson_counters(&self) -> Bytes {
        let state = self.lesson.lock().unwrap_or_else(|p| p.into_inner());
        let body = serde_json::json!({
            "istek": self.requests.load(Ordering::Relaxed),
            "kayit": state.records.len(),
            "bakim": state.passes,
            "bakimAdim": state.steps,
            "sonBakimAdim": state.last_steps,
            "kat": self.config.load_lesson.maintenance_scan,
        });
        Bytes::from(body.to_string())
    }

    fn counters(&self) -> Bytes {
        let by_path = self.by_path.lock().unwrap_or_else(|p| p.into_inner());
        let body = serde_json::json!({
            "ad": self.config.name,
            "istek": self.requests.load(Ordering::Relaxed),
            "yol": *by_path,
            "govde": self.body_bytes.load(Ordering::Relaxed),
            "ret": self.refused.load(Ordering::Relaxed),
        });
        Bytes::from(body.to_string())
    }

    fn reply(
        &self,
        status: StatusCode,
        content_type: &'static str,
        body: Bytes,
    ) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(body));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert("x-kopya", self.name_header.clone());
        response
    }
}

/// Sends every text and binary message back as it came. tungstenite answers pings and the
/// close handshake by itself, on the next read; the stream ends after the close.
async fn echo<S>(mut socket: WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(Ok(message)) = socket.next().await {
        if (message.is_text() || message.is_binary()) && socket.send(message).await.is_err() {
            return;
        }
    }
}

/// The `Sec-WebSocket-Accept` value for a valid opening handshake (RFC 6455 §4.2.1): an
/// HTTP/1.1 GET with `Upgrade: websocket`, `Connection: upgrade`, version 13 and a key.
fn websocket_accept<B>(request: &Request<B>) -> Option<HeaderValue> {
    let headers = request.headers();
    let lists = |name: header::HeaderName, token: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .any(|item| item.trim().eq_ignore_ascii_case(token))
    };
    let valid = request.method() == Method::GET
        && request.version() == Version::HTTP_11
        && lists(header::UPGRADE, "websocket")
        && lists(header::CONNECTION, "upgrade")
        && headers
            .get(header::SEC_WEBSOCKET_VERSION)
            .is_some_and(|version| version == "13");
    let key = headers.get(header::SEC_WEBSOCKET_KEY).filter(|_| valid)?;
    HeaderValue::from_str(&derive_accept_key(key.as_bytes())).ok()
}

/// `/takip/TR-1/x` → `/takip`; `/` → `/`.
/// The lesson's shipment records: number → owner (`kapi/istek.mjs`'s `GONDERI`).
fn shipment_owner(number: &str) -> Option<&'static str> {
    match number {
        "TR-4821" => Some("M7"),
        "TR-9007" => Some("M3"),
        _ => None,
    }
}

/// Requests a caller's contract allows (lesson 13's "sozlesme kotasi", a domain record):
/// M3's contract is a trial of 2 queries.
fn contract_quota(caller: &str) -> u32 {
    if caller == "M3" { 2 } else { 1_000_000 }
}

/// Who asks: `x-kullanici` (a gateway verified the token and forwarded its subject), else the
/// `M…` part of a course token `Bearer b.M7.imza`.
fn caller(headers: &HeaderMap) -> Option<String> {
    if let Some(user) = headers.get("x-kullanici").and_then(|v| v.to_str().ok()) {
        return Some(user.to_owned());
    }
    let authorization = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let token = authorization.strip_prefix("Bearer ")?;
    let mut parts = token.split('.');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("b"), Some(user), Some("imza"), None) => Some(user.to_owned()),
        _ => None,
    }
}

fn first_segment(path: &str) -> &str {
    match path[1.min(path.len())..].find('/') {
        Some(end) => &path[..end + 1],
        None => path,
    }
}

/// The tracking number of `/takip/<no>` or `/takip?no=<no>`.
fn tracking_number(uri: &http::Uri) -> Option<String> {
    let path = uri.path();
    if let Some(number) = path.strip_prefix("/takip/") {
        return (!number.is_empty()).then(|| number.to_owned());
    }
    if path != "/takip" {
        return None;
    }
    uri.query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("no="))
        .filter(|number| !number.is_empty())
        .map(str::to_owned)
}

/// The course's tracking answer for parcel `number`.
fn tracking_body(number: &str) -> Bytes {
    let body = serde_json::json!({
        "no": number,
        "durum": "aktarma merkezinde",
        "bolge": "35",
        "adim": 4,
        "rota": ["kabul", "cikis", "aktarma-34"],
    });
    Bytes::from(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_counted_by_first_segment() {
        assert_eq!(first_segment("/takip/TR-4821"), "/takip");
        assert_eq!(first_segment("/takip"), "/takip");
        assert_eq!(first_segment("/olay"), "/olay");
        assert_eq!(first_segment("/"), "/");
        assert_eq!(first_segment(""), "");
    }

    #[test]
    fn the_opening_handshake_is_accepted_with_the_rfc_key() {
        let handshake = |version: &str| {
            Request::get("/yanki")
                .header("upgrade", "websocket")
                .header("connection", "keep-alive, Upgrade")
                .header("sec-websocket-version", version)
                .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
                .body(())
                .unwrap()
        };
        // RFC 6455 §1.3's example.
        assert_eq!(
            websocket_accept(&handshake("13")).unwrap(),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert!(websocket_accept(&handshake("8")).is_none());
        let mut post = handshake("13");
        *post.method_mut() = Method::POST;
        assert!(websocket_accept(&post).is_none());
    }

    #[test]
    fn the_carrier_answers_both_contracts() {
        let v1 = course_services::carrier("/v1/durum", Some("no=TR-4821"));
        assert_eq!(v1.1, r#"{"code":"OFD","zone":"35","ts":1773217440}"#);
        let v2 = course_services::carrier("/v2/status/TR-4821", None);
        assert!(v2.1.contains("out_for_delivery"), "{v2:?}");
        assert_eq!(
            course_services::carrier("/v2/status/TR-0000", None).0,
            StatusCode::NOT_FOUND
        );
        assert_eq!(course_services::fee("TR-9007").0, StatusCode::NOT_FOUND);
    }

    #[test]
    fn tracking_number_comes_from_the_path_or_the_query() {
        let number = |uri: &str| tracking_number(&uri.parse().unwrap());
        assert_eq!(number("/takip/TR-4821").as_deref(), Some("TR-4821"));
        assert_eq!(number("/takip?x=1&no=TR-7").as_deref(), Some("TR-7"));
        assert_eq!(number("/takip?no="), None);
        assert_eq!(number("/takip/"), None);
        assert_eq!(number("/olay"), None);
    }
}
