/// A load split in proportion to weight, computed once for a known total (the course's
/// "kapasiteye göre"): each backend gets `floor(load × weight / total_weight)` and the units the
/// floors leave over are **not** handed out but counted, because a static plan has nobody to
/// give them to. That leftover is why the model shows the rule missing work even when there is
/// spare capacity.
///
/// It is not a per-request [`crate::Selector`]: it needs the whole load up front. Per request,
/// [`crate::SmoothWeightedRoundRobin`] gives the same proportions with nothing left over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapacityShare {
    /// Units given to each backend, in backend order.
    pub shares: Vec<u64>,
    /// Units no backend received.
    pub undistributed: u64,
}

impl CapacityShare {
    pub fn split(load: u64, weights: &[u64]) -> Self {
        let total: u64 = weights.iter().sum();
        let shares: Vec<u64> = weights
            .iter()
            .map(|&w| (load * w).checked_div(total).unwrap_or(0))
            .collect();
        let undistributed = load - shares.iter().sum::<u64>();
        CapacityShare {
            shares,
            undistributed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_leave_units_undistributed_and_counted() {
        let split = CapacityShare::split(10, &[1, 1, 1]);
        assert_eq!(split.shares, [3, 3, 3]);
        assert_eq!(split.undistributed, 1);
        let split = CapacityShare::split(12, &[1, 2, 3]);
        assert_eq!(split.shares, [2, 4, 6]);
        assert_eq!(split.undistributed, 0);
    }
}
