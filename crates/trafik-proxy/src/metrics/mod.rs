//! The golden metrics ([`trafik_runtime::metrics`]) as the admin API shows them: [`export`]
//! writes Prometheus text, [`summary`] the `/status` figures.

pub mod export;
pub mod summary;

pub use trafik_runtime::metrics::*;
