//! The properties each rule promises, checked over many generated cases.

use trafik_balance::random::SharedRng;
use trafik_balance::{
    BackendSet, BackendSpec, BoundedLoadRing, HashRing, LeastConnections, Maglev, PickContext,
    Selector, SmoothWeightedRoundRobin,
};

fn set(ids: &[String], weights: &[u32]) -> BackendSet {
    BackendSet::new(ids.iter().zip(weights).map(|(id, &weight)| BackendSpec {
        id: id.clone(),
        weight,
    }))
}

fn ids(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("10.1.0.{i}:8080")).collect()
}

fn keyed(key: u64) -> PickContext {
    PickContext {
        key: Some(key),
        ..PickContext::default()
    }
}

fn key(n: u64) -> u64 {
    trafik_balance::hash::stable_hash(format!("G{n}").as_bytes())
}

/// Picks for 20,000 keys with one rule over one set.
fn placements(rule: &dyn Selector, backends: &BackendSet, ids: &[String]) -> Vec<String> {
    (0..20_000)
        .map(|n| ids[rule.pick(backends, &keyed(key(n))).unwrap()].clone())
        .collect()
}

#[test]
fn a_ring_change_moves_only_the_keys_of_the_backend_that_changed() {
    for count in [3, 5, 10] {
        let before_ids = ids(count);
        let after_ids = ids(count + 1);
        let before_set = set(&before_ids, &vec![1; count]);
        let after_set = set(&after_ids, &vec![1; count + 1]);
        let before = placements(&HashRing::new(&before_set, 160), &before_set, &before_ids);
        let after = placements(&HashRing::new(&after_set, 160), &after_set, &after_ids);
        let added = &after_ids[count];
        let mut moved = 0;
        for (b, a) in before.iter().zip(&after) {
            if b != a {
                assert_eq!(a, added, "a key moved between two old backends");
                moved += 1;
            }
        }
        let share = moved as f64 / before.len() as f64;
        let ideal = 1.0 / (count + 1) as f64;
        assert!(
            (share - ideal).abs() < ideal * 0.35,
            "moved {share:.3}, ideal {ideal:.3}"
        );
    }
}

#[test]
fn a_maglev_change_moves_mostly_the_keys_of_the_backend_that_changed() {
    let before_ids = ids(5);
    let after_ids = ids(6);
    let before_set = set(&before_ids, &[1; 5]);
    let after_set = set(&after_ids, &[1; 6]);
    let before = placements(&Maglev::new(&before_set, 65_537), &before_set, &before_ids);
    let after = placements(&Maglev::new(&after_set, 65_537), &after_set, &after_ids);
    let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
    let to_new = after
        .iter()
        .zip(&before)
        .filter(|(a, b)| a != b && **a == after_ids[5])
        .count();
    // Maglev trades a little extra movement for equal shares; most moves go to the new backend.
    assert!(to_new as f64 >= 0.85 * moved as f64, "{to_new} of {moved}");
    let share = moved as f64 / 20_000.0;
    assert!(
        (0.14..0.26).contains(&share),
        "moved {share:.3}, ideal 0.167"
    );
}

#[test]
fn a_down_backend_gives_away_only_its_own_keys_on_ring_and_maglev() {
    let names = ids(6);
    let backends = set(&names, &[1; 6]);
    let rules: [Box<dyn Selector>; 2] = [
        Box::new(HashRing::new(&backends, 160)),
        Box::new(Maglev::new(&backends, 65_537)),
    ];
    for rule in rules {
        let before = placements(rule.as_ref(), &backends, &names);
        backends.set_up(2, false);
        let after = placements(rule.as_ref(), &backends, &names);
        backends.set_up(2, true);
        for (b, a) in before.iter().zip(&after) {
            if b != &names[2] {
                assert_eq!(a, b, "{}: a key of a healthy backend moved", rule.name());
            } else {
                assert_ne!(a, &names[2]);
            }
        }
    }
}

#[test]
fn smooth_weighted_round_robin_interleaves_and_gives_exact_shares() {
    let names = ids(2);
    let backends = set(&names, &[5, 1]);
    let rule = SmoothWeightedRoundRobin::new(&backends);
    let picks: Vec<usize> = (0..600)
        .map(|_| rule.pick(&backends, &PickContext::default()).unwrap())
        .collect();
    for cycle in picks.chunks(6) {
        assert_eq!(
            cycle.iter().filter(|&&i| i == 1).count(),
            1,
            "exact share per cycle"
        );
        // Within a cycle the heavy backend's turns are split: never `a a a a a b`.
        let longest_run = cycle.chunk_by(|a, b| a == b).map(<[usize]>::len).max();
        assert!(longest_run < Some(5), "{cycle:?}");
    }

    // nginx's own example: weights 5, 1, 1 give a a b a c a a.
    let names = ids(3);
    let backends = set(&names, &[5, 1, 1]);
    let rule = SmoothWeightedRoundRobin::new(&backends);
    let cycle: Vec<usize> = (0..14)
        .map(|_| rule.pick(&backends, &PickContext::default()).unwrap())
        .collect();
    assert_eq!(cycle, [0, 0, 1, 0, 2, 0, 0, 0, 0, 1, 0, 2, 0, 0]);

    // With a backend down, the others keep exact shares among themselves.
    let names = ids(3);
    let backends = set(&names, &[3, 2, 1]);
    let rule = SmoothWeightedRoundRobin::new(&backends);
    backends.set_up(2, false);
    let mut counts = [0; 3];
    for _ in 0..500 {
        counts[rule.pick(&backends, &PickContext::default()).unwrap()] += 1;
    }
    assert_eq!(counts, [300, 200, 0]);
}

#[test]
fn least_connections_breaks_ties_at_the_lowest_index_and_weighs_by_capacity() {
    let names = ids(3);
    let backends = set(&names, &[1, 2, 1]);
    let raw = LeastConnections::raw();
    let weighted = LeastConnections::weighted();
    assert_eq!(raw.pick(&backends, &PickContext::default()), Some(0));
    backends.start(0);
    assert_eq!(raw.pick(&backends, &PickContext::default()), Some(1));
    backends.start(1);
    backends.start(1);
    // raw: 1, 2, 0 → index 2; weighted: 1/1, 2/2, 0/1 → index 2; then 1/1, 2/2, 1/1 → tie at 0.
    assert_eq!(raw.pick(&backends, &PickContext::default()), Some(2));
    backends.start(2);
    assert_eq!(weighted.pick(&backends, &PickContext::default()), Some(0));
    assert_eq!(raw.pick(&backends, &PickContext::default()), Some(0));
}

#[test]
fn bounded_loads_never_exceed_the_cap() {
    let rng = SharedRng::new(3);
    for count in [3, 8, 20] {
        let names = ids(count);
        let backends = set(&names, &vec![1; count]);
        let rule = BoundedLoadRing::new(HashRing::new(&backends, 100), 1.25);
        let mut placed: Vec<usize> = Vec::new();
        for step in 0..5_000 {
            // Mostly arrivals, some departures; every key is skewed towards a few hot ones.
            if !placed.is_empty() && rng.below(3) == 0 {
                let gone = placed.swap_remove(rng.below(placed.len()));
                backends.finish(gone);
                continue;
            }
            let hot = rng.below(4) as u64;
            // The cap a placement must respect: over everything in flight once it is placed.
            let cap = rule.cap(placed.len() as u64 + 1, count as u64);
            let chosen = rule.pick(&backends, &keyed(key(hot))).unwrap();
            backends.start(chosen);
            placed.push(chosen);
            assert!(
                u64::from(backends.in_flight(chosen)) <= cap,
                "step {step}: backend {chosen} holds {} > cap {cap}",
                backends.in_flight(chosen)
            );
        }
    }
}
