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
    free_ports::<1>()[0]
}

/// `N` distinct free ports: all bound at once, so none is handed out twice. They are taken
/// outside the kernel's ephemeral range where it leaves room, from a random place: the ports other tests bind to port
/// 0 for, and the source ports of every connection they open, come from that range, so one of
/// them could take a port handed out there before the test binds it (a CI run lost a fleet
/// instance's admin port that way).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let mut held: Vec<std::net::TcpListener> = Vec::with_capacity(N);
    let (low, high) = outside_ephemeral_range().unwrap_or((0, 0));
    let span = u32::from(high - low);
    let start = random_below(span.max(1));
    for offset in 0..span {
        if held.len() == N {
            break;
        }
        let port = low + ((start + offset) % span) as u16;
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.push(listener);
        }
    }
    // A machine with no room or nothing free there: the kernel's choice, as before.
    while held.len() < N {
        held.push(std::net::TcpListener::bind("127.0.0.1:0").expect("a free port on 127.0.0.1"));
    }
    std::array::from_fn(|i| held[i].local_addr().expect("a bound port").port())
}

/// Ports well clear of the well-known ones and outside the kernel's ephemeral range (Linux's
/// default: 32768 to 60999), below or above it: at least 2,000 of them, or none.
fn outside_ephemeral_range() -> Option<(u16, u16)> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .unwrap_or_else(|_| "32768 60999".to_owned());
    let mut bounds = range.split_whitespace().map(|n| n.parse::<u16>().ok());
    let (low, high) = (bounds.next()??, bounds.next()??);
    if low >= 12_000 {
        Some((10_000, low))
    } else if high <= 63_000 {
        Some((high + 1, 65_535))
    } else {
        None
    }
}

fn random_below(bound: u32) -> u32 {
    use std::hash::BuildHasher;
    let seed = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    (seed % u64::from(bound)) as u32
}

/// A backend on its own thread that answers every request on 127.0.0.1:`port` with the same
/// bytes and closes (say a `500`), for tests that drive `trafik` processes and need a backend
/// that fails on its own; stopped when dropped.
pub struct FixedAnswer {
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FixedAnswer {
    pub fn start(answer: &'static [u8]) -> FixedAnswer {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("a bound port").port();
        listener
            .set_nonblocking(true)
            .expect("a nonblocking listener");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                let Ok((mut stream, _)) = listener.accept() else {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                };
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                // Reads the head (up to its blank line), then answers.
                let mut head = Vec::new();
                let mut buffer = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer) {
                        Ok(0) | Err(_) => break,
                        Ok(read) => head.extend_from_slice(&buffer[..read]),
                    }
                }
                let _ = stream.write_all(answer);
            }
        });
        FixedAnswer {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FixedAnswer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
