//! `trafik config push FILE --canary INSTANCE --gate CONDITIONS --for DURATION`: a push with a
//! safety net. The checked file goes to `<prefix>canary/<INSTANCE>`, which only that instance
//! watches and runs in place of the fleet's `config`; its live `/status` (at the admin address
//! it registered under `instances/<INSTANCE>`) is read at the start and the end of the window,
//! and the gate judges the difference. Passed: the file becomes the fleet's `config` and the
//! canary key goes. Failed: the canary key goes (the instance returns to the fleet's
//! configuration) and the command exits 1 naming the failing figure. Every step is recorded
//! under `<prefix>pushes/<id>`, which `trafik status` shows.

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

/// The push's record under `<prefix>pushes/<id>`, written again after every step.
struct Record<'a> {
    etcd: &'a Etcd,
    runtime: &'a tokio::runtime::Runtime,
    key: String,
    value: Value,
}

impl Record<'_> {
    fn step(&mut self, what: &str) -> Result<(), String> {
        say(what);
        self.value["steps"]
            .as_array_mut()
            .expect("steps is a list")
            .push(json!({ "at": now(), "step": what }));
        self.save()
    }

    fn save(&self) -> Result<(), String> {
        self.runtime
            .block_on(
                self.etcd
                    .put(&self.key, self.value.to_string().as_bytes(), None),
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

fn etcd_call<T>(result: Result<T, EtcdError>) -> Result<T, String> {
    result.map_err(|e| e.to_string())
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
    let registered = etcd_call(runtime.block_on(push.etcd.get(&instance_key)))?.ok_or_else(|| {
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
    let started = now();
    let mut record = Record {
        etcd: push.etcd,
        runtime: &runtime,
        key: format!("{}{}-{}", push.keys.pushes(), started, std::process::id()),
        value: json!({
            "file": push.file,
            "canary": push.canary,
            "admin": admin.to_string(),
            "gate": push.gate_text,
            "for_seconds": push.window.as_secs_f64(),
            "started_at": started,
            "verdict": "running",
            "steps": [],
        }),
    };
    record.value["id"] = record.key[push.keys.pushes().len()..].into();

    let revision =
        etcd_call(runtime.block_on(push.etcd.put(&canary_key, push.text.as_bytes(), None)))?;
    record.step(&format!(
        "applied {} to {} only ({}{canary_key}, revision {revision})",
        push.file,
        push.canary,
        push.etcd.url()
    ))?;
    let verdict = match taken_up(&runtime, push.etcd, &instance_key, |canary| {
        canary["revision"] == revision
    }) {
        Ok(canary) if canary["accepted"] == true => {
            record.step(&format!(
                "{} runs it (generation {}); watching its /status at {admin} for {}: {}",
                push.canary,
                canary["generation"],
                humantime::format_duration(push.window),
                push.gate_text
            ))?;
            judge(&push, admin, &mut record)
        }
        Ok(canary) => Err(format!(
            "{} refused the configuration: {}",
            push.canary, canary["errors"]
        )),
        Err(error) => Err(error),
    };
    match verdict {
        Ok(()) => {
            let published = etcd_call(runtime.block_on(push.etcd.put(
                &push.keys.config(),
                push.text.as_bytes(),
                None,
            )))?;
            etcd_call(runtime.block_on(push.etcd.delete(&canary_key)))?;
            record.value["verdict"] = "published".into();
            record.step(&format!(
                "published {} to every instance ({}{}, revision {published})",
                push.file,
                push.etcd.url(),
                push.keys.config()
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(failing) => {
            etcd_call(runtime.block_on(push.etcd.delete(&canary_key)))?;
            record.value["verdict"] = "reverted".into();
            record.value["failing"] = failing.clone().into();
            record.step(&format!("{} failed: {failing}", push.canary))?;
            let back = taken_up(&runtime, push.etcd, &instance_key, Value::is_null);
            record.step(&match back {
                Ok(_) => format!(
                    "reverted {}: it runs the fleet's configuration again; nothing was published",
                    push.canary
                ),
                Err(error) => format!(
                    "removed {}'s own configuration, but {error}; nothing was published",
                    push.canary
                ),
            })?;
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
fn judge(push: &Push<'_>, admin: SocketAddr, record: &mut Record<'_>) -> Result<(), String> {
    let start = reading(admin)?;
    std::thread::sleep(push.window);
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
        record.step(&format!(
            "gate passed over {} requests: {}",
            window.requests(),
            figures.join(", ")
        ))?;
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

/// Polls the canary's registration until its `canary` verdict satisfies `done`; that verdict.
fn taken_up(
    runtime: &tokio::runtime::Runtime,
    etcd: &Etcd,
    instance_key: &str,
    done: impl Fn(&Value) -> bool,
) -> Result<Value, String> {
    let deadline = Instant::now() + TAKE_UP;
    loop {
        if let Ok(Some(value)) = runtime.block_on(etcd.get(instance_key)) {
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
        std::thread::sleep(Duration::from_millis(100));
    }
}
