//! File descriptors as a budget: trafik raises its soft limit to the hard one at start, and
//! accepts no more client connections than leave room for each one's upstream connection and
//! for what it needs besides (listeners, health probes, the admin API, idle upstream
//! connections). At the budget the accept loops wait for a connection to close; the kernel's
//! backlog holds new clients meanwhile. Without it, running out makes every `accept` and every
//! health probe fail at once (HAProxy derives its `maxconn` from the limit the same way).

use std::io;
use std::sync::Arc;

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

/// Half of what is left after the reserve: a proxied client connection holds two descriptors.
fn budget_for(limit: u64) -> usize {
    let spare = limit.saturating_sub(RESERVED + limit / 8);
    (spare / 2).clamp(16, Semaphore::MAX_PERMITS as u64 / 2) as usize
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit in force.
fn raise_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    Some(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_leaves_room_for_upstream_connections_and_the_reserve() {
        // ulimit -n 256: 256 − 64 − 32 = 160 spare, two per proxied connection.
        assert_eq!(budget_for(256), 80);
        assert_eq!(budget_for(1024), 416);
        assert_eq!(budget_for(10), 16, "a floor, so a tiny limit still serves");
        assert!(budget_for(u64::MAX) <= Semaphore::MAX_PERMITS);
    }

    #[test]
    fn only_the_descriptor_limits_count_as_running_out() {
        assert!(ran_out(&io::Error::from_raw_os_error(libc::EMFILE)));
        assert!(ran_out(&io::Error::from_raw_os_error(libc::ENFILE)));
        assert!(!ran_out(&io::Error::from_raw_os_error(libc::ECONNREFUSED)));
    }
}
