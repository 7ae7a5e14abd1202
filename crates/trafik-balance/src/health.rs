/// How many consecutive results flip a backend's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthThresholds {
    /// Consecutive failed checks that mark an up backend down (HAProxy's `fall`).
    pub fall: u32,
    /// Consecutive passed checks that mark a down backend up (HAProxy's `rise`).
    pub rise: u32,
}

/// The rise/fall state machine of one backend's active health checks.
///
/// A backend starts up. Only a run of `fall` failures takes it down and only a run of `rise`
/// successes brings it back, so one lost probe does not flap a healthy backend.
#[derive(Clone, Debug)]
pub struct Health {
    thresholds: HealthThresholds,
    up: bool,
    streak: u32,
}

/// What one check result did to the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The verdict stayed as it was.
    Unchanged,
    /// The backend was just marked up.
    WentUp,
    /// The backend was just marked down.
    WentDown,
}

impl Health {
    /// A backend that starts up. Thresholds of zero are treated as one.
    pub fn new(thresholds: HealthThresholds) -> Self {
        Health {
            thresholds: HealthThresholds {
                fall: thresholds.fall.max(1),
                rise: thresholds.rise.max(1),
            },
            up: true,
            streak: 0,
        }
    }

    /// A backend whose verdict is already known (carried over from a previous configuration).
    pub fn starting(thresholds: HealthThresholds, up: bool) -> Self {
        Health {
            up,
            ..Health::new(thresholds)
        }
    }

    /// The current verdict.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Feeds one check result and reports whether the verdict changed.
    pub fn record(&mut self, passed: bool) -> Transition {
        if passed == self.up {
            // A result that agrees with the verdict breaks any streak against it.
            self.streak = 0;
            return Transition::Unchanged;
        }
        self.streak += 1;
        let needed = if self.up {
            self.thresholds.fall
        } else {
            self.thresholds.rise
        };
        if self.streak < needed {
            return Transition::Unchanged;
        }
        self.streak = 0;
        self.up = passed;
        if passed {
            Transition::WentUp
        } else {
            Transition::WentDown
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(fall: u32, rise: u32) -> Health {
        Health::new(HealthThresholds { fall, rise })
    }

    #[test]
    fn fall_consecutive_failures_mark_down() {
        let mut h = health(3, 2);
        assert_eq!(h.record(false), Transition::Unchanged);
        assert_eq!(h.record(false), Transition::Unchanged);
        assert_eq!(h.record(false), Transition::WentDown);
        assert!(!h.is_up());
    }

    #[test]
    fn a_success_in_between_resets_the_failure_streak() {
        let mut h = health(2, 1);
        h.record(false);
        h.record(true);
        assert_eq!(h.record(false), Transition::Unchanged);
        assert!(h.is_up());
    }

    #[test]
    fn rise_consecutive_successes_mark_up_again() {
        let mut h = health(1, 2);
        assert_eq!(h.record(false), Transition::WentDown);
        assert_eq!(h.record(true), Transition::Unchanged);
        assert_eq!(h.record(false), Transition::Unchanged);
        assert_eq!(h.record(true), Transition::Unchanged);
        assert_eq!(h.record(true), Transition::WentUp);
        assert!(h.is_up());
    }

    #[test]
    fn zero_thresholds_act_as_one() {
        let mut h = health(0, 0);
        assert_eq!(h.record(false), Transition::WentDown);
        assert_eq!(h.record(true), Transition::WentUp);
    }
}
