use std::sync::atomic::{AtomicU64, Ordering};

use crate::hash::{mix64, virtual_node_point};
use crate::{BackendSet, Explained, PickContext, Selector};

/// Consistent hashing on a ring: every backend owns `virtual_nodes` points, and a key goes to
/// the first point at or after its hash, wrapping around. Adding or removing a backend moves
/// only the keys of the arcs it gains or loses (about 1/n of them).
///
/// An unavailable backend is skipped by walking on clockwise, so only its keys move, each to
/// the next backend on the ring — the same place they would go if it were removed.
#[derive(Debug)]
pub struct HashRing {
    /// (point, backend), sorted by point; equal points keep insertion order.
    points: Box<[(u64, u32)]>,
    /// Spreads requests that carry no key.
    keyless: AtomicU64,
}

impl HashRing {
    /// A ring with `virtual_nodes` points per backend, placed by trafik's stable hash of
    /// `"{id}#{n}"`.
    pub fn new(backends: &BackendSet, virtual_nodes: u32) -> Self {
        let points = (0..backends.len()).flat_map(|i| {
            let id = backends.spec(i).id.clone();
            (0..virtual_nodes.max(1)).map(move |v| (virtual_node_point(&id, v), i))
        });
        Self::from_points(points)
    }

    /// A ring from explicit points, for models that place backends with their own hash.
    pub fn from_points(points: impl IntoIterator<Item = (u64, usize)>) -> Self {
        let mut points: Vec<(u64, u32)> = points.into_iter().map(|(p, i)| (p, i as u32)).collect();
        points.sort_by_key(|&(point, _)| point); // stable
        HashRing {
            points: points.into_boxed_slice(),
            keyless: AtomicU64::new(0),
        }
    }

    /// Where the walk for `key` starts: the first point at or after it, wrapping to 0.
    #[inline]
    pub fn start(&self, key: u64) -> usize {
        let at = self.points.partition_point(|&(point, _)| point < key);
        if at == self.points.len() { 0 } else { at }
    }

    /// Backends in ring order from `key`'s position, one entry per point (repeats included).
    pub fn walk(&self, key: u64) -> impl Iterator<Item = usize> + '_ {
        let start = self.start(key);
        let (after, before) = self.points.split_at(start);
        before
            .iter()
            .chain(after)
            .map(|&(_, backend)| backend as usize)
    }

    /// The backend owning `key` when all are available.
    pub fn owner(&self, key: u64) -> Option<usize> {
        self.walk(key).next()
    }

    pub(crate) fn key_or_spread(&self, context: &PickContext) -> u64 {
        context
            .key
            .unwrap_or_else(|| mix64(self.keyless.fetch_add(1, Ordering::Relaxed)))
    }

    /// The key [`Self::key_or_spread`] gives next, without taking it.
    pub(crate) fn next_key(&self, context: &PickContext) -> u64 {
        context
            .key
            .unwrap_or_else(|| mix64(self.keyless.load(Ordering::Relaxed)))
    }

    /// The first available backend on the walk from `key`.
    fn owner_available(
        &self,
        key: u64,
        backends: &BackendSet,
        context: &PickContext,
    ) -> Option<usize> {
        self.walk(key)
            .take(self.points.len())
            .find(|&i| backends.is_available(i, context))
    }

    /// The reason for a pick on the walk from `key`: the point it starts at, its owner, and
    /// where the walk ended when the owner could not take the request.
    pub(crate) fn tell(
        &self,
        key: u64,
        pick: usize,
        backends: &BackendSet,
        context: &PickContext,
    ) -> String {
        let at = self.start(key);
        let (point, owner) = self
            .points
            .get(at)
            .map_or((0, pick), |&(p, b)| (p, b as usize));
        let keyed = if context.key.is_some() {
            "key"
        } else {
            "keyless request, spread as key"
        };
        let mut reason = format!(
            "{keyed} {key:#018x} → ring point {point:#018x} owned by {}",
            backends.spec(owner).id
        );
        if owner != pick {
            reason.push_str(&format!(
                ", which cannot take it; walked on clockwise to {}",
                backends.spec(pick).id
            ));
        }
        reason
    }
}

impl Selector for HashRing {
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        self.owner_available(self.key_or_spread(context), backends, context)
    }

    fn explain(&self, backends: &BackendSet, context: &PickContext) -> Explained {
        let key = self.next_key(context);
        match self.owner_available(key, backends, context) {
            Some(pick) => Explained::new(Some(pick), self.tell(key, pick, backends, context)),
            None => Explained::none_available(),
        }
    }

    fn name(&self) -> &'static str {
        "consistent-hash"
    }
}
