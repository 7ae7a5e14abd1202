//! Active health checks: one probe loop per backend of the configuration in force, feeding the rise/fall state machine of
//! `trafik-balance` and publishing its verdict into the pool's backend set.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use trafik_balance::{Health, HealthThresholds, Transition};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::plan::{HealthCheck, HealthPlan, UpstreamProtocol};
use crate::snapshot::Snapshot;
use crate::tls::backend::BackendTls;

/// Runs one probe loop per health-checked backend of the configuration in force. A loop is
/// keyed by pool name and backend address and outlives reloads that keep its check unchanged,
/// so its rise/fall streak and its schedule go on; a reload starts loops for new backends (from
/// the verdict their backend carried over) and stops those of backends that left.
pub async fn supervise(
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
    mut shutdown: watch::Receiver<bool>,
) {
    type Check = (HealthPlan, Option<BackendTls>, UpstreamProtocol);
    let mut loops: HashMap<(String, SocketAddr), (Check, watch::Sender<bool>)> = HashMap::new();
    loop {
        let snapshot = snapshots.borrow_and_update().clone();
        let mut wanted = HashSet::new();
        for pool in &snapshot.pools {
            let Some(plan) = &pool.plan.health else {
                continue;
            };
            let check = (plan.clone(), pool.plan.tls.clone(), pool.plan.protocol);
            for index in 0..pool.backends.len() {
                let key = (pool.plan.name.clone(), pool.address(index));
                wanted.insert(key.clone());
                if loops
                    .get(&key)
                    .is_some_and(|(running, _)| *running == check)
                {
                    continue;
                }
                let (retire, retired) = watch::channel(false);
                let up = pool.backends.is_up(index);
                tokio::spawn(probe_loop(
                    key.clone(),
                    check.clone(),
                    up,
                    snapshots.clone(),
                    retired,
                ));
                if let Some((_, replaced)) = loops.insert(key, (check.clone(), retire)) {
                    let _ = replaced.send(true);
                }
            }
        }
        loops.retain(|key, (_, retire)| {
            let keep = wanted.contains(key);
            if !keep {
                let _ = retire.send(true);
            }
            keep
        });
        tokio::select! {
            _ = shutdown.wait_for(|stopping| *stopping) => break,
            changed = snapshots.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
    }
    for (_, retire) in loops.values() {
        let _ = retire.send(true);
    }
}

/// Probes one backend; each verdict goes to the backend in the pool of that name in the
/// snapshot in force at that moment.
async fn probe_loop(
    (pool_name, address): (String, SocketAddr),
    (plan, tls, protocol): (HealthPlan, Option<BackendTls>, UpstreamProtocol),
    up: bool,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    retired: watch::Receiver<bool>,
) {
    watch_target(
        address,
        &plan,
        (tls.as_ref(), protocol),
        up,
        retired,
        |up, why| {
            let snapshot = snapshots.borrow().clone();
            if let Some(pool) = snapshot.pool(&pool_name)
                && let Some(index) = pool.index_of(address)
            {
                pool.backends.set_up(index, up);
                if up {
                    pool.slow_start.start(index);
                }
                pool.changed(index, why);
            }
            if up {
                tracing::info!(pool = %pool_name, backend = %address, "backend marked up");
            } else {
                tracing::warn!(pool = %pool_name, backend = %address, reason = why, "backend marked down");
            }
        },
    )
    .await;
}

/// Probes `address` every `plan.interval` through the rise/fall state machine, starting from
/// `up`, and calls `publish` with each change of verdict and why, until `retired`. The proxy's
/// pools and the DNS regions both watch their targets through here.
pub async fn watch_target(
    address: SocketAddr,
    plan: &HealthPlan,
    (tls, protocol): (Option<&BackendTls>, UpstreamProtocol),
    up: bool,
    mut retired: watch::Receiver<bool>,
    mut publish: impl FnMut(bool, &str),
) {
    let thresholds = HealthThresholds {
        fall: plan.fall,
        rise: plan.rise,
    };
    let mut health = Health::starting(thresholds, up);
    let mut ticker = tokio::time::interval(plan.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = retired.wait_for(|retired| *retired) => return,
        }
        let probing = probe(address, &plan.check, tls, protocol);
        let deadline = tokio::time::Instant::now() + plan.timeout;
        let verdict = match tokio::time::timeout_at(deadline, probing).await {
            Ok(verdict) => verdict,
            // The timer fired well after its deadline: this thread was not running (a starved
            // machine), so the probe's time went to trafik, not to the backend.
            Err(_) if deadline.elapsed() > plan.timeout / 2 => {
                tracing::debug!(backend = %address, "probe timed out while the prober was stalled; verdict kept");
                continue;
            }
            Err(_) => Some(Err(Failed::Timeout)),
        };
        let Some(verdict) = verdict else {
            tracing::warn!(backend = %address, "no file descriptor left to probe with; verdict kept");
            continue;
        };
        match health.record(verdict.is_ok()) {
            Transition::Unchanged => {}
            Transition::WentDown => {
                let last = verdict.err().map_or(String::new(), |failed| failed.words());
                let why = match plan.fall {
                    1 => format!("health check failed: {last}"),
                    fall => format!("{fall} health checks failed, the last: {last}"),
                };
                publish(false, &why);
            }
            Transition::WentUp => publish(true, "health check passed"),
        }
    }
}

/// Why a probe failed, in a few words for the backend's timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Failed {
    Refused,
    Connect,
    /// rustls' reason, and what in the pool's settings usually answers it.
    Tls(String),
    Timeout,
    /// No status came, or one outside 2xx and 3xx (or a gRPC one not SERVING).
    Answer,
}

impl Failed {
    fn words(&self) -> String {
        match self {
            Failed::Refused => "connection refused".into(),
            Failed::Connect => "connect failed".into(),
            Failed::Tls(why) => format!("TLS handshake failed: {why}"),
            Failed::Timeout => "no answer within the timeout".into(),
            Failed::Answer => "no passing answer".into(),
        }
    }

    /// A failed handshake with its cause, and the pool setting that usually answers it: an
    /// operator reads "unknown issuer" and knows to look at `ca`.
    fn tls(error: &std::io::Error) -> Failed {
        use rustls::{AlertDescription, CertificateError, Error};
        let cause = error.get_ref().and_then(|e| e.downcast_ref::<Error>());
        let hint = match cause {
            Some(Error::InvalidCertificate(CertificateError::UnknownIssuer)) => {
                " (the pool's `ca` did not sign the backend's certificate)"
            }
            Some(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => {
                " (the pool's `sni`, or the backend's address, is not a name the certificate holds)"
            }
            Some(Error::AlertReceived(AlertDescription::CertificateRequired)) => {
                " (the backend asks for a client certificate: the pool's `client_cert` and `client_key`)"
            }
            _ => "",
        };
        Failed::Tls(format!("{error}{hint}"))
    }
}

/// One probe; `Ok` when the backend passed, `None` when trafik itself had no file descriptor
/// to probe with, which says nothing of the backend. A TLS pool's probes speak TLS too, with
/// the pool's settings, so a backend whose certificate the pool would refuse is down: the check
/// sees what requests would meet; and they speak the HTTP version the pool's requests do.
async fn probe(
    address: SocketAddr,
    check: &HealthCheck,
    tls: Option<&BackendTls>,
    protocol: UpstreamProtocol,
) -> Option<Result<(), Failed>> {
    let stream = match TcpStream::connect(address).await {
        Ok(stream) => stream,
        Err(error) if crate::descriptors::ran_out(&error) => return None,
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Some(Err(Failed::Refused));
        }
        Err(_) => return Some(Err(Failed::Connect)),
    };
    let passed = match tls {
        None => ask(stream, address, check, protocol == UpstreamProtocol::H2c).await,
        Some(tls) => match tls.connect(address, stream).await {
            Ok(stream) => {
                let http2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                ask(stream, address, check, http2).await
            }
            Err(error) => return Some(Err(Failed::tls(&error))),
        },
    };
    Some(if passed { Ok(()) } else { Err(Failed::Answer) })
}

/// The check itself, on a connected stream: a `tcp` check has passed by now.
async fn ask<S>(mut stream: S, address: SocketAddr, check: &HealthCheck, http2: bool) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let path = match check {
        HealthCheck::Tcp => return true,
        HealthCheck::Http { path } if http2 => {
            let request = Request::get(format!("http://{address}{path}"))
                .header(header::USER_AGENT, "trafik-health")
                .body(Full::default());
            // The status decides, as HTTP/1.1's first line does: the body is never read.
            return match request {
                Ok(request) => ask_http2(stream, request).await.is_some_and(|answer| {
                    answer.status().is_success() || answer.status().is_redirection()
                }),
                Err(_) => false,
            };
        }
        HealthCheck::Grpc { service } if http2 => {
            return ask_grpc(stream, address, service).await;
        }
        // gRPC needs HTTP/2 (refused by the configuration unless ALPN might agree on it).
        HealthCheck::Grpc { .. } => return false,
        HealthCheck::Http { path } => path,
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nUser-Agent: trafik-health\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    // "HTTP/1.1 200" is 12 bytes; read until the status code is in.
    let mut head = [0u8; 12];
    let mut filled = 0;
    while filled < head.len() {
        match stream.read(&mut head[filled..]).await {
            Ok(0) | Err(_) => return false,
            Ok(read) => filled += read,
        }
    }
    passes(&head)
}

/// The most of a gRPC health answer a probe reads: its message is a few bytes, and a backend
/// that sends more is not answering the health service.
const GRPC_HEALTH_ANSWER_LIMIT: usize = 16 * 1024;

/// One request over a new HTTP/2 connection: the answer's head, its body not yet read.
async fn ask_http2<S>(stream: S, request: Request<Full<Bytes>>) -> Option<Response<Incoming>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .ok()?;
    tokio::spawn(connection);
    sender.send_request(request).await.ok()
}

/// `grpc.health.v1.Health/Check` for `service` ("" for the server as a whole): passes when
/// the call succeeds (`grpc-status: 0`) and says SERVING.
async fn ask_grpc<S>(stream: S, address: SocketAddr, service: &str) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let request = Request::post(format!("http://{address}/grpc.health.v1.Health/Check"))
        .header(header::CONTENT_TYPE, "application/grpc")
        .header(header::TE, "trailers")
        .header(header::USER_AGENT, "trafik-health")
        .body(Full::new(grpc_health::request(service)));
    let Ok(request) = request else {
        return false;
    };
    let Some(answer) = ask_http2(stream, request).await else {
        return false;
    };
    let status = answer.status();
    let Ok(answer) = Limited::new(answer.into_body(), GRPC_HEALTH_ANSWER_LIMIT)
        .collect()
        .await
    else {
        return false;
    };
    // A trailers-only answer carries its status in the head; hyper gives those as trailers.
    let code = answer
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .cloned();
    status == StatusCode::OK
        && code.is_some_and(|code| code == "0")
        && grpc_health::serving(&answer.to_bytes())
}

/// The two messages of grpc.health.v1, by hand: a request is one string field, an answer one
/// enum field; a protobuf library would be more than both.
mod grpc_health {
    use bytes::{BufMut, Bytes, BytesMut};

    /// A length-prefixed HealthCheckRequest { service = 1 }.
    pub fn request(service: &str) -> Bytes {
        let mut message = BytesMut::new();
        if !service.is_empty() {
            message.put_u8(0x0a);
            let mut length = service.len();
            while length >= 0x80 {
                message.put_u8((length as u8 & 0x7f) | 0x80);
                length >>= 7;
            }
            message.put_u8(length as u8);
            message.put_slice(service.as_bytes());
        }
        let mut framed = BytesMut::with_capacity(5 + message.len());
        framed.put_u8(0);
        framed.put_u32(message.len() as u32);
        framed.put_slice(&message);
        framed.freeze()
    }

    /// Whether a length-prefixed HealthCheckResponse says SERVING (status = 1, field 1).
    pub fn serving(framed: &[u8]) -> bool {
        let Some(message) = framed.get(5..) else {
            return false;
        };
        framed[0] == 0
            && message.windows(2).any(|field| field == [0x08, 0x01])
            && message.len() == 2
    }
}

/// Whether a status line starts with a 2xx or 3xx status.
fn passes(status_line: &[u8; 12]) -> bool {
    status_line.starts_with(b"HTTP/1.") && matches!(status_line[9], b'2' | b'3')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_and_three_hundreds_pass() {
        assert!(passes(b"HTTP/1.1 200"));
        assert!(passes(b"HTTP/1.0 302"));
        assert!(!passes(b"HTTP/1.1 503"));
        assert!(!passes(b"HTTP/1.1 404"));
        assert!(!passes(b"SSH-2.0-Open"));
    }

    #[test]
    fn grpc_health_messages_by_hand() {
        assert_eq!(&grpc_health::request("")[..], [0, 0, 0, 0, 0]);
        assert_eq!(
            &grpc_health::request("takip")[..],
            [0, 0, 0, 0, 7, 0x0a, 5, b't', b'a', b'k', b'i', b'p']
        );
        assert!(grpc_health::serving(&[0, 0, 0, 0, 2, 0x08, 0x01]));
        assert!(!grpc_health::serving(&[0, 0, 0, 0, 2, 0x08, 0x02]));
        assert!(!grpc_health::serving(&[0, 0, 0, 0, 0]));
    }
}
