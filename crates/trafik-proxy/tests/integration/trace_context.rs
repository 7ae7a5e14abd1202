//! W3C trace context through a real proxy to a real upstream, and the spans exported over
//! OTLP/HTTP to a collector stand-in this test runs (a real HTTP server on a free port).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use trafik_proxy::{OtlpPlan, TracingPlan};
use trafik_test_support::proxy::*;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A collector: every POSTed body, parsed as JSON.
async fn collector() -> (std::net::SocketAddr, Arc<Mutex<Vec<Value>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let store = received.clone();
    let address = hyper_backend(move |request: Request<_>| {
        let store = store.clone();
        async move {
            assert_eq!(request.uri().path(), "/v1/traces");
            let body: hyper::body::Incoming = request.into_body();
            let bytes = body.collect().await?.to_bytes();
            let value: Value = serde_json::from_slice(&bytes).expect("JSON");
            store.lock().unwrap().push(value);
            Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from("{}"))))
        }
    })
    .await;
    (address, received)
}

/// Every span the collector received.
fn spans(received: &Mutex<Vec<Value>>) -> Vec<Value> {
    let mut all = Vec::new();
    for export in received.lock().unwrap().iter() {
        for resource in export["resourceSpans"].as_array().unwrap() {
            assert_eq!(
                resource["resource"]["attributes"][0]["value"]["stringValue"],
                "kargo-edge"
            );
            for scope in resource["scopeSpans"].as_array().unwrap() {
                all.extend(scope["spans"].as_array().unwrap().iter().cloned());
            }
        }
    }
    all
}

/// The request's headers as the upstream received them.
async fn upstream_sees(web: std::net::SocketAddr, headers: &[(&str, &str)]) -> Value {
    let mut request = Request::get("/takip/1").header("host", "kargo");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let answer = Client::connect(web)
        .await
        .send(request.body(Full::default()).unwrap())
        .await;
    assert_eq!(answer.status, 200);
    answer.json()["headers"].clone()
}

fn fields(traceparent: &Value) -> Vec<String> {
    traceparent
        .as_str()
        .expect("a traceparent upstream")
        .split('-')
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_is_passed_on_with_a_span_per_hop_and_exported() {
    let upstream = echo_server(Duration::ZERO).await;
    let (collector, received) = collector().await;
    let mut plan = plan(&[upstream]);
    plan.tracing = TracingPlan {
        start: true,
        otlp: Some(OtlpPlan {
            endpoint: format!("http://{collector}/v1/traces").parse().unwrap(),
            service_name: "kargo-edge".into(),
        }),
    };
    let running = trafik_proxy::start(plan).expect("starts");
    let web = web(&running);

    // A valid parent: the same trace, trafik's own span as the parent, the state kept.
    let seen = upstream_sees(web, &[("traceparent", PARENT), ("tracestate", "rojo=1")]).await;
    let passed = fields(&seen["traceparent"]);
    assert_eq!(passed[0], "00");
    assert_eq!(passed[1], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_ne!(passed[2], "00f067aa0ba902b7", "a new span id for this hop");
    assert_eq!(passed[2].len(), 16);
    assert_eq!(passed[3], "01");
    assert_eq!(seen["tracestate"], "rojo=1");

    // None: a new trace starts here.
    let started = fields(&upstream_sees(web, &[]).await["traceparent"]);
    assert_eq!(started[1].len(), 32);
    assert_ne!(started[1], "00000000000000000000000000000000");
    assert_eq!(started[3], "01");

    // Malformed (upper-case hex): ignored, its tracestate dropped, a new trace started.
    let malformed = PARENT.to_uppercase();
    let seen = upstream_sees(
        web,
        &[("traceparent", &malformed), ("tracestate", "rojo=1")],
    )
    .await;
    let restarted = fields(&seen["traceparent"]);
    assert_ne!(restarted[1], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert!(seen.get("tracestate").is_none(), "{seen}");

    // The collector gets three SERVER spans with those ids.
    let deadline = Instant::now() + Duration::from_secs(10);
    while spans(&received).len() < 3 {
        assert!(Instant::now() < deadline, "spans: {:?}", spans(&received));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let spans = spans(&received);
    let find = |trace: &str| {
        spans
            .iter()
            .find(|s| s["traceId"] == trace)
            .unwrap_or_else(|| panic!("no span of {trace}: {spans:?}"))
    };
    let child = find("4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(child["spanId"], passed[2].as_str());
    assert_eq!(child["parentSpanId"], "00f067aa0ba902b7");
    assert_eq!(child["kind"], 2);
    assert_eq!(child["name"], "GET /takip/1");
    let root = find(&started[1]);
    assert_eq!(root["spanId"], started[2].as_str());
    assert_eq!(root["parentSpanId"], "");
    let start: u128 = root["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
    let end: u128 = root["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
    assert!(start > 0 && start <= end);
    find(&restarted[1]);
    stop(running).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_start_a_request_without_context_gets_none() {
    let upstream = echo_server(Duration::ZERO).await;
    let running = trafik_proxy::start(plan(&[upstream])).expect("starts");
    let web = web(&running);
    let seen = upstream_sees(web, &[("tracestate", "rojo=1")]).await;
    assert!(seen.get("traceparent").is_none(), "{seen}");
    assert_eq!(
        seen["tracestate"], "rojo=1",
        "no context: trafik is a plain hop"
    );
    // A malformed parent is dropped, with its state.
    let seen = upstream_sees(web, &[("traceparent", "00-zz"), ("tracestate", "rojo=1")]).await;
    assert!(seen.get("traceparent").is_none(), "{seen}");
    assert!(seen.get("tracestate").is_none(), "{seen}");
    // Propagation itself needs no setting.
    let passed = fields(&upstream_sees(web, &[("traceparent", PARENT)]).await["traceparent"]);
    assert_eq!(passed[1], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_ne!(passed[2], "00f067aa0ba902b7");
    stop(running).await;
}
