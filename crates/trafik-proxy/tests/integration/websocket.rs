//! Protocol upgrades through trafik: a WebSocket client talks to the replica's `/yanki` echo
//! over real sockets; what is relayed as an upgrade and what is not; the backend's counters.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::Request;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::client::Response;
use trafik_proxy::Engine;
use trafik_test_support::proxy::*;

type Socket = WebSocketStream<TcpStream>;

/// Opens a WebSocket to `/yanki` through the proxy at `address`.
async fn open(address: SocketAddr) -> (Socket, Response) {
    let stream = TcpStream::connect(address).await.expect("connects");
    tokio_tungstenite::client_async("ws://kargo.test/yanki", stream)
        .await
        .expect("the handshake succeeds")
}

/// The next message, skipping none: a test that expects an echo gets exactly that.
async fn next(socket: &mut Socket) -> Message {
    socket
        .next()
        .await
        .expect("a message, not the end")
        .expect("a valid message")
}

fn first_backend(status: &serde_json::Value) -> &serde_json::Value {
    &status["pools"][0]["backends"][0]
}

#[tokio::test]
async fn messages_pings_and_the_close_cross_the_proxy_and_the_upgrade_is_counted() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        messages_pings_and_the_close_cross_the_proxy_and_the_upgrade_is_counted_on(engine).await;
    }
}

async fn messages_pings_and_the_close_cross_the_proxy_and_the_upgrade_is_counted_on(
    engine: Engine,
) {
    let replicas = replicas(1).await;
    let running = trafik_proxy::start(plan_on(engine, &[replicas[0].address()])).unwrap();

    let (mut socket, handshake) = open(web(&running)).await;
    assert_eq!(handshake.status(), 101);
    assert_eq!(handshake.headers()["x-kopya"], "k1");
    assert_eq!(handshake.headers()["via"], "1.1 trafik-test");
    let opened = status(&running).await;
    let k1 = first_backend(&opened);
    assert_eq!(k1["upgrades"], 1, "{engine:?}");
    assert_eq!(k1["requests"], 1, "{engine:?}");
    assert_eq!(
        k1["active_connections"], 1,
        "{engine:?}: the open tunnel is in flight"
    );
    assert_eq!(k1["open_connections"], 1, "{engine:?}");
    // The tunnel's upstream connection is not in the idle stack: a request needs a new one.
    assert_eq!(get(web(&running), "/takip/TR-1").await.status, 200);
    assert_eq!(
        first_backend(&status(&running).await)["open_connections"],
        2
    );

    socket.send(Message::text("merhaba")).await.unwrap();
    assert_eq!(next(&mut socket).await, Message::text("merhaba"));
    let binary = Bytes::from_static(&[0, 1, 2, 0xfe, 0xff]);
    socket.send(Message::binary(binary.clone())).await.unwrap();
    assert_eq!(next(&mut socket).await, Message::binary(binary));
    socket
        .send(Message::Ping(Bytes::from_static(b"tik")))
        .await
        .unwrap();
    assert_eq!(
        next(&mut socket).await,
        Message::Pong(Bytes::from_static(b"tik"))
    );

    // The close handshake: the replica answers the close and shuts its connection, the proxy
    // passes that on, and the client's stream ends.
    socket.close(None).await.unwrap();
    assert!(matches!(next(&mut socket).await, Message::Close(_)));
    assert!(socket.next().await.is_none(), "the connection closed");
    wait_for_status(&running, |s| {
        let k1 = first_backend(s);
        k1["active_connections"] == 0 && k1["open_connections"] == 1
    })
    .await;
    let metrics = admin_get(&running, "/metrics").await.text();
    let line = format!(
        "trafik_backend_upgrades_total{{pool=\"takip\",backend=\"{}\",name=\"k1\"}} 1",
        replicas[0].address()
    );
    assert!(metrics.contains(&line), "{metrics}");
    if engine == Engine::Trafik {
        let none_handed_over = "trafik_listener_handed_to_hyper_total{listener=\"web\"} 0";
        assert!(
            metrics.contains(none_handed_over),
            "the own engine tunnels: {metrics}"
        );
    }
    stop(running).await;
}

#[tokio::test]
async fn an_upgrade_the_backend_refuses_is_relayed_as_an_ordinary_answer() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        an_upgrade_the_backend_refuses_is_relayed_as_an_ordinary_answer_on(engine).await;
    }
}

async fn an_upgrade_the_backend_refuses_is_relayed_as_an_ordinary_answer_on(engine: Engine) {
    let replicas = replicas(1).await;
    let running = trafik_proxy::start(plan_on(engine, &[replicas[0].address()])).unwrap();
    let mut client = Client::connect(web(&running)).await;
    let handshake = |path: &str, version: &str| {
        Request::get(path)
            .header("host", "kargo.test")
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .header("sec-websocket-version", version)
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
            .body(Full::default())
            .unwrap()
    };

    // The tracking path ignores the upgrade; /yanki refuses a version it does not speak.
    let tracking = client.send(handshake("/takip/TR-1", "13")).await;
    assert_eq!(tracking.status, 200);
    assert_eq!(tracking.json()["no"], "TR-1");
    let refused = client.send(handshake("/yanki", "8")).await;
    assert_eq!(refused.status, 426);
    assert_eq!(refused.header("sec-websocket-version"), Some("13"));
    // The same client connection goes on with plain requests, on a kept-alive backend.
    assert_eq!(client.get("/takip/TR-2").await.status, 200);

    let status = status(&running).await;
    let k1 = first_backend(&status);
    assert_eq!(k1["upgrades"], 0);
    assert_eq!(k1["requests"], 3);
    assert_eq!(k1["open_connections"], 1, "one connection served all three");
    stop(running).await;
}

#[tokio::test]
async fn only_a_get_with_connection_upgrade_keeps_its_upgrade_headers() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        only_a_get_with_connection_upgrade_keeps_its_upgrade_headers_on(engine).await;
    }
}

async fn only_a_get_with_connection_upgrade_keeps_its_upgrade_headers_on(engine: Engine) {
    let echo = echo_server(Duration::ZERO).await;
    let running = trafik_proxy::start(plan_on(engine, &[echo])).unwrap();
    let mut client = Client::connect(web(&running)).await;

    // The echo server answers 200, so every one of these is an ordinary exchange upstream.
    let get_upgrade = headers_seen(&mut client, "GET", "keep-alive, Upgrade").await;
    assert_eq!(get_upgrade["upgrade"], "websocket");
    assert_eq!(get_upgrade["connection"], "upgrade");
    for (method, connection) in [("POST", "upgrade"), ("GET", "keep-alive")] {
        let headers = headers_seen(&mut client, method, connection).await;
        assert!(headers.get("upgrade").is_none(), "{method} {connection}");
        assert!(headers.get("connection").is_none(), "{method} {connection}");
    }
    stop(running).await;
}

/// The headers the echo server saw for a request with `Upgrade: websocket` and `connection`.
async fn headers_seen(client: &mut Client, method: &str, connection: &str) -> serde_json::Value {
    let request = Request::builder()
        .method(method)
        .uri("/yanki")
        .header("host", "kargo.test")
        .header("connection", connection)
        .header("upgrade", "websocket")
        .body(Full::default())
        .unwrap();
    client.send(request).await.json()["headers"].clone()
}

/// A backend that answers every request on a connection with a 101 to `HTTP/1.1 x`.
async fn switching_server() -> SocketAddr {
    raw_backend(move |mut stream| async move {
        let mut head = [0u8; 1024];
        let _ = stream.read(&mut head).await;
        let _ = stream
            .write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\nconnection: upgrade\r\n\r\n",
            )
            .await;
        let _ = stream.read(&mut head).await;
    })
    .await
}

#[tokio::test]
async fn a_backend_that_switches_protocols_unasked_gets_502() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        a_backend_that_switches_protocols_unasked_gets_502_on(engine).await;
    }
}

async fn a_backend_that_switches_protocols_unasked_gets_502_on(engine: Engine) {
    let backend = switching_server().await;
    let running = trafik_proxy::start(plan_on(engine, &[backend])).unwrap();
    let answer = get(web(&running), "/takip/TR-1").await;
    assert_eq!(answer.status, 502);
    assert_eq!(
        answer.text(),
        format!(
            "the backend switched protocols unasked: k1 ({backend}), 101 Switching Protocols\n"
        ),
        "{engine:?}"
    );
    let status = status(&running).await;
    assert_eq!(first_backend(&status)["failures"], 1);
    assert_eq!(first_backend(&status)["upgrades"], 0);
    stop(running).await;
}

#[tokio::test]
async fn a_websocket_stays_open_across_a_reload() {
    let replicas = replicas(2).await;
    let first = plan(&[replicas[0].address()]);
    let running = trafik_proxy::start(first.clone()).unwrap();
    let (mut socket, handshake) = open(web(&running)).await;
    assert_eq!(handshake.headers()["x-kopya"], "k1");

    // The pool now lists another replica first; the open tunnel keeps its own.
    let mut second = first.clone();
    second.pools[0].backends.insert(
        0,
        trafik_proxy::BackendPlan {
            address: replicas[1].address(),
            name: Some("k2".into()),
            weight: 1,
        },
    );
    assert_eq!(running.apply(second), Ok(2));
    socket.send(Message::text("hala burada")).await.unwrap();
    assert_eq!(next(&mut socket).await, Message::text("hala burada"));
    let (_, handshake) = open(web(&running)).await;
    assert_eq!(
        handshake.headers()["x-kopya"],
        "k2",
        "new upgrades follow the reload"
    );
    stop(running).await;
}

#[tokio::test]
async fn an_idle_tunnel_is_closed_by_the_idle_timeout() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        an_idle_tunnel_is_closed_by_the_idle_timeout_on(engine).await;
    }
}

async fn an_idle_tunnel_is_closed_by_the_idle_timeout_on(engine: Engine) {
    let replicas = replicas(1).await;
    let mut plan = plan_on(engine, &[replicas[0].address()]);
    plan.client.idle_timeout = Duration::from_secs(1);
    let running = trafik_proxy::start(plan).unwrap();
    let (mut socket, _) = open(web(&running)).await;
    socket.send(Message::text("bir")).await.unwrap();
    assert_eq!(next(&mut socket).await, Message::text("bir"));

    // Nothing moves: the proxy closes the tunnel, both sides.
    let ended = tokio::time::timeout(Duration::from_secs(10), socket.next()).await;
    assert!(
        matches!(ended, Ok(None | Some(Err(_)))),
        "the tunnel stayed open: {ended:?}"
    );
    wait_for_status(&running, |s| {
        let k1 = first_backend(s);
        k1["active_connections"] == 0 && k1["open_connections"] == 0
    })
    .await;
    stop(running).await;
}

/// A backend that switches protocols when asked, then echoes every byte back.
async fn switching_echo() -> SocketAddr {
    raw_backend(move |mut stream| async move {
        let mut read = Vec::new();
        let mut buffer = [0u8; 1024];
        let head_end = loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read.extend_from_slice(&buffer[..n]),
            }
            if let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
        };
        let switch =
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: yanki\r\nconnection: upgrade\r\n\r\n";
        if stream.write_all(switch).await.is_err()
            || stream.write_all(&read[head_end..]).await.is_err()
        {
            return;
        }
        let (mut from, mut to) = stream.split();
        let _ = tokio::io::copy(&mut from, &mut to).await;
    })
    .await
}

/// The new protocol's first bytes, sent with the upgrade request in one write, reach the
/// backend after the switch; what follows crosses both ways until the client closes.
#[tokio::test]
async fn bytes_sent_with_the_upgrade_request_cross_after_the_switch() {
    for engine in [Engine::Trafik, Engine::Hyper] {
        let backend = switching_echo().await;
        let running = trafik_proxy::start(plan_on(engine, &[backend])).unwrap();
        let mut stream = TcpStream::connect(web(&running)).await.unwrap();
        stream
            .write_all(b"GET /yanki HTTP/1.1\r\nHost: a\r\nUpgrade: yanki\r\nConnection: Upgrade\r\n\r\nilk")
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut buffer = [0u8; 1024];
        while !got.ends_with(b"ilk") {
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
                .await
                .expect("the echo in time")
                .unwrap();
            assert!(n > 0, "{engine:?}: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buffer[..n]);
        }
        let got = String::from_utf8_lossy(&got).to_ascii_lowercase();
        assert!(got.starts_with("http/1.1 101"), "{engine:?}: {got}");
        assert!(got.contains("upgrade: yanki\r\n"), "{engine:?}: {got}");
        assert!(got.contains("connection: upgrade\r\n"), "{engine:?}: {got}");
        stream.write_all(b"sonra").await.unwrap();
        let mut echoed = [0u8; 5];
        stream.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed, b"sonra", "{engine:?}");
        drop(stream);
        stop(running).await;
    }
}

/// A route with filters runs its pipeline for the handshake, and the own engine then tunnels
/// the connection itself: the filters see the 101, the messages cross, and nothing is handed
/// to hyper.
#[tokio::test]
async fn a_websocket_on_a_route_with_filters_stays_on_the_own_engine() {
    let replicas = replicas(1).await;
    let mut plan = plan_on(Engine::Trafik, &[replicas[0].address()]);
    routes(&mut plan)[0].filters = vec![trafik_proxy::FilterPlan::SetResponseHeader {
        name: http::HeaderName::from_static("x-cevap"),
        value: http::HeaderValue::from_static("1"),
    }];
    let running = trafik_proxy::start(plan).unwrap();

    let (mut socket, handshake) = open(web(&running)).await;
    assert_eq!(handshake.status(), 101);
    assert_eq!(
        handshake.headers()["x-cevap"],
        "1",
        "the filter saw the 101"
    );
    assert_eq!(handshake.headers()["via"], "1.1 trafik-test");
    socket.send(Message::text("merhaba")).await.unwrap();
    assert_eq!(next(&mut socket).await, Message::text("merhaba"));
    socket.close(None).await.unwrap();
    assert!(matches!(next(&mut socket).await, Message::Close(_)));
    assert!(socket.next().await.is_none(), "the connection closed");

    let after = status(&running).await;
    assert_eq!(first_backend(&after)["upgrades"], 1);
    assert_eq!(handed_to_hyper(&running).await, 0);
    stop(running).await;
}
