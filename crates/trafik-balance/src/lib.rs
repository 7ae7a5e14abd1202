//! Backend selection for trafik.
//!
//! This crate holds every rule trafik uses to choose a backend, and nothing else: no sockets, no
//! clocks, no threads. The proxy and the simulator call the same code, so a model run with
//! `trafik sim` predicts what the proxy will do.
//!
//! The pieces:
//! - [`BackendSet`]: the backends of one pool with the live state a rule may read (health,
//!   draining, requests in flight). Its fields are atomics so that many proxy workers can share
//!   one set without locks.
//! - [`Selector`]: the one trait every rule implements. A rule never sees a socket.
//! - [`Health`]: the rise/fall state machine behind active health checks.

mod algorithm;
mod backend;
mod health;
mod round_robin;

pub use algorithm::{Algorithm, UnknownAlgorithm};
pub use backend::{BackendSet, BackendSpec, PickContext, Tried};
pub use health::{Health, HealthThresholds, Transition};
pub use round_robin::RoundRobin;

/// A backend-selection rule.
///
/// `pick` returns the index of the chosen backend in `backends`, or `None` when no backend is
/// available to this request (all down, draining or already tried). Implementations must skip a
/// backend for which [`BackendSet::is_available`] is false.
pub trait Selector: Send + Sync {
    /// Chooses a backend for one request (or one connection, at layer 4).
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize>;

    /// The rule's name as written in configuration files.
    fn name(&self) -> &'static str;
}
