//! A distributed `trafik load` on loopback: two `trafik load agent`s and a coordinator on a real
//! etcd (Debian's `etcd-server`, started here on free ports) against a real `trafik upstream`.
//! The merged counts are the sum of the agents', the merged percentiles those of all their
//! latencies together, and an agent that dies is reported with the share it did not send.

use std::process::Stdio;
use std::time::{Duration, Instant};

use trafik_load::Progress;
use trafik_load::merge::Measured;
use trafik_load::record::{Percentiles, histogram};
use trafik_test_support::{Etcd, Trafik, Upstream, get_json, json, load, trafik_binary};

const PREFIX: &str = "/yuk/";

fn agent(url: &str, name: &str) -> Trafik {
    let (agent, _) = Trafik::start(
        &[
            "load",
            "agent",
            "--etcd",
            url,
            "--etcd-prefix",
            PREFIX,
            "--name",
            name,
        ],
        Stdio::null(),
        "waiting for work",
    );
    agent
}

/// Every agent's result of the only run under the prefix.
fn results(url: &str) -> Vec<Measured> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let etcd = trafik_etcd::Etcd::new(url).unwrap();
        etcd.list(&format!("{PREFIX}results/"))
            .await
            .unwrap()
            .iter()
            .map(|kv| serde_json::from_slice(&kv.value).unwrap())
            .collect()
    })
}

#[test]
fn two_agents_send_their_shares_and_the_report_merges_them_exactly() {
    let dir = std::env::temp_dir().join(format!("trafik-load-agents-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let etcd = Etcd::start(&dir.join("etcd"));
    let url = etcd.url();
    let upstream = Upstream::start(&[]);
    let _a = agent(&url, "a1");
    let _b = agent(&url, "a2");
    let output = load(&[
        &upstream.url("/takip/TR-{n}"),
        "--rate",
        "200",
        "--duration",
        "1s",
        "--etcd",
        &url,
        "--etcd-prefix",
        PREFIX,
        "--agents",
        "2",
        "--metrics-url",
        &upstream.url("/sayac"),
        "--json",
    ]);
    let report = json(&output);
    assert!(
        matches!(output.status.code(), Some(0 | 98)),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let agents = report["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2);
    let sum = |key: &str| agents.iter().map(|a| a[key].as_u64().unwrap()).sum::<u64>();
    assert_eq!(report["planned"], 200);
    // The coordinator scraped the server before the jobs went out and after both agents
    // reported: the difference is the whole fleet's requests.
    let counters = &report["server_counters"];
    assert_eq!(counters["before"]["istek"], 0);
    assert_eq!(counters["difference"]["istek"], report["sent"]);
    assert_eq!(sum("planned"), 200);
    assert_eq!(agents[0]["planned"], 100, "each agent plans half");
    assert_eq!(report["sent"].as_u64().unwrap(), sum("sent"));
    assert_eq!(report["completed"].as_u64().unwrap(), sum("completed"));
    assert!(agents.iter().all(|a| a["reported"] == true));
    // The replica counted every request the agents sent.
    assert_eq!(
        get_json(&upstream.address, "/sayac")["istek"],
        report["sent"]
    );

    // The merged histogram is every agent's latencies together: its percentiles are those of
    // the agents' own histograms (each bucket exact) recorded into one.
    let parts = results(&url);
    assert_eq!(parts.len(), 2);
    let mut all = histogram();
    for part in &parts {
        part.corrected.add_to(&mut all).unwrap();
    }
    let merged = Percentiles::of(&all);
    let reported: Percentiles = serde_json::from_value(report["latency_ms"].clone())
        .unwrap_or_else(|_| panic!("{}", report["latency_ms"]));
    assert_eq!(reported, merged);
    assert_eq!(report["measured"].as_u64().unwrap(), all.len());
    assert_eq!(
        parts.iter().map(|p| p.completed).sum::<u64>(),
        report["completed"].as_u64().unwrap()
    );

    // The 100 ms buckets merge too: each one's counts are the agents' at that time summed, and
    // they add up to the run's.
    let mut agents_tenths = std::collections::BTreeMap::<u64, (u64, u64)>::new();
    for tenth in parts.iter().flat_map(|p| &p.tenths) {
        let counts = agents_tenths.entry(u64::from(tenth.t_ms)).or_default();
        counts.0 += tenth.completed;
        counts.1 += tenth.errors;
    }
    let merged_tenths: std::collections::BTreeMap<u64, (u64, u64)> = report["buckets_100ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let count = |key: &str| b[key].as_u64().unwrap();
            (count("t_ms"), (count("completed"), count("errors")))
        })
        .collect();
    assert!(!merged_tenths.is_empty());
    assert_eq!(merged_tenths, agents_tenths);
    assert_eq!(
        merged_tenths.values().map(|c| c.0).sum::<u64>(),
        report["completed"].as_u64().unwrap()
    );
    drop(etcd);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The coordinator on a terminal (util-linux's `script` gives it one) draws the live view from
/// the progress both agents publish to etcd: their targets of 100/s each show as 200/s.
#[test]
fn the_coordinators_live_view_merges_the_progress_the_agents_publish() {
    let dir = std::env::temp_dir().join(format!("trafik-load-live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let etcd = Etcd::start(&dir.join("etcd"));
    let url = etcd.url();
    let upstream = Upstream::start(&[]);
    let _a = agent(&url, "a1");
    let _b = agent(&url, "a2");
    let command = format!(
        "{} load {} --rate 200 --duration 2s --etcd {url} --etcd-prefix {PREFIX} --agents 2",
        trafik_binary().display(),
        upstream.url("/takip/TR-{n}"),
    );
    let output = std::process::Command::new("script")
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&output.stdout);
    assert!(matches!(output.status.code(), Some(0 | 98)), "{screen}");
    assert!(screen.contains("(target 200/s)"), "{screen}");
    assert!(screen.contains("last second: "), "{screen}");

    // What the agents published: each its own share, on its lease under progress/RUN/NAME.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let published: Vec<Progress> = runtime.block_on(async {
        let etcd = trafik_etcd::Etcd::new(&url).unwrap();
        etcd.list(&format!("{PREFIX}progress/"))
            .await
            .unwrap()
            .iter()
            .map(|kv| serde_json::from_slice(&kv.value).unwrap())
            .collect()
    });
    assert_eq!(published.len(), 2);
    let parts = results(&url);
    assert!(
        published
            .iter()
            .all(|p| p.sent > 0 && p.target_rate.is_some())
    );
    assert!(
        published.iter().map(|p| p.sent).sum::<u64>() <= parts.iter().map(|p| p.sent).sum(),
        "progress is published during the run, before the result"
    );
    drop(etcd);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_agents_run_a_scenario_and_its_steps_merge_exactly() {
    let dir = std::env::temp_dir().join(format!("trafik-load-agents-scn-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let etcd = Etcd::start(&dir.join("etcd"));
    let url = etcd.url();
    let upstream = Upstream::start(&[]);
    let _a = agent(&url, "a1");
    let _b = agent(&url, "a2");
    // The example scenario against this replica, without its latency thresholds (this test
    // is about counts and merging, not about how fast a shared machine answers). The agents
    // get the file's text and the data rows from the coordinator: they are in `dir` only.
    let examples = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/load");
    let text: String = std::fs::read_to_string(examples.join("takip.toml"))
        .unwrap()
        .replace("127.0.0.1:8080", &upstream.address)
        .lines()
        .filter(|line| !line.starts_with("threshold"))
        .map(|line| format!("{line}\n"))
        .collect();
    let scenario = dir.join("takip.toml");
    std::fs::write(&scenario, text).unwrap();
    std::fs::copy(
        examples.join("kullanicilar.csv"),
        dir.join("kullanicilar.csv"),
    )
    .unwrap();
    let output = load(&[
        "--scenario",
        scenario.to_str().unwrap(),
        "--rate",
        "40",
        "--duration",
        "1s",
        "--etcd",
        &url,
        "--etcd-prefix",
        PREFIX,
        "--agents",
        "2",
        "--json",
    ]);
    let report = json(&output);
    assert!(
        matches!(output.status.code(), Some(0 | 98)),
        "{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let agents = report["agents"].as_array().unwrap();
    assert!(agents.iter().all(|a| a["reported"] == true), "{report}");
    assert_eq!(agents[0]["planned"], 20, "each agent plans half");
    assert_eq!(report["dropped"], 0, "{report}");
    let users = report["sent"].as_u64().unwrap();
    assert_eq!(users, 40);

    // Agent k of 2 runs the scenario's arrivals k, k + 2, …: together the flows take their
    // turns by weight (3 : 1) exactly as on one machine.
    let flows = report["flows"].as_array().unwrap();
    let started = |f: usize| flows[f]["started"].as_u64().unwrap();
    assert_eq!(started(0), (0..users).filter(|n| n % 4 != 3).count() as u64);
    assert_eq!(started(1), (0..users).filter(|n| n % 4 == 3).count() as u64);
    for flow in flows {
        assert_eq!(flow["completed"], flow["started"], "{flow}");
    }

    // Each step's counts are the sum of the agents', and its percentiles those of both
    // agents' latencies together.
    let parts = results(&url);
    assert_eq!(parts.len(), 2);
    let steps = report["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4);
    let mut requests = 0;
    for (i, step) in steps.iter().enumerate() {
        let mut all = histogram();
        let mut sent = 0;
        for part in &parts {
            let measured = &part.scenario.as_ref().unwrap().steps[i];
            measured.latency.add_to(&mut all).unwrap();
            sent += measured.sent;
        }
        assert_eq!(step["sent"].as_u64().unwrap(), sent, "{step}");
        assert_eq!(step["completed"], step["sent"], "{step}");
        let reported: Percentiles = serde_json::from_value(step["latency_ms"].clone()).unwrap();
        assert_eq!(reported, Percentiles::of(&all), "{step}");
        requests += sent;
    }
    assert_eq!(requests, 2 * users);
    assert_eq!(report["completed"].as_u64().unwrap(), requests);
    drop(etcd);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_agents_run_a_closed_loop_each_and_the_report_adds_them_up() {
    let dir = std::env::temp_dir().join(format!("trafik-load-agents-max-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let etcd = Etcd::start(&dir.join("etcd"));
    let url = etcd.url();
    let upstream = Upstream::start(&[]);
    let _a = agent(&url, "a1");
    let _b = agent(&url, "a2");
    let output = load(&[
        &upstream.url("/takip/TR-{n}"),
        "--max",
        "--connections",
        "2",
        "--duration",
        "1s",
        "--etcd",
        &url,
        "--etcd-prefix",
        PREFIX,
        "--agents",
        "2",
        "--json",
    ]);
    let report = json(&output);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(report["pacing"], "closed");
    let agents = report["agents"].as_array().unwrap();
    assert!(agents.iter().all(|a| a["reported"] == true), "{report}");
    let sum = |key: &str| agents.iter().map(|a| a[key].as_u64().unwrap()).sum::<u64>();
    // Both agents sent for the whole second; the report is their sum, and its rate is the
    // completed requests over the one second they shared.
    assert!(
        agents.iter().all(|a| a["completed"].as_u64().unwrap() > 0),
        "{report}"
    );
    assert_eq!(report["completed"].as_u64().unwrap(), sum("completed"));
    assert_eq!(report["sent"].as_u64().unwrap(), sum("sent"));
    assert_eq!(
        get_json(&upstream.address, "/sayac")["istek"],
        report["sent"]
    );
    assert_eq!(
        report["achieved_rate"].as_f64().unwrap(),
        sum("completed") as f64
    );
    let parts = results(&url);
    let mut all = histogram();
    for part in &parts {
        part.corrected.add_to(&mut all).unwrap();
    }
    let reported: Percentiles = serde_json::from_value(report["latency_ms"].clone()).unwrap();
    assert_eq!(reported, Percentiles::of(&all));
    drop(etcd);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_agent_that_dies_is_reported_and_its_share_counts_as_not_sent() {
    let dir = std::env::temp_dir().join(format!("trafik-load-agents-dead-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let etcd = Etcd::start(&dir.join("etcd"));
    let url = etcd.url();
    let upstream = Upstream::start(&[]);
    let _a = agent(&url, "a1");
    let doomed = agent(&url, "a2");
    let coordinator = {
        let url = url.clone();
        let target = upstream.url("/takip/TR-{n}");
        std::thread::spawn(move || {
            load(&[
                &target,
                "--rate",
                "100",
                "--duration",
                "2s",
                "--etcd",
                &url,
                "--etcd-prefix",
                PREFIX,
                "--agents",
                "2",
                "--json",
            ])
        })
    };
    // a2 dies once its order is written, before it can report.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let etcd_client = trafik_etcd::Etcd::new(&url).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while runtime
        .block_on(etcd_client.get(&format!("{PREFIX}jobs/a2")))
        .unwrap()
        .is_none()
    {
        assert!(Instant::now() < deadline, "no order for a2");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(doomed);
    let output = coordinator.join().unwrap();
    assert_eq!(output.status.code(), Some(99));
    let report = json(&output);
    let agents = report["agents"].as_array().unwrap();
    let dead = agents.iter().find(|a| a["name"] == "a2").unwrap();
    assert_eq!(dead["reported"], false);
    assert_eq!(dead["planned"], 100);
    assert_eq!(
        report["planned"], 200,
        "the dead agent's share is still planned"
    );
    assert_eq!(report["rate_held"], false);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("agent a2 stopped before reporting: its 100 planned requests"),
        "{stderr}"
    );
    drop(etcd);
    let _ = std::fs::remove_dir_all(&dir);
}
