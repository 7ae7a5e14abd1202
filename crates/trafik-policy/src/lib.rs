//! Request policy without I/O, for the data plane's gateway stages: [`jwt`] verification with
//! pinned algorithms, [`gcra`] rate limiting (and the same rule as a Redis script), the
//! [`breaker`] that remembers a Redis outage, the gatekeeper's [`gate`] rules, the fixed
//! [`stage`] order with what each stage may read, [`cors`] origins and the content coding
//! [`negotiate`]d for compressed answers; a route's [`route_match`] conditions and address
//! rules, and its [`rewrite`]s of paths and redirects.
//! Every function that needs the time takes it as an argument.

pub mod breaker;
pub mod cors;
mod decimal;
pub mod gate;
pub mod gcra;
pub mod jwt;
pub mod negotiate;
pub mod rewrite;
pub mod route_match;
pub mod stage;

pub use jsonwebtoken::Algorithm;
