//! The load lesson's server (`yuk/sunucu.mjs` of the course) played by a replica: every path
//! is a tracking request, `/olcut` gives the counters, and every 100th request runs a
//! maintenance pass over all records so far.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trafik_upstream::{LoadLesson, ReplicaConfig, RunningReplica};

async fn lesson_server() -> RunningReplica {
    let config = ReplicaConfig {
        name: "k1".into(),
        load_lesson: LoadLesson::course(),
        ..ReplicaConfig::default()
    };
    trafik_upstream::spawn("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap()
}

/// One request on its own connection; the status and the body parsed as JSON.
async fn request(address: SocketAddr, method: &str, path: &str) -> (u16, serde_json::Value) {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: k1\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{{}}"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split("\r\n\r\n").nth(1).unwrap();
    (status, serde_json::from_str(body).unwrap())
}

#[test]
fn the_course_values_are_the_lessons() {
    let course = LoadLesson::course();
    assert_eq!(course.wait.as_micros(), 3_000);
    assert_eq!(course.work.as_micros(), 850);
    assert_eq!(
        (course.maintenance_every, course.maintenance_scan),
        (100, 600)
    );
    assert!(course.is_on());
    assert!(!LoadLesson::default().is_on());
}

#[tokio::test]
async fn the_lessons_server_answers_any_path_and_counts_in_olcut() {
    let replica = lesson_server().await;
    let address = replica.address();
    for (n, (method, path)) in [
        ("GET", "/takip?no=G0"),
        ("GET", "/takip/TR-4821"),
        ("GET", "/"),
        ("POST", "/herhangi/bir/yol"),
    ]
    .into_iter()
    .enumerate()
    {
        let (status, body) = request(address, method, path).await;
        assert_eq!(status, 200, "{method} {path}");
        // The request's number, fixed on the way in, mod 7.
        assert_eq!(
            body,
            serde_json::json!({"durum": "aktarma merkezinde", "adim": n + 1}),
            "{method} {path}"
        );
    }
    let (status, counters) = request(address, "GET", "/olcut").await;
    assert_eq!(status, 200);
    assert_eq!(counters["istek"], 4, "/olcut is not counted");
    assert_eq!(counters["kayit"], 4, "one record per request");
    assert_eq!(counters["bakim"], 0);
    assert_eq!(counters["kat"], 600);

    // The 100th request runs the first maintenance pass: 600 scans of 100 records.
    for n in 5..=100 {
        let (status, _) = request(address, "GET", &format!("/takip?no=G{n}")).await;
        assert_eq!(status, 200);
    }
    let (_, counters) = request(address, "GET", "/olcut").await;
    assert_eq!(counters["bakim"], 1);
    assert_eq!(counters["bakimAdim"], 60_000);
    assert_eq!(counters["sonBakimAdim"], 60_000);
    replica.stop().await;
}
