use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{BackendSet, PickContext, Selector};

/// Each request goes to the next available backend in turn.
///
/// One shared counter for all workers, so the course's "300 requests over 3 replicas gives
/// 100/100/100" holds exactly whatever worker a request lands on. The turn is taken among the
/// backends available to the request, as the course's balancer rotates over its list of healthy
/// replicas: with one of three down, the other two get exactly half each.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl Selector for RoundRobin {
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        let available = backends.available_count(context);
        if available == 0 {
            return None;
        }
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        backends.nth_available(turn % available, context)
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
