//! A route's pipeline: steps that see the request before its target and the response after.
//!
//! Every route runs the built-in steps first — [`UpstreamForm`] (origin-form URI, hop-by-hop
//! headers, upgrades) and [`Forwarding`] (`Forwarded`, `X-Forwarded-*`, `Via`), and [`Trace`]
//! (the hop chain) when `[server] trace_header` asks for it — then the filters its
//! configuration lists. Responses pass the same steps in reverse. A step that answers the
//! request itself ([`Step::Respond`]) stops it: the target never sees it, and only the steps
//! that ran before it see the answer.
//!
//! The configured filters always run in one fixed order ([`trafik_policy::stage::Stage`]):
//! access log (first in, last out) → gate → auth → rate limit → body limit → (cache) → target →
//! response shaping. A step that must wait before deciding (a Redis round trip, reading a JSON
//! body) answers [`Step::Wait`] and is then awaited through [`Filter::wait`]; a route whose steps
//! never wait runs its loop without creating a future.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;

use bytes::{BufMut, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{Extensions, Request, Response, StatusCode, Uri, Version};
use http_body::Body;

use super::body::{ProxyBody, RequestBody};
use super::headers::{append_via, is_settable, join_cookies, remove_hop_by_hop};
use super::policy;
use super::service::ClientConnection;
use super::upgrade;
use crate::error::ProxyError;
use crate::http::body::ErrorAnswer;
use crate::plan::{FilterPlan, RateKey};
use crate::snapshot::Snapshot;
use trafik_policy::gcra::Decision;
use trafik_policy::stage::Stage;

/// A step's decision on a request, told by [`Filter::explain`].
pub struct Verdict {
    /// The step, as configuration names it.
    pub filter: &'static str,
    /// What it read and decided, in words.
    pub told: String,
    /// The answer the step would give itself, if it would stop the request.
    pub answer: Option<OwnAnswer>,
}

/// A step's decision on a logged request played again (`trafik plan --replay`).
pub enum Replayed {
    Passed,
    Refused,
    /// The log lacks what the step decides by.
    Unknowable(&'static str),
}

/// An answer trafik gives itself instead of the target's.
pub struct OwnAnswer {
    pub status: u16,
    pub reason: String,
    /// Its `Retry-After`, in seconds.
    pub retry_after: Option<u64>,
}

/// What a step knows of the exchange besides the message itself.
pub struct Exchange<'a> {
    pub connection: &'a ClientConnection,
    pub snapshot: &'a Snapshot,
    /// The worker serving the request: which shard of per-worker state a step uses.
    pub worker: usize,
    /// What a step remembers of this request for its answer: a route's steps serve all its
    /// requests and keep nothing of their own. Empty, it allocates nothing.
    pub notes: RefCell<Notes>,
}

/// What the steps remember of one request: any value by its type, and the rate limit's
/// decision in a place of its own, since every request of a limited route has one (kept by
/// type, it would cost the map and a box per request).
#[derive(Default)]
pub struct Notes {
    /// The rate limit's decision, for the answer's `RateLimit-*` fields.
    pub rate_limit: Option<Decision>,
    by_type: Extensions,
}

impl Notes {
    pub fn insert<T: Clone + Send + Sync + 'static>(&mut self, value: T) -> Option<T> {
        self.by_type.insert(value)
    }

    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.by_type.get()
    }

    pub fn get_mut<T: Send + Sync + 'static>(&mut self) -> Option<&mut T> {
        self.by_type.get_mut()
    }

    pub fn remove<T: Send + Sync + 'static>(&mut self) -> Option<T> {
        self.by_type.remove()
    }
}

/// What a request step decided.
pub enum Step {
    /// Go on to the next step, then the target.
    Continue,
    /// Answer with this response instead.
    Respond(Box<Response<ProxyBody>>),
    /// Decide later: the pipeline awaits [`Filter::wait`] for this step's decision.
    Wait,
}

impl Step {
    /// A fields-only step's decision: on, or its own answer.
    pub fn answering(answer: Option<Box<Response<ProxyBody>>>) -> Step {
        match answer {
            None => Step::Continue,
            Some(answer) => Step::Respond(answer),
        }
    }
}

/// A step's decision once it has waited.
pub type Waiting<'a> = Pin<Box<dyn Future<Output = Step> + 'a>>;

/// A message's header fields as a step reads and edits them, whichever engine holds them:
/// a parsed `HeaderMap`, or the head bytes the own HTTP/1 engine forwards
/// (`h1::fields::HeadFields`). Names are matched without regard to case.
pub trait Fields {
    /// The first value of field `name`.
    fn get(&self, name: &HeaderName) -> Option<&[u8]>;
    /// Removes every field `name`.
    fn remove(&mut self, name: &HeaderName);
    /// Makes `value` the only value of `name`.
    fn insert(&mut self, name: HeaderName, value: HeaderValue);
    /// Makes each decimal number the only value of its name; a head takes the digits as they
    /// are, with no `HeaderValue` made for them, and is searched once for all the names.
    fn insert_numbers(&mut self, numbers: &[(&HeaderName, u64)]) {
        insert_as_values(self, numbers);
    }
}

/// [`Fields::insert_numbers`] by [`Fields::insert`], a `HeaderValue` per number.
pub fn insert_as_values<F: Fields + ?Sized>(fields: &mut F, numbers: &[(&HeaderName, u64)]) {
    for (name, number) in numbers {
        fields.insert((*name).clone(), HeaderValue::from(*number));
    }
}

impl Fields for HeaderMap {
    fn get(&self, name: &HeaderName) -> Option<&[u8]> {
        HeaderMap::get(self, name).map(HeaderValue::as_bytes)
    }

    fn remove(&mut self, name: &HeaderName) {
        HeaderMap::remove(self, name);
    }

    fn insert(&mut self, name: HeaderName, value: HeaderValue) {
        HeaderMap::insert(self, name, value);
    }
}

/// The first value of `name` as text, when it is visible ASCII (as `HeaderValue::to_str`
/// reads it).
pub fn field_text<'f>(fields: &'f dyn Fields, name: &HeaderName) -> Option<&'f str> {
    trafik_cache::fields::visible(fields.get(name)?)
}

/// Shows an answer to the first `ran` of a route's steps (those that let the request on, and
/// the one that answered it), last first, whichever engine wrote the answer.
pub fn answer_back(
    filters: &[Box<dyn Filter>],
    ran: usize,
    answer: &mut Response<ProxyBody>,
    exchange: &Exchange<'_>,
) {
    for filter in filters[..ran].iter().rev() {
        filter.on_response(answer, exchange);
    }
}

/// One step of a route's pipeline.
pub trait Filter: Send + Sync {
    /// A step that reads and edits only header fields says so in [`Filter::fields_only`] and
    /// decides in [`Filter::on_request_fields`]; this runs it on the parsed request.
    fn on_request(&self, request: &mut Request<RequestBody>, exchange: &Exchange<'_>) -> Step {
        Step::answering(self.on_request_fields(request.headers_mut(), exchange))
    }

    /// Whether this step reads and edits nothing but header fields, and never waits: the own
    /// HTTP/1 engine then runs it on the head bytes it forwards and serves the route inline.
    fn fields_only(&self) -> bool {
        false
    }

    /// A fields-only step's decision on a request: `None` lets it on, else the step's own
    /// answer.
    fn on_request_fields(
        &self,
        _fields: &mut dyn Fields,
        _exchange: &Exchange<'_>,
    ) -> Option<Box<Response<ProxyBody>>> {
        None
    }

    /// A fields-only step's edit of the answer's fields.
    fn on_response_fields(&self, _fields: &mut dyn Fields, _exchange: &Exchange<'_>) {}

    /// Called when `on_request` answered [`Step::Wait`]; must not answer `Wait` again.
    fn wait<'a>(
        &'a self,
        _request: &'a mut Request<RequestBody>,
        _exchange: &'a Exchange<'a>,
    ) -> Waiting<'a> {
        Box::pin(std::future::ready(Step::Continue))
    }

    /// A fields-only step's [`Filter::on_response_fields`], on the parsed answer.
    fn on_response(&self, response: &mut Response<ProxyBody>, exchange: &Exchange<'_>) {
        self.on_response_fields(response.headers_mut(), exchange);
    }

    /// What this step would decide for `request`, told without sending it: nothing counted,
    /// no state moved. `None` for a step with nothing to tell before a request is sent.
    fn explain(
        &self,
        _request: &Request<RequestBody>,
        _exchange: &Exchange<'_>,
    ) -> Option<Verdict> {
        None
    }

    /// What this step decides for a logged request played again at `now` (nanoseconds on the
    /// log's clock), counted as a served request is, so later requests see it. `None` for a
    /// step that decides nothing a log can tell.
    fn replay(
        &self,
        _request: &Request<RequestBody>,
        _exchange: &Exchange<'_>,
        _now: u64,
    ) -> Option<Replayed> {
        None
    }

    /// Whether the own HTTP/1 engine (`h1`) applies this step to head bytes itself, so
    /// a route made only of such steps needs no parsed request.
    fn head_only(&self) -> bool {
        false
    }

    /// For a head-only step that sends the request to another path: that path, for the own
    /// engine to write into the head it sends; `None` leaves the path alone.
    fn upstream_path(&self, _path: &str) -> Option<String> {
        None
    }
}

/// The steps every route runs before its configured filters; [`Trace`] only when configured,
/// so a route without it pays nothing for it.
pub fn built_in(trace: Option<&Trace>) -> Vec<Box<dyn Filter>> {
    let mut steps: Vec<Box<dyn Filter>> = vec![Box::new(UpstreamForm), Box::new(Forwarding)];
    if let Some(trace) = trace {
        steps.push(Box::new(trace.clone()));
    }
    steps
}

/// Builds a configured filter, `later` the route's filters after it; `stats` collects the
/// counters the admin API shows.
pub fn build(
    plan: &FilterPlan,
    later: &[FilterPlan],
    stats: &mut policy::Stats<'_>,
) -> Result<Box<dyn Filter>, String> {
    Ok(match plan {
        FilterPlan::RequestBodyLimit { bytes } => Box::new(RequestBodyLimit { bytes: *bytes }),
        FilterPlan::RequestBuffering { memory, most } => Box::new(RequestBuffering {
            memory: *memory,
            most: *most,
        }),
        FilterPlan::SetRequestHeader { name, value } => Box::new(SetRequestHeader {
            name: name.clone(),
            value: value.clone(),
        }),
        FilterPlan::SetResponseHeader { name, value } => Box::new(SetResponseHeader {
            name: name.clone(),
            value: value.clone(),
        }),
        FilterPlan::Gate(gate) => Box::new(policy::gate::Gate::new(gate, stats)?),
        FilterPlan::Jwt(jwt) => {
            let claims_read_later = later.iter().any(|plan| {
                matches!(plan, FilterPlan::RateLimit(limit) if matches!(limit.key, RateKey::Claim(_)))
            });
            Box::new(policy::auth::Jwt::new(jwt, claims_read_later)?)
        }
        FilterPlan::RateLimit(limit) => policy::rate_limit::build(limit, stats)?,
        FilterPlan::AccessLog => Box::new(policy::access_log::AccessLog::new(stats.route)),
        FilterPlan::RewritePath(rewrite) => Box::new(super::routing::RewritePath(rewrite.clone())),
        FilterPlan::Cors(cors) => Box::new(super::cors::Cors::new(
            cors,
            stats.workers,
            stats.route,
            &mut stats.edge.cors,
        )),
        FilterPlan::Compress(compress) => Box::new(super::compress::Compress::new(
            compress,
            stats.workers,
            stats.route,
            &mut stats.edge.compress,
        )),
    })
}

/// The header a configured filter would set although trafik manages it (framing, hop-by-hop,
/// `Host`), if it would.
pub fn unsettable_header(plan: &FilterPlan) -> Option<&HeaderName> {
    match plan {
        FilterPlan::SetRequestHeader { name, .. } | FilterPlan::SetResponseHeader { name, .. } => {
            (!is_settable(name)).then_some(name)
        }
        FilterPlan::RequestBodyLimit { .. }
        | FilterPlan::RequestBuffering { .. }
        | FilterPlan::Gate(_)
        | FilterPlan::Jwt(_)
        | FilterPlan::RateLimit(_)
        | FilterPlan::AccessLog
        | FilterPlan::RewritePath(_) => None,
        FilterPlan::Cors(_) | FilterPlan::Compress(_) => None,
    }
}

/// Makes the message fit to cross the hop: an absolute-form request URI (as HTTP/2 requests
/// carry) becomes origin form and its authority replaces `Host` (RFC 9112 §3.2.2, RFC 9113
/// §8.3.1: the route was chosen by that authority, so the backend must see the same one), and
/// hop-by-hop headers are removed both ways (from relayed responses only: trafik's own answers
/// may need `Connection: close`) — but for an upgrade ([`upgrade::wanted`]) and its 101, which
/// keep `Upgrade` and `Connection: upgrade`. An HTTP/2 request keeps its version here; hyper
/// writes it upstream as HTTP/1.1, with its `cookie` fields joined into one here
/// ([`join_cookies`]).
pub struct UpstreamForm;

impl Filter for UpstreamForm {
    fn head_only(&self) -> bool {
        true
    }

    fn on_request(&self, request: &mut Request<RequestBody>, _: &Exchange<'_>) -> Step {
        if request.uri().scheme().is_some() {
            // The path's bytes are shared, not copied.
            let mut parts = std::mem::take(request.uri_mut()).into_parts();
            let authority = parts.authority.take();
            parts.scheme = None;
            if parts.path_and_query.is_none() {
                parts.path_and_query = Some(PathAndQuery::from_static("/"));
            }
            if let Ok(uri) = Uri::from_parts(parts) {
                *request.uri_mut() = uri;
            }
            if let Some(value) = authority.and_then(|a| HeaderValue::from_str(a.as_str()).ok()) {
                request.headers_mut().insert(header::HOST, value);
            }
        }
        if upgrade::wanted(request) {
            upgrade::prepare(request);
        } else {
            remove_hop_by_hop(request.headers_mut());
        }
        if request.version() >= Version::HTTP_2 {
            join_cookies(request.headers_mut());
        }
        Step::Continue
    }

    fn on_response(&self, response: &mut Response<ProxyBody>, _: &Exchange<'_>) {
        if response.body().is_relayed() {
            if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                upgrade::keep_upgrade_headers(response.headers_mut());
            } else {
                remove_hop_by_hop(response.headers_mut());
            }
        }
    }
}

/// Says who asked and through whom: `Forwarded`, `X-Forwarded-For/-Proto/-Host` and `Via` on
/// requests, `Via` on relayed responses. (A client certificate's identity headers are set
/// before routing, in `service`.)
pub struct Forwarding;

impl Filter for Forwarding {
    fn head_only(&self) -> bool {
        true
    }

    fn on_request(&self, request: &mut Request<RequestBody>, exchange: &Exchange<'_>) -> Step {
        let via = via_for(request.version(), exchange);
        exchange.connection.forwarding.apply(
            request.headers_mut(),
            exchange.snapshot.client.trust_forwarded,
            via,
        );
        Step::Continue
    }

    fn on_response(&self, response: &mut Response<ProxyBody>, exchange: &Exchange<'_>) {
        if response.body().is_relayed() {
            let via = via_for(response.version(), exchange);
            append_via(response.headers_mut(), via);
        }
    }
}

/// This hop in `Via`, named by the version of the message as trafik received it (RFC 9110
/// §7.6.3): a request from the client, an answer from the backend.
fn via_for<'e>(version: Version, exchange: &'e Exchange<'_>) -> &'e HeaderValue {
    match version {
        Version::HTTP_2 => &exchange.snapshot.via_http2,
        Version::HTTP_3 => &exchange.snapshot.via_http3,
        _ => &exchange.snapshot.via,
    }
}

/// The hop chain (`[server] trace_header`, the course's `x-durak`): each trafik appends its name
/// to the request header, `tv`, then `tv > yd`, and the end of the chain reports it back
/// (`trafik upstream` answers `tv > yd > k1`). An answer trafik makes itself carries the chain
/// up to here and why: `tv > yd > unreachable` ([`ProxyError::trace_reason`]).
#[derive(Clone)]
pub struct Trace {
    header: HeaderName,
    name: HeaderValue,
}

/// The chain a request left this instance with, for its answer.
#[derive(Clone)]
struct Chain(HeaderValue);

impl Trace {
    pub fn new(header: HeaderName, name: HeaderValue) -> Self {
        Trace { header, name }
    }

    /// The chain the request goes on with: the one it came with (all its values, in order),
    /// then this instance.
    pub fn extend(&self, headers: &HeaderMap) -> HeaderValue {
        let mut received = headers.get_all(&self.header).iter().peekable();
        if received.peek().is_none() {
            return self.name.clone();
        }
        let mut chain = BytesMut::new();
        for value in received {
            chain.put_slice(value.as_bytes());
            chain.put_slice(b" > ");
        }
        chain.put_slice(self.name.as_bytes());
        // Joined from valid values with visible ASCII, so still valid; checked all the same.
        HeaderValue::from_maybe_shared(chain.freeze()).unwrap_or_else(|_| self.name.clone())
    }

    /// Writes `CHAIN > REASON` on an answer trafik made itself (one that carries its
    /// [`ProxyError`]); a relayed answer keeps the header its backend wrote.
    pub fn mark_own_answer(&self, response: &mut Response<ProxyBody>, chain: &HeaderValue) {
        let Some(error) = response.extensions().get::<ProxyError>() else {
            return;
        };
        let mut marked = BytesMut::from(chain.as_bytes());
        marked.put_slice(b" > ");
        marked.put_slice(error.trace_reason().as_bytes());
        if let Ok(value) = HeaderValue::from_maybe_shared(marked.freeze()) {
            response.headers_mut().insert(self.header.clone(), value);
        }
    }
}

impl Filter for Trace {
    fn on_request(&self, request: &mut Request<RequestBody>, exchange: &Exchange<'_>) -> Step {
        let chain = self.extend(request.headers());
        request
            .headers_mut()
            .insert(self.header.clone(), chain.clone());
        exchange.notes.borrow_mut().insert(Chain(chain));
        Step::Continue
    }

    fn on_response(&self, response: &mut Response<ProxyBody>, exchange: &Exchange<'_>) {
        if let Some(Chain(chain)) = exchange.notes.borrow().get::<Chain>() {
            self.mark_own_answer(response, chain);
        }
    }
}

/// Refuses request bodies over a size: at once when `Content-Length` says so, else as soon as
/// the streamed body passes it.
pub struct RequestBodyLimit {
    bytes: u64,
}

impl Filter for RequestBodyLimit {
    fn on_request(&self, request: &mut Request<RequestBody>, exchange: &Exchange<'_>) -> Step {
        if declared_length(request).is_some_and(|length| length > self.bytes) {
            policy::access_log::record(exchange, Stage::BodyLimit, "refused: content-length");
            return Step::Respond(Box::new(ProxyError::RequestBodyTooLarge.response()));
        }
        policy::access_log::record(exchange, Stage::BodyLimit, "pass");
        request.body_mut().limit(self.bytes);
        Step::Continue
    }

    fn explain(&self, request: &Request<RequestBody>, _: &Exchange<'_>) -> Option<Verdict> {
        let limit = self.bytes;
        let (told, answer) = match declared_length(request) {
            Some(length) if length > limit => (
                format!("Content-Length {length} is over the limit of {limit} bytes"),
                Some(OwnAnswer {
                    status: 413,
                    reason: "request body too large".into(),
                    retry_after: None,
                }),
            ),
            Some(length) => (
                format!("Content-Length {length} is within the limit of {limit} bytes"),
                None,
            ),
            None => (
                format!("no Content-Length: a body is cut at {limit} bytes as it streams"),
                None,
            ),
        };
        Some(Verdict {
            filter: "request_body_limit",
            told,
            answer,
        })
    }
}

/// Reads a request's whole body before the target sees the request (request buffering), so a
/// slow upload holds no backend connection: up to `memory` bytes in memory, the rest in a
/// temporary file, at most `most` bytes in all.
pub struct RequestBuffering {
    memory: u64,
    most: u64,
}

impl Filter for RequestBuffering {
    fn on_request(&self, request: &mut Request<RequestBody>, _: &Exchange<'_>) -> Step {
        match request.body().is_end_stream() {
            true => Step::Continue,
            false => Step::Wait,
        }
    }

    fn wait<'a>(
        &'a self,
        request: &'a mut Request<RequestBody>,
        _: &'a Exchange<'a>,
    ) -> Waiting<'a> {
        Box::pin(async move {
            match request.body_mut().buffer(self.memory, self.most).await {
                Ok(()) => Step::Continue,
                Err(error) => Step::Respond(Box::new(error.refusal().response())),
            }
        })
    }
}

/// The body length a request declares in `Content-Length`, if it declares a valid one.
pub fn declared_length<B>(request: &Request<B>) -> Option<u64> {
    request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

pub struct SetRequestHeader {
    name: HeaderName,
    value: HeaderValue,
}

impl Filter for SetRequestHeader {
    fn fields_only(&self) -> bool {
        true
    }

    fn on_request_fields(
        &self,
        fields: &mut dyn Fields,
        _: &Exchange<'_>,
    ) -> Option<Box<Response<ProxyBody>>> {
        fields.insert(self.name.clone(), self.value.clone());
        None
    }
}

pub struct SetResponseHeader {
    name: HeaderName,
    value: HeaderValue,
}

impl Filter for SetResponseHeader {
    fn fields_only(&self) -> bool {
        true
    }

    fn on_response_fields(&self, fields: &mut dyn Fields, _: &Exchange<'_>) {
        fields.insert(self.name.clone(), self.value.clone());
    }
}
