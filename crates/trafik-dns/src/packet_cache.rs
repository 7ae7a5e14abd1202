//! The packet cache: UDP answers already encoded, kept by everything they depend on — the
//! question's bytes after the id (the name lowercased, so case does not matter; the flags, the
//! EDNS buffer size and client subnet option as sent), the live region set, and the client
//! group of the source address — so a repeated question skips parsing, lookup and encoding:
//! the stored bytes go out with the query's id and its name's case.
//!
//! One cache per UDP socket (each on its own thread), so no lock; it empties when the
//! configuration is replaced (a reload) and a health change reaches other keys. Answers that
//! change from one query to the next (weighted policies) are never stored.

use std::collections::HashMap;
use std::sync::Arc;

use crate::policy::Live;
use crate::zone::{Authority, Tally};

/// Entries one cache holds before it starts afresh: memory stays bounded whatever the mix.
const MAX_ENTRIES: usize = 8192;

/// A stored answer.
struct Entry {
    response: Vec<u8>,
    /// Where the question's name ends in the response (and the query): bytes 12 to here are
    /// the name as asked.
    name_end: usize,
    tally: Tally,
    refused: bool,
}

/// What an answer built for a query needs to be stored.
pub struct Reusable {
    /// The live regions the answer was built with.
    pub live: Live,
    pub tally: Tally,
    /// The answer was REFUSED (counted by the server).
    pub refused: bool,
}

#[derive(Default)]
pub struct PacketCache {
    entries: HashMap<Box<[u8]>, Entry>,
    /// The configuration the entries were built from.
    authority: Option<Arc<Authority>>,
    key: Vec<u8>,
}

impl PacketCache {
    /// Empties the cache when `authority` is not the one its entries came from.
    pub fn follow(&mut self, authority: &Arc<Authority>) {
        if !self
            .authority
            .as_ref()
            .is_some_and(|a| Arc::ptr_eq(a, authority))
        {
            self.entries.clear();
            self.authority = Some(authority.clone());
        }
    }

    /// Writes the answer stored for `query` into `out`, with the query's id and name, and moves
    /// its counters; false when there is none (or the query cannot be a key). The second value
    /// says whether the answer was a REFUSED.
    pub fn answer(
        &mut self,
        query: &[u8],
        live: Live,
        group: Option<usize>,
        out: &mut Vec<u8>,
    ) -> Option<bool> {
        let name_end = self.make_key(query, live, group)?;
        let entry = self.entries.get(self.key.as_slice())?;
        if entry.name_end != name_end {
            return None;
        }
        entry.tally.replay();
        out.clear();
        out.extend_from_slice(&entry.response);
        out[..2].copy_from_slice(&query[..2]);
        out[12..name_end].copy_from_slice(&query[12..name_end]);
        Some(entry.refused)
    }

    /// Stores `response`, built for `query` as `reusable` says.
    pub fn store(
        &mut self,
        query: &[u8],
        group: Option<usize>,
        response: &[u8],
        reusable: Reusable,
    ) {
        let Some(name_end) = self.make_key(query, reusable.live, group) else {
            return;
        };
        // The answer must echo the question at the same place for the name to be patched.
        let echoed = response.len() >= name_end
            && response[12..name_end].eq_ignore_ascii_case(&query[12..name_end]);
        if !echoed {
            return;
        }
        if self.entries.len() >= MAX_ENTRIES {
            self.entries.clear();
        }
        self.entries.insert(
            self.key.as_slice().into(),
            Entry {
                response: response.to_vec(),
                name_end,
                tally: reusable.tally,
                refused: reusable.refused,
            },
        );
    }

    /// Puts the key of `query` in `self.key`: its bytes after the id with the question's name
    /// lowercased, then the live set and the group. The end of the name, or `None` for a query
    /// that is not one plain question (a compressed or cut name).
    fn make_key(&mut self, query: &[u8], live: Live, group: Option<usize>) -> Option<usize> {
        // One question, nothing in the answer and authority sections.
        if query.len() < 12 || query[4..8] != [0, 1, 0, 0] || query[8..10] != [0, 0] {
            return None;
        }
        let mut at = 12;
        loop {
            let length = usize::from(*query.get(at)?);
            if length == 0 {
                at += 1;
                break;
            }
            if length > 63 {
                return None;
            }
            at += 1 + length;
        }
        if at + 4 > query.len() {
            return None;
        }
        self.key.clear();
        self.key.extend_from_slice(&query[2..]);
        self.key[10..at - 2].make_ascii_lowercase();
        self.key.extend_from_slice(&live.bits().to_le_bytes());
        let group = group.map_or(u64::MAX, |g| g as u64);
        self.key.extend_from_slice(&group.to_le_bytes());
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `name` (labels as written) with id `id`.
    fn query(id: u16, name: &str) -> Vec<u8> {
        let mut packet = id.to_be_bytes().to_vec();
        packet.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
        for label in name.split('.') {
            packet.push(label.len() as u8);
            packet.extend_from_slice(label.as_bytes());
        }
        packet.extend_from_slice(&[0, 0, 1, 0, 1]);
        packet
    }

    fn reusable(live: Live) -> Reusable {
        Reusable {
            live,
            tally: Tally::default(),
            refused: false,
        }
    }

    #[test]
    fn a_stored_answer_comes_back_with_the_query_s_id_and_case() {
        let mut cache = PacketCache::default();
        let asked = query(1, "www.kargo.test");
        // An "answer": the query with QR set and one byte of data.
        let mut response = asked.clone();
        response[2] |= 0x80;
        response.push(42);
        let live = Live::all(2);
        cache.store(&asked, None, &response, reusable(live));
        let mut out = Vec::new();
        let again = query(0xbeef, "WWW.Kargo.test");
        assert_eq!(cache.answer(&again, live, None, &mut out), Some(false));
        assert_eq!(&out[..2], &[0xbe, 0xef]);
        assert_eq!(&out[12..again.len()], &again[12..]);
        assert_eq!(out.last(), Some(&42));
        // Another live set, another group, another name: not this answer.
        assert!(
            cache
                .answer(&again, live.with(0, false), None, &mut out)
                .is_none()
        );
        assert!(cache.answer(&again, live, Some(0), &mut out).is_none());
        assert!(
            cache
                .answer(&query(2, "api.kargo.test"), live, None, &mut out)
                .is_none()
        );
    }

    #[test]
    fn odd_queries_are_never_keys() {
        let mut cache = PacketCache::default();
        let live = Live::all(1);
        let good = query(1, "www.kargo.test");
        let mut compressed = good[..12].to_vec();
        compressed.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        let mut two = good.clone();
        two[5] = 2;
        for odd in [
            &good[..11],
            &good[..good.len() - 3],
            &compressed[..],
            &two[..],
        ] {
            assert!(cache.make_key(odd, live, None).is_none(), "{odd:?}");
        }
    }
}
