//! Trace context at every route: a request's W3C `traceparent` is passed on with trafik's own
//! span as the parent (a new span id per hop), a malformed one is dropped with its
//! `tracestate`, and a request without one starts a trace when `[tracing] start` says so. The
//! trace id goes into the access log; sampled spans go to an OTLP collector when one is set.

pub mod context;
pub mod otlp;

use std::sync::Arc;
use std::time::SystemTime;

use http::{HeaderName, HeaderValue, Request, Response};

use super::body::{ProxyBody, RequestBody};
use super::filter::{Exchange, Filter, Step};
use context::Parent;
use otlp::{Exporter, FinishedSpan};

static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The trace a response belongs to, in its extensions, for the access log.
#[derive(Clone, Copy, Debug)]
pub struct TraceId(pub [u8; 16]);

impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&context::hex(&self.0))
    }
}

/// The trace-context step of every route; by default it passes on what arrives, starts
/// nothing and exports nothing.
#[derive(Clone, Default)]
pub struct TraceContext {
    /// Start a trace for a request that brings none.
    pub start: bool,
    pub exporter: Option<Arc<Exporter>>,
}

/// trafik's span of one request, in the exchange's notes.
#[derive(Clone)]
struct Hop {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    sampled: bool,
    started: SystemTime,
    /// `METHOD path`, only when the span will be exported.
    name: Option<String>,
}

impl Filter for TraceContext {
    /// Without `start`, a request with no `traceparent` passes untouched, and the own engine
    /// hands every request that has one to the full pipeline.
    fn head_only(&self) -> bool {
        !self.start
    }

    fn on_request(&self, request: &mut Request<RequestBody>, exchange: &Exchange<'_>) -> Step {
        let headers = request.headers_mut();
        let mut values = headers.get_all(&TRACEPARENT).iter();
        let incoming = match (values.next(), values.next()) {
            // No context and none to start: a plain hop, one header lookup.
            (None, _) if !self.start => return Step::Continue,
            (None, _) => None,
            // Two traceparent headers are as good as a malformed one.
            (Some(value), None) => context::parse_traceparent(value.as_bytes()),
            (Some(_), Some(_)) => None,
        };
        let state_valid =
            context::valid_tracestate(headers.get_all(&TRACESTATE).iter().map(|v| v.as_bytes()));
        if incoming.is_none() || !state_valid {
            headers.remove(&TRACESTATE);
        }
        let parent = match incoming {
            Some(parent) => parent,
            None if self.start => Parent {
                trace_id: fastrand::u128(1..).to_be_bytes(),
                span_id: [0; 8],
                flags: 1,
            },
            None => {
                headers.remove(&TRACEPARENT);
                return Step::Continue;
            }
        };
        let span_id = fastrand::u64(1..).to_be_bytes();
        let value = context::traceparent(&parent.trace_id, &span_id, parent.flags);
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(&TRACEPARENT, value);
        }
        let name = (self.exporter.is_some() && parent.sampled())
            .then(|| format!("{} {}", request.method(), request.uri().path()));
        exchange.notes.borrow_mut().insert(Hop {
            trace_id: parent.trace_id,
            span_id,
            parent: incoming.map(|p| p.span_id),
            sampled: parent.sampled(),
            started: SystemTime::now(),
            name,
        });
        Step::Continue
    }

    fn on_response(&self, response: &mut Response<ProxyBody>, exchange: &Exchange<'_>) {
        let Some(hop) = exchange.notes.borrow_mut().remove::<Hop>() else {
            return;
        };
        response.extensions_mut().insert(TraceId(hop.trace_id));
        if let (Some(exporter), Some(name), true) = (&self.exporter, hop.name, hop.sampled) {
            exporter.send(FinishedSpan {
                trace_id: hop.trace_id,
                span_id: hop.span_id,
                parent: hop.parent,
                name,
                started: hop.started,
                ended: SystemTime::now(),
                status: response.status().as_u16(),
            });
        }
    }
}

impl TraceContext {
    /// The step for `plan`, keeping `previous`'s exporter (and its thread) when the collector
    /// is the same.
    pub fn new(
        plan: &crate::plan::TracingPlan,
        previous: Option<&TraceContext>,
    ) -> Result<TraceContext, String> {
        let exporter = match &plan.otlp {
            None => None,
            Some(otlp) => match previous.and_then(|p| p.exporter.as_ref()) {
                Some(kept) if kept.plan == *otlp => Some(kept.clone()),
                _ => Some(Arc::new(Exporter::start(otlp.clone()).map_err(
                    |error| format!("the OTLP exporter cannot start: {error}"),
                )?)),
            },
        };
        Ok(TraceContext {
            start: plan.start,
            exporter,
        })
    }
}
