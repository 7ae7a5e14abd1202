//! Passive health: what requests to a backend came to (connect failures, 5xx answers, lost
//! requests) takes it out of selection for a while, with or without active checks. The rules
//! live in `trafik_balance::Outlier`; this module feeds them, applies their verdicts to the
//! pool's backend set within the pool's cap, and brings backends back when their time is up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use trafik_balance::{
    BackendSet, EjectionReason, Nanos, Outcome, Outlier, OutlierRules, PickContext, max_ejected,
    slow_start_share,
};

use crate::pool::PoolSet;

/// One pool's passive health: a state per backend, shared across reloads by address.
pub struct PassiveHealth {
    rules: OutlierRules,
    states: Box<[Arc<Mutex<Outlier>>]>,
    /// Serializes ejections, so that two workers cannot both take the pool's last allowed slot.
    ejecting: Mutex<()>,
}

/// What `/status` shows of one backend's passive health.
pub struct Standing {
    pub ejected: bool,
    pub ejections: u64,
    pub reason: Option<EjectionReason>,
    /// Seconds until the current ejection ends.
    pub seconds_left: Option<f64>,
}

impl PassiveHealth {
    /// `carried` gives each backend's state from the previous configuration, when it had one.
    pub fn new(
        rules: OutlierRules,
        carried: impl Iterator<Item = Option<Arc<Mutex<Outlier>>>>,
    ) -> Self {
        PassiveHealth {
            rules,
            states: carried.map(Option::unwrap_or_default).collect(),
            ejecting: Mutex::new(()),
        }
    }

    /// Backend `index`'s state, to carry into the next configuration.
    pub fn state(&self, index: usize) -> Arc<Mutex<Outlier>> {
        self.states[index].clone()
    }

    /// Feeds one request's outcome at backend `index`; ejects it when a rule says so and the
    /// pool may lose one more backend. The rule's reason when it was ejected.
    pub fn report(
        &self,
        backends: &BackendSet,
        index: usize,
        outcome: Outcome,
        pool: &str,
    ) -> Option<EjectionReason> {
        let verdict = lock(&self.states[index]).record(outcome, &self.rules);
        let reason = verdict?;
        let _serialized = lock(&self.ejecting);
        let mut state = lock(&self.states[index]);
        let allowed = max_ejected(backends.len(), self.rules.max_ejected_percent);
        let others_available = backends.available_count(&PickContext::default()) > 1;
        if backends.ejected_count() < allowed && others_available && !state.is_ejected() {
            let until = state.eject(reason, &self.rules, now());
            backends.set_ejected(index, true);
            let seconds = Duration::from_nanos(until.saturating_sub(now())).as_secs_f64();
            tracing::warn!(pool, backend = %backends.spec(index).id, reason = reason.name(), seconds, "backend ejected");
            Some(reason)
        } else {
            state.spare();
            None
        }
    }

    /// Brings back every backend whose ejection has run its time; `returned` hears of each.
    pub fn return_due(
        &self,
        backends: &BackendSet,
        warming: &SlowStart,
        pool: &str,
        mut returned: impl FnMut(usize),
    ) {
        let now = now();
        for (index, state) in self.states.iter().enumerate() {
            let mut state = lock(state);
            if state.return_due(now) {
                state.restore();
                backends.set_ejected(index, false);
                warming.start(index);
                tracing::info!(pool, backend = %backends.spec(index).id, "backend returned from ejection");
                returned(index);
            }
        }
    }

    pub fn standing(&self, index: usize) -> Standing {
        let state = lock(&self.states[index]);
        Standing {
            ejected: state.is_ejected(),
            ejections: state.total_ejections(),
            reason: state.reason(),
            seconds_left: state
                .ejected_until()
                .map(|until| Duration::from_nanos(until.saturating_sub(now())).as_secs_f64()),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// A pool's slow start: when each backend last came back, so that its share of picks ramps up
/// over the pool's `slow_start` instead of jumping to full.
pub struct SlowStart {
    window: Duration,
    /// The moment (on [`now`]'s clock, plus one so that zero means none) each came back.
    since: Box<[AtomicU64]>,
}

impl SlowStart {
    pub fn new(window: Duration, backends: usize) -> Self {
        SlowStart {
            window,
            since: (0..backends).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Backend `index` came back now.
    pub fn start(&self, index: usize) {
        if !self.window.is_zero() {
            self.since[index].store(now() + 1, Ordering::Relaxed);
        }
    }

    /// The share of picks backend `index` keeps now while it ramps up; `None` when it is not
    /// in a slow start.
    pub fn share(&self, index: usize) -> Option<f64> {
        let since = self.since[index].load(Ordering::Relaxed);
        if since == 0 {
            return None;
        }
        let elapsed = Duration::from_nanos(now().saturating_sub(since - 1));
        (elapsed < self.window).then(|| slow_start_share(elapsed, self.window))
    }

    /// Whether a pick of backend `index` should go to another backend instead, as its ramp
    /// says (a random draw against its share).
    pub fn passes_over(&self, index: usize) -> bool {
        let since = self.since[index].load(Ordering::Relaxed);
        if since == 0 {
            return false;
        }
        let elapsed = Duration::from_nanos(now().saturating_sub(since - 1));
        if elapsed >= self.window {
            self.since[index].store(0, Ordering::Relaxed);
            return false;
        }
        let share = slow_start_share(elapsed, self.window);
        (crate::pool::retry::jitter().below_u64(1_000_000) as f64) >= share * 1_000_000.0
    }
}

/// The clock of ejections: nanoseconds since the first reading, the same for every thread.
fn now() -> Nanos {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as Nanos
}

/// How often ejections that ran their time are ended: their length is a matter of seconds.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// Ends ejections as they run their time, in the configuration in force, until `shutdown`.
pub async fn sweep<S: PoolSet>(
    snapshots: watch::Receiver<Arc<S>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(SWEEP_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stopping| *stopping) => return,
            _ = ticker.tick() => {}
        }
        let snapshot = snapshots.borrow().clone();
        for pool in snapshot.pools() {
            if let Some(passive) = &pool.passive {
                passive.return_due(&pool.backends, &pool.slow_start, &pool.plan.name, |index| {
                    pool.changed(index, "ejection over")
                });
            }
        }
    }
}
