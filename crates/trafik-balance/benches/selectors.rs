//! Nanoseconds per pick for every selection rule at 3, 40 and 1,000 backends.
//!
//! `cargo bench -p trafik-balance --bench selectors`. Backends have weights 1–4 and a few
//! requests in flight each, all up; keys vary per pick, as requests do.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use trafik_balance::hash::stable_hash;
use trafik_balance::{Algorithm, BackendSet, BackendSpec, PickContext, SelectorOptions};

fn backends(count: usize) -> BackendSet {
    let set = BackendSet::new((0..count).map(|i| BackendSpec {
        id: format!("10.0.{}.{}:8080", i / 250, i % 250),
        weight: 1 + (i % 4) as u32,
    }));
    for i in 0..count {
        for _ in 0..(stable_hash(&i.to_le_bytes()) % 5) {
            set.start(i);
        }
    }
    set
}

fn picks(c: &mut Criterion) {
    let keys: Vec<u64> = (0..4096u64)
        .map(|i| stable_hash(&i.to_le_bytes()))
        .collect();
    let options = SelectorOptions::default(); // 160 virtual nodes, Maglev table 65537
    for &algorithm in Algorithm::ALL {
        let mut group = c.benchmark_group(algorithm.name());
        for count in [3usize, 40, 1000] {
            let set = backends(count);
            let rule = algorithm.build(&set, &options);
            group.bench_with_input(BenchmarkId::from_parameter(count), &count, |b, _| {
                let mut n = 0usize;
                b.iter(|| {
                    n = n.wrapping_add(1);
                    let context = PickContext {
                        key: Some(keys[n & 4095]),
                        now: n as u64,
                        ..PickContext::default()
                    };
                    black_box(rule.pick(black_box(&set), &context))
                });
            });
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_millis(800));
    targets = picks
}
criterion_main!(benches);
