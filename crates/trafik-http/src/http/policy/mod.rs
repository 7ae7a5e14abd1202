//! The gateway stages of a route (the pure rules are in `trafik_policy`): the [`gate`], JWT
//! [`auth`], the [`rate_limit`] (local, or global through [`redis`]) and the per-route
//! [`access_log`] with every stage's verdict.

pub mod access_log;
pub mod auth;
pub mod gate;
pub mod rate_limit;
pub mod redis;

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};

use super::body::ProxyBody;
use crate::counters::PerWorker;
use gate::GateCounters;

/// What building a route's filters gathers for the admin API.
pub struct Stats<'a> {
    /// The route, as `/status` names it: `LISTENER PATH_PREFIX`.
    pub route: &'a str,
    pub workers: usize,
    pub gates: &'a mut Vec<GateStats>,
    pub global_limits: &'a mut Vec<GlobalLimitStats>,
}

/// One gate's counters, by route.
pub struct GateStats {
    pub route: String,
    pub counters: Arc<PerWorker<GateCounters>>,
}

/// One global rate limit's counts of Redis decisions, by route.
pub struct GlobalLimitStats {
    pub route: String,
    pub counters: Arc<PerWorker<redis::RedisCounters>>,
}

/// A refusal trafik writes itself: the status and a one-line reason.
pub fn refusal(status: StatusCode, reason: &str) -> Response<ProxyBody> {
    let mut line = String::with_capacity(reason.len() + 1);
    line.push_str(reason);
    line.push('\n');
    let mut response = Response::new(ProxyBody::local(Bytes::from(line)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
