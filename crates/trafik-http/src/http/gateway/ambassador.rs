//! `target = "ambassador"`: a local service calls trafik with its own contract; trafik calls
//! the external service in its contract (path template) and maps the answer back by jq, the
//! status too, so the service sees one contract whatever the external version.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use trafik_gateway::jq::{self, Expression, Value};
use trafik_gateway::template::{Captures, UpstreamTemplate};

use super::aggregate::json_response;
use super::counters::GatewayCounters;
use super::fetch::{Caller, Fetched};
use crate::counters::{add, bump};
use crate::error::ProxyError;
use crate::http::body::ErrorAnswer;
use crate::http::body::{ProxyBody, RequestBody};
use crate::http::service::{ClientConnection, WorkerProxy};
use crate::http::target::PoolTarget;
use crate::snapshot::WorkerSnapshot;

/// The places of an ambassador's counted filters.
pub const ANSWER: usize = 0;
pub const STATUS: usize = 1;

pub struct AmbassadorTarget {
    pub pool: PoolTarget,
    pub path: UpstreamTemplate,
    pub timeout: Duration,
    pub answer: Arc<Expression>,
    pub status: Option<Arc<Expression>>,
    /// The route's counters; its one part is the external call.
    pub counters: Arc<GatewayCounters>,
}

impl AmbassadorTarget {
    pub async fn serve(
        &self,
        worker: &WorkerProxy,
        snapshot: &Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        request: Request<RequestBody>,
    ) -> (Response<ProxyBody>, Option<SocketAddr>) {
        let me = worker.id;
        let (totals, external) = (self.counters.route(me), self.counters.part(0, me));
        bump(&totals.calls);
        bump(&external.calls);
        let captures = request
            .extensions()
            .get::<Captures>()
            .cloned()
            .unwrap_or_default();
        let caller = Caller::new(worker, snapshot, connection, request.headers());
        let started = Instant::now();
        let fetched = caller
            .fetch(&self.pool, &self.path.render(&captures), self.timeout)
            .await;
        external.time(started.elapsed());
        let (status, body) = match fetched {
            Fetched::Answered { status, body, .. } => (status, body),
            Fetched::Failed(error) => {
                bump(&external.failures);
                bump(&totals.failures);
                return (error.response(), None);
            }
        };
        add(&external.bytes, body.len());
        if !status.is_success() {
            bump(&external.failures);
        }
        let shaped = self.shape(me, &captures, status, &body);
        totals.time(started.elapsed());
        match shaped {
            Some((status, body)) => {
                add(&totals.bytes, body.len());
                (json_response(status, body), None)
            }
            None => {
                bump(&totals.failures);
                (ProxyError::ShapingFailed.response(), None)
            }
        }
    }

    /// The local status and body for the external answer; `None` if an expression fails.
    fn shape(
        &self,
        worker: usize,
        captures: &Captures,
        status: StatusCode,
        body: &[u8],
    ) -> Option<(StatusCode, Vec<u8>)> {
        let input = jq::parse(body).unwrap_or(Value::Null);
        let values = || {
            captures
                .0
                .iter()
                .map(|c| jq::text(c))
                .chain([jq::number(status.as_u16().into())])
        };
        let local = match &self.status {
            None => status,
            Some(expression) => {
                let value = self
                    .counters
                    .run(STATUS, worker, expression, input.clone(), values())
                    .ok()?;
                StatusCode::from_u16(jq::as_status(&value)?).ok()?
            }
        };
        let answer = self
            .counters
            .run(ANSWER, worker, &self.answer, input, values())
            .ok()?;
        Some((local, jq::write(&answer)))
    }
}
