//! Latency histograms written on the request path: fixed buckets of relaxed atomic counters,
//! one set per worker shard, so recording is a bucket search over 16 bounds and two adds, with
//! no allocation and no line shared with another worker. Readers merge the shards.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the buckets, in microseconds: 100 µs to 10 s in 1-2.5-5 steps, fit for a
/// proxy whose own share is well under a millisecond. One more bucket counts the rest (+Inf).
pub const BOUNDS_MICROS: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Buckets, with the last one above every bound.
pub const BUCKETS: usize = BOUNDS_MICROS.len() + 1;

/// The bucket a duration of `micros` falls in: the first whose bound is at least `micros`.
#[inline]
pub fn bucket(micros: u64) -> usize {
    BOUNDS_MICROS.partition_point(|&bound| bound < micros)
}

/// One shard's histogram of durations.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS],
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Counts one duration; only this shard's worker calls it.
    #[inline]
    pub fn record(&self, micros: u64) {
        super::counters::add_alone(&self.counts[bucket(micros)], 1);
        super::counters::add_alone(&self.sum_micros, micros);
    }

    /// Adds this shard's counts to `into`.
    pub fn add_to(&self, into: &mut Merged) {
        for (total, count) in into.counts.iter_mut().zip(&self.counts) {
            *total += count.load(Ordering::Relaxed);
        }
        into.sum_micros += self.sum_micros.load(Ordering::Relaxed);
    }

    /// Starts again from nothing (a slot of [`super::window::Recent`] taking a new second).
    pub fn clear(&self) {
        for count in &self.counts {
            count.store(0, Ordering::Relaxed);
        }
        self.sum_micros.store(0, Ordering::Relaxed);
    }
}

/// Shards summed, for reading.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Merged {
    /// Per bucket, not cumulative.
    pub counts: [u64; BUCKETS],
    pub sum_micros: u64,
}

impl Merged {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `q` quantile (0..=1) in microseconds, interpolated linearly inside its bucket (the
    /// way Prometheus' `histogram_quantile` does); the last bucket reports its lower bound.
    /// `None` with no observations.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * count as f64;
        let mut below = 0u64;
        for (index, &in_bucket) in self.counts.iter().enumerate() {
            if in_bucket > 0 && (below + in_bucket) as f64 >= rank {
                let lower = if index == 0 {
                    0
                } else {
                    BOUNDS_MICROS[index - 1]
                };
                let Some(&upper) = BOUNDS_MICROS.get(index) else {
                    return Some(lower as f64);
                };
                let share = (rank - below as f64) / in_bucket as f64;
                return Some(lower as f64 + share * (upper - lower) as f64);
            }
            below += in_bucket;
        }
        Some(BOUNDS_MICROS[BOUNDS_MICROS.len() - 1] as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_goes_to_the_first_bucket_whose_bound_holds_it() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(100), 0);
        assert_eq!(bucket(101), 1);
        assert_eq!(bucket(999), 3);
        assert_eq!(bucket(1_000), 3);
        assert_eq!(bucket(10_000_000), 15);
        assert_eq!(bucket(10_000_001), 16);
        assert_eq!(bucket(u64::MAX), 16);
    }

    #[test]
    fn quantiles_interpolate_inside_the_bucket() {
        let histogram = Histogram::default();
        for _ in 0..50 {
            histogram.record(80); // 0..100 µs
        }
        for _ in 0..50 {
            histogram.record(700); // 500..1000 µs
        }
        let mut merged = Merged::default();
        histogram.add_to(&mut merged);
        histogram.add_to(&mut merged); // a second shard, the same
        assert_eq!(merged.count(), 200);
        assert_eq!(merged.sum_micros, 2 * (50 * 80 + 50 * 700));
        assert_eq!(merged.quantile(0.5), Some(100.0));
        assert_eq!(merged.quantile(0.25), Some(50.0));
        // 99th percentile: rank 198 of 200, 98 of the 100 in the 500..1000 bucket.
        assert_eq!(merged.quantile(0.99), Some(500.0 + 0.98 * 500.0));
        assert_eq!(Merged::default().quantile(0.5), None);
        histogram.clear();
        let mut empty = Merged::default();
        histogram.add_to(&mut empty);
        assert_eq!(empty.count(), 0);
    }

    #[test]
    fn beyond_the_last_bound_the_quantile_is_that_bound() {
        let histogram = Histogram::default();
        histogram.record(60_000_000);
        let mut merged = Merged::default();
        histogram.add_to(&mut merged);
        assert_eq!(merged.quantile(0.99), Some(10_000_000.0));
    }
}
