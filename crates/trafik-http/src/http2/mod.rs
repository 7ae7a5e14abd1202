//! trafik's own HTTP/2 (RFC 9113), both ways: the client that speaks to `h2`, `h2c` and
//! `auto` pools' backends ([`client`]) and the server clients speak to on the own engine
//! ([`server`]), over one connection state and reader ([`connection`]), the same stream
//! handles ([`stream`]) and the frames of [`frame`].

pub mod client;
mod connection;
mod frame;
mod hpack;
pub mod server;
mod stream;

pub use frame::PREFACE;
pub use stream::Http2Body;
