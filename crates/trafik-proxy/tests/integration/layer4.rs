//! The course's lesson "Katman 4 Dengeleme" over real sockets: a `tcp` listener decides once per
//! client connection, so clients of unequal size leave the replicas with equal connections and
//! unequal requests; the same mix through an HTTP pool evens the requests out. Then the relay's
//! own duties: half-close, connect retries, idle timeout, hashing on the client's address,
//! health checks and the PROXY protocol.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use trafik_balance::Algorithm;
use trafik_proxy::{HashKey, HealthPlan, ListenerKind, Plan, ProxyProtocol};
use trafik_test_support::proxy::*;

/// A plan whose only listener is `tcp`, sending every connection to pool `takip`.
fn tcp_plan(backends: &[SocketAddr]) -> Plan {
    let mut plan = plan(backends);
    plan.listeners[0].kind = ListenerKind::Tcp {
        pool: "takip".into(),
    };
    plan
}

/// What the course's client (`k4/istemci.mjs`) does: client `i` opens one kept-alive
/// connection and sends its share of requests one after another, alternately `/takip` and
/// `/olay`, with the bytes Node's `http` module writes for them (the course's balancer listens
/// on 8841, hence the Host); the clients run one after another. Returns the bytes the clients
/// wrote and read.
async fn course_clients(address: SocketAddr, shares: &[usize]) -> (usize, usize) {
    let (mut written, mut read) = (0, 0);
    for (client, &share) in shares.iter().enumerate() {
        let mut stream = TcpStream::connect(address).await.unwrap();
        let mut pending = Vec::new();
        for request in 0..share {
            let path = if request % 2 == 0 { "/takip" } else { "/olay" };
            let head = format!(
                "GET {path}?no=I{client}-{request} HTTP/1.1\r\nHost: localhost:8841\r\nConnection: keep-alive\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).await.unwrap();
            written += head.len();
            read += read_response(&mut stream, &mut pending).await;
        }
    }
    (written, read)
}

/// Reads one HTTP/1.1 response with a Content-Length body; returns how many bytes it took.
async fn read_response(stream: &mut TcpStream, pending: &mut Vec<u8>) -> usize {
    let mut total = 0;
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut response = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(head) = response.parse(pending).unwrap() {
            let length: usize = response
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                .expect("a Content-Length");
            if pending.len() >= head + length {
                pending.drain(..head + length);
                return total;
            }
        }
        let mut buffer = [0u8; 4096];
        let n = stream.read(&mut buffer).await.unwrap();
        assert!(n > 0, "the connection closed in the middle of a response");
        pending.extend_from_slice(&buffer[..n]);
        total += n;
    }
}

fn pool_status(status: &Value) -> &Value {
    &status["pools"][0]
}

fn column(status: &Value, field: &str) -> Vec<Value> {
    pool_status(status)["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b[field].clone())
        .collect()
}

fn sum(status: &Value, field: &str) -> u64 {
    column(status, field)
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum()
}

/// Each replica's own count of the requests it answered, and its split by path.
async fn counted_at_replicas(replicas: &[trafik_upstream::RunningReplica]) -> Vec<Value> {
    let mut counted = Vec::new();
    for replica in replicas {
        let counters = get(replica.address(), "/sayac").await.json();
        counted.push(json!({"istek": counters["istek"], "yol": counters["yol"]}));
    }
    counted
}

#[tokio::test]
async fn equal_shares_leave_equal_connections_and_requests() {
    let replicas = replicas(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let running = trafik_proxy::start(tcp_plan(&addresses)).unwrap();

    let (written, read) = course_clients(web(&running), &[10; 6]).await;
    // Node writes 4,590 request bytes for this mix, as the course's balancer counted.
    assert_eq!(written, 4590);

    let counted = counted_at_replicas(&replicas).await;
    let each = json!({"istek": 20, "yol": {"/olay": 10, "/takip": 10}});
    assert_eq!(counted, vec![each.clone(), each.clone(), each]);
    wait_for_status(&running, |s| sum(s, "bytes_in") == read as u64).await;
    let status = status(&running).await;
    assert_eq!(column(&status, "connections"), vec![json!(2); 3]);
    assert_eq!(column(&status, "decisions"), vec![json!(2); 3]);
    assert_eq!(
        column(&status, "requests"),
        vec![json!(0); 3],
        "bytes, not requests"
    );
    assert_eq!(sum(&status, "bytes_out"), 4590);
    assert_eq!(pool_status(&status)["connection_skew"], 1.0);
    assert_eq!(pool_status(&status)["request_skew"], Value::Null);
    stop(running).await;
}

#[tokio::test]
async fn unequal_shares_leave_equal_connections_and_unequal_requests() {
    let replicas = replicas(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let running = trafik_proxy::start(tcp_plan(&addresses)).unwrap();

    let (written, read) = course_clients(web(&running), &[1, 2, 4, 8, 16, 32]).await;
    assert_eq!(written, 4848, "the course's request bytes for this mix");

    // The course's table: k1 9 (olay=4 takip=5), k2 18, k3 36; request skew 36/9 = 4.00.
    let counted = counted_at_replicas(&replicas).await;
    assert_eq!(
        counted,
        vec![
            json!({"istek": 9, "yol": {"/olay": 4, "/takip": 5}}),
            json!({"istek": 18, "yol": {"/olay": 9, "/takip": 9}}),
            json!({"istek": 36, "yol": {"/olay": 18, "/takip": 18}}),
        ]
    );
    wait_for_status(&running, |s| sum(s, "bytes_in") == read as u64).await;
    let status = status(&running).await;
    assert_eq!(column(&status, "connections"), vec![json!(2); 3]);
    assert_eq!(
        sum(&status, "decisions"),
        6,
        "one decision per connection: 6 for 63 requests"
    );
    assert_eq!(pool_status(&status)["connection_skew"], 1.0);
    assert_eq!(pool_status(&status)["request_skew"], Value::Null);
    assert_eq!(sum(&status, "bytes_out"), 4848);
    assert!(column(&status, "active_connections").iter().all(|a| a == 0));

    let metrics = admin_get(&running, "/metrics").await.text();
    for line in [
        "trafik_backend_connections_total{pool=\"takip\",backend=\"".to_owned(),
        "trafik_pool_connection_skew{pool=\"takip\"} 1\n".to_owned(),
        format!(
            "trafik_backend_bytes_in_total{{pool=\"takip\",backend=\"{}\",name=\"k1\"}} ",
            addresses[0]
        ),
        "trafik_backend_bytes_out_total{".to_owned(),
    ] {
        assert!(metrics.contains(&line), "{line:?} missing from\n{metrics}");
    }
    assert!(
        !metrics.contains("trafik_pool_request_skew{"),
        "undefined, so absent"
    );
    stop(running).await;
}

#[tokio::test]
async fn the_same_mix_through_an_http_pool_evens_out_the_requests() {
    let replicas = replicas(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = plan(&addresses);
    // One worker keeps one idle upstream connection per replica, as the course's balancer.
    plan.workers = 1;
    let running = trafik_proxy::start(plan).unwrap();

    let (written, _) = course_clients(web(&running), &[1, 2, 4, 8, 16, 32]).await;
    let counted = counted_at_replicas(&replicas).await;
    assert!(counted.iter().all(|c| c["istek"] == 21), "{counted:?}");
    let status = status(&running).await;
    assert_eq!(sum(&status, "decisions"), 63, "one decision per request");
    assert_eq!(column(&status, "requests"), vec![json!(21); 3]);
    assert_eq!(pool_status(&status)["request_skew"], 1.0);
    // Six client connections became one kept-alive upstream connection per replica.
    assert_eq!(column(&status, "connections"), vec![json!(1); 3]);
    assert_eq!(pool_status(&status)["connection_skew"], 1.0);
    // Counted on the upstream sockets: more than the clients wrote (Forwarded, Via…).
    assert!(sum(&status, "bytes_out") > written as u64);
    assert!(
        column(&status, "bytes_in")
            .iter()
            .all(|b| b.as_u64().unwrap() > 0)
    );
    stop(running).await;
}

/// A backend that reads until the client has finished sending, then answers how much it got
/// and closes.
async fn counting_backend() -> SocketAddr {
    let listener = TcpListener::bind(LOOPBACK_ANY_PORT).await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut received = Vec::new();
                if stream.read_to_end(&mut received).await.is_ok() {
                    let _ = stream
                        .write_all(format!("got {}", received.len()).as_bytes())
                        .await;
                }
            });
        }
    });
    address
}

/// Fails the test instead of hanging when a relay never finishes.
async fn bounded<T>(what: &str, work: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), work)
        .await
        .unwrap_or_else(|_| panic!("{what} never finished"))
}

#[tokio::test]
async fn a_client_that_stops_sending_still_gets_the_answer() {
    let backend = counting_backend().await;
    let running = trafik_proxy::start(tcp_plan(&[backend])).unwrap();
    let mut client = TcpStream::connect(web(&running)).await.unwrap();
    let upload = vec![7u8; 1 << 20];
    client.write_all(&upload).await.unwrap();
    // Half-close: the backend sees the end of the upload while the answer can still come back.
    client.shutdown().await.unwrap();
    let mut answer = String::new();
    bounded("the answer", client.read_to_string(&mut answer))
        .await
        .unwrap();
    assert_eq!(answer, "got 1048576");
    wait_for_status(&running, |s| sum(s, "bytes_in") == 11).await;
    let status = status(&running).await;
    assert_eq!(sum(&status, "bytes_out"), 1 << 20);
    stop(running).await;
}

#[tokio::test]
async fn a_backend_that_stops_sending_still_gets_the_upload() {
    let listener = TcpListener::bind(LOOPBACK_ANY_PORT).await.unwrap();
    let address = listener.local_addr().unwrap();
    // Greets, ends its sending, then counts what the client uploads.
    let backend = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        stream.write_all(b"merhaba").await.unwrap();
        stream.shutdown().await.unwrap();
        let mut upload = Vec::new();
        stream.read_to_end(&mut upload).await.unwrap();
        upload.len()
    });
    let running = trafik_proxy::start(tcp_plan(&[address])).unwrap();
    let mut client = TcpStream::connect(web(&running)).await.unwrap();
    let mut greeting = Vec::new();
    // The backend's end reaches the client as one, while the client's side stays open.
    bounded("the greeting", client.read_to_end(&mut greeting))
        .await
        .unwrap();
    assert_eq!(greeting, b"merhaba");
    client.write_all(&vec![7u8; 1 << 20]).await.unwrap();
    client.shutdown().await.unwrap();
    assert_eq!(bounded("the upload", backend).await.unwrap(), 1 << 20);
    stop(running).await;
}

#[tokio::test]
async fn a_failed_connect_is_retried_on_another_backend() {
    let replicas = replicas(1).await;
    let dead = refusing_port();
    let running = trafik_proxy::start(tcp_plan(&[dead.address, replicas[0].address()])).unwrap();
    for _ in 0..4 {
        let answer = get(web(&running), "/takip/TR-1").await;
        assert_eq!(answer.header("x-kopya"), Some("k1"));
    }
    let status = status(&running).await;
    let k1 = &pool_status(&status)["backends"][0];
    let k2 = &pool_status(&status)["backends"][1];
    assert_eq!(k1["connections"], 0);
    assert!(k1["failures"].as_u64().unwrap() > 0);
    assert_eq!(k1["failures"], k1["decisions"]);
    assert_eq!(k2["connections"], 4);
    assert_eq!(pool_status(&status)["unreachable"], 0);
    assert_eq!(
        pool_status(&status)["connection_skew"],
        Value::Null,
        "k1 has none"
    );
    stop(running).await;
}

#[tokio::test]
async fn with_no_backend_reachable_the_client_connection_is_closed() {
    let dead = refusing_port();
    let mut plan = tcp_plan(&[dead.address]);
    plan.pools[0].retries = 0;
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = TcpStream::connect(web(&running)).await.unwrap();
    let mut buffer = [0u8; 16];
    let read = bounded("the close", client.read(&mut buffer)).await;
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let status = status(&running).await;
    assert_eq!(pool_status(&status)["unreachable"], 1);
    assert_eq!(pool_status(&status)["backends"][0]["failures"], 1);
    stop(running).await;
}

#[tokio::test]
async fn a_connection_with_no_bytes_moving_is_closed_after_the_idle_timeout() {
    let backend = counting_backend().await;
    let mut plan = tcp_plan(&[backend]);
    plan.client.idle_timeout = Duration::from_secs(1);
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = TcpStream::connect(web(&running)).await.unwrap();
    client.write_all(b"hello").await.unwrap();
    let mut rest = Vec::new();
    // The client never finishes sending; only the idle timeout can end this.
    let read = bounded("the idle close", client.read_to_end(&mut rest)).await;
    assert!(rest.is_empty(), "the backend never answered: {read:?}");
    wait_for_status(&running, |s| {
        column(s, "active_connections") == vec![json!(0)]
    })
    .await;
    stop(running).await;
}

#[tokio::test]
async fn hashing_on_the_client_address_keeps_each_client_on_one_backend() {
    let replicas = replicas(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = tcp_plan(&addresses);
    plan.pools[0].algorithm = Algorithm::ConsistentHash;
    plan.pools[0].hash_key = Some(HashKey::ClientIp);
    let running = trafik_proxy::start(plan).unwrap();
    let mut homes = std::collections::BTreeMap::new();
    for client in 1..=12u8 {
        for _ in 0..3 {
            // Each client address of 127.0.0.0/8 is one client.
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket
                .bind(SocketAddr::from(([127, 0, 0, client], 0)))
                .unwrap();
            let stream = socket.connect(web(&running)).await.unwrap();
            let (sender, connection) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(connection);
            let mut sender = sender;
            let response = sender
                .send_request(
                    http::Request::get("/takip/TR-1")
                        .body(http_body_util::Empty::<bytes::Bytes>::new())
                        .unwrap(),
                )
                .await
                .unwrap();
            let replica = response.headers()["x-kopya"].to_str().unwrap().to_owned();
            homes.entry(client).or_insert_with(Vec::new).push(replica);
        }
    }
    for (client, replicas) in &homes {
        assert!(
            replicas.iter().all(|r| *r == replicas[0]),
            "127.0.0.{client}: {replicas:?}"
        );
    }
    let used: std::collections::BTreeSet<_> = homes.values().map(|r| r[0].clone()).collect();
    assert!(used.len() > 1, "twelve clients all hashed to {used:?}");
    stop(running).await;
}

#[tokio::test]
async fn health_checks_take_a_stopped_replica_out_of_a_tcp_pool() {
    let mut replicas = replicas(3).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = tcp_plan(&addresses);
    plan.pools[0].health = Some(course_health_check());
    plan.pools[0].retries = 0;
    let running = trafik_proxy::start(plan).unwrap();

    replicas.remove(1).stop().await;
    wait_for_status(&running, |s| {
        pool_status(s)["backends"][1]["healthy"] == false
    })
    .await;
    let (by_replica, failures) = tally(web(&running), 30).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(by_replica.get("k1"), Some(&15));
    assert_eq!(by_replica.get("k3"), Some(&15));
    let status = status(&running).await;
    assert_eq!(pool_status(&status)["backends"][1]["failures"], 0);
    assert_eq!(pool_status(&status)["unreachable"], 0);
    stop(running).await;
}

/// A backend that reads a PROXY protocol header and then `payload_length` bytes, and reports
/// both.
async fn proxy_protocol_backend(
    payload_length: usize,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Receiver<(Vec<u8>, Vec<u8>)>,
) {
    let listener = TcpListener::bind(LOOPBACK_ANY_PORT).await.unwrap();
    let address = listener.local_addr().unwrap();
    let (report, reported) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut received = Vec::new();
        let mut buffer = [0u8; 256];
        loop {
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(n > 0, "the connection closed early");
            received.extend_from_slice(&buffer[..n]);
            let header = ppp::HeaderResult::parse(&received);
            let length = match header {
                ppp::HeaderResult::V1(Ok(h)) => h.header.len(),
                ppp::HeaderResult::V2(Ok(h)) => h.len(),
                _ => continue,
            };
            if received.len() >= length + payload_length {
                let payload = received.split_off(length);
                let _ = report.send((received, payload));
                return;
            }
        }
    });
    (address, reported)
}

#[tokio::test]
async fn the_proxy_protocol_tells_the_backend_who_the_client_is() {
    for version in [ProxyProtocol::V1, ProxyProtocol::V2] {
        let (backend, reported) = proxy_protocol_backend(5).await;
        let mut plan = tcp_plan(&[backend]);
        plan.pools[0].proxy_protocol = Some(version);
        let running = trafik_proxy::start(plan).unwrap();
        let mut client = TcpStream::connect(web(&running)).await.unwrap();
        client.write_all(b"hello").await.unwrap();
        let (header, payload) = bounded("the header", reported).await.unwrap();
        assert_eq!(payload, b"hello");
        let (from, to) = (client.local_addr().unwrap(), web(&running));
        let expected: ppp::v2::Addresses = (from, to).into();
        match ppp::HeaderResult::parse(&header) {
            ppp::HeaderResult::V1(Ok(h)) if version == ProxyProtocol::V1 => {
                assert_eq!(
                    h.addresses.to_string(),
                    format!(
                        "PROXY TCP4 {} {} {} {}\r\n",
                        from.ip(),
                        to.ip(),
                        from.port(),
                        to.port()
                    )
                );
            }
            ppp::HeaderResult::V2(Ok(h)) if version == ProxyProtocol::V2 => {
                assert_eq!(h.addresses, expected);
            }
            other => panic!("{version}: {other:?}"),
        }
        // The header is the backend's bytes too.
        wait_for_status(&running, |s| {
            sum(s, "bytes_out") == (header.len() + 5) as u64
        })
        .await;
        stop(running).await;
    }
}

// A layer-4 pool runs the same pool call as an HTTP one (`trafik_proxy::pool::Call`): what the
// pool promises about backends holds for connections too.

#[tokio::test]
async fn passive_health_ejects_a_backend_that_refuses_connections() {
    let replicas = replicas(1).await;
    let dead = refusing_port();
    let mut plan = tcp_plan(&[dead.address, replicas[0].address()]);
    plan.pools[0].outlier = Some(trafik_balance::OutlierRules::default());
    let running = trafik_proxy::start(plan).unwrap();
    let (by_replica, failures) = tally(web(&running), 12).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(by_replica.get("k1"), Some(&12));
    let status = status(&running).await;
    let refusing = &pool_status(&status)["backends"][0];
    assert_eq!(refusing["ejected"], true, "{refusing}");
    // Ejected after its consecutive connect failures, then passed over.
    let failed = refusing["failures"].as_u64().unwrap();
    assert!((1..12).contains(&failed), "{refusing}");
    stop(running).await;
}

#[tokio::test]
async fn a_backend_back_from_a_failed_health_check_ramps_up_over_its_slow_start() {
    let mut replicas = replicas_apart(2).await;
    let addresses: Vec<_> = replicas.iter().map(|r| r.address()).collect();
    let mut plan = tcp_plan(&addresses);
    // Checks that a loaded machine cannot flap (a refused connect still fails at once): k1
    // marked down by a slow probe would send k2 everything.
    plan.pools[0].health = Some(HealthPlan {
        timeout: Duration::from_secs(2),
        fall: 3,
        ..course_health_check()
    });
    plan.pools[0].slow_start = Duration::from_secs(3600);
    let running = trafik_proxy::start(plan).unwrap();

    replicas.remove(1).stop().await;
    wait_for_status(&running, |s| {
        pool_status(s)["backends"][1]["healthy"] == false
    })
    .await;
    let _back = replica("k2", addresses[1], Duration::ZERO).await;
    wait_for_status(&running, |s| {
        pool_status(s)["backends"][1]["healthy"] == true
    })
    .await;
    // An hour's ramp has barely begun: k2 keeps the ramp's floor, a tenth of its picks (two
    // of its twenty, on average; nine or more once in ten thousand runs), instead of all.
    let (by_replica, failures) = tally(web(&running), 40).await;
    assert!(failures.is_empty(), "{failures:?}");
    let to_k2 = by_replica.get("k2").copied().unwrap_or(0);
    assert!(to_k2 <= 8, "{by_replica:?}");
    stop(running).await;
}

#[tokio::test]
async fn the_circuit_breaker_limits_connections_to_a_backend() {
    let backend = counting_backend().await;
    let mut plan = tcp_plan(&[backend]);
    plan.pools[0].max_requests_per_backend = 1;
    let running = trafik_proxy::start(plan).unwrap();
    // The first connection holds the backend's one place while it sends.
    let mut first = TcpStream::connect(web(&running)).await.unwrap();
    first.write_all(b"ilk").await.unwrap();
    wait_for_status(&running, |s| sum(s, "connections") == 1).await;
    let mut second = TcpStream::connect(web(&running)).await.unwrap();
    let mut buffer = [0u8; 16];
    let read = bounded("the refusal", second.read(&mut buffer)).await;
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    first.shutdown().await.unwrap();
    let mut answer = String::new();
    bounded("the answer", first.read_to_string(&mut answer))
        .await
        .unwrap();
    assert_eq!(answer, "got 3");
    let status = status(&running).await;
    assert_eq!(pool_status(&status)["at_limit"], 1);
    assert_eq!(sum(&status, "decisions"), 1);
    stop(running).await;
}

#[tokio::test]
async fn retries_of_failed_connects_stay_within_the_budget() {
    let replicas = replicas(1).await;
    let refusing: Vec<RefusingPort> = (0..3).map(|_| refusing_port()).collect();
    let mut backends: Vec<_> = refusing.iter().map(|port| port.address).collect();
    backends.push(replicas[0].address());
    let mut plan = tcp_plan(&backends);
    plan.pools[0].retries = 3;
    // No budget at all: a failed connect is the client's failure.
    plan.pools[0].retry.budget_ratio = 0.0;
    plan.pools[0].retry.budget_floor = 0;
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = TcpStream::connect(web(&running)).await.unwrap();
    let _ = client
        .write_all(b"GET /takip/TR-1 HTTP/1.1\r\nHost: k\r\nConnection: close\r\n\r\n")
        .await;
    let mut answer = Vec::new();
    let read = bounded("the close", client.read_to_end(&mut answer)).await;
    assert!(
        answer.is_empty(),
        "{read:?}: {}",
        String::from_utf8_lossy(&answer)
    );
    let status = status(&running).await;
    assert_eq!(pool_status(&status)["retries_refused"], 1, "{status}");
    assert_eq!(pool_status(&status)["unreachable"], 1);
    assert_eq!(sum(&status, "decisions"), 1);
    stop(running).await;
}
