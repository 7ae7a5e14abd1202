//! trafik's HTTP, and the configuration in force that every listener kind is served from.
//!
//! [`h1`] is trafik's own HTTP/1 engine and [`http2`] its own HTTP/2 (server and client): they
//! read a request head, route it and run the same pipeline as [`http::server`] (hyper, for
//! `engine = "hyper"` and what the own engine defers) does: the route
//! table ([`http::route`]), the filters ([`http::filter`], [`http::policy`]) and the targets
//! ([`http::target`] for pools, [`http::cache`], [`http::files`], [`http::gateway`]). The
//! [`snapshot`] is the configuration in force, resolved from a `Plan` into runtime objects
//! (routes, pools, caches, connection caps); the layer-4 path reads it through
//! `trafik_l4::Layer4Snapshot`.

pub mod explain;
pub mod h1;
pub mod http;
pub mod http2;
pub mod replay;
mod resolve;
pub mod route_change;
pub mod route_fields;
pub mod snapshot;
mod spares;

// The layer below any protocol, under the names the modules above use.
pub use trafik_runtime::{
    admin_token, admission, concurrency, connections, counters, descriptors, error, key, meter,
    metrics, observed, outlier, plan, pool, queue, sticky, tls, transport, view,
};

pub use error::ProxyError;
