//! `trafik load`: flags to a run, the run to a report, the verdict to an exit status.

mod agents;
mod scenario;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use trafik_load::journey::{Deal, ScenarioOptions};
use trafik_load::tls::TlsOptions;
use trafik_load::{
    Pacing, Profile, ProfileKind, ProfileShape, RatePlan, Report, ReportInputs, RunOptions,
    ServerCounters, Target, ThresholdOn,
};

use crate::cli::{AgentArgs, LoadArgs, LoadCommand};
use crate::config::values::Dur;

/// How long a run without a profile sends.
const PLAIN_DURATION: Duration = Duration::from_secs(10);

/// Exit statuses, as k6 uses 99 for a breached threshold (here also too many errors).
const FAILED: u8 = 99;
const RATE_NOT_HELD: u8 = 98;

pub fn run(args: LoadArgs) -> Result<ExitCode, String> {
    if let Some(LoadCommand::Agent(agent)) = &args.command {
        return serve_agent(agent);
    }
    // A scenario's errors come first and all at once: it is the file the user is editing.
    let journeys = match &args.scenario {
        Some(path) => Some(std::sync::Arc::new(scenario::load(path)?)),
        None => None,
    };
    let target = match journeys {
        Some(_) => None,
        None => Some(target(&args)?),
    };
    let threshold_on: ThresholdOn = args.threshold_on.parse()?;
    let profile = args
        .profile
        .map(|kind| with_flags(Profile::course(kind.into()), &args));
    let threshold = profile.as_ref().map(|p| p.threshold).or(args.threshold);
    let duration = profile
        .as_ref()
        .map(|p| p.duration)
        .or(args.duration)
        .unwrap_or(PLAIN_DURATION);
    if duration.is_zero() {
        return Err("--duration must be above zero".into());
    }
    let rate = profile.as_ref().map(|p| p.rate).or(args.rate);
    if let Some(rate) = rate
        && !(finite_at_least(rate, 0.0) && rate > 0.0)
    {
        return Err(format!(
            "--rate must be a positive number of requests per second, not {rate}"
        ));
    }
    if let Some(profile) = &profile
        && profile.kind == ProfileKind::Spike
        && !finite_at_least(profile.spike.factor, 1.0)
    {
        return Err("--spike-factor must be at least 1".into());
    }
    let (pacing, shape) = if args.max {
        (Pacing::Closed(duration), ProfileShape::Plain)
    } else if let Some(stages) = &args.stages {
        if !finite_at_least(args.start_rate, 0.0) {
            return Err("--start-rate must be 0 or more requests per second".into());
        }
        (
            Pacing::Open(RatePlan::stages(args.start_rate, &parse_stages(stages)?)),
            ProfileShape::Plain,
        )
    } else if let Some(profile) = &profile {
        (Pacing::Open(profile.plan()), profile.shape())
    } else {
        let rate = rate.ok_or(
            "give --rate R (requests per second), --stages, --profile load|soak|spike or --max",
        )?;
        (
            Pacing::Open(RatePlan::constant(rate, duration)),
            ProfileShape::Plain,
        )
    };
    let target_rate = match &pacing {
        Pacing::Open(plan) => Some(plan.mean_rate()),
        Pacing::Closed(_) => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let live = !args.json && std::io::stderr().is_terminal();
    let mut drawn = false;
    let show = move |p: trafik_load::Progress| {
        if live {
            // Back over the previous view and clear it, then draw this one.
            let back = if drawn { "\x1b[3F\x1b[J" } else { "" };
            let _ = write!(std::io::stderr(), "{back}{}", live_view(&p));
            drawn = true;
        }
    };
    let threshold_us = threshold.map_or(u64::MAX, |t| t.as_micros() as u64);
    let tls = TlsOptions {
        ca_pem: match &args.cacert {
            Some(path) => Some(
                std::fs::read(path)
                    .map_err(|e| format!("cannot read --cacert {}: {e}", path.display()))?,
            ),
            None => None,
        },
        insecure: args.insecure,
        versions: args.tls_versions.clone(),
    };
    let keep_seconds = matches!(shape, ProfileShape::Soak);
    let report = runtime.block_on(async {
        let before = match &args.metrics_url {
            Some(url) => Some(trafik_load::fetch_json(url).await?),
            None => None,
        };
        let (result, steps, agents) = match (target, journeys, pacing) {
            (Some(target), _, pacing) => {
                let client_tls = if target.tls {
                    Some(trafik_load::tls::client_config(&tls, args.http2)?)
                } else {
                    None
                };
                let options = RunOptions {
                    target,
                    pacing,
                    connections: args.connections.max(1),
                    max_connections: args.max_connections.max(args.connections).max(1),
                    http2: args.http2,
                    streams: usize::from(args.streams),
                    tls: client_tls,
                    timeout: args.timeout,
                    late_after: args.late_after,
                    threshold_us,
                    keep_seconds,
                };
                match &args.etcd {
                    Some(url) => {
                        let work = agents::Work::Requests {
                            urls: urls(&args)?,
                            method: options.target.method.to_string(),
                            headers: options.target.headers.clone(),
                            body: options.target.body.to_vec(),
                            connections: options.connections,
                            max_connections: options.max_connections,
                            http2: options.http2,
                            streams: options.streams,
                        };
                        let merged = agents::coordinate(
                            coordination(&args, url, threshold_us, keep_seconds),
                            work,
                            &tls,
                            args.timeout,
                            args.late_after,
                            &options.pacing,
                            args.timeout + Duration::from_secs(1),
                            show,
                        )
                        .await?;
                        (merged.result, None, Some(merged.agents))
                    }
                    None => (trafik_load::run(options, show).await, None, None),
                }
            }
            (None, Some(journeys), Pacing::Open(plan)) if args.etcd.is_some() => {
                let path = args.scenario.as_deref().unwrap_or(std::path::Path::new(""));
                let work = agents::Work::Scenario {
                    name: path.display().to_string(),
                    text: std::fs::read_to_string(path)
                        .map_err(|e| format!("cannot read the scenario {}: {e}", path.display()))?,
                    rows: journeys.rows.clone(),
                    max_users: args.max_connections.max(1),
                    deal: Deal::ALL,
                    http2: args.http2,
                };
                let url = args.etcd.as_deref().unwrap_or_default();
                let merged = agents::coordinate(
                    coordination(&args, url, threshold_us, keep_seconds),
                    work,
                    &tls,
                    args.timeout,
                    args.late_after,
                    &Pacing::Open(plan),
                    journeys.longest_journey(args.timeout) + Duration::from_secs(1),
                    show,
                )
                .await?;
                let steps = merged.steps.unwrap_or_default().report(&journeys)?;
                (merged.result, Some(steps), Some(merged.agents))
            }
            (None, Some(journeys), Pacing::Open(plan)) => {
                let https = journeys.flows.iter().flat_map(|f| &f.steps).any(|s| s.tls);
                let options = ScenarioOptions {
                    tls: if https {
                        Some(trafik_load::tls::client_config(&tls, args.http2)?)
                    } else {
                        None
                    },
                    plan,
                    max_users: args.max_connections.max(1),
                    timeout: args.timeout,
                    late_after: args.late_after,
                    threshold_us,
                    keep_seconds,
                    deal: Deal::ALL,
                    http2: args.http2,
                };
                let (result, steps) =
                    trafik_load::journey::run(journeys.clone(), options, show).await;
                (result, Some(steps.report(&journeys)?), None)
            }
            _ => {
                return Err("a scenario runs open loop: give --rate, --stages or --profile".into());
            }
        };
        let server_counters = match (&args.metrics_url, before) {
            (Some(url), Some(before)) => {
                let after = trafik_load::fetch_json(url).await?;
                Some(ServerCounters {
                    url: url.clone(),
                    difference: trafik_load::report::difference(&before, &after),
                    before,
                    after,
                })
            }
            _ => None,
        };
        let report = Report::new(
            result,
            ReportInputs {
                url: match &args.scenario {
                    Some(path) => path.display().to_string(),
                    None => args.url.clone().unwrap_or_default(),
                },
                profile: profile.as_ref().map(|p| p.name().to_owned()),
                shape,
                target_rate,
                threshold_ms: threshold.map(|t| t.as_secs_f64() * 1000.0),
                threshold_on,
                max_error_rate: args.max_error_rate,
                server_counters,
            },
        );
        let report = match steps {
            Some(steps) => report.with_scenario(steps),
            None => report,
        };
        Ok::<_, String>(match agents {
            Some(agents) => report.with_agents(agents),
            None => report,
        })
    })?;
    if args.json {
        crate::say(&serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
    } else {
        crate::say(report.render().trim_end());
    }
    if let Some(path) = &args.report {
        std::fs::write(path, trafik_load::html::page(&report))
            .map_err(|e| format!("cannot write the report {}: {e}", path.display()))?;
    }
    for reason in &report.failures {
        let _ = writeln!(std::io::stderr(), "failed: {reason}");
    }
    Ok(if !report.passed {
        ExitCode::from(FAILED)
    } else if !report.rate_held {
        ExitCode::from(RATE_NOT_HELD)
    } else {
        ExitCode::SUCCESS
    })
}

/// The terminal's live view, three lines redrawn every 100 ms: the rate sent against the
/// plan's, what is in flight, the last second's latency and the errors so far by kind.
fn live_view(p: &trafik_load::Progress) -> String {
    let target = p.target_rate.map_or_else(
        || "closed loop".to_owned(),
        |rate| format!("target {rate:.0}/s"),
    );
    let (finished, latency) = &p.last_second;
    let errors = match p.errors.describe() {
        kinds if kinds.is_empty() => "none".to_owned(),
        kinds => kinds,
    };
    format!(
        "{:>6.1} s  sent {:.0}/s ({target}), {} in all; in flight {}; connections {}\n\
         \x20 last second: {finished} finished, p50 {:.2} ms, p99 {:.2} ms; completed {} in all\n\
         \x20 errors: {errors}\n",
        p.elapsed.as_secs_f64(),
        p.rate,
        p.sent,
        p.in_flight,
        p.connections,
        latency.p50,
        latency.p99,
        p.completed
    )
}

/// The course's profile with the values the flags give instead.
fn with_flags(mut profile: Profile, args: &LoadArgs) -> Profile {
    profile.rate = args.rate.unwrap_or(profile.rate);
    profile.duration = args.duration.unwrap_or(profile.duration);
    profile.threshold = args.threshold.unwrap_or(profile.threshold);
    profile.spike.factor = args.spike_factor.unwrap_or(profile.spike.factor);
    profile.spike.at = args.spike_at.unwrap_or(profile.spike.at);
    profile.spike.length = args.spike_for.unwrap_or(profile.spike.length);
    profile
}

/// The etcd side of a distributed run, from the flags.
fn coordination<'a>(
    args: &'a LoadArgs,
    url: &'a str,
    threshold_us: u64,
    keep_seconds: bool,
) -> agents::Coordination<'a> {
    agents::Coordination {
        url,
        prefix: &args.etcd_prefix,
        agents: args.agents.unwrap_or(1) as usize,
        wait: args.agents_wait,
        threshold_us,
        keep_seconds,
    }
}

/// `trafik load agent`: serves work orders until stopped.
fn serve_agent(args: &AgentArgs) -> Result<ExitCode, String> {
    let name = args.name.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "agent".to_owned());
        format!("{host}-{}", std::process::id())
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(agents::serve(&args.etcd, &args.etcd_prefix, &name))?;
    Ok(ExitCode::SUCCESS)
}

/// The URL and those of `--url-file`.
fn urls(args: &LoadArgs) -> Result<Vec<String>, String> {
    let mut urls: Vec<String> = args.url.iter().cloned().collect();
    if let Some(file) = &args.url_file {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read --url-file {}: {e}", file.display()))?;
        urls.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_owned),
        );
    }
    Ok(urls)
}

fn target(args: &LoadArgs) -> Result<Target, String> {
    let urls = urls(args)?;
    let method = http::Method::from_bytes(args.method.as_bytes())
        .map_err(|_| format!("--method {:?} is not an HTTP method", args.method))?;
    let headers = args
        .headers
        .iter()
        .map(|h| {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| format!("--header {h:?} should be NAME:VALUE"))?;
            let (name, value) = (name.trim(), value.trim());
            http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("--header {h:?}: {name:?} is not a header name"))?;
            http::HeaderValue::from_str(value)
                .map_err(|_| format!("--header {h:?}: the value is not a valid header value"))?;
            Ok((name.to_owned(), value.to_owned()))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let body = match args.body.as_deref() {
        Some(text) if text.starts_with('@') => {
            let path = &text[1..];
            bytes::Bytes::from(
                std::fs::read(path).map_err(|e| format!("cannot read --body file {path}: {e}"))?,
            )
        }
        Some(text) => bytes::Bytes::from(text.to_owned()),
        None => bytes::Bytes::new(),
    };
    Target::new(&urls, method, headers, body)
}

/// A finite number (not NaN, not infinite) of at least `min`.
fn finite_at_least(value: f64, min: f64) -> bool {
    value.is_finite() && value >= min
}

/// `5s:100,10s:500` → [(5 s, 100), (10 s, 500)].
fn parse_stages(text: &str) -> Result<Vec<(Duration, f64)>, String> {
    text.split(',')
        .map(|stage| {
            let (duration, target) = stage.split_once(':').ok_or_else(|| {
                format!("stage {stage:?} should be DURATION:TARGET, such as 10s:500")
            })?;
            let duration: Dur = duration.parse()?;
            let target: f64 = target
                .parse()
                .map_err(|_| format!("stage {stage:?}: {target:?} is not a rate"))?;
            if !finite_at_least(target, 0.0) {
                return Err(format!(
                    "stage {stage:?}: expected a rate of 0 or more requests per second"
                ));
            }
            Ok((duration.0, target))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_view_shows_rate_in_flight_last_second_and_errors_by_kind() {
        let errors = trafik_load::record::Errors {
            timeout: 2,
            ..Default::default()
        };
        let progress = trafik_load::Progress {
            elapsed: Duration::from_millis(3400),
            sent: 1700,
            completed: 1690,
            errors,
            connections: 16,
            rate: 499.6,
            target_rate: Some(500.0),
            in_flight: 8,
            last_second: (
                497,
                trafik_load::record::Percentiles {
                    p50: 1.25,
                    p99: 9.5,
                    ..Default::default()
                },
            ),
            last_second_latency: Default::default(),
        };
        let view = live_view(&progress);
        assert_eq!(view.lines().count(), 3, "{view}");
        assert!(view.contains("3.4 s  sent 500/s (target 500/s), 1700 in all; in flight 8"));
        assert!(view.contains("last second: 497 finished, p50 1.25 ms, p99 9.50 ms"));
        assert!(view.contains("errors: 2 timed out"));
        let closed = trafik_load::Progress {
            target_rate: None,
            ..progress
        };
        assert!(live_view(&closed).contains("(closed loop)"));
    }
}
