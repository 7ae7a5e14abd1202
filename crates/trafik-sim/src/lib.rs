//! The course's models, run on trafik's own selection code.
//!
//! Every model here places requests with the `trafik-balance` selectors the proxy uses —
//! round robin, least connections, the hash ring, Maglev, bounded loads, power of two choices,
//! peak-EWMA — so what a model predicts is what the proxy does. Where the course defines its own
//! hash or random generator, [`course`] reproduces it so the tables match the text exactly.
//!
//! No model does I/O; each returns a report that serializes to JSON and renders as text.

pub mod cache;
pub mod change;
pub mod course;
pub mod distribution;
pub mod dns;
pub mod dns_change;
pub mod queue;
pub mod remap;
pub mod sticky;
pub mod subjects;
mod table;

use std::fmt;

/// A model's options do not describe a runnable model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimError(String);

impl SimError {
    pub fn new(message: impl Into<String>) -> Self {
        SimError(message.into())
    }
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SimError {}
