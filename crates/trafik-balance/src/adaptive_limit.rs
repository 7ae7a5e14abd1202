use std::time::Duration;

use crate::Nanos;

/// How a pool's adaptive concurrency limit moves (after Netflix concurrency-limits' gradient
/// limit): the limit shrinks while recent latency (an average of the last answers) runs more
/// than `tolerance` times the baseline (the lowest that average was lately), and grows by about its square root per answer while latency
/// stays within it and the limit is in use.
#[derive(Clone, Debug, PartialEq)]
pub struct ConcurrencyRules {
    /// The limit never goes below this…
    pub min_limit: u32,
    /// …nor above this.
    pub max_limit: u32,
    /// Where it starts.
    pub initial_limit: u32,
    /// How many times the baseline recent latency may be before the limit shrinks.
    pub tolerance: f64,
    /// How long the lowest recent latency stays the baseline: a lasting slowdown becomes the
    /// new normal after this long.
    pub baseline_window: Duration,
}

impl Default for ConcurrencyRules {
    fn default() -> Self {
        ConcurrencyRules {
            min_limit: 4,
            max_limit: 1000,
            initial_limit: 20,
            tolerance: 2.0,
            baseline_window: Duration::from_secs(30),
        }
    }
}

/// How much of each answer's new estimate the limit takes (the rest is its old value), so
/// one outlier does not swing it.
const SMOOTHING: f64 = 0.2;
/// The weight of each answer's latency in the recent average.
const RECENT_WEIGHT: f64 = 0.2;
/// The most one answer's estimate may cut the limit by: half (an outlier does not shed all).
const LEAST_GRADIENT: f64 = 0.5;

/// The limit and what it learned from latencies; the caller serializes calls (a pool keeps it
/// behind a lock) and passes time in.
#[derive(Debug)]
pub struct AdaptiveLimit {
    rules: ConcurrencyRules,
    limit: f64,
    /// Exponentially weighted average of recent latencies, in nanoseconds.
    recent: Option<f64>,
    /// The lowest `recent` of the current and the previous half window: (half number, least).
    baseline: [(u64, f64); 2],
}

impl AdaptiveLimit {
    pub fn new(rules: ConcurrencyRules) -> Self {
        let limit = f64::from(
            rules
                .initial_limit
                .clamp(rules.min_limit, rules.max_limit.max(rules.min_limit)),
        );
        AdaptiveLimit {
            rules,
            limit,
            recent: None,
            baseline: [(u64::MAX, f64::INFINITY); 2],
        }
    }

    /// Requests that may be in flight now.
    pub fn limit(&self) -> u32 {
        self.limit as u32
    }

    /// The baseline latency at `now`: the lowest recent average of the last window (`None`
    /// before any answer).
    pub fn baseline(&self, now: Nanos) -> Option<Duration> {
        let least = self.least(now);
        least
            .is_finite()
            .then(|| Duration::from_nanos(least as u64))
    }

    /// Learns that a request answered after `latency`, at `now`, while `in_flight` requests
    /// (itself included) were in flight when it was let in. Returns the new limit.
    pub fn sample(&mut self, now: Nanos, latency: Duration, in_flight: u32) -> u32 {
        let latency = (latency.as_nanos() as f64).max(1.0);
        let recent = match self.recent {
            Some(average) => average + RECENT_WEIGHT * (latency - average),
            None => latency,
        };
        self.recent = Some(recent);
        // The average, not single answers: one lucky or unlucky answer is noise, not a baseline.
        self.remember(now, recent);
        let gradient = (self.rules.tolerance * self.least(now) / recent).clamp(LEAST_GRADIENT, 1.0);
        if gradient >= 1.0 && f64::from(in_flight) < self.limit / 2.0 {
            // Latency is fine but the limit is not in use: no sign that it is too low.
            return self.limit();
        }
        let estimate = self.limit * gradient + self.limit.sqrt();
        let lowest = f64::from(self.rules.min_limit);
        let highest = f64::from(self.rules.max_limit).max(lowest);
        self.limit = (self.limit + SMOOTHING * (estimate - self.limit)).clamp(lowest, highest);
        self.limit()
    }

    /// Records the recent average `latency` in the half window `now` falls in, forgetting older halves.
    fn remember(&mut self, now: Nanos, latency: f64) {
        let number = now / self.half_window();
        let slot = &mut self.baseline[(number % 2) as usize];
        if slot.0 != number {
            *slot = (number, latency);
        } else {
            slot.1 = slot.1.min(latency);
        }
    }

    /// The lowest recent average of the current and the previous half window.
    fn least(&self, now: Nanos) -> f64 {
        let number = now / self.half_window();
        self.baseline
            .iter()
            .filter(|(half, _)| *half == number || half.wrapping_add(1) == number)
            .map(|(_, least)| *least)
            .fold(f64::INFINITY, f64::min)
    }

    fn half_window(&self) -> Nanos {
        (self.rules.baseline_window.as_nanos() as u64 / 2).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const SECOND: Nanos = 1_000_000_000;

    /// `count` answers of `latency` each, 1 ms apart from `start`, with the limit in full use.
    fn answers(limit: &mut AdaptiveLimit, start: Nanos, count: u64, latency: Duration) -> Nanos {
        for n in 0..count {
            let in_flight = limit.limit();
            limit.sample(start + n * 1_000_000, latency, in_flight);
        }
        start + count * 1_000_000
    }

    #[test]
    fn the_limit_grows_while_latency_stays_at_the_baseline_and_the_limit_is_used() {
        let mut limit = AdaptiveLimit::new(ConcurrencyRules::default());
        assert_eq!(limit.limit(), 20);
        answers(&mut limit, SECOND, 50, 2 * MS);
        assert!(limit.limit() > 40, "grew to {}", limit.limit());
        assert_eq!(limit.baseline(SECOND), Some(2 * MS));
    }

    #[test]
    fn latency_beyond_tolerance_shrinks_the_limit_towards_its_floor_and_it_recovers_after() {
        let mut limit = AdaptiveLimit::new(ConcurrencyRules {
            initial_limit: 100,
            ..ConcurrencyRules::default()
        });
        let now = answers(&mut limit, SECOND, 20, 2 * MS);
        let before = limit.limit();
        // Ten times the baseline: far beyond a tolerance of two.
        let now = answers(&mut limit, now, 100, 20 * MS);
        assert!(
            limit.limit() < 10,
            "{before} shrank only to {}",
            limit.limit()
        );
        assert!(limit.limit() >= 4, "never below min_limit");
        answers(&mut limit, now, 200, 2 * MS);
        assert!(limit.limit() > 50, "recovered only to {}", limit.limit());
    }

    #[test]
    fn latency_within_tolerance_does_not_shrink_the_limit() {
        let mut limit = AdaptiveLimit::new(ConcurrencyRules::default());
        let now = answers(&mut limit, SECOND, 10, 10 * MS);
        let before = limit.limit();
        // 1.9 times the baseline, under the tolerance of 2.
        answers(&mut limit, now, 50, 19 * MS);
        assert!(
            limit.limit() >= before,
            "{before} fell to {}",
            limit.limit()
        );
    }

    #[test]
    fn an_idle_limit_does_not_grow_and_it_stays_within_its_bounds() {
        let rules = ConcurrencyRules {
            min_limit: 5,
            max_limit: 30,
            initial_limit: 20,
            ..ConcurrencyRules::default()
        };
        let mut limit = AdaptiveLimit::new(rules.clone());
        for n in 0..100 {
            limit.sample(SECOND + n, 2 * MS, 3);
        }
        assert_eq!(
            limit.limit(),
            20,
            "3 in flight of 20: the limit is not what holds"
        );
        answers(&mut limit, 2 * SECOND, 100, 2 * MS);
        assert_eq!(limit.limit(), 30);
        answers(&mut limit, 3 * SECOND, 200, 500 * MS);
        assert_eq!(limit.limit(), 5);
        let start_over = AdaptiveLimit::new(ConcurrencyRules {
            initial_limit: 1000,
            ..rules
        });
        assert_eq!(start_over.limit(), 30, "the start is clamped too");
    }

    #[test]
    fn a_lasting_slowdown_becomes_the_baseline_after_the_window() {
        let mut limit = AdaptiveLimit::new(ConcurrencyRules {
            baseline_window: Duration::from_secs(10),
            ..ConcurrencyRules::default()
        });
        answers(&mut limit, SECOND, 10, 2 * MS);
        let shrunk = answers(&mut limit, 2 * SECOND, 100, 20 * MS);
        let low = limit.limit();
        assert_eq!(limit.baseline(shrunk), Some(2 * MS));
        // Twenty seconds on, 20 ms is all that was seen in the window: it is the baseline now,
        // and the limit grows back although latency stays where it went.
        answers(&mut limit, 22 * SECOND, 200, 20 * MS);
        let baseline = limit.baseline(22 * SECOND + 1).unwrap();
        assert!(baseline > 19 * MS && baseline <= 20 * MS, "{baseline:?}");
        assert!(
            limit.limit() > low * 3,
            "stayed at {} from {low}",
            limit.limit()
        );
    }
}
