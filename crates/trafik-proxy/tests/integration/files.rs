//! Static routes live: files from a directory the test writes, on real loopback sockets; and
//! the course's lesson 4, one page load counted by the app process, proxied and split.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use trafik_proxy::{Plan, RoutePlan, Running, TargetPlan};
use trafik_test_support::proxy::*;

/// A fresh directory under the system's temporary folder.
fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trafik-files-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn static_route(prefix: &str, root: &Path, index: Option<&str>) -> RoutePlan {
    let mut route = route(prefix, "takip");
    route.target = TargetPlan::Static {
        root: root.to_owned(),
        index: index.map(str::to_owned),
    };
    route
}

/// A plan whose `/varlik` route serves `root`; everything else goes to the pool.
fn site(root: &Path, backends: &[SocketAddr]) -> Plan {
    let mut plan = plan(backends);
    routes(&mut plan).push(static_route("/varlik", root, Some("index.html")));
    plan
}

async fn send(address: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "kargo.test");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    Client::connect(address)
        .await
        .send(request.body(Full::default()).unwrap())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_come_with_validators_ranges_and_their_content_type() {
    let root = folder("serve");
    std::fs::write(root.join("bicem.css"), "body { color: #234 }\n").unwrap();
    std::fs::write(root.join("index.html"), "<h1>takip</h1>\n").unwrap();
    std::fs::create_dir(root.join("bos")).unwrap();
    let running = trafik_proxy::start(site(&root, &[])).unwrap();
    let address = web(&running);
    let css = send(address, "GET", "/varlik/bicem.css", &[]).await;
    assert_eq!(css.status, 200);
    assert_eq!(css.text(), "body { color: #234 }\n");
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
    assert_eq!(css.header("accept-ranges"), Some("bytes"));
    let etag = css.header("etag").unwrap().to_owned();
    let modified = css.header("last-modified").unwrap().to_owned();
    let again = send(
        address,
        "GET",
        "/varlik/bicem.css",
        &[("if-none-match", &etag)],
    )
    .await;
    assert_eq!((again.status, again.body.len()), (304, 0));
    let since = send(
        address,
        "GET",
        "/varlik/bicem.css",
        &[("if-modified-since", &modified)],
    )
    .await;
    assert_eq!(since.status, 304);
    let part = send(
        address,
        "GET",
        "/varlik/bicem.css",
        &[("range", "bytes=0-3")],
    )
    .await;
    assert_eq!(part.status, 206);
    assert_eq!(part.text(), "body");
    assert_eq!(part.header("content-range"), Some("bytes 0-3/21"));
    let tail = send(
        address,
        "GET",
        "/varlik/bicem.css",
        &[("range", "bytes=-2")],
    )
    .await;
    assert_eq!(tail.text(), "}\n");
    let outside = send(
        address,
        "GET",
        "/varlik/bicem.css",
        &[("range", "bytes=100-")],
    )
    .await;
    assert_eq!(outside.status, 416);
    assert_eq!(outside.header("content-range"), Some("bytes */21"));
    let stale_range = send(
        address,
        "GET",
        "/varlik/bicem.css",
        &[("range", "bytes=0-3"), ("if-range", "\"eski\"")],
    )
    .await;
    assert_eq!((stale_range.status, stale_range.body.len()), (200, 21));
    let head = send(address, "HEAD", "/varlik/bicem.css", &[]).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("21"));
    assert!(head.body.is_empty());
    let index = send(address, "GET", "/varlik/", &[]).await;
    assert_eq!(index.text(), "<h1>takip</h1>\n");
    assert_eq!(
        index.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(send(address, "GET", "/varlik/bos", &[]).await.status, 404);
    assert_eq!(
        send(address, "GET", "/varlik/yok.css", &[]).await.status,
        404
    );
    assert_eq!(
        send(address, "POST", "/varlik/bicem.css", &[]).await.status,
        405
    );
    // A file that changes is seen changed (kept copies are checked again after a second).
    std::fs::write(root.join("bicem.css"), "body { color: #432 }\n").unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let changed = send(
        address,
        "GET",
        "/varlik/bicem.css",
        &[("if-none-match", &etag)],
    )
    .await;
    assert_eq!(changed.status, 200);
    assert_eq!(changed.text(), "body { color: #432 }\n");
    let counters = status(&running).await["static"][0].clone();
    assert_eq!(counters["requests"], 13, "{counters}");
    assert_eq!(counters["not_modified"], 2);
    assert_eq!(
        handed_to_hyper(&running).await,
        0,
        "served by the own engine"
    );
    let web = &status(&running).await["listeners"][0];
    assert_eq!(web["through_pipeline"], 0, "served inline: {web}");
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_file_streams_whole_and_in_ranges() {
    let root = folder("large");
    let content: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("arsiv.bin"), &content).unwrap();
    let running = trafik_proxy::start(site(&root, &[])).unwrap();
    let whole = send(web(&running), "GET", "/varlik/arsiv.bin", &[]).await;
    assert_eq!(whole.status, 200);
    assert_eq!(
        whole.header("content-type"),
        Some("application/octet-stream")
    );
    assert!(whole.body == content, "the streamed body differs");
    let part = send(
        web(&running),
        "GET",
        "/varlik/arsiv.bin",
        &[("range", "bytes=1000000-1999999")],
    )
    .await;
    assert_eq!(part.status, 206);
    assert!(part.body[..] == content[1_000_000..2_000_000]);
    assert_eq!(status(&running).await["static"][0]["bytes"], 4_000_000);
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_that_leave_the_root_are_refused_and_never_read() {
    let base = folder("safety");
    let root = base.join("kok");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("acik.txt"), "acik").unwrap();
    std::fs::write(base.join("gizli.txt"), "gizli").unwrap();
    std::os::unix::fs::symlink(base.join("gizli.txt"), root.join("kacis.txt")).unwrap();
    std::os::unix::fs::symlink(&base, root.join("ust")).unwrap();
    std::os::unix::fs::symlink(root.join("acik.txt"), root.join("ic.txt")).unwrap();
    let running = trafik_proxy::start(site(&root, &[])).unwrap();
    let address = web(&running);
    assert_eq!(
        send(address, "GET", "/varlik/acik.txt", &[]).await.text(),
        "acik"
    );
    // A symlink that stays inside the root is followed.
    assert_eq!(
        send(address, "GET", "/varlik/ic.txt", &[]).await.text(),
        "acik"
    );
    for path in [
        "/varlik/kacis.txt",
        "/varlik/ust/gizli.txt",
        "/varlik/../gizli.txt",
        "/varlik/%2e%2e/gizli.txt",
        "/varlik/.%2E/gizli.txt",
    ] {
        let answer = send(address, "GET", path, &[]).await;
        // `..` is resolved before routing: /varlik/../x is /x, another route's path (here
        // a pool without backends); the static route never sees it.
        assert!(
            [400, 404, 503].contains(&answer.status),
            "{path}: {} {}",
            answer.status,
            answer.text()
        );
        assert!(!answer.text().contains("gizli"), "{path} leaked the file");
    }
    assert_eq!(
        send(address, "GET", "/varlik/acik.txt%00.css", &[])
            .await
            .status,
        400
    );
    assert_eq!(
        send(address, "GET", "/varlik/%2e%2e%2fgizli.txt", &[])
            .await
            .status,
        400
    );
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_escape_is_refused_not_read_as_a_byte() {
    let root = folder("malformed");
    // What a decoder that lets `u8::from_str_radix` read `%+f` as 0x0f would serve.
    std::fs::write(root.join("a\u{f}"), "control").unwrap();
    std::fs::write(root.join("a%4"), "literal").unwrap();
    let running = trafik_proxy::start(site(&root, &[])).unwrap();
    let address = web(&running);
    for path in [
        "/varlik/a%+f",
        "/varlik/a%+F",
        "/varlik/a%4",
        "/varlik/a%zz",
    ] {
        let request = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let answer = raw_exchange(address, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{path}: {answer}");
        assert!(
            !answer.contains("control") && !answer.contains("literal"),
            "{answer}"
        );
    }
    stop(running).await;
}

/// The lesson's app process: `/takip/<no>` answers the 480-byte tracking body, `/varlik/<name>`
/// a file of `assets`; it counts requests and body bytes it sent.
async fn app(assets: PathBuf) -> (SocketAddr, Arc<[AtomicU64; 2]>) {
    use hyper::service::service_fn;
    let counts: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let counting = counts.clone();
    let address = raw_backend(move |stream| {
        let (counting, assets) = (counting.clone(), assets.clone());
        async move {
            let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                let (counting, assets) = (counting.clone(), assets.clone());
                async move {
                    let path = request.uri().path();
                    let body = match path.strip_prefix("/varlik/") {
                        Some(name) => Bytes::from(std::fs::read(assets.join(name)).unwrap()),
                        None => {
                            let number = path.trim_start_matches("/takip/");
                            let head = format!("{{\"takip\":\"{number}\",\"durum\":\"aktarma\"}}");
                            Bytes::from(format!("{head:<480}"))
                        }
                    };
                    counting[0].fetch_add(1, Ordering::SeqCst);
                    counting[1].fetch_add(body.len() as u64, Ordering::SeqCst);
                    Ok::<_, std::convert::Infallible>(Response::new(Full::new(body)))
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        }
    })
    .await;
    (address, counts)
}

/// The lesson's 20 assets (T13): five named ones and 15 icons, 216,000 bytes.
fn course_assets(dir: &Path) -> Vec<String> {
    let mut assets = vec![
        ("kabuk.html".to_owned(), 6_000),
        ("bicem.css".to_owned(), 40_000),
        ("uygulama.js".to_owned(), 120_000),
        ("yazitipi.woff2".to_owned(), 28_000),
        ("logo.svg".to_owned(), 4_000),
    ];
    assets.extend((1..=15).map(|i| (format!("simge-{i}.svg"), 1_200)));
    for (name, bytes) in &assets {
        std::fs::write(dir.join(name), "x".repeat(*bytes)).unwrap();
    }
    assets.into_iter().map(|(name, _)| name).collect()
}

/// One page load through trafik: the tracking request, then every asset.
async fn page_load(running: &Running, assets: &[String]) {
    assert_eq!(get(web(running), "/takip/TR900011").await.status, 200);
    for asset in assets {
        assert_eq!(
            get(web(running), &format!("/varlik/{asset}")).await.status,
            200
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lesson_4_the_app_sees_21_requests_proxied_and_1_with_a_static_content_path() {
    let assets_dir = folder("lesson4");
    let assets = course_assets(&assets_dir);
    let (address, counts) = app(assets_dir.clone()).await;
    let read = |counts: &[AtomicU64; 2]| {
        (
            counts[0].swap(0, Ordering::SeqCst),
            counts[1].swap(0, Ordering::SeqCst),
        )
    };
    // Combined: every path goes to the app.
    let combined = trafik_proxy::start(plan(&[address])).unwrap();
    page_load(&combined, &assets).await;
    assert_eq!(read(&counts), (21, 216_480));
    stop(combined).await;
    // Split: /varlik is a static route of trafik's own.
    let split = trafik_proxy::start(site(&assets_dir, &[address])).unwrap();
    page_load(&split, &assets).await;
    assert_eq!(read(&counts), (1, 480));
    let served = status(&split).await["static"][0].clone();
    assert_eq!(served["requests"], 20);
    assert_eq!(served["bytes"], 216_000);
    stop(split).await;
}

/// Probe finding: a suffix range on an empty file (`bytes=-1`) computed `end - 1` on zero and
/// panicked, dropping the connection without an answer. Nothing in an empty file can satisfy a
/// range: 416, like `bytes=0-`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suffix_range_on_an_empty_file_is_416_not_a_dropped_connection() {
    let root = folder("empty-range");
    std::fs::write(root.join("bos.txt"), "").unwrap();
    let running = trafik_proxy::start(site(&root, &[])).unwrap();
    for range in ["bytes=-1", "bytes=-5", "bytes=0-"] {
        let request = format!(
            "GET /varlik/bos.txt HTTP/1.1\r\nhost: kargo.test\r\nrange: {range}\r\nconnection: close\r\n\r\n"
        );
        let answer = raw_exchange(web(&running), request.as_bytes()).await;
        assert!(
            answer.starts_with("HTTP/1.1 416") && answer.contains("content-range: bytes */0"),
            "{range}: {answer:?}"
        );
    }
}

/// Files around the sizes that change how they are kept and sent (empty, one byte, the 10.8 KB
/// page written from memory, 20 KB sent from the file, just past the 1 MiB kept in memory, a
/// few MiB), written with a pattern a cut or a shift would break.
fn sized_files(root: &Path) -> Vec<(String, Vec<u8>)> {
    [0, 1, 10_800, 20_000, (1 << 20) + 1, 3 << 20]
        .into_iter()
        .map(|size| {
            let name = format!("dosya-{size}.bin");
            let content: Vec<u8> = (0..size as u32).map(|i| (i % 251) as u8).collect();
            std::fs::write(root.join(&name), &content).unwrap();
            (name, content)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_size_and_a_range_go_whole_on_plain_tcp_the_larger_by_sendfile() {
    let root = folder("sendfile");
    let files = sized_files(&root);
    let running = trafik_proxy::start(site(&root, &[])).unwrap();
    let mut client = Client::connect(web(&running)).await;
    // Twice: the first answer looks the file up, the second sends the one kept open.
    for _ in 0..2 {
        for (name, content) in &files {
            let answer = client.get(&format!("/varlik/{name}")).await;
            assert_eq!(answer.status, 200, "{name}");
            assert!(answer.body == content[..], "{name}: the body differs");
        }
    }
    let big = &files[5].1;
    for (range, expected) in [
        ("bytes=1000-11999", &big[1000..12_000]),
        ("bytes=-5", &big[big.len() - 5..]),
    ] {
        let part = send(
            web(&running),
            "GET",
            "/varlik/dosya-3145728.bin",
            &[("range", range)],
        )
        .await;
        assert_eq!(part.status, 206, "{range}");
        assert!(part.body == expected, "{range}: the part differs");
    }
    let counters = status(&running).await["static"][0].clone();
    let sent: usize = files.iter().map(|(_, content)| 2 * content.len()).sum();
    assert_eq!(counters["bytes"], sent + 11_005, "{counters}");
    // All but the bodies small enough to go in one write with their head (from memory).
    let large: usize = 2 * (20_000 + (1 << 20) + 1 + (3 << 20)) + 11_005;
    assert_eq!(
        counters["sent_by_sendfile_bytes"], large,
        "the larger bodies from the page cache: {counters}"
    );
    let web = &status(&running).await["listeners"][0];
    assert_eq!(web["through_pipeline"], 0, "served inline: {web}");
    stop(running).await;
}

/// The numbers of this process's descriptors open on `target` (trafik runs in the test's
/// process), as `/proc/self/fd` links them.
fn descriptors_on(target: &Path) -> Vec<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            (std::fs::read_link(entry.path()).ok()? == target)
                .then(|| entry.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

/// A kept file found unchanged on disk when it is checked again (after a second) is kept:
/// one `stat`, not opened and read anew, so the descriptor that serves it stays the same. It
/// was last modified well before it was read, so no write in the same timestamp tick could hide
/// behind an unchanged modification time; a later write is seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_kept_file_is_not_opened_again_when_checked() {
    let root = folder("recheck");
    let path = root.join("sabit.css");
    std::fs::write(&path, "body { margin: 0 }\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(60))
        .unwrap();
    let canonical = std::fs::canonicalize(&path).unwrap();
    let descriptors = || descriptors_on(&canonical);
    let running = trafik_proxy::start(site(&root, &[])).unwrap();
    assert_eq!(get(web(&running), "/varlik/sabit.css").await.status, 200);
    let kept = descriptors();
    assert_eq!(kept.len(), 1, "{kept:?}");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let again = get(web(&running), "/varlik/sabit.css").await;
    assert_eq!(again.text(), "body { margin: 0 }\n");
    assert_eq!(descriptors(), kept, "checked, not opened again");
    std::fs::write(&path, "body { margin: 1px }\n").unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let changed = get(web(&running), "/varlik/sabit.css").await;
    assert_eq!(changed.text(), "body { margin: 1px }\n");
    stop(running).await;
}

/// A kept file deleted from the disk is closed at its next check: a deleted file's blocks are
/// freed only when its last descriptor closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_file_deleted_from_the_disk_is_closed_when_checked() {
    let root = folder("deleted");
    let path = root.join("gecici.txt");
    std::fs::write(&path, "silinecek\n").unwrap();
    // What /proc shows an open descriptor of a deleted file point to.
    let deleted = PathBuf::from(format!(
        "{} (deleted)",
        std::fs::canonicalize(&path).unwrap().display()
    ));
    let still_open = || !descriptors_on(&deleted).is_empty();
    let running = trafik_proxy::start(site(&root, &[])).unwrap();
    assert_eq!(get(web(&running), "/varlik/gecici.txt").await.status, 200);
    std::fs::remove_file(&path).unwrap();
    assert!(still_open(), "kept open until it is checked");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(get(web(&running), "/varlik/gecici.txt").await.status, 404);
    assert!(!still_open(), "closed once found gone");
    stop(running).await;
}

/// A static route with a step the pipeline runs (a body limit) sends its larger files by
/// sendfile(2) too, and counts them as the inline route does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_sent_through_the_pipeline_by_sendfile_are_counted_too() {
    let root = folder("sendfile-pipeline");
    let files = sized_files(&root);
    let mut plan = plan(&[]);
    let mut route = static_route("/varlik", &root, None);
    route
        .filters
        .push(trafik_proxy::FilterPlan::RequestBodyLimit { bytes: 1024 });
    routes(&mut plan).push(route);
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = Client::connect(web(&running)).await;
    for (name, content) in &files {
        let answer = client.get(&format!("/varlik/{name}")).await;
        assert_eq!(answer.status, 200, "{name}");
        assert!(answer.body == content[..], "{name}: the body differs");
    }
    let web = &status(&running).await["listeners"][0];
    let sent = files.len();
    assert_eq!(
        web["through_pipeline"], sent,
        "the body limit is the pipeline's: {web}"
    );
    let counters = status(&running).await["static"][0].clone();
    let large = 20_000 + (1 << 20) + 1 + (3 << 20);
    assert_eq!(counters["sent_by_sendfile_bytes"], large, "{counters}");
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_listener_sends_the_same_bytes_read_in_user_space() {
    use trafik_test_support::proxy::tls::{TestCa, TlsClient, https};
    let root = folder("sendfile-tls");
    let files = sized_files(&root);
    let ca = TestCa::new("trafik test CA");
    let certificate = ca.issue(&["kargo.test"]);
    let running = trafik_proxy::start(https(site(&root, &[]), &[&certificate])).unwrap();
    for alpn in [&[&b"http/1.1"[..]][..], &[b"h2"]] {
        let mut client = TlsClient::connect(web(&running), "kargo.test", &ca, alpn).await;
        for (name, content) in &files {
            let (answer, _) = client.get(&format!("/varlik/{name}")).await;
            assert_eq!(answer.status, 200, "{name}");
            assert!(answer.body == content[..], "{name}: the body differs");
        }
    }
    let counters = status(&running).await["static"][0].clone();
    assert_eq!(counters["sent_by_sendfile_bytes"], 0, "{counters}");
    assert_ne!(counters["bytes"], 0, "{counters}");
    stop(running).await;
}

/// What a raw HTTP/1.1 client reads for `GET path` on a kept-alive connection until the server
/// closes it (or 10 s pass): the declared length, and the body bytes that came.
async fn read_to_close(address: SocketAddr, path: &str) -> (usize, Vec<u8>, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: kargo.test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut read = Vec::new();
    let closed = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut piece = [0u8; 16 * 1024];
        loop {
            match stream.read(&mut piece).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read.extend_from_slice(&piece[..n]),
            }
        }
    })
    .await
    .is_ok();
    let end = read
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let head = String::from_utf8_lossy(&read[..end]).to_lowercase();
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length: "))
        .and_then(|value| value.trim().parse().ok())
        .expect("a content-length");
    (length, read[end..].to_vec(), closed)
}

/// A file cut short on disk while trafik still has it kept (under a second since its last
/// check) is sent as far as it goes: the connection then closes, so the client sees a cut
/// answer rather than waiting for bytes that never come, or reading the next answer as the
/// rest of this one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_cut_short_while_kept_closes_the_connection_after_what_is_left() {
    let root = folder("truncated");
    // Kept in memory, yet large enough to be sent from the file.
    let content: Vec<u8> = (0..120_000u32).map(|i| (i % 251) as u8).collect();
    let path = root.join("ozet.html");
    let running = trafik_proxy::start(site(&root, &[])).unwrap();
    // The check a second after the file was kept may come first on a slow machine: the answer
    // is then the short file, whole; a few tries see the cut.
    let mut cut = None;
    for _ in 0..5 {
        std::fs::write(&path, &content).unwrap();
        let kept = get(web(&running), "/varlik/ozet.html").await;
        assert!(kept.body == content[..]);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(40_000)
            .unwrap();
        let (length, body, closed) = read_to_close(web(&running), "/varlik/ozet.html").await;
        assert!(closed, "the client waits for bytes that never come");
        if length == content.len() {
            cut = Some(body);
            break;
        }
        assert_eq!((length, &body[..]), (40_000, &content[..40_000]));
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    let body = cut.expect("an answer from the kept file");
    assert!(body == content[..40_000], "what is left, then the close");
    stop(running).await;
}

/// A file's modification time may be before what an HTTP date can say (1970): it is still
/// served, its `Last-Modified` the first date that can be said. (After 9999 is clamped the same
/// way; the file systems here cannot store such a time.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_dated_before_1970_is_served_with_the_first_http_date() {
    let root = folder("dates");
    std::fs::write(root.join("eski.txt"), "tarih\n").unwrap();
    let file = std::fs::File::options()
        .write(true)
        .open(root.join("eski.txt"))
        .unwrap();
    file.set_modified(std::time::UNIX_EPOCH - std::time::Duration::from_secs(24 * 3600))
        .unwrap();
    let running = trafik_proxy::start(site(&root, &[])).unwrap();
    let answer = send(web(&running), "GET", "/varlik/eski.txt", &[]).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.text(), "tarih\n");
    assert_eq!(
        answer.header("last-modified"),
        Some("Thu, 01 Jan 1970 00:00:00 GMT")
    );
    stop(running).await;
}
