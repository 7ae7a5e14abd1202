//! File descriptors as a budget: trafik raises its soft limit to the hard one at start, and
//! accepts no more client connections than leave room for each one's upstream connection and
//! for what it needs besides (listeners, health probes, the admin API, idle upstream
//! connections, files static sites keep open). At the budget the accept loops wait for a
//! connection to close; the kernel's backlog holds new clients meanwhile. Without it, running
//! out makes every `accept` and every health probe fail at once (HAProxy derives its `maxconn`
//! from the limit the same way).

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::Semaphore;

/// Descriptors set aside from the budget, besides one in eight of the limit.
const RESERVED: u64 = 64;

/// Whether an error means this process (or the system) has no descriptor left: a fault of
/// trafik's own, not of the peer it tried to reach.
pub fn ran_out(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// The number of client connections all listeners may hold together, after raising the soft
/// descriptor limit as far as the hard one allows.
pub fn client_connection_budget() -> Arc<Semaphore> {
    let limit = raise_limit().unwrap_or(1024);
    Arc::new(Semaphore::new(budget_for(limit)))
}

/// Half of what is left after the reserve and the kept files' share: a proxied client
/// connection holds two descriptors.
fn budget_for(limit: u64) -> usize {
    let spare = limit.saturating_sub(RESERVED + limit / 8 + kept_files_for(limit) as u64);
    (spare / 2).clamp(16, Semaphore::MAX_PERMITS as u64 / 2) as usize
}

/// The descriptors static sites may keep open, all together, for files they will serve again:
/// one in sixteen of the limit. A file past the share is opened for its answer and closed.
fn kept_files_for(limit: u64) -> usize {
    (limit / 16).try_into().unwrap_or(usize::MAX)
}

/// Descriptors kept files hold now.
static KEPT_FILES: AtomicUsize = AtomicUsize::new(0);

/// The kept files' share, of the limit in force when a file is first kept (after start raised
/// it).
static KEPT_FILES_ROOM: OnceLock<usize> = OnceLock::new();

/// A kept file's place in the descriptor budget, given back when dropped (with the file).
#[derive(Debug)]
pub struct KeptFile(());

impl KeptFile {
    /// A place for one more kept file, while the kept files' share has room.
    pub fn take() -> Option<KeptFile> {
        let room = *KEPT_FILES_ROOM.get_or_init(|| kept_files_for(soft_limit().unwrap_or(1024)));
        KEPT_FILES
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held < room).then_some(held + 1)
            })
            .ok()
            .map(|_| KeptFile(()))
    }
}

impl Drop for KeptFile {
    fn drop(&mut self) {
        KEPT_FILES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The soft and hard `RLIMIT_NOFILE` in force.
fn limits() -> Option<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0).then_some(limit)
}

fn soft_limit() -> Option<u64> {
    limits().map(|limit| limit.rlim_cur)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit in force.
fn raise_limit() -> Option<u64> {
    let limit = limits()?;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit only reads the struct passed.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Some(raised.rlim_cur);
        }
    }
    Some(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_leaves_room_for_upstream_connections_and_the_reserve() {
        // ulimit -n 256: 256 − 64 − 32 − 16 (kept files) = 144 spare, two per proxied
        // connection.
        assert_eq!(budget_for(256), 72);
        assert_eq!(kept_files_for(256), 16);
        assert_eq!(budget_for(1024), 384);
        assert_eq!(budget_for(10), 16, "a floor, so a tiny limit still serves");
        assert!(budget_for(u64::MAX) <= Semaphore::MAX_PERMITS);
    }

    #[test]
    fn kept_files_take_no_more_than_their_share_and_give_it_back_when_dropped() {
        let first = KeptFile::take().expect("room for one kept file");
        let room = *KEPT_FILES_ROOM.get().unwrap();
        assert!(room >= 16, "{room}");
        let mut kept: Vec<KeptFile> = std::iter::from_fn(KeptFile::take).take(room).collect();
        assert_eq!(kept.len() + 1, room, "the share, and no more");
        assert!(KeptFile::take().is_none());
        drop(first);
        kept.extend(KeptFile::take());
        assert_eq!(kept.len(), room, "a dropped one's place is taken again");
        drop(kept);
        assert_eq!(KEPT_FILES.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn only_the_descriptor_limits_count_as_running_out() {
        assert!(ran_out(&io::Error::from_raw_os_error(libc::EMFILE)));
        assert!(ran_out(&io::Error::from_raw_os_error(libc::ENFILE)));
        assert!(!ran_out(&io::Error::from_raw_os_error(libc::ECONNREFUSED)));
    }
}
