use crate::random::SharedRng;
use crate::{BackendSet, Explained, PickContext, Selector};

/// Draws at random in proportion to weight, from a seeded generator.
#[derive(Debug)]
pub struct WeightedRandom {
    /// Running sums of weights, for a binary search of the drawn number.
    cumulative: Box<[u64]>,
    rng: SharedRng,
}

impl WeightedRandom {
    pub fn new(backends: &BackendSet, seed: u64) -> Self {
        let mut sum = 0;
        let cumulative = (0..backends.len())
            .map(|i| {
                sum += u64::from(backends.spec(i).weight.max(1));
                sum
            })
            .collect();
        WeightedRandom {
            cumulative,
            rng: SharedRng::new(seed),
        }
    }

    /// The pick with the draws of `rng`.
    fn draw(&self, rng: &SharedRng, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        let total = *self.cumulative.last()?;
        // A few draws find an available backend unless most are down; then draw among the
        // available ones only, by weight.
        for _ in 0..4 {
            let point = rng.below_u64(total);
            let index = self.cumulative.partition_point(|&c| c <= point);
            if backends.is_available(index, context) {
                return Some(index);
            }
        }
        let available: u64 = (0..backends.len())
            .filter(|&i| backends.is_available(i, context))
            .map(|i| u64::from(backends.spec(i).weight.max(1)))
            .sum();
        if available == 0 {
            return None;
        }
        let mut point = rng.below_u64(available);
        (0..backends.len())
            .filter(|&i| backends.is_available(i, context))
            .find(|&i| {
                let w = u64::from(backends.spec(i).weight.max(1));
                if point < w {
                    true
                } else {
                    point -= w;
                    false
                }
            })
    }
}

impl Selector for WeightedRandom {
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        self.draw(&self.rng, backends, context)
    }

    fn explain(&self, backends: &BackendSet, context: &PickContext) -> Explained {
        match self.draw(&self.rng.fork(), backends, context) {
            Some(pick) => Explained::new(
                Some(pick),
                format!(
                    "the next seeded draw by weight lands on {} (weight {})",
                    backends.spec(pick).id,
                    backends.spec(pick).weight
                ),
            ),
            None => Explained::none_available(),
        }
    }

    fn name(&self) -> &'static str {
        "random"
    }
}
