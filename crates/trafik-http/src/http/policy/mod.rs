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
use trafik_metrics_text::{Exposition, Kind};

/// What building a route's filters gathers for the admin API.
pub struct Stats<'a> {
    /// The route, as `/status` names it: `LISTENER PATH_PREFIX`.
    pub route: &'a str,
    pub workers: usize,
    pub gates: &'a mut Vec<GateStats>,
    pub global_limits: &'a mut Vec<GlobalLimitStats>,
    pub edge: &'a mut EdgeStats,
}

/// The counters of the routes' CORS and compression steps.
#[derive(Default)]
pub struct EdgeStats {
    pub cors: Vec<crate::http::cors::CorsStats>,
    pub compress: Vec<crate::http::compress::CompressStats>,
}

impl EdgeStats {
    /// `/status`'s `cors` and `compress` lists: per route, each counter summed over workers.
    pub fn status(&self) -> (serde_json::Value, serde_json::Value) {
        let entry = |route: &str, totals: &[(&'static str, i64)]| {
            let mut entry = serde_json::Map::new();
            entry.insert("route".into(), route.into());
            for (name, total) in totals {
                entry.insert((*name).into(), (*total).into());
            }
            serde_json::Value::Object(entry)
        };
        let cors = self
            .cors
            .iter()
            .map(|c| entry(&c.route, &c.totals()))
            .collect();
        let compress = self
            .compress
            .iter()
            .map(|c| entry(&c.route, &c.totals()))
            .collect();
        (
            serde_json::Value::Array(cors),
            serde_json::Value::Array(compress),
        )
    }

    /// The same counters in Prometheus text: `trafik_cors_total{route,outcome}`,
    /// `trafik_compress_answers_total{route,outcome}` and `trafik_compress_bytes_total
    /// {route,direction}`; nothing for routes without them.
    pub fn metrics(&self, exposition: &mut Exposition) {
        if !self.cors.is_empty() {
            let mut family = exposition.family(
                "trafik_cors_total",
                Kind::Counter,
                "Cross-origin requests and preflights, by outcome.",
            );
            for cors in &self.cors {
                for (outcome, total) in cors.totals() {
                    family.sample(
                        &[("route", cors.route.as_str()), ("outcome", outcome)],
                        total,
                    );
                }
            }
        }
        if self.compress.is_empty() {
            return;
        }
        let totals: Vec<_> = self.compress.iter().map(|c| (c, c.totals())).collect();
        let mut answers = exposition.family(
            "trafik_compress_answers_total",
            Kind::Counter,
            "Answers of compressing routes: compressed by coding, or why not.",
        );
        for (compress, totals) in &totals {
            for (outcome, total) in totals.iter().filter(|(n, _)| !n.starts_with("bytes_")) {
                answers.sample(
                    &[("route", compress.route.as_str()), ("outcome", *outcome)],
                    *total,
                );
            }
        }
        let mut bytes = exposition.family(
            "trafik_compress_bytes_total",
            Kind::Counter,
            "Bytes into and out of the compressors.",
        );
        for (compress, totals) in &totals {
            for (name, total) in totals.iter().filter(|(n, _)| n.starts_with("bytes_")) {
                let direction = name.trim_start_matches("bytes_");
                bytes.sample(
                    &[("route", compress.route.as_str()), ("direction", direction)],
                    *total,
                );
            }
        }
    }
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
