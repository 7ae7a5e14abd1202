//! trafik's authoritative DNS.
//!
//! - [`policy`]: the routing policies (geo, latency, weighted, failover, multivalue) as pure
//!   code, shared with `trafik sim dns` and `trafik sim failover`;
//! - [`zone`]: zones, static records and policy names, and the lookup of one question;
//! - [`master`]: RFC 1035 master files (zone files), with the line of each error;
//! - [`rate`]: response rate limiting;
//! - [`geoip`]: countries, continents and autonomous systems from a MaxMind database;
//! - [`transfer`]: AXFR and IXFR to secondaries, TSIG, the managed serial and NOTIFY;
//! - [`server`]: the UDP and TCP server (trafik's own loops on hickory's wire format and
//!   hickory-server's request and answer types), with EDNS(0), the client subnet
//!   option and truncation, and the counters behind the admin API's `dns` block; its UDP
//!   loops answer repeated questions from a packet cache (`packet_cache`).

pub mod dnssec;
pub mod geoip;
pub mod master;
mod packet_cache;
pub mod policy;
pub mod rate;
pub mod server;
pub mod transfer;
pub mod zone;

pub use hickory_proto::rr::Name as DomainName;
pub use hickory_proto::rr::RecordType;
pub use server::{DnsServer, Liveness};
pub use zone::{Authority, DnsPlan};
