//! The admin API's bearer token: required of every request when configured, which `check`
//! insists on for an admin address other than loopback. A weak token is refused when it is
//! made, and wrong guesses are budgeted per client, so guessing runs at a few per second
//! however many connections a client opens.

use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Request, header};
use subtle::ConstantTimeEq;
use trafik_policy::gcra::{Gcra, Table};

/// The shortest token accepted.
pub const MIN_LENGTH: usize = 32;

/// The least estimated entropy accepted, in bits (see [`estimated_bits`]).
pub const MIN_BITS: f64 = 64.0;

/// Wrong tokens a client may present at once before it is made to wait.
pub const FAILURE_BURST: u32 = 10;

/// After the burst, one more wrong token is allowed per this long.
pub const FAILURE_REFILL: Duration = Duration::from_secs(1);

/// A secret every admin request must present as `Authorization: Bearer TOKEN`. Its `Debug`
/// hides the value, so a logged plan does not leak it.
#[derive(Clone)]
pub struct AdminToken {
    secret: Arc<str>,
    failures: Arc<FailureBudget>,
}

/// What the admin API does with a request, by its token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Admitted,
    /// No token, or a wrong one: 401.
    Refused,
    /// The client spent its wrong guesses: 429 without looking at the token, until `retry_after`
    /// has passed.
    TooManyFailures {
        retry_after: Duration,
    },
}

/// Wrong tokens per client as a token bucket (GCRA): [`FAILURE_BURST`] at once, then one per
/// [`FAILURE_REFILL`].
struct FailureBudget {
    rule: Gcra,
    clients: Mutex<Table>,
    start: Instant,
}

impl AdminToken {
    /// A token of at least [`MIN_LENGTH`] visible ASCII characters with at least [`MIN_BITS`]
    /// of estimated entropy; otherwise why not, for `check` to report at the setting.
    pub fn new(token: &str) -> Result<Self, String> {
        Self::with_failure_budget(token, FAILURE_BURST, FAILURE_REFILL)
    }

    /// [`AdminToken::new`] with another budget of wrong guesses: `burst` at once, then one per
    /// `refill`.
    pub fn with_failure_budget(token: &str, burst: u32, refill: Duration) -> Result<Self, String> {
        if token.len() < MIN_LENGTH || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "expected a token of at least {MIN_LENGTH} visible ASCII characters (no spaces), e.g. from `openssl rand -hex 32`"
            ));
        }
        let bits = estimated_bits(token);
        if bits < MIN_BITS {
            return Err(format!(
                "expected a token of at least {MIN_BITS} bits of estimated entropy, found {bits:.0} (repeats and runs such as aaaa or 0123 count for little), e.g. from `openssl rand -hex 32`"
            ));
        }
        let refill = u64::try_from(refill.as_nanos()).unwrap_or(u64::MAX);
        Ok(AdminToken {
            secret: token.into(),
            failures: Arc::new(FailureBudget {
                rule: Gcra::new(1, refill, burst),
                clients: Mutex::default(),
                start: Instant::now(),
            }),
        })
    }

    /// Judges `request` from `client` now.
    pub fn check<B>(&self, request: &Request<B>, client: IpAddr) -> Verdict {
        let now = u64::try_from(self.failures.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.check_at(request, client, now)
    }

    /// Judges `request` from `client` at `now` (nanoseconds since the budget began). The token
    /// is compared in constant time, so the answer's timing tells nothing about how much of a
    /// guess was right; and only while the client has wrong guesses left, under the table's
    /// lock, so concurrent guesses cannot overrun the budget.
    fn check_at<B>(&self, request: &Request<B>, client: IpAddr, now: u64) -> Verdict {
        let Some(presented) = request.headers().get(header::AUTHORIZATION) else {
            // No guess: nothing to count.
            return Verdict::Refused;
        };
        let rule = &self.failures.rule;
        let client = client_key(client);
        let mut clients = self
            .failures
            .clients
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !clients.would_allow(rule, client, now) {
            let decision = clients.decide(rule, client, now);
            return Verdict::TooManyFailures {
                retry_after: Duration::from_nanos(decision.retry_after),
            };
        }
        let admitted = presented
            .to_str()
            .ok()
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .is_some_and(|(_, token)| token.trim().as_bytes().ct_eq(self.secret.as_bytes()).into());
        if admitted {
            return Verdict::Admitted;
        }
        clients.decide(rule, client, now);
        Verdict::Refused
    }
}

/// The address a budget is kept for: an IPv6 client by its /64, the block one host usually
/// has to itself; an IPv4-mapped one by its IPv4 address.
fn client_key(client: IpAddr) -> IpAddr {
    match client {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
        v4 => v4,
    }
}

/// The token's length times the Shannon entropy per character of the smaller of two
/// distributions: its characters, and the steps between neighbouring characters. Repeats
/// (`aaaa`, `abcabc`) have few distinct characters, runs (`0123…`, `abcd…`) few distinct steps;
/// a random token has many of both. 32 random hex digits come to about 115.
pub fn estimated_bits(token: &str) -> f64 {
    let characters = token.as_bytes();
    let steps: Vec<u8> = characters
        .windows(2)
        .map(|pair| pair[1].wrapping_sub(pair[0]))
        .collect();
    characters.len() as f64 * shannon(characters).min(shannon(&steps))
}

/// Bits per symbol of the distribution of `symbols`.
fn shannon(symbols: &[u8]) -> f64 {
    let mut counts = [0usize; 256];
    for &symbol in symbols {
        counts[usize::from(symbol)] += 1;
    }
    let total = symbols.len() as f64;
    counts
        .iter()
        .filter(|&&count| count > 0)
        .map(|&count| {
            let share = count as f64 / total;
            -share * share.log2()
        })
        .sum()
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "3f9c2a7e41b08d65c1e9a4f7023b6d8e";

    fn with(value: &str) -> Request<()> {
        Request::get("/status")
            .header(header::AUTHORIZATION, value)
            .body(())
            .unwrap()
    }

    const CLIENT: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 7));

    #[test]
    fn only_the_exact_bearer_token_is_admitted() {
        let token = AdminToken::new(TOKEN).unwrap();
        let admitted = |value: &str| token.check(&with(value), CLIENT) == Verdict::Admitted;
        assert!(admitted(&format!("Bearer {TOKEN}")));
        assert!(admitted(&format!("bearer {TOKEN}")));
        for wrong in [
            format!("Bearer {}", &TOKEN[1..]),
            format!("Bearer {TOKEN}2"),
            format!("Basic {TOKEN}"),
            TOKEN.to_owned(),
        ] {
            assert!(!admitted(&wrong), "{wrong}");
        }
        let bare = Request::get("/status").body(()).unwrap();
        assert_eq!(token.check(&bare, CLIENT), Verdict::Refused);
        assert_eq!(format!("{token:?}"), "AdminToken(…)");
    }

    /// Probe finding (issue 23): `aaaaaaaaaaaaaaaa` was a valid admin token.
    #[test]
    fn short_repeated_and_sequential_tokens_are_refused() {
        for weak in [
            "aaaaaaaaaaaaaaaa",
            "0123456789abcdef",
            &"a".repeat(64),
            "0123456789abcdef0123456789abcdef",
            "abcdefghijklmnopqrstuvwxyzABCDEF",
            "abcabcabcabcabcabcabcabcabcabcabcabc",
            "3f9c2a7e41b08d65 1e9a4f7023b6d8e",
        ] {
            assert!(AdminToken::new(weak).is_err(), "{weak}");
        }
        for strong in [
            TOKEN,
            "0b7f3c1e9d2a8465f0c3e7b1a9d24e6f8c0b5a3d7e1f9c2b4a6d8e0f1c3b5a7d",
            "q2Xv9LkP0sZr7TnWb4YhGf1JmCd8AeUo",
            "c9a1f2d4-7b3e-4e8a-9f60-2d5b8c1e7a34",
        ] {
            assert!(AdminToken::new(strong).is_ok(), "{strong}");
        }
    }

    /// Probe finding (issue 23): wrong tokens were answered as fast as they came (7,700 a
    /// second on one connection). Now a client has a budget of wrong guesses, on this test's
    /// own clock.
    #[test]
    fn a_client_that_spent_its_wrong_guesses_waits_whatever_it_sends() {
        let token = AdminToken::new(TOKEN).unwrap();
        let wrong = with(&format!("Bearer {}", TOKEN.to_uppercase()));
        let right = with(&format!("Bearer {TOKEN}"));
        for _ in 0..FAILURE_BURST {
            assert_eq!(token.check_at(&wrong, CLIENT, 0), Verdict::Refused);
        }
        let refill = FAILURE_REFILL.as_nanos() as u64;
        assert_eq!(
            token.check_at(&wrong, CLIENT, 0),
            Verdict::TooManyFailures {
                retry_after: FAILURE_REFILL
            }
        );
        // The right token is not even looked at: otherwise guesses would go on at full speed.
        assert!(matches!(
            token.check_at(&right, CLIENT, refill / 2),
            Verdict::TooManyFailures { .. }
        ));
        // Another client has a budget of its own.
        let other: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(token.check_at(&right, other, 0), Verdict::Admitted);
        // One refill later, one more guess.
        assert_eq!(token.check_at(&right, CLIENT, refill), Verdict::Admitted);
        assert_eq!(token.check_at(&wrong, CLIENT, refill), Verdict::Refused);
        assert!(matches!(
            token.check_at(&wrong, CLIENT, refill),
            Verdict::TooManyFailures { .. }
        ));
    }

    #[test]
    fn ipv6_clients_share_a_budget_per_64_and_mapped_ipv4_is_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(client_key(mapped), CLIENT);
    }
}
