//! The time an edge cache reads freshness on. The rules in this crate take `now` as an
//! argument; the code that calls them asks a [`Clock`] for it, so a test can move a cache's
//! time forward instead of sleeping past a freshness lifetime.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The system clock, or a manual one that only moves when told to.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    /// The manual clock's time; `None` reads the system clock.
    manual: Option<Arc<Mutex<SystemTime>>>,
}

impl Clock {
    /// The system clock: what every configured cache uses.
    pub fn system() -> Self {
        Clock::default()
    }

    /// A clock stopped at `start`, which moves only by [`Clock::advance`]; its clones share
    /// its time. Origins date their answers on the system clock, so a test that wants a copy to
    /// age starts this clock behind the system's and advances it up to the system's time: the
    /// copies it stores then agree with their `Date` on how old they are.
    pub fn manual(start: SystemTime) -> Self {
        Clock {
            manual: Some(Arc::new(Mutex::new(start))),
        }
    }

    pub fn now(&self) -> SystemTime {
        match &self.manual {
            Some(time) => *time.lock().unwrap_or_else(|p| p.into_inner()),
            None => SystemTime::now(),
        }
    }

    /// Moves a manual clock forward.
    ///
    /// # Panics
    /// On the system clock, which nothing may move.
    pub fn advance(&self, by: Duration) {
        let time = self.manual.as_ref().expect("only a manual clock moves");
        *time.lock().unwrap_or_else(|p| p.into_inner()) += by;
    }
}

/// Two system clocks are the same clock (a reload that leaves a cache's settings alone keeps
/// its store); a manual clock is only the same as its clones.
impl PartialEq for Clock {
    fn eq(&self, other: &Self) -> bool {
        match (&self.manual, &other.manual) {
            (None, None) => true,
            (Some(mine), Some(theirs)) => Arc::ptr_eq(mine, theirs),
            _ => false,
        }
    }
}

impl Eq for Clock {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_its_clones_follow() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let clock = Clock::manual(start);
        let clone = clock.clone();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(clock.now(), start, "a manual clock stands still");
        clock.advance(Duration::from_secs(5));
        assert_eq!(clone.now(), start + Duration::from_secs(5));
        assert_eq!(clock, clone);
        assert_ne!(clock, Clock::manual(start));
        assert_eq!(Clock::system(), Clock::system());
    }
}
