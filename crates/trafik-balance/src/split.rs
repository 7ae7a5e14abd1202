//! A weighted split of a route's requests across pools (a canary: 90 to `v1`, 10 to `v2`).

/// Chooses a share by weight from a 64-bit draw: a random one for a free choice, the stable
/// hash of a client's key for one the client keeps while the weights stay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightedSplit {
    /// The running total of the weights: share `i` takes the points below `bounds[i]`.
    bounds: Vec<u64>,
}

impl WeightedSplit {
    /// `weights` in share order; a zero weight gets nothing.
    pub fn new(weights: &[u32]) -> Self {
        let bounds = weights
            .iter()
            .scan(0u64, |total, &w| {
                *total += u64::from(w);
                Some(*total)
            })
            .collect();
        WeightedSplit { bounds }
    }

    /// Each share's weight, in share order.
    pub fn weights(&self) -> impl Iterator<Item = u64> + '_ {
        let mut before = 0;
        self.bounds.iter().map(move |&bound| {
            let weight = bound - before;
            before = bound;
            weight
        })
    }

    /// The share `draw` falls in: the draw scaled into the total by multiply-shift, so every
    /// point of the total is as likely as any other. `None` when all weights are zero.
    pub fn pick(&self, draw: u64) -> Option<usize> {
        let total = *self.bounds.last()?;
        if total == 0 {
            return None;
        }
        let point = ((u128::from(draw) * u128::from(total)) >> 64) as u64;
        Some(self.bounds.partition_point(|&bound| bound <= point))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SharedRng;

    #[test]
    fn draws_fall_in_proportion_to_the_weights() {
        let split = WeightedSplit::new(&[90, 10]);
        let rng = SharedRng::new(7);
        let mut counts = [0u32; 2];
        for _ in 0..100_000 {
            counts[split.pick(rng.next_u64()).unwrap()] += 1;
        }
        assert!((9_800..10_200).contains(&counts[1]), "{counts:?}");
    }

    #[test]
    fn the_ends_of_the_draw_land_in_the_first_and_last_shares() {
        let split = WeightedSplit::new(&[1, 0, 1]);
        assert_eq!(split.pick(0), Some(0));
        assert_eq!(split.pick(u64::MAX), Some(2));
        assert_eq!(split.pick(u64::MAX / 2 + 1), Some(2));
        assert_eq!(WeightedSplit::new(&[0, 0]).pick(5), None);
        assert_eq!(WeightedSplit::new(&[]).pick(5), None);
    }
}
