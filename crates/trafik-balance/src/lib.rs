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
//! - [`Selector`]: the one trait every rule implements; [`Algorithm`] names them for
//!   configuration and builds them.
//! - [`Health`]: the rise/fall state machine behind active health checks; [`Outlier`]: passive
//!   health, which ejects a backend for a while on what its requests came to.
//! - [`hash`]: the stable key hash; [`CapacityShare`]: the static proportional split;
//!   [`WeightedSplit`]: a route's requests across pools by weight (canaries).
//!
//! Time is never read here: a rule that needs it (peak-EWMA) is given `now` by its caller.

mod adaptive_limit;
mod algorithm;
mod backend;
mod bounded_load;
mod capacity_share;
mod explain;
pub mod failover;
pub mod hash;
mod health;
mod least_connections;
mod maglev;
mod modulo;
mod outlier;
mod peak_ewma;
mod power_of_two;
pub mod random;
mod random_choice;
mod retry_budget;
mod ring;
mod round_robin;
mod split;
mod weighted_round_robin;

#[cfg(test)]
mod conformance;

use std::time::Duration;

pub use adaptive_limit::{AdaptiveLimit, ConcurrencyRules};
pub use algorithm::{Algorithm, SelectorOptions, UnknownAlgorithm};
pub use backend::{BackendSet, BackendSpec, PickContext, Tried};
pub use bounded_load::BoundedLoadRing;
pub use capacity_share::CapacityShare;
pub use explain::Explained;
pub use health::{Health, HealthThresholds, Transition};
pub use least_connections::LeastConnections;
pub use maglev::{DEFAULT_TABLE_SIZE, Maglev};
pub use modulo::Modulo;
pub use outlier::{EjectionReason, Outcome, Outlier, OutlierRules, max_ejected, slow_start_share};
pub use peak_ewma::PeakEwma;
pub use power_of_two::PowerOfTwoChoices;
pub use random_choice::WeightedRandom;
pub use retry_budget::{BudgetStanding, RETRY_WINDOW_SECONDS, RetryBudget};
pub use ring::HashRing;
pub use round_robin::RoundRobin;
pub use split::WeightedSplit;
pub use weighted_round_robin::SmoothWeightedRoundRobin;

/// A point in time in nanoseconds from an epoch the caller chooses (the proxy's start, or a
/// model's round 0).
pub type Nanos = u64;

/// A backend-selection rule.
///
/// `pick` returns the index of the chosen backend in `backends`, or `None` when no backend is
/// available to this request (all down, draining or already tried). Implementations must skip a
/// backend for which [`BackendSet::is_available`] is false.
pub trait Selector: Send + Sync {
    /// Chooses a backend for one request (or one connection, at layer 4).
    fn pick(&self, backends: &BackendSet, context: &PickContext) -> Option<usize>;

    /// What [`Selector::pick`] would answer now for `context`, with the rule's reason, leaving
    /// the rule's state as it is: `explain` then `pick` give the same backend while no other
    /// pick comes between them.
    fn explain(&self, backends: &BackendSet, context: &PickContext) -> Explained;

    /// Learns how long backend `index` took to answer, at time `now`. Only latency-aware rules
    /// use it.
    fn observe(&self, _index: usize, _latency: Duration, _now: Nanos) {}

    /// The rule's name as written in configuration files.
    fn name(&self) -> &'static str;
}
