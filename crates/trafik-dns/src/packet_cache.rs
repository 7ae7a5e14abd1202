//! The packet cache: UDP answers already encoded, kept by everything they depend on — the
//! question's bytes after the id (the name lowercased, so case does not matter; the flags, the
//! EDNS buffer size and client subnet option as sent), the live region set, and the client
//! group of the source address — so a repeated question skips parsing, lookup and encoding:
//! the stored bytes go out with the query's id and its name's case.
//!
//! One cache per UDP socket (each on its own thread), so no lock; it empties when the
//! configuration is replaced (a reload) and a health change reaches other keys. A weighted
//! name's answer changes from one query to the next (the pattern's next slot, a draw, the
//! client's subnet), so its entry keeps one answer per decision: each query draws again, as
//! without the cache, and gets the answer stored for what it drew (built then, the first time).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::policy::{Client, Decision, Live};
use crate::zone::{Authority, PolicyName, Tally};

/// Entries one cache holds before it starts afresh: memory stays bounded whatever the mix.
const MAX_ENTRIES: usize = 8192;

/// How long entries live at most: a signed answer carries RRSIGs the signer remakes daily
/// (and which expire in a week), so a cache that never fills must not serve them for longer.
const MAX_AGE: Duration = Duration::from_secs(crate::dnssec::REFRESH);

/// The most answers one weighted name keeps per key (one per region it may pick, at most).
const MAX_VARIANTS: usize = 64;

/// What is stored for one key.
struct Entry {
    /// Where the question's name ends in the response (and the query): bytes 12 to here are
    /// the name as asked.
    name_end: usize,
    stored: Stored,
}

enum Stored {
    /// The same answer every time.
    Fixed(Answer),
    /// A weighted name's answers by decision.
    Drawn {
        name: Arc<PolicyName>,
        /// The client from the query's client subnet option; the source address when absent.
        client: Option<Client>,
        variants: Vec<(Decision, Answer)>,
    },
}

struct Answer {
    response: Vec<u8>,
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
    /// The weighted name and decision the answer came from, with the client subnet's client.
    pub drawn: Option<(Arc<PolicyName>, Decision, Option<Client>)>,
}

/// What the cache has for a query.
pub enum Found {
    /// The answer is written out; whether it was a REFUSED.
    Hit { refused: bool },
    /// Nothing: build it.
    Miss,
    /// A weighted name drew this decision, which has no answer yet: build it with this
    /// decision (not a second draw).
    Drawn(Decision),
}

#[derive(Default)]
pub struct PacketCache {
    entries: HashMap<Box<[u8]>, Entry>,
    /// The configuration the entries were built from.
    authority: Option<Arc<Authority>>,
    key: Vec<u8>,
    /// When the entries started, for `MAX_AGE`.
    since: Option<Instant>,
}

impl PacketCache {
    /// Empties the cache when `authority` is not the one its entries came from, or when its
    /// entries are `MAX_AGE` old at `now`.
    pub fn follow(&mut self, authority: &Arc<Authority>, now: Instant) {
        self.age(now);
        if !self
            .authority
            .as_ref()
            .is_some_and(|a| Arc::ptr_eq(a, authority))
        {
            self.entries.clear();
            self.authority = Some(authority.clone());
        }
    }

    fn age(&mut self, now: Instant) {
        match self.since {
            Some(since) if now.saturating_duration_since(since) < MAX_AGE => {}
            _ => {
                self.entries.clear();
                self.since = Some(now);
            }
        }
    }

    /// Writes the answer stored for `query` into `out`, with the query's id and name, and moves
    /// its counters. For a weighted name, `draw` decides for this query (the name's policy, and
    /// the client from the subnet option if the query had one).
    pub fn answer(
        &mut self,
        query: &[u8],
        live: Live,
        group: Option<usize>,
        draw: impl FnOnce(&PolicyName, Option<Client>) -> Decision,
        out: &mut Vec<u8>,
    ) -> Found {
        let Some(name_end) = self.make_key(query, live, group) else {
            return Found::Miss;
        };
        let Some(entry) = self.entries.get(self.key.as_slice()) else {
            return Found::Miss;
        };
        if entry.name_end != name_end {
            return Found::Miss;
        }
        let answer = match &entry.stored {
            Stored::Fixed(answer) => answer,
            Stored::Drawn {
                name,
                client,
                variants,
            } => {
                let decision = draw(name, *client);
                match variants.iter().find(|(drawn, _)| *drawn == decision) {
                    Some((_, answer)) => answer,
                    None => return Found::Drawn(decision),
                }
            }
        };
        answer.tally.replay();
        out.clear();
        out.extend_from_slice(&answer.response);
        out[..2].copy_from_slice(&query[..2]);
        out[12..name_end].copy_from_slice(&query[12..name_end]);
        Found::Hit {
            refused: answer.refused,
        }
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
        let answer = Answer {
            response: response.to_vec(),
            tally: reusable.tally,
            refused: reusable.refused,
        };
        let stored = match reusable.drawn {
            None => Stored::Fixed(answer),
            Some((name, decision, client)) => {
                if let Some(Entry {
                    stored:
                        Stored::Drawn {
                            name: had,
                            variants,
                            ..
                        },
                    ..
                }) = self.entries.get_mut(self.key.as_slice())
                    && Arc::ptr_eq(had, &name)
                {
                    if variants.len() < MAX_VARIANTS {
                        variants.push((decision, answer));
                    }
                    return;
                }
                Stored::Drawn {
                    name,
                    client,
                    variants: vec![(decision, answer)],
                }
            }
        };
        if self.entries.len() >= MAX_ENTRIES {
            self.entries.clear();
        }
        self.entries
            .insert(self.key.as_slice().into(), Entry { name_end, stored });
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
            drawn: None,
        }
    }

    fn no_draw(_: &PolicyName, _: Option<Client>) -> Decision {
        unreachable!("no weighted name here")
    }

    fn hit(found: Found) -> bool {
        matches!(found, Found::Hit { refused: false })
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
        assert!(hit(cache.answer(&again, live, None, no_draw, &mut out)));
        assert_eq!(&out[..2], &[0xbe, 0xef]);
        assert_eq!(&out[12..again.len()], &again[12..]);
        assert_eq!(out.last(), Some(&42));
        // Another live set, another group, another name: not this answer.
        let other_live = live.with(0, false);
        assert!(!hit(
            cache.answer(&again, other_live, None, no_draw, &mut out)
        ));
        assert!(!hit(cache.answer(&again, live, Some(0), no_draw, &mut out)));
        let other_name = query(2, "api.kargo.test");
        assert!(!hit(cache.answer(
            &other_name,
            live,
            None,
            no_draw,
            &mut out
        )));
    }

    #[test]
    fn entries_are_dropped_a_day_after_they_started() {
        let mut cache = PacketCache::default();
        let start = Instant::now();
        cache.age(start);
        let asked = query(1, "www.kargo.test");
        let mut response = asked.clone();
        response[2] |= 0x80;
        let live = Live::all(1);
        cache.store(&asked, None, &response, reusable(live));
        let mut out = Vec::new();
        cache.age(start + MAX_AGE / 2);
        assert!(hit(cache.answer(&asked, live, None, no_draw, &mut out)));
        cache.age(start + MAX_AGE);
        assert!(!hit(cache.answer(&asked, live, None, no_draw, &mut out)));
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
