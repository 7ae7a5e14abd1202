//! The `trafik` binary's tests in one test binary: each file a module, built and linked once,
//! their tests interleaved on the harness's threads. (One binary per file built and linked
//! the world 28 times: the larger part of a cold `cargo test`.) The fuzz and HTTP/3 tests
//! stay binaries of their own, which `fuzz/run.sh` and `bench/h3.sh` build by name.

mod acme;
mod canary_push;
mod chain;
mod chaos;
mod cli;
mod dashboard;
mod dns;
mod edge;
mod edge_filters;
mod example_headers;
mod explain;
mod fleet;
mod gatekeeper;
mod gateway;
mod grpc;
mod layer4;
mod load;
mod load_agents;
mod load_scenario;
mod load_soak;
mod named_backends;
mod plan;
mod plan_dns_routes;
mod plan_replay;
mod reload;
mod static_files;
mod streaming;
mod tls;
mod upgrade;
