//! How long a worker keeps idle upstream connections to one endpoint, the same rule for the own
//! engine's streams and hyper's connections: a few stay for the idle timeout, a burst's surplus
//! only briefly, so the memory a flood of concurrent requests took comes back soon after it.

use std::time::{Duration, Instant};

/// Idle connections kept per endpoint in one worker; more are closed when they come back.
pub const MAX_IDLE_PER_ENDPOINT: usize = 512;

/// Idle connections per endpoint and worker that stay for the whole idle timeout.
const WARM: usize = 32;

/// How long an idle connection past the [`WARM`] ones stays: under steady load it is reused
/// well within this; after a burst it goes.
const SURPLUS_IDLE: Duration = Duration::from_secs(2);

/// How many of an idle stack's oldest entries to close at `now`, given when each came back
/// (`since`, oldest first, as a stack that is pushed and popped at its end holds them).
pub fn stale(
    since: impl ExactSizeIterator<Item = Instant>,
    now: Instant,
    idle_timeout: Duration,
) -> usize {
    let surplus = since.len().saturating_sub(WARM);
    let mut closing = 0;
    for (position, since) in since.enumerate() {
        let allowed = match position < surplus {
            true => SURPLUS_IDLE.min(idle_timeout),
            false => idle_timeout,
        };
        if now.saturating_duration_since(since) < allowed {
            break;
        }
        closing += 1;
    }
    closing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ages(now: Instant, seconds: &[u64]) -> Vec<Instant> {
        seconds
            .iter()
            .map(|s| now - Duration::from_secs(*s))
            .collect()
    }

    #[test]
    fn a_few_stay_for_the_idle_timeout_and_a_bursts_surplus_goes_after_two_seconds() {
        let now = Instant::now() + Duration::from_secs(100);
        let timeout = Duration::from_secs(60);
        // 40 idle for 5 s (a burst's leftovers): the 8 oldest are surplus and go.
        let burst = ages(now, &[5; 40]);
        assert_eq!(stale(burst.iter().copied(), now, timeout), 8);
        // 40 idle for 1 s: all stay.
        let fresh = ages(now, &[1; 40]);
        assert_eq!(stale(fresh.iter().copied(), now, timeout), 0);
        // Within the warm few, only the idle timeout closes.
        let warm = ages(now, &[61, 59, 3]);
        assert_eq!(stale(warm.iter().copied(), now, timeout), 1);
        // An idle timeout shorter than the surplus time bounds both.
        let short = ages(now, &[1; 40]);
        assert_eq!(
            stale(short.iter().copied(), now, Duration::from_millis(500)),
            40
        );
    }
}
