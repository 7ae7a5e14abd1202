//! Nanoseconds to verify one bearer token the way a JWT route does: HS256 with a shared secret,
//! a token of five claims, issuer and audience checked.
//!
//! `cargo bench -p trafik-policy --bench jwt`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use trafik_policy::jwt::{self, DemoClaims, Expectations, KeySet, PinnedKey};

const NOW: u64 = 1_800_000_000;
const SECRET: &[u8] = b"trafik-ornek-anahtar";

fn verify(c: &mut Criterion) {
    let algorithm = jwt::algorithm("HS256").unwrap();
    let claims = DemoClaims {
        subject: "M7".into(),
        issuer: Some("trafik-ornek".into()),
        audience: Some("takip".into()),
        issued_at: NOW,
        lifetime: 600,
    };
    let token = jwt::sign(algorithm, SECRET, &claims).unwrap();
    let keys = KeySet::new(vec![PinnedKey::secret(algorithm, SECRET).unwrap()]);
    let expect = Expectations {
        issuers: vec!["trafik-ornek".into()],
        audiences: vec!["takip".into()],
        leeway: 5,
    };
    c.bench_function("verify/HS256", |b| {
        b.iter(|| jwt::verify(black_box(&token), &keys, &expect, NOW).unwrap())
    });
}

criterion_group!(benches, verify);
criterion_main!(benches);
