//! Cross-origin requests at the edge (`[listener.route.cors]`): a browser's preflight
//! (`OPTIONS` with `Access-Control-Request-Method`) is answered here and never reaches the
//! pool; an answer to an allowed origin gets `Access-Control-Allow-Origin` (and
//! `-Credentials`, `-Expose-Headers`), one to any other origin none, whatever the upstream
//! wrote. Answers whose CORS fields depend on the request's `Origin` say `Vary: Origin`.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};

use super::body::{ProxyBody, RequestBody};
use super::filter::{Exchange, Filter, Step};
use super::headers::vary_on;
use super::policy::refusal;
use crate::counters::{PerWorker, bump, read};
use crate::plan::CorsPlan;

/// What one worker counted for a route's CORS.
#[derive(Debug, Default)]
pub struct CorsCounters {
    /// Preflights answered with the route's permission.
    pub preflights: AtomicU64,
    /// Preflights refused (403): origin, method or a header not allowed.
    pub preflights_refused: AtomicU64,
    /// Requests from an allowed origin, answered with `Access-Control-Allow-Origin`.
    pub allowed: AtomicU64,
    /// Requests from another origin, answered without it (the browser keeps the answer from
    /// the page).
    pub refused: AtomicU64,
}

/// One route's CORS counters, for `/status` and `/metrics`.
pub struct CorsStats {
    pub route: String,
    pub counters: Arc<PerWorker<CorsCounters>>,
}

impl CorsStats {
    pub fn totals(&self) -> [(&'static str, i64); 4] {
        let sum =
            |counter: fn(&CorsCounters) -> &AtomicU64| self.counters.sum(|c| read(counter(c)));
        [
            ("preflights", sum(|c| &c.preflights)),
            ("preflights_refused", sum(|c| &c.preflights_refused)),
            ("allowed", sum(|c| &c.allowed)),
            ("refused", sum(|c| &c.refused)),
        ]
    }
}

/// The CORS step of a route, its answer fields made once.
pub struct Cors {
    plan: CorsPlan,
    methods: HeaderValue,
    expose: Option<HeaderValue>,
    max_age: Option<HeaderValue>,
    counters: Arc<PerWorker<CorsCounters>>,
}

/// The origin an answer is for, when it is allowed.
#[derive(Clone)]
struct AllowedOrigin(HeaderValue);

const ALLOW_ORIGIN: HeaderName = header::ACCESS_CONTROL_ALLOW_ORIGIN;
const TRUE: HeaderValue = HeaderValue::from_static("true");
const ANY: HeaderValue = HeaderValue::from_static("*");

impl Cors {
    pub fn new(plan: &CorsPlan, workers: usize, route: &str, stats: &mut Vec<CorsStats>) -> Self {
        let join = |names: Vec<&str>| HeaderValue::from_str(&names.join(", ")).ok();
        let counters = Arc::new(PerWorker::new(workers.max(1)));
        stats.push(CorsStats {
            route: route.to_owned(),
            counters: counters.clone(),
        });
        Cors {
            methods: join(plan.methods.iter().map(Method::as_str).collect())
                .unwrap_or_else(|| HeaderValue::from_static("GET, HEAD, POST")),
            expose: (!plan.expose.is_empty())
                .then(|| join(plan.expose.iter().map(HeaderName::as_str).collect()))
                .flatten(),
            max_age: plan.max_age.map(|age| HeaderValue::from(age.as_secs())),
            plan: plan.clone(),
            counters,
        }
    }

    /// The `Access-Control-Allow-Origin` value for an allowed `origin`: `*` when any origin may
    /// read without credentials (the same answer for all), else the origin itself.
    fn allow_origin(&self, origin: &HeaderValue) -> HeaderValue {
        match self.plan.origins.any() && !self.plan.credentials {
            true => ANY,
            false => origin.clone(),
        }
    }

    /// Whether the answer's CORS fields depend on the request's `Origin`.
    fn varies(&self) -> bool {
        !self.plan.origins.any() || self.plan.credentials
    }

    fn preflight(
        &self,
        headers: &HeaderMap,
        origin: &HeaderValue,
        allowed: bool,
    ) -> Response<ProxyBody> {
        let refused = |reason: String| {
            let mut answer = refusal(StatusCode::FORBIDDEN, &reason);
            vary_on(answer.headers_mut(), "origin");
            answer
        };
        if !allowed {
            return refused(format!("cors: origin {} is not allowed", printable(origin)));
        }
        let method = headers
            .get(header::ACCESS_CONTROL_REQUEST_METHOD)
            .and_then(|m| Method::from_bytes(m.as_bytes()).ok());
        let method_allowed = method.as_ref().is_some_and(|m| {
            self.plan.methods.contains(m) || [Method::GET, Method::HEAD, Method::POST].contains(m)
        });
        if !method_allowed {
            let asked = headers
                .get(header::ACCESS_CONTROL_REQUEST_METHOD)
                .map_or_else(String::new, printable);
            return refused(format!("cors: method {asked} is not allowed"));
        }
        let requested = headers
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .and_then(|h| h.to_str().ok());
        if let Some(requested) = requested
            && let Some(header) = trafik_policy::cors::refused_header(requested, &self.plan.headers)
        {
            return refused(format!("cors: header {header} is not allowed"));
        }
        let mut answer = Response::new(ProxyBody::Local(None));
        *answer.status_mut() = StatusCode::NO_CONTENT;
        let fields = answer.headers_mut();
        fields.insert(ALLOW_ORIGIN, self.allow_origin(origin));
        if self.plan.credentials {
            fields.insert(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, TRUE);
        }
        fields.insert(header::ACCESS_CONTROL_ALLOW_METHODS, self.methods.clone());
        if let Some(requested) = headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            && !requested.is_empty()
        {
            // Every name asked for is allowed: the answer names exactly those.
            fields.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, requested.clone());
        }
        if let Some(max_age) = &self.max_age {
            fields.insert(header::ACCESS_CONTROL_MAX_AGE, max_age.clone());
        }
        if self.varies() {
            vary_on(fields, "origin");
        }
        vary_on(fields, "access-control-request-method");
        vary_on(fields, "access-control-request-headers");
        answer
    }
}

/// A header value as a refusal's reason may show it.
fn printable(value: &HeaderValue) -> String {
    String::from_utf8_lossy(value.as_bytes())
        .chars()
        .take(100)
        .collect()
}

impl Filter for Cors {
    fn on_request(&self, request: &mut Request<RequestBody>, exchange: &Exchange<'_>) -> Step {
        let Some(origin) = request.headers().get(header::ORIGIN) else {
            return Step::Continue;
        };
        let counters = self.counters.mine(exchange.worker);
        let allowed = origin
            .to_str()
            .is_ok_and(|origin| self.plan.origins.allows(origin));
        let preflight = request.method() == Method::OPTIONS
            && request
                .headers()
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
        if preflight {
            let answer = self.preflight(request.headers(), origin, allowed);
            match answer.status() == StatusCode::NO_CONTENT {
                true => bump(&counters.preflights),
                false => bump(&counters.preflights_refused),
            }
            return Step::Respond(Box::new(answer));
        }
        if allowed {
            bump(&counters.allowed);
            let origin = AllowedOrigin(origin.clone());
            exchange.notes.borrow_mut().insert(origin);
        } else {
            bump(&counters.refused);
        }
        Step::Continue
    }

    fn on_response(&self, response: &mut Response<ProxyBody>, exchange: &Exchange<'_>) {
        let headers = response.headers_mut();
        // This route's CORS is the edge's: what the upstream said about it does not count.
        for name in [
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
        ] {
            headers.remove(name);
        }
        if let Some(AllowedOrigin(origin)) = exchange.notes.borrow_mut().remove::<AllowedOrigin>() {
            headers.insert(ALLOW_ORIGIN, self.allow_origin(&origin));
            if self.plan.credentials {
                headers.insert(header::ACCESS_CONTROL_ALLOW_CREDENTIALS, TRUE);
            }
            if let Some(expose) = &self.expose {
                headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, expose.clone());
            }
        }
        if self.varies() {
            vary_on(headers, "origin");
        }
    }
}
