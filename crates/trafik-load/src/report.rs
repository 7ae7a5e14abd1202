//! A run's report: everything as JSON, a readable summary, and the profile tables.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::journey::{ScenarioReport, ThresholdResult};
use crate::merge::AgentReport;
use crate::record::{
    self, CurvePoint, Errors, Interval, Percentiles, Quarters, SpikeReport, Tenth,
};
use crate::runner::RunResult;

/// Which latency a threshold applies to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThresholdOn {
    /// `latency` (corrected, from the intended send) or `service` (from the actual send).
    pub metric: String,
    /// p50, p90, p95, p99, p999 or max.
    pub percentile: String,
}

impl std::str::FromStr for ThresholdOn {
    type Err = String;

    /// `p95`, `latency.p95` or `service.p99`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (metric, percentile) = text.split_once('.').unwrap_or(("latency", text));
        let known = ["p50", "p90", "p95", "p99", "p999", "max"];
        if !matches!(metric, "latency" | "service") || !known.contains(&percentile) {
            return Err(format!(
                "unknown threshold metric {text:?}: expected one of {} (latency from the intended send), or service.p95 and the like (from the actual send)",
                known.join(", ")
            ));
        }
        Ok(ThresholdOn {
            metric: metric.into(),
            percentile: percentile.into(),
        })
    }
}

/// The share of finished requests that may fail before the run fails, written `1%` (a
/// percentage) or `0.01` (a fraction). Serialized as the fraction.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct MaxErrorRate(f64);

impl MaxErrorRate {
    /// The fraction, from 0 to 1.
    pub fn fraction(self) -> f64 {
        self.0
    }
}

impl std::str::FromStr for MaxErrorRate {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let number = |digits: &str| {
            digits.trim().parse::<f64>().map_err(|_| {
                format!("expected a percentage such as 1% or a fraction such as 0.01, not {text:?}")
            })
        };
        if let Some(percent) = text.strip_suffix('%') {
            let percent = number(percent)?;
            if !(0.0..=100.0).contains(&percent) {
                return Err("expected a percentage between 0 % and 100 %".into());
            }
            return Ok(MaxErrorRate(percent / 100.0));
        }
        let fraction = number(text)?;
        if fraction > 1.0 && fraction <= 100.0 {
            return Err(format!(
                "a fraction is between 0 and 1; did you mean {text}%?"
            ));
        }
        if !(0.0..=1.0).contains(&fraction) {
            return Err("a fraction is between 0 and 1 (or write a percentage such as 1%)".into());
        }
        Ok(MaxErrorRate(fraction))
    }
}

impl std::fmt::Display for MaxErrorRate {
    /// As a percentage without trailing zeros: `1 %`, `0.5 %`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let percent = format!("{:.4}", self.0 * 100.0);
        let percent = percent.trim_end_matches('0').trim_end_matches('.');
        write!(f, "{percent} %")
    }
}

/// The profile tables' inputs.
#[derive(Clone, Debug, PartialEq)]
pub enum ProfileShape {
    Plain,
    Load,
    Soak,
    Spike {
        base: f64,
        factor: f64,
        at_s: f64,
        length_s: f64,
    },
}

/// The server's own counters before and after the run.
#[derive(Clone, Debug, Serialize)]
pub struct ServerCounters {
    pub url: String,
    pub before: serde_json::Value,
    pub after: serde_json::Value,
    /// after − before for every numeric field.
    pub difference: serde_json::Value,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub url: String,
    pub profile: Option<String>,
    /// "open" (rate plan) or "closed" (`--max`).
    pub pacing: &'static str,
    pub duration_s: f64,
    /// Mean planned rate; null in a closed loop.
    pub target_rate: Option<f64>,
    /// Requests sent per second of the send window (closed loop: completed per second).
    pub achieved_rate: f64,
    pub planned: u64,
    pub sent: u64,
    pub completed: u64,
    pub late: u64,
    pub dropped: u64,
    pub errors: Errors,
    /// Why TLS handshakes failed (`errors.tls`), the first few distinct reasons with how often.
    pub tls_failures: BTreeMap<String, u64>,
    /// Failed requests over finished ones (completed or failed).
    pub error_rate: f64,
    pub max_error_rate: MaxErrorRate,
    pub connections_opened: u64,
    /// Requests with a latency: every answer, whatever its status, and every timeout.
    pub measured: u64,
    /// From the intended send time: what a user waiting on the schedule sees.
    pub latency_ms: Percentiles,
    /// From the actual send: what the server took.
    pub service_time_ms: Percentiles,
    /// `latency_ms` at every percentile HdrHistogram would print, for the report's curve.
    pub percentile_curve: Vec<CurvePoint>,
    pub threshold_ms: Option<f64>,
    pub threshold_on: ThresholdOn,
    /// Corrected latencies above the threshold.
    pub over_threshold: u64,
    /// Whether the threshold held; null without one. Nothing measured does not hold it.
    pub threshold_passed: Option<bool>,
    /// The threshold held and the error rate stayed within its limit.
    pub passed: bool,
    /// Why the run did not pass, one sentence each; empty when it passed.
    pub failures: Vec<String>,
    /// The open loop sent its plan: nothing dropped and at least 99 % of the target rate.
    pub rate_held: bool,
    pub intervals: Vec<Interval>,
    /// 100 ms buckets by when requests ended (none in a distributed run: percentiles of
    /// 100 ms on each machine do not merge).
    pub buckets_100ms: Vec<Tenth>,
    pub quarters: Option<Quarters>,
    pub spike: Option<SpikeReport>,
    pub server_counters: Option<ServerCounters>,
    /// A scenario's steps, flows and thresholds (`steps`, `flows` and `thresholds` in the
    /// JSON); absent from a plain run.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub scenario: Option<ScenarioReport>,
    /// A distributed run's agents; absent from a run on one machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<AgentReport>>,
}

/// Everything the report needs beyond the run's measurements.
pub struct ReportInputs {
    pub url: String,
    pub profile: Option<String>,
    pub shape: ProfileShape,
    pub target_rate: Option<f64>,
    pub threshold_ms: Option<f64>,
    pub threshold_on: ThresholdOn,
    pub max_error_rate: MaxErrorRate,
    pub server_counters: Option<ServerCounters>,
}

impl Report {
    pub fn new(run: RunResult, inputs: ReportInputs) -> Report {
        let recorder = &run.recorder;
        let window = run.window.as_secs_f64().max(f64::MIN_POSITIVE);
        let mut intervals: Vec<Interval> =
            recorder.closed.values().map(|(i, _)| i.clone()).collect();
        for interval in &mut intervals {
            interval.planned = run
                .planned_per_second
                .get(interval.second as usize)
                .copied()
                .unwrap_or(0);
            interval.sent = interval.completed + interval.errors;
        }
        let latency_ms = Percentiles::of(&recorder.corrected);
        let service_time_ms = Percentiles::of(&recorder.service);
        let threshold_us = inputs.threshold_ms.map(|ms| (ms * 1000.0) as u64);
        let over_threshold =
            threshold_us.map_or(0, |t| record::count_above(&recorder.corrected, t));
        let on = &inputs.threshold_on;
        let value = if recorder.corrected.is_empty() {
            None
        } else if on.metric == "service" {
            service_time_ms.get(&on.percentile)
        } else {
            latency_ms.get(&on.percentile)
        };
        let mut failures = Vec::new();
        let errors = recorder.errors.total();
        let finished = recorder.completed + errors;
        let error_rate = if finished == 0 {
            0.0
        } else {
            errors as f64 / finished as f64
        };
        if error_rate > inputs.max_error_rate.fraction() {
            failures.push(format!(
                "{:.1} % of requests failed (limit {}): {}",
                100.0 * error_rate,
                inputs.max_error_rate,
                recorder.errors.describe()
            ));
        }
        let threshold_passed = inputs.threshold_ms.map(|limit| match value {
            Some(value) if value <= limit => true,
            Some(value) => {
                failures.push(format!(
                    "{}.{} was {value:.2} ms, over the {limit} ms threshold",
                    on.metric, on.percentile
                ));
                false
            }
            None => {
                failures.push(format!(
                    "{}.{} could not be measured: no request was answered or timed out",
                    on.metric, on.percentile
                ));
                false
            }
        });
        let achieved_rate = match inputs.target_rate {
            Some(_) => run.sent as f64 / window,
            None => recorder.completed as f64 / window,
        };
        let rate_held = inputs
            .target_rate
            .is_none_or(|target| run.dropped == 0 && achieved_rate >= 0.99 * target);
        let quarters = matches!(inputs.shape, ProfileShape::Soak).then(|| {
            let seconds: Vec<_> = recorder
                .closed
                .iter()
                .filter_map(|(s, (_, h))| Some((*s, h.as_ref()?)))
                .collect();
            record::quarters(&seconds, window, threshold_us.unwrap_or(u64::MAX))
        });
        let spike = match inputs.shape {
            ProfileShape::Spike {
                base,
                factor,
                at_s,
                length_s,
            } => Some(record::spike(
                &intervals,
                base,
                factor,
                at_s,
                length_s,
                inputs.threshold_ms.unwrap_or(f64::INFINITY),
                over_threshold,
            )),
            _ => None,
        };
        Report {
            url: inputs.url,
            profile: inputs.profile,
            pacing: if inputs.target_rate.is_some() {
                "open"
            } else {
                "closed"
            },
            duration_s: run.window.as_secs_f64(),
            target_rate: inputs.target_rate,
            achieved_rate,
            planned: run.planned,
            sent: run.sent,
            completed: recorder.completed,
            late: run.late,
            dropped: run.dropped,
            errors: recorder.errors.clone(),
            tls_failures: run.tls_failures.clone(),
            error_rate,
            max_error_rate: inputs.max_error_rate,
            connections_opened: run.connections_opened,
            measured: recorder.corrected.len(),
            latency_ms,
            service_time_ms,
            percentile_curve: record::percentile_curve(&recorder.corrected),
            threshold_ms: inputs.threshold_ms,
            threshold_on: inputs.threshold_on,
            over_threshold,
            threshold_passed,
            passed: failures.is_empty(),
            failures,
            rate_held,
            intervals,
            buckets_100ms: recorder.tenths.clone(),
            quarters,
            spike,
            server_counters: inputs.server_counters,
            scenario: None,
            agents: None,
        }
    }

    /// Adds a distributed run's agents; one that died fails the run.
    pub fn with_agents(mut self, agents: Vec<AgentReport>) -> Report {
        for agent in agents.iter().filter(|a| !a.reported) {
            self.failures.push(if self.target_rate.is_some() {
                format!(
                    "agent {} stopped before reporting: its {} planned requests ({:.0} % of the plan) were not measured",
                    agent.name,
                    agent.planned,
                    100.0 * agent.share
                )
            } else {
                // A closed loop plans nothing: what the agent sent is simply missing.
                format!(
                    "agent {} stopped before reporting: its closed loop was not measured",
                    agent.name
                )
            });
        }
        self.passed = self.failures.is_empty();
        self.agents = Some(agents);
        self
    }

    /// Adds a scenario's steps and flows; a failed threshold fails the run.
    pub fn with_scenario(mut self, scenario: ScenarioReport) -> Report {
        self.failures.extend(scenario.failures());
        self.passed = self.failures.is_empty();
        self.scenario = Some(scenario);
        self
    }

    /// The readable summary.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let profile = self
            .profile
            .as_deref()
            .map(|p| format!(" ({p} test)"))
            .unwrap_or_default();
        match self.target_rate {
            Some(rate) => {
                // A scenario's plan starts flows (virtual users), each of several requests.
                let unit = if self.scenario.is_some() {
                    "flows"
                } else {
                    "req"
                };
                let _ = writeln!(
                    out,
                    "trafik load {}: open loop, {rate:.2} {unit}/s planned for {:.1} s{profile}",
                    self.url, self.duration_s
                );
                let _ = writeln!(
                    out,
                    "  sent {} of {} planned: {:.2} {unit}/s = {:.2}% of target; late {}, dropped {}; {} connections",
                    self.sent,
                    self.planned,
                    self.achieved_rate,
                    100.0 * self.achieved_rate / rate,
                    self.late,
                    self.dropped,
                    self.connections_opened
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "trafik load {}: closed loop on {} connections for {:.1} s",
                    self.url, self.connections_opened, self.duration_s
                );
                let _ = writeln!(out, "  {:.2} req/s", self.achieved_rate);
            }
        }
        let kinds = self.errors.describe();
        let _ = writeln!(
            out,
            "  completed {}, errors {} ({:.1} % of finished requests, limit {}){}{kinds}",
            self.completed,
            self.errors.total(),
            100.0 * self.error_rate,
            self.max_error_rate,
            if kinds.is_empty() { "" } else { ": " }
        );
        if !self.tls_failures.is_empty() {
            let reasons: Vec<String> = self
                .tls_failures
                .iter()
                .map(|(reason, times)| format!("{times} × {reason}"))
                .collect();
            let _ = writeln!(out, "  TLS handshakes failed: {}", reasons.join("; "));
        }
        let line = |name: &str, p: &Percentiles| {
            format!(
                "  {name:<13} p50 {:.2}  p90 {:.2}  p95 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2} ms\n",
                p.p50, p.p90, p.p95, p.p99, p.p999, p.max
            )
        };
        if self.measured == 0 {
            out.push_str("  latency       none: no request was answered or timed out\n");
        } else {
            out.push_str(&line("latency", &self.latency_ms));
            out.push_str(&line("service time", &self.service_time_ms));
        }
        out.push_str("  (latency counts from when each request was due, so a stall shows; service time from when it went out;\n   both cover every answer, whatever its status, and every timeout, at the timeout)\n");
        if let (Some(limit), Some(passed)) = (self.threshold_ms, self.threshold_passed) {
            let on = &self.threshold_on;
            let share = 100.0 * self.over_threshold as f64 / self.measured.max(1) as f64;
            let _ = writeln!(
                out,
                "  threshold {}.{} ≤ {limit} ms: {} ({} requests over {limit} ms, {share:.2}%)",
                on.metric,
                on.percentile,
                if passed { "PASSED" } else { "FAILED" },
                self.over_threshold
            );
        }
        if !self.rate_held {
            out.push_str("  the generator could not hold the target rate (see late/dropped): add --max-connections or CPU\n");
        }
        if let Some(scenario) = &self.scenario {
            scenario.render(&mut out);
        }
        for agent in self.agents.iter().flatten() {
            let _ = writeln!(
                out,
                "  agent {}: {}",
                agent.name,
                if agent.reported {
                    format!(
                        "sent {} of {} planned, completed {}, errors {}",
                        agent.sent, agent.planned, agent.completed, agent.errors
                    )
                } else {
                    format!(
                        "DIED before reporting; {} planned requests not measured",
                        agent.planned
                    )
                }
            );
        }
        if let Some(q) = &self.quarters {
            out.push_str("\n  quarter  requests   p50 ms   p95 ms   p99 ms  over threshold\n");
            for r in &q.rows {
                let _ = writeln!(
                    out,
                    "  {:>7}  {:>8}  {:>7.2}  {:>7.2}  {:>7.2}  {:>14}",
                    r.quarter, r.requests, r.p50, r.p95, r.p99, r.over_threshold
                );
            }
            let ratio = &q.last_over_first;
            let _ = writeln!(
                out,
                "  last/first quarter: p50 {:.2}×, p95 {:.2}×, p99 {:.2}×",
                ratio.p50, ratio.p95, ratio.p99
            );
        }
        if let Some(spike) = &self.spike {
            out.push_str("\n  second  planned  completed   p50 ms    p95 ms  over threshold\n");
            for i in &self.intervals {
                let _ = writeln!(
                    out,
                    "  {:>6}  {:>7}  {:>9}  {:>7.2}  {:>8.2}  {:>14}",
                    i.second,
                    i.planned,
                    i.completed,
                    i.latency_ms.p50,
                    i.latency_ms.p95,
                    i.over_threshold
                );
            }
            let recovery = spike
                .recovery_s
                .map_or("did not come back within the run".to_owned(), |s| {
                    format!("{s:.2} s after the spike ended")
                });
            let _ = writeln!(
                out,
                "  extra requests sent by the spike {}; p95 back under the threshold {recovery}",
                spike.extra_requests
            );
            let _ = writeln!(
                out,
                "  requests over the threshold {} = {:.2}× the extra requests",
                spike.over_threshold, spike.over_per_extra
            );
        }
        if let Some(counters) = &self.server_counters {
            let _ = writeln!(
                out,
                "\n  server counters ({}): before {} after {} difference {}",
                counters.url, counters.before, counters.after, counters.difference
            );
        }
        out
    }
}

impl ScenarioReport {
    /// The per-step table, the flows and the thresholds.
    fn render(&self, out: &mut String) {
        let verdicts = |thresholds: &[ThresholdResult]| {
            thresholds
                .iter()
                .map(|t| {
                    let verdict = if t.passed { "passed" } else { "FAILED" };
                    format!("{} {verdict}", t.threshold)
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let width = self
            .steps
            .iter()
            .map(|s| s.flow.chars().count() + s.name.chars().count() + 1)
            .max()
            .unwrap_or(0)
            .max(4);
        let _ = writeln!(
            out,
            "\n  {:<width$}  {:>7}  {:>9}  {:>13}  {:>6}  {:>8}  {:>8}  thresholds",
            "step", "sent", "completed", "failed checks", "errors", "p50 ms", "p99 ms"
        );
        for step in &self.steps {
            let _ = writeln!(
                out,
                "  {:<width$}  {:>7}  {:>9}  {:>13}  {:>6}  {:>8.2}  {:>8.2}  {}",
                format!("{}/{}", step.flow, step.name),
                step.sent,
                step.completed,
                step.failed_checks,
                step.errors,
                step.latency_ms.p50,
                step.latency_ms.p99,
                verdicts(&step.thresholds)
            );
            for (reason, count) in &step.failures {
                let _ = writeln!(out, "  {:<width$}    {count} × {reason}", "");
            }
        }
        for flow in &self.flows {
            let _ = writeln!(
                out,
                "  flow {} (weight {}): started {}, completed {}, failed {}, unfinished {}",
                flow.name, flow.weight, flow.started, flow.completed, flow.failed, flow.unfinished
            );
        }
        if !self.thresholds.is_empty() {
            let _ = writeln!(out, "  every step: {}", verdicts(&self.thresholds));
        }
    }
}

/// after − before for every numeric field of two JSON objects (others are left out).
pub fn difference(before: &serde_json::Value, after: &serde_json::Value) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    if let (Some(b), Some(a)) = (before.as_object(), after.as_object()) {
        for (key, value) in a {
            if let (Some(x), Some(y)) = (value.as_f64(), b.get(key).and_then(|v| v.as_f64())) {
                let d = x - y;
                let number = if d.fract() == 0.0 && d.abs() < 9e15 {
                    serde_json::json!(d as i64)
                } else {
                    serde_json::json!(d)
                };
                out.insert(key.clone(), number);
            }
        }
    }
    serde_json::Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_metrics_parse_and_unknown_ones_are_refused() {
        assert_eq!(
            "p99".parse::<ThresholdOn>().unwrap(),
            ThresholdOn {
                metric: "latency".into(),
                percentile: "p99".into()
            }
        );
        assert_eq!(
            "service.max".parse::<ThresholdOn>().unwrap().metric,
            "service"
        );
        assert!(
            "p97"
                .parse::<ThresholdOn>()
                .unwrap_err()
                .contains("unknown threshold metric")
        );
        assert!("cpu.p95".parse::<ThresholdOn>().is_err());
    }

    #[test]
    fn the_error_rate_limit_is_a_percentage_or_a_fraction() {
        let parse = |text: &str| text.parse::<MaxErrorRate>().map(MaxErrorRate::fraction);
        assert_eq!(parse("1%"), Ok(0.01));
        assert_eq!(parse("0.01"), Ok(0.01));
        assert_eq!(parse("0.5 %"), Ok(0.005));
        assert_eq!(parse("100%"), Ok(1.0));
        assert_eq!(parse("0"), Ok(0.0));
        assert!(parse("5").unwrap_err().contains("did you mean 5%?"));
        assert!(parse("101%").unwrap_err().contains("between 0 % and 100 %"));
        assert!(parse("-1%").is_err());
        assert!(parse("NaN").is_err());
        assert!(parse("%").unwrap_err().contains("expected a percentage"));
        assert_eq!("1%".parse::<MaxErrorRate>().unwrap().to_string(), "1 %");
        assert_eq!(
            "0.125".parse::<MaxErrorRate>().unwrap().to_string(),
            "12.5 %"
        );
    }

    #[test]
    fn counters_difference_keeps_numbers_only() {
        let before = serde_json::json!({"istek": 1, "kayit": 1, "kat": 600, "ad": "x"});
        let after = serde_json::json!({"istek": 6167, "kayit": 6166, "kat": 600, "ad": "x"});
        assert_eq!(
            difference(&before, &after),
            serde_json::json!({"istek": 6166, "kayit": 6165, "kat": 0})
        );
    }
}
