//! Several instances on one configuration in etcd: `trafik serve --etcd`, `trafik config push`
//! and `trafik status --etcd`.
//!
//! Under `<prefix>`: `config` holds the TOML, `status` the verdict on its latest revision, and
//! `instances/<id>` each running instance's generation and health, bound to a lease that ends
//! with the instance. A change of `config` goes through the same check and reload as a file
//! (`Instance::reload` with a [`Reloader`] that reads the latest value from etcd).

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use trafik_balance::PickContext;
use trafik_etcd::{Etcd, EtcdError, KeyValue};
use trafik_proxy::{Instance, Reloader};

use super::{say, serve};
use crate::cli::{ConfigPushArgs, EtcdArgs, ServeArgs, StatusArgs};
use crate::config::{self, Loaded};

/// How long an instance's key outlives its last heartbeat.
const LEASE_TTL: Duration = Duration::from_secs(5);
/// How often an instance renews its lease and reports itself.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// The longest wait between attempts to reach etcd again.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The keys of one fleet.
#[derive(Clone, Debug)]
struct Keys {
    prefix: String,
}

impl Keys {
    fn new(args: &EtcdArgs) -> Keys {
        let mut prefix = args.etcd_prefix.clone();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        Keys { prefix }
    }
    fn config(&self) -> String {
        format!("{}config", self.prefix)
    }
    fn status(&self) -> String {
        format!("{}status", self.prefix)
    }
    fn instances(&self) -> String {
        format!("{}instances/", self.prefix)
    }
}

fn connect(args: &EtcdArgs) -> Result<(Etcd, Keys), String> {
    let url = args.etcd.as_deref().ok_or("--etcd URL is required")?;
    Ok((Etcd::new(url).map_err(|e| e.to_string())?, Keys::new(args)))
}

fn block_on<T>(future: impl Future<Output = T>) -> Result<T, String> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?
        .block_on(future))
}

/// The configuration value last seen in etcd, which a reload reads.
struct Latest {
    text: String,
    revision: i64,
}

/// `trafik serve --etcd URL`: the configuration from etcd, watched for as long as it runs.
pub fn run(args: ServeArgs) -> Result<ExitCode, String> {
    let (etcd, keys) = connect(&args.etcd)?;
    let first = block_on(etcd.get(&keys.config()))?
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "etcd at {} has no configuration under {}; publish one with `trafik config push FILE --etcd {} --etcd-prefix {}`",
                etcd.url(),
                keys.config(),
                etcd.url(),
                keys.prefix
            )
        })?;
    let source = format!("{}{}", etcd.url(), keys.config());
    let latest = Arc::new(Mutex::new(Latest {
        text: String::from_utf8_lossy(&first.value).into_owned(),
        revision: first.mod_revision,
    }));
    let load = {
        let latest = latest.clone();
        let source = source.clone();
        let args = args.clone();
        move || -> Result<Loaded, Vec<String>> {
            let text = latest.lock().expect("never poisoned").text.clone();
            serve::load_text(&source, &text, &args)
        }
    };
    let loaded = load().map_err(|errors| errors.join("\n"))?;
    let reloader = Reloader {
        file: source,
        load: Box::new(move || load().map(|loaded| loaded.plan)),
    };
    let instance_id = args
        .instance
        .clone()
        .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
    let agent = Agent {
        etcd,
        keys,
        id: instance_id,
        latest,
    };
    serve::serve_with(
        loaded,
        Some(reloader),
        Some(Box::new(move |running| {
            let addresses = json!({
                "admin": running.admin_address(),
                "listeners": running.listener_addresses(),
            });
            tokio::spawn(agent.run(running.instance(), addresses));
        })),
    )?;
    Ok(ExitCode::SUCCESS)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "trafik".into())
}

/// Watches the configuration key and reports the instance, reconnecting while etcd is away;
/// the proxy serves its last good configuration meanwhile.
struct Agent {
    etcd: Etcd,
    keys: Keys,
    id: String,
    latest: Arc<Mutex<Latest>>,
}

impl Agent {
    async fn run(self, instance: Arc<Instance>, addresses: serde_json::Value) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let error = self.session(&instance, &addresses, &mut backoff).await;
            tracing::warn!(%error, retry_in = ?backoff, "etcd lost; serving the last good configuration");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One connection's worth of work: a lease, a catch-up read, then the watch and heartbeats
    /// until etcd goes away.
    async fn session(
        &self,
        instance: &Arc<Instance>,
        addresses: &serde_json::Value,
        backoff: &mut Duration,
    ) -> EtcdError {
        let result: Result<(), EtcdError> = async {
            let lease = self.etcd.grant(LEASE_TTL).await?;
            self.report(instance, addresses, lease).await?;
            *backoff = Duration::from_millis(100);
            if let Some(current) = self.etcd.get(&self.keys.config()).await? {
                self.apply(instance, current).await?;
            }
            let from = self.revision() + 1;
            let mut watch = self.etcd.watch(&self.keys.config(), from).await?;
            let mut heartbeat = tokio::time::interval(HEARTBEAT);
            loop {
                tokio::select! {
                    changed = watch.next() => {
                        for value in changed? {
                            self.apply(instance, value).await?;
                        }
                        self.report(instance, addresses, lease).await?;
                    }
                    _ = heartbeat.tick() => {
                        if !self.etcd.keep_alive(lease).await? {
                            return Err(EtcdError("the instance's lease expired".into()));
                        }
                        self.report(instance, addresses, lease).await?;
                    }
                }
            }
        }
        .await;
        result
            .err()
            .unwrap_or_else(|| EtcdError("the session ended".into()))
    }

    fn revision(&self) -> i64 {
        self.latest.lock().expect("never poisoned").revision
    }

    /// Checks and applies a new revision of the configuration through the reload path, and
    /// records the verdict under the status key.
    async fn apply(&self, instance: &Arc<Instance>, value: KeyValue) -> Result<(), EtcdError> {
        if value.mod_revision <= self.revision() {
            return Ok(());
        }
        {
            let mut latest = self.latest.lock().expect("never poisoned");
            latest.text = String::from_utf8_lossy(&value.value).into_owned();
            latest.revision = value.mod_revision;
        }
        let reloading = instance.clone();
        let verdict = tokio::task::spawn_blocking(move || reloading.reload())
            .await
            .unwrap_or_else(|e| Err(vec![format!("the reload stopped: {e}")]));
        let status = match verdict {
            Ok(generation) => {
                tracing::info!(
                    generation,
                    revision = value.mod_revision,
                    "reloaded from etcd"
                );
                json!({ "revision": value.mod_revision, "accepted": true, "generation": generation, "instance": self.id })
            }
            Err(errors) => {
                for error in &errors {
                    tracing::error!(
                        revision = value.mod_revision,
                        "etcd configuration refused, nothing changed: {error}"
                    );
                }
                json!({ "revision": value.mod_revision, "accepted": false, "errors": errors, "instance": self.id })
            }
        };
        self.etcd
            .put(&self.keys.status(), status.to_string().as_bytes(), None)
            .await?;
        Ok(())
    }

    /// Writes this instance's generation and health under its lease-bound key.
    async fn report(
        &self,
        instance: &Arc<Instance>,
        addresses: &serde_json::Value,
        lease: i64,
    ) -> Result<(), EtcdError> {
        let snapshot = instance.snapshot();
        let context = PickContext::default();
        let pools: Vec<_> = snapshot
            .pools
            .iter()
            .map(|pool| {
                json!({
                    "name": pool.plan.name,
                    "up": pool.backends.available_count(&context),
                    "backends": pool.backends.len(),
                })
            })
            .collect();
        let healthy = snapshot
            .pools
            .iter()
            .all(|pool| pool.backends.available_count(&context) > 0);
        let value = json!({
            "id": self.id,
            "generation": snapshot.generation,
            "revision": self.revision(),
            "healthy": healthy,
            "pools": pools,
            "admin": addresses["admin"],
            "listeners": addresses["listeners"],
        });
        let key = format!("{}{}", self.keys.instances(), self.id);
        self.etcd
            .put(&key, value.to_string().as_bytes(), Some(lease))
            .await?;
        Ok(())
    }
}

/// The fleet's configuration in force, checked (for `trafik plan --etcd`).
pub fn current(args: &EtcdArgs) -> Result<Loaded, String> {
    let (etcd, keys) = connect(args)?;
    let value = block_on(etcd.get(&keys.config()))?
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("etcd at {} has no {}", etcd.url(), keys.config()))?;
    let name = format!("{}{}", etcd.url(), keys.config());
    config::load(&name, &String::from_utf8_lossy(&value.value))
        .map_err(|errors| config::render_errors(&errors))
}

/// `trafik config push FILE`: checks the file as `trafik check` does and publishes it only when
/// it is clean.
pub fn push(args: ConfigPushArgs) -> Result<ExitCode, String> {
    let (etcd, keys) = connect(&args.etcd)?;
    let name = args.file.display().to_string();
    let text = std::fs::read_to_string(&args.file).map_err(|e| {
        let unread = format!("cannot read config file {name}: {e}");
        config::render_errors_then(&[unread], "nothing was published")
    })?;
    config::load(&name, &text)
        .map_err(|errors| config::render_errors_then(&errors, "nothing was published"))?;
    let revision =
        block_on(etcd.put(&keys.config(), text.as_bytes(), None))?.map_err(|e| e.to_string())?;
    say(&format!(
        "published {name} to {}{} (revision {revision})",
        etcd.url(),
        keys.config()
    ));
    Ok(ExitCode::SUCCESS)
}

/// `trafik status --etcd URL`: every instance that reported under the prefix, and the verdict
/// on the latest configuration.
pub fn status(args: StatusArgs) -> Result<ExitCode, String> {
    let (etcd, keys) = connect(&args.etcd)?;
    let (instances, status) = block_on(async {
        Ok::<_, EtcdError>((
            etcd.list(&keys.instances()).await?,
            etcd.get(&keys.status()).await?,
        ))
    })?
    .map_err(|e| e.to_string())?;
    let parse = |value: &[u8]| serde_json::from_slice(value).unwrap_or(serde_json::Value::Null);
    let instances: Vec<serde_json::Value> = instances.iter().map(|kv| parse(&kv.value)).collect();
    let status = status.map_or(serde_json::Value::Null, |kv| parse(&kv.value));
    if args.json {
        let report = json!({ "instances": instances, "status": status });
        say(&serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
        return Ok(ExitCode::SUCCESS);
    }
    say(&format!(
        "{} instance(s) under {}{}",
        instances.len(),
        etcd.url(),
        keys.instances()
    ));
    for instance in &instances {
        say(&format!(
            "  {}  generation {}  revision {}  {}  admin {}",
            instance["id"].as_str().unwrap_or("?"),
            instance["generation"],
            instance["revision"],
            if instance["healthy"] == true {
                "healthy"
            } else {
                "UNHEALTHY"
            },
            instance["admin"].as_str().unwrap_or("-"),
        ));
    }
    if !status.is_null() {
        say(&format!("latest configuration: {status}"));
    }
    Ok(ExitCode::SUCCESS)
}
