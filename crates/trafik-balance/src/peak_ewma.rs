use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::power_of_two::draw_two;
use crate::random::SharedRng;
use crate::{BackendSet, Explained, Nanos, PickContext, Selector};

/// Peak-EWMA (Finagle, linkerd): each backend's latency is a moving average that jumps up to
/// any slower observation at once ("peak") and decays back over `decay`; the cost of a backend
/// is that estimate times its requests in flight plus one, and two random backends are compared
/// by cost. A replica that slows down loses traffic after its first slow answer.
///
/// Time is passed in ([`PickContext::now`], `observe`'s `now`), so the simulator runs this code
/// on its own clock.
#[derive(Debug)]
pub struct PeakEwma {
    rng: SharedRng,
    decay_nanos: f64,
    /// Per backend: the estimate in nanoseconds (f64 bits) and when it was last updated.
    estimates: Box<[(AtomicU64, AtomicU64)]>,
}

impl PeakEwma {
    pub fn new(backends: &BackendSet, decay: Duration, seed: u64) -> Self {
        PeakEwma {
            rng: SharedRng::new(seed),
            decay_nanos: decay.as_nanos().max(1) as f64,
            estimates: (0..backends.len())
                .map(|_| (AtomicU64::new(0f64.to_bits()), AtomicU64::new(0)))
                .collect(),
        }
    }

    /// The estimate of backend `index` decayed to `now`.
    fn estimate(&self, index: usize, now: Nanos) -> f64 {
        let (value, stamp) = &self.estimates[index];
        let value = f64::from_bits(value.load(Ordering::Relaxed));
        let elapsed = now.saturating_sub(stamp.load(Ordering::Relaxed)) as f64;
        value * (-elapsed / self.decay_nanos).exp()
    }

    /// The cheaper of the two drawn backends (the first on a tie).
    fn cheaper(&self, backends: &BackendSet, (a, b): (usize, Option<usize>), now: Nanos) -> usize {
        match b {
            Some(b) if self.cost(backends, b, now) < self.cost(backends, a, now) => b,
            _ => a,
        }
    }

    fn cost(&self, backends: &BackendSet, index: usize, now: Nanos) -> f64 {
        self.estimate(index, now) * f64::from(backends.in_flight(index) + 1)
    }
}

impl Selector for PeakEwma {
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        let drawn = draw_two(&self.rng, backends, context)?;
        Some(self.cheaper(backends, drawn, context.now))
    }

    fn explain(&self, backends: &BackendSet, context: &PickContext) -> Explained {
        let Some(drawn) = draw_two(&self.rng.fork(), backends, context) else {
            return Explained::none_available();
        };
        let pick = self.cheaper(backends, drawn, context.now);
        let told = |i: usize| {
            format!(
                "{} (EWMA {:.3} ms × {} in flight + 1 = cost {:.3})",
                backends.spec(i).id,
                self.estimate(i, context.now) / 1e6,
                backends.in_flight(i),
                self.cost(backends, i, context.now) / 1e6
            )
        };
        let reason = crate::explain::compared(drawn, &backends.spec(pick).id, told);
        Explained {
            latency_estimates: (0..backends.len())
                .map(|i| self.estimate(i, context.now))
                .collect(),
            ..Explained::new(Some(pick), reason)
        }
    }

    fn observe(&self, index: usize, latency: Duration, now: Nanos) {
        let sample = latency.as_nanos() as f64;
        let (value, stamp) = &self.estimates[index];
        let stored = f64::from_bits(value.load(Ordering::Relaxed));
        // Peak: a slower answer replaces the estimate outright; a faster one is averaged in,
        // the more the longer it has been since the last answer.
        let updated = if sample > stored {
            sample
        } else {
            let elapsed = now.saturating_sub(stamp.load(Ordering::Relaxed)) as f64;
            let weight = (-elapsed / self.decay_nanos).exp();
            stored * weight + sample * (1.0 - weight)
        };
        value.store(updated.to_bits(), Ordering::Relaxed);
        stamp.store(now, Ordering::Relaxed);
    }

    fn name(&self) -> &'static str {
        "peak-ewma"
    }
}
