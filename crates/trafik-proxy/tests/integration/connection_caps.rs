//! A listener's connection caps over real sockets: at `max_connections` the next connection
//! waits (unserved, nothing spinning) until one closes; a client over
//! `max_connections_per_client` is closed at once while other connections go on.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trafik_proxy::ConnectionLimits;
use trafik_test_support::proxy::{LOOPBACK_ANY_PORT, admin_get, echo_server, plan, status, stop};

/// Opens a connection and sends one kept-alive GET.
async fn ask(address: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /cap HTTP/1.1\r\nHost: caps\r\n\r\n")
        .await
        .unwrap();
    stream
}

/// The first bytes of the answer, or `None` when nothing came within `wait` (`Some("")` is a
/// close without an answer).
async fn answer(stream: &mut TcpStream, wait: Duration) -> Option<String> {
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(wait, stream.read(&mut buffer))
        .await
        .ok()?;
    Some(String::from_utf8_lossy(&buffer[..read.unwrap_or(0)]).into_owned())
}

fn started(limits: ConnectionLimits, backend: SocketAddr) -> (trafik_proxy::Running, SocketAddr) {
    let mut plan = plan(&[backend]);
    plan.listeners[0].connections = limits;
    assert_eq!(
        plan.listeners[0].address,
        LOOPBACK_ANY_PORT.parse().unwrap()
    );
    let running = trafik_proxy::start(plan).unwrap();
    let address = running.listener_addresses()[0];
    (running, address)
}

#[tokio::test]
async fn the_connection_past_the_listener_cap_waits_until_one_closes() {
    let backend = echo_server(Duration::ZERO).await;
    let (running, address) = started(
        ConnectionLimits {
            max_connections: 2,
            max_connections_per_client: 0,
        },
        backend,
    );
    let long = Duration::from_secs(10);
    let mut first = ask(address).await;
    let mut second = ask(address).await;
    for stream in [&mut first, &mut second] {
        let head = answer(stream, long).await.expect("an answer under the cap");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    let mut third = ask(address).await;
    assert_eq!(
        answer(&mut third, Duration::from_millis(700)).await,
        None,
        "the third connection is served while two are open"
    );
    drop(first);
    let head = answer(&mut third, long)
        .await
        .expect("served once a connection closed");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let listener = &status(&running).await["listeners"][0];
    assert_eq!(listener["name"], "web", "{listener}");
    assert_eq!(listener["open"], 2, "{listener}");
    assert_eq!(listener["accepted"], 3, "{listener}");
    assert_eq!(listener["waited"], 1, "{listener}");
    let metrics = admin_get(&running, "/metrics").await.text();
    assert!(
        metrics.contains("trafik_listener_waited_total{listener=\"web\"} 1"),
        "{metrics}"
    );
    stop(running).await;
}

#[tokio::test]
async fn a_client_over_its_own_cap_is_closed_while_its_other_connections_go_on() {
    let backend = echo_server(Duration::ZERO).await;
    let (running, address) = started(
        ConnectionLimits {
            max_connections: 0,
            max_connections_per_client: 2,
        },
        backend,
    );
    let long = Duration::from_secs(10);
    let mut kept = vec![ask(address).await, ask(address).await];
    for stream in &mut kept {
        let head = answer(stream, long).await.unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    let mut over = ask(address).await;
    assert_eq!(answer(&mut over, long).await.as_deref(), Some(""));
    // A closed connection makes room again.
    kept.pop();
    let mut again = None;
    for _ in 0..50 {
        // The close reaches trafik a moment after the drop.
        let mut stream = ask(address).await;
        let head = answer(&mut stream, long).await.unwrap();
        if head.starts_with("HTTP/1.1 200") {
            again = Some(head);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        again.is_some(),
        "a closed connection frees the client's slot"
    );
    let listener = &status(&running).await["listeners"][0];
    let refused = listener["refused_per_client"].as_u64().unwrap();
    let accepted = listener["accepted"].as_u64().unwrap();
    assert!(refused >= 1, "{listener}");
    // Every connection opened was either admitted or refused.
    assert!(accepted >= 3, "{listener}");
    assert_eq!(listener["waited"], 0, "no listener-wide cap: {listener}");
    stop(running).await;
}
