//! The proxy library's tests in one test binary: each file a module, built and linked once,
//! their tests interleaved on the harness's threads. Four stay binaries of their own: the
//! allocation count (its own global allocator), the descriptor limit (it lowers the whole
//! process's), and the two fuzzers `fuzz/run.sh` builds by name.

mod adaptive_concurrency;
mod algorithms;
mod balancer_role;
mod cache;
mod connection_caps;
mod engine_bodies;
mod faults;
mod files;
mod h2_backends;
mod h2_clients;
mod h2_frames;
mod h2_wire;
mod h3;
mod hop_chain;
mod hostile;
mod layer4;
mod metrics;
mod mtls;
mod passive_health;
mod passthrough;
mod pipeline;
mod proxying;
mod reload;
mod review_findings;
mod routing;
mod slowloris;
mod tls;
mod trace_context;
mod websocket;
