//! Coordinated omission, shown: a server that stops answering for one second. Requests that
//! were due during the stall wait for a connection, so their latency from the intended send time
//! shows the stall, while their service time (from the actual send) does not.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;
use trafik_load::{Pacing, RatePlan, RunOptions, Target};

/// A server that answers at once, except that everything arriving between 1 s and 2 s after
/// `start` waits until 2 s.
async fn stalling_server(start: Instant) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let service = service_fn(move |_request| async move {
                    let now = Instant::now();
                    let (from, until) = (
                        start + Duration::from_secs(1),
                        start + Duration::from_secs(2),
                    );
                    if now >= from && now < until {
                        tokio::time::sleep_until(until).await;
                    }
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_second_stall_shows_in_corrected_latency_but_not_in_service_time() {
    let start = Instant::now();
    let address = stalling_server(start).await;
    let url = format!("http://{address}/");
    let options = RunOptions {
        target: Target::new(&[url], http::Method::GET, Vec::new(), Bytes::new()).unwrap(),
        pacing: Pacing::Open(RatePlan::constant(200.0, Duration::from_secs(3))),
        // Four connections: during the stall all four hang, and later sends queue behind them.
        connections: 4,
        max_connections: 4,
        http2: false,
        timeout: Duration::from_secs(5),
        late_after: Duration::from_millis(5),
        threshold_us: 100_000,
        keep_seconds: false,
    };
    let result = trafik_load::run(options, |_| {}).await;
    let recorder = &result.recorder;
    assert_eq!(result.planned, 600);
    assert_eq!(
        recorder.completed, 600,
        "every request is answered in the end"
    );
    assert_eq!(result.dropped, 0);

    let corrected_max = recorder.corrected.max() as f64 / 1000.0;
    let service_p99 = recorder.service.value_at_quantile(0.99) as f64 / 1000.0;
    let service_p50 = recorder.service.value_at_quantile(0.50) as f64 / 1000.0;
    // The first requests of the stall were due at 1.0 s and answered at 2.0 s.
    assert!(
        corrected_max > 900.0 && corrected_max < 1200.0,
        "corrected max {corrected_max} ms"
    );
    // About 200 requests were due during the stall: a third of the run waited.
    let over_100ms = trafik_load::record::count_above(&recorder.corrected, 100_000);
    assert!(
        (150..=230).contains(&over_100ms),
        "{over_100ms} requests over 100 ms"
    );
    // Only the four requests stuck on their connections took long to serve.
    assert!(service_p99 < 100.0, "service p99 {service_p99} ms");
    assert!(service_p50 < 20.0, "service p50 {service_p50} ms");
    assert!(
        result.late > 150,
        "sends behind schedule are counted as late: {}",
        result.late
    );

    // The per-second view puts the damage in second 1.
    let second = |s: u32| recorder.closed[&s].0.clone();
    assert!(second(1).latency_ms.p50 > 300.0, "{:?}", second(1));
    assert!(second(0).latency_ms.p99 < 50.0, "{:?}", second(0));
}
