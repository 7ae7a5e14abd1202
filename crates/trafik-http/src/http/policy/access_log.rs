//! The route's access log: one JSON line (with `--log-format json`) per request, target
//! `trafik::access`, with what each stage decided. It is the first stage in and the last out,
//! so it sees the response after shaping and the verdicts of every stage that ran.

use std::borrow::Cow;
use std::time::Instant;

use http::{Request, Response};

use crate::http::body::{ProxyBody, RequestBody};
use crate::http::filter::{Exchange, Filter, Step};
use trafik_policy::stage::Stage;

/// The verdicts of one request, kept in the exchange's notes while an access log wants them.
#[derive(Clone, Default)]
pub struct Verdicts {
    started: Option<Instant>,
    method: String,
    uri: String,
    gate: Option<Cow<'static, str>>,
    auth: Option<Cow<'static, str>>,
    rate_limit: Option<Cow<'static, str>>,
    body_limit: Option<Cow<'static, str>>,
}

/// Writes `verdict` for `stage` when the route logs; costs one borrow otherwise.
pub fn record(exchange: &Exchange<'_>, stage: Stage, verdict: impl Into<Cow<'static, str>>) {
    if let Some(verdicts) = exchange.notes.borrow_mut().get_mut::<Verdicts>() {
        let slot = match stage {
            Stage::Gate => &mut verdicts.gate,
            Stage::Auth => &mut verdicts.auth,
            Stage::RateLimit => &mut verdicts.rate_limit,
            Stage::BodyLimit => &mut verdicts.body_limit,
            _ => return,
        };
        *slot = Some(verdict.into());
    }
}

pub struct AccessLog {
    route: String,
}

impl AccessLog {
    pub fn new(route: &str) -> Self {
        AccessLog {
            route: route.to_owned(),
        }
    }
}

impl Filter for AccessLog {
    fn on_request(&self, request: &mut Request<RequestBody>, exchange: &Exchange<'_>) -> Step {
        exchange.notes.borrow_mut().insert(Verdicts {
            started: Some(Instant::now()),
            method: request.method().to_string(),
            uri: request.uri().to_string(),
            ..Verdicts::default()
        });
        Step::Continue
    }

    fn on_response(&self, response: &mut Response<ProxyBody>, exchange: &Exchange<'_>) {
        let Some(verdicts) = exchange.notes.borrow_mut().remove::<Verdicts>() else {
            return;
        };
        tracing::info!(
            target: "trafik::access",
            route = %self.route,
            client = %exchange.connection.peer,
            method = %verdicts.method,
            uri = %verdicts.uri,
            status = response.status().as_u16(),
            gate = verdicts.gate.as_deref(),
            auth = verdicts.auth.as_deref(),
            rate_limit = verdicts.rate_limit.as_deref(),
            body_limit = verdicts.body_limit.as_deref(),
            micros = verdicts.started.map_or(0, |s| s.elapsed().as_micros() as u64),
        );
    }
}
