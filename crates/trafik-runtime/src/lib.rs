//! trafik's data plane below any protocol: what the HTTP proxy and the layer-4 relay share.
//!
//! The [`plan`] says what to run; [`pool`] holds each pool's backends and rules and the one
//! [`pool::Call`] every request or connection makes through them (selection itself is
//! `trafik_balance`'s); [`transport`] binds listening sockets and connects to backends, metered
//! by [`meter`] and wrapped in [`tls`] when a pool asks; [`connections`] sweeps a worker's
//! client connections; [`counters`] and [`metrics`] are written per worker and merged when read.
//! Nothing here names an HTTP engine or a listener kind.

pub mod admin_token;
pub use trafik_admission as admission;
pub mod connections;
#[allow(unsafe_code)] // raises the descriptor limit through libc
pub mod descriptors;
pub mod error;
#[allow(unsafe_code)] // adopts inherited listening sockets by descriptor number
pub mod handover;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // asks glibc's malloc for its statistics and to trim
pub mod memory;
pub mod meter;
pub mod metrics;
pub mod observed;
pub mod plan;
pub mod pool;
pub mod proxy_protocol;
pub mod queue;
pub mod tls;
pub mod transport;

// What the pool's rules read and keep, and the counters the metrics are made of, live in those
// folders (they use each other); here under the names the layers above use.
pub use metrics::counters;
pub use pool::{concurrency, key, outlier, sticky, view};

pub use error::{Blame, Cause, ProxyError};
