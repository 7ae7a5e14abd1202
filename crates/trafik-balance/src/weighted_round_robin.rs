use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{BackendSet, PickContext, Selector, Tried};

/// Longest precomputed cycle; larger total weights use the locked path on every pick.
const MAX_CYCLE: usize = 1 << 20;

/// Smooth weighted round robin (nginx's): every backend gains its weight each turn, the richest
/// is picked and pays the total. Weights 5 and 1 give `a a b a a a`-style interleaving, never
/// five in a row, and exact shares over every cycle of `sum(weights)` picks.
///
/// While every backend is available the cycle is precomputed and a pick is one atomic
/// increment; when some are down or draining, the same algorithm runs over the available ones
/// under a lock, so their shares stay exact too.
#[derive(Debug)]
pub struct SmoothWeightedRoundRobin {
    weights: Box<[i64]>,
    cycle: Box<[u32]>,
    next: AtomicUsize,
    current: Mutex<Vec<i64>>,
}

impl SmoothWeightedRoundRobin {
    pub fn new(backends: &BackendSet) -> Self {
        let weights: Vec<i64> = (0..backends.len())
            .map(|i| i64::from(backends.spec(i).weight.max(1)))
            .collect();
        let total: i64 = weights.iter().sum();
        let mut cycle = Vec::new();
        if (total as usize) <= MAX_CYCLE {
            let mut current = vec![0i64; weights.len()];
            for _ in 0..total {
                cycle.push(smooth_step(&mut current, &weights, |_| true) as u32);
            }
        }
        SmoothWeightedRoundRobin {
            cycle: cycle.into_boxed_slice(),
            next: AtomicUsize::new(0),
            current: Mutex::new(vec![0; weights.len()]),
            weights: weights.into_boxed_slice(),
        }
    }
}

/// One step of smooth WRR over the backends `eligible` accepts; returns the chosen index.
fn smooth_step(current: &mut [i64], weights: &[i64], eligible: impl Fn(usize) -> bool) -> usize {
    let mut total = 0;
    let mut best: Option<usize> = None;
    for i in 0..weights.len() {
        if !eligible(i) {
            continue;
        }
        current[i] += weights[i];
        total += weights[i];
        if best.is_none_or(|b| current[i] > current[b]) {
            best = Some(i);
        }
    }
    if let Some(b) = best {
        current[b] -= total;
    }
    best.unwrap_or(usize::MAX)
}

impl Selector for SmoothWeightedRoundRobin {
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        if backends.is_empty() {
            return None;
        }
        if !self.cycle.is_empty() && context.tried == Tried::default() && backends.all_available() {
            let turn = self.next.fetch_add(1, Ordering::Relaxed);
            return Some(self.cycle[turn % self.cycle.len()] as usize);
        }
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let chosen = smooth_step(&mut current, &self.weights, |i| {
            backends.is_available(i, context)
        });
        (chosen != usize::MAX).then_some(chosen)
    }

    fn name(&self) -> &'static str {
        "weighted-round-robin"
    }
}
