//! trafik's own HTTP/2 (RFC 9113): for now the client that speaks to `h2`, `h2c` and `auto`
//! pools' backends ([`client`]), over the frames of [`frame`]. Clients' HTTP/2 is still
//! served by hyper ([`crate::http::server`]).

pub mod client;
mod connection;
mod frame;
mod hpack;
