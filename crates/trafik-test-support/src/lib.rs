//! What trafik's test binaries share, as a dev-only crate: a free port ([`free_port`]), `trafik`
//! child processes killed by their id when a test fails ([`process`]), a network namespace of a
//! test's own, and the real services the tests talk to ([`services`]: Redis, etcd and BIND from
//! Debian's packages; [`webdriver`]: chromedriver driving headless chromium). Every service is
//! started on free ports and stopped by its process id when dropped. [`proxy`] serves the data
//! plane's in-process tests: plans, a client, replicas and stub backends on free ports.

pub mod process;
pub mod proxy;
pub mod services;
pub mod webdriver;

pub use process::{
    INSIDE_NAMESPACE, Proxy, Trafik, Upstream, exchange, get_json, get_text, json, load,
    load_errors, parse_head, reload, replica, run_in_own_network_namespace, trafik_binary,
};
pub use services::{Etcd, GrpcServer, Named, Redis, grpc_call, grpc_client};

/// A TCP port on 127.0.0.1 nobody listens on as of now, for a server a test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// `N` distinct free ports: all bound at once, so none is handed out twice.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<_> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port on 127.0.0.1"))
        .collect();
    std::array::from_fn(|i| held[i].local_addr().expect("a bound port").port())
}
