use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{BackendSet, Explained, PickContext, Selector};

/// Each request goes to the next available backend in turn.
///
/// One shared counter for all workers, so the course's "300 requests over 3 replicas gives
/// 100/100/100" holds exactly whatever worker a request lands on. The turn is taken among the
/// backends available to the request, as the course's balancer rotates over its list of healthy
/// replicas: with one of three down, the other two get exactly half each.
///
/// A retry also takes the next turn, but counts it over the whole list and walks forward from
/// there to a backend it may use: with k2 stopped and unmarked, the request that failed on k2
/// goes to k3 (k2's successor), and the rotation still gives k1 and k3 half each.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl RoundRobin {
    /// The backend turn `turn` gives the request, `available` (at least 1) backends being
    /// available to it.
    fn on_turn(
        turn: usize,
        available: usize,
        backends: &BackendSet,
        context: &PickContext,
    ) -> Option<usize> {
        if context.tried.is_empty() {
            return backends.nth_available(turn % available, context);
        }
        let count = backends.len();
        (0..count)
            .map(|step| (turn + step) % count)
            .find(|&index| backends.is_available(index, context))
    }
}

impl Selector for RoundRobin {
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        let available = backends.available_count(context);
        if available == 0 {
            return None;
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        Self::on_turn(turn, available, backends, context)
    }

    fn explain(&self, backends: &BackendSet, context: &PickContext) -> Explained {
        let turn = self.next.load(Ordering::Relaxed);
        let available = backends.available_count(context);
        if available == 0 {
            return Explained::none_available();
        }
        match Self::on_turn(turn, available, backends, context) {
            Some(index) => Explained::new(
                Some(index),
                format!(
                    "turn {turn} of the rotation over {available} available backend(s) → {}",
                    backends.spec(index).id
                ),
            ),
            None => Explained::none_available(),
        }
    }

    fn name(&self) -> &'static str {
        "round-robin"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BackendSpec;

    fn set(count: usize) -> BackendSet {
        BackendSet::new((0..count).map(|i| BackendSpec {
            id: format!("b{i}"),
            weight: 1,
        }))
    }

    #[test]
    fn three_hundred_requests_split_evenly_over_three_backends() {
        let backends = set(3);
        let rule = RoundRobin::default();
        let mut counts = [0; 3];
        for _ in 0..300 {
            counts[rule.pick(&backends, &PickContext::default()).unwrap()] += 1;
        }
        assert_eq!(counts, [100, 100, 100]);
    }

    #[test]
    fn a_down_backend_is_skipped_and_its_share_goes_to_the_others() {
        let backends = set(3);
        backends.set_up(1, false);
        let rule = RoundRobin::default();
        let mut counts = [0; 3];
        for _ in 0..300 {
            counts[rule.pick(&backends, &PickContext::default()).unwrap()] += 1;
        }
        assert_eq!(counts, [150, 0, 150]);
    }

    #[test]
    fn a_retry_never_returns_a_tried_backend() {
        let backends = set(3);
        let rule = RoundRobin::default();
        let mut context = PickContext::default();
        let first = rule.pick(&backends, &context).unwrap();
        context.tried.insert(first);
        for _ in 0..10 {
            assert_ne!(rule.pick(&backends, &context), Some(first));
        }
    }

    #[test]
    fn retries_after_an_unmarked_failure_keep_the_shares_exact() {
        // k2 is stopped but health checks have not noticed: every request sent to it fails
        // once and is retried; k1 and k3 must still split the requests evenly.
        let backends = set(3);
        let rule = RoundRobin::default();
        let mut counts = [0; 3];
        for _ in 0..300 {
            let mut context = PickContext::default();
            let mut chosen = rule.pick(&backends, &context).unwrap();
            if chosen == 1 {
                context.tried.insert(1);
                chosen = rule.pick(&backends, &context).unwrap();
            }
            counts[chosen] += 1;
        }
        assert_eq!(counts, [150, 0, 150]);
    }

    #[test]
    fn nothing_available_gives_none() {
        let backends = set(2);
        backends.set_up(0, false);
        backends.set_draining(1, true);
        assert_eq!(
            RoundRobin::default().pick(&backends, &PickContext::default()),
            None
        );
        assert_eq!(
            RoundRobin::default().pick(&set(0), &PickContext::default()),
            None
        );
    }
}
