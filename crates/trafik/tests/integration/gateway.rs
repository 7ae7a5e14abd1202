//! The API gateway's examples (lessons 11, 12, 14 and 15) run as they are, on the course's
//! ports, each test in a network namespace of its own, against project-owned stand-ins of the
//! course's services (`gecit/servis.mjs`, `elci/tasiyici.mjs`). The expected bodies are the
//! course's own outputs (`gecit/calistir.expected.txt`, `kenar-bff/olc.expected.txt`,
//! `elci/calistir.expected.txt`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use trafik_test_support::{INSIDE_NAMESPACE, Trafik, run_in_own_network_namespace};

/// `/takip/TR-4821` as gecit.mjs answers it: 183 bytes.
const AGGREGATED: &str = r#"{"takipNo":"TR-4821","durum":"dagitimda","bolge":"35","guncellenme":"2026-03-11T08:24:00Z","rota":["34","41","35"],"ucret":{"tarife":9600,"indirim":1440,"net":8160,"sozlesmeNo":"S7"}}"#;
/// `/takip/TR-9007`, which has no fee record: 114 bytes (the course's "eksik parcali toplama").
const PARTIAL: &str = r#"{"takipNo":"TR-9007","durum":"kabul","bolge":"34","guncellenme":"2026-03-11T07:02:00Z","rota":["34"],"ucret":null}"#;
const NOT_FOUND: &str = r#"{"hata":"bulunamadi"}"#;
/// What both ambassadors answer for TR-4821: 95 bytes.
const AMBASSADOR: &str = r#"{"takipNo":"TR-4821","durum":"dagitimda","bolge":"35","guncellenme":"2026-03-11T08:24:00.000Z"}"#;

// ---- stand-ins of the course's services ------------------------------------------------------

/// How a stand-in answers one request path: status and body.
type Handler = fn(&str) -> (u16, String);

/// What a stand-in does before answering a path: wait, or fail with a 500; and whether its
/// requests are held until others arrive.
#[derive(Clone, Default)]
struct Behaviour {
    rules: Arc<Mutex<Vec<(String, Duration, bool)>>>,
    meeting: Arc<Meeting>,
}

/// Requests held until `parties` of them have arrived, so that a test sees calls overlap as an
/// order of events (the last one arrived while the first was unanswered) instead of a duration.
#[derive(Default)]
struct Meeting {
    state: Mutex<MeetingState>,
    changed: Condvar,
}

#[derive(Default)]
struct MeetingState {
    /// 0: requests are not held.
    parties: usize,
    arrived: usize,
    met: bool,
}

impl Behaviour {
    /// Paths containing `needle` wait `delay`, then answer (or fail with 500 when `fail`).
    fn set(&self, needle: &str, delay: Duration, fail: bool) {
        self.rules
            .lock()
            .unwrap()
            .push((needle.to_owned(), delay, fail));
    }

    /// Holds every request until `parties` requests have arrived (or, if they never do, for
    /// five seconds: past the gateway example's 2 s part timeout).
    fn hold_until(&self, parties: usize) {
        self.meeting.state.lock().unwrap().parties = parties;
    }

    /// Whether the requests held all arrived while the first was still held.
    fn met(&self) -> bool {
        self.meeting.state.lock().unwrap().met
    }

    fn meet(&self) {
        let mut state = self.meeting.state.lock().unwrap();
        if state.parties == 0 {
            return;
        }
        state.arrived += 1;
        if state.arrived == state.parties {
            state.met = true;
            self.meeting.changed.notify_all();
            return;
        }
        let _held = self
            .meeting
            .changed
            .wait_timeout_while(state, Duration::from_secs(5), |state| !state.met)
            .unwrap();
    }

    fn for_path(&self, path: &str) -> (Duration, bool) {
        let rules = self.rules.lock().unwrap();
        rules
            .iter()
            .rev()
            .find(|(needle, ..)| path.contains(needle.as_str()))
            .map_or((Duration::ZERO, false), |(_, delay, fail)| (*delay, *fail))
    }
}

/// A keep-alive HTTP/1.1 server on `address`, a thread per connection.
fn stand_in(address: &str, handler: Handler, behaviour: Behaviour) {
    let listener = TcpListener::bind(address).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let behaviour = behaviour.clone();
            std::thread::spawn(move || serve_connection(stream, handler, &behaviour));
        }
    });
}

fn serve_connection(stream: TcpStream, handler: Handler, behaviour: &Behaviour) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
        }
        let path = request_line.split(' ').nth(1).unwrap_or("/").to_owned();
        behaviour.meet();
        let (delay, fail) = behaviour.for_path(&path);
        std::thread::sleep(delay);
        let (status, body) = if fail {
            (500, r#"{"hata":"ic hata"}"#.to_owned())
        } else {
            handler(&path)
        };
        let head = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(body.as_bytes()).is_err()
        {
            return;
        }
    }
}

/// gecit/servis.mjs's status service (8471): the record after `takipNo`, as Node writes it.
fn durum(path: &str) -> (u16, String) {
    let no = path.rsplit('/').next().unwrap_or("");
    let record = match no {
        "TR-4821" => {
            r#""durum":"dagitimda","bolge":"35","guncellenme":"2026-03-11T08:24:00Z","rota":["34","41","35"]"#
        }
        "TR-9007" => {
            r#""durum":"kabul","bolge":"34","guncellenme":"2026-03-11T07:02:00Z","rota":["34"]"#
        }
        _ => return (404, NOT_FOUND.to_owned()),
    };
    (200, format!(r#"{{"takipNo":"{no}",{record}}}"#))
}

/// gecit/servis.mjs's fee service (8472): only TR-4821 has a fee record.
fn ucret(path: &str) -> (u16, String) {
    match path.rsplit('/').next() {
        Some(no @ "TR-4821") => (
            200,
            format!(
                r#"{{"takipNo":"{no}","tarife":9600,"indirim":1440,"net":8160,"sozlesmeNo":"S7"}}"#
            ),
        ),
        _ => (404, NOT_FOUND.to_owned()),
    }
}

/// elci/tasiyici.mjs (8481): one record in two contracts, v1 by query, v2 by path.
fn tasiyici(path: &str) -> (u16, String) {
    match path {
        "/v1/durum?no=TR-4821" => (200, r#"{"code":"OFD","zone":"35","ts":1773217440}"#.to_owned()),
        "/v2/status/TR-4821" => (
            200,
            r#"{"state":"out_for_delivery","region":{"code":"35"},"updatedAt":"2026-03-11T08:24:00Z"}"#
                .to_owned(),
        ),
        _ => (404, r#"{"error":"not_found"}"#.to_owned()),
    }
}

/// Both services of gecit/servis.mjs on the course's ports.
fn course_services() -> Behaviour {
    let behaviour = Behaviour::default();
    stand_in("127.0.0.1:8471", durum, behaviour.clone());
    stand_in("127.0.0.1:8472", ucret, behaviour.clone());
    behaviour
}

// ---- trafik and its client -------------------------------------------------------------------

fn example(name: &str) -> String {
    let path = format!("{}/../../examples/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path).unwrap()
}

/// `trafik serve` on a config's text, once it listens.
fn serve(config: &str) -> Trafik {
    // Tests run in namespaces of their own, where process ids repeat: the clock names the file.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let path = std::env::temp_dir().join(format!("trafik-gateway-{nanos}.toml"));
    std::fs::write(&path, config).unwrap();
    let trafik = Trafik::start(
        &["serve", "-c", path.to_str().unwrap()],
        Stdio::null(),
        "listening on",
    )
    .0;
    // Read once it listens (these tests never reload): nothing is left in the temporary folder.
    let _ = std::fs::remove_file(&path);
    trafik
}

struct Answer {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

/// One GET on a new connection.
fn get(address: &str, path: &str, headers: &[&str]) -> Answer {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n{extra}\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// The admin API's Prometheus text.
fn metrics(admin: &str) -> String {
    get(admin, "/metrics", &[]).body
}

/// Leaf values of a JSON document, the course's `yaprak` (fields carried).
fn leaves(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Object(map) => map.values().map(leaves).sum(),
        serde_json::Value::Array(items) => items.iter().map(leaves).sum(),
        _ => 1,
    }
}

macro_rules! in_own_namespace {
    ($name:literal) => {
        if std::env::var_os(INSIDE_NAMESPACE).is_none() {
            return run_in_own_network_namespace($name);
        }
    };
}

// ---- lessons 11 and 12: routing and aggregation ----------------------------------------------

#[test]
fn the_gateway_example_answers_the_course_gateways_bytes() {
    in_own_namespace!("the_gateway_example_answers_the_course_gateways_bytes");
    course_services();
    let _trafik = serve(&example("gateway"));
    let gateway = "127.0.0.1:8473";

    let whole = get(gateway, "/takip/TR-4821", &[]);
    assert_eq!((whole.status, whole.body.as_str()), (200, AGGREGATED));
    assert_eq!(whole.body.len(), 183);
    assert_eq!(whole.headers.get("x-trafik-eksik"), None);

    let partial = get(gateway, "/takip/TR-9007", &[]);
    assert_eq!((partial.status, partial.body.as_str()), (200, PARTIAL));
    assert_eq!(partial.body.len(), 114);
    assert_eq!(partial.headers["x-trafik-eksik"], "ucret");

    let unknown = get(gateway, "/takip/TR-0000", &[]);
    assert_eq!((unknown.status, unknown.body.as_str()), (404, NOT_FOUND));

    // Routed: a capture picks the service among the map's names only.
    let status = get(gateway, "/takip/TR-4821/durum", &[]);
    assert_eq!((status.status, status.body.len()), (200, 115));
    let fee = get(gateway, "/takip/TR-4821/ucret", &[]);
    assert_eq!((fee.status, fee.body.len()), (200, 79));
    // Two calls carry 194 bytes; the aggregate 183.
    assert_eq!(status.body.len() + fee.body.len(), 194);
    assert_eq!(get(gateway, "/takip/TR-4821/admin", &[]).status, 404);
    assert_eq!(get(gateway, "/takip/TR-9007/ucret", &[]).status, 404);

    let counters = trafik_test_support::get_json("127.0.0.1:9473", "/status")["gateway"][0].clone();
    assert_eq!(counters["route"], "gecit /takip/{no}");
    assert_eq!(counters["calls"], 3);
    assert_eq!(counters["missing"], 1);
    assert_eq!(counters["failures"], 1);
    let parts = &counters["parts"];
    assert_eq!(
        (parts[0]["name"].as_str(), parts[0]["calls"].as_i64()),
        (Some("durum"), Some(3))
    );
    // ucret's upstream bytes: its 79-byte record and two 21-byte 404s.
    assert_eq!(parts[1]["bytes"], 79 + 21 + 21);
    // Missing from TR-9007's answer; TR-0000 had no answer to be missing from.
    assert_eq!(parts[1]["missing"], 1);
    let metrics = metrics("127.0.0.1:9473");
    assert!(
        metrics
            .contains("trafik_gateway_calls_total{route=\"gecit /takip/{no}\",part=\"ucret\"} 3\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("trafik_gateway_missing_total{route=\"gecit /takip/{no}\",part=\"\"} 1\n")
    );
    // The merge ran for the two answers that had their required part.
    assert_eq!(counters["filters"][0]["name"], "merge");
    assert_eq!(counters["filters"][0]["calls"], 2);
    assert!(metrics.contains(
        "trafik_gateway_filter_calls_total{route=\"gecit /takip/{no}\",filter=\"merge\"} 2\n"
    ));
}

#[test]
fn parts_are_called_in_parallel() {
    in_own_namespace!("parts_are_called_in_parallel");
    let services = course_services();
    // Neither service answers until both parts' calls have arrived. Called one after the
    // other, the first part would be held past its 2 s timeout and the merge would fail on
    // any machine; called together, they only need to leave trafik within 2 s of each other,
    // where the old bound gave a busy machine 300 ms for the whole exchange.
    services.hold_until(2);
    let _trafik = serve(&example("gateway"));
    let answer = get("127.0.0.1:8473", "/takip/TR-4821", &[]);
    assert_eq!(answer.body, AGGREGATED);
    assert!(services.met(), "the two parts' calls never overlapped");
}

#[test]
fn a_slow_part_hits_its_timeout_and_its_contract_decides() {
    in_own_namespace!("a_slow_part_hits_its_timeout_and_its_contract_decides");
    let services = course_services();
    services.set("/ucret/", Duration::from_secs(3), false);
    let config = example("gateway").replace(
        "timeout = \"2s\"\nmissing = \"null\"",
        "timeout = \"100ms\"\nmissing = \"null\"",
    );
    assert!(config.contains("100ms"));
    let trafik = serve(&config);
    let answer = get("127.0.0.1:8473", "/takip/TR-4821", &[]);
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.body,
        AGGREGATED.split(r#","ucret""#).next().unwrap().to_owned() + r#","ucret":null}"#
    );
    assert_eq!(answer.headers["x-trafik-eksik"], "ucret");
    drop(trafik);

    let _trafik = serve(&config.replace(
        "timeout = \"100ms\"\nmissing = \"null\"",
        "timeout = \"100ms\"\nmissing = \"fail\"",
    ));
    assert_eq!(get("127.0.0.1:8473", "/takip/TR-4821", &[]).status, 504);
}

#[test]
fn a_failing_part_is_answered_by_its_contract() {
    in_own_namespace!("a_failing_part_is_answered_by_its_contract");
    let services = course_services();
    services.set("/ucret/", Duration::ZERO, true);
    let gateway = example("gateway");
    let status_only = AGGREGATED.split(r#","ucret""#).next().unwrap();
    for (contract, status, body) in [
        ("null", 200, format!(r#"{status_only},"ucret":null}}"#)),
        ("omit", 200, format!("{status_only}}}")),
        ("fail", 500, r#"{"hata":"ic hata"}"#.to_owned()),
    ] {
        let config = gateway.replace("missing = \"null\"", &format!("missing = \"{contract}\""));
        // The example's merge writes an absent `.ucret` as null too; this one copies only the
        // parts present, which shows `omit`.
        let config = config.replace(
            "merge = '.durum + {ucret: (.ucret | if . then {tarife, indirim, net, sozlesmeNo} else null end)}'",
            "merge = '.durum + (if has(\"ucret\") then {ucret: .ucret} else {} end)'",
        );
        let trafik = serve(&config);
        let answer = get("127.0.0.1:8473", "/takip/TR-4821", &[]);
        assert_eq!(
            (answer.status, answer.body),
            (status, body),
            "missing = {contract}"
        );
        if contract != "fail" {
            assert_eq!(answer.headers["x-trafik-eksik"], "ucret");
        }
        drop(trafik);
    }
}

// ---- lesson 14: backend for frontend ---------------------------------------------------------

#[test]
fn the_bff_example_gives_each_client_its_fields_in_fewer_requests_and_bytes() {
    in_own_namespace!("the_bff_example_gives_each_client_its_fields_in_fewer_requests_and_bytes");
    course_services();
    let _trafik = serve(&example("bff"));
    let edge = "127.0.0.1:8474";
    let five = "TR-4821,TR-4821,TR-4821,TR-4821,TR-4821";
    let answers = [
        get(edge, "/mobil/takip/TR-4821", &[]),
        get(edge, "/web/takip/TR-4821", &[]),
        get(edge, &format!("/panel/takip?no={five}"), &[]),
    ];
    let sizes: Vec<usize> = answers.iter().map(|a| a.body.len()).collect();
    // The course's "on yuz icin backend" rows: 78, 115 and 551 bytes; 3 requests, 744 bytes.
    assert_eq!(sizes, [78, 115, 551]);
    assert_eq!(sizes.iter().sum::<usize>(), 744);
    let wanted: [&[&str]; 3] = [
        &["takipNo", "durum", "guncellenme"],
        &["takipNo", "durum", "bolge", "guncellenme", "rota"],
        &["takipNo", "durum", "ucret"],
    ];
    let mut carried = 0;
    for (answer, fields) in answers.iter().zip(wanted) {
        assert_eq!(answer.status, 200);
        let value: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        let records = value
            .as_array()
            .cloned()
            .unwrap_or_else(|| vec![value.clone()]);
        for record in &records {
            let mut keys: Vec<&str> = record
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            let mut fields = fields.to_vec();
            keys.sort_unstable();
            fields.sort_unstable();
            // Every field carried is one the client uses: none unused (37 with one edge).
            assert_eq!(keys, fields);
        }
        carried += leaves(&value);
    }
    assert_eq!(carried, 40);

    // The same projections chosen by a header.
    let by_header = get(edge, "/takip/TR-4821", &["x-istemci: mobil"]);
    assert_eq!(by_header.body, answers[0].body);
    assert_eq!(
        get(edge, "/takip/TR-4821", &["x-istemci: web"]).body,
        answers[1].body
    );
    assert_eq!(get(edge, "/takip/TR-4821", &[]).body, AGGREGATED);
}

#[test]
fn a_batch_answers_in_request_order_whatever_order_the_records_arrive_in() {
    in_own_namespace!("a_batch_answers_in_request_order_whatever_order_the_records_arrive_in");
    let services = course_services();
    services.set("/durum/TR-4821", Duration::from_millis(300), false);
    let _trafik = serve(&example("bff"));
    let answer = get("127.0.0.1:8474", "/panel/takip?no=TR-4821,TR-9007", &[]);
    assert_eq!(answer.status, 200);
    let value: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    let order: Vec<&str> = value
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["takipNo"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["TR-4821", "TR-9007"]);
    assert_eq!(value[1]["ucret"], serde_json::Value::Null);
    assert_eq!(answer.headers["x-trafik-eksik"], "ucret");
    // An unknown record fails the list with its 404; an item that could leave its path is refused.
    assert_eq!(
        get("127.0.0.1:8474", "/panel/takip?no=TR-4821,TR-0000", &[]).status,
        404
    );
    assert_eq!(
        get("127.0.0.1:8474", "/panel/takip?no=TR-4821,..", &[]).status,
        400
    );
    assert_eq!(get("127.0.0.1:8474", "/panel/takip", &[]).body, "[]");
    let too_many = vec!["TR-9007"; 101].join(",");
    let refused = get(
        "127.0.0.1:8474",
        &format!("/panel/takip?no={too_many}"),
        &[],
    );
    assert_eq!(refused.status, 400);
}

/// A status service whose every record carries 600 KiB of padding.
fn heavy_durum(path: &str) -> (u16, String) {
    let number = path.rsplit('/').next().unwrap_or_default();
    let padding = "x".repeat(600 * 1024);
    (
        200,
        format!(r#"{{"takipNo":"{number}","durum":"kabul","dolgu":"{padding}"}}"#),
    )
}

/// Probe finding: a batch held every record's part answers, parsed, until the last arrived, so
/// 100 items of 4 MiB answers gathered gigabytes for one request. All of a request's part
/// answers now share one budget (32 MiB); past it the answer is a 502 that says so, whatever
/// the parts' contracts say of missing parts.
#[test]
fn a_batch_whose_answers_together_pass_the_budget_is_refused_not_gathered() {
    in_own_namespace!("a_batch_whose_answers_together_pass_the_budget_is_refused_not_gathered");
    stand_in("127.0.0.1:8471", heavy_durum, Behaviour::default());
    stand_in("127.0.0.1:8472", ucret, Behaviour::default());
    let _trafik = serve(&example("bff"));
    let one = get("127.0.0.1:8474", "/panel/takip?no=A1", &[]);
    assert_eq!(one.status, 200, "{}", &one.body[..one.body.len().min(200)]);
    let items: Vec<String> = (1..=60).map(|n| format!("A{n}")).collect();
    let many = get(
        "127.0.0.1:8474",
        &format!("/panel/takip?no={}", items.join(",")),
        &[],
    );
    assert_eq!(
        many.status,
        502,
        "{}",
        &many.body[..many.body.len().min(200)]
    );
    assert!(
        many.body.contains("more than one answer may hold"),
        "{}",
        many.body
    );
}

// ---- lesson 15: the ambassador ---------------------------------------------------------------

#[test]
fn both_ambassadors_give_the_service_the_same_95_bytes() {
    in_own_namespace!("both_ambassadors_give_the_service_the_same_95_bytes");
    stand_in("127.0.0.1:8481", tasiyici, Behaviour::default());
    let _v1 = serve(&example("ambassador-v1"));
    let _v2 = serve(&example("ambassador-v2"));
    for address in ["127.0.0.1:8480", "127.0.0.1:8489"] {
        let answer = get(address, "/durum/TR-4821", &[]);
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (200, AMBASSADOR),
            "{address}"
        );
        assert_eq!(answer.body.len(), 95);
        let unknown = get(address, "/durum/TR-0000", &[]);
        assert_eq!(
            (unknown.status, unknown.body.as_str()),
            (404, r#"{"takipNo":"TR-0000","hata":"bulunamadi"}"#),
            "{address}"
        );
    }
}
