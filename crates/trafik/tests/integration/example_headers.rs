//! Every example's header commands, run as a user types them: the background services and
//! `trafik serve` first, then each command in one shell (so `TOKEN=$(…)` carries to the next
//! line). A stale hint fails here: a command that errs, an answer that differs from the one the
//! header prints below its command, or a byte count in a `(N bytes)` comment that no longer
//! holds. The examples bind the course's fixed ports, so each runs in a network namespace of its
//! own (see `run_in_own_network_namespace`), where its processes cannot outlive the test.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use trafik_test_support::{
    INSIDE_NAMESPACE, Trafik, Upstream, run_in_own_network_namespace, trafik_binary,
};

/// One command of a header, with what the header says it answers.
#[derive(Debug)]
struct Step {
    command: String,
    background: bool,
    /// The line printed under the command in the header: its whole answer.
    answer: Option<String>,
    /// From a `(N bytes)` comment on the command's line or the one under it.
    bytes: Option<usize>,
}

/// The words a header's command lines start with.
const COMMANDS: [&str; 4] = ["trafik ", "curl ", "for ", "TOKEN="];

/// Reads the steps from an example's leading comment: lines `#   COMMAND  # comment`, answers
/// on the line under a command (`#   {…}`), and further-indented comment lines that belong to
/// the command above.
fn header_steps(text: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in text.lines().take_while(|line| line.starts_with('#')) {
        let Some(body) = line.strip_prefix("#   ") else {
            continue;
        };
        if COMMANDS.iter().any(|word| body.starts_with(word)) {
            let (command, comment) = body.split_once("  #").unwrap_or((body, ""));
            let command = command.trim();
            steps.push(Step {
                background: command.ends_with('&'),
                command: command.trim_end_matches('&').trim().to_owned(),
                answer: None,
                bytes: byte_count(comment),
            });
        } else if let Some(step) = steps.last_mut() {
            if body.starts_with('{') {
                step.answer = Some(body.to_owned());
            } else if step.bytes.is_none() {
                step.bytes = byte_count(body);
            }
        }
    }
    steps
}

/// `… (551 bytes)` → 551.
fn byte_count(comment: &str) -> Option<usize> {
    let (before, _) = comment.split_once(" bytes)")?;
    before.rsplit('(').next()?.parse().ok()
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `127.0.0.1:N` ports in `text`.
fn loopback_ports(text: &str) -> Vec<u16> {
    text.split("127.0.0.1:")
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

/// Whether something listens on `port` in this namespace, read from the kernel's table rather
/// than by connecting (a probe connection to a layer-4 listener would count as a client).
fn listening(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let wanted = format!(":{port:04X}");
    table.lines().skip(1).any(|row| {
        let fields: Vec<&str> = row.split_whitespace().collect();
        fields.len() > 3 && fields[1].ends_with(&wanted) && fields[3] == "0A"
    })
}

/// Children killed by their id when the test ends, passed or not.
struct Background(Vec<Child>);

impl Drop for Background {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn walk(example: &str) {
    let root = repository();
    let text = std::fs::read_to_string(root.join("examples").join(format!("{example}.toml")))
        .expect("the example exists");
    let steps = header_steps(&text);
    assert!(
        steps.iter().any(|s| s.background) && steps.iter().any(|s| !s.background),
        "{example}: no commands found in its header: {steps:?}"
    );
    let bin = trafik_binary();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let mut background = Background(Vec::new());
    let mut ports = Vec::new();
    for step in steps.iter().filter(|s| s.background) {
        background.0.push(
            Command::new("sh")
                .args(["-c", &step.command])
                .current_dir(&root)
                .env("PATH", &path)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("sh runs"),
        );
        ports.extend(loopback_ports(&step.command));
        if step.command.contains(&format!("examples/{example}.toml")) {
            let listens = text
                .lines()
                .filter(|l| l.trim_start().starts_with("listen ="))
                .collect::<Vec<_>>()
                .join("\n");
            ports.extend(loopback_ports(&listens));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ports.iter().all(|&port| listening(port)) {
        assert!(
            Instant::now() < deadline,
            "{example}: not every one of {ports:?} listens after 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let foreground: Vec<&Step> = steps.iter().filter(|s| !s.background).collect();
    let mut script = String::new();
    for (index, step) in foreground.iter().enumerate() {
        script.push_str(&format!(
            "printf '@@step {index}\\n'\n{}\nprintf '\\n@@end {index} %d\\n' $?\n",
            step.command
        ));
    }
    let output = Command::new("bash")
        .args(["-c", &script])
        .current_dir(&root)
        .env("PATH", &path)
        .output()
        .expect("bash runs");
    let printed = String::from_utf8_lossy(&output.stdout);
    for (index, step) in foreground.iter().enumerate() {
        let start = format!("@@step {index}\n");
        let answer = printed
            .split_once(&start)
            .and_then(|(_, rest)| rest.split_once(&format!("\n@@end {index} ")))
            .map(|(answer, status)| (answer, status.lines().next().unwrap_or_default()));
        let Some((answer, status)) = answer else {
            panic!("{example}: `{}` did not finish:\n{printed}", step.command);
        };
        assert_eq!(
            status,
            "0",
            "{example}: `{}` failed: {answer}\n{}",
            step.command,
            String::from_utf8_lossy(&output.stderr)
        );
        if let Some(expected) = &step.answer {
            assert_eq!(answer.trim_end(), expected, "{example}: `{}`", step.command);
        }
        if let Some(bytes) = step.bytes {
            assert_eq!(
                answer.len(),
                bytes,
                "{example}: `{}` answered {answer}",
                step.command
            );
        }
    }
}

macro_rules! walks {
    ($($test:ident: $example:literal,)*) => {$(
        #[test]
        fn $test() {
            if std::env::var_os(INSIDE_NAMESPACE).is_none() {
                return run_in_own_network_namespace(stringify!($test));
            }
            walk($example);
        }
    )*};
}

walks! {
    gateway_header_runs_as_written: "gateway",
    bff_header_runs_as_written: "bff",
    ambassador_v1_header_runs_as_written: "ambassador-v1",
    ambassador_v2_header_runs_as_written: "ambassador-v2",
    offload_header_runs_as_written: "offload",
    l4_header_runs_as_written: "l4",
    canary_header_runs_as_written: "canary",
}

#[test]
fn a_header_is_read_into_commands_answers_and_byte_counts() {
    let steps = header_steps(
        "# Intro\n#\n#   trafik serve -c x.toml &\n#   curl -s http://a/b   # routed (79 bytes)\n\
         #   {\"a\":1}\n#   curl -s 'http://a/c'\n#        # 5 records (551 bytes)\n\n[server]\n",
    );
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert!(steps[0].background && steps[0].command == "trafik serve -c x.toml");
    assert_eq!(steps[1].bytes, Some(79));
    assert_eq!(steps[1].answer.as_deref(), Some("{\"a\":1}"));
    assert_eq!(steps[2].bytes, Some(551));
}

/// What `trafik serve` prints at start: one JSON object a line under `--log-format json`, and a
/// "try:" line whose URL answers (the ambassador's route is `/durum/{no}`, not the demo's
/// `/takip/…`); a route behind a gate or a token gets no "try:" line rather than one that
/// answers 404 or 401.
#[test]
fn startup_lines_are_json_under_log_format_json_and_the_try_line_answers() {
    if std::env::var_os(INSIDE_NAMESPACE).is_none() {
        return run_in_own_network_namespace(
            "startup_lines_are_json_under_log_format_json_and_the_try_line_answers",
        );
    }
    let root = repository();
    let carrier = Upstream::start_at("127.0.0.1:8481", &["--role", "carrier"]);
    let config = root.join("examples/ambassador-v1.toml");
    let (serve, printed) = Trafik::start(
        &[
            "--log-format",
            "json",
            "serve",
            "-c",
            config.to_str().unwrap(),
        ],
        Stdio::null(),
        "try: curl",
    );
    let mut try_url = None;
    for line in printed.lines() {
        let object: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let message = object["fields"]["message"].as_str().unwrap();
        try_url = try_url.or(message.strip_prefix("try: curl ").map(str::to_owned));
    }
    let answer = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(try_url.unwrap())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&answer.stdout), "200");
    serve.stop();
    carrier.stop();

    for gated in ["gatekeeper", "offload"] {
        // A failed assertion leaves it to the namespace, whose end kills every process in it.
        let mut child = Command::new(trafik_binary())
            .args(["serve", "-c", &format!("examples/{gated}.toml")])
            .current_dir(&root)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (lines, printed_lines) = std::sync::mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
        let mut printed = String::new();
        while !printed.contains("trafik listening on") {
            let line = printed_lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("{gated} printed no listener: {printed}"));
            printed.push_str(&line);
            printed.push('\n');
        }
        // The rest of what it printed, to the end: SIGTERM drains and exits.
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        printed.extend(printed_lines.iter().map(|line| line + "\n"));
        let _ = child.wait();
        assert!(!printed.contains("try:"), "{gated}: {printed}");
    }
}

/// The canary has two `/takip` routes, told apart by a header, each with CORS and compression:
/// each gets its own name in `/status` and its own series in `/metrics` (a scraper refuses a
/// series twice), and the templated redirect goes by its template rather than by `/`.
#[test]
fn the_canary_s_routes_each_have_their_own_name_and_series() {
    if std::env::var_os(INSIDE_NAMESPACE).is_none() {
        return run_in_own_network_namespace(
            "the_canary_s_routes_each_have_their_own_name_and_series",
        );
    }
    let config = repository().join("examples/canary.toml");
    let (serve, _) = Trafik::start(
        &["serve", "-c", config.to_str().unwrap()],
        Stdio::null(),
        "listening on",
    );
    let metrics = trafik_test_support::get_text("127.0.0.1:9910", "/metrics");
    let read = trafik_metrics_text::strict_reader::parse(&metrics)
        .unwrap_or_else(|e| panic!("{e}\n{metrics}"));
    assert_eq!(
        read.value(
            "trafik_cors_total",
            &[
                ("route", "web /takip (header x-surum=beta)"),
                ("outcome", "allowed")
            ]
        ),
        0.0
    );
    let status = trafik_test_support::get_json("127.0.0.1:9910", "/status");
    let routes: Vec<&str> = status["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["route"].as_str().unwrap())
        .collect();
    assert_eq!(
        routes,
        [
            "/takip",
            "/takip (header x-surum=beta)",
            "/eski/takip/{no}",
            "/api",
            "/takip/ic",
            "/"
        ]
    );
    serve.stop();
}
