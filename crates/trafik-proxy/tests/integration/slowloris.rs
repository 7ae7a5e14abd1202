//! Slowloris on the request head, bounded: a few hundred connections trickle header lines and
//! never end their head, while normal clients go on being answered; every trickling
//! connection is cut once the header read timeout passes. The full run (2,000 connections,
//! `trafik load` measuring the normal clients, peak memory, `ulimit -n 256`) is
//! `bench/slowloris.sh`.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trafik_test_support::proxy::{get, plan, stop, web};

const TRICKLERS: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_heads_are_cut_by_the_header_timeout_while_normal_clients_are_answered() {
    let backend = trafik_test_support::proxy::echo_server(Duration::ZERO).await;
    let mut plan = plan(&[backend]);
    plan.client.header_read_timeout = Duration::from_secs(2);
    let running = trafik_proxy::start(plan).unwrap();
    let address = web(&running);

    let started = Instant::now();
    let tricklers: Vec<_> = (0..TRICKLERS)
        .map(|n| {
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(address).await.unwrap();
                stream
                    .write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\n")
                    .await
                    .unwrap();
                // A header line every 300 ms, for up to 20 s: far longer than the timeout.
                for line in 0..66 {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let header = format!("X-{n}-{line}: a\r\n");
                    if stream.write_all(header.as_bytes()).await.is_err() {
                        break;
                    }
                    let mut byte = [0u8; 512];
                    // Cut: the proxy closed (perhaps after a 408) instead of waiting on.
                    match tokio::time::timeout(Duration::from_millis(1), stream.read(&mut byte))
                        .await
                    {
                        Ok(Ok(0)) | Ok(Err(_)) => return Some(line),
                        Ok(Ok(_)) => {
                            let mut rest = Vec::new();
                            let _ = tokio::time::timeout(
                                Duration::from_secs(5),
                                stream.read_to_end(&mut rest),
                            )
                            .await;
                            return Some(line);
                        }
                        Err(_) => {}
                    }
                }
                None
            })
        })
        .collect();

    // Normal clients while the trickling connections are held.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for n in 0..50 {
        let answer = get(address, &format!("/takip/TR-{n}")).await;
        assert_eq!(answer.status, 200, "request {n} under the trickle");
    }

    let mut cut = 0;
    for trickler in tricklers {
        if trickler.await.unwrap().is_some() {
            cut += 1;
        }
    }
    assert_eq!(
        cut,
        TRICKLERS,
        "every trickling connection is cut by the 2 s header timeout (took {:?})",
        started.elapsed()
    );
    // And the proxy serves on.
    assert_eq!(get(address, "/after").await.status, 200);
    stop(running).await;
}
