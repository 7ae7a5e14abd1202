//! `trafik config push FILE --canary INSTANCE --gate CONDITIONS --for DURATION`: a push with a
//! safety net. The checked file goes to `<prefix>canary/<INSTANCE>`, which only that instance
//! watches and runs in place of the fleet's `config`; its live `/status` (at the admin address
//! it registered under `instances/<INSTANCE>`) is read at the start and the end of the window,
//! and the gate judges the difference. Passed: the file becomes the fleet's `config` and the
//! canary key goes. Failed: the canary key goes (the instance returns to the fleet's
//! configuration) and the command exits 1 naming the failing figure. The canary key is bound
//! to a lease this command renews, so a push that dies half way reverts too. Every step is
//! recorded under `<prefix>pushes/<id>`, which `trafik status` shows.

use std::cell::Cell;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use trafik_etcd::{Etcd, EtcdError};

use super::admin_client;
use super::fleet::Keys;
use super::push_gate::{Gate, Reading, Window};
use super::say;

/// How long the canary may take to report that it runs (or refused) its configuration, and
/// that it went back to the fleet's.
const TAKE_UP: Duration = Duration::from_secs(15);
/// How long one `/status` read may take.
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the canary's key outlives this command's last renewal.
const LEASE_TTL: Duration = Duration::from_secs(5);
/// How often the lease is renewed.
const RENEW: Duration = Duration::from_secs(1);
/// How often the canary's registration is read while waiting for it.
const POLL: Duration = Duration::from_millis(100);

/// What the push needs: where, what, and how it is judged.
pub(super) struct Push<'a> {
    pub(super) etcd: &'a Etcd,
    pub(super) keys: &'a Keys,
    pub(super) file: &'a str,
    pub(super) text: &'a str,
    pub(super) canary: &'a str,
    pub(super) gate_text: &'a str,
    pub(super) gate: Gate,
    pub(super) window: Duration,
}

/// This command's etcd calls, and the lease that holds the canary's key: should the command
/// stop half way (killed, its machine gone), the lease runs out and the canary goes back to the
/// fleet's configuration by itself.
struct Session<'a> {
    runtime: tokio::runtime::Runtime,
    etcd: &'a Etcd,
    lease: i64,
    renewed: Cell<Instant>,
}

impl Session<'_> {
    fn call<T>(&self, call: impl Future<Output = Result<T, EtcdError>>) -> Result<T, String> {
        self.runtime.block_on(call).map_err(|e| e.to_string())
    }

    /// Renews the lease when a renewal is due; an error once it has run out (the key is gone).
    fn keep(&self) -> Result<(), String> {
        if self.renewed.get().elapsed() < RENEW {
            return Ok(());
        }
        if !self.call(self.etcd.keep_alive(self.lease))? {
            return Err("the canary's key went with its expired lease".into());
        }
        self.renewed.set(Instant::now());
        Ok(())
    }

    /// Waits `duration`, renewing the lease meanwhile.
    fn wait(&self, duration: Duration) -> Result<(), String> {
        let until = Instant::now() + duration;
        loop {
            self.keep()?;
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            std::thread::sleep(left.min(POLL));
        }
    }

    /// Polls the canary's registration until its `canary` verdict satisfies `done`; that
    /// verdict.
    fn taken_up(&self, instance_key: &str, done: impl Fn(&Value) -> bool) -> Result<Value, String> {
        let deadline = Instant::now() + TAKE_UP;
        loop {
            if let Ok(Some(value)) = self.runtime.block_on(self.etcd.get(instance_key)) {
                let registered: Value = serde_json::from_slice(&value.value).unwrap_or(Value::Null);
                if done(&registered["canary"]) {
                    return Ok(registered["canary"].clone());
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the instance did not report the change within {}",
                    humantime::format_duration(TAKE_UP)
                ));
            }
            self.wait(POLL)?;
        }
    }
}

/// The push's record under `<prefix>pushes/<id>`, written again after every step.
struct Record {
    key: String,
    value: Value,
}

impl Record {
    fn step(&mut self, session: &Session<'_>, what: &str) -> Result<(), String> {
        say(what);
        self.value["steps"]
            .as_array_mut()
            .expect("steps is a list")
            .push(json!({ "at": now(), "step": what }));
        session
            .call(
                session
                    .etcd
                    .put(&self.key, self.value.to_string().as_bytes(), None),
            )
            .map(|_| ())
    }
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Runs the push; exit 0 when published, 1 when the canary failed and was reverted.
pub(super) fn run(push: Push<'_>) -> Result<ExitCode, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let canary_key = push.keys.canary(push.canary);
    let instance_key = format!("{}{}", push.keys.instances(), push.canary);
    let registered = runtime
        .block_on(push.etcd.get(&instance_key))
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "no instance {:?} is registered under {}{}; `trafik status --etcd {} --etcd-prefix {}` lists them; nothing was published",
                push.canary,
                push.etcd.url(),
                push.keys.instances(),
                push.etcd.url(),
                push.keys.prefix
            )
        })?;
    let registered: Value = serde_json::from_slice(&registered.value).unwrap_or(Value::Null);
    let admin: SocketAddr = registered["admin"]
        .as_str()
        .and_then(|admin| admin.parse().ok())
        .ok_or_else(|| {
            format!(
                "instance {:?} announces no admin address (run it with [admin] or --admin); nothing was published",
                push.canary
            )
        })?;
    let lease = runtime
        .block_on(push.etcd.grant(LEASE_TTL))
        .map_err(|e| e.to_string())?;
    let session = Session {
        runtime,
        etcd: push.etcd,
        lease,
        renewed: Cell::new(Instant::now()),
    };
    // The id starts with the time to the millisecond, so the keys list in the order pushed.
    let id = format!(
        "{}-{}",
        humantime::format_rfc3339_millis(SystemTime::now()),
        std::process::id()
    );
    let mut record = Record {
        key: format!("{}{id}", push.keys.pushes()),
        value: json!({
            "id": id,
            "file": push.file,
            "canary": push.canary,
            "admin": admin.to_string(),
            "gate": push.gate_text,
            "for_seconds": push.window.as_secs_f64(),
            "verdict": "running",
            "steps": [],
        }),
    };

    let revision = session.call(
        push.etcd
            .put(&canary_key, push.text.as_bytes(), Some(lease)),
    )?;
    record.step(
        &session,
        &format!(
            "applied {} to {} only ({}{canary_key}, revision {revision})",
            push.file,
            push.canary,
            push.etcd.url()
        ),
    )?;
    let verdict = match session.taken_up(&instance_key, |canary| canary["revision"] == revision) {
        Ok(canary) if canary["accepted"] == true => record
            .step(
                &session,
                &format!(
                    "{} runs it (generation {}); watching its /status at {admin} for {}: {}",
                    push.canary,
                    canary["generation"],
                    humantime::format_duration(push.window),
                    push.gate_text
                ),
            )
            .and_then(|()| judge(&push, admin, &session, &mut record)),
        Ok(canary) => Err(format!(
            "{} refused the configuration: {}",
            push.canary, canary["errors"]
        )),
        Err(error) => Err(error),
    };
    match verdict {
        Ok(()) => {
            let published = session.call(push.etcd.put(
                &push.keys.config(),
                push.text.as_bytes(),
                None,
            ))?;
            session.call(push.etcd.delete(&canary_key))?;
            record.value["verdict"] = "published".into();
            record.step(
                &session,
                &format!(
                    "published {} to every instance ({}{}, revision {published})",
                    push.file,
                    push.etcd.url(),
                    push.keys.config()
                ),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Err(failing) => {
            session.call(push.etcd.delete(&canary_key))?;
            record.value["verdict"] = "reverted".into();
            record.value["failing"] = failing.clone().into();
            record.step(&session, &format!("{} failed: {failing}", push.canary))?;
            let back = session.taken_up(&instance_key, Value::is_null);
            let reverted = match back {
                Ok(_) => format!(
                    "reverted {}: it runs the fleet's configuration again; nothing was published",
                    push.canary
                ),
                Err(error) => format!(
                    "removed {}'s own configuration, but {error}; nothing was published",
                    push.canary
                ),
            };
            record.step(&session, &reverted)?;
            eprintln!(
                "error: canary {} failed the gate: {failing}; reverted, nothing published",
                push.canary
            );
            Ok(ExitCode::from(1))
        }
    }
}

/// Reads the canary's `/status` at the start and the end of the window and judges the
/// difference; `Err` names the failing figures.
fn judge(
    push: &Push<'_>,
    admin: SocketAddr,
    session: &Session<'_>,
    record: &mut Record,
) -> Result<(), String> {
    let start = reading(admin)?;
    session.wait(push.window)?;
    let end = reading(admin)?;
    let window = Window::between(&start, &end);
    let judged = push.gate.judge(&window);
    record.value["figures"] = window.summary();
    record.value["judged"] = judged
        .iter()
        .map(|j| json!({ "condition": j.condition, "figure": j.figure, "passed": j.passed }))
        .collect();
    let failing: Vec<String> = judged
        .iter()
        .filter(|j| !j.passed)
        .map(|j| format!("{} (gate {})", j.figure, j.condition))
        .collect();
    if failing.is_empty() {
        let figures: Vec<&str> = judged.iter().map(|j| j.figure.as_str()).collect();
        record.step(
            session,
            &format!(
                "gate passed over {} requests: {}",
                window.requests(),
                figures.join(", ")
            ),
        )?;
        Ok(())
    } else {
        Err(failing.join(", "))
    }
}

fn reading(admin: SocketAddr) -> Result<Reading, String> {
    let (status, document) = admin_client::exchange(admin, "GET", "/status", STATUS_TIMEOUT)
        .map_err(|e| format!("the canary's /status did not answer: {e}"))?;
    if status != 200 {
        return Err(format!(
            "the canary's /status answered {status} (set TRAFIK_ADMIN_TOKEN?)"
        ));
    }
    Reading::from_status(&document)
}
