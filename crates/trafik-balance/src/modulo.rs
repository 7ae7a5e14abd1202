use crate::{BackendSet, Explained, PickContext, Selector};

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

    fn explain(&self, backends: &BackendSet, context: &PickContext) -> Explained {
        let Some(pick) = self.pick(backends, context) else {
            return Explained::none_available();
        };
        let key = context.key.unwrap_or(0);
        let home = (key % backends.len() as u64) as usize;
        let walked = if home == pick {
            String::new()
        } else {
            format!(", {} unavailable, walked on", backends.spec(home).id)
        };
        Explained::new(
            Some(pick),
            format!(
                "key {key:#018x} mod {} = {home} → {}{walked}",
                backends.len(),
                backends.spec(pick).id
            ),
        )
    }

    fn name(&self) -> &'static str {
        "modulo"
    }
}
