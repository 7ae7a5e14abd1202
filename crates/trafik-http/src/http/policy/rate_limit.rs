//! The rate-limit stage: GCRA per key (client address, a header, a token claim, or the whole
//! route), counted in this process or, for a global limit, in Redis. A refused request gets 429
//! with `Retry-After` and `RateLimit-Limit/-Remaining/-Reset`; a passed one gets the
//! `RateLimit-*` headers on its response.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use http::{HeaderName, HeaderValue, Request, Response, StatusCode, header};

use super::auth::Claims;
use super::redis::{RedisGcra, Unavailable};
use super::{GlobalLimitStats, Stats, access_log, refusal};
use crate::counters::PerWorker;
use crate::http::body::{ProxyBody, RequestBody};
use crate::http::filter::{Exchange, Fields, Filter, OwnAnswer, Replayed, Step, Verdict, Waiting};
use crate::plan::{RateKey, RateLimitPlan};
use trafik_policy::gcra::{Decision, Gcra, Table};
use trafik_policy::stage::Stage;

/// Builds the local or the global limiter the plan asks for.
pub fn build(plan: &RateLimitPlan, stats: &mut Stats<'_>) -> Result<Box<dyn Filter>, String> {
    let limit = Limit {
        gcra: Gcra::new(plan.rate, plan.period.as_nanos() as u64, plan.burst),
        key: plan.key.clone(),
    };
    Ok(match &plan.global {
        None => Box::new(LocalLimit {
            limit,
            table: Mutex::default(),
            epoch: Instant::now(),
        }),
        Some(global) => {
            let counters = Arc::new(PerWorker::new(stats.workers));
            stats.global_limits.push(GlobalLimitStats {
                route: stats.route.to_owned(),
                counters: counters.clone(),
            });
            Box::new(GlobalLimit {
                limit,
                redis: RedisGcra::new(global, stats.workers, counters)?,
                fail_open: global.fail_open,
            })
        }
    })
}

/// What a request is counted by.
#[derive(Hash)]
enum KeyValue<'a> {
    Ip(IpAddr),
    Bytes(&'a [u8]),
    Text(String),
    /// The header or claim is absent: such requests share one count.
    Absent,
    Route,
}

impl KeyValue<'_> {
    /// The key's bytes in Redis.
    fn to_bytes(&self) -> Cow<'_, [u8]> {
        match self {
            KeyValue::Ip(ip) => Cow::Owned(ip.to_string().into_bytes()),
            KeyValue::Bytes(bytes) => Cow::Borrowed(bytes),
            KeyValue::Text(text) => Cow::Borrowed(text.as_bytes()),
            KeyValue::Absent => Cow::Borrowed(b"-"),
            KeyValue::Route => Cow::Borrowed(b""),
        }
    }
}

struct Limit {
    gcra: Gcra,
    key: RateKey,
}

static LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
static REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
static RESET: HeaderName = HeaderName::from_static("ratelimit-reset");

impl Limit {
    fn key<'r>(&self, fields: &'r dyn Fields, exchange: &Exchange<'_>) -> KeyValue<'r> {
        match &self.key {
            RateKey::ClientIp => KeyValue::Ip(exchange.connection.peer.ip()),
            RateKey::Header(name) => fields.get(name).map_or(KeyValue::Absent, KeyValue::Bytes),
            RateKey::Claim(claim) => exchange
                .notes
                .borrow()
                .get::<Claims>()
                .and_then(|claims| claims.0.text(claim))
                .map_or(KeyValue::Absent, KeyValue::Text),
            RateKey::Route => KeyValue::Route,
        }
    }

    /// The verdict `decision` gives a request counted by `key`.
    fn tell(&self, decision: Decision, key: &KeyValue<'_>) -> Verdict {
        let counted = match key {
            KeyValue::Ip(ip) => format!("client {ip}"),
            KeyValue::Absent => "requests without the key".to_owned(),
            KeyValue::Route => "the whole route".to_owned(),
            other => format!("key `{}`", String::from_utf8_lossy(&other.to_bytes())),
        };
        if decision.allowed {
            return Verdict {
                filter: "rate_limit",
                told: format!(
                    "passes: {} more of a burst of {} left for {counted}",
                    decision.remaining, decision.limit
                ),
                answer: None,
            };
        }
        let retry_after = Decision::seconds(decision.retry_after);
        Verdict {
            filter: "rate_limit",
            told: format!("refused: no tokens left for {counted}; Retry-After {retry_after} s"),
            answer: Some(OwnAnswer {
                status: 429,
                reason: "rate limit exceeded".into(),
                retry_after: Some(retry_after),
            }),
        }
    }

    /// Lets the request on (remembering the decision for the response) or answers 429.
    fn apply(
        &self,
        decision: Decision,
        exchange: &Exchange<'_>,
    ) -> Option<Box<Response<ProxyBody>>> {
        if decision.allowed {
            access_log::record(exchange, Stage::RateLimit, "pass");
            exchange.notes.borrow_mut().rate_limit = Some(decision);
            return None;
        }
        access_log::record(exchange, Stage::RateLimit, "refused: over the limit");
        let mut response = refusal(StatusCode::TOO_MANY_REQUESTS, "rate limit exceeded");
        write_headers(response.headers_mut(), &decision);
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(Decision::seconds(decision.retry_after)),
        );
        Some(Box::new(response))
    }

    fn on_response(fields: &mut dyn Fields, exchange: &Exchange<'_>) {
        if let Some(decision) = exchange.notes.borrow().rate_limit {
            write_headers(fields, &decision);
        }
    }
}

fn write_headers(fields: &mut dyn Fields, decision: &Decision) {
    fields.insert_numbers(&[
        (&LIMIT, decision.limit.into()),
        (&REMAINING, decision.remaining.into()),
        (&RESET, Decision::seconds(decision.reset)),
    ]);
}

/// Counts in this process, shared by its workers: one lock held for a hash-map lookup.
pub struct LocalLimit {
    limit: Limit,
    table: Mutex<Table>,
    epoch: Instant,
}

impl LocalLimit {
    /// Counts the request at `now` (nanoseconds on the limit's clock).
    fn decide(&self, fields: &dyn Fields, exchange: &Exchange<'_>, now: u64) -> Decision {
        let key = self.limit.key(fields, exchange);
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .decide(&self.limit.gcra, key, now)
    }
}

impl Filter for LocalLimit {
    fn fields_only(&self) -> bool {
        true
    }

    fn on_request_fields(
        &self,
        fields: &mut dyn Fields,
        exchange: &Exchange<'_>,
    ) -> Option<Box<Response<ProxyBody>>> {
        let now = self.epoch.elapsed().as_nanos() as u64;
        let decision = self.decide(fields, exchange, now);
        self.limit.apply(decision, exchange)
    }

    fn replay(
        &self,
        request: &Request<RequestBody>,
        exchange: &Exchange<'_>,
        now: u64,
    ) -> Option<Replayed> {
        Some(match &self.limit.key {
            RateKey::Header(_) => {
                Replayed::Unknowable("keyed by a header the access log does not keep")
            }
            RateKey::Claim(_) => {
                Replayed::Unknowable("keyed by a token claim the access log does not keep")
            }
            RateKey::ClientIp | RateKey::Route => {
                match self.decide(request.headers(), exchange, now).allowed {
                    true => Replayed::Passed,
                    false => Replayed::Refused,
                }
            }
        })
    }

    fn on_response_fields(&self, fields: &mut dyn Fields, exchange: &Exchange<'_>) {
        Limit::on_response(fields, exchange);
    }

    fn explain(&self, request: &Request<RequestBody>, exchange: &Exchange<'_>) -> Option<Verdict> {
        let key = self.limit.key(request.headers(), exchange);
        let now = self.epoch.elapsed().as_nanos() as u64;
        let decision = self
            .table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .peek(&self.limit.gcra, &key, now);
        Some(self.limit.tell(decision, &key))
    }
}

/// Counts in Redis, shared by every instance with the same Redis and key prefix.
pub struct GlobalLimit {
    limit: Limit,
    redis: RedisGcra,
    fail_open: bool,
}

impl Filter for GlobalLimit {
    fn on_request(&self, _: &mut Request<RequestBody>, _: &Exchange<'_>) -> Step {
        Step::Wait
    }

    fn wait<'a>(
        &'a self,
        request: &'a mut Request<RequestBody>,
        exchange: &'a Exchange<'a>,
    ) -> Waiting<'a> {
        let key = self
            .limit
            .key(request.headers(), exchange)
            .to_bytes()
            .into_owned();
        Box::pin(async move {
            match self
                .redis
                .decide(exchange.worker, &key, &self.limit.gcra)
                .await
            {
                Ok(decision) => Step::answering(self.limit.apply(decision, exchange)),
                Err(unavailable) => {
                    if let Unavailable::Failed(error) = unavailable {
                        tracing::debug!(%error, "redis unavailable");
                    }
                    self.decide_without_redis(exchange)
                }
            }
        })
    }

    fn on_response(&self, response: &mut Response<ProxyBody>, exchange: &Exchange<'_>) {
        Limit::on_response(response.headers_mut(), exchange);
    }

    fn explain(&self, _: &Request<RequestBody>, _: &Exchange<'_>) -> Option<Verdict> {
        Some(Verdict {
            filter: "rate_limit",
            told: "counted in Redis, shared by the fleet: decided only when sent".into(),
            answer: None,
        })
    }

    fn replay(&self, _: &Request<RequestBody>, _: &Exchange<'_>, _: u64) -> Option<Replayed> {
        Some(Replayed::Unknowable(
            "counted in Redis with the whole fleet's requests, which one log does not hold",
        ))
    }
}

impl GlobalLimit {
    /// Redis gave no decision: `on_redis_error` decides.
    fn decide_without_redis(&self, exchange: &Exchange<'_>) -> Step {
        if self.fail_open {
            access_log::record(
                exchange,
                Stage::RateLimit,
                "pass: redis unavailable, fail open",
            );
            return Step::Continue;
        }
        access_log::record(
            exchange,
            Stage::RateLimit,
            "refused: redis unavailable, fail closed",
        );
        Step::Respond(Box::new(refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "rate limiter unavailable",
        )))
    }
}
