use std::sync::atomic::{AtomicU64, Ordering};

use crate::Nanos;

/// How long the budget remembers requests and retries: two halves of this, the older dropped as
/// a new one starts.
const WINDOW: Nanos = RETRY_WINDOW_SECONDS * 1_000_000_000;

/// The budget's window in seconds.
pub const RETRY_WINDOW_SECONDS: u64 = 10;
const HALF: Nanos = WINDOW / 2;

/// A pool's retry budget (linkerd's, Envoy's `retry_budget`): over the last ten seconds, retries
/// may be at most `ratio` of the requests plus `floor_per_second` a second, so when every backend
/// fails retries add a fifth to the load instead of multiplying it. Shared by the workers through
/// atomics; two racing workers may overshoot by one. No clock is read: `now` is passed in.
#[derive(Debug)]
pub struct RetryBudget {
    ratio: f64,
    floor: u64,
    halves: [Half; 2],
}

/// A budget's window at one moment: first tries and retries counted, and the retries allowed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetStanding {
    pub requests: u64,
    pub retries: u64,
    pub allowed: f64,
}

impl BudgetStanding {
    /// Retries the budget grants before it refuses (the last one may be a share).
    pub fn left(&self) -> f64 {
        (self.allowed - self.retries as f64).max(0.0)
    }
}

/// One half of the window: its number (time / HALF) and what it counted.
#[derive(Debug, Default)]
struct Half {
    number: AtomicU64,
    requests: AtomicU64,
    retries: AtomicU64,
}

impl RetryBudget {
    /// `ratio` of requests (0.2 is a fifth) plus `floor_per_second` retries a second.
    pub fn new(ratio: f64, floor_per_second: u32) -> Self {
        RetryBudget {
            ratio: ratio.max(0.0),
            floor: u64::from(floor_per_second) * (WINDOW / 1_000_000_000),
            halves: Default::default(),
        }
    }

    /// Counts a request's first try.
    pub fn request(&self, now: Nanos) {
        self.half(now).requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one retry from the budget if it allows one at `now`.
    pub fn try_retry(&self, now: Nanos) -> bool {
        let standing = self.standing(now);
        if (standing.retries as f64) < standing.allowed {
            self.half(now).retries.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// What the budget holds at `now`, read without counting anything (`trafik explain`): the
    /// next [`RetryBudget::try_retry`] is granted while `retries` is below `allowed`.
    pub fn standing(&self, now: Nanos) -> BudgetStanding {
        let current = now / HALF;
        let (mut requests, mut retries) = (0, 0);
        for half in &self.halves {
            let number = half.number.load(Ordering::Relaxed);
            if number + 1 >= current && number <= current {
                requests += half.requests.load(Ordering::Relaxed);
                retries += half.retries.load(Ordering::Relaxed);
            }
        }
        BudgetStanding {
            requests,
            retries,
            allowed: self.floor as f64 + self.ratio * requests as f64,
        }
    }

    /// The half `now` falls in, emptied first if it last counted an older half.
    fn half(&self, now: Nanos) -> &Half {
        let number = now / HALF;
        let half = &self.halves[(number % 2) as usize];
        let seen = half.number.load(Ordering::Relaxed);
        if seen != number
            && half
                .number
                .compare_exchange(seen, number, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            half.requests.store(0, Ordering::Relaxed);
            half.retries.store(0, Ordering::Relaxed);
        }
        half
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Nanos = 1_000_000_000;

    #[test]
    fn retries_stay_within_a_fifth_of_requests_plus_the_floor() {
        let budget = RetryBudget::new(0.2, 1);
        let mut granted = 0;
        // 1,000 requests in 10 s, each failing and asking for a retry.
        for n in 0..1_000u64 {
            let now = 100 * SECOND + n * (10 * SECOND / 1_000);
            budget.request(now);
            if budget.try_retry(now) {
                granted += 1;
            }
        }
        // A fifth of 1,000 plus 10 (1 a second over the 10 s window), give or take the halves.
        assert!((200..=215).contains(&granted), "{granted} retries granted");
    }

    #[test]
    fn the_floor_lets_a_quiet_pool_retry_and_old_requests_are_forgotten() {
        let budget = RetryBudget::new(0.2, 1);
        let granted = (0..20).filter(|_| budget.try_retry(SECOND)).count();
        assert_eq!(
            granted, 10,
            "ten a second's floor over the window, no requests"
        );
        // Twenty seconds on, the window is empty again.
        assert!(budget.try_retry(21 * SECOND));
        let none = RetryBudget::new(0.0, 0);
        none.request(SECOND);
        assert!(!none.try_retry(SECOND));
    }

    #[test]
    fn the_standing_is_read_without_taking_a_retry() {
        let budget = RetryBudget::new(0.5, 0);
        for _ in 0..4 {
            budget.request(SECOND);
        }
        let before = budget.standing(SECOND);
        assert_eq!(before.left(), 2.0);
        assert_eq!(budget.standing(SECOND), before, "reading took nothing");
        assert!(budget.try_retry(SECOND));
        assert_eq!(budget.standing(SECOND).left(), 1.0);
        assert!(budget.try_retry(SECOND));
        assert_eq!(budget.standing(SECOND).left(), 0.0);
        assert!(!budget.try_retry(SECOND), "none left, as the standing said");
    }
}
