//! The API gateway's pure parts: path templates with captures, jq expressions over JSON bodies,
//! and how parts of an aggregated answer are put together. No I/O: the data plane
//! (`trafik-proxy`) fetches, this crate shapes.

pub mod jq;
pub mod parts;
pub mod template;
