//! The own engine's plain GET keep-alive path allocates nothing per request once warm, and a
//! cache hit little: a counting global allocator (this binary's alone) counts allocations made
//! on every thread but the test's own (where the client and the backend run), while one client
//! sends requests on one kept-alive connection through a one-worker proxy.
#![allow(unsafe_code)] // a global allocator is an unsafe trait

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trafik_proxy::{CachePlan, Engine, Plan, TargetPlan};
use trafik_test_support::proxy::*;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set on the test's thread: its client and backend are not the proxy.
    static EXEMPT: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call is passed on to the system allocator unchanged; counting allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !EXEMPT.try_with(Cell::get).unwrap_or(true) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller upholds GlobalAlloc's contract, which System needs too.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds GlobalAlloc's contract, which System needs too.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !EXEMPT.try_with(Cell::get).unwrap_or(true) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller upholds GlobalAlloc's contract, which System needs too.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

/// A backend answering every request head on a connection with [`ANSWER`].
async fn backend() -> SocketAddr {
    raw_backend(move |mut stream| async move {
        let mut seen = Vec::with_capacity(4096);
        loop {
            match stream.read_buf(&mut seen).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                seen.drain(..end + 4);
                if stream.write_all(ANSWER).await.is_err() {
                    return;
                }
            }
        }
    })
    .await
}

/// Sends `count` GETs on `stream`, one at a time, reading each answer whole.
async fn requests(stream: &mut tokio::net::TcpStream, count: usize) {
    let request = b"GET /takip/TR-1 HTTP/1.1\r\nHost: kargo.test\r\nUser-Agent: wrk\r\n\r\n";
    let mut answer = Vec::with_capacity(4096);
    for _ in 0..count {
        stream.write_all(request).await.unwrap();
        answer.clear();
        while !(answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.ends_with(b"ok")) {
            assert_ne!(stream.read_buf(&mut answer).await.unwrap(), 0, "closed");
        }
        assert!(answer.starts_with(b"HTTP/1.1 200"));
    }
}

/// A one-worker proxy to `backend` on `engine`.
fn one_worker(engine: Engine, backend: SocketAddr) -> Plan {
    let mut plan = plan(&[backend]);
    plan.workers = 1;
    plan.client.engine = engine;
    plan
}

/// The same, with a cache in front of the backend that keeps every answer a minute.
fn cached(backend: SocketAddr) -> Plan {
    let mut plan = one_worker(Engine::Trafik, backend);
    let route = &mut routes(&mut plan)[0];
    let cache = CachePlan {
        name: "kenar".into(),
        max_entries: 100,
        max_bytes: 1 << 20,
        policy: trafik_cache::Policy::Lru,
        default_ttl: Duration::from_secs(60),
        stale_while_revalidate: Duration::ZERO,
        stale_if_error: Duration::ZERO,
        header: None,
        clock: trafik_cache::Clock::system(),
    };
    route.target = TargetPlan::Cached {
        cache: Arc::new(cache),
        target: Box::new(route.target.clone()),
    };
    plan
}

/// A one-worker proxy that answers from files under `root` (`/takip/TR-1` is `root/takip/TR-1`).
fn files(root: &std::path::Path, backend: SocketAddr) -> Plan {
    let mut plan = one_worker(Engine::Trafik, backend);
    routes(&mut plan)[0].target = TargetPlan::Static {
        root: root.to_owned(),
        index: None,
    };
    plan
}

/// Allocations counted while `count` requests pass a warm proxy started from `plan`.
async fn allocations(plan: Plan, count: usize) -> u64 {
    let engine = plan.client.engine;
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
    requests(&mut client, 200).await;
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    requests(&mut client, count).await;
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    eprintln!("{engine:?}: {allocations} allocations in {count} requests");
    drop(client);
    stop(running).await;
    allocations
}

/// One test, so no other test's proxy allocates meanwhile.
#[tokio::test]
async fn warm_plain_gets_and_files_allocate_nothing_per_request_and_cache_hits_little() {
    EXEMPT.with(|exempt| exempt.set(true));
    let backend = backend().await;
    const MEASURED: usize = 2_000;
    let own = allocations(one_worker(Engine::Trafik, backend), MEASURED).await;
    // Background work (the once-a-second sweeps) may allocate a little; a request must not.
    assert!(
        own < (MEASURED / 20) as u64,
        "{own} allocations in {MEASURED} requests"
    );
    // The same count on hyper's engine shows the count sees per-request allocations.
    let hyper = allocations(one_worker(Engine::Hyper, backend), MEASURED).await;
    assert!(
        hyper >= MEASURED as u64,
        "{hyper} allocations in {MEASURED} requests"
    );
    // A hit makes its key and its `Cache-Status` text; the stored fields are written as they
    // are, not copied into a header map per answer.
    let hits = allocations(cached(backend), MEASURED).await;
    assert!(
        hits <= 2 * MEASURED as u64 + (MEASURED / 20) as u64,
        "{hits} allocations in {MEASURED} cache hits"
    );
    // A kept file's 200 is written from the fields made when it was read.
    let root = std::env::temp_dir().join(format!("trafik-allocations-{}", std::process::id()));
    std::fs::create_dir_all(root.join("takip")).unwrap();
    std::fs::write(root.join("takip/TR-1"), "ok").unwrap();
    let served = allocations(files(&root, backend), MEASURED).await;
    std::fs::remove_dir_all(&root).unwrap();
    assert!(
        served < (MEASURED / 20) as u64,
        "{served} allocations in {MEASURED} answers from a file"
    );
}
