//! The hashing lesson's model: how evenly keys spread and how many move when a replica is added
//! (N → N+1) and removed again, for `key mod N` and for the ring at several virtual-node counts —
//! plus Maglev and bounded-load rows — and what the moved share costs a cache while it warms up.

use serde::Serialize;
use trafik_balance::{
    BackendSet, BackendSpec, BoundedLoadRing, HashRing, Maglev, Modulo, PickContext, Selector,
};

use crate::SimError;
use crate::course::fnv_mix32;
use crate::table::Table;

#[derive(Clone, Debug)]
pub struct RemapOptions {
    pub keys: usize,
    pub key_prefix: String,
    pub key_base: u64,
    pub replicas: Vec<String>,
    pub added: Option<String>,
    pub virtual_nodes: Vec<u32>,
    pub maglev_size: u32,
    pub balance_factor: f64,
    pub warmup: WarmupInputs,
}

/// The cache arithmetic's inputs (the course's K01 figures by default).
#[derive(Clone, Debug, Serialize)]
pub struct WarmupInputs {
    /// Reads per second at peak.
    pub read_rate: f64,
    /// Writes per second at peak (they always reach the store).
    pub write_rate: f64,
    /// Share of reads the cache answers once warm.
    pub hit_ratio: f64,
    /// Requests per second reaching the store when the cache is warm.
    pub store_base: f64,
    /// Seconds the cache takes to warm up again.
    pub window_s: f64,
}

impl Default for RemapOptions {
    fn default() -> Self {
        RemapOptions {
            keys: 100_000,
            key_prefix: "G".into(),
            key_base: 1_000_000,
            replicas: vec!["k1".into(), "k2".into(), "k3".into()],
            added: None,
            virtual_nodes: vec![1, 10, 100, 1000],
            maglev_size: trafik_balance::DEFAULT_TABLE_SIZE,
            balance_factor: 1.25,
            warmup: WarmupInputs {
                read_rate: 416.67,
                write_rate: 97.22,
                hit_ratio: 0.90,
                store_base: 138.89,
                window_s: 60.0,
            },
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct RemapReport {
    pub keys: usize,
    pub replicas_before: Vec<String>,
    pub replicas_after: Vec<String>,
    /// The share an ideal scheme moves: 1 / (N + 1).
    pub ideal_move: f64,
    pub rows: Vec<RemapRow>,
    pub warmup_inputs: WarmupInputs,
    pub warmup: Vec<WarmupRow>,
    /// Reads behind the cache and store requests with no warm-up going on.
    pub base_behind_cache: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RemapRow {
    pub rule: &'static str,
    /// Virtual nodes per replica (ring and bounded-load rows), table size (Maglev), else null.
    pub vnodes: Option<u32>,
    /// Most keys on one replica relative to an even split, before and after the change.
    pub imbalance_before: f64,
    pub imbalance_after: f64,
    /// Share of keys on another replica after N → N+1, and after N+1 → N.
    pub moved_add: f64,
    /// Equal to `moved_add`: taking the added replica away again restores the placement before
    /// it, so both directions compare the same two placements (the course prints both).
    pub moved_remove: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct WarmupRow {
    pub rule: &'static str,
    pub moved: f64,
    /// Reads the cache misses while warming: moved keys miss, the rest miss as usual.
    pub miss_ratio: f64,
    /// Reads per second reaching the store behind the cache.
    pub behind_cache: f64,
    /// Requests per second reaching the store (reads behind the cache and all writes).
    pub store_requests: f64,
    /// Store requests as a multiple of the warm base.
    pub multiple: f64,
    /// Store requests above the base over the warm-up window.
    pub extra_store_requests: f64,
}

pub fn run(options: &RemapOptions) -> Result<RemapReport, SimError> {
    if options.replicas.is_empty() || options.keys == 0 {
        return Err(SimError::new(
            "--replicas needs at least one name and --keys at least 1",
        ));
    }
    if options.virtual_nodes.is_empty() || options.virtual_nodes.contains(&0) {
        return Err(SimError::new(
            "--vnodes needs one or more counts of at least 1",
        ));
    }
    let added = options
        .added
        .clone()
        .unwrap_or_else(|| format!("k{}", options.replicas.len() + 1));
    if options.replicas.contains(&added) {
        return Err(SimError::new(format!(
            "--added {added:?} is already one of the replicas"
        )));
    }
    let before = options.replicas.clone();
    let mut after = before.clone();
    after.push(added);
    let keys: Vec<u64> = (0..options.keys as u64)
        .map(|i| {
            u64::from(fnv_mix32(&format!(
                "{}{}",
                options.key_prefix,
                options.key_base + i
            )))
        })
        .collect();

    let mut rows = vec![compare("modulo", None, &keys, &before, &after, |_| {
        Box::new(Modulo)
    })];
    for &v in &options.virtual_nodes {
        rows.push(compare("ring", Some(v), &keys, &before, &after, |names| {
            Box::new(course_ring(names, v))
        }));
    }
    let size = options.maglev_size;
    rows.push(compare(
        "maglev",
        Some(size),
        &keys,
        &before,
        &after,
        |names| {
            let ids: Vec<&str> = names.iter().map(String::as_str).collect();
            Box::new(Maglev::from_ids(&ids, size))
        },
    ));
    let v = *options.virtual_nodes.last().unwrap_or(&1000);
    let factor = options.balance_factor;
    rows.push(compare(
        "bounded-load",
        Some(v),
        &keys,
        &before,
        &after,
        |names| Box::new(BoundedLoadRing::new(course_ring(names, v), factor)),
    ));

    let w = &options.warmup;
    let chosen_ring = rows.iter().rposition(|r| r.rule == "ring").unwrap_or(0);
    let warmup = [0, chosen_ring, rows.len() - 2, rows.len() - 1]
        .into_iter()
        .map(|i| {
            let moved = rows[i].moved_add;
            let miss_ratio = moved + (1.0 - moved) * (1.0 - w.hit_ratio);
            let behind_cache = w.read_rate * miss_ratio;
            let store_requests = behind_cache + w.write_rate;
            WarmupRow {
                rule: rows[i].rule,
                moved,
                miss_ratio,
                behind_cache,
                store_requests,
                multiple: store_requests / w.store_base,
                extra_store_requests: (store_requests - w.store_base) * w.window_s,
            }
        })
        .collect();
    Ok(RemapReport {
        keys: options.keys,
        ideal_move: 1.0 / after.len() as f64,
        replicas_before: before,
        replicas_after: after,
        rows,
        base_behind_cache: w.read_rate * (1.0 - w.hit_ratio),
        warmup_inputs: w.clone(),
        warmup,
    })
}

/// The lesson's ring: each replica at `karma("{name}#{v}")`, in the replicas' order on ties.
fn course_ring(names: &[String], virtual_nodes: u32) -> HashRing {
    HashRing::from_points(names.iter().enumerate().flat_map(|(i, name)| {
        (0..virtual_nodes).map(move |v| (u64::from(fnv_mix32(&format!("{name}#{v}"))), i))
    }))
}

/// Places every key before and after the change with rules built by `build`.
fn compare(
    rule: &'static str,
    vnodes: Option<u32>,
    keys: &[u64],
    before: &[String],
    after: &[String],
    build: impl Fn(&[String]) -> Box<dyn Selector>,
) -> RemapRow {
    let place = |names: &[String]| -> Vec<usize> {
        let backends = BackendSet::new(names.iter().map(|n| BackendSpec {
            id: n.clone(),
            weight: 1,
        }));
        let selector = build(names);
        keys.iter()
            .map(|&key| {
                let chosen = selector
                    .pick(
                        &backends,
                        &PickContext {
                            key: Some(key),
                            ..PickContext::default()
                        },
                    )
                    .unwrap_or(0);
                // Keys stay bound: each one counts as load (bounded loads caps on it).
                backends.start(chosen);
                chosen
            })
            .collect()
    };
    let (b, a) = (place(before), place(after));
    let moved = b.iter().zip(&a).filter(|(x, y)| x != y).count() as f64 / keys.len() as f64;
    RemapRow {
        rule,
        vnodes,
        imbalance_before: imbalance(&b, before.len(), keys.len()),
        imbalance_after: imbalance(&a, after.len(), keys.len()),
        moved_add: moved,
        moved_remove: moved,
    }
}

/// (most keys on one replica / keys) × replicas: 1.000 is an even split.
fn imbalance(placement: &[usize], replicas: usize, keys: usize) -> f64 {
    let mut counts = vec![0usize; replicas];
    for &p in placement {
        counts[p] += 1;
    }
    (*counts.iter().max().unwrap_or(&0) as f64 / keys as f64) * replicas as f64
}

impl RemapReport {
    pub fn render(&self) -> String {
        let (n, m) = (self.replicas_before.len(), self.replicas_after.len());
        let mut table = Table::new(&[
            "rule",
            &format!("imbalance {n}"),
            &format!("imbalance {m}"),
            &format!("moved {n}->{m}"),
            &format!("moved {m}->{n}"),
        ]);
        for r in &self.rows {
            let name = match (r.rule, r.vnodes) {
                ("maglev", Some(size)) => format!("maglev (M={size})"),
                (rule, Some(v)) => format!("{rule} (v={v})"),
                (rule, None) => rule.to_owned(),
            };
            table.row(vec![
                name,
                format!("{:.3}", r.imbalance_before),
                format!("{:.3}", r.imbalance_after),
                format!("{:.4}", r.moved_add),
                format!("{:.4}", r.moved_remove),
            ]);
        }
        let mut out = format!("{} keys\n", self.keys);
        out.push_str(&table.render());
        out.push_str(&format!(
            "\nan even split has imbalance 1.000; ideal moving on {n}->{m} = {:.4}\n\n",
            self.ideal_move
        ));
        let mut warm = Table::new(&[
            "rule",
            "moved",
            "miss ratio",
            "reads behind cache/s",
            "store requests/s",
            "x base",
            "extra store requests",
        ]);
        for r in &self.warmup {
            warm.row(vec![
                r.rule.into(),
                format!("{:.4}", r.moved),
                format!("{:.4}", r.miss_ratio),
                format!("{:.2}", r.behind_cache),
                format!("{:.2}", r.store_requests),
                format!("{:.2}", r.multiple),
                format!("{:.0}", r.extra_store_requests),
            ]);
        }
        out.push_str(&warm.render());
        out.push_str(&format!(
            "base (no warm-up): {:.2} reads/s behind the cache, {} store requests/s\n",
            self.base_behind_cache, self.warmup_inputs.store_base
        ));
        out
    }
}
