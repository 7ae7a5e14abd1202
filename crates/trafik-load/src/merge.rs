//! Distributed runs: what one agent measured, in a form that crosses the wire and merges
//! exactly. Histograms travel as their non-empty buckets, so the coordinator's percentiles are
//! those of every agent's latencies together — never an average of percentiles, which has no
//! meaning (two agents' p99 of 10 ms and 100 ms say nothing about the p99 of both).

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::journey::StepsMeasured;
use crate::record::{
    Errors, Interval, Percentiles, Recorder, Tenth, add_reason, count_above, histogram,
};
use crate::runner::{Progress, RunResult};

/// A histogram's non-empty buckets as (highest value in the bucket, count). Recorded again
/// into a histogram of the same precision, each lands in the bucket it came from: the
/// round trip, and so the merge, lose nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buckets(pub Vec<(u64, u64)>);

impl Buckets {
    pub fn of(histogram: &Histogram<u64>) -> Buckets {
        Buckets(
            histogram
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
        )
    }

    /// Adds the buckets to `into`.
    pub fn add_to(&self, into: &mut Histogram<u64>) -> Result<(), String> {
        for &(value, count) in &self.0 {
            into.record_n(value, count)
                .map_err(|e| format!("a latency of {value} µs does not fit: {e:?}"))?;
        }
        Ok(())
    }
}

/// One agent in the coordinator's report.
#[derive(Clone, Debug, Serialize)]
pub struct AgentReport {
    pub name: String,
    /// Its part of the rate plan (1 / N).
    pub share: f64,
    /// Whether it reported; false: it died, and its planned requests count as not sent.
    pub reported: bool,
    pub planned: u64,
    pub sent: u64,
    pub completed: u64,
    pub errors: u64,
}

/// One second of an agent's run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Second {
    pub second: u32,
    pub completed: u64,
    pub errors: u64,
    pub latency: Buckets,
}

/// 100 ms of an agent's run, its latencies as buckets so the coordinator's merge is exact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenthMeasured {
    pub t_ms: u32,
    pub completed: u64,
    pub errors: u64,
    pub latency: Buckets,
}

/// Everything an agent measured that the coordinator's report needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub planned: u64,
    pub planned_per_second: Vec<u64>,
    pub sent: u64,
    pub late: u64,
    pub dropped: u64,
    pub connections_opened: u64,
    pub window_s: f64,
    pub completed: u64,
    pub errors: Errors,
    pub corrected: Buckets,
    pub service: Buckets,
    /// Needs a run that kept each second's histogram (`keep_seconds`).
    pub seconds: Vec<Second>,
    /// The run's 100 ms buckets (the JSON's `buckets_100ms`).
    #[serde(default)]
    pub tenths: Vec<TenthMeasured>,
    pub tls_failures: BTreeMap<String, u64>,
    /// A scenario's steps and flows; none for a run of plain requests.
    #[serde(default)]
    pub scenario: Option<StepsMeasured>,
}

impl Measured {
    pub fn of(run: &RunResult) -> Measured {
        let recorder = &run.recorder;
        Measured {
            planned: run.planned,
            planned_per_second: run.planned_per_second.clone(),
            sent: run.sent,
            late: run.late,
            dropped: run.dropped,
            connections_opened: run.connections_opened,
            window_s: run.window.as_secs_f64(),
            completed: recorder.completed,
            errors: recorder.errors.clone(),
            corrected: Buckets::of(&recorder.corrected),
            service: Buckets::of(&recorder.service),
            seconds: recorder
                .closed
                .iter()
                .map(|(second, (interval, kept))| Second {
                    second: *second,
                    completed: interval.completed,
                    errors: interval.errors,
                    latency: kept.as_ref().map(Buckets::of).unwrap_or_default(),
                })
                .collect(),
            tenths: recorder
                .tenths
                .iter()
                .zip(&recorder.tenth_latency)
                .map(|(tenth, latency)| TenthMeasured {
                    t_ms: tenth.t_ms,
                    completed: tenth.completed,
                    errors: tenth.errors,
                    latency: latency.clone(),
                })
                .collect(),
            tls_failures: run.tls_failures.clone(),
            scenario: None,
        }
    }
}

/// The agents' runs as one: counts summed, histograms merged, second by second too.
pub fn merge(
    parts: &[Measured],
    threshold_us: u64,
    keep_seconds: bool,
) -> Result<RunResult, String> {
    let mut recorder = Recorder::new(threshold_us, keep_seconds);
    let mut seconds: BTreeMap<u32, (Histogram<u64>, u64, u64)> = BTreeMap::new();
    let mut tenths: BTreeMap<u32, (Histogram<u64>, u64, u64)> = BTreeMap::new();
    let mut run = RunResult {
        recorder: Recorder::new(threshold_us, keep_seconds),
        planned: 0,
        planned_per_second: Vec::new(),
        sent: 0,
        late: 0,
        dropped: 0,
        window: Duration::ZERO,
        connections_opened: 0,
        tls_failures: BTreeMap::new(),
    };
    for part in parts {
        run.planned += part.planned;
        run.sent += part.sent;
        run.late += part.late;
        run.dropped += part.dropped;
        run.connections_opened += part.connections_opened;
        // An agent's word, read from etcd: a window no run can have is refused, not a panic.
        let window = Duration::try_from_secs_f64(part.window_s)
            .ok()
            .filter(|window| *window <= crate::schedule::LONGEST_RUN)
            .ok_or_else(|| format!("a part measured over {}s", part.window_s))?;
        run.window = run.window.max(window);
        if run.planned_per_second.len() < part.planned_per_second.len() {
            run.planned_per_second
                .resize(part.planned_per_second.len(), 0);
        }
        for (total, count) in run
            .planned_per_second
            .iter_mut()
            .zip(&part.planned_per_second)
        {
            *total += count;
        }
        for (reason, &times) in &part.tls_failures {
            add_reason(&mut run.tls_failures, reason, times);
        }
        recorder.completed += part.completed;
        recorder.errors.add(&part.errors);
        part.corrected.add_to(&mut recorder.corrected)?;
        part.service.add_to(&mut recorder.service)?;
        for second in &part.seconds {
            let (latency, completed, errors) = seconds
                .entry(second.second)
                .or_insert_with(|| (histogram(), 0, 0));
            second.latency.add_to(latency)?;
            *completed += second.completed;
            *errors += second.errors;
        }
        for tenth in &part.tenths {
            let (latency, completed, errors) = tenths
                .entry(tenth.t_ms)
                .or_insert_with(|| (histogram(), 0, 0));
            tenth.latency.add_to(latency)?;
            *completed += tenth.completed;
            *errors += tenth.errors;
        }
    }
    for (t_ms, (latency, completed, errors)) in tenths {
        let percentiles = Percentiles::of(&latency);
        recorder.tenths.push(Tenth {
            t_ms,
            completed,
            errors,
            p50: percentiles.p50,
            p99: percentiles.p99,
        });
        recorder.tenth_latency.push(Buckets::of(&latency));
    }
    for (second, (latency, completed, errors)) in seconds {
        let interval = Interval {
            second,
            planned: 0,
            sent: 0,
            completed,
            errors,
            latency_ms: Percentiles::of(&latency),
            over_threshold: count_above(&latency, threshold_us),
        };
        recorder
            .closed
            .insert(second, (interval, keep_seconds.then_some(latency)));
    }
    run.recorder = recorder;
    Ok(run)
}

/// The agents' latest progress as one live view: counts and rates summed, the last second's
/// percentiles those of every agent's latencies together.
pub fn merge_progress(parts: &[Progress]) -> Result<Progress, String> {
    let mut latency = histogram();
    let mut merged = Progress {
        elapsed: Duration::ZERO,
        sent: 0,
        completed: 0,
        errors: Errors::default(),
        connections: 0,
        rate: 0.0,
        target_rate: None,
        in_flight: 0,
        last_second: (0, Percentiles::default()),
        last_second_latency: Buckets::default(),
    };
    for part in parts {
        merged.elapsed = merged.elapsed.max(part.elapsed);
        merged.sent += part.sent;
        merged.completed += part.completed;
        merged.errors.add(&part.errors);
        merged.connections += part.connections;
        merged.rate += part.rate;
        merged.target_rate = match (merged.target_rate, part.target_rate) {
            (Some(total), Some(rate)) => Some(total + rate),
            (total, rate) => total.or(rate),
        };
        merged.in_flight += part.in_flight;
        merged.last_second.0 += part.last_second.0;
        part.last_second_latency.add_to(&mut latency)?;
    }
    merged.last_second.1 = Percentiles::of(&latency);
    merged.last_second_latency = Buckets::of(&latency);
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Outcome, Sample};

    fn run_of(latencies_us: &[u64]) -> RunResult {
        let mut recorder = Recorder::new(25_000, true);
        for (i, &us) in latencies_us.iter().enumerate() {
            recorder.record(Sample {
                second: (us % 3) as u32,
                corrected_us: us,
                service_us: us / 2,
                done_ms: (us / 1000) as u32,
                outcome: if i % 10 == 0 {
                    Outcome::Status(503)
                } else {
                    Outcome::Status(200)
                },
            });
        }
        recorder.close_before(u32::MAX);
        recorder.close_tenths_before(u32::MAX);
        RunResult {
            recorder,
            planned: latencies_us.len() as u64,
            planned_per_second: vec![1, 2, 3],
            sent: latencies_us.len() as u64,
            late: 1,
            dropped: 0,
            window: Duration::from_secs(3),
            connections_opened: 2,
            tls_failures: BTreeMap::from([(
                "invalid peer certificate: UnknownIssuer".to_owned(),
                1,
            )]),
        }
    }

    #[test]
    fn a_part_with_a_window_no_run_has_is_refused_not_a_panic() {
        for window_s in [-1.0, f64::NAN, 1e30] {
            let mut part = Measured::of(&run_of(&[100, 200]));
            part.window_s = window_s;
            let merged = merge(&[part], 25_000, false);
            assert!(merged.is_err(), "{window_s}");
        }
        assert!(merge(&[Measured::of(&run_of(&[100]))], 25_000, false).is_ok());
    }

    #[test]
    fn merged_percentiles_are_those_of_every_latency_together() {
        // Two agents with very different latencies: an average of their p99s would be wrong.
        let mut state = 7u64;
        let mut next = |scale: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            1 + (state >> 33) % scale
        };
        let fast: Vec<u64> = (0..5000).map(|_| next(2_000)).collect();
        let slow: Vec<u64> = (0..3000).map(|_| 1_000 + next(250_000)).collect();
        let parts: Vec<Measured> = [&fast, &slow]
            .iter()
            .map(|latencies| {
                let wire = serde_json::to_string(&Measured::of(&run_of(latencies))).unwrap();
                serde_json::from_str(&wire).unwrap()
            })
            .collect();
        let merged = merge(&parts, 25_000, true).unwrap();

        let all: Vec<u64> = fast.iter().chain(&slow).copied().collect();
        let together = run_of(&all);
        assert_eq!(
            Percentiles::of(&merged.recorder.corrected),
            Percentiles::of(&together.recorder.corrected)
        );
        assert_eq!(
            Percentiles::of(&merged.recorder.service),
            Percentiles::of(&together.recorder.service)
        );
        assert_eq!(merged.recorder.corrected.len(), 8000);
        assert_eq!(merged.recorder.completed, together.recorder.completed);
        assert_eq!(merged.recorder.errors, together.recorder.errors);
        assert_eq!(merged.planned, 8000);
        assert_eq!(merged.late, 2);
        assert_eq!(merged.planned_per_second, [2, 4, 6]);
        assert_eq!(
            merged.tls_failures,
            BTreeMap::from([("invalid peer certificate: UnknownIssuer".to_owned(), 2)])
        );
        let intervals = |run: &RunResult| -> Vec<Interval> {
            run.recorder
                .closed
                .values()
                .map(|(i, _)| i.clone())
                .collect()
        };
        assert_eq!(intervals(&merged), intervals(&together));
        // The 100 ms buckets too: counts summed, percentiles of the merged latencies.
        assert_eq!(merged.recorder.tenths.len(), 3, "ends up to 251 ms");
        assert_eq!(merged.recorder.tenths, together.recorder.tenths);
    }

    #[test]
    fn merged_progress_sums_counts_and_merges_the_last_seconds_latencies() {
        let progress = |latencies_us: &[u64], target: f64| {
            let mut latency = histogram();
            for &us in latencies_us {
                latency.record(us).unwrap();
            }
            Progress {
                elapsed: Duration::from_millis(1200 + latencies_us.len() as u64),
                sent: 10 * latencies_us.len() as u64,
                completed: 9 * latencies_us.len() as u64,
                errors: Errors {
                    timeout: 1,
                    ..Default::default()
                },
                connections: 4,
                rate: target - 1.0,
                target_rate: Some(target),
                in_flight: 3,
                last_second: (latencies_us.len() as u64, Percentiles::of(&latency)),
                last_second_latency: Buckets::of(&latency),
            }
        };
        let fast: Vec<u64> = (1..=99).map(|i| i * 10).collect();
        let slow: Vec<u64> = vec![900_000];
        let merged = merge_progress(&[progress(&fast, 100.0), progress(&slow, 50.0)]).unwrap();
        assert_eq!(merged.elapsed, Duration::from_millis(1299));
        assert_eq!(merged.sent, 1000);
        assert_eq!(merged.completed, 900);
        assert_eq!(merged.errors.timeout, 2);
        assert_eq!((merged.connections, merged.in_flight), (8, 6));
        assert_eq!(merged.target_rate, Some(150.0));
        assert_eq!(merged.rate, 148.0);
        let mut all = histogram();
        for &us in fast.iter().chain(&slow) {
            all.record(us).unwrap();
        }
        assert_eq!(merged.last_second, (100, Percentiles::of(&all)));
        assert!(merged.last_second.1.p99 < 1.0, "99 of 100 took under 1 ms");
    }
}
