//! In-process helpers for the data-plane tests (`trafik-proxy`'s): a plan builder, an HTTP
//! client over real loopback sockets, replicas of the course's tracking service and backends
//! that echo, read or record what they get.

pub mod h3;
pub mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use trafik_balance::Algorithm;
use trafik_proxy::{
    BackendPlan, ClientPlan, HealthCheck, HealthPlan, ListenerKind, ListenerPlan, Plan, PoolPlan,
    RoutePlan, Running, TargetPlan,
};
use trafik_upstream::{ReplicaConfig, RunningReplica};

pub const LOOPBACK_ANY_PORT: &str = "127.0.0.1:0";

/// Starts replicas named k1, k2, … each on a free port of a loopback address of its own
/// (127.0.1.x, 127.0.2.x, …), for a test that stops one and starts it again on the same
/// address: meanwhile, every other test's servers bind 127.0.0.1, so the port is still free
/// when it comes back (on 127.0.0.1 another test's proxy once took it, and each test then
/// reached the other's server).
pub async fn replicas_apart(count: usize) -> Vec<RunningReplica> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let mut started = Vec::new();
    for i in 1..=count {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let own = [127, 0, 1 + (n / 254 % 254) as u8, 1 + (n % 254) as u8];
        let address = SocketAddr::from((own, 0));
        started.push(replica(&format!("k{i}"), address, Duration::ZERO).await);
    }
    started
}

/// Starts replicas named k1, k2, … on free loopback ports.
pub async fn replicas(count: usize) -> Vec<RunningReplica> {
    let mut started = Vec::new();
    for i in 1..=count {
        started.push(
            replica(
                &format!("k{i}"),
                LOOPBACK_ANY_PORT.parse().unwrap(),
                Duration::ZERO,
            )
            .await,
        );
    }
    started
}

pub async fn replica(name: &str, address: SocketAddr, delay: Duration) -> RunningReplica {
    trafik_upstream::spawn(
        address,
        ReplicaConfig {
            name: name.into(),
            delay,
            ..ReplicaConfig::default()
        },
    )
    .await
    .expect("replica binds")
}

/// A backend that is down: an address on 127.0.0.1 whose socket is bound but never listens,
/// so every connect gets a reset, and whose port stays reserved while this lives (a port bound
/// and closed again may be taken by another test's server meanwhile).
pub struct RefusingPort {
    pub address: SocketAddr,
    _reserved: socket2::Socket,
}

/// A [`RefusingPort`] on a free port.
pub fn refusing_port() -> RefusingPort {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .expect("a TCP socket");
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("a free port on 127.0.0.1");
    let address = socket
        .local_addr()
        .ok()
        .and_then(|address| address.as_socket())
        .expect("a bound address");
    RefusingPort {
        address,
        _reserved: socket,
    }
}

/// A backend on a free loopback port that serves every connection with hyper's HTTP/1 server
/// and `service`, until the test's runtime ends.
pub async fn hyper_backend<F, Fut, E>(service: F) -> SocketAddr
where
    F: Fn(Request<hyper::body::Incoming>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Response<Full<Bytes>>, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    raw_backend(move |stream| {
        let service = service.clone();
        async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), hyper::service::service_fn(service))
                .await;
        }
    })
    .await
}

/// A backend on a free loopback port that hands every connection it accepts to `serve`, each
/// on a task of its own, until the test's runtime ends.
pub async fn raw_backend<F, Fut>(serve: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind(LOOPBACK_ANY_PORT)
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream));
        }
    });
    address
}

/// Reads from `stream` until a whole head (its blank line) has come, for a raw backend that
/// answers when a request's head is in; false when the peer closed or failed first. What came
/// after the head in the same reads is dropped.
pub async fn read_head(stream: &mut TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buffer = [0u8; 4096];
    let mut seen = Vec::new();
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buffer[..n]),
        }
    }
    true
}

/// A raw backend answering every request head it reads with the bytes of `answer`, on
/// kept-alive connections.
pub async fn answering(answer: impl Into<Bytes>) -> SocketAddr {
    answering_recorded(answer).await.0
}

/// [`answering`], keeping every byte it received, across connections, in arrival order.
pub async fn answering_recorded(
    answer: impl Into<Bytes>,
) -> (SocketAddr, Arc<std::sync::Mutex<Vec<u8>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let answer: Bytes = answer.into();
    let received = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recording = received.clone();
    let address = raw_backend(move |mut stream| {
        let (answer, recording) = (answer.clone(), recording.clone());
        async move {
            let mut buffer = [0u8; 4096];
            let mut seen = Vec::new();
            loop {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        recording.lock().unwrap().extend_from_slice(&buffer[..n]);
                        seen.extend_from_slice(&buffer[..n]);
                    }
                }
                while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                    seen.drain(..end + 4);
                    if stream.write_all(&answer).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await;
    (address, received)
}

/// A raw backend answering each connection's first request with the bytes of `answer`, then
/// closing it: a close-delimited answer, or one whose body the close cuts short.
pub async fn answering_then_closing(answer: impl Into<Bytes>) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let answer: Bytes = answer.into();
    raw_backend(move |mut stream| {
        let answer = answer.clone();
        async move {
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head).await;
            let _ = stream.write_all(&answer).await;
        }
    })
    .await
}

/// Connections the web listener's own engine handed to hyper, from `/status`: 0 when it
/// served every request itself.
pub async fn handed_to_hyper(running: &Running) -> u64 {
    let status = status(running).await;
    let listeners = status["listeners"].as_array().expect("listeners");
    let web = listeners.iter().find(|l| l["name"] == "web").expect("web");
    web["handed_to_hyper"].as_u64().expect("a count")
}

/// A one-listener, one-pool plan in front of `backends`, with admin on a free port.
pub fn plan(backends: &[SocketAddr]) -> Plan {
    Plan {
        name: "trafik-test".into(),
        trace_header: None,
        workers: 2,
        listeners: vec![ListenerPlan {
            connections: Default::default(),
            name: "web".into(),
            address: LOOPBACK_ANY_PORT.parse().unwrap(),
            kind: ListenerKind::Http {
                routes: vec![route("/", "takip")],
            },
        }],
        pools: vec![pool("takip", backends)],
        admin: Some(LOOPBACK_ANY_PORT.parse().unwrap()),
        client: ClientPlan {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            trust_forwarded: false,
            access_log: false,
            // Tests pace their bodies by hand on a machine that may be busy: no minimum rate
            // unless a test sets one.
            limits: trafik_proxy::HeadLimits {
                min_body_rate: 0,
                ..Default::default()
            },
            upstream_limits: trafik_proxy::AnswerLimits::default(),
            engine: trafik_proxy::Engine::default(),
        },
        drain_timeout: Duration::from_secs(5),
        dns: None,
        admin_token: None,
        tracing: Default::default(),
        resolver: Default::default(),
    }
}

/// [`plan`] served by `engine`'s HTTP/1.1 server, for tables run on both engines.
pub fn plan_on(engine: trafik_proxy::Engine, backends: &[SocketAddr]) -> Plan {
    let mut plan = plan(backends);
    plan.client.engine = engine;
    plan
}

pub fn route(prefix: &str, pool: &str) -> RoutePlan {
    RoutePlan {
        host: None,
        path_prefix: prefix.into(),
        methods: Vec::new(),
        filters: Vec::new(),
        target: TargetPlan::Pool {
            pool: pool.into(),
            retry_non_idempotent: false,
        },
        path_template: None,
        routing: Default::default(),
    }
}

/// The routes of the plan's first listener, an HTTP one.
pub fn routes(plan: &mut Plan) -> &mut Vec<RoutePlan> {
    match &mut plan.listeners[0].kind {
        ListenerKind::Http { routes } | ListenerKind::Https { routes, .. } => routes,
        other => panic!("the first listener is {}, not http", other.name()),
    }
}

pub fn pool(name: &str, backends: &[SocketAddr]) -> PoolPlan {
    PoolPlan {
        name: name.into(),
        algorithm: Algorithm::RoundRobin,
        selector_options: trafik_balance::SelectorOptions::default(),
        hash_key: None,
        sticky: None,
        backends: backends
            .iter()
            .enumerate()
            .map(|(i, &address)| BackendPlan {
                address,
                name: Some(format!("k{}", i + 1)),
                weight: 1,
            })
            .collect(),
        discover: Vec::new(),
        health: None,
        connect_timeout: Duration::from_secs(1),
        response_timeout: Duration::from_secs(5),
        retries: 1,
        tls: None,
        protocol: trafik_proxy::plan::UpstreamProtocol::Http1,
        proxy_protocol: None,
        outlier: None,
        retry: trafik_proxy::RetryPlan::default(),
        max_requests_per_backend: 0,
        max_pending: 0,
        queue_timeout: Duration::from_secs(1),
        slow_start: Duration::ZERO,
        adaptive_concurrency: None,
    }
}

/// The course's health check: `GET /saglik` every 200 ms, one failure marks down.
pub fn course_health_check() -> HealthPlan {
    HealthPlan {
        check: HealthCheck::Http {
            path: "/saglik".into(),
        },
        interval: Duration::from_millis(200),
        timeout: Duration::from_millis(150),
        fall: 1,
        rise: 1,
    }
}

/// A response read to the end.
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// One HTTP/1.1 connection to `address`, kept alive across requests.
pub struct Client {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Client {
    pub async fn connect(address: SocketAddr) -> Client {
        let stream = TcpStream::connect(address).await.expect("connects");
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(connection);
        Client { sender }
    }

    pub async fn send(&mut self, request: Request<Full<Bytes>>) -> Answer {
        self.sender.ready().await.expect("connection ready");
        let response = self.sender.send_request(request).await.expect("a response");
        read(response).await
    }

    pub async fn get(&mut self, path: &str) -> Answer {
        self.send(
            Request::get(path)
                .header("host", "kargo.test")
                .body(Full::default())
                .unwrap(),
        )
        .await
    }
}

async fn read(response: Response<hyper::body::Incoming>) -> Answer {
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("whole body").to_bytes();
    Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    }
}

/// `GET path` on a fresh connection, as the course's client does for each request.
pub async fn get(address: SocketAddr, path: &str) -> Answer {
    Client::connect(address).await.get(path).await
}

/// The proxy's first listener.
pub fn web(running: &Running) -> SocketAddr {
    running.listener_addresses()[0]
}

/// `GET path` from the admin API, which answers only to its address (or localhost) in `Host`.
pub async fn admin_get(running: &Running, path: &str) -> Answer {
    let admin = running.admin_address().expect("admin");
    let request = Request::get(path)
        .header("host", admin.to_string())
        .body(Full::default())
        .unwrap();
    Client::connect(admin).await.send(request).await
}

/// `/status` from the admin API.
pub async fn status(running: &Running) -> serde_json::Value {
    admin_get(running, "/status").await.json()
}

/// Polls `/status` until `accept` holds, for at most five seconds.
pub async fn wait_for_status(running: &Running, accept: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status = status(running).await;
        if accept(&status) {
            return;
        }
        assert!(Instant::now() < deadline, "status never matched: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Counts of `x-kopya` over `requests` sequential GETs, plus the non-200 statuses.
pub async fn tally(
    address: SocketAddr,
    requests: usize,
) -> (std::collections::BTreeMap<String, usize>, Vec<u16>) {
    let mut by_replica = std::collections::BTreeMap::new();
    let mut failures = Vec::new();
    for n in 0..requests {
        let answer = get(address, &format!("/takip/TR-{n}")).await;
        if answer.status == 200 {
            *by_replica
                .entry(answer.header("x-kopya").unwrap_or("?").to_owned())
                .or_insert(0) += 1;
        } else {
            failures.push(answer.status);
        }
    }
    (by_replica, failures)
}

/// Writes `bytes` on a new connection and reads until the proxy closes it (at most 10 s): for
/// requests no well-behaved client library would send.
pub async fn raw_exchange(address: SocketAddr, bytes: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// What [`counting_server`] has seen.
#[derive(Default)]
pub struct ConnectionCounts {
    pub accepted: AtomicUsize,
    pub open: AtomicIsize,
}

/// An upstream that answers every request 200 `ok` and counts the connections it accepted and
/// those still open.
pub async fn counting_server() -> (SocketAddr, Arc<ConnectionCounts>) {
    let counts = Arc::new(ConnectionCounts::default());
    let counting = counts.clone();
    let address = raw_backend(move |stream| {
        counting.accepted.fetch_add(1, Ordering::SeqCst);
        counting.open.fetch_add(1, Ordering::SeqCst);
        let counting = counting.clone();
        async move {
            let service = hyper::service::service_fn(|_request| async {
                Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(
                    b"ok",
                ))))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
            counting.open.fetch_sub(1, Ordering::SeqCst);
        }
    })
    .await;
    (address, counts)
}

/// Stops the proxy and waits for it on a blocking thread.
pub async fn stop(running: Running) {
    running.stop();
    tokio::task::spawn_blocking(move || running.wait())
        .await
        .unwrap();
}

/// What [`echo_server`] answers: the request's method, target and headers as JSON.
pub fn echo_json<B>(request: &Request<B>) -> serde_json::Value {
    let headers: serde_json::Map<String, serde_json::Value> = request
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").into()))
        .collect();
    serde_json::json!({
        "method": request.method().as_str(),
        "uri": request.uri().to_string(),
        "headers": headers,
    })
}

/// A real upstream that answers every request with its request line and headers as JSON,
/// and adds hop-by-hop headers of its own that the proxy must not pass on. `delay` holds the
/// answer back (for timeouts and draining).
pub async fn echo_server(delay: Duration) -> SocketAddr {
    hyper_backend(move |request: Request<hyper::body::Incoming>| async move {
        tokio::time::sleep(delay).await;
        let body = echo_json(&request);
        Ok::<_, http::Error>(
            Response::builder()
                .header("connection", "x-upstream-secret")
                .header("x-upstream-secret", "1")
                .header("keep-alive", "timeout=5")
                .body(Full::new(Bytes::from(body.to_string())))
                .expect("a valid answer"),
        )
    })
    .await
}

/// An upstream that reads the whole request body, then answers 200 with its length.
pub async fn body_reading_server() -> std::net::SocketAddr {
    hyper_backend(|request: Request<hyper::body::Incoming>| async move {
        let uri = request.uri().to_string();
        let length = request.into_body().collect().await?.to_bytes().len();
        Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from(format!(
            "{uri} {length}"
        )))))
    })
    .await
}
