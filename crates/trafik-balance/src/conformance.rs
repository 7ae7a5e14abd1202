//! The battery every selection rule passes, whatever it is: it picks only available backends,
//! answers `None` exactly when none is, never repeats a tried backend and is reproducible.

use crate::random::SharedRng;
use crate::{Algorithm, BackendSet, BackendSpec, PickContext, SelectorOptions};

fn backends(count: usize) -> BackendSet {
    BackendSet::new((0..count).map(|i| BackendSpec {
        id: format!("10.0.{}.{}:80", i / 250, i % 250),
        weight: 1 + (i as u32 % 4),
    }))
}

/// Random health, drain and tried states; checks one pick against them.
fn check_random_states(algorithm: Algorithm, count: usize, rng: &SharedRng) {
    let set = backends(count);
    let rule = algorithm.build(&set, &SelectorOptions::default());
    for round in 0..200 {
        for i in 0..count {
            set.set_up(i, rng.below(4) != 0);
            set.set_draining(i, rng.below(8) == 0);
            for _ in 0..rng.below(3) {
                set.start(i);
            }
        }
        let mut context = PickContext {
            key: (round % 3 != 0).then(|| rng.next_u64()),
            now: round as u64 * 1_000_000,
            ..PickContext::default()
        };
        for i in 0..count {
            if rng.below(5) == 0 {
                context.tried.insert(i);
            }
        }
        let any_available = (0..count).any(|i| set.is_available(i, &context));
        match rule.pick(&set, &context) {
            Some(i) => {
                assert!(i < count, "{algorithm}: index {i} out of range");
                assert!(
                    set.is_available(i, &context),
                    "{algorithm}: picked unavailable {i}"
                );
            }
            None => assert!(
                !any_available,
                "{algorithm}: None while a backend was available"
            ),
        }
    }
}

#[test]
fn every_rule_picks_only_available_backends_and_none_only_when_there_are_none() {
    let rng = SharedRng::new(42);
    for &algorithm in Algorithm::ALL {
        for count in [1, 2, 3, 7, 40] {
            check_random_states(algorithm, count, &rng);
        }
    }
}

#[test]
fn every_rule_answers_none_for_an_empty_pool() {
    let set = backends(0);
    for &algorithm in Algorithm::ALL {
        let rule = algorithm.build(&set, &SelectorOptions::default());
        assert_eq!(
            rule.pick(&set, &PickContext::default()),
            None,
            "{algorithm}"
        );
    }
}

#[test]
fn every_rule_finds_the_last_backend_standing() {
    for &algorithm in Algorithm::ALL {
        let set = backends(5);
        let rule = algorithm.build(&set, &SelectorOptions::default());
        for i in [0, 1, 3, 4] {
            set.set_up(i, false);
        }
        for key in 0..50u64 {
            let context = PickContext {
                key: Some(key.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                ..PickContext::default()
            };
            assert_eq!(rule.pick(&set, &context), Some(2), "{algorithm}");
        }
    }
}

#[test]
fn every_rule_is_reproducible_from_its_seed() {
    for &algorithm in Algorithm::ALL {
        let picks = || {
            let set = backends(9);
            let rule = algorithm.build(&set, &SelectorOptions::default());
            (0..100u64)
                .map(|n| {
                    let context = PickContext {
                        key: Some(n * 7919),
                        now: n * 1000,
                        ..PickContext::default()
                    };
                    let pick = rule.pick(&set, &context);
                    if let Some(i) = pick {
                        set.start(i);
                        rule.observe(i, std::time::Duration::from_micros(n % 7 * 100), n * 1000);
                    }
                    pick
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(picks(), picks(), "{algorithm}");
    }
}

/// The explanation runs the rule's own code on a copy of its moving parts: whatever the state
/// (health, drain, in flight, tried, keys or none, latencies learned), the explained pick is the
/// pick that follows it, and explaining twice changes nothing.
#[test]
fn every_rule_explains_the_pick_it_then_takes() {
    let rng = SharedRng::new(7);
    for &algorithm in Algorithm::ALL {
        for count in [1, 3, 7] {
            let set = backends(count);
            let rule = algorithm.build(&set, &SelectorOptions::default());
            for round in 0..300u64 {
                for i in 0..count {
                    set.set_up(i, rng.below(6) != 0);
                    set.set_draining(i, rng.below(10) == 0);
                    if rng.below(3) == 0 {
                        set.start(i);
                    }
                }
                let mut context = PickContext {
                    key: (round % 4 != 0).then(|| rng.next_u64()),
                    now: round * 1_000_000,
                    ..PickContext::default()
                };
                if rng.below(4) == 0 {
                    context.tried.insert(rng.below(count));
                }
                let first = rule.explain(&set, &context);
                let again = rule.explain(&set, &context);
                assert_eq!(first, again, "{algorithm}: explaining moved the rule");
                let pick = rule.pick(&set, &context);
                assert_eq!(
                    first.pick, pick,
                    "{algorithm} round {round}: {}",
                    first.reason
                );
                assert!(!first.reason.is_empty());
                if let Some(i) = pick {
                    rule.observe(
                        i,
                        std::time::Duration::from_micros(round % 5 * 300),
                        context.now,
                    );
                }
            }
        }
    }
}
