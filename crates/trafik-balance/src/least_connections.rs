use crate::{BackendSet, Explained, PickContext, Selector};

/// The backend with the fewest requests in flight, optionally relative to its weight
/// (`in_flight / weight`, the course's "en az bağlantı" over capacity). Ties go to the lowest
/// index, so the choice is deterministic. Ratios are compared by cross-multiplying, exactly.
#[derive(Debug, Default)]
pub struct LeastConnections {
    weighted: bool,
}

impl LeastConnections {
    /// Compares raw in-flight counts, ignoring weights.
    pub fn raw() -> Self {
        LeastConnections { weighted: false }
    }

    /// Compares in-flight counts divided by weight.
    pub fn weighted() -> Self {
        LeastConnections { weighted: true }
    }
}

impl Selector for LeastConnections {
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        let weight = |i: usize| -> u64 {
            if self.weighted {
                u64::from(backends.spec(i).weight.max(1))
            } else {
                1
            }
        };
        let mut best: Option<(usize, u64, u64)> = None;
        for i in 0..backends.len() {
            if !backends.is_available(i, context) {
                continue;
            }
            let (load, w) = (u64::from(backends.in_flight(i)), weight(i));
            // load / w < best_load / best_w  ⇔  load × best_w < best_load × w
            if best.is_none_or(|(_, best_load, best_w)| load * best_w < best_load * w) {
                best = Some((i, load, w));
            }
        }
        best.map(|(i, _, _)| i)
    }

    fn explain(&self, backends: &BackendSet, context: &PickContext) -> Explained {
        let Some(pick) = self.pick(backends, context) else {
            return Explained::none_available();
        };
        let measure = if self.weighted {
            "in flight / weight"
        } else {
            "in flight"
        };
        Explained::new(
            Some(pick),
            format!(
                "fewest {measure}: {} ({} in flight, weight {}; the first on a tie)",
                backends.spec(pick).id,
                backends.in_flight(pick),
                backends.spec(pick).weight
            ),
        )
    }

    fn name(&self) -> &'static str {
        if self.weighted {
            "least-connections"
        } else {
            "least-connections-raw"
        }
    }
}
