use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arc_swap::ArcSwap;

use crate::{BackendSet, PickContext, Selector};

/// Longest precomputed cycle; larger total weights are scaled down to fit.
const MAX_CYCLE: i64 = 1 << 20;

/// Smooth weighted round robin (nginx's): every backend gains its weight each turn, the richest
/// is picked and pays the total. Weights 5 and 1 give `a a b a a a`-style interleaving, never
/// five in a row, and exact shares over every cycle of `sum(weights)` picks.
///
/// The cycle over the backends available now is computed once and a pick is one atomic
/// increment, with no lock: when a backend goes down, comes back or drains, the first pick that
/// sees the change computes the new cycle, so shares among the available backends stay exact.
/// A retry walks on from its turn to the next entry it has not tried.
#[derive(Debug)]
pub struct SmoothWeightedRoundRobin {
    weights: Box<[i64]>,
    cycle: ArcSwap<Cycle>,
    next: AtomicUsize,
}

/// The order of one full cycle, for one state of the backend set.
#[derive(Debug)]
struct Cycle {
    /// [`BackendSet::generation`] it was computed for.
    generation: u64,
    order: Box<[u32]>,
}

impl SmoothWeightedRoundRobin {
    pub fn new(backends: &BackendSet) -> Self {
        let mut weights: Vec<i64> = (0..backends.len())
            .map(|i| i64::from(backends.spec(i).weight.max(1)))
            .collect();
        let total: i64 = weights.iter().sum();
        if total > MAX_CYCLE {
            // Keep the proportions as closely as a cycle of MAX_CYCLE allows.
            for weight in &mut weights {
                *weight = (*weight * MAX_CYCLE / total).max(1);
            }
        }
        let rule = SmoothWeightedRoundRobin {
            weights: weights.into_boxed_slice(),
            cycle: ArcSwap::from_pointee(Cycle {
                generation: u64::MAX,
                order: Box::default(),
            }),
            next: AtomicUsize::new(0),
        };
        rule.cycle.store(Arc::new(rule.compute(backends)));
        rule
    }

    fn compute(&self, backends: &BackendSet) -> Cycle {
        let generation = backends.generation();
        let none_tried = PickContext::default();
        let eligible = |i: usize| backends.is_available(i, &none_tried);
        let total: i64 = (0..self.weights.len())
            .filter(|&i| eligible(i))
            .map(|i| self.weights[i])
            .sum();
        let mut current = vec![0i64; self.weights.len()];
        let order = (0..total)
            .map(|_| smooth_step(&mut current, &self.weights, eligible) as u32)
            .collect();
        Cycle { generation, order }
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
        let mut cycle = self.cycle.load();
        if cycle.generation != backends.generation() {
            self.cycle.store(Arc::new(self.compute(backends)));
            cycle = self.cycle.load();
        }
        let length = cycle.order.len();
        if length == 0 {
            return None;
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        (0..length)
            .map(|step| cycle.order[(turn + step) % length] as usize)
            .find(|&index| backends.is_available(index, context))
    }

    fn name(&self) -> &'static str {
        "weighted-round-robin"
    }
}
