//! A 1 GiB upload and a 1 GiB download pass through the real `trafik` binary while its peak
//! memory stays small: bodies stream, they are never buffered whole.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

use trafik_test_support::Proxy;

const GIB: u64 = 1 << 30;
const CHUNK: usize = 256 * 1024;
/// Far below the 1 GiB that passes through: what is left is buffers, not the body.
const PEAK_MEMORY_LIMIT_KIB: u64 = 96 * 1024;

/// A body of `remaining` bytes produced chunk by chunk, never held in memory.
struct Generated {
    chunk: Bytes,
    remaining: u64,
}

impl Generated {
    fn new(length: u64) -> Self {
        Generated {
            chunk: Bytes::from(vec![b'x'; CHUNK]),
            remaining: length,
        }
    }
}

impl Body for Generated {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let take = self.remaining.min(CHUNK as u64) as usize;
        self.remaining -= take as u64;
        Poll::Ready(Some(Ok(Frame::data(self.chunk.slice(..take)))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// Reads a body to its end, counting bytes without keeping them.
async fn count(mut body: Incoming) -> u64 {
    let mut total = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("body frame").into_data() {
            total += data.len() as u64;
        }
    }
    total
}

/// A backend that counts uploads (`POST`) and streams downloads of `?bytes=N` (`GET`).
async fn sink_and_source() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let service = service_fn(|request: Request<Incoming>| async move {
                    let wanted: u64 = request
                        .uri()
                        .query()
                        .and_then(|q| q.strip_prefix("bytes="))
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                    let received = count(request.into_body()).await;
                    let body = if wanted > 0 {
                        Generated::new(wanted)
                    } else {
                        Generated {
                            chunk: Bytes::from(received.to_string()),
                            remaining: received.to_string().len() as u64,
                        }
                    };
                    Ok::<_, Infallible>(Response::new(body))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

fn peak_memory_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gibibyte_each_way_streams_through_with_bounded_memory() {
    let backend = sink_and_source().await;
    let proxy = Proxy::start(&[], &["--workers", "1", "--to", &backend.to_string()]);
    let address: SocketAddr = proxy.address.parse().unwrap();
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);

    let upload = Request::post("/yukle")
        .header("host", "t")
        .body(Generated::new(GIB))
        .unwrap();
    let response = sender.send_request(upload).await.unwrap();
    assert_eq!(response.status(), 200);
    let received = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(received, GIB.to_string(), "the backend got every byte");

    sender.ready().await.unwrap();
    let download = Request::get(format!("/indir?bytes={GIB}"))
        .header("host", "t")
        .body(Generated::new(0))
        .unwrap();
    let response = sender.send_request(download).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(count(response.into_body()).await, GIB);

    let peak = peak_memory_kib(proxy.pid());
    let exit = proxy.stop().status;
    assert!(exit.success(), "SIGTERM drains and exits 0, got {exit}");
    assert!(
        peak < PEAK_MEMORY_LIMIT_KIB,
        "peak memory {peak} KiB for 2 GiB streamed"
    );
    eprintln!("peak memory of the proxy: {peak} KiB");
}
