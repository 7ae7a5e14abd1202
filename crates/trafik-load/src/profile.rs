//! The course's three tests (seed 003, `yuk/uretec.mjs`): one open-loop generator at the
//! course's peak rate, run three ways. [`Profile::course`] gives each with the lesson's values;
//! a caller overrides single fields (the command line maps its flags onto them).

use std::time::Duration;

use crate::report::ProfileShape;
use crate::schedule::RatePlan;

/// The course's target rate: K01's peak of 513.89 requests per second, rounded up.
pub const COURSE_RATE: f64 = 514.0;
/// The course's threshold for a tracking answer (YT1), on the corrected p95.
pub const COURSE_THRESHOLD: Duration = Duration::from_millis(25);

/// Which of the course's tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileKind {
    /// The expected peak for 3 s: does the threshold hold?
    Load,
    /// The same rate for 12 s, reported in quarters: does the tail grow as the run goes on?
    Soak,
    /// 9 s with the rate tripled for 1.5 s from the 3rd second: what does the surge cost, and
    /// how long until the latency is back?
    Spike,
}

/// One of the course's tests with every value a run needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub kind: ProfileKind,
    /// Requests per second; the spike's base rate.
    pub rate: f64,
    pub duration: Duration,
    pub threshold: Duration,
    /// The surge; only the spike profile uses it.
    pub spike: Spike,
}

/// A surge on top of the base rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spike {
    /// The rate multiplier during the surge.
    pub factor: f64,
    /// When it starts, from the start of the run.
    pub at: Duration,
    pub length: Duration,
}

impl Profile {
    /// The test as the course runs it.
    pub fn course(kind: ProfileKind) -> Profile {
        let seconds = match kind {
            ProfileKind::Load => 3,
            ProfileKind::Soak => 12,
            ProfileKind::Spike => 9,
        };
        Profile {
            kind,
            rate: COURSE_RATE,
            duration: Duration::from_secs(seconds),
            threshold: COURSE_THRESHOLD,
            spike: Spike {
                factor: 3.0,
                at: Duration::from_secs(3),
                length: Duration::from_millis(1500),
            },
        }
    }

    /// The name reports use: `load`, `soak` or `spike`.
    pub fn name(&self) -> &'static str {
        match self.kind {
            ProfileKind::Load => "load",
            ProfileKind::Soak => "soak",
            ProfileKind::Spike => "spike",
        }
    }

    /// When each request is due.
    pub fn plan(&self) -> RatePlan {
        match self.kind {
            ProfileKind::Load | ProfileKind::Soak => RatePlan::constant(self.rate, self.duration),
            ProfileKind::Spike => RatePlan::spike(
                self.rate,
                self.spike.factor,
                self.spike.at,
                self.spike.length,
                self.duration,
            ),
        }
    }

    /// The tables the report adds: quarters for the soak, the per-second recovery for the spike.
    pub fn shape(&self) -> ProfileShape {
        match self.kind {
            ProfileKind::Load => ProfileShape::Load,
            ProfileKind::Soak => ProfileShape::Soak,
            ProfileKind::Spike => ProfileShape::Spike {
                base: self.rate,
                factor: self.spike.factor,
                at_s: self.spike.at.as_secs_f64(),
                length_s: self.spike.length.as_secs_f64(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_course_profiles_send_what_the_lesson_sends() {
        let load = Profile::course(ProfileKind::Load);
        assert_eq!(load.plan().total_requests(), 1542, "514 req/s × 3 s");
        assert_eq!(load.threshold, Duration::from_millis(25));
        assert_eq!(load.shape(), ProfileShape::Load);

        let soak = Profile::course(ProfileKind::Soak);
        assert_eq!(soak.plan().total_requests(), 6168, "514 req/s × 12 s");
        assert_eq!(soak.shape(), ProfileShape::Soak);

        let spike = Profile::course(ProfileKind::Spike);
        let plan = spike.plan();
        assert_eq!(plan.duration(), 9.0);
        // 1,542 extra requests: the base rate doubled on top for 1.5 s.
        assert_eq!(plan.total_requests(), 514 * 9 + 1542);
        assert_eq!(plan.rate_at(3.5), 1542.0);
        assert_eq!(plan.rate_at(4.5), 514.0);
        assert_eq!(spike.name(), "spike");
    }

    #[test]
    fn a_field_overrides_one_value_and_keeps_the_rest() {
        let spike = Profile {
            rate: 100.0,
            ..Profile::course(ProfileKind::Spike)
        };
        assert_eq!(spike.plan().total_requests(), 100 * 9 + 300);
        assert_eq!(
            spike.shape(),
            ProfileShape::Spike {
                base: 100.0,
                factor: 3.0,
                at_s: 3.0,
                length_s: 1.5
            }
        );
    }
}
