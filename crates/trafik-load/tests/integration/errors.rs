//! How failures are measured and counted: answers of any status and timeouts have a latency,
//! and every failure is counted by its kind. Each server here is a real socket on loopback.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use trafik_load::record::Errors;
use trafik_load::{Pacing, RatePlan, RunOptions, RunResult, Target};

/// 20 requests over one second to `address`, each allowed `timeout`.
async fn run(address: SocketAddr, timeout: Duration) -> RunResult {
    let url = format!("http://{address}/takip/TR-{{n}}");
    let options = RunOptions {
        target: Target::new(&[url], http::Method::GET, Vec::new(), Bytes::new()).unwrap(),
        pacing: Pacing::Open(RatePlan::constant(20.0, Duration::from_secs(1))),
        connections: 4,
        max_connections: 32,
        http2: false,
        streams: 1,
        tls: None,
        timeout,
        late_after: Duration::from_millis(5),
        threshold_us: 25_000,
        keep_seconds: false,
    };
    trafik_load::run(options, |_| {}).await
}

/// A server that reads each request head and answers it with `answer`, or holds it forever
/// when `answer` is empty.
async fn server(answer: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                loop {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) if answer.is_empty() => {}
                        Ok(_) => {
                            if stream.write_all(answer).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_answer_is_measured_and_counted_as_an_error() {
    let address = server(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n").await;
    let result = run(address, Duration::from_secs(5)).await;
    let recorder = &result.recorder;
    assert_eq!(
        recorder.errors,
        Errors {
            status_5xx: 20,
            ..Errors::default()
        }
    );
    assert_eq!(recorder.completed, 0);
    assert_eq!(recorder.corrected.len(), 20, "every answer has a latency");
    assert_eq!(recorder.service.len(), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_measured_at_the_timeout() {
    let address = server(b"").await;
    let timeout = Duration::from_millis(300);
    let result = run(address, timeout).await;
    let recorder = &result.recorder;
    assert_eq!(
        recorder.errors,
        Errors {
            timeout: 20,
            ..Errors::default()
        }
    );
    assert_eq!(recorder.service.len(), 20);
    // Three significant digits: 300 ms is recorded within 0.1 %.
    let (lowest, highest) = (recorder.service.min(), recorder.service.max());
    assert!(
        (299_700..=300_300).contains(&lowest) && (299_700..=300_300).contains(&highest),
        "service time of a timeout: {lowest}–{highest} µs"
    );
    assert!(recorder.corrected.min() >= lowest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connects_reset_connections_and_bad_bytes_are_counted_by_kind() {
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let result = run(refused, Duration::from_secs(5)).await;
    assert_eq!(result.recorder.errors.connect_refused, 20);
    assert!(
        result.recorder.corrected.is_empty(),
        "a refused connect has no latency"
    );

    // A server that closes the connection in the middle of the body.
    let resetting = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
                    .await;
            }
        });
        address
    };
    let result = run(resetting, Duration::from_secs(5)).await;
    assert_eq!(result.recorder.errors.reset, 20);

    let garbage =
        server(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n").await;
    let result = run(garbage, Duration::from_secs(5)).await;
    assert_eq!(result.recorder.errors.protocol, 20);
    assert_eq!(result.recorder.errors.total(), 20);
}
