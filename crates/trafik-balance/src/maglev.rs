use std::sync::atomic::{AtomicU64, Ordering};

use crate::hash::{mix64, stable_hash};
use crate::{BackendSet, Explained, PickContext, Selector};

/// The default Maglev table size: a prime well above 100 × the backends of a typical pool.
pub const DEFAULT_TABLE_SIZE: u32 = 65_537;

/// Maglev hashing (Google, NSDI 2016): a lookup table of prime size in which every backend
/// fills slots in the order of its own permutation, taking turns, so each owns an almost equal
/// share and a membership change moves few keys. A lookup is one array read.
///
/// An unavailable backend's slots fall through to the next slots of the table, so only its keys
/// move, spread over the others.
#[derive(Debug)]
pub struct Maglev {
    table: Box<[u32]>,
    keyless: AtomicU64,
}

impl Maglev {
    /// Builds the table; `size` should be prime (it is rounded up to the next prime).
    pub fn new(backends: &BackendSet, size: u32) -> Self {
        let ids: Vec<&str> = (0..backends.len())
            .map(|i| backends.spec(i).id.as_str())
            .collect();
        Self::from_ids(&ids, size)
    }

    /// Builds the table from backend identities (placed by trafik's stable hash).
    pub fn from_ids(ids: &[&str], size: u32) -> Self {
        let size = next_prime(size.max(ids.len() as u32 + 1)) as u64;
        let mut table = vec![u32::MAX; size as usize];
        if !ids.is_empty() {
            // Each backend's permutation is offset + j × skip (mod size), skip ≠ 0.
            let permutations: Vec<(u64, u64)> = ids
                .iter()
                .map(|id| {
                    let h = stable_hash(id.as_bytes());
                    (h % size, mix64(h) % (size - 1) + 1)
                })
                .collect();
            let mut next = vec![0u64; ids.len()];
            let mut filled = 0;
            'fill: loop {
                for (backend, &(offset, skip)) in permutations.iter().enumerate() {
                    let mut slot = (offset + next[backend] * skip) % size;
                    while table[slot as usize] != u32::MAX {
                        next[backend] += 1;
                        slot = (offset + next[backend] * skip) % size;
                    }
                    table[slot as usize] = backend as u32;
                    next[backend] += 1;
                    filled += 1;
                    if filled == size {
                        break 'fill;
                    }
                }
            }
        }
        Maglev {
            table: table.into_boxed_slice(),
            keyless: AtomicU64::new(0),
        }
    }

    /// The backend owning `key` when all are available.
    pub fn owner(&self, key: u64) -> Option<usize> {
        let slot = (key % self.table.len() as u64) as usize;
        self.table
            .get(slot)
            .filter(|&&b| b != u32::MAX)
            .map(|&b| b as usize)
    }
}

impl Selector for Maglev {
    #[inline]
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        if backends.is_empty() {
            return None;
        }
        let key = context
            .key
            .unwrap_or_else(|| mix64(self.keyless.fetch_add(1, Ordering::Relaxed)));
        self.place(key, backends, context)
    }

    fn explain(&self, backends: &BackendSet, context: &PickContext) -> Explained {
        if backends.is_empty() {
            return Explained::none_available();
        }
        let key = context
            .key
            .unwrap_or_else(|| mix64(self.keyless.load(Ordering::Relaxed)));
        let Some(pick) = self.place(key, backends, context) else {
            return Explained::none_available();
        };
        let slot = key % self.table.len() as u64;
        let owner = self.table[slot as usize] as usize;
        let mut reason = format!(
            "key {key:#018x} → table slot {slot} of {} owned by {}",
            self.table.len(),
            backends.spec(owner).id
        );
        if owner != pick {
            reason.push_str(&format!(
                ", which cannot take it; the next slots lead to {}",
                backends.spec(pick).id
            ));
        }
        Explained::new(Some(pick), reason)
    }

    fn name(&self) -> &'static str {
        "maglev"
    }
}

impl Maglev {
    /// The backend of `key`'s slot, or of the first slot after it whose backend may take it.
    #[inline]
    fn place(&self, key: u64, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        let size = self.table.len();
        let start = (key % size as u64) as usize;
        let first = self.table[start] as usize;
        if backends.is_available(first, context) {
            return Some(first);
        }
        (1..size)
            .map(|step| self.table[(start + step) % size] as usize)
            .find(|&i| backends.is_available(i, context))
    }
}

fn next_prime(mut n: u32) -> u32 {
    let is_prime = |n: u32| {
        n >= 2
            && (2..)
                .take_while(|d| d * d <= n)
                .all(|d| !n.is_multiple_of(d))
    };
    while !is_prime(n) {
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_sizes_are_prime() {
        assert_eq!(next_prime(65_537), 65_537);
        assert_eq!(next_prime(100), 101);
        assert_eq!(next_prime(2), 2);
    }

    #[test]
    fn every_backend_owns_an_almost_equal_share_of_the_table() {
        let ids: Vec<String> = (0..7).map(|i| format!("10.0.0.{i}:80")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let maglev = Maglev::from_ids(&ids, 65_537);
        let mut owned = [0usize; 7];
        for &b in maglev.table.iter() {
            owned[b as usize] += 1;
        }
        let (min, max) = (owned.iter().min().unwrap(), owned.iter().max().unwrap());
        assert!(max - min <= 1, "{owned:?}");
    }
}
