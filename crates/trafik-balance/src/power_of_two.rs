use crate::random::SharedRng;
use crate::{BackendSet, PickContext, Selector};

/// Power of two choices: draw two different backends at random and take the one with fewer
/// requests in flight. Nearly as good as scanning for the least loaded, at a constant cost, and
/// it avoids every balancer herding onto the same "least loaded" backend.
#[derive(Debug)]
pub struct PowerOfTwoChoices {
    rng: SharedRng,
}

impl PowerOfTwoChoices {
    pub fn new(seed: u64) -> Self {
        PowerOfTwoChoices {
            rng: SharedRng::new(seed),
        }
    }
}

/// Two distinct available backends drawn at random (or the only one), for the P2C rules.
pub(crate) fn draw_two(
    rng: &SharedRng,
    backends: &BackendSet,
    context: &PickContext,
) -> Option<(usize, Option<usize>)> {
    let count = backends.available_count(context);
    if count == 0 {
        return None;
    }
    if count == 1 {
        return Some((backends.nth_available(0, context)?, None));
    }
    let first = rng.below(count);
    // The second is drawn from the other count-1 backends, so the two always differ.
    let second = (first + 1 + rng.below(count - 1)) % count;
    Some((
        backends.nth_available(first, context)?,
        backends.nth_available(second, context),
    ))
}

impl Selector for PowerOfTwoChoices {
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        let (a, b) = draw_two(&self.rng, backends, context)?;
        Some(match b {
            Some(b) if backends.in_flight(b) < backends.in_flight(a) => b,
            _ => a,
        })
    }

    fn name(&self) -> &'static str {
        "power-of-two"
    }
}
