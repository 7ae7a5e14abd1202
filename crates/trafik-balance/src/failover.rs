//! One failover budget across layers: the longest a client keeps reaching a dead backend (or a
//! dead DNS region), from the settings alone, with the terms it is made of.
//!
//! The model (README, "Failover budget"):
//! - Active checks probe every `interval`; a probe of a dead backend fails at once when its port
//!   refuses, and at `timeout` when its host does not answer. A probe that takes longer than
//!   `interval` delays the next one, so probes start every `max(interval, timeout)`. A backend
//!   that dies just after a probe started (which may still pass) is marked down after `fall`
//!   more probes: at most `fall × max(interval, timeout) + timeout` after its death. From then
//!   on no request goes to it.
//! - Outlier ejection acts on failed requests, not on time: after `consecutive_connect_failures`
//!   it takes the backend out for `base_ejection` (longer each time, up to `max_ejection`), then
//!   lets requests try it again. It shortens exposure under traffic but bounds no time; without
//!   active checks a dead backend is tried again after every ejection, for ever.
//! - A request whose connect fails goes to another backend while `retries` allow and the retry
//!   budget has room; the client then sees no failure. The budget allows `retry_budget` of the
//!   requests over its window, plus `retry_floor` a second. It covers a dead backend whose share
//!   of picks is no larger than `retry_budget`; or, with outlier ejection, the few failed connects
//!   each ejection lets through (`consecutive_connect_failures` per return, a return at most
//!   every `base_ejection`), when the floor alone has room for them.
//! - A DNS name keeps answering a dead region until the region's checks mark it down, and
//!   resolvers keep that answer for up to the name's TTL after: `ttl + detection`.
//!
//! No clock is read: everything here is arithmetic on settings.

use std::fmt;
use std::time::Duration;

/// A pool's (or a DNS region's) active health checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActiveChecks {
    pub interval: Duration,
    /// How long one probe may take.
    pub timeout: Duration,
    /// Failed probes in a row that mark a backend down.
    pub fall: u32,
}

impl ActiveChecks {
    /// Between the starts of two probes: the interval, or the timeout when a probe that waits
    /// it out delays the next.
    pub fn period(&self) -> Duration {
        self.interval.max(self.timeout)
    }

    /// The longest from a death to the verdict "down": `fall × period + timeout`.
    pub fn detection(&self) -> Duration {
        self.period()
            .saturating_mul(self.fall)
            .saturating_add(self.timeout)
    }
}

/// Outlier ejection by failed connects (the rule a dead backend breaks first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ejection {
    pub connect_failures: u32,
    pub base: Duration,
    pub max: Duration,
}

/// What a pool's failover depends on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolFailover {
    pub checks: Option<ActiveChecks>,
    /// `None` when outlier ejection is off, or its connect-failure rule is.
    pub ejection: Option<Ejection>,
    pub retries: u32,
    /// The retry budget's share of requests (0.2 is a fifth)…
    pub retry_budget: f64,
    /// …plus this many retries a second.
    pub retry_floor: u32,
    /// The heaviest backend's share of picks (its weight over the pool's): the worst one to lose.
    /// 1 for a pool of one backend.
    pub largest_share: f64,
}

/// What clients see of a dead backend while it is still picked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Exposure {
    /// Every failed connect is retried on another backend: no request fails.
    Hidden { retries: u32 },
    /// Retries hide failures only while the budget lasts: it is smaller than the dead
    /// backend's share of requests.
    BeyondBudget {
        retries: u32,
        budget: f64,
        share: f64,
    },
    /// The pool has one backend: there is nowhere to retry.
    Alone,
    /// Retries are off: every request sent to it fails.
    Unhidden,
}

impl Exposure {
    /// Whether clients are expected to see no failed request.
    pub fn hidden(&self) -> bool {
        matches!(self, Exposure::Hidden { .. })
    }
}

/// How long a dead backend is reached, with the terms of the figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    /// The worst case in time; `None` when nothing bounds it (no active checks).
    pub bound: Option<Duration>,
    /// The DNS name's TTL, for a name's budget.
    pub ttl: Option<Duration>,
    /// The checks that bound it (a DNS name's: its worst region's).
    pub checks: Option<ActiveChecks>,
    /// For a DNS name: the region the figure is about (the slowest to be found dead).
    pub region: Option<String>,
    pub ejection: Option<Ejection>,
    /// For a pool: what clients see meanwhile; `None` for a DNS name.
    pub exposure: Option<Exposure>,
}

impl Budget {
    /// The figure without its terms: `failover ≤ 7 s, 0 failed requests expected`.
    pub fn summary(&self) -> String {
        let mut text = match self.bound {
            Some(bound) => format!("failover ≤ {}", seconds(bound)),
            None => "failover: no time bound".to_owned(),
        };
        if self.exposure.is_some_and(|e| e.hidden()) {
            text.push_str(", 0 failed requests expected");
        }
        text
    }

    /// The bound in seconds, for JSON; `None` when unbounded.
    pub fn seconds(&self) -> Option<f64> {
        self.bound.map(|bound| bound.as_secs_f64())
    }
}

/// A pool's budget: bounded by its active checks, if any; what clients see of it depends on
/// retries, the retry budget and the dead backend's share.
pub fn pool(settings: &PoolFailover) -> Budget {
    let exposure = if settings.retries == 0 {
        Exposure::Unhidden
    } else if settings.largest_share >= 1.0 {
        Exposure::Alone
    } else if settings.retry_budget >= settings.largest_share
        || settings
            .ejection
            .is_some_and(|ejection| floor_covers(&ejection, settings.retry_floor))
    {
        Exposure::Hidden {
            retries: settings.retries,
        }
    } else {
        Exposure::BeyondBudget {
            retries: settings.retries,
            budget: settings.retry_budget,
            share: settings.largest_share,
        }
    };
    Budget {
        bound: settings.checks.map(|checks| checks.detection()),
        ttl: None,
        checks: settings.checks,
        region: None,
        ejection: settings.ejection,
        exposure: Some(exposure),
    }
}

/// Whether the budget's floor alone pays for the failed connects ejection lets through in one
/// window: `connect_failures` at the first failures and at every return, a return at most
/// every `base` (Envoy's and trafik's ejections only grow longer).
fn floor_covers(ejection: &Ejection, floor_per_second: u32) -> bool {
    let window = Duration::from_secs(crate::RETRY_WINDOW_SECONDS);
    let base = ejection.base.max(Duration::from_millis(1));
    let returns = (window.as_nanos() / base.as_nanos()) as u64 + 1;
    let failed_connects = u64::from(ejection.connect_failures) * returns;
    failed_connects <= u64::from(floor_per_second) * crate::RETRY_WINDOW_SECONDS
}

/// One region a DNS name may answer with, and the checks that find it dead (`None`: never).
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    pub name: String,
    pub checks: Option<ActiveChecks>,
}

/// A DNS name's budget: its TTL plus the slowest detection among its regions; unbounded when
/// one of them is never checked.
pub fn dns_name(ttl: Duration, regions: &[Region]) -> Budget {
    let unchecked = regions.iter().find(|region| region.checks.is_none());
    // The first of the slowest, so the figure names the same region every time.
    let slowest = regions
        .iter()
        .filter_map(|region| region.checks.map(|checks| (region, checks)))
        .fold(
            None,
            |slowest: Option<(&Region, ActiveChecks)>, candidate| match slowest {
                Some(kept) if kept.1.detection() >= candidate.1.detection() => Some(kept),
                _ => Some(candidate),
            },
        );
    let (region, checks) = match (unchecked, slowest) {
        (Some(region), _) => (Some(region.name.clone()), None),
        (None, Some((region, checks))) => (Some(region.name.clone()), Some(checks)),
        (None, None) => (None, None),
    };
    Budget {
        bound: checks.map(|checks| ttl.saturating_add(checks.detection())),
        ttl: Some(ttl),
        checks,
        region,
        ejection: None,
        exposure: None,
    }
}

/// Seconds as people write them: `7 s`, `3.4 s`, `0.25 s`.
pub fn seconds(duration: Duration) -> String {
    let millis = duration.as_millis();
    let text = format!("{}.{:03}", millis / 1000, millis % 1000);
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} s")
}

fn percent(share: f64) -> String {
    format!("{:.0} %", share * 100.0)
}

impl fmt::Display for ActiveChecks {
    /// `health 3 × 2 s + 1 s timeout`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "health {} × {} + {} timeout",
            self.fall,
            seconds(self.period()),
            seconds(self.timeout)
        )
    }
}

impl fmt::Display for Exposure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exposure::Hidden { retries } => write!(
                f,
                "retries {retries} hide it from clients: 0 failed requests expected"
            ),
            Exposure::BeyondBudget {
                retries,
                budget,
                share,
            } => write!(
                f,
                "retries {retries} hide it only within the retry budget ({} of requests, below its {} share): requests beyond it fail",
                percent(*budget),
                percent(*share)
            ),
            Exposure::Alone => write!(f, "one backend: nowhere to retry, its requests fail"),
            Exposure::Unhidden => write!(f, "no retries: every request sent to it fails"),
        }
    }
}

impl fmt::Display for Budget {
    /// `failover ≤ 7 s (health 3 × 2 s + 1 s timeout; …)`, or `failover: no time bound (…)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.bound {
            Some(bound) => write!(f, "failover ≤ {} (", seconds(bound))?,
            None => write!(f, "failover: no time bound (")?,
        }
        if let Some(ttl) = self.ttl {
            let region = self.region.as_deref().unwrap_or("-");
            return match self.checks {
                Some(checks) => write!(f, "ttl {} + region {region}: {checks})", seconds(ttl)),
                None if self.region.is_none() => write!(f, "no regions)"),
                None => write!(
                    f,
                    "region {region} has no health checks: its address is answered until the configuration changes)"
                ),
            };
        }
        match (self.checks, self.ejection) {
            (Some(checks), Some(ejection)) => write!(
                f,
                "{checks}; outlier ejection may act sooner, after {} failed connects",
                ejection.connect_failures
            )?,
            (Some(checks), None) => write!(f, "{checks}")?,
            (None, Some(ejection)) => write!(
                f,
                "no active checks: outlier ejection after {} failed connects, tried again after {} up to {}",
                ejection.connect_failures,
                seconds(ejection.base),
                seconds(ejection.max)
            )?,
            (None, None) => write!(
                f,
                "no active checks, no outlier ejection: it is picked until the configuration changes"
            )?,
        }
        if let Some(exposure) = self.exposure {
            write!(f, "; {exposure}")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks(interval_ms: u64, timeout_ms: u64, fall: u32) -> ActiveChecks {
        ActiveChecks {
            interval: Duration::from_millis(interval_ms),
            timeout: Duration::from_millis(timeout_ms),
            fall,
        }
    }

    fn settings(
        checks: Option<ActiveChecks>,
        retries: u32,
        budget: f64,
        share: f64,
    ) -> PoolFailover {
        PoolFailover {
            checks,
            ejection: None,
            retries,
            retry_budget: budget,
            retry_floor: 10,
            largest_share: share,
        }
    }

    #[test]
    fn a_detection_past_any_duration_is_the_longest_one_not_a_panic() {
        let slow = ActiveChecks {
            interval: Duration::MAX / 2,
            timeout: Duration::from_secs(1),
            fall: 3,
        };
        assert_eq!(slow.detection(), Duration::MAX);
    }

    fn ejection() -> Ejection {
        Ejection {
            connect_failures: 3,
            base: Duration::from_secs(5),
            max: Duration::from_secs(300),
        }
    }

    #[test]
    fn active_checks_bound_it_by_fall_periods_and_one_timeout() {
        let budget = pool(&settings(Some(checks(1000, 400, 3)), 1, 0.5, 1.0 / 3.0));
        assert_eq!(budget.bound, Some(Duration::from_millis(3400)));
        assert_eq!(
            budget.to_string(),
            "failover ≤ 3.4 s (health 3 × 1 s + 0.4 s timeout; retries 1 hide it from clients: 0 failed requests expected)"
        );
    }

    #[test]
    fn a_timeout_longer_than_the_interval_sets_the_period() {
        let slow = checks(1000, 2000, 2);
        assert_eq!(slow.period(), Duration::from_secs(2));
        assert_eq!(slow.detection(), Duration::from_secs(6));
    }

    #[test]
    fn without_active_checks_nothing_bounds_it() {
        let mut without = settings(None, 0, 0.2, 0.5);
        without.ejection = Some(ejection());
        let budget = pool(&without);
        assert_eq!(budget.bound, None);
        assert_eq!(
            budget.to_string(),
            "failover: no time bound (no active checks: outlier ejection after 3 failed connects, tried again after 5 s up to 300 s; no retries: every request sent to it fails)"
        );
    }

    #[test]
    fn retries_hide_it_only_when_the_budget_covers_its_share() {
        let exposure =
            |retries, budget, share| pool(&settings(None, retries, budget, share)).exposure;
        assert_eq!(
            exposure(1, 0.5, 0.34),
            Some(Exposure::Hidden { retries: 1 })
        );
        assert!(matches!(
            exposure(1, 0.2, 0.34),
            Some(Exposure::BeyondBudget { .. })
        ));
        assert_eq!(exposure(2, 1.0, 1.0), Some(Exposure::Alone));
        assert_eq!(exposure(0, 1.0, 0.1), Some(Exposure::Unhidden));
    }

    #[test]
    fn with_ejection_the_floor_pays_for_the_few_connects_that_fail() {
        let mut ejecting = settings(None, 1, 0.2, 0.34);
        ejecting.ejection = Some(ejection());
        // 3 failed connects at the first failures and at each of at most 2 more returns in 10 s:
        // 9 retries, within a floor of 1 a second (10 a window)…
        ejecting.retry_floor = 1;
        assert_eq!(
            pool(&ejecting).exposure,
            Some(Exposure::Hidden { retries: 1 })
        );
        // …not within none.
        ejecting.retry_floor = 0;
        assert!(matches!(
            pool(&ejecting).exposure,
            Some(Exposure::BeyondBudget { .. })
        ));
    }

    #[test]
    fn a_dns_name_adds_its_ttl_to_its_slowest_region() {
        let regions = [
            Region {
                name: "b34".into(),
                checks: Some(checks(2000, 1000, 3)),
            },
            Region {
                name: "b06".into(),
                checks: Some(checks(500, 500, 2)),
            },
        ];
        let budget = dns_name(Duration::from_secs(30), &regions);
        assert_eq!(budget.bound, Some(Duration::from_secs(37)));
        assert_eq!(budget.region.as_deref(), Some("b34"));
        assert_eq!(
            budget.to_string(),
            "failover ≤ 37 s (ttl 30 s + region b34: health 3 × 2 s + 1 s timeout)"
        );
    }

    #[test]
    fn a_dns_name_with_an_unchecked_region_has_no_bound() {
        let regions = [Region {
            name: "b06".into(),
            checks: None,
        }];
        let budget = dns_name(Duration::from_secs(30), &regions);
        assert_eq!(budget.bound, None);
        assert!(
            budget
                .to_string()
                .contains("region b06 has no health checks")
        );
    }

    #[test]
    fn seconds_are_written_short() {
        assert_eq!(seconds(Duration::from_secs(7)), "7 s");
        assert_eq!(seconds(Duration::from_millis(3400)), "3.4 s");
        assert_eq!(seconds(Duration::from_millis(250)), "0.25 s");
    }
}
