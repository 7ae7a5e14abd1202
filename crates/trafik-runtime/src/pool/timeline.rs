//! Each backend's changes of state (up, down, ejected, draining), with when and why: the last
//! [`KEPT`] of them, for the admin API and the dashboard, and how often health checks took it
//! down (its flaps). Kept across reloads while the pool keeps the backend.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// Changes kept per backend: the oldest go first.
pub const KEPT: usize = 32;

/// A backend's state as the dashboard shows it, in the order it tells them: down before
/// draining before ejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Up,
    Down,
    Ejected,
    Draining,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Up => "UP",
            State::Down => "DOWN",
            State::Ejected => "EJECTED",
            State::Draining => "DRAINING",
        }
    }
}

/// One change: the state it led to, when, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub at: SystemTime,
    pub state: State,
    pub reason: String,
}

/// One backend's recent changes of state.
#[derive(Debug, Default)]
pub struct Timeline {
    changes: Mutex<VecDeque<Change>>,
    downs: AtomicU64,
}

impl Timeline {
    /// Notes that the backend is in `state` now, because of `reason`; a change to `Down`
    /// counts as a flap.
    pub fn record(&self, state: State, reason: impl Into<String>) {
        if state == State::Down {
            self.downs.fetch_add(1, Ordering::Relaxed);
        }
        let mut changes = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        if changes.len() == KEPT {
            changes.pop_front();
        }
        changes.push_back(Change {
            at: SystemTime::now(),
            state,
            reason: reason.into(),
        });
    }

    /// The changes kept, oldest first.
    pub fn changes(&self) -> Vec<Change> {
        let changes = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        changes.iter().cloned().collect()
    }

    /// Times the backend went down since it joined.
    pub fn downs(&self) -> u64 {
        self.downs.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_latest_changes_are_kept_and_every_down_is_counted() {
        let timeline = Timeline::default();
        for n in 0..KEPT + 5 {
            timeline.record(State::Down, format!("probe {n} failed"));
            timeline.record(State::Up, "probe passed");
        }
        let changes = timeline.changes();
        assert_eq!(changes.len(), KEPT);
        assert_eq!(changes.last().unwrap().state, State::Up);
        assert_eq!(changes[0].reason, "probe 21 failed");
        assert_eq!(timeline.downs(), (KEPT + 5) as u64);
    }
}
