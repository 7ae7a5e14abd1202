use std::time::Duration;

use crate::Nanos;

/// What one request to a backend came to, as passive health sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// An answer below 500.
    Success,
    /// No connection could be made.
    ConnectFailure,
    /// A 5xx answer, or a request the backend lost (reset, timeout) before answering.
    Error,
}

impl Outcome {
    /// The outcome of an answer with this HTTP status: 5xx is an error.
    pub fn of_status(status: u16) -> Self {
        if status >= 500 {
            Outcome::Error
        } else {
            Outcome::Success
        }
    }
}

/// Which rule took a backend out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EjectionReason {
    ConnectFailures,
    Errors,
    SuccessRate,
}

impl EjectionReason {
    /// The name `/status` shows.
    pub fn name(self) -> &'static str {
        match self {
            EjectionReason::ConnectFailures => "consecutive-connect-failures",
            EjectionReason::Errors => "consecutive-errors",
            EjectionReason::SuccessRate => "success-rate",
        }
    }
}

/// When passive health takes a backend out, and for how long (Envoy's outlier detection,
/// HAProxy's `observe layer7`). A rule whose threshold is 0 is off.
#[derive(Clone, Debug, PartialEq)]
pub struct OutlierRules {
    /// Connect failures in a row that eject.
    pub consecutive_connect_failures: u32,
    /// 5xx answers and lost requests in a row that eject.
    pub consecutive_errors: u32,
    /// The share of successes (0–1) below which a window of requests ejects; 0 turns it off.
    pub min_success_rate: f64,
    /// Requests in one success-rate window.
    pub success_rate_window: u32,
    /// The first ejection's length; the n-th lasts n times as long, up to `max_ejection`.
    pub base_ejection: Duration,
    pub max_ejection: Duration,
    /// The most of a pool's backends ejected at once, in percent; at least one may always be
    /// ejected, and never the last one available.
    pub max_ejected_percent: u32,
}

impl Default for OutlierRules {
    fn default() -> Self {
        OutlierRules {
            consecutive_connect_failures: 3,
            consecutive_errors: 5,
            min_success_rate: 0.8,
            success_rate_window: 20,
            base_ejection: Duration::from_secs(5),
            max_ejection: Duration::from_secs(300),
            max_ejected_percent: 50,
        }
    }
}

/// The passive health of one backend: streaks, the current success-rate window and its
/// ejections. No clock is read; the caller passes `now`.
#[derive(Clone, Debug, Default)]
pub struct Outlier {
    connect_streak: u32,
    error_streak: u32,
    window_requests: u32,
    window_failures: u32,
    /// Ejections not yet forgiven: each makes the next one longer; a clean window forgives one.
    ejections: u32,
    total_ejections: u64,
    ejected_until: Option<Nanos>,
    reason: Option<EjectionReason>,
}

impl Outlier {
    /// Feeds one outcome and returns the rule the backend now breaks, if any. Outcomes of
    /// requests that were in flight when it was ejected are ignored.
    pub fn record(&mut self, outcome: Outcome, rules: &OutlierRules) -> Option<EjectionReason> {
        if self.ejected_until.is_some() {
            return None;
        }
        match outcome {
            Outcome::Success => {
                self.connect_streak = 0;
                self.error_streak = 0;
            }
            Outcome::ConnectFailure => {
                self.connect_streak += 1;
                self.window_failures += 1;
            }
            Outcome::Error => {
                self.error_streak += 1;
                self.window_failures += 1;
            }
        }
        self.window_requests += 1;
        if breaks(self.connect_streak, rules.consecutive_connect_failures) {
            return Some(EjectionReason::ConnectFailures);
        }
        if breaks(self.error_streak, rules.consecutive_errors) {
            return Some(EjectionReason::Errors);
        }
        if self.window_requests >= rules.success_rate_window.max(1) {
            let successes = self.window_requests - self.window_failures;
            let rate = f64::from(successes) / f64::from(self.window_requests);
            self.window_requests = 0;
            self.window_failures = 0;
            if rate < rules.min_success_rate {
                return Some(EjectionReason::SuccessRate);
            }
            self.ejections = self.ejections.saturating_sub(1);
        }
        None
    }

    /// Takes the backend out from `now`; returns when it comes back.
    pub fn eject(&mut self, reason: EjectionReason, rules: &OutlierRules, now: Nanos) -> Nanos {
        self.ejections = self.ejections.saturating_add(1);
        self.total_ejections += 1;
        let length = rules
            .base_ejection
            .saturating_mul(self.ejections)
            .min(rules.max_ejection.max(rules.base_ejection));
        let until = now.saturating_add(length.as_nanos() as Nanos);
        self.ejected_until = Some(until);
        self.reason = Some(reason);
        self.reset_counts();
        until
    }

    /// A backend whose rule broke while the pool could eject no more: its counts start over,
    /// so it is judged again on what comes next.
    pub fn spare(&mut self) {
        self.reset_counts();
    }

    /// Whether an ejection has run its time at `now`.
    pub fn return_due(&self, now: Nanos) -> bool {
        self.ejected_until.is_some_and(|until| now >= until)
    }

    /// Ends the ejection: the backend is judged afresh.
    pub fn restore(&mut self) {
        self.ejected_until = None;
        self.reset_counts();
    }

    pub fn is_ejected(&self) -> bool {
        self.ejected_until.is_some()
    }

    /// When the current ejection ends, if the backend is ejected.
    pub fn ejected_until(&self) -> Option<Nanos> {
        self.ejected_until
    }

    /// The rule behind the current or last ejection.
    pub fn reason(&self) -> Option<EjectionReason> {
        self.reason
    }

    /// Ejections since the backend joined the pool.
    pub fn total_ejections(&self) -> u64 {
        self.total_ejections
    }

    fn reset_counts(&mut self) {
        self.connect_streak = 0;
        self.error_streak = 0;
        self.window_requests = 0;
        self.window_failures = 0;
    }
}

fn breaks(streak: u32, threshold: u32) -> bool {
    threshold > 0 && streak >= threshold
}

/// The share of its picks a backend that came back `elapsed` ago keeps during a slow start of
/// `window` (HAProxy's `slowstart`, Envoy's slow start): from a tenth at once up to all of them
/// by the window's end, so a cold backend is not handed a full share at its first second.
pub fn slow_start_share(elapsed: Duration, window: Duration) -> f64 {
    if window.is_zero() || elapsed >= window {
        return 1.0;
    }
    const FLOOR: f64 = 0.1;
    FLOOR + (1.0 - FLOOR) * elapsed.as_secs_f64() / window.as_secs_f64()
}

/// How many of a pool's `backends` may be ejected at once: `percent` of them, at least one,
/// and never all (a pool of one backend ejects none).
pub fn max_ejected(backends: usize, percent: u32) -> usize {
    (backends * percent as usize / 100)
        .max(1)
        .min(backends.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Nanos = 1_000_000_000;

    fn rules() -> OutlierRules {
        OutlierRules::default()
    }

    #[test]
    fn connect_failures_in_a_row_eject_and_a_success_between_them_does_not() {
        let mut outlier = Outlier::default();
        let rules = rules();
        assert_eq!(outlier.record(Outcome::ConnectFailure, &rules), None);
        assert_eq!(outlier.record(Outcome::ConnectFailure, &rules), None);
        assert_eq!(outlier.record(Outcome::Success, &rules), None);
        assert_eq!(outlier.record(Outcome::ConnectFailure, &rules), None);
        assert_eq!(outlier.record(Outcome::ConnectFailure, &rules), None);
        assert_eq!(
            outlier.record(Outcome::ConnectFailure, &rules),
            Some(EjectionReason::ConnectFailures)
        );
    }

    #[test]
    fn errors_in_a_row_eject() {
        let mut outlier = Outlier::default();
        let rules = rules();
        let verdicts: Vec<_> = (0..5)
            .map(|_| outlier.record(Outcome::Error, &rules))
            .collect();
        assert_eq!(verdicts[..4], [None; 4]);
        assert_eq!(verdicts[4], Some(EjectionReason::Errors));
    }

    #[test]
    fn half_failing_is_caught_by_the_success_rate_though_no_streak_is_long() {
        let mut outlier = Outlier::default();
        let rules = rules();
        let mut verdict = None;
        for n in 0..20u32 {
            let outcome = if n.is_multiple_of(2) {
                Outcome::Error
            } else {
                Outcome::Success
            };
            verdict = verdict.or(outlier.record(outcome, &rules));
        }
        assert_eq!(verdict, Some(EjectionReason::SuccessRate));
        // One failure in twenty is within the rate.
        let mut healthy = Outlier::default();
        let verdicts: Vec<_> = (0..40u32)
            .map(|n| {
                let outcome = if n.is_multiple_of(20) {
                    Outcome::Error
                } else {
                    Outcome::Success
                };
                healthy.record(outcome, &rules)
            })
            .collect();
        assert!(verdicts.iter().all(Option::is_none));
    }

    #[test]
    fn each_ejection_lasts_longer_up_to_the_maximum_and_clean_windows_forgive() {
        let rules = OutlierRules {
            max_ejection: Duration::from_secs(12),
            ..rules()
        };
        let mut outlier = Outlier::default();
        let lengths: Vec<Nanos> = (0..4)
            .map(|_| {
                let until = outlier.eject(EjectionReason::Errors, &rules, 100 * SECOND);
                assert!(!outlier.return_due(until - 1));
                assert!(outlier.return_due(until));
                outlier.restore();
                (until - 100 * SECOND) / SECOND
            })
            .collect();
        assert_eq!(lengths, [5, 10, 12, 12]);
        assert_eq!(outlier.total_ejections(), 4);
        // Three clean windows of 20 forgive three of the four: the next is the second.
        for _ in 0..60 {
            assert_eq!(outlier.record(Outcome::Success, &rules), None);
        }
        assert_eq!(
            outlier.eject(EjectionReason::Errors, &rules, 0) / SECOND,
            10
        );
    }

    #[test]
    fn outcomes_while_ejected_change_nothing() {
        let rules = rules();
        let mut outlier = Outlier::default();
        outlier.eject(EjectionReason::ConnectFailures, &rules, 0);
        for _ in 0..10 {
            assert_eq!(outlier.record(Outcome::ConnectFailure, &rules), None);
        }
        outlier.restore();
        assert_eq!(outlier.record(Outcome::ConnectFailure, &rules), None);
        assert_eq!(outlier.reason(), Some(EjectionReason::ConnectFailures));
    }

    #[test]
    fn a_slow_start_ramps_from_a_tenth_to_all() {
        let window = Duration::from_secs(30);
        let share = |seconds: u64| slow_start_share(Duration::from_secs(seconds), window);
        assert_eq!(share(0), 0.1);
        assert!((share(15) - 0.55).abs() < 1e-9);
        assert_eq!(share(30), 1.0);
        assert_eq!(share(60), 1.0);
        assert_eq!(slow_start_share(Duration::ZERO, Duration::ZERO), 1.0, "off");
    }

    #[test]
    fn a_share_of_the_pool_at_most_and_never_all_of_it() {
        assert_eq!(max_ejected(1, 50), 0);
        assert_eq!(max_ejected(2, 50), 1);
        assert_eq!(max_ejected(3, 50), 1);
        assert_eq!(max_ejected(3, 10), 1, "one may always go");
        assert_eq!(max_ejected(10, 50), 5);
        assert_eq!(max_ejected(4, 100), 3, "never the whole pool");
    }
}
