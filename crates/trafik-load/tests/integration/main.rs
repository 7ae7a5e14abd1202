//! The load generator's tests in one test binary: each file a module, built and linked once.

mod client;
mod errors;
mod resumption;
mod stall;
