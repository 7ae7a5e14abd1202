//! Connection caps of one listener, shared by every worker's accept loop: at most
//! `max_connections` open at once (the accept loop waits for one to close before serving
//! another, so the kernel's backlog holds the rest and nothing spins), and at most
//! `max_connections_per_client` from one client IP address (the one over it is closed at once,
//! as nginx's `limit_conn` does). QUIC connections (h3 listeners) have no backlog to wait in:
//! one over either cap is refused at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A listener's connection caps; 0 is no cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections at once over all workers; at the cap, accepting pauses until one closes.
    pub max_connections: u32,
    /// Open connections from one client IP address; one more is closed at once.
    pub max_connections_per_client: u32,
}

/// The live state of a listener's caps; carried across reloads that keep the listener and its
/// caps, so connections opened before a reload still count.
pub struct ConnectionLimit {
    /// The listener's name, for `/status` and `/metrics`.
    pub listener: String,
    pub limits: ConnectionLimits,
    slots: Option<Arc<Semaphore>>,
    by_client: Mutex<HashMap<IpAddr, u32>>,
    /// Connections closed at once because their client had `max_connections_per_client` open.
    pub refused_per_client: AtomicU64,
    /// Connections that found `max_connections` open and waited for one to close.
    pub waited: AtomicU64,
    /// QUIC connections refused at once because `max_connections` were open.
    pub refused_at_max: AtomicU64,
}

/// One admitted connection: its slot and its count for its client, given back on drop.
pub struct Admitted {
    _slot: Option<OwnedSemaphorePermit>,
    client: Option<(Arc<ConnectionLimit>, IpAddr)>,
}

impl ConnectionLimit {
    /// `None` when the listener has no cap.
    pub fn new(listener: &str, limits: ConnectionLimits) -> Option<Arc<Self>> {
        (limits.max_connections > 0 || limits.max_connections_per_client > 0).then(|| {
            Arc::new(ConnectionLimit {
                listener: listener.to_owned(),
                waited: AtomicU64::new(0),
                refused_at_max: AtomicU64::new(0),
                limits,
                slots: (limits.max_connections > 0)
                    .then(|| Arc::new(Semaphore::new(limits.max_connections as usize))),
                by_client: Mutex::new(HashMap::new()),
                refused_per_client: AtomicU64::new(0),
            })
        })
    }

    /// Admits a connection from `client`: `None` at once when that client is at its cap,
    /// otherwise when a slot is free (waiting for one to close at `max_connections`).
    pub async fn admit(self: &Arc<Self>, client: IpAddr) -> Option<Admitted> {
        // Made before waiting, so a stop while waiting gives the client's count back.
        let mut admitted = self.count_client(client)?;
        if let Some(slots) = &self.slots {
            let slot = match slots.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(_) => {
                    self.waited.fetch_add(1, Ordering::Relaxed);
                    slots.clone().acquire_owned().await.ok()?
                }
            };
            admitted._slot = Some(slot);
        }
        Some(admitted)
    }

    /// Admits a QUIC connection from `client` now or never: `None` when that client is at its
    /// cap or `max_connections` are open.
    pub fn admit_now(self: &Arc<Self>, client: IpAddr) -> Option<Admitted> {
        let mut admitted = self.count_client(client)?;
        if let Some(slots) = &self.slots {
            match slots.clone().try_acquire_owned() {
                Ok(slot) => admitted._slot = Some(slot),
                Err(_) => {
                    self.refused_at_max.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            }
        }
        Some(admitted)
    }

    /// Counts a connection of `client`, `None` (and counted as refused) at its cap.
    fn count_client(self: &Arc<Self>, client: IpAddr) -> Option<Admitted> {
        let counted = if self.limits.max_connections_per_client > 0 {
            let mut by_client = self.by_client.lock().unwrap_or_else(|e| e.into_inner());
            let open = by_client.entry(client).or_insert(0);
            if *open >= self.limits.max_connections_per_client {
                drop(by_client);
                self.refused_per_client.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            *open += 1;
            Some((self.clone(), client))
        } else {
            None
        };
        Some(Admitted {
            _slot: None,
            client: counted,
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let Some((limit, client)) = &self.client else {
            return;
        };
        let mut by_client = limit.by_client.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(open) = by_client.get_mut(client) {
            *open -= 1;
            if *open == 0 {
                by_client.remove(client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_client_at_its_cap_is_refused_until_one_of_its_connections_closes() {
        let limit = ConnectionLimit::new(
            "web",
            ConnectionLimits {
                max_connections: 0,
                max_connections_per_client: 2,
            },
        )
        .unwrap();
        let (one, other) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = limit.admit(one).await.unwrap();
        let _second = limit.admit(one).await.unwrap();
        assert!(limit.admit(one).await.is_none());
        assert!(limit.admit(other).await.is_some());
        drop(first);
        assert!(limit.admit(one).await.is_some());
        assert_eq!(limit.refused_per_client.load(Ordering::Relaxed), 1);
        assert!(ConnectionLimit::new("web", ConnectionLimits::default()).is_none());
    }

    #[test]
    fn a_quic_connection_over_the_listener_cap_is_refused_rather_than_kept_waiting() {
        let limit = ConnectionLimit::new(
            "h3",
            ConnectionLimits {
                max_connections: 1,
                max_connections_per_client: 0,
            },
        )
        .unwrap();
        let client = "10.0.0.1".parse().unwrap();
        let first = limit.admit_now(client).unwrap();
        assert!(limit.admit_now(client).is_none());
        assert_eq!(limit.refused_at_max.load(Ordering::Relaxed), 1);
        drop(first);
        assert!(limit.admit_now(client).is_some());
    }
}
