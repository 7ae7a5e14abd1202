//! The hash trafik uses for keys and for placing backends on rings and Maglev tables.
//!
//! It must give the same value in every version and on every instance, so that two trafik
//! processes (or a restarted one) send a key to the same backend. It is therefore written out
//! here rather than taken from a library whose output may change: **FNV-1a 64-bit** over the
//! bytes, then the **SplitMix64 finalizer** to spread FNV's weak low bits. Both are public,
//! fixed algorithms; [`stable_hash`]'s test pins known values so a change cannot go unnoticed.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The stable 64-bit hash of `bytes`.
#[inline]
pub fn stable_hash(bytes: &[u8]) -> u64 {
    mix64(fnv1a64(bytes))
}

#[inline]
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash = FNV_OFFSET;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// SplitMix64's finalizer: a bijection that makes every input bit affect every output bit.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The point of virtual node `replica` of a backend on a ring: the hash of `"{id}#{replica}"`.
pub fn virtual_node_point(id: &str, replica: u32) -> u64 {
    let mut text = String::with_capacity(id.len() + 11);
    text.push_str(id);
    text.push('#');
    text.push_str(&replica.to_string());
    stable_hash(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_halves_match_their_published_test_vectors() {
        // FNV-1a 64 (Fowler, Noll, Vo test suite) and SplitMix64 (Vigna: seed 0, first output).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(mix64(0x9e37_79b9_7f4a_7c15), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn the_hash_is_pinned_across_versions() {
        // Changing this value would move every key of every consistent-hash pool.
        assert_eq!(stable_hash(b"TR-4821"), 0x1a78_cb69_cdcb_8281);
    }

    #[test]
    fn similar_keys_land_far_apart() {
        let a = stable_hash(b"G1000000");
        let b = stable_hash(b"G1000001");
        assert!((a ^ b).count_ones() > 16);
    }
}
