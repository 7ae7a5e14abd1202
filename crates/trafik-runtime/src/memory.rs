//! Gives the memory of a flood back to the system. glibc's malloc keeps what is freed inside
//! each thread's arena for reuse and returns only the free top of a heap, so after thousands of
//! connections close most of what they held stays resident (a 12 MiB trafik kept 74 MiB after
//! 5,000 idle connections, 1 GiB after stalled HTTP/2 streams: issue 23). `malloc_trim(0)`
//! releases the free pages inside every arena. The control thread calls it at most once a
//! second, when the memory resident but not allocated has grown by [`TRIM_AFTER`] since the last
//! trim and allocations are not growing: after a flood, not during one (a trim holds each
//! arena's lock while it gives pages back, up to a few hundred ms for a GiB), nor under a steady
//! load.
//!
//! Chosen over another allocator by `bench/memory.sh`: jemalloc purging in a background thread
//! still kept 2.5 times the quiet RSS after the HTTP/2 flood (metadata for the flood's extents),
//! and mimalloc started at 25 MiB instead of 14 and left the flood resident on idle workers
//! unless it purged at every free.

use std::os::unix::fs::FileExt;
use std::time::Duration;

use tokio::sync::watch;

/// Growth of resident but unallocated memory that is worth a trim.
const TRIM_AFTER: u64 = 2 * 1024 * 1024;

/// Trims glibc's arenas after a flood until `shutdown` turns true.
pub async fn give_back(mut shutdown: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Opened once: a flood may take every descriptor the process has.
    let statm = match std::fs::File::open("/proc/self/statm") {
        Ok(statm) => statm,
        Err(error) => {
            tracing::warn!(%error, "memory is not given back after floods");
            return;
        }
    };
    let page = page_size();
    let mut trims = Trims::default();
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stopping| *stopping) => return,
            _ = ticker.tick() => {}
        }
        let Some(resident) = resident_pages(&statm).map(|pages| pages * page) else {
            continue;
        };
        if trims.due(resident, allocated_bytes()) {
            let began = std::time::Instant::now();
            trim();
            let after = resident_pages(&statm).map_or(resident, |pages| pages * page);
            let allocated = allocated_bytes();
            tracing::debug!(
                returned_mib = resident.saturating_sub(after) >> 20,
                resident_mib = after >> 20,
                allocated_mib = allocated >> 20,
                took = ?began.elapsed(),
                "free memory given back"
            );
            trims.trimmed(after, allocated);
        }
    }
}

/// When to trim: once the surplus (resident bytes not allocated: free memory malloc keeps, plus
/// the binary and stacks, which hardly change) is [`TRIM_AFTER`] above its lowest since the
/// last trim, and no more is allocated than a second before.
#[derive(Default)]
struct Trims {
    lowest: Option<u64>,
    allocated: u64,
}

impl Trims {
    fn due(&mut self, resident: u64, allocated: u64) -> bool {
        let surplus = resident.saturating_sub(allocated);
        let lowest = self.lowest.map_or(surplus, |lowest| lowest.min(surplus));
        self.lowest = Some(lowest);
        let growing = allocated > self.allocated;
        self.allocated = allocated;
        surplus >= lowest + TRIM_AFTER && !growing
    }

    /// What a trim could not give back (pages shared with allocated memory) is the new floor,
    /// so that it is not trimmed for again.
    fn trimmed(&mut self, resident: u64, allocated: u64) {
        self.lowest = Some(resident.saturating_sub(allocated));
    }
}

/// The process's resident pages, read from `/proc/self/statm` without allocating.
fn resident_pages(statm: &std::fs::File) -> Option<u64> {
    let mut text = [0u8; 128];
    let read = statm.read_at(&mut text, 0).ok()?;
    std::str::from_utf8(&text[..read])
        .ok()?
        .split_ascii_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

/// Bytes malloc has handed out and not had back: in its arenas and mapped on their own.
fn allocated_bytes() -> u64 {
    // SAFETY: mallinfo2 only reads malloc's statistics (under its arenas' locks) into the
    // struct it returns.
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as u64
}

fn trim() {
    // SAFETY: malloc_trim releases free pages under the arenas' locks; nothing allocated moves.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn a_trim_is_due_once_freed_memory_stays_resident_and_not_again_for_what_it_kept() {
        let mut trims = Trims::default();
        // Quiet: 14 MiB resident, 4 allocated.
        assert!(!trims.due(14 * MIB, 4 * MIB));
        // A flood allocates as much as it makes resident: nothing to give back.
        assert!(!trims.due(700 * MIB, 690 * MIB));
        // Memory it freed and took again is not trimmed for while allocations grow.
        assert!(!trims.due(800 * MIB, 750 * MIB));
        // Its connections close: the memory is free but still resident.
        assert!(trims.due(800 * MIB, 5 * MIB));
        // The trim kept 3 MiB it could not give back; that alone never asks for another.
        trims.trimmed(16 * MIB, 3 * MIB);
        assert!(!trims.due(16 * MIB, 3 * MIB));
        assert!(!trims.due(16 * MIB, 3 * MIB));
        // Surplus that falls and grows again is measured from its lowest.
        assert!(!trims.due(11 * MIB, 3 * MIB));
        assert!(trims.due(13 * MIB, 3 * MIB));
    }

    #[test]
    fn the_resident_set_is_read_again_from_one_open_file() {
        let statm = std::fs::File::open("/proc/self/statm").unwrap();
        assert!(resident_pages(&statm).expect("statm") > 0);
        assert!(resident_pages(&statm).expect("statm again") > 0);
        assert!(allocated_bytes() > 0);
    }
}
