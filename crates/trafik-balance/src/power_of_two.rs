use crate::random::SharedRng;
use crate::{BackendSet, Explained, PickContext, Selector};

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

/// The less loaded of the two drawn backends (the first on a tie).
fn lighter(backends: &BackendSet, (a, b): (usize, Option<usize>)) -> usize {
    match b {
        Some(b) if backends.in_flight(b) < backends.in_flight(a) => b,
        _ => a,
    }
}

impl Selector for PowerOfTwoChoices {
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        Some(lighter(backends, draw_two(&self.rng, backends, context)?))
    }

    fn explain(&self, backends: &BackendSet, context: &PickContext) -> Explained {
        let Some(drawn) = draw_two(&self.rng.fork(), backends, context) else {
            return Explained::none_available();
        };
        let pick = lighter(backends, drawn);
        let told = |i: usize| {
            format!(
                "{} ({} in flight)",
                backends.spec(i).id,
                backends.in_flight(i)
            )
        };
        let reason = crate::explain::compared(drawn, &backends.spec(pick).id, told);
        Explained::new(Some(pick), reason)
    }

    fn name(&self) -> &'static str {
        "power-of-two"
    }
}
