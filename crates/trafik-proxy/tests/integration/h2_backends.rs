//! HTTP/2 backends that end an answer badly or are held up by clients: an answer cut short by a
//! reset reaches its client as cut short, and streams whose clients stop reading cannot stop
//! the other answers on the same backend connection (RFC 9113 §5.2, §8.1). The backends are the
//! h2 crate's server, driven by hand to send what a well-behaved library would not.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use trafik_proxy::plan::UpstreamProtocol;
use trafik_test_support::proxy::tls::{h2c, h2c_get};
use trafik_test_support::proxy::*;

/// An h2c backend on the h2 crate's server: each request, its body read to the end, is handed
/// with its path to `answer`, which writes whatever it likes on the stream.
async fn h2_crate_backend<F, Fut>(answer: F) -> SocketAddr
where
    F: Fn(String, h2::server::SendResponse<Bytes>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    raw_backend(move |stream| {
        let answer = answer.clone();
        async move {
            let Ok(mut connection) = h2::server::handshake(stream).await else {
                return;
            };
            while let Some(Ok((request, respond))) = connection.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let path = request.uri().path().to_owned();
                    let mut body = request.into_body();
                    while let Some(Ok(data)) = body.data().await {
                        let _ = body.flow_control().release_capacity(data.len());
                    }
                    answer(path, respond).await;
                });
            }
        }
    })
    .await
}

/// trafik in front of `backend` with the pool speaking h2c.
fn h2c_pool(backend: SocketAddr) -> trafik_proxy::Running {
    let mut plan = plan(&[backend]);
    plan.pools[0].protocol = UpstreamProtocol::H2c;
    trafik_proxy::start(plan).unwrap()
}

/// Answers 200 without a length, sends a piece of the body, then resets the stream with
/// NO_ERROR: a reset that ends nothing cleanly, as the request was sent whole.
async fn cut_short(_path: String, mut respond: h2::server::SendResponse<Bytes>) {
    let mut answer = http::Response::new(());
    answer.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/grpc"),
    );
    let Ok(mut stream) = respond.send_response(answer, false) else {
        return;
    };
    let _ = stream.send_data(Bytes::from_static(b"yarim-"), false);
    // The piece leaves before the reset (which drops what is still queued).
    tokio::time::sleep(Duration::from_millis(50)).await;
    stream.send_reset(h2::Reason::NO_ERROR);
}

#[tokio::test]
async fn an_answer_a_backend_resets_midway_reaches_the_client_as_cut_short() {
    let running = h2c_pool(h2_crate_backend(cut_short).await);

    // HTTP/1.1: a chunked body without its last chunk, the connection closed; never a
    // complete body (or a 502, had the reset come before any of it).
    let answer = raw_exchange(
        web(&running),
        b"GET /takip/TR-1 HTTP/1.1\r\nHost: kargo.test\r\n\r\n",
    )
    .await;
    let relayed = answer.starts_with("HTTP/1.1 200");
    assert!(relayed || answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(
        !(relayed && answer.contains("\r\n0\r\n\r\n")),
        "a cut answer ended as complete: {answer}"
    );

    // gRPC: the call ends with trafik's UNAVAILABLE, not as an answer without a status.
    let mut client = h2c(web(&running)).await;
    let request = Request::post("http://kargo.test/kargo.Takip/Bul")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
        .unwrap();
    let response = client.send_request(request).await.expect("an answer head");
    let status_in_head = response.headers().get("grpc-status").cloned();
    let collected = response
        .into_body()
        .collect()
        .await
        .expect("a body ended by trafik");
    let status = status_in_head.or_else(|| collected.trailers()?.get("grpc-status").cloned());
    assert_eq!(status.as_ref().map(|s| s.as_bytes()), Some(&b"14"[..]));
    running.stop();
}

/// Sends `/buyuk` as 8 MiB under flow control (counting what has gone out in `sent`),
/// anything else as `kucuk`.
fn large_or_small(
    sent: Arc<AtomicUsize>,
) -> impl Fn(
    String,
    h2::server::SendResponse<Bytes>,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>
+ Clone
+ Send
+ Sync
+ 'static {
    move |path, mut respond| {
        let sent = sent.clone();
        Box::pin(async move {
            let Ok(mut stream) = respond.send_response(http::Response::new(()), false) else {
                return;
            };
            if path != "/buyuk" {
                let _ = stream.send_data(Bytes::from_static(b"kucuk"), true);
                return;
            }
            let chunk = Bytes::from(vec![b'x'; 16 * 1024]);
            for _ in 0..512 {
                stream.reserve_capacity(chunk.len());
                while stream.capacity() < chunk.len() {
                    match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
                        Some(Ok(_)) => {}
                        _ => return,
                    }
                }
                if stream.send_data(chunk.clone(), false).is_err() {
                    return;
                }
                sent.fetch_add(chunk.len(), Ordering::SeqCst);
            }
            let _ = stream.send_data(Bytes::new(), true);
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_leave_the_backend_connection_to_the_others() {
    let sent = Arc::new(AtomicUsize::new(0));
    let running = h2c_pool(h2_crate_backend(large_or_small(sent.clone())).await);

    // Four clients ask for a large answer and grant no window: trafik can pass none of it on,
    // and the backend fills what trafik's upstream connection lets it send.
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let stream = tokio::net::TcpStream::connect(web(&running)).await.unwrap();
        let (mut client, connection) = h2::client::Builder::new()
            .initial_window_size(0)
            .handshake::<_, Bytes>(stream)
            .await
            .unwrap();
        tokio::spawn(connection);
        let request = Request::get("http://kargo.test/buyuk").body(()).unwrap();
        let (answer, _) = client.send_request(request, true).unwrap();
        stalled.push((client, answer.await.expect("the large answer's head")));
    }
    // Until the backend has sent what it can: a window's worth for each stalled stream (or
    // the whole connection's, when the streams' windows add up to more).
    let mut last = 0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = sent.load(Ordering::SeqCst);
        if now >= 1 << 20 && now == last {
            break;
        }
        last = now;
    }

    // Another client's small answer on the same backend connection still comes.
    let small = tokio::time::timeout(Duration::from_secs(30), h2c_get(web(&running), "/kucuk"))
        .await
        .expect("the small answer is not held up by the stalled streams");
    assert_eq!((small.0.status, small.0.text()), (200, "kucuk".to_owned()));
    drop(stalled);
    running.stop();
}

/// `Via` names each hop by the version of the message as received (RFC 9110 §7.6.3): an
/// answer from an h2c backend says `2`, whatever the client spoke.
#[tokio::test]
async fn an_answer_from_an_http2_backend_says_so_in_via() {
    let running = h2c_pool(
        h2_crate_backend(|_, mut respond| async move {
            let _ = respond.send_response(http::Response::new(()), true);
        })
        .await,
    );
    let mut client = Client::connect(web(&running)).await;
    let answer = client.get("/takip/TR-1").await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let via = answer.header("via").unwrap_or("");
    assert!(via.starts_with("2 "), "{via}");
    running.stop();
}
