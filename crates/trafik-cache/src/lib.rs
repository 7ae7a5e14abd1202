//! trafik's HTTP cache logic, shared by the edge cache in the data plane and by the course's
//! models in `trafik-sim`: what may be stored and for how long (RFC 9111, with RFC 5861's stale
//! extensions), the cache key, and a bounded store. No I/O; the time is always passed in.

pub mod cache;
pub mod clock;
pub mod control;
pub mod fields;
pub mod freshness;
pub mod key;
pub mod store;

pub use cache::{Cache, Found};
pub use clock::Clock;
pub use control::CacheControl;
pub use fields::FieldValues;
pub use freshness::{NotStored, Rules, Stored, Use, storable};
pub use store::{Limits, Policy, Store, Weigh};
