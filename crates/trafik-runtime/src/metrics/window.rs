//! The last minute of a pool's or backend's traffic, for `/status`: a ring of one histogram per
//! second, per worker shard. The worker that owns a shard clears a slot when it first writes it
//! in a new second; a reader merges the slots of the seconds it asks for across shards.

use std::sync::atomic::{AtomicU64, Ordering};

use super::counters::add_alone;
use super::histogram::{Histogram, Merged};

/// Seconds kept: the 60 s window and a few more, so the slot being reused is never one a
/// reader still wants.
const SLOTS: u64 = 64;

#[derive(Debug, Default)]
struct Slot {
    /// The second this slot holds (seconds since the process' clock started, from 1), 0 while
    /// unused.
    second: AtomicU64,
    answered: Histogram,
    /// Answers of status 500 and above, and attempts that got no answer.
    errors: AtomicU64,
    /// Attempts that got no answer (no connection, a timeout, a broken connection).
    unanswered: AtomicU64,
}

/// One shard's ring of seconds.
#[derive(Debug)]
pub struct Recent {
    slots: Box<[Slot]>,
}

impl Default for Recent {
    fn default() -> Self {
        Recent {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
        }
    }
}

impl Recent {
    /// The slot for `second`, cleared first if it still holds an older one.
    #[inline]
    fn slot(&self, second: u64) -> &Slot {
        let slot = &self.slots[(second % SLOTS) as usize];
        if slot.second.load(Ordering::Relaxed) != second {
            slot.answered.clear();
            slot.errors.store(0, Ordering::Relaxed);
            slot.unanswered.store(0, Ordering::Relaxed);
            slot.second.store(second, Ordering::Relaxed);
        }
        slot
    }

    /// Counts an answer that took `micros`, in `second`.
    #[inline]
    pub fn answered(&self, second: u64, micros: u64, error: bool) {
        let slot = self.slot(second);
        slot.answered.record(micros);
        if error {
            add_alone(&slot.errors, 1);
        }
    }

    /// Counts an attempt that got no answer, in `second`.
    #[inline]
    pub fn unanswered(&self, second: u64) {
        let slot = self.slot(second);
        add_alone(&slot.errors, 1);
        add_alone(&slot.unanswered, 1);
    }

    /// Adds the seconds `now - span + 1 ..= now` of this shard to `into`.
    pub fn add_to(&self, now: u64, span: u64, into: &mut Window) {
        let first = now.saturating_sub(span.min(SLOTS - 1)) + 1;
        for slot in self.slots.iter() {
            let second = slot.second.load(Ordering::Relaxed);
            if (first..=now).contains(&second) {
                slot.answered.add_to(&mut into.answered);
                into.errors += slot.errors.load(Ordering::Relaxed);
                into.unanswered += slot.unanswered.load(Ordering::Relaxed);
            }
        }
    }
}

/// Some seconds of traffic, shards merged.
#[derive(Clone, Debug, Default)]
pub struct Window {
    pub answered: Merged,
    pub errors: u64,
    pub unanswered: u64,
}

impl Window {
    /// Answers and unanswered attempts.
    pub fn attempts(&self) -> u64 {
        self.answered.count() + self.unanswered
    }

    /// The share of attempts that failed or were answered with a server error; `None` with none.
    pub fn error_rate(&self) -> Option<f64> {
        let attempts = self.attempts();
        (attempts > 0).then(|| self.errors as f64 / attempts as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_holds_only_its_seconds_and_slots_are_reused() {
        let recent = Recent::default();
        recent.answered(1, 200, false);
        recent.answered(5, 300, true);
        recent.unanswered(5);
        recent.answered(10, 400, false);
        let read = |now, span| {
            let mut window = Window::default();
            recent.add_to(now, span, &mut window);
            window
        };
        let last_ten = read(10, 10);
        assert_eq!(last_ten.attempts(), 4);
        assert_eq!(last_ten.errors, 2);
        assert_eq!(last_ten.error_rate(), Some(0.5));
        let last_six = read(10, 6);
        assert_eq!(last_six.attempts(), 3, "second 1 is outside 5..=10");
        assert_eq!(
            read(69, 60).attempts(),
            1,
            "only second 10 is within 10..=69"
        );
        assert_eq!(read(70, 60).attempts(), 0);
        // Second 65 reuses second 1's slot: the old count is gone.
        recent.answered(65, 100, false);
        assert_eq!(read(65, 60).attempts(), 2, "seconds 10 and 65");
        assert_eq!(read(65, 1).answered.count(), 1);
        assert_eq!(read(200, 60).error_rate(), None);
    }
}
