use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// What configuration says about one backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendSpec {
    /// A stable identity (the address, as written), used by hash rules to place the backend.
    pub id: String,
    /// Relative weight; 1 unless configured. Never zero.
    pub weight: u32,
}

/// The live state of one backend that selection rules may read.
#[derive(Debug)]
struct Slot {
    spec: BackendSpec,
    up: AtomicBool,
    draining: AtomicBool,
    /// Taken out by passive health (outlier ejection) for a while.
    ejected: AtomicBool,
    in_flight: AtomicU32,
}

impl Slot {
    /// Whether any of the three reasons keeps new picks away; in panic mode the health verdict
    /// is not one of them.
    fn blocked(&self, panicking: bool) -> bool {
        (!panicking && !self.up.load(Ordering::Relaxed))
            || self.draining.load(Ordering::Relaxed)
            || self.ejected.load(Ordering::Relaxed)
    }
}

/// The backends of one pool.
///
/// Membership is fixed for the life of the set (a config reload builds a new one); health,
/// draining and in-flight counts change at run time through atomics.
#[derive(Debug)]
pub struct BackendSet {
    slots: Box<[Slot]>,
    /// Backends that are down, draining or ejected; zero lets rules skip the per-backend scan.
    unavailable: AtomicU32,
    /// Bumped whenever a backend becomes available or unavailable, so a rule can keep work
    /// derived from the available set until the set changes.
    generation: AtomicU64,
    /// Panic mode (Envoy's name): every backend fails its health check at once. That is more
    /// often the checks failing (a loaded prober, a wrong check path) than every backend dead,
    /// so the health verdict is set aside and picks spread over all of them, as Envoy does
    /// below its panic threshold; trafik's threshold is "no backend healthy".
    panicking: AtomicBool,
    /// Times the set went into panic mode.
    panics: AtomicU64,
    /// Serializes health and drain changes so `unavailable` never drifts; picks never take it.
    control: Mutex<()>,
}

impl BackendSet {
    /// Builds a set in which every backend starts up, not draining, with nothing in flight.
    pub fn new(specs: impl IntoIterator<Item = BackendSpec>) -> Self {
        let slots = specs
            .into_iter()
            .map(|spec| Slot {
                spec,
                up: AtomicBool::new(true),
                draining: AtomicBool::new(false),
                ejected: AtomicBool::new(false),
                in_flight: AtomicU32::new(0),
            })
            .collect();
        BackendSet {
            slots,
            unavailable: AtomicU32::new(0),
            generation: AtomicU64::new(0),
            panicking: AtomicBool::new(false),
            panics: AtomicU64::new(0),
            control: Mutex::new(()),
        }
    }

    /// Number of backends, available or not.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when the set has no backends at all.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The configured identity and weight of backend `index`.
    pub fn spec(&self, index: usize) -> &BackendSpec {
        &self.slots[index].spec
    }

    /// Whether health checks currently consider backend `index` up.
    pub fn is_up(&self, index: usize) -> bool {
        self.slots[index].up.load(Ordering::Relaxed)
    }

    /// Records the health verdict for backend `index`.
    pub fn set_up(&self, index: usize, up: bool) {
        self.set_flag(index, |slot| &slot.up, up);
    }

    /// Stores a new value in one of a slot's availability flags and keeps panic mode, the
    /// count of unavailable backends and the generation in step. Entering or leaving panic
    /// mode changes every backend's availability at once, so the count is taken again.
    fn set_flag(&self, index: usize, flag: impl Fn(&Slot) -> &AtomicBool, value: bool) {
        let _serialized = self
            .control
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if flag(&self.slots[index]).swap(value, Ordering::Relaxed) == value {
            return;
        }
        let every_one_down = self
            .slots
            .iter()
            .all(|slot| !slot.up.load(Ordering::Relaxed));
        if every_one_down && !self.panicking.swap(true, Ordering::Relaxed) {
            self.panics.fetch_add(1, Ordering::Relaxed);
        } else if !every_one_down {
            self.panicking.store(false, Ordering::Relaxed);
        }
        let panicking = self.panicking.load(Ordering::Relaxed);
        let unavailable = self
            .slots
            .iter()
            .filter(|slot| slot.blocked(panicking))
            .count();
        self.unavailable.store(
            u32::try_from(unavailable).unwrap_or(u32::MAX),
            Ordering::Relaxed,
        );
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Whether the pool is in panic mode now: every backend fails its health check, and
    /// picks ignore the checks.
    pub fn is_panicking(&self) -> bool {
        self.panicking.load(Ordering::Relaxed)
    }

    /// How many times the pool went into panic mode.
    pub fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }

    /// Whether passive health has taken backend `index` out for now.
    pub fn is_ejected(&self, index: usize) -> bool {
        self.slots[index].ejected.load(Ordering::Relaxed)
    }

    /// Takes backend `index` out of selection (or puts it back) for passive health.
    pub fn set_ejected(&self, index: usize, ejected: bool) {
        self.set_flag(index, |slot| &slot.ejected, ejected);
    }

    /// How many backends are ejected now.
    pub fn ejected_count(&self) -> usize {
        self.slots
            .iter()
            .filter(|slot| slot.ejected.load(Ordering::Relaxed))
            .count()
    }

    /// Changes whenever the set of available backends changes.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// True when every backend is up and none is draining.
    #[inline]
    pub fn all_available(&self) -> bool {
        self.unavailable.load(Ordering::Relaxed) == 0
    }

    /// Whether backend `index` is draining (takes no new picks).
    pub fn is_draining(&self, index: usize) -> bool {
        self.slots[index].draining.load(Ordering::Relaxed)
    }

    /// Starts or stops draining backend `index`.
    pub fn set_draining(&self, index: usize, draining: bool) {
        self.set_flag(index, |slot| &slot.draining, draining);
    }

    /// Whether a new request may be sent to backend `index`: up, not draining, not ejected,
    /// not yet tried.
    #[inline]
    pub fn is_available(&self, index: usize, context: &PickContext) -> bool {
        !self.slots[index].blocked(self.is_panicking()) && !context.tried.contains(index)
    }

    /// How many backends are available to the request; with [`Self::nth_available`], lets a
    /// rule draw among them without collecting them.
    pub fn available_count(&self, context: &PickContext) -> usize {
        if context.tried == Tried::default() && self.all_available() {
            return self.len();
        }
        (0..self.len())
            .filter(|&index| self.is_available(index, context))
            .count()
    }

    /// The index of the `rank`-th available backend (from 0, in index order).
    pub fn nth_available(&self, rank: usize, context: &PickContext) -> Option<usize> {
        if context.tried == Tried::default() && self.all_available() {
            return (rank < self.len()).then_some(rank);
        }
        (0..self.len())
            .filter(|&index| self.is_available(index, context))
            .nth(rank)
    }

    /// Requests currently in flight to backend `index`.
    pub fn in_flight(&self, index: usize) -> u32 {
        self.slots[index].in_flight.load(Ordering::Relaxed)
    }

    /// Marks one more request in flight to backend `index`; pair with [`Self::finish`].
    pub fn start(&self, index: usize) {
        self.slots[index].in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// Marks one request to backend `index` as finished.
    pub fn finish(&self, index: usize) {
        self.slots[index].in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The backends a request has already been sent to without success, so a retry goes elsewhere.
///
/// Up to 64 backends are tracked exactly in a bit mask; beyond that, indexes share bits, which
/// can only make a retry skip a backend it could have used, never repeat a failed one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tried(u64);

impl Tried {
    /// Adds backend `index`.
    pub fn insert(&mut self, index: usize) {
        self.0 |= 1 << (index % 64);
    }

    /// Whether no backend was tried yet (the request's first pick).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// Whether backend `index` was tried.
    #[inline]
    pub fn contains(&self, index: usize) -> bool {
        self.0 & (1 << (index % 64)) != 0
    }

    /// These backends without those of `other` (a request back from the pool's queue may try
    /// again the backends it only passed over for their request limit).
    pub fn without(self, other: Tried) -> Tried {
        Tried(self.0 & !other.0)
    }
}

/// What a rule may know about the request it places.
#[derive(Clone, Copy, Debug, Default)]
pub struct PickContext {
    /// The request's hash key, for hash-based rules; `None` when the pool has no key (they then
    /// spread requests evenly).
    pub key: Option<u64>,
    /// Backends already tried for this request.
    pub tried: Tried,
    /// The current time, for latency-aware rules.
    pub now: crate::Nanos,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_available_follows_health_and_draining_together() {
        let set = BackendSet::new((0..2).map(|i| BackendSpec {
            id: i.to_string(),
            weight: 1,
        }));
        assert!(set.all_available());
        set.set_up(0, false);
        set.set_draining(0, true);
        assert!(!set.all_available());
        set.set_up(0, true);
        assert!(!set.all_available(), "still draining");
        set.set_draining(0, false);
        assert!(set.all_available());
        set.set_draining(1, true);
        set.set_draining(1, true);
        set.set_draining(1, false);
        assert!(set.all_available(), "a repeated drain is counted once");
    }

    #[test]
    fn when_every_backend_fails_its_check_picks_ignore_the_checks_and_it_is_counted() {
        let set = BackendSet::new((0..3).map(|i| BackendSpec {
            id: i.to_string(),
            weight: 1,
        }));
        let context = PickContext::default();
        set.set_up(0, false);
        set.set_up(1, false);
        assert!(!set.is_panicking());
        assert_eq!(set.available_count(&context), 1);
        set.set_up(2, false);
        assert!(set.is_panicking());
        assert_eq!(set.available_count(&context), 3, "all of them, not none");
        assert!(set.all_available());
        set.set_draining(1, true);
        assert_eq!(set.available_count(&context), 2, "draining still counts");
        set.set_up(2, true);
        assert!(!set.is_panicking());
        assert_eq!(set.available_count(&context), 1);
        set.set_up(2, false);
        assert_eq!(set.panics(), 2);
    }

    #[test]
    fn an_ejected_backend_is_unavailable_whatever_its_health_says() {
        let set = BackendSet::new((0..3).map(|i| BackendSpec {
            id: format!("b{i}"),
            weight: 1,
        }));
        let before = set.generation();
        set.set_ejected(1, true);
        assert!(set.generation() > before, "rules rebuild what they derived");
        assert!(!set.is_available(1, &PickContext::default()));
        assert_eq!(set.available_count(&PickContext::default()), 2);
        assert_eq!(set.ejected_count(), 1);
        set.set_up(1, false);
        set.set_ejected(1, false);
        assert!(!set.is_available(1, &PickContext::default()), "still down");
        set.set_up(1, true);
        assert!(set.all_available());
        assert_eq!(set.ejected_count(), 0);
    }
}
