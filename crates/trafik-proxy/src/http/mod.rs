//! The HTTP/1.1 reverse proxy, by layer: [`route`] picks a pool, [`service`] picks a backend
//! and relays, [`upstream`] holds the connections to backends, [`headers`] rewrites what
//! crosses the boundary and [`body`] streams what comes back.

pub mod body;
pub mod headers;
pub mod key;
pub mod route;
pub mod service;
pub mod upstream;
