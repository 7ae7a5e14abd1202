//! A pool's retries: after a failed connect (nothing was sent), or after the backend lost a
//! request or answered with a status the pool retries, the request may go to another backend.
//! A pool's budget bounds all retries, so a failing pool gets a fifth more load, not several
//! times its load. (Which requests may be sent twice is the protocol's business.)

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use trafik_balance::random::SharedRng;
use trafik_balance::{Nanos, RetryBudget};

use crate::counters::{PerWorker, bump};
use crate::plan::RetryPlan;

/// A pool's retries: the budget that bounds them and what they came to, summed over workers for
/// `/status`. Carried across reloads, so a reload does not refill the budget.
pub struct Retrying {
    budget: Arc<RetryBudget>,
    budget_settings: (f64, u32),
    /// Retries sent.
    pub sent: Arc<PerWorker<AtomicU64>>,
    /// Retries the budget refused: the client got the failure instead.
    pub refused: Arc<PerWorker<AtomicU64>>,
    statuses: Vec<u16>,
    backoff: Duration,
}

impl Retrying {
    pub fn new(plan: &RetryPlan, previous: Option<&Retrying>, workers: usize) -> Self {
        let kept = |counter: fn(&Retrying) -> &Arc<PerWorker<AtomicU64>>| {
            previous.map_or_else(|| Arc::new(PerWorker::new(workers)), |p| counter(p).clone())
        };
        let same_budget =
            previous.filter(|p| p.budget_settings == (plan.budget_ratio, plan.budget_floor));
        Retrying {
            budget: same_budget.map_or_else(
                || Arc::new(RetryBudget::new(plan.budget_ratio, plan.budget_floor)),
                |p| p.budget.clone(),
            ),
            budget_settings: (plan.budget_ratio, plan.budget_floor),
            sent: kept(|p| &p.sent),
            refused: kept(|p| &p.refused),
            statuses: plan.statuses.clone(),
            backoff: plan.backoff,
        }
    }

    /// Counts a request's first try into the budget.
    pub fn first_try(&self, now: Nanos) {
        self.budget.request(now);
    }

    /// Whether try `attempt` (0 for the first) may be followed by another: `retries` allows
    /// one more and the budget has room. Counts the retry or the refusal.
    pub fn another(&self, attempt: u32, retries: u32, worker: usize, now: Nanos) -> bool {
        if attempt >= retries {
            return false;
        }
        let granted = self.budget.try_retry(now);
        let counter = if granted { &self.sent } else { &self.refused };
        bump(counter.mine(worker));
        granted
    }

    /// Whether an answer with `status` goes to another backend instead of the client: a status
    /// the pool retries, without a `Retry-After` (the backend then says when to ask again, and
    /// the client hears it).
    pub fn retries_answer(&self, status: u16, retry_after: bool) -> bool {
        self.statuses.contains(&status) && !retry_after
    }

    /// The retry policy and the budget left at `now`, told without taking a retry
    /// (`trafik explain`). `repeatable` is whether this request may be sent twice after the
    /// backend had it (bodiless, and idempotent or allowed by its route); a failed connect is
    /// retried whatever the request.
    pub fn explain(&self, retries: u32, repeatable: bool, now: Nanos) -> serde_json::Value {
        let standing = self.budget.standing(now);
        let (ratio, floor) = self.budget_settings;
        let applies = if retries == 0 {
            "retries are off (retries = 0)".to_owned()
        } else if repeatable {
            format!(
                "a failed connect, a lost request or a retried status goes to another backend, up to {retries} time(s)"
            )
        } else {
            format!(
                "only a failed connect goes to another backend (up to {retries} time(s)): the request has a body or is not idempotent"
            )
        };
        serde_json::json!({
            "retries": retries,
            "statuses": self.statuses,
            "backoff_ms": self.backoff.as_secs_f64() * 1e3,
            "applies": applies,
            "budget": {
                "ratio": ratio,
                "floor_per_second": floor,
                "requests_in_window": standing.requests,
                "retries_in_window": standing.retries,
                "left": standing.left(),
            },
        })
    }

    /// Waits before retry number `attempt` (from 1): a random time up to the backoff doubled
    /// for each retry before it, so retries of many requests do not arrive together.
    pub async fn back_off(&self, attempt: u32) {
        let ceiling = self
            .backoff
            .saturating_mul(1 << attempt.saturating_sub(1).min(4))
            .as_nanos() as u64;
        if ceiling > 0 {
            let wait = jitter().below_u64(ceiling);
            tokio::time::sleep(Duration::from_nanos(wait)).await;
        }
    }
}

/// The random source of backoff jitter.
pub fn jitter() -> &'static SharedRng {
    static JITTER: std::sync::OnceLock<SharedRng> = std::sync::OnceLock::new();
    JITTER.get_or_init(|| {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        SharedRng::new(seed)
    })
}
