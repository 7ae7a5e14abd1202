use crate::ring::HashRing;
use crate::{BackendSet, Explained, PickContext, Selector};

/// Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam 2018; used by
/// HAProxy's `hash-balance-factor`): a key goes to the first backend clockwise whose in-flight
/// count is below `ceil(factor × (in_flight_total + 1) / available)`, so no backend ever holds
/// more than `factor` times the average while keys still mostly stay home.
#[derive(Debug)]
pub struct BoundedLoadRing {
    ring: HashRing,
    factor: f64,
}

impl BoundedLoadRing {
    /// `factor` is clamped to at least 1.0 (1.25 is a common choice).
    pub fn new(ring: HashRing, factor: f64) -> Self {
        BoundedLoadRing {
            ring,
            factor: factor.max(1.0),
        }
    }

    /// The most requests one backend may hold when `total` (including the one being placed)
    /// are spread over `available` backends.
    pub fn cap(&self, total: u64, available: u64) -> u64 {
        (self.factor * total as f64 / available.max(1) as f64).ceil() as u64
    }
}

impl BoundedLoadRing {
    /// The pick for the key `key` gives once a backend is known to be available, with the key
    /// and the cap it was held to.
    fn place(
        &self,
        key: impl FnOnce() -> u64,
        backends: &BackendSet,
        context: &PickContext,
    ) -> Option<(usize, u64, u64)> {
        let mut total = 1u64;
        let mut available = 0u64;
        for i in 0..backends.len() {
            if backends.is_available(i, context) {
                total += u64::from(backends.in_flight(i));
                available += 1;
            }
        }
        if available == 0 {
            return None;
        }
        let cap = self.cap(total, available);
        let key = key();
        self.ring
            .walk(key)
            .find(|&i| backends.is_available(i, context) && u64::from(backends.in_flight(i)) < cap)
            .map(|pick| (pick, key, cap))
    }
}

impl Selector for BoundedLoadRing {
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        self.place(|| self.ring.key_or_spread(context), backends, context)
            .map(|(pick, _, _)| pick)
    }

    fn explain(&self, backends: &BackendSet, context: &PickContext) -> Explained {
        match self.place(|| self.ring.next_key(context), backends, context) {
            Some((pick, key, cap)) => Explained::new(
                Some(pick),
                format!(
                    "{}; bound {cap} in flight per backend ({} has {})",
                    self.ring.tell(key, pick, backends, context),
                    backends.spec(pick).id,
                    backends.in_flight(pick)
                ),
            ),
            None => Explained::none_available(),
        }
    }

    fn name(&self) -> &'static str {
        "bounded-load"
    }
}
