//! `trafik load` against real `trafik upstream` processes: verdicts as exit statuses, the JSON
//! and HTML outputs, and HTTP/2.

use trafik_test_support::{Upstream, get_json, json, load};

#[test]
fn a_run_within_its_threshold_passes_with_status_0_and_documents_itself_in_json() {
    let upstream = Upstream::start(&[]);
    let url = upstream.url("/takip/TR-{n}");
    let output = load(&[
        &url,
        "--rate",
        "200",
        "--duration",
        "1s",
        "--threshold",
        "500ms",
        "--json",
    ]);
    let report = json(&output);
    // Passed: status 0, unless this machine was too busy to send all 200 within the second
    // (the last sends still queued when the window closes are dropped): then the verdict is
    // that the rate was not held, 98.
    let verdict = if report["rate_held"] == true { 0 } else { 98 };
    assert_eq!(
        output.status.code(),
        Some(verdict),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for key in [
        "target_rate",
        "achieved_rate",
        "sent",
        "completed",
        "late",
        "dropped",
        "errors",
        "latency_ms",
        "service_time_ms",
        "threshold_ms",
        "over_threshold",
        "passed",
        "intervals",
        "quarters",
        "spike",
        "server_counters",
    ] {
        assert!(report.get(key).is_some(), "the JSON lacks {key}");
    }
    for key in ["p50", "p90", "p95", "p99", "p999", "max"] {
        assert!(
            report["latency_ms"][key].as_f64().is_some(),
            "latency_ms.{key}"
        );
        assert!(
            report["service_time_ms"][key].as_f64().is_some(),
            "service_time_ms.{key}"
        );
    }
    assert_eq!(report["planned"], 200);
    assert_eq!(report["intervals"][0]["planned"], 200);
    let sent = report["sent"].as_u64().unwrap();
    let dropped = report["dropped"].as_u64().unwrap();
    assert_eq!(sent + dropped, 200, "every planned send is sent or dropped");
    // Only sends queued as the window closes are dropped: half the plan would mean the
    // generator stood still for half a second.
    assert!(dropped < 100, "{dropped} dropped");
    assert_eq!(report["completed"], sent);
    assert_eq!(report["passed"], true);
    // The 100 ms buckets, by when requests ended, hold every answer once, in order.
    let buckets = report["buckets_100ms"].as_array().unwrap();
    let completed: u64 = buckets
        .iter()
        .map(|b| b["completed"].as_u64().unwrap())
        .sum();
    assert_eq!(completed, sent);
    let starts: Vec<u64> = buckets
        .iter()
        .map(|b| b["t_ms"].as_u64().unwrap())
        .collect();
    assert!(starts.windows(2).all(|w| w[0] < w[1]) && starts.iter().all(|t| t % 100 == 0));
    // The replica counted every request the generator sent.
    assert_eq!(get_json(&upstream.address, "/sayac")["istek"], sent);
}

#[test]
fn a_breached_threshold_exits_99() {
    let upstream = Upstream::start(&["--delay", "20ms"]);
    let output = load(&[
        &upstream.url("/takip/TR-1"),
        "--rate",
        "50",
        "--duration",
        "1s",
        "--threshold",
        "5ms",
    ]);
    assert_eq!(output.status.code(), Some(99));
    let summary = String::from_utf8_lossy(&output.stdout);
    assert!(
        summary.contains("threshold latency.p95 ≤ 5 ms: FAILED"),
        "{summary}"
    );
}

#[test]
fn a_rate_the_generator_cannot_hold_exits_98_and_says_so() {
    // One connection to a replica that takes 100 ms: at most 10 req/s, but 50 are asked for.
    let upstream = Upstream::start(&["--delay", "100ms"]);
    let output = load(&[
        &upstream.url("/takip/TR-1"),
        "--rate",
        "50",
        "--duration",
        "1s",
        "--connections",
        "1",
        "--max-connections",
        "1",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(98));
    let report = json(&output);
    assert_eq!(report["rate_held"], false);
    assert!(
        report["dropped"].as_u64().unwrap() > 20,
        "{}",
        report["dropped"]
    );
    assert!(report["late"].as_u64().unwrap() > 0);
    assert!(report["achieved_rate"].as_f64().unwrap() < 20.0);
}

#[test]
fn bad_usage_exits_2_with_a_reason() {
    for (args, expected) in [
        (
            &[
                "http://127.0.0.1:1/",
                "--rate",
                "10",
                "--threshold-on",
                "p97",
            ][..],
            "unknown threshold metric",
        ),
        (
            &["http://127.0.0.1:1/", "--rate", "10", "--no-such-option"][..],
            "--no-such-option",
        ),
        (&["http://127.0.0.1:1/"][..], "give --rate"),
        (
            &["ftp://127.0.0.1:1/", "--rate", "10"][..],
            "expected a URL such as http://",
        ),
        (
            &["http://127.0.0.1:1/", "--stages", "10s-500"][..],
            "DURATION:TARGET",
        ),
        (
            &["http://127.0.0.1:1/", "--rate", "0"][..],
            "--rate must be a positive number",
        ),
        (
            &["http://127.0.0.1:1/", "--rate", "10", "--header", "nocolon"][..],
            "NAME:VALUE",
        ),
    ] {
        let output = load(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let errors = String::from_utf8_lossy(&output.stderr);
        assert!(errors.contains(expected), "{args:?}: {errors}");
    }
}

#[test]
fn the_html_report_is_a_self_contained_page_with_plots() {
    let upstream = Upstream::start(&[]);
    let path = std::env::temp_dir().join(format!("trafik-load-{}.html", std::process::id()));
    let output = load(&[
        &upstream.url("/takip/TR-{n}"),
        "--stages",
        "1s:100,1s:300",
        "--threshold",
        "10s",
        "--report",
        path.to_str().unwrap(),
    ]);
    // Passed, or 98 when this machine was too busy to hold 300 req/s (the page is written
    // either way, and says which below).
    assert!(
        matches!(output.status.code(), Some(0 | 98)),
        "{output:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let page = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(page.starts_with("<!doctype html>"));
    assert!(page.trim_end().ends_with("</html>"));
    // The percentile curve, latency over time and rate over time.
    assert_eq!(page.matches("<svg").count(), 3);
    assert_eq!(page.matches("</svg>").count(), 3);
    assert!(
        page.contains("Latency by percentile, whole run (ms)"),
        "{page}"
    );
    // Its x axis is in decades of 1/(1-p), up to the maximum.
    for tick in [">0%</text>", ">90%</text>", ">99%</text>", ">max</text>"] {
        assert!(page.contains(tick), "{tick}: {page}");
    }
    // The latency plot and the curve draw the threshold they are judged against.
    assert!(page.contains(">threshold</text>"), "{page}");
    assert!(
        page.contains(">latency.p95 &lt;= 10000 ms</text>"),
        "{page}"
    );
    assert!(
        !page.contains("<script"),
        "no scripts: the page must work offline"
    );
    // The JSON embedded in the page parses back.
    let json = page
        .split("<details><summary>All numbers (JSON)</summary><pre>")
        .nth(1)
        .unwrap();
    let json = json
        .split("</pre>")
        .next()
        .unwrap()
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    // 0 → 100 req/s over 1 s (50 requests), then 100 → 300 over 1 s (200 requests).
    assert_eq!(report["planned"], 250);
    let verdict = if report["rate_held"] == true { 0 } else { 98 };
    assert_eq!(output.status.code(), Some(verdict), "{report}");
}

#[test]
fn http2_and_posts_with_headers_and_a_body_file() {
    let upstream = Upstream::start(&[]);
    let body = std::env::temp_dir().join(format!("trafik-load-body-{}.json", std::process::id()));
    std::fs::write(&body, "{\"olay\":\"teslim\"}").unwrap();
    let body_arg = format!("@{}", body.display());
    for http2 in [false, true] {
        let mut args = vec![
            upstream.url("/olay"),
            "--rate".into(),
            "100".into(),
            "--duration".into(),
            "1s".into(),
            "--method".into(),
            "POST".into(),
            "-H".into(),
            "x-istemci: test".into(),
            "--body".into(),
            body_arg.clone(),
            "--json".into(),
        ];
        if http2 {
            args.push("--http2".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = load(&args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report = json(&output);
        assert_eq!(report["completed"], 100, "http2 {http2}");
        assert_eq!(report["errors"]["status_4xx"], 0, "POST /olay answers 201");
    }
    let _ = std::fs::remove_file(&body);
}

#[test]
fn the_help_shows_the_request_number_placeholder_literally() {
    // Clap reads `{n}` in help text as a line break; the URL's placeholder must survive it.
    for flag in ["-h", "--help"] {
        let output = load(&[flag]);
        assert_eq!(output.status.code(), Some(0), "{flag}");
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(
            help.contains("`{n}` is replaced by the request number"),
            "{flag}: {help}"
        );
        assert!(
            help.contains("http://127.0.0.1:8080/takip/TR-{n})"),
            "{flag}: {help}"
        );
        assert!(!help.contains('\x1b'), "no terminal styles in a pipe");
    }
}

/// A loopback URL on a port nothing listens on: every connect is refused.
fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{address}/takip/TR-{{n}}")
}

#[test]
fn a_run_in_which_every_request_fails_exits_99_and_says_why() {
    let url = refused_url();
    let output = load(&[
        &url,
        "--rate",
        "100",
        "--duration",
        "1s",
        "--threshold",
        "25ms",
    ]);
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(99), "{errors}");
    assert!(
        errors.contains("failed: 100.0 % of requests failed (limit 1 %): 100 connect refused"),
        "{errors}"
    );
    let summary = String::from_utf8_lossy(&output.stdout);
    assert!(summary.contains("100 connect refused"), "{summary}");

    let path = std::env::temp_dir().join(format!("trafik-load-errors-{}.html", std::process::id()));
    let output = load(&[
        &url,
        "--rate",
        "100",
        "--duration",
        "1s",
        "--json",
        "--report",
        path.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(99));
    let report = json(&output);
    assert_eq!(report["errors"]["connect_refused"], 100);
    assert_eq!(report["error_rate"], 1.0);
    assert_eq!(report["max_error_rate"], 0.01);
    assert_eq!(report["passed"], false);
    assert_eq!(
        report["failures"][0],
        "100.0 % of requests failed (limit 1 %): 100 connect refused"
    );
    let page = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        page.contains("<td>connect refused</td><td>100</td>"),
        "{page}"
    );
}

#[test]
fn answers_of_any_status_are_measured_and_counted_as_errors_by_class() {
    // Every request waits 20 ms and is answered 404.
    let upstream = Upstream::start(&["--delay", "20ms"]);
    let url = upstream.url("/nowhere/{n}");
    let output = load(&[&url, "--rate", "50", "--duration", "1s", "--json"]);
    assert_eq!(output.status.code(), Some(99));
    let report = json(&output);
    assert_eq!(report["errors"]["status_4xx"], 50);
    assert_eq!(report["completed"], 0);
    assert!(
        report["latency_ms"]["p50"].as_f64().unwrap() >= 20.0,
        "a 404 is an answer and its latency counts: {}",
        report["latency_ms"]
    );
    assert!(report["service_time_ms"]["p50"].as_f64().unwrap() >= 20.0);
    assert_eq!(report["intervals"][0]["errors"], 50);

    // Errors may be allowed.
    let output = load(&[
        &url,
        "--rate",
        "50",
        "--duration",
        "1s",
        "--max-error-rate",
        "100%",
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn the_error_rate_limit_reads_a_percentage_or_a_fraction() {
    let url = refused_url();
    for (limit, expected) in [
        ("5", "did you mean 5%"),
        ("150%", "between 0 % and 100 %"),
        ("-0.1", "between 0 and 1"),
        ("some", "a percentage such as 1% or a fraction such as 0.01"),
    ] {
        let output = load(&[&url, "--rate", "10", "--max-error-rate", limit]);
        assert_eq!(output.status.code(), Some(2), "{limit}");
        let errors = String::from_utf8_lossy(&output.stderr);
        assert!(errors.contains(expected), "{limit}: {errors}");
    }
}

#[test]
fn flags_override_single_values_of_a_profile() {
    let upstream = Upstream::start(&[]);
    let output = load(&[
        &upstream.url("/takip/TR-{n}"),
        "--profile",
        "spike",
        "--rate",
        "20",
        "--duration",
        "2s",
        "--spike-at",
        "1s",
        "--spike-for",
        "500ms",
        "--spike-factor",
        "2",
        "--json",
    ]);
    let report = json(&output);
    assert_eq!(report["profile"], "spike");
    // 20 req/s for 2 s, doubled for half a second: 10 extra requests.
    assert_eq!(report["planned"], 50);
    assert_eq!(report["spike"]["extra_requests"], 10);
    assert_eq!(report["threshold_ms"], 25.0, "the course's threshold stays");
}

#[test]
fn the_lesson_defaults_make_the_load_lessons_server_and_single_flags_override_them() {
    let upstream = Upstream::start(&["--lesson-defaults", "--maintenance-scan", "7"]);
    assert_eq!(
        get_json(&upstream.address, "/takip?no=G1"),
        serde_json::json!({"durum": "aktarma merkezinde", "adim": 1})
    );
    assert_eq!(get_json(&upstream.address, "/any/path")["adim"], 2);
    let counters = get_json(&upstream.address, "/olcut");
    assert_eq!(counters["istek"], 2);
    assert_eq!(counters["kayit"], 2);
    assert_eq!(
        counters["kat"], 7,
        "--maintenance-scan overrides the course's 600"
    );
}

/// The demo CA and certificate for localhost in `examples/certs`.
fn demo(file: &str) -> String {
    format!("{}/../../examples/certs/{file}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn https_with_a_ca_file_or_insecure_over_http1_and_h2_and_a_failed_handshake_is_its_own_error() {
    let upstream = Upstream::start(&[]);
    let (cert, key, ca) = (demo("localhost.pem"), demo("localhost.key"), demo("ca.pem"));
    let proxy = trafik_test_support::Proxy::start(
        &[],
        &[
            "--to",
            &upstream.address,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
        ],
    );
    let port = proxy.address.rsplit(':').next().unwrap().to_owned();
    let url = format!("https://localhost:{port}/takip/TR-{{n}}");
    let run = |extra: &[&str]| {
        let mut args = vec![url.as_str(), "--rate", "50", "--duration", "1s", "--json"];
        args.extend_from_slice(extra);
        let output = load(&args);
        (output.status.code(), json(&output))
    };
    for extra in [
        &["--cacert", ca.as_str()][..],
        &["--cacert", ca.as_str(), "--http2"][..],
        &["--cacert", ca.as_str(), "--tls-version", "1.2"][..],
        &["--insecure", "--tls-version", "1.3"][..],
    ] {
        let (status, report) = run(extra);
        assert!(matches!(status, Some(0 | 98)), "{extra:?}: {report}");
        assert_eq!(report["completed"], report["sent"], "{extra:?}");
        assert!(report["sent"].as_u64().unwrap() > 0, "{extra:?}");
    }
    // The demo CA is not among the system's roots: every handshake fails, and says so.
    let (status, report) = run(&[]);
    assert_eq!(status, Some(99));
    assert_eq!(report["errors"]["tls"], report["sent"], "{report}");
    assert_eq!(report["completed"], 0);
    // Why, in rustls' words: the one reason in the JSON with every failed handshake's count,
    // and in the summary.
    let reasons = report["tls_failures"].as_object().unwrap();
    assert_eq!(reasons.len(), 1, "{report}");
    assert_eq!(
        reasons["invalid peer certificate: UnknownIssuer"], report["errors"]["tls"],
        "{report}"
    );
    let output = load(&[url.as_str(), "--rate", "20", "--duration", "1s"]);
    let summary = String::from_utf8_lossy(&output.stdout);
    assert!(
        summary.contains("TLS handshakes failed: ")
            && summary.contains(" × invalid peer certificate: UnknownIssuer"),
        "{summary}"
    );
}

#[test]
fn http2_streams_carry_several_requests_at_once_on_one_connection() {
    // Every answer takes at least 100 ms: one request at a time on one connection finishes at
    // most 11 in a 1 s closed loop (10, and the one in flight at the end).
    let upstream = Upstream::start(&["--delay", "100ms"]);
    let url = upstream.url("/takip/TR-1");
    let run = |streams: &str| {
        let output = load(&[
            &url,
            "--max",
            "--http2",
            "--streams",
            streams,
            "--connections",
            "1",
            "--duration",
            "1s",
            "--json",
        ]);
        let report = json(&output);
        assert_eq!(report["connections_opened"], 1, "{report}");
        assert_eq!(report["errors"]["reset"], 0, "{report}");
        report["completed"].as_u64().unwrap()
    };
    assert!(run("1") <= 11);
    let multiplexed = run("8");
    assert!(multiplexed > 11, "{multiplexed} answers on 8 streams");
}
