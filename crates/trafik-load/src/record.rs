//! Latency recording. Workers hand their samples to one aggregator, which keeps the run's
//! histograms (HdrHistogram): overall corrected and service latency, and per second of intended
//! send time. Seconds that can no longer change are folded into summaries, so a long soak keeps
//! only a few histograms alive.
//!
//! Every answer is measured, whatever its status, and so is every timeout (at the timeout): a
//! failing server must not look fast. Only requests that got no answer and did not wait it out
//! (a refused connect, a reset, bytes that are not HTTP) have no latency; they are counted by
//! kind, as every error is.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// One finished (or failed) request.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// The second of the run in which it was meant to be sent.
    pub second: u32,
    /// From the intended send time to the end of the response (or the timeout), in microseconds.
    pub corrected_us: u64,
    /// From the actual send to the end of the response (or the timeout), in microseconds.
    pub service_us: u64,
    /// When it ended, in milliseconds since the run started (for the 100 ms buckets).
    pub done_ms: u32,
    pub outcome: Outcome,
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A final answer with this status, whatever it is.
    Status(u16),
    /// Nothing listens on the target's port.
    ConnectRefused,
    /// Connecting failed otherwise (unreachable, no local port left, …).
    ConnectFailed,
    /// The TLS handshake failed (a certificate not trusted, no common version, …).
    Tls,
    /// The connection was reset or closed before the whole answer arrived.
    Reset,
    /// The server's bytes were not valid HTTP.
    Protocol,
    /// No whole answer within the timeout.
    Timeout,
    /// A scenario step's answer that passed its checks, whatever its status.
    Passed,
    /// A scenario step's answer that failed a check (its status, its body, a capture).
    FailedCheck,
}

impl Outcome {
    /// Whether the request failed: anything but a 2xx or 3xx answer (k6 counts the same way).
    pub fn is_error(self) -> bool {
        match self {
            Outcome::Status(status) => !(200..400).contains(&status),
            Outcome::Passed => false,
            _ => true,
        }
    }

    /// Whether the request has a latency: it was answered, or it waited for the whole timeout.
    pub fn is_measured(self) -> bool {
        matches!(
            self,
            Outcome::Status(_) | Outcome::Timeout | Outcome::Passed | Outcome::FailedCheck
        )
    }
}

/// Errors by kind.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Errors {
    pub connect_refused: u64,
    pub connect_failed: u64,
    /// TLS handshakes that failed.
    pub tls: u64,
    /// Reset or closed by the server before the whole answer.
    pub reset: u64,
    /// Answers that were not valid HTTP (a bad head, a chunk size out of range, …).
    pub protocol: u64,
    pub timeout: u64,
    pub status_4xx: u64,
    pub status_5xx: u64,
    /// A final status outside 200–599, such as 101 Switching Protocols.
    pub status_other: u64,
    /// Scenario steps answered, but not as their checks expect: counted apart from failures to
    /// get an answer.
    pub failed_check: u64,
}

impl Errors {
    fn count(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Status(200..=399) | Outcome::Passed => {}
            Outcome::FailedCheck => self.failed_check += 1,
            Outcome::Status(400..=499) => self.status_4xx += 1,
            Outcome::Status(500..=599) => self.status_5xx += 1,
            Outcome::Status(_) => self.status_other += 1,
            Outcome::ConnectRefused => self.connect_refused += 1,
            Outcome::ConnectFailed => self.connect_failed += 1,
            Outcome::Tls => self.tls += 1,
            Outcome::Reset => self.reset += 1,
            Outcome::Protocol => self.protocol += 1,
            Outcome::Timeout => self.timeout += 1,
        }
    }

    /// Every kind with its count, named so that "N name" reads as a sentence.
    pub fn kinds(&self) -> [(&'static str, u64); 10] {
        [
            ("connect refused", self.connect_refused),
            ("connect failed", self.connect_failed),
            ("TLS handshake failed", self.tls),
            ("reset", self.reset),
            ("protocol error", self.protocol),
            ("timed out", self.timeout),
            ("answered 4xx", self.status_4xx),
            ("answered 5xx", self.status_5xx),
            ("answered another status", self.status_other),
            ("failed a check", self.failed_check),
        ]
    }

    /// Adds another run's counts (an agent's, in a distributed run).
    pub fn add(&mut self, other: &Errors) {
        self.connect_refused += other.connect_refused;
        self.connect_failed += other.connect_failed;
        self.tls += other.tls;
        self.reset += other.reset;
        self.protocol += other.protocol;
        self.timeout += other.timeout;
        self.status_4xx += other.status_4xx;
        self.status_5xx += other.status_5xx;
        self.status_other += other.status_other;
        self.failed_check += other.failed_check;
    }

    pub fn total(&self) -> u64 {
        self.kinds().iter().map(|(_, count)| count).sum()
    }

    /// The kinds that occurred, as "300 connect refused, 2 timed out"; empty when none did.
    pub fn describe(&self) -> String {
        self.kinds()
            .iter()
            .filter(|(_, count)| *count > 0)
            .map(|(name, count)| format!("{count} {name}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(histogram: &Histogram<u64>) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        if histogram.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            p50: ms(histogram.value_at_quantile(0.50)),
            p90: ms(histogram.value_at_quantile(0.90)),
            p95: ms(histogram.value_at_quantile(0.95)),
            p99: ms(histogram.value_at_quantile(0.99)),
            p999: ms(histogram.value_at_quantile(0.999)),
            max: ms(histogram.max()),
        }
    }

    /// The named percentile: p50, p90, p95, p99, p999 or max.
    pub fn get(&self, name: &str) -> Option<f64> {
        Some(match name {
            "p50" => self.p50,
            "p90" => self.p90,
            "p95" => self.p95,
            "p99" => self.p99,
            "p999" => self.p999,
            "max" => self.max,
            _ => return None,
        })
    }
}

/// Distinct TLS failure reasons kept; further ones are counted as "other".
const MAX_TLS_REASONS: usize = 5;

/// Why TLS handshakes failed, with how often, in rustls' words ("invalid peer certificate:
/// UnknownIssuer"): a wrong CA, name or version is told, not only counted. The first few
/// distinct reasons are kept, so a server that fails in many ways cannot grow the report.
#[derive(Debug, Default)]
pub struct TlsReasons(std::sync::Mutex<BTreeMap<String, u64>>);

impl TlsReasons {
    pub fn count(&self, reason: &str) {
        let mut reasons = self.0.lock().unwrap_or_else(|p| p.into_inner());
        add_reason(&mut reasons, reason, 1);
    }

    pub fn take(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Counts `reason` `times` in `reasons`, as "other" past the first few distinct ones.
pub fn add_reason(reasons: &mut BTreeMap<String, u64>, reason: &str, times: u64) {
    let reason = reason.strip_prefix("TLS: ").unwrap_or(reason);
    let key = if reasons.len() < MAX_TLS_REASONS || reasons.contains_key(reason) {
        reason
    } else {
        "other"
    };
    *reasons.entry(key.to_owned()).or_default() += times;
}

/// A point of the percentile curve: `percentile` % of the measured requests took at most `ms`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct CurvePoint {
    pub percentile: f64,
    pub ms: f64,
}

/// Latency by percentile as HdrHistogram prints it: the steps halve towards 100 %, so the tail
/// (99.9, 99.99 …) has as many points as the middle and reads on a log axis of 1/(1-p).
pub fn percentile_curve(histogram: &Histogram<u64>) -> Vec<CurvePoint> {
    let mut points: Vec<CurvePoint> = Vec::new();
    for step in histogram.iter_quantiles(CURVE_TICKS) {
        let quantile = step.quantile_iterated_to();
        // The values as the percentile table reads them, so the two agree to the microsecond.
        let us = if quantile < 1.0 {
            histogram.value_at_quantile(quantile)
        } else {
            histogram.max()
        };
        let point = CurvePoint {
            percentile: 100.0 * quantile,
            ms: us as f64 / 1000.0,
        };
        // The iterator repeats a percentile when one bucket spans several ticks: keep the last.
        match points.last_mut() {
            Some(last) if last.percentile == point.percentile => *last = point,
            _ => points.push(point),
        }
    }
    points
}

/// Points per halving of the distance to 100 % (HdrHistogram's own default is 5).
const CURVE_TICKS: u32 = 4;

/// One second of the run, by intended send time.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Interval {
    pub second: u32,
    /// Requests the plan meant to send in this second.
    pub planned: u64,
    /// Requests sent.
    pub sent: u64,
    /// Requests answered 2xx or 3xx.
    pub completed: u64,
    pub errors: u64,
    /// Corrected latency of this second's answers and timeouts.
    pub latency_ms: Percentiles,
    pub over_threshold: u64,
}

/// 100 ms of the run by when requests ended: the live view's and the JSON's finest grain.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Tenth {
    /// The bucket's start, in milliseconds since the run started.
    pub t_ms: u32,
    /// Answered 2xx or 3xx (a scenario step: passed its checks).
    pub completed: u64,
    pub errors: u64,
    /// Latency from the intended send of what ended in these 100 ms.
    pub p50: f64,
    pub p99: f64,
}

/// A 100 ms bucket still open to late batches.
struct Bucket {
    latency: Histogram<u64>,
    completed: u64,
    errors: u64,
}

/// A new histogram in microseconds with three significant digits, growing as needed.
pub fn histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is a valid histogram precision")
}

/// The values in `histogram` above `threshold_us`.
pub fn count_above(histogram: &Histogram<u64>, threshold_us: u64) -> u64 {
    histogram.len() - histogram.count_between(0, threshold_us)
}

/// Everything recorded in one run.
pub struct Recorder {
    threshold_us: u64,
    /// Latency of every answer and timeout, from the intended send.
    pub corrected: Histogram<u64>,
    /// The same from the actual send.
    pub service: Histogram<u64>,
    pub errors: Errors,
    /// Requests answered 2xx or 3xx.
    pub completed: u64,
    /// Histograms of seconds still open to late samples.
    open: BTreeMap<u32, (Histogram<u64>, u64, u64)>,
    /// Seconds folded into summaries; their histograms kept only if `keep_seconds`.
    pub closed: BTreeMap<u32, (Interval, Option<Histogram<u64>>)>,
    keep_seconds: bool,
    /// 100 ms buckets by end time, still open.
    recent: BTreeMap<u32, Bucket>,
    /// 100 ms buckets folded into summaries, in order.
    pub tenths: Vec<Tenth>,
    /// Each of `tenths`' latencies as sparse buckets, so an agent's 100 ms buckets merge
    /// exactly at the coordinator (percentiles alone do not merge).
    pub tenth_latency: Vec<crate::merge::Buckets>,
}

impl Recorder {
    /// `keep_seconds`: keep each second's histogram after it closes (for quarter tables).
    pub fn new(threshold_us: u64, keep_seconds: bool) -> Self {
        Recorder {
            threshold_us,
            corrected: histogram(),
            service: histogram(),
            errors: Errors::default(),
            completed: 0,
            open: BTreeMap::new(),
            closed: BTreeMap::new(),
            keep_seconds,
            recent: BTreeMap::new(),
            tenths: Vec::new(),
            tenth_latency: Vec::new(),
        }
    }

    pub fn record(&mut self, sample: Sample) {
        let (second, completed, errors) = self
            .open
            .entry(sample.second)
            .or_insert_with(|| (histogram(), 0, 0));
        if sample.outcome.is_error() {
            self.errors.count(sample.outcome);
            *errors += 1;
        } else {
            self.completed += 1;
            *completed += 1;
        }
        let bucket = self
            .recent
            .entry(sample.done_ms / 100)
            .or_insert_with(|| Bucket {
                latency: histogram(),
                completed: 0,
                errors: 0,
            });
        if sample.outcome.is_error() {
            bucket.errors += 1;
        } else {
            bucket.completed += 1;
        }
        if sample.outcome.is_measured() {
            let corrected = sample.corrected_us.max(1);
            let _ = self.corrected.record(corrected);
            let _ = self.service.record(sample.service_us.max(1));
            let _ = second.record(corrected);
            let _ = bucket.latency.record(corrected);
        }
    }

    /// Folds every 100 ms bucket that began before `before_ms` into its summary.
    pub fn close_tenths_before(&mut self, before_ms: u32) {
        while let Some(entry) = self.recent.first_entry() {
            if entry.key() * 100 >= before_ms {
                break;
            }
            let (tenth, bucket) = entry.remove_entry();
            let latency = Percentiles::of(&bucket.latency);
            self.tenths.push(Tenth {
                t_ms: tenth * 100,
                completed: bucket.completed,
                errors: bucket.errors,
                p50: latency.p50,
                p99: latency.p99,
            });
            self.tenth_latency
                .push(crate::merge::Buckets::of(&bucket.latency));
        }
    }

    /// What ended in the second before `now_ms`: finished requests and their latency.
    pub fn last_second(&self, now_ms: u32) -> (u64, Histogram<u64>) {
        let from = now_ms.saturating_sub(1000) / 100;
        let mut latency = histogram();
        let mut finished = 0;
        for (_, bucket) in self.recent.range(from..now_ms.div_ceil(100)) {
            let _ = latency.add(&bucket.latency);
            finished += bucket.completed + bucket.errors;
        }
        (finished, latency)
    }

    /// Folds every open second before `before` into its summary.
    pub fn close_before(&mut self, before: u32) {
        while let Some(entry) = self.open.first_entry() {
            if *entry.key() >= before {
                break;
            }
            let (second, (histogram, completed, errors)) = entry.remove_entry();
            let interval = Interval {
                second,
                planned: 0,
                sent: 0,
                completed,
                errors,
                latency_ms: Percentiles::of(&histogram),
                over_threshold: count_above(&histogram, self.threshold_us),
            };
            let kept = self.keep_seconds.then_some(histogram);
            self.closed.insert(second, (interval, kept));
        }
    }
}

/// The soak test's four quarters.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Quarters {
    pub rows: Vec<Quarter>,
    /// Last quarter over the first: how the tail grew.
    pub last_over_first: QuarterRatios,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Quarter {
    pub quarter: u32,
    pub requests: u64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub over_threshold: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct QuarterRatios {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

/// Splits per-second histograms of a `duration_s`-second run into four equal quarters by
/// send second.
pub fn quarters(
    seconds: &[(u32, &Histogram<u64>)],
    duration_s: f64,
    threshold_us: u64,
) -> Quarters {
    let mut merged: Vec<Histogram<u64>> = (0..4).map(|_| histogram()).collect();
    for &(second, h) in seconds {
        let quarter = ((f64::from(second) * 4.0 / duration_s).floor() as usize).min(3);
        let _ = merged[quarter].add(h);
    }
    let rows: Vec<Quarter> = merged
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let p = Percentiles::of(h);
            Quarter {
                quarter: i as u32 + 1,
                requests: h.len(),
                p50: p.p50,
                p95: p.p95,
                p99: p.p99,
                over_threshold: count_above(h, threshold_us),
            }
        })
        .collect();
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    Quarters {
        last_over_first: QuarterRatios {
            p50: ratio(rows[3].p50, rows[0].p50),
            p95: ratio(rows[3].p95, rows[0].p95),
            p99: ratio(rows[3].p99, rows[0].p99),
        },
        rows,
    }
}

/// What the spike cost.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SpikeReport {
    /// Requests the spike sent beyond the base rate: base × (factor − 1) × length.
    pub extra_requests: u64,
    /// Seconds from the spike's end until the first whole second whose p95 is back under the
    /// threshold; `None` if it never came back within the run.
    pub recovery_s: Option<f64>,
    /// Requests over the threshold in the whole run.
    pub over_threshold: u64,
    /// `over_threshold / extra_requests`: above 1, the spike hurt more requests than it added.
    pub over_per_extra: f64,
}

/// The spike arithmetic over per-second summaries.
pub fn spike(
    intervals: &[Interval],
    base: f64,
    factor: f64,
    at_s: f64,
    length_s: f64,
    threshold_ms: f64,
    over_threshold: u64,
) -> SpikeReport {
    let extra_requests = (base * (factor - 1.0) * length_s).round() as u64;
    let end = at_s + length_s;
    let recovery_s = intervals
        .iter()
        .filter(|i| f64::from(i.second) >= end.ceil() && i.completed > 0)
        .find(|i| i.latency_ms.p95 <= threshold_ms)
        .map(|i| f64::from(i.second) - end);
    SpikeReport {
        extra_requests,
        recovery_s,
        over_threshold,
        over_per_extra: if extra_requests > 0 {
            over_threshold as f64 / extra_requests as f64
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(values_ms: &[u64]) -> Histogram<u64> {
        let mut h = histogram();
        for v in values_ms {
            h.record(v * 1000).unwrap();
        }
        h
    }

    #[test]
    fn tls_reasons_keep_the_first_few_distinct_ones_and_count_the_rest_as_other() {
        let reasons = TlsReasons::default();
        for i in 0..8 {
            reasons.count(&format!("TLS: reason {i}"));
        }
        reasons.count("reason 0");
        let kept = reasons.take();
        assert_eq!(kept.len(), MAX_TLS_REASONS + 1, "{kept:?}");
        assert_eq!(kept["reason 0"], 2);
        assert_eq!(kept["other"], 3);
        assert!(reasons.take().is_empty());
    }

    #[test]
    fn the_percentile_curve_rises_to_the_maximum_with_more_points_in_the_tail() {
        let latency = filled(&(1..=1000).collect::<Vec<u64>>());
        let curve = percentile_curve(&latency);
        assert!(
            curve
                .windows(2)
                .all(|w| w[0].percentile < w[1].percentile && w[0].ms <= w[1].ms),
            "{curve:?}"
        );
        assert_eq!(curve.first().unwrap().percentile, 0.0);
        let last = curve.last().unwrap();
        assert_eq!(
            (last.percentile, last.ms),
            (100.0, Percentiles::of(&latency).max)
        );
        // As many points between 90 and 99 % as between 0 and 90 %.
        let below = |p: f64| curve.iter().filter(|c| c.percentile < p).count();
        assert_eq!(below(90.0) - 1, below(99.0) - below(90.0), "{curve:?}");
        let p99 = curve.iter().find(|c| c.percentile >= 99.0).unwrap();
        assert!((990.0..=992.0).contains(&p99.ms), "{p99:?}");
    }

    #[test]
    fn quarters_group_seconds_and_compare_the_last_to_the_first() {
        // 12 s: seconds 0–2 fast, 9–11 slow.
        let hists: Vec<Histogram<u64>> = (0..12)
            .map(|s| {
                if s < 9 {
                    filled(&[5, 6, 7, 8])
                } else {
                    filled(&[10, 12, 14, 40])
                }
            })
            .collect();
        let seconds: Vec<(u32, &Histogram<u64>)> = hists
            .iter()
            .enumerate()
            .map(|(s, h)| (s as u32, h))
            .collect();
        let q = quarters(&seconds, 12.0, 25_000);
        assert_eq!(q.rows.len(), 4);
        assert_eq!(
            q.rows.iter().map(|r| r.requests).collect::<Vec<_>>(),
            [12, 12, 12, 12]
        );
        assert_eq!(q.rows[3].over_threshold, 3);
        assert_eq!(q.rows[0].over_threshold, 0);
        assert!((q.rows[0].p50 - 6.0).abs() < 0.01, "{}", q.rows[0].p50);
        assert!((q.rows[3].p50 - 12.0).abs() < 0.02, "{}", q.rows[3].p50);
        assert!((q.last_over_first.p50 - 2.0).abs() < 0.01);
    }

    fn interval(second: u32, p95: f64) -> Interval {
        Interval {
            second,
            planned: 514,
            sent: 514,
            completed: 514,
            errors: 0,
            latency_ms: Percentiles {
                p95,
                ..Percentiles::default()
            },
            over_threshold: 0,
        }
    }

    #[test]
    fn recovery_counts_from_the_spike_end_to_the_first_good_second() {
        // The course's run: p95 1508, 1028, 108, 16.5 … in seconds 3–6; spike 3.0–4.5 s.
        let series: Vec<Interval> = [10.0, 12.7, 11.4, 1508.9, 1028.3, 108.7, 16.5, 20.2, 22.9]
            .iter()
            .enumerate()
            .map(|(s, &p95)| interval(s as u32, p95))
            .collect();
        let report = spike(&series, 514.0, 3.0, 3.0, 1.5, 25.0, 2631);
        assert_eq!(report.extra_requests, 1542);
        assert_eq!(report.recovery_s, Some(1.5));
        assert!((report.over_per_extra - 2631.0 / 1542.0).abs() < 1e-9);

        let never: Vec<Interval> = (0..9).map(|s| interval(s, 100.0)).collect();
        assert_eq!(
            spike(&never, 514.0, 3.0, 3.0, 1.5, 25.0, 0).recovery_s,
            None
        );
    }

    #[test]
    fn tenths_of_a_second_fold_by_end_time_and_the_last_second_merges_them() {
        let mut r = Recorder::new(25_000, false);
        let at = |done_ms: u32, ms: u64, outcome| Sample {
            second: done_ms / 1000,
            corrected_us: ms * 1000,
            service_us: 1000,
            done_ms,
            outcome,
        };
        r.record(at(50, 2, Outcome::Status(200)));
        r.record(at(1150, 4, Outcome::Status(200)));
        r.record(at(1180, 40, Outcome::Status(500)));
        r.record(at(1930, 8, Outcome::Status(200)));
        let (finished, latency) = r.last_second(2000);
        let latency = Percentiles::of(&latency);
        assert_eq!(finished, 3, "what ended from 1.0 s to 2.0 s");
        assert!((latency.p99 - 40.0).abs() < 0.1, "{latency:?}");
        r.close_tenths_before(1200);
        assert_eq!(
            r.tenths
                .iter()
                .map(|t| (t.t_ms, t.completed, t.errors))
                .collect::<Vec<_>>(),
            [(0, 1, 0), (1100, 1, 1)]
        );
        r.close_tenths_before(u32::MAX);
        assert_eq!(r.tenths.last().unwrap().t_ms, 1900);
    }

    #[test]
    fn the_recorder_measures_answers_and_timeouts_counts_errors_and_closes_seconds() {
        let mut r = Recorder::new(25_000, false);
        let ok = |second, ms: u64| Sample {
            second,
            corrected_us: ms * 1000,
            service_us: 1000,
            done_ms: second * 1000,
            outcome: Outcome::Status(200),
        };
        r.record(ok(0, 5));
        r.record(ok(0, 30));
        r.record(Sample {
            outcome: Outcome::Status(503),
            ..ok(0, 1)
        });
        r.record(Sample {
            outcome: Outcome::ConnectRefused,
            ..ok(0, 1)
        });
        r.record(Sample {
            outcome: Outcome::Timeout,
            ..ok(1, 1)
        });
        r.record(ok(1, 7));
        r.close_before(1);
        assert_eq!(r.closed.len(), 1);
        let (first, kept) = &r.closed[&0];
        assert!(kept.is_none());
        // The 503 is measured; the refused connect has no latency.
        assert_eq!(
            (first.completed, first.errors, first.over_threshold),
            (2, 2, 1)
        );
        assert_eq!(
            r.errors,
            Errors {
                status_5xx: 1,
                connect_refused: 1,
                timeout: 1,
                ..Errors::default()
            }
        );
        assert_eq!(
            r.errors.describe(),
            "1 connect refused, 1 timed out, 1 answered 5xx"
        );
        assert_eq!(r.completed, 3);
        assert_eq!(r.corrected.len(), 5, "three 200s, the 503 and the timeout");
    }
}
