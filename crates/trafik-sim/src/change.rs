//! `trafik plan`: what a configuration change does to each pool before it ships — which share
//! of hash keys (or sticky clients) moves and where to, the load imbalance before and after, and
//! which backends are added, removed or reweighted.
//!
//! Both placements come from the selectors the proxy builds ([`Algorithm::build`]) over the same
//! backend identities, fed the same key hash the proxy computes from a request
//! ([`stable_hash`] of the key's bytes), so a prediction is what the running proxy will do.

use std::collections::BTreeMap;

use serde::Serialize;
use trafik_balance::hash::stable_hash;
use trafik_balance::{Algorithm, BackendSet, BackendSpec, PickContext, SelectorOptions};

use crate::table::Table;

/// One pool as a configuration describes it, reduced to what placement depends on.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolShape {
    pub name: String,
    pub algorithm: Algorithm,
    pub options: SelectorOptions,
    /// The identities the proxy builds its [`BackendSet`] from, in order.
    pub backends: Vec<BackendSpec>,
    /// What the report calls each backend (its configured name, else its address).
    pub labels: Vec<String>,
    /// Clients stay on the backend they got first (cookie stickiness): a client moves only when
    /// its backend goes away.
    pub sticky_clients: bool,
}

/// The sample of keys the prediction places: `{prefix}{i}` for `i` in `0..count`.
#[derive(Clone, Debug)]
pub struct KeySample {
    pub prefix: String,
    pub count: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct ChangeReport {
    pub keys: usize,
    pub key_prefix: String,
    pub pools: Vec<PoolChange>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PoolChange {
    pub name: String,
    /// `same` (placement is unchanged), `changed`, `added` (only in the new configuration) or
    /// `removed` (only in the old).
    pub change: &'static str,
    pub algorithm_before: Option<&'static str>,
    pub algorithm_after: Option<&'static str>,
    /// Share of the sampled keys (hash rules) or of the sampled clients (sticky pools) that end
    /// up on another backend; `null` where requests are not bound to a backend.
    pub moved_share: Option<f64>,
    /// Most requests on one backend relative to its weight's share of the sample (1 is even).
    pub imbalance_before: Option<f64>,
    pub imbalance_after: Option<f64>,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub reweighted: Vec<Reweight>,
    /// Share of the sample on each backend, before and after.
    pub share_before: BTreeMap<String, f64>,
    pub share_after: BTreeMap<String, f64>,
    /// Where moved keys go: from → to → share of the whole sample.
    pub moves: BTreeMap<String, BTreeMap<String, f64>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Reweight {
    pub backend: String,
    pub before: u32,
    pub after: u32,
}

/// Compares the pools of two configurations by name.
pub fn compare(before: &[PoolShape], after: &[PoolShape], sample: &KeySample) -> ChangeReport {
    let keys: Vec<u64> = (0..sample.count)
        .map(|i| stable_hash(format!("{}{i}", sample.prefix).as_bytes()))
        .collect();
    let mut pools = Vec::new();
    for old in before {
        let new = after.iter().find(|p| p.name == old.name);
        pools.push(compare_pool(Some(old), new, &keys));
    }
    for new in after
        .iter()
        .filter(|p| !before.iter().any(|o| o.name == p.name))
    {
        pools.push(compare_pool(None, Some(new), &keys));
    }
    ChangeReport {
        keys: sample.count,
        key_prefix: sample.prefix.clone(),
        pools,
    }
}

/// Where each key lands (an index into the pool's backends), placed by the proxy's selector.
fn place(pool: &PoolShape, keys: &[u64]) -> Vec<Option<usize>> {
    let backends = BackendSet::new(pool.backends.iter().cloned());
    let selector = pool.algorithm.build(&backends, &pool.options);
    let keyed = pool.algorithm.uses_key();
    keys.iter()
        .map(|&key| {
            let context = PickContext {
                key: keyed.then_some(key),
                ..PickContext::default()
            };
            let pick = selector.pick(&backends, &context);
            // Load-aware rules see every earlier request still in flight: the steady state of
            // equally long requests.
            if let (Some(index), true) = (pick, pool.algorithm.reads_in_flight()) {
                backends.start(index);
            }
            pick
        })
        .collect()
}

fn shares(pool: &PoolShape, placed: &[Option<usize>]) -> (BTreeMap<String, f64>, f64) {
    let mut counts = vec![0usize; pool.backends.len()];
    for index in placed.iter().flatten() {
        counts[*index] += 1;
    }
    let total = placed.len().max(1) as f64;
    let weights: u64 = pool.backends.iter().map(|b| u64::from(b.weight)).sum();
    let imbalance = counts
        .iter()
        .zip(&pool.backends)
        .map(|(&count, spec)| {
            let fair = total * f64::from(spec.weight) / weights.max(1) as f64;
            count as f64 / fair
        })
        .fold(0.0, f64::max);
    let shares = counts
        .iter()
        .zip(&pool.labels)
        .map(|(&count, label)| (label.clone(), count as f64 / total))
        .collect();
    (shares, imbalance)
}

fn compare_pool(old: Option<&PoolShape>, new: Option<&PoolShape>, keys: &[u64]) -> PoolChange {
    let before = old.map(|pool| place(pool, keys));
    let after = new.map(|pool| place(pool, keys));
    let (share_before, imbalance_before) = match (old, &before) {
        (Some(pool), Some(placed)) => {
            let (s, i) = shares(pool, placed);
            (s, Some(i))
        }
        _ => Default::default(),
    };
    let (share_after, imbalance_after) = match (new, &after) {
        (Some(pool), Some(placed)) => {
            let (s, i) = shares(pool, placed);
            (s, Some(i))
        }
        _ => Default::default(),
    };
    let mut change = PoolChange {
        name: old.or(new).map(|p| p.name.clone()).unwrap_or_default(),
        change: match (old, new) {
            (Some(old), Some(new)) if old == new => "same",
            (Some(_), Some(_)) => "changed",
            (None, _) => "added",
            (_, None) => "removed",
        },
        algorithm_before: old.map(|p| p.algorithm.name()),
        algorithm_after: new.map(|p| p.algorithm.name()),
        moved_share: None,
        imbalance_before,
        imbalance_after,
        added: Vec::new(),
        removed: Vec::new(),
        reweighted: Vec::new(),
        share_before,
        share_after,
        moves: BTreeMap::new(),
    };
    let (Some(old), Some(new), Some(before), Some(after)) = (old, new, before, after) else {
        return change;
    };
    for (spec, label) in old.backends.iter().zip(&old.labels) {
        match new.backends.iter().position(|b| b.id == spec.id) {
            None => change.removed.push(label.clone()),
            Some(i) if new.backends[i].weight != spec.weight => change.reweighted.push(Reweight {
                backend: label.clone(),
                before: spec.weight,
                after: new.backends[i].weight,
            }),
            Some(_) => {}
        }
    }
    for (spec, label) in new.backends.iter().zip(&new.labels) {
        if !old.backends.iter().any(|b| b.id == spec.id) {
            change.added.push(label.clone());
        }
    }
    let keyed = old.algorithm.uses_key() && new.algorithm.uses_key();
    if !keyed && !old.sticky_clients {
        return change;
    }
    let total = keys.len().max(1) as f64;
    let mut moved = 0usize;
    for (was, now) in before.iter().zip(&after) {
        let Some(was) = *was else { continue };
        let was_id = &old.backends[was].id;
        let kept = if keyed {
            now.is_some_and(|now| &new.backends[now].id == was_id)
        } else {
            // A sticky client keeps its backend while the backend stays in the pool.
            new.backends.iter().any(|b| &b.id == was_id)
        };
        if kept {
            continue;
        }
        moved += 1;
        let to = match now {
            Some(now) if keyed => new.labels[*now].clone(),
            Some(_) => "rebalanced".to_owned(),
            None => "none".to_owned(),
        };
        *change
            .moves
            .entry(old.labels[was].clone())
            .or_default()
            .entry(to)
            .or_default() += 1.0 / total;
    }
    change.moved_share = Some(moved as f64 / total);
    change
}

impl ChangeReport {
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} sample keys ({}0 … {}{})\n",
            self.keys,
            self.key_prefix,
            self.key_prefix,
            self.keys.saturating_sub(1)
        );
        let percent = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{:.2} %", v * 100.0));
        let ratio = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
        for pool in &self.pools {
            out.push_str(&format!(
                "\npool {} ({}, {} → {})\n",
                pool.name,
                pool.change,
                pool.algorithm_before.unwrap_or("-"),
                pool.algorithm_after.unwrap_or("-")
            ));
            out.push_str(&format!(
                "  moved: {}   imbalance: {} → {}\n",
                percent(pool.moved_share),
                ratio(pool.imbalance_before),
                ratio(pool.imbalance_after)
            ));
            for (what, list) in [("added", &pool.added), ("removed", &pool.removed)] {
                if !list.is_empty() {
                    out.push_str(&format!("  {what}: {}\n", list.join(", ")));
                }
            }
            for r in &pool.reweighted {
                out.push_str(&format!(
                    "  reweighted: {} {} → {}\n",
                    r.backend, r.before, r.after
                ));
            }
            let mut table = Table::new(&["  backend", "share before", "share after"]);
            let labels: std::collections::BTreeSet<&String> = pool
                .share_before
                .keys()
                .chain(pool.share_after.keys())
                .collect();
            for label in labels {
                table.row(vec![
                    format!("  {label}"),
                    percent(pool.share_before.get(label).copied()),
                    percent(pool.share_after.get(label).copied()),
                ]);
            }
            out.push_str(&table.render());
            for (from, targets) in &pool.moves {
                for (to, share) in targets {
                    out.push_str(&format!("  {from} → {to}: {}\n", percent(Some(*share))));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(algorithm: Algorithm, backends: &[(&str, u32)]) -> PoolShape {
        PoolShape {
            name: "takip".into(),
            algorithm,
            options: SelectorOptions::default(),
            backends: backends
                .iter()
                .map(|(id, weight)| BackendSpec {
                    id: (*id).into(),
                    weight: *weight,
                })
                .collect(),
            labels: backends.iter().map(|(id, _)| (*id).into()).collect(),
            sticky_clients: false,
        }
    }

    fn sample() -> KeySample {
        KeySample {
            prefix: "musteri-".into(),
            count: 20_000,
        }
    }

    #[test]
    fn adding_a_fourth_backend_to_a_ring_moves_about_a_quarter_all_to_it() {
        let three = [("a:1", 1), ("b:1", 1), ("c:1", 1)];
        let four = [("a:1", 1), ("b:1", 1), ("c:1", 1), ("d:1", 1)];
        let report = compare(
            &[pool(Algorithm::ConsistentHash, &three)],
            &[pool(Algorithm::ConsistentHash, &four)],
            &sample(),
        );
        let change = &report.pools[0];
        let moved = change.moved_share.unwrap();
        assert!((0.18..0.32).contains(&moved), "moved {moved}");
        assert_eq!(change.added, ["d:1"]);
        assert!(change.removed.is_empty());
        for targets in change.moves.values() {
            assert_eq!(targets.keys().collect::<Vec<_>>(), ["d:1"]);
        }
        let into_d: f64 = change.moves.values().flat_map(|t| t.values()).sum();
        assert!((into_d - moved).abs() < 1e-9);
    }

    #[test]
    fn modulo_moves_most_keys_where_the_ring_moves_few() {
        let three = [("a:1", 1), ("b:1", 1), ("c:1", 1)];
        let four = [("a:1", 1), ("b:1", 1), ("c:1", 1), ("d:1", 1)];
        let moved = |algorithm| {
            compare(
                &[pool(algorithm, &three)],
                &[pool(algorithm, &four)],
                &sample(),
            )
            .pools[0]
                .moved_share
                .unwrap()
        };
        assert!(moved(Algorithm::Modulo) > 0.6);
        assert!(moved(Algorithm::ConsistentHash) < 0.35);
    }

    #[test]
    fn unchanged_pool_moves_nothing_and_reweighting_is_listed() {
        let before = [("a:1", 1), ("b:1", 1)];
        let after = [("a:1", 3), ("b:1", 1)];
        let same = compare(
            &[pool(Algorithm::Maglev, &before)],
            &[pool(Algorithm::Maglev, &before)],
            &sample(),
        );
        assert_eq!(same.pools[0].moved_share, Some(0.0));
        assert_eq!(same.pools[0].change, "same");
        let weighted = compare(
            &[pool(Algorithm::WeightedRoundRobin, &before)],
            &[pool(Algorithm::WeightedRoundRobin, &after)],
            &sample(),
        );
        let change = &weighted.pools[0];
        assert_eq!(change.moved_share, None, "round robin binds no key");
        assert_eq!(change.reweighted[0].after, 3);
        assert!((change.share_after["a:1"] - 0.75).abs() < 0.001);
        assert!((change.imbalance_after.unwrap() - 1.0).abs() < 0.01);
    }

    #[test]
    fn sticky_clients_move_only_off_a_removed_backend() {
        let mut old = pool(Algorithm::RoundRobin, &[("a:1", 1), ("b:1", 1), ("c:1", 1)]);
        old.sticky_clients = true;
        let new = pool(Algorithm::RoundRobin, &[("a:1", 1), ("b:1", 1)]);
        let report = compare(&[old], &[new], &sample());
        let moved = report.pools[0].moved_share.unwrap();
        assert!((moved - 1.0 / 3.0).abs() < 0.001, "moved {moved}");
        assert_eq!(report.pools[0].removed, ["c:1"]);
    }

    #[test]
    fn pools_only_on_one_side_are_added_or_removed() {
        let report = compare(
            &[pool(Algorithm::RoundRobin, &[("a:1", 1)])],
            &[],
            &sample(),
        );
        assert_eq!(report.pools[0].change, "removed");
        assert!(report.pools[0].imbalance_after.is_none());
    }
}
