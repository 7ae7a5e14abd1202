//! An `h3` listener built from a plan, over real loopback sockets: HTTP/3 requests go through
//! the same pipeline to an HTTP/2 backend, whose trailers (of a gRPC answer) reach the client as
//! HTTP/3 trailers.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use trafik_proxy::ListenerKind;
use trafik_proxy::plan::UpstreamProtocol;
use trafik_test_support::proxy::h3::H3Client;
use trafik_test_support::proxy::tls::{TestCa, h2_backend};
use trafik_test_support::proxy::*;

#[tokio::test]
async fn an_h3_answer_carries_the_backends_trailers_as_http3_trailers() {
    let (backend, seen) = h2_backend(None, 100, Duration::ZERO).await;
    let ca = TestCa::new("trafik h3 test CA");
    let site = ca.issue(&["kargo.test"]);
    let mut plan = plan(&[backend]);
    plan.pools[0].protocol = UpstreamProtocol::H2c;
    let routes = std::mem::take(routes(&mut plan));
    plan.listeners[0].kind = ListenerKind::H3 {
        routes,
        certificates: vec![site.for_listener()],
        managed: Vec::new(),
        client_auth: None,
    };
    let running = trafik_proxy::start(plan).unwrap();
    let mut client = H3Client::connect(web(&running), "kargo.test", &ca).await;
    for i in 0..3 {
        // trafik passes trailers on for gRPC answers.
        let request = Request::post(format!("https://kargo.test/takip/TR-{i}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (answer, trailers) = client
            .send_for_trailers(request, Bytes::from_static(b"{}"))
            .await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        // The backend saw an HTTP/2 request (the pool's protocol), not HTTP/3.
        assert_eq!(answer.text(), format!("HTTP/2.0 /takip/TR-{i}"));
        let trailers = trailers.expect("trailers");
        assert_eq!(trailers.get("x-trailer").unwrap(), "end");
    }
    assert_eq!(seen.requests.load(std::sync::atomic::Ordering::Relaxed), 3);
    stop(running).await;
}
