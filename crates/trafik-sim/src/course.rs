//! The hash functions and random generators the course's models define for themselves, so a
//! model run here matches the text number for number. Each reproduces the original arithmetic,
//! including where the JavaScript relies on double-precision numbers.

/// Seed 001's Lehmer generator (MINSTD, multiplier 48271): `r(n)` draws in `0..n`.
pub struct Lehmer {
    state: u64,
}

impl Lehmer {
    pub fn new(seed: u64) -> Self {
        Lehmer {
            state: seed % 2_147_483_646 + 1,
        }
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.state = self.state * 48_271 % 2_147_483_647;
        self.state % n
    }
}

/// Seed 001's integer hash: Knuth's multiplicative step and two xor-shift mixes, on a ring of
/// 2^20 positions.
pub fn knuth_ring_hash(x: u64) -> u64 {
    let mut x = x.wrapping_mul(2_654_435_761) & 0xFFFF_FFFF;
    x ^= x >> 16;
    x = x.wrapping_mul(2_246_822_507) & 0xFFFF_FFFF;
    x ^= x >> 13;
    x % (1 << 20)
}

/// The "karma" of the hashing and stickiness lessons: 32-bit FNV-1a over the string's UTF-16
/// code units (JavaScript's `charCodeAt`), then a final mix.
pub fn fnv_mix32(text: &str) -> u32 {
    let mut h: u32 = 2_166_136_261;
    for unit in text.encode_utf16() {
        h = (h ^ u32::from(unit)).wrapping_mul(16_777_619);
    }
    h ^= h >> 15;
    h = h.wrapping_mul(2_246_822_507);
    h ^= h >> 13;
    h
}

/// The queue model's linear congruential generator, computed as JavaScript does: in doubles,
/// where `s × 1103515245` exceeds 2^53 and is rounded before the modulo.
pub struct DoubleLcg {
    state: f64,
}

impl DoubleLcg {
    pub fn new(seed: u64) -> Self {
        DoubleLcg { state: seed as f64 }
    }

    /// The next cost, `1 + (s >>> 8) % 10`.
    pub fn next_cost(&mut self) -> u64 {
        self.state = (self.state * 1_103_515_245.0 + 12_345.0) % 2_147_483_648.0;
        // `>>>` converts to a 32-bit unsigned integer; the state is a whole number below 2^31.
        1 + (self.state as u32 >> 8) as u64 % 10
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_mix_matches_the_reference_values() {
        // From the course's JavaScript, run under Node.js 20.
        assert_eq!(fnv_mix32(""), 535_972_289);
        assert_eq!(fnv_mix32("k1#0"), 62_790_507);
        assert_eq!(fnv_mix32("G1000000"), 711_200_445);
    }

    #[test]
    fn the_double_lcg_loses_precision_like_javascript() {
        // The first costs of seed 20240730 in Node.js 20. Exact integer arithmetic would give
        // 10, 5, 1, 2, 4, 2, 10, 10: the rounding of doubles changes the second draw on.
        let mut lcg = DoubleLcg::new(20_240_730);
        let costs: Vec<u64> = (0..8).map(|_| lcg.next_cost()).collect();
        assert_eq!(costs, [10, 4, 3, 5, 7, 1, 3, 10]);
    }
}
