//! Rate limiting by GCRA (the generic cell rate algorithm, a token bucket kept as one number per
//! key: the theoretical arrival time of the next request). Time is passed in, in nanoseconds of
//! any monotonic clock; the same arithmetic runs in Redis for global limits ([`REDIS_SCRIPT`]).
//!
//! Not `governor`: its limiters read their own clock, and keyed state lives in its own map; here
//! the caller passes `now` (tests and the Redis script use the same rule) and owns the table.

use std::collections::HashMap;
use std::collections::hash_map::{Entry, RandomState};
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};

/// `rate` requests per `period`, with up to `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gcra {
    /// Nanoseconds between requests at the steady rate.
    interval: u64,
    /// How far ahead of now the arrival time may run: `burst` intervals.
    tolerance: u64,
    burst: u32,
}

/// What one request was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u32,
    /// Requests that would still pass now.
    pub remaining: u32,
    /// Nanoseconds until a refused request would pass (0 when allowed).
    pub retry_after: u64,
    /// Nanoseconds until the bucket is full again.
    pub reset: u64,
}

impl Decision {
    /// Whole seconds, rounded up, as `Retry-After` and `RateLimit-Reset` want them.
    pub fn seconds(nanos: u64) -> u64 {
        nanos.div_ceil(1_000_000_000)
    }
}

impl Gcra {
    /// `rate` requests every `period_nanos`, `burst` at once (both at least 1).
    pub fn new(rate: u32, period_nanos: u64, burst: u32) -> Gcra {
        let interval = (period_nanos / u64::from(rate.max(1))).max(1);
        let burst = burst.max(1);
        Gcra {
            interval,
            tolerance: interval * u64::from(burst),
            burst,
        }
    }

    pub fn interval(&self) -> u64 {
        self.interval
    }

    pub fn tolerance(&self) -> u64 {
        self.tolerance
    }

    /// Decides a request at `now` for a key whose stored arrival time is `tat` (`None` for a
    /// key not seen or expired); returns the decision and the arrival time to store.
    pub fn decide(&self, tat: Option<u64>, now: u64) -> (Decision, u64) {
        let tat = tat.unwrap_or(now).max(now);
        let next = tat + self.interval;
        let ahead = next - now;
        if ahead > self.tolerance {
            let decision = Decision {
                allowed: false,
                limit: self.burst,
                remaining: 0,
                retry_after: ahead - self.tolerance,
                reset: tat - now,
            };
            return (decision, tat);
        }
        let decision = Decision {
            allowed: true,
            limit: self.burst,
            remaining: ((self.tolerance - ahead) / self.interval) as u32,
            retry_after: 0,
            reset: ahead,
        };
        (decision, next)
    }
}

/// The arrival times of many keys (client addresses, header values, claims) in one process.
/// Keys are hashed with a per-table random SipHash key, so a client cannot aim collisions at
/// another's bucket; keys whose bucket is full again are swept when the table doubles.
pub struct Table {
    hasher: RandomState,
    /// By the key's hash, which the map takes as its own.
    arrivals: HashMap<u64, u64, BuildHasherDefault<Hashed>>,
    sweep_at: usize,
}

/// A map's hasher for keys that are hashes already (a keyed SipHash's): hashing them again
/// would only cost time.
#[derive(Default)]
struct Hashed(u64);

impl Hasher for Hashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is called, for the `u64` keys; anything else is folded in all the same.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

impl Default for Table {
    fn default() -> Self {
        Table {
            hasher: RandomState::new(),
            arrivals: HashMap::default(),
            sweep_at: Self::MIN_SWEEP,
        }
    }
}

impl Table {
    const MIN_SWEEP: usize = 1024;

    /// Decides a request for `key` at `now`.
    pub fn decide(&mut self, gcra: &Gcra, key: impl Hash, now: u64) -> Decision {
        if self.arrivals.len() >= self.sweep_at {
            self.arrivals.retain(|_, tat| *tat > now);
            self.sweep_at = (self.arrivals.len() * 2).max(Self::MIN_SWEEP);
        }
        match self.arrivals.entry(self.hasher.hash_one(key)) {
            Entry::Occupied(mut stored) => {
                let (decision, tat) = gcra.decide(Some(*stored.get()), now);
                stored.insert(tat);
                decision
            }
            Entry::Vacant(slot) => {
                let (decision, tat) = gcra.decide(None, now);
                slot.insert(tat);
                decision
            }
        }
    }

    /// Whether a request for `key` at `now` would pass, without counting it: for limits that
    /// count only some requests (failures), decided after the request is looked at.
    pub fn would_allow(&self, gcra: &Gcra, key: impl Hash, now: u64) -> bool {
        self.peek(gcra, key, now).allowed
    }

    /// The decision a request for `key` at `now` would get, without counting it.
    pub fn peek(&self, gcra: &Gcra, key: impl Hash, now: u64) -> Decision {
        let slot = self.hasher.hash_one(key);
        gcra.decide(self.arrivals.get(&slot).copied(), now).0
    }

    pub fn len(&self) -> usize {
        self.arrivals.len()
    }

    pub fn is_empty(&self) -> bool {
        self.arrivals.is_empty()
    }
}

/// The same rule as [`Gcra::decide`], atomic in Redis, on the Redis server's clock (so instances
/// need not agree on time), in microseconds. `KEYS[1]` is the key, `ARGV[1]` the interval and
/// `ARGV[2]` the tolerance. Returns `{allowed, remaining, retry_after, reset}`, the last two in
/// microseconds. The key expires when its bucket is full again.
pub const REDIS_SCRIPT: &str = r#"
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat or tat < now then tat = now end
local ahead = tat + interval - now
if ahead > tolerance then
  return {0, 0, ahead - tolerance, tat - now}
end
redis.call('SET', KEYS[1], tat + interval, 'PX', math.ceil(ahead / 1000) + 1)
return {1, math.floor((tolerance - ahead) / interval), 0, ahead}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_full_bucket_passes_the_burst_at_once_then_the_rate() {
        let gcra = Gcra::new(20, SECOND, 20);
        let mut table = Table::default();
        let passed = (0..100)
            .filter(|_| table.decide(&gcra, "k", 0).allowed)
            .count();
        assert_eq!(passed, 20);
        // One interval later exactly one more.
        assert!(table.decide(&gcra, "k", SECOND / 20).allowed);
        assert!(!table.decide(&gcra, "k", SECOND / 20).allowed);
    }

    #[test]
    fn spread_evenly_over_a_second_the_burst_and_the_refill_pass() {
        let gcra = Gcra::new(20, SECOND, 20);
        let mut table = Table::default();
        let passed = (0..100u64)
            .filter(|i| table.decide(&gcra, "k", i * SECOND / 100).allowed)
            .count();
        // 20 at once plus 20 refilled over the second (the last refill lands just after it).
        assert_eq!(passed, 39);
    }

    #[test]
    fn refusals_say_when_to_retry_and_keys_are_separate() {
        let gcra = Gcra::new(10, SECOND, 2);
        let mut table = Table::default();
        let first = table.decide(&gcra, "a", 0);
        assert_eq!((first.allowed, first.remaining, first.limit), (true, 1, 2));
        assert!(table.decide(&gcra, "a", 0).allowed);
        let refused = table.decide(&gcra, "a", 0);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after, SECOND / 10);
        assert_eq!(Decision::seconds(refused.retry_after), 1);
        assert!(table.decide(&gcra, "b", 0).allowed);
    }

    #[test]
    fn asking_whether_a_request_would_pass_counts_nothing() {
        let gcra = Gcra::new(1, SECOND, 1);
        let mut table = Table::default();
        for _ in 0..3 {
            assert!(table.would_allow(&gcra, "a", 0));
        }
        assert!(table.decide(&gcra, "a", 0).allowed);
        assert!(!table.would_allow(&gcra, "a", 0));
        assert!(table.would_allow(&gcra, "a", SECOND));
    }

    #[test]
    fn the_table_forgets_keys_whose_bucket_refilled() {
        let gcra = Gcra::new(1, SECOND, 1);
        let mut table = Table::default();
        for key in 0..Table::MIN_SWEEP {
            table.decide(&gcra, key, 0);
        }
        table.decide(&gcra, "late", 10 * SECOND);
        assert_eq!(table.len(), 1);
    }
}
