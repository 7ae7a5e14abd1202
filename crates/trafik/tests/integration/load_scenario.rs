//! `trafik load --scenario` against a real application on a free port: a journey that logs in,
//! takes a token and a session from the answer and makes three calls with them; checks,
//! captures, think time, per-step thresholds and the file's errors.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use trafik_test_support::{json, load};

/// What the application saw.
#[derive(Default)]
struct Seen {
    /// Requests by path (the tracking paths under `/takip`).
    paths: HashMap<String, u64>,
    /// Users that logged in, by name.
    users: HashMap<String, u64>,
    /// Login answer times by session number.
    logins: HashMap<u64, Instant>,
    /// When each session's `/takip` request arrived.
    tracked: HashMap<u64, Instant>,
    /// `/yanki` requests as they arrived: the path and query as sent, `x-not`, the body.
    echoed: Vec<(String, String, String)>,
    /// Requests that came over HTTP/2.
    http2: u64,
}

/// A small tracking application: `POST /giris` with `{"kullanici": NAME}` answers a token in
/// JSON, a session number in `x-oturum` and a cookie; `/takip/NO` wants the token,
/// `/profil` the cookie, `POST /olay` the token and a JSON body; `/yavas` takes 30 ms;
/// `/yanki…` keeps what it was sent. It speaks HTTP/1.1 and, by prior knowledge, HTTP/2.
struct App {
    address: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    _runtime: tokio::runtime::Runtime,
}

impl App {
    fn start() -> App {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let address = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let state = seen.clone();
        runtime.spawn(async move {
            let sessions = Arc::new(std::sync::atomic::AtomicU64::new(0));
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (state, sessions) = (state.clone(), sessions.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let (state, sessions) = (state.clone(), sessions.clone());
                        async move {
                            Ok::<_, std::convert::Infallible>(
                                answer(request, &state, &sessions).await,
                            )
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                });
            }
        });
        App {
            address,
            seen,
            _runtime: runtime,
        }
    }

    fn count(&self, path: &str) -> u64 {
        let seen = self.seen.lock().unwrap();
        seen.paths.get(path).copied().unwrap_or(0)
    }
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

async fn answer(
    request: Request<Incoming>,
    seen: &Mutex<Seen>,
    sessions: &std::sync::atomic::AtomicU64,
) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_owned();
    let sent_uri = request.uri().to_string();
    if request.version() == http::Version::HTTP_2 {
        seen.lock().unwrap().http2 += 1;
    }
    let key = if path.starts_with("/takip/") {
        "/takip".to_owned()
    } else {
        path.clone()
    };
    *seen.lock().unwrap().paths.entry(key).or_default() += 1;
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let token_user =
        header("authorization").and_then(|a| a.strip_prefix("Bearer t-").map(str::to_owned));
    let cookie = header("cookie");
    let session: Option<u64> = header("x-oturum").and_then(|s| s.parse().ok());
    let note = header("x-not").unwrap_or_default();
    let method = request.method().clone();
    let body = request.into_body().collect().await.unwrap().to_bytes();
    let unauthorized = || reply(StatusCode::UNAUTHORIZED, "{\"hata\":\"yetki\"}".into());
    match (method.as_str(), path.as_str()) {
        ("POST", "/giris") => {
            let Ok(login) = serde_json::from_slice::<serde_json::Value>(&body) else {
                return reply(StatusCode::BAD_REQUEST, "{}".into());
            };
            let Some(user) = login["kullanici"].as_str() else {
                return reply(StatusCode::BAD_REQUEST, "{}".into());
            };
            let session = sessions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            {
                let mut seen = seen.lock().unwrap();
                *seen.users.entry(user.to_owned()).or_default() += 1;
                seen.logins.insert(session, Instant::now());
            }
            let mut response = reply(
                StatusCode::OK,
                serde_json::json!({"token": format!("t-{user}"), "kullanici": user}).to_string(),
            );
            let headers = response.headers_mut();
            headers.insert("x-oturum", session.into());
            headers.insert(
                "set-cookie",
                format!("oturum={user}; Path=/; HttpOnly").parse().unwrap(),
            );
            response
        }
        ("GET", tracking) if tracking.starts_with("/takip/") => {
            let Some(user) = token_user else {
                return unauthorized();
            };
            if let Some(session) = session {
                seen.lock().unwrap().tracked.insert(session, Instant::now());
            }
            let no = tracking.trim_start_matches("/takip/");
            reply(
                StatusCode::OK,
                serde_json::json!({"no": no, "sahip": user, "durum": "yolda"}).to_string(),
            )
        }
        ("GET", "/profil") => match cookie.as_deref().and_then(|c| c.strip_prefix("oturum=")) {
            Some(user) => reply(
                StatusCode::OK,
                serde_json::json!({"kullanici": user}).to_string(),
            ),
            None => unauthorized(),
        },
        ("POST", "/olay") => {
            if token_user.is_none() {
                return unauthorized();
            }
            match serde_json::from_slice::<serde_json::Value>(&body) {
                Ok(event) => reply(
                    StatusCode::CREATED,
                    serde_json::json!({"kabul": true, "olay": event}).to_string(),
                ),
                Err(_) => reply(StatusCode::BAD_REQUEST, "{}".into()),
            }
        }
        (_, echo) if echo.starts_with("/yanki") => {
            let body = String::from_utf8_lossy(&body).into_owned();
            seen.lock().unwrap().echoed.push((sent_uri, note, body));
            reply(StatusCode::OK, "{}".into())
        }
        ("GET", "/yavas") => {
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            reply(StatusCode::OK, "{}".into())
        }
        _ => reply(StatusCode::NOT_FOUND, "{}".into()),
    }
}

/// A folder of its own for a test's files.
fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trafik-scenario-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The journey: log in, then three calls with the token, the session and the cookie.
fn journey(app: &App) -> String {
    journey_at(&format!("http://{}", app.address))
}

/// The journey against `base` (`http://…` or `https://…`).
fn journey_at(base: &str) -> String {
    format!(
        r#"threshold = "p99 < 10s"

[data]
file = "kullanicilar.csv"

[[flow]]
name = "takip"

[[flow.step]]
name = "giris"
method = "POST"
url = "{base}/giris"
headers = {{ content-type = "application/json" }}
body = '{{"kullanici": "{{{{row.kullanici}}}}"}}'
capture = {{ token = ".token", oturum = "header:x-oturum" }}
check = {{ status = 200, body = '.token | startswith("t-")' }}
threshold = "p99 < 10s"

[[flow.step]]
name = "sorgu"
url = "{base}/takip/{{{{row.no}}}}"
headers = {{ authorization = "Bearer {{{{token}}}}", x-oturum = "{{{{oturum}}}}" }}
think = "100ms"
check = {{ status = 200, body = '.sahip != null and .durum == "yolda"' }}
threshold = ["p99 < 10s", "max <= 10s"]

[[flow.step]]
name = "profil"
url = "{base}/profil"
check = {{ body = '.kullanici | length > 0' }}

[[flow.step]]
name = "olay"
method = "POST"
url = "{base}/olay"
headers = {{ authorization = "Bearer {{{{token}}}}" }}
body = '{{"no": "{{{{row.no}}}}", "tur": "teslim"}}'
check = {{ status = [201, 202], body = ".kabul" }}
"#
    )
}

#[test]
fn a_journey_logs_in_takes_a_token_and_makes_three_calls_with_checks_and_thresholds() {
    let app = App::start();
    let dir = folder("journey");
    std::fs::write(
        dir.join("kullanicilar.csv"),
        "kullanici,no\nayse,TR-1\nveli,TR-2\nzeynep,TR-3\n",
    )
    .unwrap();
    let scenario = dir.join("takip.toml");
    std::fs::write(&scenario, journey(&app)).unwrap();
    let page = dir.join("rapor.html");
    let output = load(&[
        "--scenario",
        scenario.to_str().unwrap(),
        "--rate",
        "20",
        "--duration",
        "1s",
        "--json",
        "--report",
        page.to_str().unwrap(),
    ]);
    let report = json(&output);
    let verdict = if report["rate_held"] == true { 0 } else { 98 };
    assert_eq!(
        output.status.code(),
        Some(verdict),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let flows = report["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 1);
    let started = flows[0]["started"].as_u64().unwrap();
    assert_eq!(started, report["sent"].as_u64().unwrap());
    assert!(started >= 10, "{started} flows started");
    assert_eq!(flows[0]["completed"], started, "{report}");
    assert_eq!(flows[0]["failed"], 0);

    let steps = report["steps"].as_array().unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["giris", "sorgu", "profil", "olay"]);
    for step in steps {
        assert_eq!(step["flow"], "takip");
        assert_eq!(step["sent"], started, "{step}");
        assert_eq!(step["completed"], started, "{step}");
        assert_eq!(step["failed_checks"], 0, "{step}");
        assert_eq!(step["errors"], 0, "{step}");
        for key in ["p50", "p99", "max"] {
            assert!(step["latency_ms"][key].as_f64().unwrap() > 0.0, "{step}");
        }
        for threshold in step["thresholds"].as_array().unwrap() {
            assert_eq!(threshold["passed"], true, "{threshold}");
        }
    }
    assert_eq!(steps[1]["thresholds"].as_array().unwrap().len(), 2);
    assert_eq!(report["thresholds"][0]["threshold"], "p99 < 10s");
    assert_eq!(report["thresholds"][0]["passed"], true);
    assert_eq!(report["passed"], true);
    assert_eq!(report["completed"], 4 * started);
    // The HTML report has the per-step table with the thresholds' verdicts.
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<h2>Steps</h2>"), "{html}");
    assert!(
        html.contains("<td>takip</td><td>sorgu</td>")
            && html.contains("p99 &lt; 10s passed, max &lt;= 10s passed"),
        "{html}"
    );
    // A percentile curve for the run with the scenario's threshold, and one per step with
    // the step's thresholds as lines.
    assert!(html.contains("Latency by percentile, whole run (ms)"));
    assert!(html.contains("Latency by percentile, step takip/sorgu (ms)"));
    assert_eq!(
        html.matches("aria-label=\"Latency by percentile, step ")
            .count(),
        4,
        "{html}"
    );
    assert_eq!(html.matches("class=\"threshold\"").count(), 1 + 1 + 2);
    let curve = steps[1]["percentile_curve"].as_array().unwrap();
    assert_eq!(curve.last().unwrap()["percentile"], 100.0);
    assert_eq!(curve.last().unwrap()["ms"], steps[1]["latency_ms"]["max"]);

    // The application saw every step, each user of the data file logged in, and each
    // session's query came at least the think time after its login was answered.
    for path in ["/giris", "/takip", "/profil", "/olay"] {
        assert_eq!(app.count(path), started, "{path}");
    }
    let seen = app.seen.lock().unwrap();
    assert_eq!(seen.users.len(), 3, "{:?}", seen.users);
    assert_eq!(seen.tracked.len() as u64, started);
    for (session, tracked) in &seen.tracked {
        let login = seen.logins[session];
        assert!(
            tracked.duration_since(login) >= std::time::Duration::from_millis(100),
            "session {session} queried {:?} after its login",
            tracked.duration_since(login)
        );
    }
}

/// Runs `scenario` (written into a folder of its own with `files`) at `rate` for a second and
/// gives its JSON report, having checked that every flow started and finished.
fn run_scenario(
    name: &str,
    scenario: &str,
    files: &[(&str, &str)],
    rate: &str,
) -> serde_json::Value {
    let dir = folder(name);
    for (file, text) in files {
        std::fs::write(dir.join(file), text).unwrap();
    }
    let path = dir.join("senaryo.toml");
    std::fs::write(&path, scenario).unwrap();
    let output = load(&[
        "--scenario",
        path.to_str().unwrap(),
        "--rate",
        rate,
        "--duration",
        "1s",
        "--json",
    ]);
    let report = json(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    let flow = &report["flows"][0];
    assert_eq!(report["dropped"], 0, "{report}");
    assert_eq!(flow["completed"], flow["started"], "{report}");
    report
}

#[test]
fn rows_go_to_each_virtual_user_or_to_each_iteration() {
    let rows: String = std::iter::once("no".to_owned())
        .chain((0..500).map(|i| format!("N-{i}")))
        .collect::<Vec<_>>()
        .join("\n");
    for per in ["user", "iteration"] {
        let app = App::start();
        let scenario = format!(
            r#"[data]
file = "satirlar.csv"
per = "{per}"

[[flow]]
name = "tekrar"
iterations = 3

[[flow.step]]
name = "yanki"
url = "http://{}/yanki/{{{{row.no}}}}"
"#,
            app.address
        );
        let report = run_scenario(per, &scenario, &[("satirlar.csv", &rows)], "10");
        let users = report["flows"][0]["started"].as_u64().unwrap();
        assert!(users >= 5, "{report}");
        assert_eq!(report["steps"][0]["sent"], 3 * users, "{report}");
        let mut seen: Vec<String> = app
            .seen
            .lock()
            .unwrap()
            .echoed
            .iter()
            .map(|(uri, _, _)| uri.trim_start_matches("/yanki/").to_owned())
            .collect();
        seen.sort_by_key(|no| no[2..].parse::<u64>().unwrap());
        // Rows are dealt in turn: a user keeps its row for its three iterations, or each
        // iteration of every user takes the next one.
        let expected: Vec<String> = match per {
            "user" => (0..users)
                .flat_map(|i| [format!("N-{i}"), format!("N-{i}"), format!("N-{i}")])
                .collect(),
            _ => (0..3 * users).map(|i| format!("N-{i}")).collect(),
        };
        assert_eq!(seen, expected, "per = {per}");
    }
}

#[test]
fn values_in_urls_are_percent_encoded_and_headers_and_bodies_keep_them_as_written() {
    let app = App::start();
    let scenario = format!(
        r#"[data]
file = "adlar.csv"

[[flow]]
name = "ara"

[[flow.step]]
name = "yanki"
method = "POST"
url = "http://{}/yanki/{{{{row.ad}}}}?q={{{{row.ad}}}}&dil=tr"
headers = {{ x-not = "{{{{row.not}}}}" }}
body = "{{{{row.ad}}}}"
check = {{ status = 200 }}
"#,
        app.address
    );
    let data = "ad,not\n\"Ayşe Kaya & Veli/Ğ?\",a & b=c\n";
    let report = run_scenario("kodlama", &scenario, &[("adlar.csv", data)], "5");
    let users = report["flows"][0]["completed"].as_u64().unwrap();
    assert!(users >= 2, "{report}");
    let value = "Ay%C5%9Fe%20Kaya%20%26%20Veli%2F%C4%9E%3F";
    let seen = app.seen.lock().unwrap();
    assert_eq!(seen.echoed.len() as u64, users);
    for (uri, note, body) in &seen.echoed {
        assert_eq!(uri, &format!("/yanki/{value}?q={value}&dil=tr"));
        assert_eq!(note, "a & b=c");
        assert_eq!(body, "Ayşe Kaya & Veli/Ğ?");
    }
}

#[test]
fn failed_checks_are_counted_apart_from_errors_and_a_slow_step_fails_its_threshold() {
    let app = App::start();
    let dir = folder("failing");
    std::fs::write(
        dir.join("kullanicilar.jsonl"),
        "{\"kullanici\": \"ayse\"}\n{\"kullanici\": \"veli\"}\n",
    )
    .unwrap();
    let refused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let base = format!("http://{}", app.address);
    let scenario = dir.join("bozuk.toml");
    std::fs::write(
        &scenario,
        format!(
            r#"[data]
file = "kullanicilar.jsonl"

[[flow]]
name = "yanlis"

[[flow.step]]
name = "giris"
method = "POST"
url = "{base}/giris"
body = '{{"kullanici": "{{{{row.kullanici}}}}"}}'
check = {{ status = 201 }}

[[flow.step]]
name = "hic"
url = "{base}/profil"

[[flow]]
name = "yavas"

[[flow.step]]
name = "yavas"
url = "{base}/yavas"
threshold = "p99 < 5ms"

[[flow.step]]
name = "kapali"
url = "http://{refused}/"
"#
        ),
    )
    .unwrap();
    let output = load(&[
        "--scenario",
        scenario.to_str().unwrap(),
        "--rate",
        "10",
        "--duration",
        "1s",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(99));
    let report = json(&output);
    let step = |name: &str| {
        report["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap()
            .clone()
    };
    let flows = report["flows"].as_array().unwrap();
    let (wrong, slow) = (&flows[0], &flows[1]);
    let wrong_started = wrong["started"].as_u64().unwrap();
    let slow_started = slow["started"].as_u64().unwrap();
    assert!(wrong_started > 0 && slow_started > 0, "{flows:?}");
    assert_eq!(wrong["failed"], wrong_started);
    assert_eq!(slow["failed"], slow_started);

    // Answered 200 where 201 was expected: a failed check, not an error; the flow stops there.
    let login = step("giris");
    assert_eq!(login["failed_checks"], wrong_started);
    assert_eq!(login["errors"], 0);
    assert_eq!(login["failures"]["status 200, expected 201"], wrong_started);
    assert_eq!(step("hic")["sent"], 0);
    assert_eq!(app.count("/profil"), 0);

    // Nothing listens: an error, not a failed check; the slow step passed its checks but not
    // its threshold.
    let closed = step("kapali");
    assert_eq!(closed["errors"], slow_started);
    assert_eq!(closed["failed_checks"], 0);
    let slow_step = step("yavas");
    assert_eq!(slow_step["completed"], slow_started);
    let threshold = &slow_step["thresholds"][0];
    assert_eq!(threshold["passed"], false);
    assert!(
        threshold["value_ms"].as_f64().unwrap() >= 30.0,
        "{threshold}"
    );

    assert_eq!(report["errors"]["failed_check"], wrong_started);
    assert_eq!(report["errors"]["connect_refused"], slow_started);
    assert_eq!(report["passed"], false);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("threshold p99 < 5ms on step yavas/yavas failed"),
        "{stderr}"
    );
}

#[test]
fn every_error_in_a_scenario_file_is_reported_at_its_line_and_column() {
    let dir = folder("errors");
    std::fs::write(dir.join("veri.csv"), "kullanici\nayse\n").unwrap();
    let scenario = dir.join("hatali.toml");
    let text = r#"threshold = "p97 < 5ms"

[data]
file = "veri.csv"
per = "request"

[[flow]]
name = "takip"
weight = 0
iterations = -2

[[flow.step]]
name = "giris"
methd = "POST"
url = "http://127.0.0.1:1/giris"

[[flow.step]]
name = "sorgu"
url = "http://127.0.0.1:1/takip/{{row.no}}?t={{token}}"
capture = { x = ".a | nosuch" }
check = { status = 700 }
think = "soon"

[[flow.step]]
name = "olay"
url = "ftp://127.0.0.1:1/olay"
"#;
    std::fs::write(&scenario, text).unwrap();
    let output = load(&["--scenario", scenario.to_str().unwrap(), "--rate", "10"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let name = scenario.display().to_string();
    let line = |needle: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    for (needle, field, message) in [
        ("p97", "threshold", "expected PERCENTILE < DURATION"),
        ("weight = 0", "flow[0].weight", "at least 1"),
        ("per = ", "data.per", "expected \"user\""),
        (
            "iterations",
            "flow[0].iterations",
            "at least 1 iteration, found -2",
        ),
        ("methd", "flow[0].step[0].methd", "unknown field `methd`"),
        (
            "row.no",
            "flow[0].step[1].url",
            "no column \"no\" (its columns: row.kullanici)",
        ),
        (
            "row.no",
            "flow[0].step[1].url",
            "nothing captures \"token\"",
        ),
        ("nosuch", "flow[0].step[1].capture.x", "jq: undefined"),
        ("700", "flow[0].step[1].check.status", "from 100 to 599"),
        ("soon", "flow[0].step[1].think", ""),
        (
            "ftp",
            "flow[0].step[2].url",
            "expected a URL such as http://",
        ),
    ] {
        let place = format!("error: {name}:{}:", line(needle));
        assert!(
            stderr.lines().any(|l| l.starts_with(&place)
                && l.contains(&format!(": {field}: "))
                && l.contains(message)),
            "no {place}…{field}: {message} in\n{stderr}"
        );
    }
    assert!(
        stderr.contains("errors in the scenario; nothing was sent"),
        "{stderr}"
    );
}

#[test]
fn the_example_scenario_runs_against_the_replica() {
    let upstream = trafik_test_support::Upstream::start(&[]);
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/load");
    let dir = folder("example");
    let text = std::fs::read_to_string(examples.join("takip.toml")).unwrap();
    std::fs::write(
        dir.join("takip.toml"),
        text.replace("127.0.0.1:8080", &upstream.address),
    )
    .unwrap();
    std::fs::copy(
        examples.join("kullanicilar.csv"),
        dir.join("kullanicilar.csv"),
    )
    .unwrap();
    let output = load(&[
        "--scenario",
        dir.join("takip.toml").to_str().unwrap(),
        "--rate",
        "20",
        "--duration",
        "1s",
        "--json",
    ]);
    let report = json(&output);
    for step in report["steps"].as_array().unwrap() {
        assert_eq!(step["errors"], 0, "{step}");
        assert_eq!(step["failed_checks"], 0, "{step}");
        assert!(step["completed"].as_u64().unwrap() > 0, "{step}");
    }
    let flows = report["flows"].as_array().unwrap();
    assert_eq!(
        flows.iter().map(|f| &f["name"]).collect::<Vec<_>>(),
        ["takip", "olay"]
    );
    // Three of every four users track, one reports an event.
    let started = |f: usize| flows[f]["started"].as_u64().unwrap();
    assert!(started(0) >= 3 * started(1) - 3, "{flows:?}");
}

#[test]
fn with_http2_a_journeys_steps_speak_h2c_by_prior_knowledge() {
    let app = App::start();
    let dir = folder("http2");
    std::fs::write(dir.join("kullanicilar.csv"), "kullanici,no\nayse,TR-1\n").unwrap();
    let scenario = dir.join("takip.toml");
    std::fs::write(&scenario, journey(&app)).unwrap();
    let output = load(&[
        "--scenario",
        scenario.to_str().unwrap(),
        "--rate",
        "10",
        "--duration",
        "1s",
        "--http2",
        "--json",
    ]);
    let report = json(&output);
    let started = report["flows"][0]["started"].as_u64().unwrap();
    assert!(started > 0);
    for step in report["steps"].as_array().unwrap() {
        assert_eq!(step["completed"], started, "{step}");
    }
    // Every step of every journey came over HTTP/2, captures and the cookie jar working as
    // over HTTP/1.1.
    assert_eq!(app.seen.lock().unwrap().http2, 4 * started);
    assert_eq!(app.count("/profil"), started);
}

#[test]
fn a_journey_over_https_trusts_the_ca_it_is_given_and_a_failed_handshake_is_an_error() {
    let app = App::start();
    let demo = |file: &str| format!("{}/../../examples/certs/{file}", env!("CARGO_MANIFEST_DIR"));
    let (cert, key) = (demo("localhost.pem"), demo("localhost.key"));
    let app_address = app.address.to_string();
    let proxy = trafik_test_support::Proxy::start(
        &[],
        &["--to", &app_address, "--tls-cert", &cert, "--tls-key", &key],
    );
    let port = proxy.address.rsplit(':').next().unwrap().to_owned();
    let dir = folder("https");
    std::fs::write(dir.join("kullanicilar.csv"), "kullanici,no\nayse,TR-1\n").unwrap();
    let scenario = dir.join("takip.toml");
    std::fs::write(&scenario, journey_at(&format!("https://localhost:{port}"))).unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--scenario",
            scenario.to_str().unwrap(),
            "--rate",
            "10",
            "--duration",
            "1s",
            "--json",
        ];
        args.extend_from_slice(extra);
        json(&load(&args))
    };
    let ca = demo("ca.pem");
    // Over HTTP/1.1, and over HTTP/2 offered by ALPN.
    for extra in [&["--cacert", &ca][..], &["--cacert", &ca, "--http2"][..]] {
        let report = run(extra);
        let started = report["flows"][0]["started"].as_u64().unwrap();
        assert!(started > 0, "{extra:?}");
        for step in report["steps"].as_array().unwrap() {
            assert_eq!(step["completed"], started, "{extra:?}: {step}");
        }
    }
    // The demo CA is not among the system's roots: the login's handshake fails, an error and
    // not a failed check.
    let report = run(&[]);
    assert_eq!(report["steps"][0]["errors"], report["flows"][0]["started"]);
    assert_eq!(report["errors"]["tls"], report["flows"][0]["started"]);
    assert_eq!(report["steps"][0]["failed_checks"], 0);
    // And why: rustls' reason, counted.
    assert_eq!(
        report["tls_failures"]["invalid peer certificate: UnknownIssuer"], report["errors"]["tls"],
        "{report}"
    );
}
