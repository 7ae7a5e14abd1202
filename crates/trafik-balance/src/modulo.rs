use crate::{BackendSet, PickContext, Selector};

/// `key mod n`: the simplest key-to-backend binding, and the course's "yapışkan-kalan". Any
/// change of `n` moves most keys (3 → 4 backends moves about three quarters), which is why the
/// ring exists; it is here for comparison and for the models. An unavailable backend's keys go
/// to the next index.
#[derive(Debug, Default)]
pub struct Modulo;

impl Selector for Modulo {
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize> {
        let count = backends.len();
        if count == 0 {
            return None;
        }
        let home = (context.key.unwrap_or(0) % count as u64) as usize;
        (0..count)
            .map(|step| (home + step) % count)
            .find(|&i| backends.is_available(i, context))
    }

    fn name(&self) -> &'static str {
        "modulo"
    }
}
