//! A cache: the [`Store`] of responses by key, with the `Vary` bookkeeping between them.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http::header::HeaderName;

use crate::fields::FieldValues;
use crate::freshness::{Stored, vary_names};
use crate::key;
use crate::store::{Limits, Policy, Store, Weigh};

/// What a primary key holds: the response itself, or (for an answer with `Vary`) the header
/// names whose request values select one of its variants, stored under their own keys.
#[derive(Clone)]
enum Slot {
    Response(Arc<Stored>),
    Variants(Arc<[HeaderName]>),
}

impl Weigh for Slot {
    fn bytes(&self) -> u64 {
        match self {
            Slot::Response(stored) => stored.bytes(),
            Slot::Variants(names) => names.iter().map(|n| n.as_str().len() as u64).sum(),
        }
    }
}

/// What a request would find: the stored response, if any; the key it is (or would be) stored
/// under; and the `Vary` names that chose the key (empty when the answer does not vary).
pub struct Found<'p> {
    pub stored: Option<Arc<Stored>>,
    /// The primary key itself unless the answer varies: a hit pays no copy of it.
    pub key: Cow<'p, str>,
    pub vary: Vec<HeaderName>,
}

/// Responses by key, bounded by entries and bytes.
pub struct Cache {
    store: Store<String, Slot>,
    versions: AtomicU64,
}

impl Cache {
    pub fn new(policy: Policy, limits: Limits) -> Self {
        Cache {
            store: Store::new(policy, limits),
            versions: AtomicU64::new(0),
        }
    }

    /// The next object version (1 for the first stored).
    pub fn next_version(&self) -> u64 {
        self.versions.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The stored response a request with these headers may use, fresh or not; and the key it
    /// is (or would be) stored under.
    pub fn lookup<'p, F: FieldValues + ?Sized>(
        &self,
        primary: &'p str,
        request: &F,
    ) -> (Option<Arc<Stored>>, Cow<'p, str>) {
        let found = self.find(primary, request, |key| self.store.get(key));
        (found.stored, found.key)
    }

    /// What [`Cache::lookup`] would find, with the `Vary` names the key was chosen by, read
    /// without marking anything used: the store's recency and admission counts stay as they
    /// were (`trafik explain`).
    pub fn peek<'p, F: FieldValues + ?Sized>(&self, primary: &'p str, request: &F) -> Found<'p> {
        self.find(primary, request, |key| self.store.peek(key))
    }

    fn find<'p, F: FieldValues + ?Sized>(
        &self,
        primary: &'p str,
        request: &F,
        get: impl Fn(&str) -> Option<Slot>,
    ) -> Found<'p> {
        match get(primary) {
            Some(Slot::Response(stored)) => Found {
                stored: Some(stored),
                key: Cow::Borrowed(primary),
                vary: Vec::new(),
            },
            Some(Slot::Variants(names)) => {
                let variant = key::variant(primary, &names, request);
                let stored = match get(variant.as_str()) {
                    Some(Slot::Response(stored)) => Some(stored),
                    _ => None,
                };
                Found {
                    stored,
                    key: Cow::Owned(variant),
                    vary: names.to_vec(),
                }
            }
            None => Found {
                stored: None,
                key: Cow::Borrowed(primary),
                vary: Vec::new(),
            },
        }
    }

    /// Stores a response to a request with these headers under `primary` (or the variant its
    /// `Vary` selects).
    pub fn insert<F: FieldValues + ?Sized>(&self, primary: &str, request: &F, stored: Arc<Stored>) {
        let names = vary_names(&stored.headers).unwrap_or_default();
        if names.is_empty() {
            self.store
                .insert(primary.to_owned(), Slot::Response(stored));
            return;
        }
        let variant = key::variant(primary, &names, request);
        self.store
            .insert(primary.to_owned(), Slot::Variants(names.into()));
        self.store.insert(variant, Slot::Response(stored));
    }

    /// Removes the responses whose path is `path` (any host, query and variant); returns how
    /// many.
    pub fn purge_path(&self, path: &str) -> usize {
        responses(self.store.remove_where(|k| key::path(k) == path))
    }

    /// Removes the responses stored under `primary` (one URI of one host) and its variants;
    /// returns how many. Other queries of the same path stay.
    pub fn invalidate(&self, primary: &str) -> usize {
        responses(self.store.remove_where(|k| key::of_primary(k, primary)))
    }

    /// Removes the responses whose path is under `prefix`; returns how many.
    pub fn purge_prefix(&self, prefix: &str) -> usize {
        responses(
            self.store
                .remove_where(|k| key::under(key::path(k), prefix)),
        )
    }

    pub fn entries(&self) -> usize {
        self.store.entries()
    }

    pub fn bytes(&self) -> u64 {
        self.store.bytes()
    }
}

fn responses(removed: Vec<Slot>) -> usize {
    removed
        .iter()
        .filter(|slot| matches!(slot, Slot::Response(_)))
        .count()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use bytes::Bytes;
    use http::{HeaderMap, HeaderValue, Method, StatusCode};

    use super::*;
    use crate::freshness::{Rules, storable};

    fn response(vary: Option<&str>, body: &'static str, cache: &Cache) -> Arc<Stored> {
        let mut headers = HeaderMap::new();
        headers.insert("cache-control", HeaderValue::from_static("max-age=60"));
        if let Some(vary) = vary {
            headers.insert("vary", HeaderValue::from_str(vary).unwrap());
        }
        let control = storable(&Method::GET, &HeaderMap::new(), StatusCode::OK, &headers).unwrap();
        let rules = Rules {
            default_ttl: Duration::ZERO,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
        };
        let now = SystemTime::now();
        Arc::new(
            Stored::new(
                StatusCode::OK,
                headers,
                Bytes::from_static(body.as_bytes()),
                &control,
                &rules,
                now,
                now,
                cache.next_version(),
            )
            .unwrap(),
        )
    }

    fn asking(language: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("accept-language", HeaderValue::from_str(language).unwrap());
        headers
    }

    #[test]
    fn vary_keeps_one_variant_per_request_value() {
        let cache = Cache::new(
            Policy::Lru,
            Limits {
                max_entries: 100,
                max_bytes: 1 << 20,
            },
        );
        let primary = key::primary("", "/takip/1");
        cache.insert(
            &primary,
            &asking("tr"),
            response(Some("Accept-Language"), "merhaba", &cache),
        );
        cache.insert(
            &primary,
            &asking("en"),
            response(Some("Accept-Language"), "hello", &cache),
        );
        let body = |language| {
            cache
                .lookup(&primary, &asking(language))
                .0
                .map(|s| s.body.clone())
        };
        assert_eq!(body("tr").as_deref(), Some(&b"merhaba"[..]));
        assert_eq!(body("en").as_deref(), Some(&b"hello"[..]));
        assert_eq!(body("de"), None);
        let other_query = key::primary("", "/takip/1?x=1");
        cache.insert(&other_query, &asking("tr"), response(None, "x", &cache));
        assert_eq!(cache.invalidate(&primary), 2, "both variants, not ?x=1");
        assert_eq!(cache.entries(), 1);
        cache.insert(
            &primary,
            &asking("tr"),
            response(Some("Accept-Language"), "merhaba", &cache),
        );
        cache.insert(
            &primary,
            &asking("en"),
            response(Some("Accept-Language"), "hello", &cache),
        );
        assert_eq!(
            cache.purge_path("/takip/1"),
            3,
            "two variants and ?x=1; the Vary record is not a response"
        );
        assert_eq!(cache.entries(), 0);
    }

    #[test]
    fn purge_by_prefix_and_versions_increase() {
        let cache = Cache::new(
            Policy::Admission,
            Limits {
                max_entries: 100,
                max_bytes: 1 << 20,
            },
        );
        for path in ["/takip/1", "/takip/2?x=1", "/varlik/a.css"] {
            let stored = response(None, "x", &cache);
            cache.insert(&key::primary("h", path), &HeaderMap::new(), stored);
        }
        assert_eq!(cache.next_version(), 4);
        assert_eq!(cache.purge_prefix("/takip/"), 2);
        assert_eq!(cache.entries(), 1);
        assert!(
            cache
                .lookup(&key::primary("h", "/varlik/a.css"), &HeaderMap::new())
                .0
                .is_some()
        );
    }
}
