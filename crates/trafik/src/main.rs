//! `trafik`: wires the command line and configuration to the data plane. Everything that
//! decides or moves traffic lives in the library crates; this binary only connects them.

mod cli;
mod config;
mod describe;
mod load;
mod suggest;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use cli::{Cli, Command, LogFormat};
use config::Loaded;
use trafik_proxy::{
    BackendPlan, ClientPlan, HashKey, HealthCheck, HealthPlan, ListenerKind, ListenerPlan, Plan,
    PoolPlan, RoutePlan, TargetPlan,
};
use trafik_upstream::ReplicaConfig;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(cli.log_format);
    match run(cli.command) {
        Ok(code) => code,
        Err(message) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "error: {message}");
            ExitCode::from(2)
        }
    }
}

/// Runs one command; its verdict is the exit status (`trafik load` has its own).
fn run(command: Command) -> Result<ExitCode, String> {
    let done = |result: Result<(), String>| result.map(|()| ExitCode::SUCCESS);
    match command {
        Command::Serve { config, access_log } => {
            let mut loaded = load(config.as_deref())?;
            loaded.plan.client.access_log |= access_log;
            done(serve(loaded))
        }
        Command::Check { config } => {
            let loaded = load(config.as_deref())?;
            say(describe::plan(&loaded).trim_end());
            Ok(ExitCode::SUCCESS)
        }
        Command::Proxy {
            listen,
            to,
            algorithm,
            hash_key,
            health_path,
            health_interval,
            retries,
            admin,
            admin_allow_remote,
            name,
            workers,
            access_log,
        } => {
            if let Some(address) = admin
                && !address.ip().is_loopback()
                && !admin_allow_remote
            {
                return Err(format!(
                    "--admin {address}: the admin API has no authentication, so a non-loopback address needs --admin-allow-remote"
                ));
            }
            let health = health_path.map(|path| HealthPlan {
                check: HealthCheck::Http { path },
                interval: health_interval,
                timeout: health_interval.min(Duration::from_secs(1)),
                fall: 1,
                rise: 1,
            });
            let plan = Plan {
                name,
                workers: workers.unwrap_or_else(config::default_workers),
                listeners: vec![ListenerPlan {
                    name: "default".into(),
                    address: listen,
                    kind: ListenerKind::Http {
                        routes: vec![RoutePlan {
                            host: None,
                            path_prefix: "/".into(),
                            methods: Vec::new(),
                            filters: Vec::new(),
                            target: TargetPlan::Pool {
                                pool: "default".into(),
                                retry_non_idempotent: false,
                            },
                        }],
                    },
                }],
                pools: vec![PoolPlan {
                    name: "default".into(),
                    algorithm,
                    selector_options: trafik_balance::SelectorOptions::default(),
                    hash_key: hash_key.or(algorithm.uses_key().then_some(HashKey::ClientIp)),
                    sticky: None,
                    backends: to
                        .into_iter()
                        .map(|address| BackendPlan {
                            address,
                            name: None,
                            weight: 1,
                        })
                        .collect(),
                    health,
                    connect_timeout: Duration::from_secs(2),
                    response_timeout: Duration::from_secs(30),
                    retries,
                }],
                admin,
                client: ClientPlan {
                    header_read_timeout: Duration::from_secs(30),
                    idle_timeout: Duration::from_secs(60),
                    trust_forwarded: false,
                    access_log,
                },
                drain_timeout: Duration::from_secs(10),
            };
            done(serve(Loaded {
                plan,
                upstreams: Vec::new(),
            }))
        }
        Command::Sim { model } => done(sim(model)),
        Command::Upstream {
            listen,
            name,
            delay,
            lesson,
        } => done(serve_replicas(vec![(
            listen,
            ReplicaConfig {
                name,
                delay: delay.unwrap_or_default(),
                load_lesson: lesson.load_lesson(),
            },
        )])),
        Command::Load(args) => load::run(*args),
    }
}

/// Runs one of the course's models and prints its table, or its JSON.
fn sim(model: cli::SimModel) -> Result<(), String> {
    use cli::SimModel;
    use trafik_sim::{queue, remap, sticky, subjects};
    fn show<R: serde::Serialize>(
        report: R,
        json: bool,
        render: fn(&R) -> String,
    ) -> Result<(), String> {
        if json {
            say(&serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
        } else {
            say(render(&report).trim_end());
        }
        Ok(())
    }
    let error = |e: trafik_sim::SimError| e.to_string();
    match model {
        SimModel::Subjects {
            seed,
            subjects,
            loads,
            vnodes,
            remove,
            removal_load,
            json,
        } => {
            let options = subjects::SubjectsOptions {
                seed,
                subjects,
                loads,
                virtual_nodes: vnodes,
                remove,
                removal_load,
            };
            show(
                subjects::run(&options).map_err(error)?,
                json,
                subjects::SubjectsReport::render,
            )
        }
        SimModel::Queue {
            replicas,
            requests,
            arrival,
            seed,
            slow,
            json,
        } => {
            let options = queue::QueueOptions {
                replicas,
                requests,
                arrival,
                seed,
                slow,
            };
            show(
                queue::run(&options).map_err(error)?,
                json,
                queue::QueueReport::render,
            )
        }
        SimModel::Hash {
            keys,
            key_prefix,
            key_base,
            replicas,
            added,
            vnodes,
            maglev_size,
            balance_factor,
            read_rate,
            write_rate,
            hit_ratio,
            store_base,
            warmup,
            json,
        } => {
            let options = remap::RemapOptions {
                keys,
                key_prefix,
                key_base,
                replicas,
                added,
                virtual_nodes: vnodes,
                maglev_size,
                balance_factor,
                warmup: remap::WarmupInputs {
                    read_rate,
                    write_rate,
                    hit_ratio,
                    store_base,
                    window_s: warmup.as_secs_f64(),
                },
            };
            show(
                remap::run(&options).map_err(error)?,
                json,
                remap::RemapReport::render,
            )
        }
        SimModel::Sticky {
            clients,
            vnodes,
            json,
        } => {
            let options = sticky::StickyOptions {
                clients: sticky::parse_clients(&clients).map_err(error)?,
                virtual_nodes: vnodes,
            };
            show(
                sticky::run(&options).map_err(error)?,
                json,
                sticky::StickyReport::render,
            )
        }
    }
}

/// Reads and checks a config file, or the embedded default when there is none.
fn load(path: Option<&std::path::Path>) -> Result<Loaded, String> {
    let (name, text) = match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
            (path.display().to_string(), text)
        }
        None => (
            "<embedded default>".to_owned(),
            config::EMBEDDED_DEFAULT.to_owned(),
        ),
    };
    config::load(&name, &text).map_err(|errors| {
        let count = errors.len();
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        format!(
            "{}\n{count} error{} in the configuration; nothing was started",
            lines.join("\n"),
            if count == 1 { "" } else { "s" }
        )
    })
}

/// Starts the built-in replicas, then the proxy; drains on Ctrl-C or SIGTERM.
fn serve(loaded: Loaded) -> Result<(), String> {
    let runtime = control_runtime()?;
    runtime.block_on(async move {
        let stop_signal = StopSignal::install()?;
        let replicas = start_replicas(loaded.upstreams).await?;
        let running = trafik_proxy::start(loaded.plan.clone()).map_err(|e| e.to_string())?;
        say(&describe::running(&loaded.plan, &running));
        stop_signal.wait().await;
        tracing::info!(timeout = ?loaded.plan.drain_timeout, "draining");
        running.stop();
        let _ = tokio::task::spawn_blocking(move || running.wait()).await;
        for replica in replicas {
            replica.stop().await;
        }
        Ok(())
    })
}

/// Runs replicas alone until a stop signal (`trafik upstream`). With the load lesson's CPU work
/// or maintenance passes on, the replica runs on one thread, as the lesson's Node.js server
/// does: a pass then holds up every request, which is the behaviour the soak test exposes.
fn serve_replicas(replicas: Vec<(SocketAddr, ReplicaConfig)>) -> Result<(), String> {
    let single_threaded = replicas
        .iter()
        .any(|(_, c)| c.load_lesson.maintenance_every > 0 || !c.load_lesson.work.is_zero());
    let runtime = if single_threaded {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the runtime: {e}"))?
    } else {
        control_runtime()?
    };
    runtime.block_on(async move {
        let stop_signal = StopSignal::install()?;
        let replicas = start_replicas(replicas).await?;
        stop_signal.wait().await;
        for replica in replicas {
            replica.stop().await;
        }
        Ok(())
    })
}

async fn start_replicas(
    replicas: Vec<(SocketAddr, ReplicaConfig)>,
) -> Result<Vec<trafik_upstream::RunningReplica>, String> {
    let mut running = Vec::with_capacity(replicas.len());
    for (address, config) in replicas {
        let name = config.name.clone();
        let replica = trafik_upstream::spawn(address, config)
            .await
            .map_err(|e| format!("upstream {name:?} cannot listen on {address}: {e}"))?;
        say(&format!("upstream {name} on http://{}", replica.address()));
        running.push(replica);
    }
    Ok(running)
}

/// Prints a line for the user. A closed stdout (`trafik serve | head -1`) must not stop a
/// server, so write errors are ignored.
fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// The runtime for replicas and signals; the proxy's workers run their own.
fn control_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// Ctrl-C and SIGTERM, caught from before anything starts so an early signal still drains
/// instead of killing the process.
struct StopSignal {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl StopSignal {
    fn install() -> Result<Self, String> {
        use tokio::signal::unix::{SignalKind, signal};
        let install = |kind| signal(kind).map_err(|e| format!("cannot catch signals: {e}"));
        Ok(StopSignal {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
