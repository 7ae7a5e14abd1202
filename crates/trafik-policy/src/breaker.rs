//! A breaker for a service asked on the request path (Redis for global rate limits). Without
//! one, every request during an outage waits for the timeout before it is decided by the
//! fallback. The breaker remembers the outage instead: after a failure it opens, requests are
//! decided by the fallback at once without asking, and one request every `probe_interval`
//! asks to find out whether the service is back; the first answer closes it again.
//!
//! Time is passed in, in nanoseconds of any monotonic clock.

/// What a request may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The service is believed up: ask it.
    Ask,
    /// The service was down; this request is the probe that asks again.
    Probe,
    /// The service is down: decide by the fallback now, without asking.
    Skip,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breaker {
    probe_interval: u64,
    /// When open (after a failure): when the next probe may go. `None` while closed.
    next_probe_at: Option<u64>,
}

impl Breaker {
    /// A closed breaker that, once open, lets one probe through every `probe_interval_nanos`.
    pub fn new(probe_interval_nanos: u64) -> Breaker {
        Breaker {
            probe_interval: probe_interval_nanos,
            next_probe_at: None,
        }
    }

    /// Whether a request arriving at `now` asks the service. A probe moves the next one an
    /// interval on, so the requests that arrive while it waits are skipped, and a probe whose
    /// outcome is never reported (its request cancelled) does not keep the breaker open for
    /// good.
    pub fn admit(&mut self, now: u64) -> Admission {
        match self.next_probe_at {
            None => Admission::Ask,
            Some(due) if now >= due => {
                self.next_probe_at = Some(now.saturating_add(self.probe_interval));
                Admission::Probe
            }
            Some(_) => Admission::Skip,
        }
    }

    /// The service answered: ask it again from now on.
    pub fn succeeded(&mut self) {
        self.next_probe_at = None;
    }

    /// The service failed (refused, broke or did not answer in time) at `now`: skip it until
    /// the next probe, an interval later.
    pub fn failed(&mut self, now: u64) {
        self.next_probe_at = Some(now.saturating_add(self.probe_interval));
    }

    /// Whether the outage is remembered now.
    pub fn is_open(&self) -> bool {
        self.next_probe_at.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_closed_breaker_asks_every_time() {
        let mut breaker = Breaker::new(SECOND);
        for now in [0, 1, SECOND, 100 * SECOND] {
            assert_eq!(breaker.admit(now), Admission::Ask);
        }
        assert!(!breaker.is_open());
    }

    #[test]
    fn after_a_failure_requests_are_skipped_until_the_probe_is_due() {
        let mut breaker = Breaker::new(SECOND);
        assert_eq!(breaker.admit(10), Admission::Ask);
        breaker.failed(10);
        assert!(breaker.is_open());
        for now in [10, 11, SECOND / 2, SECOND + 9] {
            assert_eq!(breaker.admit(now), Admission::Skip, "at {now}");
        }
        assert_eq!(breaker.admit(SECOND + 10), Admission::Probe);
    }

    #[test]
    fn one_probe_per_interval_while_the_service_stays_down() {
        let mut breaker = Breaker::new(SECOND);
        breaker.failed(0);
        let mut probes = Vec::new();
        // A request every 10 ms for five seconds; every probe fails 100 ms after it went.
        let mut failing_at = None;
        for now in (0..5 * SECOND).step_by(10_000_000) {
            if failing_at == Some(now) {
                breaker.failed(now);
                failing_at = None;
            }
            match breaker.admit(now) {
                Admission::Probe => {
                    probes.push(now);
                    failing_at = Some(now + SECOND / 10);
                }
                Admission::Skip => {}
                Admission::Ask => panic!("asked at {now} while the service is down"),
            }
        }
        let seconds = |at: &u64| *at as f64 / SECOND as f64;
        let probes: Vec<f64> = probes.iter().map(seconds).collect();
        assert_eq!(probes, [1.0, 2.1, 3.2, 4.3]);
    }

    #[test]
    fn a_probe_that_gets_an_answer_closes_the_breaker() {
        let mut breaker = Breaker::new(SECOND);
        breaker.failed(0);
        assert_eq!(breaker.admit(SECOND), Admission::Probe);
        // Requests that arrive while the probe waits are still skipped.
        assert_eq!(breaker.admit(SECOND + 1), Admission::Skip);
        breaker.succeeded();
        assert!(!breaker.is_open());
        assert_eq!(breaker.admit(SECOND + 2), Admission::Ask);
    }

    #[test]
    fn a_probe_whose_outcome_never_comes_is_followed_by_another() {
        let mut breaker = Breaker::new(SECOND);
        breaker.failed(0);
        assert_eq!(breaker.admit(SECOND), Admission::Probe);
        assert_eq!(breaker.admit(2 * SECOND - 1), Admission::Skip);
        assert_eq!(breaker.admit(2 * SECOND), Admission::Probe);
    }

    #[test]
    fn a_clock_near_its_end_does_not_overflow() {
        let mut breaker = Breaker::new(u64::MAX);
        breaker.failed(u64::MAX - 1);
        assert_eq!(breaker.admit(u64::MAX - 1), Admission::Skip);
        assert_eq!(breaker.admit(u64::MAX), Admission::Probe);
    }
}
