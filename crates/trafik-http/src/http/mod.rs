//! The HTTP/1.1 reverse proxy, by layer: [`server`] runs a client connection, [`path`] and
//! [`route`] choose a route, [`filter`] runs its pipeline, [`target`] picks a backend and
//! relays, [`upstream`] holds the connections to backends, [`headers`] rewrites what crosses
//! the boundary, [`body`] carries what flows each way and [`upgrade`] splices the two
//! connections of a protocol switch (WebSocket).

pub mod body;
pub mod cache;
pub mod compress;
pub mod conditional;
pub mod cors;
pub mod field_maps;
pub mod files;
pub mod filter;
pub mod gateway;
pub mod grpc;
pub mod h3;
pub mod headers;
pub mod mirror;
pub mod path;
pub mod policy;
pub mod retry;
pub mod route;
pub mod routing;
pub mod server;
pub mod service;
pub mod target;
pub mod trace;
pub mod upgrade;
pub mod upstream;
pub mod validate;
