//! A worker's spare field maps. A request's `HeaderMap`, sized for a small request and the five
//! forwarding fields, holds 12 entries of 104 bytes: more than glibc's allocator serves from its
//! per-thread cache, so each one was taken on its slow path (which also merges every small free
//! chunk first) and given back the same way, twice a request with its answer's. A map given back
//! here is emptied and kept for the next head the worker decodes.

use http::HeaderMap;

use crate::spares::{self, Spares};

/// The fields a map has room for: a small request's and the five forwarding fields the pipeline
/// adds, without growing the map on the way.
pub const FIELDS: usize = 12;

/// Maps a worker keeps: as many heads as end together, up to this (about 330 KiB). A request
/// holds two until it ends (its own and its answer's), and answers end in bursts: with 64 kept,
/// half of the maps under h2load's 160 streams a worker were still taken new.
const KEPT: usize = 256;

thread_local! {
    static SPARES: Spares<HeaderMap> = const { Spares::new(KEPT) };
}

/// An empty map with room for [`FIELDS`] fields: a spare one, or a new one.
pub fn take() -> HeaderMap {
    SPARES
        .with(Spares::take)
        .unwrap_or_else(|| HeaderMap::with_capacity(FIELDS))
}

/// Keeps `map` for the next head, emptied, unless it grew past [`FIELDS`] names or values (a
/// large head's room, repeated values' among it, is not held for small ones) or enough are
/// kept.
pub fn give_back(mut map: HeaderMap) {
    if map.capacity() != FIELDS || map.len() > FIELDS {
        return;
    }
    map.clear();
    spares::keep(&SPARES, map);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_given_back_comes_back_empty_with_its_room() {
        let mut map = take();
        map.insert(http::header::HOST, "kargo.example".parse().unwrap());
        let room = map.capacity();
        assert_eq!(room, FIELDS);
        give_back(map);
        let again = take();
        assert!(again.is_empty());
        assert_eq!(again.capacity(), FIELDS);
    }

    #[test]
    fn a_map_that_held_many_values_is_not_kept() {
        let mut map = take();
        for _ in 0..=FIELDS {
            map.append(http::header::COOKIE, "kirinti=1".parse().unwrap());
        }
        assert_eq!(map.capacity(), FIELDS, "one name");
        give_back(map);
        assert_eq!(SPARES.with(Spares::len), 0);
    }

    #[test]
    fn a_map_that_grew_is_not_kept() {
        let mut map = take();
        for index in 0..=FIELDS {
            map.insert(
                http::HeaderName::from_bytes(format!("x-field-{index}").as_bytes()).unwrap(),
                "1".parse().unwrap(),
            );
        }
        assert!(map.capacity() > FIELDS);
        give_back(map);
        assert_eq!(SPARES.with(Spares::len), 0);
    }
}
