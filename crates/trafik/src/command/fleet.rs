//! Several instances on one configuration in etcd: `trafik serve --etcd`, `trafik config push`
//! and `trafik status --etcd`.
//!
//! Under `<prefix>`: `config` holds the TOML, `status` the verdict on its latest revision, and
//! `instances/<id>` each running instance's generation and health, bound to a lease that ends
//! with the instance. `canary/<id>`, while it exists, is that one instance's configuration in
//! place of `config` (`trafik config push --canary`, [`super::canary`]); `pushes/<id>` records
//! each canary push. A change of either key goes through the same check and reload as a file
//! (`Instance::reload` with a [`Reloader`] that reads the latest value from etcd).

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use trafik_balance::PickContext;
use trafik_etcd::{Etcd, EtcdError, KeyValue};
use trafik_proxy::{Instance, Reloader};

use super::push_gate::Gate;
use super::{canary, say, serve};
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
pub(super) struct Keys {
    pub(super) prefix: String,
}

impl Keys {
    fn new(args: &EtcdArgs) -> Keys {
        let mut prefix = args.etcd_prefix.clone();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        Keys { prefix }
    }
    pub(super) fn config(&self) -> String {
        format!("{}config", self.prefix)
    }
    fn status(&self) -> String {
        format!("{}status", self.prefix)
    }
    pub(super) fn instances(&self) -> String {
        format!("{}instances/", self.prefix)
    }
    /// The configuration only instance `id` runs, while the key exists.
    pub(super) fn canary(&self, id: &str) -> String {
        format!("{}canary/{id}", self.prefix)
    }
    pub(super) fn pushes(&self) -> String {
        format!("{}pushes/", self.prefix)
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

/// A configuration text from etcd and the revision that wrote it.
struct Text {
    text: String,
    revision: i64,
}

/// The configuration values last seen in etcd, which a reload reads: the instance's own
/// (`canary/<id>`) while it exists, the fleet's otherwise.
struct Latest {
    fleet: Text,
    canary: Option<Text>,
}

/// `trafik serve --etcd URL`: the configuration from etcd, watched for as long as it runs.
pub fn run(args: ServeArgs) -> Result<ExitCode, String> {
    let (etcd, keys) = connect(&args.etcd)?;
    let instance_id = args
        .instance
        .clone()
        .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
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
    let canary_source = format!("{}{}", etcd.url(), keys.canary(&instance_id));
    let latest = Arc::new(Mutex::new(Latest {
        fleet: Text {
            text: String::from_utf8_lossy(&first.value).into_owned(),
            revision: first.mod_revision,
        },
        canary: None,
    }));
    let load = {
        let latest = latest.clone();
        let args = args.clone();
        move || -> Result<Loaded, Vec<String>> {
            let (name, text) = {
                let latest = latest.lock().expect("never poisoned");
                match &latest.canary {
                    Some(canary) => (&canary_source, canary.text.clone()),
                    None => (&source, latest.fleet.text.clone()),
                }
            };
            serve::load_text(name, &text, &args)
        }
    };
    let loaded = load().map_err(|errors| errors.join("\n"))?;
    let reloader = Reloader {
        file: format!("{}{}", etcd.url(), keys.config()),
        load: Box::new(move || load().map(|loaded| loaded.plan)),
    };
    let acme = trafik_proxy::tls::acme::manager::Store::Etcd {
        etcd: etcd.clone(),
        prefix: keys.prefix.clone(),
        holder: instance_id.clone(),
    };
    let agent = Agent {
        etcd,
        keys,
        id: instance_id,
        latest,
        canary_verdict: Mutex::new(serde_json::Value::Null),
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
        acme,
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
    /// The verdict on this instance's own configuration (`canary/<id>`), reported with it;
    /// null while there is none.
    canary_verdict: Mutex<serde_json::Value>,
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
            let canary_key = self.keys.canary(&self.id);
            let (canary, read_at) = self.etcd.get_with_revision(&canary_key).await?;
            self.apply_canary(instance, canary).await;
            let from = self.revision() + 1;
            let mut watch = self.etcd.watch(&self.keys.config(), from).await?;
            let mut canary_watch = self.etcd.watch(&canary_key, read_at + 1).await?;
            let mut heartbeat = tokio::time::interval(HEARTBEAT);
            loop {
                tokio::select! {
                    changed = watch.next() => {
                        for value in changed? {
                            self.apply(instance, value).await?;
                        }
                        self.report(instance, addresses, lease).await?;
                    }
                    changed = canary_watch.next() => {
                        for value in changed? {
                            self.apply_canary(instance, Some(value)).await;
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

    /// The revision of the fleet's configuration last seen.
    fn revision(&self) -> i64 {
        self.latest.lock().expect("never poisoned").fleet.revision
    }

    /// Checks and applies the configuration in force now through the reload path.
    async fn reload(instance: &Arc<Instance>) -> Result<u64, Vec<String>> {
        let reloading = instance.clone();
        tokio::task::spawn_blocking(move || reloading.reload())
            .await
            .unwrap_or_else(|e| Err(vec![format!("the reload stopped: {e}")]))
    }

    /// Applies a new revision of this instance's own configuration, or goes back to the
    /// fleet's when the key is gone (`None`, or a deletion), and keeps the verdict for the
    /// instance's report.
    async fn apply_canary(&self, instance: &Arc<Instance>, value: Option<KeyValue>) {
        let value = value.filter(|value| !value.deleted);
        {
            let mut latest = self.latest.lock().expect("never poisoned");
            match (&value, &latest.canary) {
                (None, None) => return,
                (Some(new), Some(old)) if new.mod_revision <= old.revision => return,
                _ => {}
            }
            latest.canary = value.as_ref().map(|value| Text {
                text: String::from_utf8_lossy(&value.value).into_owned(),
                revision: value.mod_revision,
            });
        }
        let verdict = Self::reload(instance).await;
        let revision = value.as_ref().map(|value| value.mod_revision);
        let record = match (revision, verdict) {
            (None, Ok(generation)) => {
                tracing::info!(generation, "own configuration removed; back on the fleet's");
                serde_json::Value::Null
            }
            (Some(revision), Ok(generation)) => {
                tracing::info!(
                    generation,
                    revision,
                    "reloaded with this instance's own configuration from etcd"
                );
                json!({ "revision": revision, "accepted": true, "generation": generation })
            }
            (revision, Err(errors)) => {
                for error in &errors {
                    tracing::error!(
                        ?revision,
                        "own configuration refused, nothing changed: {error}"
                    );
                }
                json!({ "revision": revision, "accepted": false, "errors": errors })
            }
        };
        *self.canary_verdict.lock().expect("never poisoned") = record;
    }

    /// Checks and applies a new revision of the fleet's configuration through the reload path
    /// (unless this instance runs its own meanwhile), and records the verdict under the status
    /// key.
    async fn apply(&self, instance: &Arc<Instance>, value: KeyValue) -> Result<(), EtcdError> {
        if value.deleted || value.mod_revision <= self.revision() {
            return Ok(());
        }
        {
            let mut latest = self.latest.lock().expect("never poisoned");
            latest.fleet = Text {
                text: String::from_utf8_lossy(&value.value).into_owned(),
                revision: value.mod_revision,
            };
            if latest.canary.is_some() {
                tracing::info!(
                    revision = value.mod_revision,
                    "the fleet's configuration changed; it applies once this instance's own is removed"
                );
                return Ok(());
            }
        }
        let verdict = Self::reload(instance).await;
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
            "canary": self.canary_verdict.lock().expect("never poisoned").clone(),
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
/// it is clean; with `--canary`, to that instance first ([`canary::run`]).
pub fn push(args: ConfigPushArgs) -> Result<ExitCode, String> {
    let (etcd, keys) = connect(&args.etcd)?;
    let gate = args
        .gate
        .as_deref()
        .map(|text| Gate::parse(text).map_err(|e| format!("{e}\nnothing was published")))
        .transpose()?;
    let name = args.file.display().to_string();
    let text = std::fs::read_to_string(&args.file).map_err(|e| {
        let unread = format!("cannot read config file {name}: {e}");
        config::render_errors_then(&[unread], "nothing was published")
    })?;
    config::load(&name, &text)
        .map_err(|errors| config::render_errors_then(&errors, "nothing was published"))?;
    if let (Some(canary), Some(gate)) = (&args.canary, gate) {
        return canary::run(canary::Push {
            etcd: &etcd,
            keys: &keys,
            file: &name,
            text: &text,
            canary,
            gate_text: args.gate.as_deref().unwrap_or_default(),
            gate,
            window: args.window,
        });
    }
    let revision =
        block_on(etcd.put(&keys.config(), text.as_bytes(), None))?.map_err(|e| e.to_string())?;
    say(&format!(
        "published {name} to {}{} (revision {revision})",
        etcd.url(),
        keys.config()
    ));
    Ok(ExitCode::SUCCESS)
}

/// How many of the latest canary pushes `trafik status` shows.
const PUSHES_SHOWN: usize = 10;

/// `trafik status --etcd URL`: every instance that reported under the prefix, the verdict
/// on the latest configuration and the latest canary pushes.
pub fn status(args: StatusArgs) -> Result<ExitCode, String> {
    let (etcd, keys) = connect(&args.etcd)?;
    let (instances, status, pushes, canaries) = block_on(async {
        Ok::<_, EtcdError>((
            etcd.list(&keys.instances()).await?,
            etcd.get(&keys.status()).await?,
            etcd.list(&keys.pushes()).await?,
            etcd.list(&keys.canary("")).await?,
        ))
    })?
    .map_err(|e| e.to_string())?;
    let parse = |value: &[u8]| serde_json::from_slice(value).unwrap_or(serde_json::Value::Null);
    let instances: Vec<serde_json::Value> = instances.iter().map(|kv| parse(&kv.value)).collect();
    let status = status.map_or(serde_json::Value::Null, |kv| parse(&kv.value));
    // Keys name the push's start time first, so the last ones are the latest.
    // A push still running whose canary key is gone stopped half way (its lease ended).
    let pushes: Vec<serde_json::Value> = pushes[pushes.len().saturating_sub(PUSHES_SHOWN)..]
        .iter()
        .map(|kv| {
            let mut push = parse(&kv.value);
            let canary_key = keys.canary(push["canary"].as_str().unwrap_or_default());
            if push["verdict"] == "running" && !canaries.iter().any(|kv| kv.key == canary_key) {
                push["verdict"] = "abandoned".into();
            }
            push
        })
        .collect();
    if args.json {
        let report = json!({ "instances": instances, "status": status, "pushes": pushes });
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
    for push in &pushes {
        let text = |field: &str| push[field].as_str().unwrap_or("?").to_owned();
        say(&format!(
            "push {}: {} on canary {}, gate {} for {} s: {}{}",
            text("id"),
            text("file"),
            text("canary"),
            text("gate"),
            push["for_seconds"],
            text("verdict"),
            push["failing"]
                .as_str()
                .map(|failing| format!(": {failing}"))
                .unwrap_or_default(),
        ));
        for step in push["steps"].as_array().into_iter().flatten() {
            say(&format!(
                "    {}  {}",
                step["at"].as_str().unwrap_or(""),
                step["step"].as_str().unwrap_or("")
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}
