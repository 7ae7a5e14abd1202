//! Response rate limiting (RRL), as BIND and Knot do it: a UDP source can be forged, so a flood
//! of questions "from" a victim makes an authoritative server a reflector. Identical answers to
//! one client network are limited to a rate; past it most are dropped and every `slip`-th is
//! sent empty with TC set, so a real client behind that network asks again over TCP, where no
//! address can be forged.
//!
//! A client network is a /24 (IPv6: /56). An answer is the name and type asked, except that
//! NXDOMAIN answers count per zone (random names must not escape the limit) and errors per
//! client network. Counts live in a fixed table: memory stays bounded under any flood, and two
//! keys sharing a slot at most reset each other's count (limiting them together instead would
//! let one busy key, or a flood over every slot, limit answers nobody asked too often for).
//! Keys are hashed with a key of the limiter's own ([`RateLimiter::hasher`]), so which keys
//! share a slot cannot be worked out offline to reset a large answer's count on purpose.

use std::hash::{BuildHasher, Hasher, RandomState};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use crate::policy::mask;

/// `[dns.rate_limit]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitPlan {
    /// Identical answers per second to one client network, and the burst allowed.
    pub responses_per_second: u32,
    /// Every `slip`-th limited answer goes out truncated (TC), the others are dropped; 0 drops
    /// them all.
    pub slip: u32,
}

/// What to do with one UDP answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Send,
    /// Send it empty with TC set: a client that is real asks again over TCP.
    Slip,
    Drop,
}

/// The client network of `address`: its /24, or /56 for IPv6.
pub fn network(address: IpAddr) -> IpAddr {
    mask(address, if address.is_ipv4() { 24 } else { 56 })
}

/// The counts of one configuration; a reload starts them afresh.
#[derive(Debug)]
pub struct RateLimiter {
    plan: RateLimitPlan,
    slots: Box<[Mutex<Slot>]>,
    start: Instant,
    keys: RandomState,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    key: u64,
    /// Answers that may still go out now, in thousandths.
    credit: u64,
    /// When `credit` was computed, in milliseconds since `start`.
    at: u64,
    /// Answers limited since the slot's key last got one through.
    limited: u32,
}

/// Slots in the table: a power of two.
const SLOTS: usize = 4096;

impl RateLimiter {
    pub fn new(plan: RateLimitPlan) -> Self {
        RateLimiter {
            plan,
            slots: (0..SLOTS).map(|_| Mutex::new(Slot::default())).collect(),
            start: Instant::now(),
            keys: RandomState::new(),
        }
    }

    /// A hasher for the key [`RateLimiter::check`] takes, keyed for this limiter alone.
    pub fn hasher(&self) -> impl Hasher {
        self.keys.build_hasher()
    }

    /// The verdict for one more answer of `key` (a hash of the client network and the answer).
    pub fn check(&self, key: u64) -> Verdict {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.check_at(key, now)
    }

    /// [`RateLimiter::check`] at `now` milliseconds after the limiter was made.
    fn check_at(&self, key: u64, now: u64) -> Verdict {
        let full = u64::from(self.plan.responses_per_second) * 1000;
        let index = (key as usize) & (SLOTS - 1);
        let mut slot = self.slots[index].lock().unwrap_or_else(|p| p.into_inner());
        if slot.key != key {
            *slot = Slot {
                key,
                credit: full,
                at: now,
                limited: 0,
            };
        }
        // Per millisecond, `responses_per_second` thousandths of an answer come back.
        let earned = now
            .saturating_sub(slot.at)
            .saturating_mul(u64::from(self.plan.responses_per_second));
        slot.credit = slot.credit.saturating_add(earned).min(full);
        slot.at = now;
        if slot.credit >= 1000 {
            slot.credit -= 1000;
            slot.limited = 0;
            return Verdict::Send;
        }
        slot.limited = slot.limited.saturating_add(1);
        if self.plan.slip > 0 && slot.limited.is_multiple_of(self.plan.slip) {
            Verdict::Slip
        } else {
            Verdict::Drop
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(responses_per_second: u32, slip: u32) -> RateLimiter {
        RateLimiter::new(RateLimitPlan {
            responses_per_second,
            slip,
        })
    }

    #[test]
    fn a_burst_past_the_rate_is_dropped_with_every_slip_th_truncated() {
        let limiter = limiter(5, 2);
        let verdicts: Vec<Verdict> = (0..11).map(|_| limiter.check_at(7, 0)).collect();
        assert!(verdicts[..5].iter().all(|v| *v == Verdict::Send));
        assert_eq!(
            verdicts[5..],
            [
                Verdict::Drop,
                Verdict::Slip,
                Verdict::Drop,
                Verdict::Slip,
                Verdict::Drop,
                Verdict::Slip
            ]
        );
        // Another answer, or the same to another network, has its own count.
        assert_eq!(limiter.check_at(8, 0), Verdict::Send);
    }

    #[test]
    fn credit_comes_back_at_the_rate_up_to_one_second_s_worth() {
        let limiter = limiter(5, 0);
        for _ in 0..5 {
            assert_eq!(limiter.check_at(7, 0), Verdict::Send);
        }
        assert_eq!(limiter.check_at(7, 0), Verdict::Drop);
        assert_eq!(limiter.check_at(7, 199), Verdict::Drop);
        assert_eq!(limiter.check_at(7, 200), Verdict::Send);
        let sent = (0..20)
            .filter(|_| limiter.check_at(7, 60_000) == Verdict::Send)
            .count();
        assert_eq!(sent, 5);
    }

    /// Probe finding: the key was hashed with SipHash's fixed zero key, so queries whose keys
    /// share a slot could be found offline and alternated to reset a large answer's count.
    /// Each limiter hashes with a key of its own.
    #[test]
    fn the_hash_key_is_the_limiters_own() {
        let hash = |limiter: &RateLimiter| {
            let mut hasher = limiter.hasher();
            hasher.write(b"192.0.2.0 kargo.test. A");
            hasher.finish()
        };
        let (one, another) = (limiter(5, 0), limiter(5, 0));
        assert_eq!(hash(&one), hash(&one));
        assert_ne!(hash(&one), hash(&another));
    }

    #[test]
    fn networks_are_a_24_or_a_56() {
        assert_eq!(
            network("192.0.2.77".parse().unwrap()),
            "192.0.2.0".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            network("2001:db8:1:2ff::1".parse().unwrap()),
            "2001:db8:1:200::".parse::<IpAddr>().unwrap()
        );
    }
}
