//! The edge cache's store candidates on the CDN lesson's trace (200,000 requests, bursts of 10
//! and 2, 1,000 keys): `trafik-cache`'s exact LRU (the `lru` crate) and its admission policy
//! (quick_cache, S3-FIFO-like), and moka (TinyLFU). Prints each one's hit ratio, then measures
//! the time of one lookup (and insert on a miss) per request.
//!
//!   cargo bench -p trafik-sim --bench stores

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use trafik_cache::{Limits, Policy, Store};
use trafik_sim::cache::{CacheOptions, trace};

const CAPACITY: usize = 1_000;

/// A cache that answers whether it held the key, and keeps it afterwards.
trait Candidate {
    fn ask(&self, key: &str) -> bool;
}

impl Candidate for Store<String, ()> {
    fn ask(&self, key: &str) -> bool {
        let key = key.to_owned();
        if self.get(&key).is_some() {
            return true;
        }
        self.insert(key, ());
        false
    }
}

impl Candidate for moka::sync::Cache<String, ()> {
    fn ask(&self, key: &str) -> bool {
        if self.get(key).is_some() {
            return true;
        }
        self.insert(key.to_owned(), ());
        false
    }
}

fn candidates() -> Vec<(&'static str, Box<dyn Candidate>)> {
    let limits = Limits {
        max_entries: CAPACITY,
        max_bytes: CAPACITY as u64,
    };
    vec![
        (
            "lru",
            Box::new(Store::<String, ()>::new(Policy::Lru, limits)),
        ),
        (
            "quick_cache",
            Box::new(Store::<String, ()>::new(Policy::Admission, limits)),
        ),
        (
            "moka",
            Box::new(moka::sync::Cache::<String, ()>::new(CAPACITY as u64)),
        ),
    ]
}

fn stores(c: &mut Criterion) {
    let options = CacheOptions::default();
    for burst in [10, 2] {
        let keys: Vec<String> = trace(&options, burst).collect();
        for (name, candidate) in candidates() {
            let hits = keys.iter().filter(|k| candidate.ask(k)).count();
            println!(
                "burst {burst}: {name:<12} hit ratio {:.4}",
                hits as f64 / keys.len() as f64
            );
        }
        let mut group = c.benchmark_group(format!("trace, burst {burst}"));
        group.sample_size(10);
        for (name, candidate) in candidates() {
            group.bench_function(name, |b| {
                b.iter(|| {
                    for key in &keys[..20_000] {
                        black_box(candidate.ask(key));
                    }
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, stores);
criterion_main!(benches);
