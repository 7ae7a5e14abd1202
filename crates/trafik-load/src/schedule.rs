//! When each request is meant to be sent: a rate plan of piecewise-linear segments, and the
//! intended send time of the n-th request found by inverting the integral of the rate.
//!
//! Every time is computed from the start of the run, never from the previous send, so no drift
//! accumulates and a slow server cannot slow the plan down (that would make the loop closed).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A stretch of the run over which the rate changes linearly from `from` to `to` (per second).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    pub duration: f64,
    pub from: f64,
    pub to: f64,
}

impl Segment {
    /// Requests planned within the segment: the integral of the rate.
    fn requests(&self) -> f64 {
        (self.from + self.to) / 2.0 * self.duration
    }

    /// Time into the segment at which `x` requests have been planned (0 ≤ x ≤ requests()).
    fn time_of(&self, x: f64) -> f64 {
        if x <= 0.0 {
            return 0.0;
        }
        // N(t) = from·t + (to − from)·t² / (2·duration); solve N(t) = x for t ≥ 0.
        let a = (self.to - self.from) / (2.0 * self.duration);
        let b = self.from;
        if a.abs() < 1e-12 {
            return if b > 0.0 { x / b } else { 0.0 };
        }
        // The root written as 2x / (b + √(b² + 4ax)) stays exact when a is tiny or negative.
        let root = (b * b + 4.0 * a * x).max(0.0).sqrt();
        let denominator = b + root;
        if denominator > 0.0 {
            2.0 * x / denominator
        } else {
            0.0
        }
    }

    /// The target rate `t` seconds into the segment.
    fn rate_at(&self, t: f64) -> f64 {
        self.from + (self.to - self.from) * (t / self.duration)
    }
}

/// The whole run's target rate over time; it crosses the wire to the agents of a distributed
/// run, each with its share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RatePlan {
    segments: Vec<Segment>,
}

/// The longest run a plan read from elsewhere (an agent's order in etcd) may describe: every
/// run adds its length to a clock reading and keeps a counter per second of it, which a
/// length near `Duration::MAX` overflows. The configuration's own bound on durations.
pub const LONGEST_RUN: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

impl RatePlan {
    /// Whether the plan can be run: every segment's length and rates finite and not negative,
    /// the whole at most [`LONGEST_RUN`]. Plans this crate builds always can; one deserialized
    /// from another process is checked before it runs.
    pub fn check(&self) -> Result<(), String> {
        let fine = |x: f64| x.is_finite() && x >= 0.0;
        if let Some(bad) = self
            .segments
            .iter()
            .find(|s| !(fine(s.duration) && fine(s.from) && fine(s.to)))
        {
            return Err(format!(
                "a segment of {}s from {}/s to {}/s: expected finite, non-negative numbers",
                bad.duration, bad.from, bad.to
            ));
        }
        if self.duration() > LONGEST_RUN.as_secs_f64() {
            return Err(format!(
                "a run of {}s: expected at most {}s",
                self.duration(),
                LONGEST_RUN.as_secs()
            ));
        }
        Ok(())
    }

    /// `rate` requests per second for `duration`.
    pub fn constant(rate: f64, duration: Duration) -> Self {
        RatePlan {
            segments: vec![Segment {
                duration: duration.as_secs_f64(),
                from: rate,
                to: rate,
            }],
        }
    }

    /// k6's ramping arrival rate: from `start_rate`, each stage ramps linearly to its target
    /// over its duration.
    pub fn stages(start_rate: f64, stages: &[(Duration, f64)]) -> Self {
        let mut from = start_rate;
        let segments = stages
            .iter()
            .map(|&(duration, target)| {
                let segment = Segment {
                    duration: duration.as_secs_f64(),
                    from,
                    to: target,
                };
                from = target;
                segment
            })
            .collect();
        RatePlan { segments }
    }

    /// `base` requests per second, multiplied by `factor` from `at` for `length` (the spike).
    pub fn spike(
        base: f64,
        factor: f64,
        at: Duration,
        length: Duration,
        duration: Duration,
    ) -> Self {
        let (at, length, total) = (
            at.as_secs_f64(),
            length.as_secs_f64(),
            duration.as_secs_f64(),
        );
        let peak = base * factor;
        let after = (total - at - length).max(0.0);
        let segments = [
            (at, base),
            (length.min(total - at).max(0.0), peak),
            (after, base),
        ]
        .into_iter()
        .filter(|(d, _)| *d > 0.0)
        .map(|(duration, rate)| Segment {
            duration,
            from: rate,
            to: rate,
        })
        .collect();
        RatePlan { segments }
    }

    /// The same shape at `share` of the rate (one agent's part of a distributed run).
    pub fn scaled(&self, share: f64) -> RatePlan {
        RatePlan {
            segments: self
                .segments
                .iter()
                .map(|s| Segment {
                    duration: s.duration,
                    from: s.from * share,
                    to: s.to * share,
                })
                .collect(),
        }
    }

    /// The run's length in seconds.
    pub fn duration(&self) -> f64 {
        self.segments.iter().map(|s| s.duration).sum()
    }

    /// Requests planned over the whole run.
    pub fn total_requests(&self) -> u64 {
        self.send_times().count() as u64
    }

    /// The planned rate `t` seconds into the run.
    pub fn rate_at(&self, t: f64) -> f64 {
        let mut start = 0.0;
        for segment in &self.segments {
            if t < start + segment.duration {
                return segment.rate_at(t - start);
            }
            start += segment.duration;
        }
        0.0
    }

    /// The mean planned rate: requests over duration.
    pub fn mean_rate(&self) -> f64 {
        let requests: f64 = self.segments.iter().map(Segment::requests).sum();
        requests / self.duration().max(f64::MIN_POSITIVE)
    }

    /// Intended send times of requests 0, 1, 2, …, in order: request k is due when the integral
    /// of the rate reaches k. Ends with the plan.
    pub fn send_times(&self) -> SendTimes<'_> {
        SendTimes {
            plan: self,
            next: 0,
            segment: 0,
            before_segment: 0.0,
            segment_start: 0.0,
        }
    }
}

/// The iterator of [`RatePlan::send_times`].
pub struct SendTimes<'a> {
    plan: &'a RatePlan,
    next: u64,
    segment: usize,
    /// Requests planned before the current segment.
    before_segment: f64,
    segment_start: f64,
}

impl Iterator for SendTimes<'_> {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let k = self.next as f64;
        loop {
            let segment = self.plan.segments.get(self.segment)?;
            let within = k - self.before_segment;
            if within < segment.requests() {
                let t = self.segment_start + segment.time_of(within);
                self.next += 1;
                // A plan built from finite, non-negative rates never yields a bad time; if one
                // did, the request is sent at once rather than the run failing.
                return Some(Duration::try_from_secs_f64(t).unwrap_or_default());
            }
            self.before_segment += segment.requests();
            self.segment_start += segment.duration;
            self.segment += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_from_elsewhere_is_checked_before_it_runs() {
        let plan = |duration, from, to| RatePlan {
            segments: vec![Segment { duration, from, to }],
        };
        assert_eq!(plan(60.0, 100.0, 200.0).check(), Ok(()));
        for bad in [
            plan(-1.0, 100.0, 100.0),
            plan(f64::NAN, 100.0, 100.0),
            plan(60.0, f64::INFINITY, 100.0),
            plan(60.0, 100.0, -5.0),
            plan(1e30, 1.0, 1.0),
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
        let closed = crate::runner::Pacing::Closed(Duration::MAX);
        assert!(closed.check().is_err());
    }

    fn seconds(times: impl Iterator<Item = Duration>) -> Vec<f64> {
        times
            .map(|d| (d.as_secs_f64() * 1e6).round() / 1e6)
            .collect()
    }

    #[test]
    fn a_constant_rate_sends_evenly_from_time_zero() {
        let plan = RatePlan::constant(4.0, Duration::from_secs(2));
        assert_eq!(
            seconds(plan.send_times()),
            [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
        );
        assert_eq!(
            RatePlan::constant(514.0, Duration::from_secs(3)).total_requests(),
            1542
        );
    }

    #[test]
    fn a_ramp_sends_at_the_inverse_of_the_rate_integral() {
        // 0 → 10 req/s over 2 s: N(t) = 2.5 t², so request k goes at √(k / 2.5).
        let plan = RatePlan::stages(0.0, &[(Duration::from_secs(2), 10.0)]);
        let times = seconds(plan.send_times());
        assert_eq!(times.len(), 10);
        for (k, t) in times.iter().enumerate() {
            let expected = (k as f64 / 2.5).sqrt();
            assert!(
                (t - expected).abs() < 1e-6,
                "request {k}: {t} vs {expected}"
            );
        }
    }

    #[test]
    fn stages_chain_their_targets_and_a_ramp_down_is_exact() {
        // 10 req/s for 1 s, then 10 → 0 over 2 s (10 more requests), then 0 for 1 s.
        let plan = RatePlan::stages(
            10.0,
            &[
                (Duration::from_secs(1), 10.0),
                (Duration::from_secs(2), 0.0),
                (Duration::from_secs(1), 0.0),
            ],
        );
        let times = seconds(plan.send_times());
        assert_eq!(times.len(), 20);
        assert_eq!(&times[..3], &[0.0, 0.1, 0.2]);
        // In the ramp down N(t) = 10t − 2.5t²: the 5th request after 1 s is at t = 2 − √2.
        assert!(
            (times[15] - (1.0 + 2.0 - 2f64.sqrt())).abs() < 1e-6,
            "{}",
            times[15]
        );
        assert!(times.iter().all(|&t| t < 3.0));
        assert!(times.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_spike_multiplies_the_rate_in_its_window() {
        let plan = RatePlan::spike(
            514.0,
            3.0,
            Duration::from_secs(3),
            Duration::from_millis(1500),
            Duration::from_secs(9),
        );
        let times: Vec<f64> = plan.send_times().map(|d| d.as_secs_f64()).collect();
        let during = times.iter().filter(|&&t| (3.0..4.5).contains(&t)).count();
        assert_eq!(during, 2313); // 1542 req/s × 1.5 s
        assert_eq!(times.len(), 514 * 9 + 1542);
        assert_eq!(plan.rate_at(4.0), 1542.0);
        assert_eq!(plan.rate_at(5.0), 514.0);
    }
}
