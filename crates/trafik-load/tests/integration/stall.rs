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
        streams: 1,
        tls: None,
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

    // No upper bound on a duration: a busy machine only adds latency, so it cannot break the
    // lower bounds below (the stall is a server sleep, which never ends early), and it adds to
    // both measures of the same run, so their comparison holds unless the machine stalls for
    // half a second again and again.
    let corrected_max = recorder.corrected.max() as f64 / 1000.0;
    // The first requests of the stall were due at 1.0 s and answered at 2.0 s.
    assert!(corrected_max > 900.0, "corrected max {corrected_max} ms");
    // About 200 requests were due during the stall: nearly all the 180 due before 1.9 s waited
    // more than 100 ms for their answer, and nearly all the 100 due in its first half more than
    // 500 ms (a few are lost at its start: the server's clock started just before the run's).
    let corrected_over = |ms: u64| trafik_load::record::count_above(&recorder.corrected, ms * 1000);
    let service_over = |ms: u64| trafik_load::record::count_above(&recorder.service, ms * 1000);
    assert!(
        corrected_over(100) >= 150,
        "{} requests over 100 ms",
        corrected_over(100)
    );
    assert!(
        corrected_over(500) >= 80,
        "{} requests over 500 ms",
        corrected_over(500)
    );
    // From the actual send, only the four requests stuck on their connections when the stall
    // began took that long: the others were sent once a connection was free.
    assert!(
        service_over(500) * 4 <= corrected_over(500),
        "{} requests over 500 ms of service time, {} from the intended send",
        service_over(500),
        corrected_over(500)
    );
    assert!(
        result.late > 150,
        "sends behind schedule are counted as late: {}",
        result.late
    );

    // The per-second view puts the damage in second 1: second 0's slowest answers are faster
    // than second 1's median.
    let second = |s: u32| recorder.closed[&s].0.clone();
    assert!(second(1).latency_ms.p50 > 300.0, "{:?}", second(1));
    assert!(
        second(0).latency_ms.p99 < second(1).latency_ms.p50,
        "{:?} {:?}",
        second(0),
        second(1)
    );
}
