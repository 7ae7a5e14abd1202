use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use arc_swap::ArcSwap;

use crate::{BackendSet, Explained, PickContext, Selector};

/// Longest precomputed cycle; larger total weights are scaled down to fit.
const MAX_CYCLE: i64 = 1 << 20;

/// Smooth weighted round robin (nginx's): every backend gains its weight each turn, the richest
/// is picked and pays the total. Weights 5 and 1 give `a a b a a a`-style interleaving, never
/// five in a row, and exact shares over every cycle of `sum(weights)` picks.
///
/// The cycle over the backends available now is computed once and a pick is one atomic
/// increment, with no lock: when a backend goes down, comes back or drains, one pick that sees
/// the change computes the new cycle (the others meanwhile walk the old one, skipping what is
/// unavailable), so shares among the available backends stay exact. A retry walks on from its
/// turn to the next entry it has not tried. Weights are divided by their greatest common divisor,
/// so `100, 200` costs a cycle of 3, not 300.
#[derive(Debug)]
pub struct SmoothWeightedRoundRobin {
    weights: Box<[i64]>,
    cycle: ArcSwap<Cycle>,
    next: AtomicUsize,
    /// Held by the one pick computing a new cycle.
    computing: AtomicBool,
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
        let divisor = weights.iter().copied().reduce(gcd).unwrap_or(1).max(1);
        for weight in &mut weights {
            *weight /= divisor;
        }
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
            computing: AtomicBool::new(false),
        };
        rule.cycle.store(Arc::new(rule.compute(backends)));
        rule
    }

    /// The cycle for the set as it is now. Availability is read once, so a backend changing
    /// meanwhile cannot make the cycle inconsistent (the next generation recomputes it).
    fn compute(&self, backends: &BackendSet) -> Cycle {
        let generation = backends.generation();
        let none_tried = PickContext::default();
        let available: Vec<bool> = (0..self.weights.len().min(backends.len()))
            .map(|i| backends.is_available(i, &none_tried))
            .collect();
        let total: i64 = (0..available.len())
            .filter(|&i| available[i])
            .map(|i| self.weights[i])
            .sum();
        let mut current = vec![0i64; available.len()];
        let order = (0..total)
            .map_while(|_| smooth_step(&mut current, &self.weights, |i| available[i]))
            .map(|index| index as u32)
            .collect();
        Cycle { generation, order }
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// One step of smooth WRR over the backends `eligible` accepts; returns the chosen index.
fn smooth_step(
    current: &mut [i64],
    weights: &[i64],
    eligible: impl Fn(usize) -> bool,
) -> Option<usize> {
    let mut total = 0;
    let mut best: Option<usize> = None;
    for i in 0..current.len() {
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
    best
}

impl SmoothWeightedRoundRobin {
    /// The backend turn `turn` of `cycle` gives the request.
    fn on_turn(
        cycle: &Cycle,
        turn: usize,
        backends: &BackendSet,
        context: &PickContext,
    ) -> Option<usize> {
        let length = cycle.order.len();
        (0..length)
            .map(|step| cycle.order[(turn + step) % length] as usize)
            .find(|&index| backends.is_available(index, context))
    }
}

impl Selector for SmoothWeightedRoundRobin {
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        let mut cycle = self.cycle.load();
        if cycle.generation != backends.generation()
            && self
                .computing
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            self.cycle.store(Arc::new(self.compute(backends)));
            self.computing.store(false, Ordering::Release);
            cycle = self.cycle.load();
        }
        if cycle.order.is_empty() {
            return None;
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        Self::on_turn(&cycle, turn, backends, context)
    }

    fn explain(&self, backends: &BackendSet, context: &PickContext) -> Explained {
        let stored = self.cycle.load_full();
        // A stale cycle would be recomputed by the pick: explain with the one it would build.
        let cycle = if stored.generation == backends.generation() {
            stored
        } else {
            Arc::new(self.compute(backends))
        };
        let turn = self.next.load(Ordering::Relaxed);
        match Self::on_turn(&cycle, turn, backends, context) {
            Some(index) if !cycle.order.is_empty() => Explained::new(
                Some(index),
                format!(
                    "turn {} of a smooth weighted cycle of {} slot(s) → {} (weight {})",
                    turn % cycle.order.len(),
                    cycle.order.len(),
                    backends.spec(index).id,
                    self.weights.get(index).copied().unwrap_or(1)
                ),
            ),
            _ => Explained::none_available(),
        }
    }

    fn name(&self) -> &'static str {
        "weighted-round-robin"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BackendSpec;

    fn set(weights: &[u32]) -> BackendSet {
        BackendSet::new(weights.iter().enumerate().map(|(i, &weight)| BackendSpec {
            id: format!("b{i}"),
            weight,
        }))
    }

    #[test]
    fn shares_follow_weights_and_stay_exact_when_one_drains() {
        let backends = set(&[500, 100, 400]);
        let rule = SmoothWeightedRoundRobin::new(&backends);
        let mut counts = [0; 3];
        for _ in 0..100 {
            counts[rule.pick(&backends, &PickContext::default()).unwrap()] += 1;
        }
        assert_eq!(counts, [50, 10, 40]);
        backends.set_draining(0, true);
        let mut counts = [0; 3];
        for _ in 0..50 {
            counts[rule.pick(&backends, &PickContext::default()).unwrap()] += 1;
        }
        assert_eq!(counts, [0, 10, 40], "among the rest, 1:4 exactly");
    }

    #[test]
    fn the_last_backend_going_down_never_panics_a_pick() {
        // Heavy weights make the cycle long; availability changing while it is computed must
        // give a consistent cycle or none, never an index outside the set.
        for attempt in 0..20u64 {
            let backends = std::sync::Arc::new(set(&[1_000_000, 999_999]));
            let rule = SmoothWeightedRoundRobin::new(&backends);
            backends.set_draining(0, true);
            backends.set_draining(0, false);
            let flipper = {
                let backends = backends.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_micros(100 * attempt));
                    backends.set_up(0, false);
                })
            };
            let picked = rule.pick(&backends, &PickContext::default());
            flipper.join().unwrap();
            assert!(picked.is_none_or(|index| index < 2));
        }
    }
}
