//! Distributed runs on etcd. Each machine runs `trafik load agent --etcd URL`: it registers
//! under `<prefix>agents/<name>` on a lease it keeps alive, and waits for a work order under
//! `<prefix>jobs/<name>`. `trafik load … --etcd URL --agents N` waits for N agents, writes
//! each its order — the requests or a scenario, its share of the rate plan (a closed loop: the
//! whole duration on its own connections) and a common start time — and
//! collects what they measured from `<prefix>results/<run>/<name>`, merged exactly
//! ([`trafik_load::merge`]). An agent whose lease expires before it reports is named in the
//! report, and its share of the plan counts as planned and not sent: nothing is lost quietly.
//!
//! While it runs, each agent publishes its live numbers every 200 ms under
//! `<prefix>progress/<run>/<name>` (on its lease), and the coordinator's live view merges them
//! every 100 ms: the 200 ms keep etcd's writes at 5 a second per agent, and a view 100 ms
//! behind at most.
//!
//! Control traffic is a few keys a run, so orders, progress and results are polled every
//! 100 ms rather than watched.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use trafik_etcd::Etcd;
use trafik_load::data::Rows;
use trafik_load::journey::{Deal, ScenarioOptions, StepsMeasured};
use trafik_load::merge::{AgentReport, Measured, merge, merge_progress};
use trafik_load::tls::TlsOptions;
use trafik_load::{Pacing, Progress, RatePlan, RunOptions, RunResult, Target};

/// An agent's registration lives this long without a keep-alive.
const LEASE: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(100);
/// Agents start this long after the orders are written: time for each to see its order.
const START_DELAY: Duration = Duration::from_millis(1500);
/// An agent publishes every this many of its 100 ms progress ticks (every 200 ms).
const PUBLISH_EVERY: u64 = 2;

/// What one agent is to send.
#[derive(Debug, Serialize, Deserialize)]
pub struct Order {
    pub run: String,
    pub work: Work,
    /// This agent's share of the rate plan, or the closed loop's duration (each agent runs
    /// its own connections for all of it).
    pub pacing: Pacing,
    pub start_unix_ms: u64,
    /// For `https://`: the agent builds its TLS client from these.
    pub tls: TlsOptions,
    pub timeout_ms: u64,
    pub late_after_us: u64,
}

/// Requests or a scenario.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Work {
    /// Requests to URLs, as `trafik load URL` sends them.
    Requests {
        urls: Vec<String>,
        method: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        connections: usize,
        max_connections: usize,
        http2: bool,
        streams: usize,
    },
    /// A scenario file as written, with its data file's rows (the coordinator reads both, so
    /// agents need no copy of the files), and which of its arrivals this agent runs.
    Scenario {
        name: String,
        text: String,
        rows: Rows,
        max_users: usize,
        deal: Deal,
        /// Steps over HTTP/2.
        #[serde(default)]
        http2: bool,
    },
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn key(prefix: &str, rest: &str) -> String {
    format!("{}/{rest}", prefix.trim_end_matches('/'))
}

/// `trafik load agent`: registers, then runs every order written for it until stopped.
pub async fn serve(url: &str, prefix: &str, name: &str) -> Result<(), String> {
    let etcd = Etcd::new(url).map_err(|e| e.to_string())?;
    let lease = etcd.grant(LEASE).await.map_err(|e| e.to_string())?;
    let registration = key(prefix, &format!("agents/{name}"));
    etcd.put(&registration, b"{}", Some(lease))
        .await
        .map_err(|e| e.to_string())?;
    let keeper = etcd.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(LEASE / 3).await;
            if let Ok(false) = keeper.keep_alive(lease).await {
                eprintln!("agent: the lease expired; etcd no longer lists this agent");
            }
        }
    });
    crate::say(&format!(
        "agent {name} waiting for work at {url} under {registration}"
    ));
    let orders = key(prefix, &format!("jobs/{name}"));
    let mut done: Option<String> = None;
    loop {
        tokio::time::sleep(POLL).await;
        let Ok(Some(written)) = etcd.get(&orders).await else {
            continue;
        };
        let order: Order = match serde_json::from_slice(&written.value) {
            Ok(order) => order,
            Err(e) => {
                eprintln!("agent: an order it cannot read ({e}); waiting for the next");
                continue;
            }
        };
        if let Err(e) = order.pacing.check() {
            eprintln!("agent: an order it cannot run ({e}); waiting for the next");
            continue;
        }
        if done.as_ref() == Some(&order.run) {
            continue;
        }
        done = Some(order.run.clone());
        let run = order.run.clone();
        let publisher = etcd.clone();
        let progress_key = key(prefix, &format!("progress/{run}/{name}"));
        let mut ticks = 0u64;
        let publish = move |progress: Progress| {
            ticks += 1;
            if !ticks.is_multiple_of(PUBLISH_EVERY) {
                return;
            }
            let (etcd, key) = (publisher.clone(), progress_key.clone());
            if let Ok(text) = serde_json::to_vec(&progress) {
                // Off the run's loop: a slow etcd must not hold up the sends.
                tokio::spawn(async move {
                    let _ = etcd.put(&key, &text, Some(lease)).await;
                });
            }
        };
        let measured = match work(order, publish).await {
            Ok((result, scenario)) => Measured {
                scenario,
                ..Measured::of(&result)
            },
            Err(message) => {
                eprintln!("agent: run {run} could not start: {message}");
                continue;
            }
        };
        eprintln!(
            "agent {name}: run {run} sent {} of {} planned, {} completed",
            measured.sent, measured.planned, measured.completed
        );
        let text = serde_json::to_vec(&measured).map_err(|e| e.to_string())?;
        if let Err(e) = etcd
            .put(&key(prefix, &format!("results/{run}/{name}")), &text, None)
            .await
        {
            eprintln!("agent: cannot report run {run}: {e}");
        }
    }
}

/// Runs one order from its start time, handing `publish` its live numbers: what it measured,
/// and a scenario's steps.
async fn work(
    order: Order,
    publish: impl FnMut(Progress),
) -> Result<(RunResult, Option<StepsMeasured>), String> {
    let timeout = Duration::from_millis(order.timeout_ms);
    let late_after = Duration::from_micros(order.late_after_us);
    let start = || async {
        let wait = order.start_unix_ms.saturating_sub(now_unix_ms());
        tokio::time::sleep(Duration::from_millis(wait)).await;
    };
    match order.work {
        Work::Requests {
            urls,
            method,
            headers,
            body,
            connections,
            max_connections,
            http2,
            streams,
        } => {
            let method = http::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
            let target = Target::new(&urls, method, headers, body.into())?;
            let tls = if target.tls {
                Some(trafik_load::tls::client_config(&order.tls, http2)?)
            } else {
                None
            };
            let options = RunOptions {
                target,
                pacing: order.pacing,
                connections,
                max_connections,
                http2,
                streams,
                tls,
                timeout,
                late_after,
                // The coordinator judges thresholds on the merged histograms.
                threshold_us: u64::MAX,
                keep_seconds: true,
            };
            start().await;
            Ok((trafik_load::run(options, publish).await, None))
        }
        Work::Scenario {
            name,
            text,
            rows,
            max_users,
            deal,
            http2,
        } => {
            let Pacing::Open(plan) = order.pacing else {
                return Err("a scenario runs open loop: its order has no rate plan".into());
            };
            let scenario =
                std::sync::Arc::new(super::scenario::from_text(&name, &text, Some(rows))?);
            let https = scenario.flows.iter().flat_map(|f| &f.steps).any(|s| s.tls);
            let options = ScenarioOptions {
                tls: if https {
                    Some(trafik_load::tls::client_config(&order.tls, http2)?)
                } else {
                    None
                },
                plan,
                max_users,
                timeout,
                late_after,
                threshold_us: u64::MAX,
                keep_seconds: true,
                deal,
                http2,
            };
            start().await;
            let (result, steps) = trafik_load::journey::run(scenario, options, publish).await;
            Ok((result, Some(steps)))
        }
    }
}

/// What the coordinator needs besides the orders' contents.
pub struct Coordination<'a> {
    pub url: &'a str,
    pub prefix: &'a str,
    pub agents: usize,
    /// How long to wait for the agents to register.
    pub wait: Duration,
    pub threshold_us: u64,
    pub keep_seconds: bool,
}

/// What the agents measured together.
pub struct Merged {
    pub result: RunResult,
    pub agents: Vec<AgentReport>,
    /// A scenario's steps and flows, summed over the agents.
    pub steps: Option<StepsMeasured>,
}

/// Waits for the agents, sends each its share of an open loop's plan (or the whole of a closed
/// loop's duration), hands `show` their merged live numbers while they run and merges what
/// they measured; `drain` is how long an agent may still be finishing after the plan (its
/// requests' timeout, or a scenario's longest journey).
#[allow(clippy::too_many_arguments)]
pub async fn coordinate(
    how: Coordination<'_>,
    work: Work,
    tls: &TlsOptions,
    timeout: Duration,
    late_after: Duration,
    pacing: &Pacing,
    drain: Duration,
    mut show: impl FnMut(Progress),
) -> Result<Merged, String> {
    let etcd = Etcd::new(how.url).map_err(|e| e.to_string())?;
    let registered = key(how.prefix, "agents/");
    let deadline = tokio::time::Instant::now() + how.wait;
    let names = loop {
        let listed = etcd.list(&registered).await.map_err(|e| e.to_string())?;
        let names: Vec<String> = listed
            .iter()
            .filter_map(|kv| kv.key.strip_prefix(&registered).map(str::to_owned))
            .collect();
        if names.len() >= how.agents {
            break names.into_iter().take(how.agents).collect::<Vec<_>>();
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "{} of {} agents registered at {}{registered} within {:?}: {}",
                names.len(),
                how.agents,
                how.url,
                how.wait,
                if names.is_empty() {
                    "none (start them with trafik load agent --etcd URL)".to_owned()
                } else {
                    names.join(", ")
                }
            ));
        }
        tokio::time::sleep(POLL).await;
    };
    let run = format!("{}-{}", now_unix_ms(), std::process::id());
    let share = 1.0 / how.agents as f64;
    let (part, duration) = match pacing {
        Pacing::Open(plan) => (Pacing::Open(plan.scaled(share)), plan.duration()),
        Pacing::Closed(duration) => (Pacing::Closed(*duration), duration.as_secs_f64()),
    };
    let start_unix_ms = now_unix_ms() + START_DELAY.as_millis() as u64;
    for (k, name) in names.iter().enumerate() {
        let mut work = work.clone();
        if let Work::Scenario { deal, .. } = &mut work {
            *deal = Deal {
                first: k as u64,
                every: names.len() as u64,
            };
        }
        let order = Order {
            run: run.clone(),
            work,
            pacing: part.clone(),
            start_unix_ms,
            tls: tls.clone(),
            timeout_ms: timeout.as_millis() as u64,
            late_after_us: late_after.as_micros() as u64,
        };
        let text = serde_json::to_vec(&order).map_err(|e| e.to_string())?;
        etcd.put(&key(how.prefix, &format!("jobs/{name}")), &text, None)
            .await
            .map_err(|e| e.to_string())?;
    }

    // Results come after the plan and the last requests' timeout; an agent gone from the
    // registry without a result has died.
    let results = key(how.prefix, &format!("results/{run}/"));
    let progress = key(how.prefix, &format!("progress/{run}/"));
    let last = Duration::from_millis(START_DELAY.as_millis() as u64)
        + Duration::from_secs_f64(duration)
        + drain
        + Duration::from_secs(10);
    let deadline = tokio::time::Instant::now() + last;
    let mut measured: BTreeMap<String, Measured> = BTreeMap::new();
    let mut dead: Vec<String> = Vec::new();
    while measured.len() + dead.len() < names.len() {
        if tokio::time::Instant::now() >= deadline {
            let silent: Vec<String> = names
                .iter()
                .filter(|n| !measured.contains_key(*n) && !dead.contains(n))
                .cloned()
                .collect();
            dead.extend(silent);
            break;
        }
        tokio::time::sleep(POLL).await;
        for kv in etcd.list(&results).await.map_err(|e| e.to_string())? {
            let Some(name) = kv.key.strip_prefix(&results) else {
                continue;
            };
            let result = serde_json::from_slice(&kv.value)
                .map_err(|e| format!("agent {name} reported what cannot be read: {e}"))?;
            measured.insert(name.to_owned(), result);
        }
        let live: Vec<Progress> = etcd
            .list(&progress)
            .await
            .map_err(|e| e.to_string())?
            .iter()
            .filter_map(|kv| serde_json::from_slice(&kv.value).ok())
            .collect();
        if !live.is_empty() {
            show(merge_progress(&live)?);
        }
        let alive: Vec<String> = etcd
            .list(&registered)
            .await
            .map_err(|e| e.to_string())?
            .iter()
            .filter_map(|kv| kv.key.strip_prefix(&registered).map(str::to_owned))
            .collect();
        for name in &names {
            if !alive.contains(name) && !measured.contains_key(name) && !dead.contains(name) {
                dead.push(name.clone());
            }
        }
    }

    dead.retain(|name| !measured.contains_key(name));
    let parts: Vec<Measured> = measured.values().cloned().collect();
    let mut result = merge(&parts, how.threshold_us, how.keep_seconds)?;
    let mut steps: Option<StepsMeasured> = None;
    for part in parts.iter().filter_map(|p| p.scenario.as_ref()) {
        steps.get_or_insert_with(StepsMeasured::default).add(part)?;
    }
    result.window = Duration::from_secs_f64(duration);
    // A dead agent's share was planned and never measured.
    let (lost, lost_per_second) = match &part {
        Pacing::Open(plan) => planned(plan),
        Pacing::Closed(_) => (0, Vec::new()),
    };
    for _ in &dead {
        result.planned += lost;
        if result.planned_per_second.len() < lost_per_second.len() {
            result.planned_per_second.resize(lost_per_second.len(), 0);
        }
        for (total, count) in result.planned_per_second.iter_mut().zip(&lost_per_second) {
            *total += count;
        }
    }
    let reports = names
        .iter()
        .map(|name| match measured.get(name) {
            Some(m) => AgentReport {
                name: name.clone(),
                share,
                reported: true,
                planned: m.planned,
                sent: m.sent,
                completed: m.completed,
                errors: m.errors.total(),
            },
            None => AgentReport {
                name: name.clone(),
                share,
                reported: false,
                planned: lost,
                sent: 0,
                completed: 0,
                errors: 0,
            },
        })
        .collect();
    Ok(Merged {
        result,
        agents: reports,
        steps,
    })
}

/// The requests a plan sends, in total and per second.
fn planned(plan: &RatePlan) -> (u64, Vec<u64>) {
    let mut per_second = vec![0u64; plan.duration().ceil() as usize];
    let mut total = 0;
    for t in plan.send_times() {
        total += 1;
        if let Some(count) = per_second.get_mut(t.as_secs() as usize) {
            *count += 1;
        }
    }
    (total, per_second)
}
