//! The HTTP/1.1 client against servers that send exactly the bytes a test gives them: interim
//! 1xx responses before the final one, and chunk sizes that do not fit in memory.

use std::io;
use std::net::SocketAddr;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use trafik_load::Target;
use trafik_load::client::{Answer, Connection, Scratch};

/// A server on a free loopback port that answers the n-th request on its first connection with
/// `answers[n]`, written as is, then holds the connection until the client closes it.
async fn scripted_server(answers: Vec<Vec<u8>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut received = Vec::new();
        for answer in answers {
            // Read up to the end of the next request head (the client sends no body).
            while !received.windows(4).any(|w| w == b"\r\n\r\n") {
                let mut chunk = [0u8; 4096];
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => received.extend_from_slice(&chunk[..n]),
                }
            }
            let end = received.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            received.drain(..end);
            if stream.write_all(&answer).await.is_err() {
                return;
            }
        }
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest).await;
    });
    address
}

fn target(address: SocketAddr) -> Target {
    let url = format!("http://{address}/takip/TR-{{n}}");
    Target::new(&[url], http::Method::GET, Vec::new(), Bytes::new()).unwrap()
}

async fn exchange(answers: Vec<Vec<u8>>, requests: u64) -> Vec<io::Result<Answer>> {
    let target = target(scripted_server(answers).await);
    let mut connection = Connection::open(&target, false, None).await.unwrap();
    let mut scratch = Scratch::default();
    let mut results = Vec::new();
    for n in 0..requests {
        results.push(connection.send(&target, n, &mut scratch).await);
    }
    results
}

#[tokio::test]
async fn interim_1xx_responses_are_skipped_and_the_final_one_is_read() {
    let results = exchange(
        vec![
            b"HTTP/1.1 100 Continue\r\n\r\n\
              HTTP/1.1 103 Early Hints\r\nLink: </stil.css>; rel=preload\r\n\r\n\
              HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                .to_vec(),
            // The connection is still in step: the next request gets its own answer.
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
        ],
        2,
    )
    .await;
    let statuses: Vec<u16> = results.iter().map(|r| r.as_ref().unwrap().status).collect();
    assert_eq!(statuses, [200, 404]);
    assert!(!results[0].as_ref().unwrap().close);
}

#[tokio::test]
async fn a_101_is_final_and_the_connection_is_not_reused() {
    let results = exchange(
        vec![
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
                .to_vec(),
        ],
        1,
    )
    .await;
    let answer = results[0].as_ref().unwrap();
    assert_eq!(answer.status, 101);
    assert!(
        answer.close,
        "after 101 the connection speaks another protocol"
    );
}

#[tokio::test]
async fn a_chunk_size_that_overflows_is_a_protocol_error() {
    for size in ["ffffffffffffffff", "fffffffffffffffe", "10000000000000000"] {
        let head = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{size}\r\nabc");
        let results = exchange(vec![head.into_bytes()], 1).await;
        let error = results[0].as_ref().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{size}: {error}");
    }
}

#[tokio::test]
async fn endless_interim_responses_are_a_protocol_error() {
    let many = "HTTP/1.1 103 Early Hints\r\n\r\n".repeat(1000);
    let results = exchange(vec![many.into_bytes()], 1).await;
    let error = results[0].as_ref().unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
}
