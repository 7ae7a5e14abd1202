//! OTLP/HTTP export of trafik's spans, JSON-encoded: workers hand finished spans to a bounded
//! channel (a full channel drops the span and counts it, never blocking a worker); one
//! exporter thread batches them and POSTs each batch to the collector.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{Request, Uri, header};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use super::context::hex;

/// Spans waiting for the exporter; past this, new ones are dropped.
const QUEUE: usize = 8192;
/// The most spans in one POST, and the longest a span waits for its batch to fill.
const BATCH: usize = 512;
const LINGER: Duration = Duration::from_millis(200);
const POST_TIMEOUT: Duration = Duration::from_secs(5);

pub use crate::plan::OtlpPlan;

/// One request's span as trafik saw it.
pub struct FinishedSpan {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub started: SystemTime,
    pub ended: SystemTime,
    pub status: u16,
}

/// The workers' end of the export; the thread ends when the last snapshot holding it is gone.
pub struct Exporter {
    pub plan: OtlpPlan,
    spans: SyncSender<FinishedSpan>,
    /// Spans dropped because the queue was full.
    pub dropped: AtomicU64,
}

impl Exporter {
    pub fn start(plan: OtlpPlan) -> std::io::Result<Exporter> {
        let (spans, waiting) = std::sync::mpsc::sync_channel(QUEUE);
        let thread_plan = plan.clone();
        std::thread::Builder::new()
            .name("trafik-otlp".into())
            .spawn(move || export(thread_plan, waiting))?;
        Ok(Exporter {
            plan,
            spans,
            dropped: AtomicU64::new(0),
        })
    }

    /// Queues a span without waiting.
    pub fn send(&self, span: FinishedSpan) {
        if let Err(TrySendError::Full(_)) = self.spans.try_send(span) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The exporter thread: a batch at a time, until every sender is gone.
fn export(plan: OtlpPlan, waiting: Receiver<FinishedSpan>) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        tracing::warn!("OTLP export cannot start a runtime; spans are dropped");
        return;
    };
    while let Ok(first) = waiting.recv() {
        let mut batch = vec![first];
        let deadline = Instant::now() + LINGER;
        let mut open = true;
        while batch.len() < BATCH {
            match waiting.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(span) => batch.push(span),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        let body = encode(&plan.service_name, &batch).to_string();
        let posted = runtime.block_on(async {
            tokio::time::timeout(POST_TIMEOUT, post(&plan.endpoint, body)).await
        });
        match posted {
            Ok(Ok(status)) if status.is_success() => {}
            Ok(Ok(status)) => {
                tracing::warn!(%status, spans = batch.len(), "OTLP collector refused spans")
            }
            Ok(Err(error)) => tracing::warn!(%error, spans = batch.len(), "OTLP export failed"),
            Err(_) => tracing::warn!(spans = batch.len(), "OTLP export timed out"),
        }
        if !open {
            return;
        }
    }
}

async fn post(
    endpoint: &Uri,
    body: String,
) -> Result<http::StatusCode, Box<dyn std::error::Error>> {
    let authority = endpoint.authority().ok_or("no host in the endpoint")?;
    let port = authority.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((authority.host(), port)).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    let path = endpoint
        .path_and_query()
        .map_or("/v1/traces", |p| p.as_str());
    let request = Request::post(path)
        .header(header::HOST, authority.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))?;
    Ok(sender.send_request(request).await?.status())
}

/// The OTLP/JSON `ExportTraceServiceRequest` for `spans`: ids in lower-case hex, times as
/// decimal strings of nanoseconds, kind SERVER, status ERROR for a 5xx answer.
pub fn encode(service: &str, spans: &[FinishedSpan]) -> Value {
    let nanos = |at: SystemTime| {
        at.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            .to_string()
    };
    let spans: Vec<Value> = spans
        .iter()
        .map(|span| {
            json!({
                "traceId": hex(&span.trace_id),
                "spanId": hex(&span.span_id),
                "parentSpanId": span.parent.as_ref().map(|p| hex(p)).unwrap_or_default(),
                "name": span.name,
                "kind": 2,
                "startTimeUnixNano": nanos(span.started),
                "endTimeUnixNano": nanos(span.ended),
                "attributes": [
                    {"key": "http.response.status_code", "value": {"intValue": span.status.to_string()}},
                ],
                "status": {"code": if span.status >= 500 { 2 } else { 0 }},
            })
        })
        .collect();
    json!({
        "resourceSpans": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": service}},
            ]},
            "scopeSpans": [{
                "scope": {"name": "trafik", "version": env!("CARGO_PKG_VERSION")},
                "spans": spans,
            }],
        }],
    })
}
