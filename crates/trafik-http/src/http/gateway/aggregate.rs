//! `target = "aggregate"`: the parts called in parallel, put together under their contracts,
//! merged by jq, projected for the client type; with a batch, one such record per list item,
//! fetched concurrently and answered as an array in request order.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::join_all;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use trafik_gateway::jq::{self, Expression, Value};
use trafik_gateway::parts::{Answer, Assembled, Missing, assemble};
use trafik_gateway::template::{Captures, UpstreamTemplate, list_items};

use super::counters::GatewayCounters;
use super::fetch::{Caller, Fetched};
use crate::counters::{add, bump};
use crate::error::ProxyError;
use crate::http::body::ErrorAnswer;
use crate::http::body::{ProxyBody, RequestBody};
use crate::http::service::{ClientConnection, WorkerProxy};
use crate::http::target::PoolTarget;
use crate::plan::{BatchPlan, ClientChooser, ViewsPlan};
use crate::snapshot::WorkerSnapshot;

/// The response header that names the parts missing from a partial answer.
pub const MISSING_HEADER: &str = "x-trafik-eksik";

/// The place of the merge among an aggregate's counted filters; the views follow it.
pub const MERGE: usize = 0;

/// The most records one batch request may ask for: each costs a call per part upstream.
pub const MAX_BATCH_ITEMS: usize = 100;

pub struct AggregateTarget {
    pub parts: Vec<Part>,
    /// Each part's name and contract, in part order, as [`assemble`] takes them.
    pub contracts: Vec<(String, Missing)>,
    pub merge: Arc<Expression>,
    pub views: Option<ViewsPlan>,
    pub batch: Option<BatchPlan>,
    pub counters: Arc<GatewayCounters>,
}

pub struct Part {
    pub pool: PoolTarget,
    pub path: UpstreamTemplate,
    pub timeout: Duration,
}

/// One record's merged (and projected) value and the parts it lacks, or the answer that
/// replaces the whole response.
type Record = Result<(Value, Vec<usize>), Box<Response<ProxyBody>>>;

impl AggregateTarget {
    pub async fn serve(
        &self,
        worker: &WorkerProxy,
        snapshot: &Rc<WorkerSnapshot>,
        connection: &ClientConnection,
        request: Request<RequestBody>,
    ) -> (Response<ProxyBody>, Option<SocketAddr>) {
        let totals = self.counters.route(worker.id);
        bump(&totals.calls);
        let started = Instant::now();
        let captures = request
            .extensions()
            .get::<Captures>()
            .cloned()
            .unwrap_or_default();
        let view = self.view(request.headers());
        let caller = Caller::new(worker, snapshot, connection, request.headers());
        let answer = match &self.batch {
            None => self.record(&caller, captures, view).await,
            Some(batch) => match batch_records(batch, &captures, request.uri().query()) {
                Some(records) => {
                    let records = futures_util::stream::iter(records)
                        .map(|captures| self.record(&caller, captures, view))
                        .buffered(batch.concurrency)
                        .collect::<Vec<Record>>()
                        .await;
                    gather(records)
                }
                None => Err(Box::new(ProxyError::BadListItem.response())),
            },
        };
        let answer = match answer {
            _ if caller.overspent() => Err(Box::new(ProxyError::PartsTooLarge.response())),
            answer => answer,
        };
        let response = match answer {
            Ok((value, missing)) => {
                let body = jq::write(&value);
                add(&totals.bytes, body.len());
                let mut response = json_response(StatusCode::OK, body);
                if !missing.is_empty() {
                    bump(&totals.missing);
                    self.mark_missing(response.headers_mut(), &missing);
                }
                response
            }
            Err(response) => {
                bump(&totals.failures);
                *response
            }
        };
        totals.time(started.elapsed());
        (response, None)
    }

    /// The projection for the request's client type, if it has one, with its place among the
    /// route's filters (after `merge`).
    fn view(&self, headers: &HeaderMap) -> Option<(usize, &Expression)> {
        let views = self.views.as_ref()?;
        let client = match &views.chooser {
            ClientChooser::Header(name) => headers.get(name)?.to_str().ok()?,
        };
        views
            .views
            .iter()
            .position(|view| view.client == client)
            .map(|index| (1 + index, &*views.views[index].project))
    }

    /// One record: its parts in parallel, then the merge and the view.
    async fn record(
        &self,
        caller: &Caller<'_>,
        captures: Captures,
        view: Option<(usize, &Expression)>,
    ) -> Record {
        let me = caller.worker.id;
        let calls = self.parts.iter().enumerate().map(|(index, part)| {
            let path = part.path.render(&captures);
            async move {
                let counters = self.counters.part(index, me);
                bump(&counters.calls);
                let started = Instant::now();
                let fetched = caller.fetch(&part.pool, &path, part.timeout).await;
                counters.time(started.elapsed());
                match &fetched {
                    Fetched::Answered { body, status, .. } => {
                        add(&counters.bytes, body.len());
                        if !status.is_success() {
                            bump(&counters.failures);
                        }
                    }
                    Fetched::Failed(_) => bump(&counters.failures),
                }
                fetched
            }
        });
        let fetched = join_all(calls).await;
        let answers: Vec<Answer<'_>> = fetched.iter().map(as_answer).collect();
        let (parts, missing) = match assemble(&self.contracts, &answers) {
            Assembled::Input { parts, missing } => (parts, missing),
            Assembled::Fail { part } => return Err(Box::new(passed_on(&fetched[part]))),
        };
        for &index in &missing {
            bump(&self.counters.part(index, me).missing);
        }
        let values: Vec<Value> = captures.0.iter().map(|c| jq::text(c)).collect();
        let counters = &self.counters;
        let mut shaped = counters.run(MERGE, me, &self.merge, parts, values.iter().cloned());
        if let (Some((filter, view)), Ok(merged)) = (view, &shaped) {
            shaped = counters.run(filter, me, view, merged.clone(), values);
        }
        match shaped {
            Ok(value) => Ok((value, missing)),
            Err(error) => {
                tracing::debug!(route = %self.counters.route, %error, "merge failed");
                Err(Box::new(ProxyError::ShapingFailed.response()))
            }
        }
    }

    fn mark_missing(&self, headers: &mut HeaderMap, missing: &[usize]) {
        let names: Vec<&str> = missing
            .iter()
            .map(|&index| self.contracts[index].0.as_str())
            .collect();
        if let Ok(value) = HeaderValue::from_str(&names.join(", ")) {
            headers.insert(MISSING_HEADER, value);
        }
    }
}

/// The captures of each record a batch request asks for, in request order: the route's own
/// with the list item last; `None` when an item cannot name a record or there are too many.
pub fn batch_records(
    batch: &BatchPlan,
    captures: &Captures,
    query: Option<&str>,
) -> Option<Vec<Captures>> {
    let items = list_items(query, &batch.parameter).ok()?;
    (items.len() <= MAX_BATCH_ITEMS).then(|| {
        items
            .into_iter()
            .map(|item| {
                let mut record = captures.clone();
                record.0.push(item.to_owned());
                record
            })
            .collect()
    })
}

/// The records as one array in request order, the parts missing from any of them in part
/// order; the first record that failed fails the whole answer.
fn gather(records: Vec<Record>) -> Record {
    let mut values = Vec::with_capacity(records.len());
    let mut missing: Vec<usize> = Vec::new();
    for record in records {
        let (value, lacking) = record?;
        values.push(value);
        missing.extend(lacking);
    }
    missing.sort_unstable();
    missing.dedup();
    Ok((Value::Arr(values.into()), missing))
}

fn as_answer(fetched: &Fetched) -> Answer<'_> {
    match fetched {
        Fetched::Answered { status, body, .. } => Answer::Answered {
            status: status.as_u16(),
            body,
        },
        Fetched::Failed(error) => Answer::Failed {
            status: error.status().as_u16(),
        },
    }
}

/// A required part's answer, as the whole response: its status, type and body, or trafik's
/// own error when it gave none.
fn passed_on(fetched: &Fetched) -> Response<ProxyBody> {
    match fetched {
        Fetched::Answered {
            status,
            content_type,
            body,
        } => {
            let mut response = Response::new(ProxyBody::local(body.clone()));
            *response.status_mut() = *status;
            if let Some(content_type) = content_type {
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, content_type.clone());
            }
            response
        }
        Fetched::Failed(error) => error.response(),
    }
}

/// A JSON answer trafik wrote.
pub fn json_response(status: StatusCode, body: Vec<u8>) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::local(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
