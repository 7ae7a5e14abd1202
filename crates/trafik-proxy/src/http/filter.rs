//! A route's pipeline: steps that see the request before its target and the response after.
//!
//! Every route runs the built-in steps first — [`UpstreamForm`] (origin-form URI, hop-by-hop
//! headers) and [`Forwarding`] (`Forwarded`, `X-Forwarded-*`, `Via`) — then the filters its
//! configuration lists. Responses pass the same steps in reverse. A step that answers the
//! request itself ([`Step::Respond`]) stops it: the target never sees it, and only the steps
//! that ran before it see the answer.

use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Response, Uri, Version};

use super::body::{ProxyBody, RequestBody};
use super::headers::{append_via, remove_hop_by_hop};
use super::service::ClientConnection;
use crate::error::ProxyError;
use crate::plan::FilterPlan;
use crate::snapshot::Snapshot;

/// What a step knows of the exchange besides the message itself.
pub struct Exchange<'a> {
    pub connection: &'a ClientConnection,
    pub snapshot: &'a Snapshot,
}

/// What a request step decided.
pub enum Step {
    /// Go on to the next step, then the target.
    Continue,
    /// Answer with this response instead.
    Respond(Box<Response<ProxyBody>>),
}

/// One step of a route's pipeline.
pub trait Filter: Send + Sync {
    fn on_request(&self, _request: &mut Request<RequestBody>, _exchange: &Exchange<'_>) -> Step {
        Step::Continue
    }

    fn on_response(&self, _response: &mut Response<ProxyBody>, _exchange: &Exchange<'_>) {}
}

/// The steps every route runs before its configured filters.
pub fn built_in() -> Vec<Box<dyn Filter>> {
    vec![Box::new(UpstreamForm), Box::new(Forwarding)]
}

/// Builds a configured filter.
pub fn build(plan: &FilterPlan) -> Box<dyn Filter> {
    match plan {
        FilterPlan::RequestBodyLimit { bytes } => Box::new(RequestBodyLimit { bytes: *bytes }),
        FilterPlan::SetRequestHeader { name, value } => Box::new(SetRequestHeader {
            name: name.clone(),
            value: value.clone(),
        }),
        FilterPlan::SetResponseHeader { name, value } => Box::new(SetResponseHeader {
            name: name.clone(),
            value: value.clone(),
        }),
    }
}

/// Makes the message fit to cross the hop: an absolute-form request URI (as HTTP/2 requests
/// carry) becomes origin form, its authority becoming `Host`, and hop-by-hop headers are
/// removed both ways (from relayed responses only: trafik's own answers may need
/// `Connection: close`). An HTTP/2 request keeps its version here; hyper writes it upstream as
/// HTTP/1.1.
pub struct UpstreamForm;

impl Filter for UpstreamForm {
    fn on_request(&self, request: &mut Request<RequestBody>, _: &Exchange<'_>) -> Step {
        if request.uri().scheme().is_some() {
            let authority = request.uri().authority().map(|a| a.as_str().to_owned());
            let path = request
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned();
            if let Ok(uri) = path.parse::<Uri>() {
                *request.uri_mut() = uri;
            }
            // The route was chosen by the authority, so the backend must see the same host
            // whatever `Host` says (RFC 9112 §3.2.2, RFC 9113 §8.3.1).
            if let Some(authority) = authority
                && let Ok(value) = HeaderValue::from_str(&authority)
            {
                request.headers_mut().insert(header::HOST, value);
            }
        }
        remove_hop_by_hop(request.headers_mut());
        Step::Continue
    }

    fn on_response(&self, response: &mut Response<ProxyBody>, _: &Exchange<'_>) {
        if matches!(response.body(), ProxyBody::Upstream { .. }) {
            remove_hop_by_hop(response.headers_mut());
        }
    }
}

/// Says who asked and through whom: `Forwarded`, `X-Forwarded-For/-Proto/-Host` and `Via` on
/// requests, `Via` on relayed responses.
pub struct Forwarding;

impl Filter for Forwarding {
    fn on_request(&self, request: &mut Request<RequestBody>, exchange: &Exchange<'_>) -> Step {
        let via = match request.version() {
            Version::HTTP_2 => &exchange.snapshot.via_http2,
            _ => &exchange.snapshot.via,
        };
        exchange.connection.forwarding.apply(
            request.headers_mut(),
            exchange.snapshot.client.trust_forwarded,
            via,
        );
        Step::Continue
    }

    fn on_response(&self, response: &mut Response<ProxyBody>, exchange: &Exchange<'_>) {
        if matches!(response.body(), ProxyBody::Upstream { .. }) {
            append_via(response.headers_mut(), &exchange.snapshot.via);
        }
    }
}

/// Refuses request bodies over a size: at once when `Content-Length` says so, else as soon as
/// the streamed body passes it.
pub struct RequestBodyLimit {
    bytes: u64,
}

impl Filter for RequestBodyLimit {
    fn on_request(&self, request: &mut Request<RequestBody>, _: &Exchange<'_>) -> Step {
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|length| length > self.bytes) {
            return Step::Respond(Box::new(ProxyError::RequestBodyTooLarge.response()));
        }
        request.body_mut().limit(self.bytes);
        Step::Continue
    }
}

pub struct SetRequestHeader {
    name: HeaderName,
    value: HeaderValue,
}

impl Filter for SetRequestHeader {
    fn on_request(&self, request: &mut Request<RequestBody>, _: &Exchange<'_>) -> Step {
        request
            .headers_mut()
            .insert(self.name.clone(), self.value.clone());
        Step::Continue
    }
}

pub struct SetResponseHeader {
    name: HeaderName,
    value: HeaderValue,
}

impl Filter for SetResponseHeader {
    fn on_response(&self, response: &mut Response<ProxyBody>, _: &Exchange<'_>) {
        response
            .headers_mut()
            .insert(self.name.clone(), self.value.clone());
    }
}
