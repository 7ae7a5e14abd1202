//! The gatekeeper stage (lesson 16): path, headers, token form and query first, from the head
//! alone; then the body's size by `Content-Length`; then, when the route has a body schema, the
//! body read up to the limit and judged. A refusal answers 404/401/400/413 with a one-line
//! reason and never reaches an upstream. Every check counts what it passed and refused, and the
//! body bytes it held back from the application.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use http::{Request, StatusCode, header};

use super::{GateStats, Stats, access_log, refusal};
use crate::counters::{PerWorker, add, bump, read};
use crate::error::ProxyError;
use crate::http::body::ErrorAnswer;
use crate::http::body::{BodyError, RequestBody};
use crate::http::filter::{Exchange, Filter, OwnAnswer, Step, Verdict, Waiting, declared_length};
use crate::plan::GatePlan;
use trafik_metrics_text::{Exposition, Kind};
use trafik_policy::gate::{self, Check, HeaderRule, Refusal, Rules};
use trafik_policy::stage::Stage;

/// One worker's counts for one gate.
#[derive(Debug, Default)]
pub struct GateCounters {
    passed: [AtomicU64; Check::ALL.len()],
    refused: [AtomicU64; Check::ALL.len()],
    /// Body bytes of refused requests (as declared, or read before the refusal): what the
    /// application did not have to receive.
    held_back: AtomicU64,
}

/// Sums of a gate's counters over the workers, for the admin API.
pub struct GateTotals {
    /// (check, passed, refused), for the checks the gate has.
    pub checks: Vec<(&'static str, i64, i64)>,
    pub held_back: i64,
}

impl GateStats {
    pub fn totals(&self) -> GateTotals {
        let checks = Check::ALL
            .iter()
            .enumerate()
            .map(|(i, check)| {
                let passed = self.counters.sum(|c| read(&c.passed[i]));
                let refused = self.counters.sum(|c| read(&c.refused[i]));
                (check.name(), passed, refused)
            })
            .filter(|(_, passed, refused)| passed + refused > 0)
            .collect();
        GateTotals {
            checks,
            held_back: self.counters.sum(|c| read(&c.held_back)),
        }
    }
}

/// The gates' counters in `/status`: per route, per check, passed and refused, and the body
/// bytes held back.
pub fn status(gates: &[GateStats]) -> serde_json::Value {
    let gates: Vec<_> = gates
        .iter()
        .map(|gate| {
            let totals = gate.totals();
            let checks: serde_json::Map<String, serde_json::Value> = totals
                .checks
                .iter()
                .map(|(check, passed, refused)| {
                    let counts = serde_json::json!({"passed": passed, "refused": refused});
                    ((*check).to_owned(), counts)
                })
                .collect();
            serde_json::json!({
                "route": gate.route,
                "checks": checks,
                "held_back_bytes": totals.held_back,
            })
        })
        .collect();
    serde_json::Value::Array(gates)
}

/// The same counters in Prometheus text; nothing without a gate.
pub fn metrics(gates: &[GateStats], exposition: &mut Exposition) {
    if gates.is_empty() {
        return;
    }
    let totals: Vec<_> = gates.iter().map(|g| (g, g.totals())).collect();
    let mut checks = exposition.family(
        "trafik_gate_checks_total",
        Kind::Counter,
        "Requests a gate check passed or refused.",
    );
    for (gate, total) in &totals {
        for (check, passed, refused) in &total.checks {
            for (verdict, count) in [("passed", passed), ("refused", refused)] {
                let labels = [
                    ("route", gate.route.as_str()),
                    ("check", check),
                    ("verdict", verdict),
                ];
                checks.sample(&labels, count);
            }
        }
    }
    let mut held_back = exposition.family(
        "trafik_gate_held_back_bytes_total",
        Kind::Counter,
        "Body bytes of requests a gate refused.",
    );
    for (gate, total) in &totals {
        held_back.sample(&[("route", &gate.route)], total.held_back);
    }
}

pub struct Gate {
    rules: Rules,
    body_limit: u64,
    counters: Arc<PerWorker<GateCounters>>,
}

impl Gate {
    pub fn new(plan: &GatePlan, stats: &mut Stats<'_>) -> Result<Gate, String> {
        let schema = |text: &Option<String>| -> Result<_, String> {
            text.as_deref()
                .map(|t| {
                    serde_json::from_str(t)
                        .map_err(|e| e.to_string())
                        .and_then(|v| gate::schema(&v))
                })
                .transpose()
        };
        let headers = plan
            .headers
            .iter()
            .map(|(name, pattern)| {
                Ok(HeaderRule {
                    name: name.as_str().to_owned(),
                    pattern: gate::pattern(pattern)?,
                })
            })
            .collect::<Result<_, String>>()?;
        let rules = Rules {
            paths: plan.paths.clone(),
            headers,
            token: plan.token.as_deref().map(gate::pattern).transpose()?,
            query_schema: schema(&plan.query_schema)?,
            body_schema: schema(&plan.body_schema)?,
        };
        let counters = Arc::new(PerWorker::new(stats.workers));
        stats.gates.push(GateStats {
            route: stats.route.to_owned(),
            counters: counters.clone(),
        });
        Ok(Gate {
            rules,
            body_limit: plan.body_limit,
            counters,
        })
    }

    fn pass(&self, exchange: &Exchange<'_>, check: Check) {
        bump(&self.counters.mine(exchange.worker).passed[check as usize]);
    }

    fn refuse(&self, exchange: &Exchange<'_>, refused: Refusal, held_back: u64) -> Step {
        let mine = self.counters.mine(exchange.worker);
        bump(&mine.refused[refused.check as usize]);
        add(&mine.held_back, held_back as usize);
        let status =
            StatusCode::from_u16(refused.check.status()).unwrap_or(StatusCode::BAD_REQUEST);
        access_log::record(
            exchange,
            Stage::Gate,
            format!("refused: {}", refused.reason),
        );
        Step::Respond(Box::new(refusal(status, &refused.reason)))
    }

    /// Runs one check, counting it; `Err` carries the refusal as the step to answer.
    fn check(
        &self,
        exchange: &Exchange<'_>,
        check: Check,
        outcome: Result<(), Refusal>,
        held_back: u64,
    ) -> Result<(), Step> {
        match outcome {
            Ok(()) => {
                self.pass(exchange, check);
                Ok(())
            }
            Err(refused) => Err(self.refuse(exchange, refused, held_back)),
        }
    }

    /// The checks of the request's head in order, each outcome handed to `judge` (which counts
    /// it when serving, and only reads it when explaining); stops at the first `Err`.
    fn head_checks<E>(
        &self,
        request: &Request<RequestBody>,
        mut judge: impl FnMut(Check, Result<(), Refusal>, u64) -> Result<(), E>,
    ) -> Result<(), E> {
        let declared = declared_length(request).unwrap_or(0);
        let headers = request.headers();
        if !self.rules.paths.is_empty() {
            let path = self.rules.check_path(request.uri().path());
            judge(Check::Path, path, declared)?;
        }
        if !self.rules.headers.is_empty() {
            let outcome = self
                .rules
                .check_headers(|name| headers.get(name).and_then(|v| v.to_str().ok()));
            judge(Check::Header, outcome, declared)?;
        }
        if self.rules.token.is_some() {
            let authorization = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok());
            let outcome = self.rules.check_token(authorization);
            judge(Check::Token, outcome, declared)?;
        }
        if self.rules.query_schema.is_some() {
            let outcome = self.rules.check_query(request.uri().query());
            judge(Check::Query, outcome, declared)?;
        }
        let size = if declared > self.body_limit {
            Err(Refusal {
                check: Check::Size,
                reason: format!("body over {} bytes", self.body_limit),
            })
        } else {
            Ok(())
        };
        judge(Check::Size, size, declared)
    }

    fn head(
        &self,
        request: &mut Request<RequestBody>,
        exchange: &Exchange<'_>,
    ) -> Result<(), Step> {
        self.head_checks(request, |check, outcome, declared| {
            self.check(exchange, check, outcome, declared)
        })?;
        // A body without Content-Length is counted as it streams and cut at the limit.
        request.body_mut().limit(self.body_limit);
        Ok(())
    }
}

impl Filter for Gate {
    fn on_request(&self, request: &mut Request<RequestBody>, exchange: &Exchange<'_>) -> Step {
        if let Err(refused) = self.head(request, exchange) {
            return refused;
        }
        if self.rules.reads_body() {
            return Step::Wait;
        }
        access_log::record(exchange, Stage::Gate, "pass");
        Step::Continue
    }

    fn explain(&self, request: &Request<RequestBody>, _: &Exchange<'_>) -> Option<Verdict> {
        Some(match self.head_checks(request, |_, outcome, _| outcome) {
            Ok(()) if self.rules.reads_body() => Verdict {
                filter: "gate",
                told: "the head passes; the body's schema is checked only when it is sent".into(),
                answer: None,
            },
            Ok(()) => Verdict {
                filter: "gate",
                told: "passes every check".into(),
                answer: None,
            },
            Err(refused) => Verdict {
                filter: "gate",
                told: format!(
                    "refused by its {} check: {}",
                    refused.check.name(),
                    refused.reason
                ),
                answer: Some(OwnAnswer {
                    status: refused.check.status(),
                    reason: refused.reason,
                    retry_after: None,
                }),
            },
        })
    }

    fn wait<'a>(
        &'a self,
        request: &'a mut Request<RequestBody>,
        exchange: &'a Exchange<'a>,
    ) -> Waiting<'a> {
        Box::pin(async move {
            let body = match request.body_mut().read_whole(self.body_limit).await {
                Ok(body) => body,
                Err(BodyError::TooLarge { limit }) => {
                    let refused = Refusal {
                        check: Check::Size,
                        reason: format!("body over {limit} bytes"),
                    };
                    return self.refuse(exchange, refused, limit);
                }
                Err(BodyError::Client(_)) => {
                    let refused = Refusal {
                        check: Check::Body,
                        reason: "the body did not arrive whole".into(),
                    };
                    return self.refuse(exchange, refused, 0);
                }
                // The listener's minimum body rate, not a gate check: its own answer (408).
                Err(BodyError::TooSlow { .. }) => {
                    access_log::record(exchange, Stage::Gate, "refused: body too slow");
                    return Step::Respond(Box::new(ProxyError::BodyTooSlow.response()));
                }
                Err(error @ BodyError::Spill(_)) => {
                    return Step::Respond(Box::new(error.refusal().response()));
                }
            };
            let outcome = self.rules.check_body(&body);
            if let Err(step) = self.check(exchange, Check::Body, outcome, body.len() as u64) {
                return step;
            }
            access_log::record(exchange, Stage::Gate, "pass");
            Step::Continue
        })
    }
}
