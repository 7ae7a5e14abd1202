//! A seeded, lock-free random source for the rules that choose at random.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::hash::mix64;

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64 over an atomic counter: any number of threads draw from it without a lock, and
/// the same seed gives the same sequence (for the simulator and for tests).
#[derive(Debug)]
pub struct SharedRng {
    state: AtomicU64,
}

impl SharedRng {
    pub fn new(seed: u64) -> Self {
        SharedRng {
            state: AtomicU64::new(seed),
        }
    }

    /// The next 64 random bits.
    /// A generator that draws the numbers this one draws next, leaving this one as it is: what
    /// explains a random pick before it is taken.
    pub fn fork(&self) -> SharedRng {
        SharedRng::new(self.state.load(Ordering::Relaxed))
    }

    #[inline]
    pub fn next_u64(&self) -> u64 {
        let state = self
            .state
            .fetch_add(GOLDEN_GAMMA, Ordering::Relaxed)
            .wrapping_add(GOLDEN_GAMMA);
        mix64(state)
    }

    /// A number in `0..bound` (`bound` > 0), by Lemire's multiply-shift (no division).
    #[inline]
    pub fn below(&self, bound: usize) -> usize {
        self.below_u64(bound as u64) as usize
    }

    /// [`Self::below`] for 64-bit bounds.
    #[inline]
    pub fn below_u64(&self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_sequence_and_values_stay_in_range() {
        let a = SharedRng::new(7);
        let b = SharedRng::new(7);
        for _ in 0..100 {
            let x = a.below(3);
            assert_eq!(x, b.below(3));
            assert!(x < 3);
        }
    }

    #[test]
    fn draws_are_roughly_uniform() {
        let rng = SharedRng::new(1);
        let mut counts = [0u32; 4];
        for _ in 0..40_000 {
            counts[rng.below(4)] += 1;
        }
        for count in counts {
            assert!((9_000..11_000).contains(&count), "{counts:?}");
        }
    }
}
