//! The bounded store: entries and bytes, behind one of two eviction policies.
//!
//! - [`Policy::Lru`]: exact least-recently-used (the `lru` crate) bounded by entries and bytes.
//!   It is the policy the course's models assume, so `trafik sim cache` reproduces their tables.
//! - [`Policy::Admission`]: `quick_cache`'s S3-FIFO-like policy, which admits a new key into a
//!   small probation queue and keeps keys seen more than once: one-hit wonders (a scan, or the
//!   course's once-per-window keys) do not push out the hot set. Bounded by bytes, with the
//!   entry limit as its size estimate.
//!
//! Both are shared by every worker thread (one store per cache, so a key fetched by one worker
//! is a hit on all of them) and hashed with a fixed hasher, so a model run is reproducible.

use std::hash::Hash;
use std::sync::Mutex;

/// What a stored value costs against the store's byte limit.
pub trait Weigh {
    fn bytes(&self) -> u64;
}

impl<T: Weigh + ?Sized> Weigh for std::sync::Arc<T> {
    fn bytes(&self) -> u64 {
        (**self).bytes()
    }
}

impl Weigh for () {
    fn bytes(&self) -> u64 {
        1
    }
}

/// Which entries make room for new ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Policy {
    /// The least recently used entry goes first.
    #[default]
    Lru,
    /// New keys wait in a probation queue; keys asked for again are kept (quick_cache).
    Admission,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Lru => "lru",
            Policy::Admission => "admission",
        }
    }
}

impl std::str::FromStr for Policy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "lru" => Ok(Policy::Lru),
            "admission" => Ok(Policy::Admission),
            _ => Err(format!("expected lru or admission, found {text:?}")),
        }
    }
}

/// The limits of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_entries: usize,
    pub max_bytes: u64,
}

/// Keys hashed with a fixed seed: the same keys evict the same way every run (the course's
/// models count on it). foldhash, as hashbrown's default, costs a fraction of SipHash's
/// instructions per lookup; SipHash under fixed keys guarded no better against keys chosen to
/// collide.
type FixedHash = foldhash::fast::FixedState;

/// The most entries the admission policy's tables are sized for at the start.
const PREALLOCATED_ENTRIES: usize = 1 << 16;

#[derive(Clone, Copy, Default)]
struct ByBytes;

impl<K, V: Weigh> quick_cache::Weighter<K, V> for ByBytes {
    fn weight(&self, _key: &K, value: &V) -> u64 {
        value.bytes().max(1)
    }
}

enum Inner<K, V> {
    Lru(Mutex<Lru<K, V>>),
    Admission(quick_cache::sync::Cache<K, V, ByBytes, FixedHash>),
}

struct Lru<K, V> {
    entries: lru::LruCache<K, V, FixedHash>,
    bytes: u64,
}

/// A bounded map from keys to values, safe to share between threads.
pub struct Store<K, V> {
    inner: Inner<K, V>,
    limits: Limits,
}

impl<K: Eq + Hash + Clone, V: Weigh + Clone> Store<K, V> {
    pub fn new(policy: Policy, limits: Limits) -> Self {
        let entries = limits.max_entries.max(1);
        let inner = match policy {
            Policy::Lru => Inner::Lru(Mutex::new(Lru {
                entries: lru::LruCache::unbounded_with_hasher(FixedHash::default()),
                bytes: 0,
            })),
            Policy::Admission => {
                let options = quick_cache::OptionsBuilder::new()
                    // An estimate that sizes its tables up front: a huge entry limit must not
                    // allocate for entries that may never come.
                    .estimated_items_capacity(entries.min(PREALLOCATED_ENTRIES))
                    .weight_capacity(limits.max_bytes.max(1))
                    // One shard: the same sequence of keys always evicts the same way.
                    .shards(1)
                    .build()
                    .expect("estimated items and weight capacity are set");
                Inner::Admission(quick_cache::sync::Cache::with_options(
                    options,
                    ByBytes,
                    FixedHash::default(),
                    Default::default(),
                ))
            }
        };
        Store {
            inner,
            limits: Limits {
                max_entries: entries,
                ..limits
            },
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The value under `key` (or a borrowed form of it, such as `&str` for `String` keys),
    /// marked as used.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match &self.inner {
            Inner::Lru(lru) => lock(lru).entries.get(key).cloned(),
            Inner::Admission(cache) => cache.get(key),
        }
    }

    /// The value under `key`, read without marking it used (neither its recency nor the
    /// admission policy's frequency moves): for telling what a request would find.
    pub fn peek<Q>(&self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match &self.inner {
            Inner::Lru(lru) => lock(lru).entries.peek(key).cloned(),
            Inner::Admission(cache) => cache.peek(key),
        }
    }

    /// Stores `value` under `key`, evicting what the policy chooses until both limits hold. A
    /// value larger than the whole store is not stored.
    pub fn insert(&self, key: K, value: V) {
        let bytes = value.bytes();
        if bytes > self.limits.max_bytes {
            self.remove(&key);
            return;
        }
        match &self.inner {
            Inner::Lru(lru) => {
                let mut lru = lock(lru);
                lru.bytes += bytes;
                if let Some(old) = lru.entries.put(key, value) {
                    lru.bytes -= old.bytes();
                }
                while lru.entries.len() > self.limits.max_entries
                    || lru.bytes > self.limits.max_bytes
                {
                    match lru.entries.pop_lru() {
                        Some((_, evicted)) => lru.bytes -= evicted.bytes(),
                        None => break,
                    }
                }
            }
            Inner::Admission(cache) => cache.insert(key, value),
        }
    }

    /// Takes out the value under `key` (or a borrowed form of it).
    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        match &self.inner {
            Inner::Lru(lru) => {
                let mut lru = lock(lru);
                let removed = lru.entries.pop(key);
                if let Some(removed) = &removed {
                    lru.bytes -= removed.bytes();
                }
                removed
            }
            Inner::Admission(cache) => cache.remove(key).map(|(_, v)| v),
        }
    }

    /// Removes every entry whose key `doomed` picks; returns the values that went.
    pub fn remove_where(&self, doomed: impl Fn(&K) -> bool) -> Vec<V> {
        let keys: Vec<K> = match &self.inner {
            Inner::Lru(lru) => lock(lru)
                .entries
                .iter()
                .filter(|(k, _)| doomed(k))
                .map(|(k, _)| k.clone())
                .collect(),
            Inner::Admission(cache) => cache
                .iter()
                .filter(|(k, _)| doomed(k))
                .map(|(k, _)| k)
                .collect(),
        };
        keys.iter().filter_map(|k| self.remove(k)).collect()
    }

    pub fn entries(&self) -> usize {
        match &self.inner {
            Inner::Lru(lru) => lock(lru).entries.len(),
            Inner::Admission(cache) => cache.len(),
        }
    }

    pub fn bytes(&self) -> u64 {
        match &self.inner {
            Inner::Lru(lru) => lock(lru).bytes,
            Inner::Admission(cache) => cache.weight(),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct Sized(u64);
    impl Weigh for Sized {
        fn bytes(&self) -> u64 {
            self.0
        }
    }

    fn limits(max_entries: usize, max_bytes: u64) -> Limits {
        Limits {
            max_entries,
            max_bytes,
        }
    }

    #[test]
    fn lru_evicts_the_least_recently_used_by_entries() {
        let store = Store::new(Policy::Lru, limits(2, 1000));
        store.insert("a", Sized(1));
        store.insert("b", Sized(1));
        assert!(store.get(&"a").is_some()); // b is now the oldest
        store.insert("c", Sized(1));
        assert!(store.get(&"b").is_none());
        assert!(store.get(&"a").is_some() && store.get(&"c").is_some());
        assert_eq!(store.entries(), 2);
    }

    #[test]
    fn a_peek_leaves_the_lru_order_as_it_was() {
        let store = Store::new(Policy::Lru, limits(2, 1000));
        store.insert("a", Sized(1));
        store.insert("b", Sized(1));
        assert!(store.peek(&"a").is_some()); // a stays the oldest
        store.insert("c", Sized(1));
        assert!(store.peek(&"a").is_none(), "a peek did not make a recent");
        assert!(store.peek(&"b").is_some() && store.peek(&"c").is_some());
    }

    #[test]
    fn lru_keeps_within_the_byte_limit() {
        let store = Store::new(Policy::Lru, limits(100, 10));
        store.insert("a", Sized(4));
        store.insert("b", Sized(4));
        store.insert("c", Sized(4));
        assert_eq!(store.bytes(), 8);
        assert!(store.get(&"a").is_none());
        store.insert("b", Sized(2)); // replacing counts the new size only
        assert_eq!(store.bytes(), 6);
        store.insert("huge", Sized(11));
        assert!(store.get(&"huge").is_none());
        assert_eq!(store.bytes(), 6);
    }

    #[test]
    fn removal_by_predicate_counts_what_went() {
        for policy in [Policy::Lru, Policy::Admission] {
            let store = Store::new(policy, limits(100, 1000));
            for key in ["/takip/1", "/takip/2", "/varlik/a"] {
                store.insert(key.to_string(), Sized(1));
            }
            assert_eq!(store.remove_where(|k| k.starts_with("/takip/")).len(), 2);
            assert_eq!(store.entries(), 1);
            assert!(store.get(&"/varlik/a".to_string()).is_some());
        }
    }

    #[test]
    fn admission_keeps_a_reused_key_through_a_scan() {
        let store = Store::new(Policy::Admission, limits(100, 100));
        let hot = "hot".to_string();
        store.insert(hot.clone(), Sized(1));
        for _ in 0..3 {
            assert!(store.get(&hot).is_some());
        }
        for i in 0..1000 {
            store.insert(format!("scan{i}"), Sized(1));
        }
        assert!(
            store.get(&hot).is_some(),
            "a scan of one-time keys evicted the hot key"
        );
        assert!(store.bytes() <= 100);
        let lru = Store::new(Policy::Lru, limits(100, 100));
        lru.insert(hot.clone(), Sized(1));
        for i in 0..1000 {
            lru.insert(format!("scan{i}"), Sized(1));
        }
        assert!(
            lru.get(&hot).is_none(),
            "LRU has no admission: the scan evicts"
        );
    }
}
