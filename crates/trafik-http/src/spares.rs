//! A worker's spares of one kind: what a connection or a request ended with (buffers, field
//! maps, answer futures' boxes), emptied by its owner and kept for the next one to take, up to a
//! bound, where the allocator would serve it slowly or from memory no longer in the cache.
//! Each worker is one thread with its own runtime: a thread-local `Spares` is the worker's.

use std::cell::RefCell;
use std::thread::LocalKey;

pub(crate) struct Spares<T> {
    kept: RefCell<Vec<T>>,
    most: usize,
}

impl<T> Spares<T> {
    /// Spares of which at most `most` are kept.
    pub(crate) const fn new(most: usize) -> Self {
        Spares {
            kept: RefCell::new(Vec::new()),
            most,
        }
    }

    /// A kept one, if any.
    pub(crate) fn take(&self) -> Option<T> {
        self.kept.borrow_mut().pop()
    }

    /// Keeps `spare` unless `most` are kept already; it is dropped then.
    pub(crate) fn keep(&self, spare: T) {
        let mut kept = self.kept.borrow_mut();
        if kept.len() < self.most {
            kept.push(spare);
        }
    }

    /// How many are kept now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.kept.borrow().len()
    }
}

/// Keeps `spare` in the thread's `spares`, unless the thread's own values are gone (a worker
/// ending): it is dropped then.
pub(crate) fn keep<T>(spares: &'static LocalKey<Spares<T>>, spare: T) {
    let _ = spares.try_with(|spares| spares.keep(spare));
}
