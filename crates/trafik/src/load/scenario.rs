//! `trafik load --scenario FILE.toml`: the scenario file read and checked with the
//! configuration's own reader and error report, so every problem is told at once at its
//! file:line:column with its field, then compiled into [`trafik_load::scenario::Scenario`].

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;
use trafik_gateway::jq::Expression;
use trafik_load::data::Rows;
use trafik_load::scenario::{
    Capture, Columns, DataPer, Flow, Scenario, Step, StepCapture, Template, Threshold,
};

use crate::config::report::{ConfigError, Report};
use crate::config::values::Dur;
use crate::config::{Source, read};

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    /// Over the latency of every step together: "p99 < 200ms", or a list.
    #[serde(default)]
    threshold: Option<Spanned<OneOrMany<String>>>,
    data: Option<Spanned<Data>>,
    #[serde(default)]
    flow: Vec<Spanned<FlowFile>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Data {
    /// CSV with a header line, or JSON lines (`.jsonl`).
    file: Spanned<String>,
    /// "user" (default): a row per virtual user; "iteration": a row per iteration of a flow.
    per: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowFile {
    name: Option<Spanned<String>>,
    weight: Option<Spanned<i64>>,
    /// How many times each virtual user runs the steps (default 1).
    iterations: Option<Spanned<i64>>,
    #[serde(default)]
    step: Vec<Spanned<StepFile>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepFile {
    name: Option<Spanned<String>>,
    method: Option<Spanned<String>>,
    url: Option<Spanned<String>>,
    #[serde(default)]
    headers: BTreeMap<String, Spanned<String>>,
    body: Option<Spanned<String>>,
    #[serde(default)]
    capture: BTreeMap<String, Spanned<String>>,
    check: Option<CheckFile>,
    think: Option<Spanned<Dur>>,
    threshold: Option<Spanned<OneOrMany<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckFile {
    status: Option<Spanned<OneOrMany<i64>>>,
    /// jq over the JSON answer that must give true.
    body: Option<Spanned<String>>,
}

/// A value or a list of them (`status = 200` or `status = [200, 201]`), read by hand: serde's
/// untagged enums lose the spans and say only that nothing matched.
struct OneOrMany<T>(Vec<T>);

/// What a [`OneOrMany`] holds, and how to tell the user what is expected.
trait Item: Sized {
    const EXPECTED: &'static str;
    fn from_str(_: &str) -> Option<Self> {
        None
    }
    fn from_i64(_: i64) -> Option<Self> {
        None
    }
}

impl Item for String {
    const EXPECTED: &'static str = "a threshold such as \"p99 < 50ms\", or a list of them";
    fn from_str(text: &str) -> Option<Self> {
        Some(text.to_owned())
    }
}

impl Item for i64 {
    const EXPECTED: &'static str = "a status such as 200, or a list such as [200, 201]";
    fn from_i64(number: i64) -> Option<Self> {
        Some(number)
    }
}

impl<'de, T: Item + Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Item + Deserialize<'de>> serde::de::Visitor<'de> for Visitor<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(T::EXPECTED)
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
                T::from_str(text)
                    .map(|one| OneOrMany(vec![one]))
                    .ok_or_else(|| E::invalid_type(serde::de::Unexpected::Str(text), &self))
            }
            fn visit_i64<E: serde::de::Error>(self, number: i64) -> Result<Self::Value, E> {
                T::from_i64(number)
                    .map(|one| OneOrMany(vec![one]))
                    .ok_or_else(|| E::invalid_type(serde::de::Unexpected::Signed(number), &self))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut items: A,
            ) -> Result<Self::Value, A::Error> {
                let mut all = Vec::new();
                while let Some(item) = items.next_element()? {
                    all.push(item);
                }
                Ok(OneOrMany(all))
            }
        }
        deserializer.deserialize_any(Visitor(std::marker::PhantomData))
    }
}

/// Reads, checks and compiles the scenario at `path`; the error is every problem, one a line.
pub fn load(path: &Path) -> Result<Scenario, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the scenario {}: {e}", path.display()))?;
    from_text(&path.display().to_string(), &text, None)
}

/// Checks and compiles a scenario's `text`, written at `name`; `rows`, when given, are its
/// data file's (a distributed run's agent gets them from the coordinator, not from a file).
pub fn from_text(name: &str, text: &str, rows: Option<Rows>) -> Result<Scenario, String> {
    let source = Source::File { name, text };
    let mut reading_report = Report::new(source);
    let (file, reading) = read::file::<File>(text, &mut reading_report);
    let mut errors = reading_report.into_errors();
    let scenario = file.and_then(|file| {
        let mut report = Report::new(source);
        let scenario = compile(file, rows, &mut report);
        errors.extend(reading.as_written(report.into_errors()));
        scenario
    });
    match scenario {
        Some(scenario) if errors.is_empty() => Ok(scenario),
        _ => Err(render(errors)),
    }
}

/// Every problem, one a line, in the file's order, then how many.
fn render(mut errors: Vec<ConfigError>) -> String {
    errors.dedup();
    let count = errors.len();
    let mut lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    lines.push(format!(
        "{count} error{} in the scenario; nothing was sent",
        if count == 1 { "" } else { "s" }
    ));
    lines.join("\n")
}

fn compile(file: File, given: Option<Rows>, report: &mut Report) -> Option<Scenario> {
    let mut clean = report.is_clean();
    let (rows, columns_read) = match (&file.data, given) {
        (None, _) => (Rows::default(), false),
        (Some(_), Some(rows)) => (rows, true),
        (Some(data), None) => match Rows::read(&report.path(data.get_ref().file.get_ref())) {
            Ok(rows) => (rows, true),
            Err(message) => {
                report.error(data.get_ref().file.span(), "data.file", message);
                (Rows::default(), false)
            }
        },
    };
    let columns = match (&file.data, columns_read) {
        (None, _) => Columns::NoFile,
        (Some(_), true) => Columns::Read(&rows.columns),
        (Some(_), false) => Columns::Unread,
    };
    let per = match file.data.as_ref().and_then(|d| d.get_ref().per.as_ref()) {
        None => DataPer::User,
        Some(per) => match per.get_ref().as_str() {
            "user" => DataPer::User,
            "iteration" => DataPer::Iteration,
            other => {
                report.error(
                    per.span(),
                    "data.per",
                    format!(
                        "expected \"user\" (a row per virtual user) or \"iteration\" (a row per iteration of a flow), found {other:?}"
                    ),
                );
                DataPer::User
            }
        },
    };
    let thresholds = thresholds(report, "threshold", file.threshold);
    if file.flow.is_empty() {
        report.error(
            0..0,
            "flow",
            "no flow: add [[flow]] with name = \"…\" and its [[flow.step]]s",
        );
    }
    let mut flows = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for (f, flow) in file.flow.into_iter().enumerate() {
        let field = format!("flow[{f}]");
        let span = flow.span();
        let flow = flow.into_inner();
        let name = report.required(
            flow.name.as_ref(),
            span.clone(),
            &format!("{field}.name"),
            "name = \"login\"",
        );
        if let Some(name) = name {
            if names.contains(name.get_ref()) {
                report.error(
                    name.span(),
                    &format!("{field}.name"),
                    format!(
                        "a second flow named {:?}: flow names tell them apart in the report",
                        name.get_ref()
                    ),
                );
            }
            names.push(name.get_ref().clone());
        }
        let weight = match &flow.weight {
            None => 1,
            Some(weight) => match u32::try_from(*weight.get_ref()) {
                Ok(w) if w >= 1 => w,
                _ => {
                    report.error(
                        weight.span(),
                        &format!("{field}.weight"),
                        format!(
                            "expected a weight of at least 1, found {}",
                            weight.get_ref()
                        ),
                    );
                    1
                }
            },
        };
        let iterations = match &flow.iterations {
            None => 1,
            Some(iterations) => match u32::try_from(*iterations.get_ref()) {
                Ok(n) if n >= 1 => n,
                _ => {
                    report.error(
                        iterations.span(),
                        &format!("{field}.iterations"),
                        format!(
                            "expected at least 1 iteration, found {}",
                            iterations.get_ref()
                        ),
                    );
                    1
                }
            },
        };
        if flow.step.is_empty() {
            report.error(
                span.clone(),
                &format!("{field}.step"),
                "no step: add [[flow.step]] with name and url",
            );
        }
        let mut variables: Vec<String> = Vec::new();
        let mut steps = Vec::new();
        let mut step_names: Vec<String> = Vec::new();
        for (s, step) in flow.step.into_iter().enumerate() {
            let field = format!("{field}.step[{s}]");
            if let Some(name) = &step.get_ref().name {
                if step_names.contains(name.get_ref()) {
                    report.error(
                        name.span(),
                        &format!("{field}.name"),
                        format!("a second step named {:?} in this flow", name.get_ref()),
                    );
                }
                step_names.push(name.get_ref().clone());
            }
            if let Some(step) = compile_step(report, &field, step, columns, &mut variables) {
                steps.push(step);
            }
        }
        flows.push(Flow {
            name: name.map(|n| n.get_ref().clone()).unwrap_or_default(),
            weight,
            iterations,
            steps,
            variables,
        });
    }
    clean &= report.is_clean();
    clean.then_some(Scenario {
        flows,
        rows,
        per,
        thresholds,
    })
}

fn compile_step(
    report: &mut Report,
    field: &str,
    step: Spanned<StepFile>,
    columns: Columns,
    variables: &mut Vec<String>,
) -> Option<Step> {
    let before = report.error_count();
    let span = step.span();
    let step = step.into_inner();
    let name = report.required(
        step.name,
        span.clone(),
        &format!("{field}.name"),
        "name = \"login\"",
    );
    let method = match &step.method {
        None => Some(http::Method::GET),
        Some(method) => {
            let parsed = http::Method::from_bytes(method.get_ref().as_bytes()).ok();
            if parsed.is_none() {
                report.error(
                    method.span(),
                    &format!("{field}.method"),
                    format!("{:?} is not an HTTP method", method.get_ref()),
                );
            }
            parsed
        }
    };
    let url = report.required(
        step.url.as_ref(),
        span,
        &format!("{field}.url"),
        "url = \"http://127.0.0.1:8080/takip/{{row.no}}\"",
    );
    let mut place = None;
    if let Some(url) = url {
        let url_field = format!("{field}.url");
        match trafik_load::target::parse_url(url.get_ref()) {
            Err(message) => report.error(url.span(), &url_field, message),
            Ok((_, authority, _)) if authority.contains("{{") => report.error(
                url.span(),
                &url_field,
                "the host and port are fixed per step: templates go in the path, query and body",
            ),
            Ok((tls, authority, path)) => {
                match trafik_load::target::resolve(&authority, if tls { 443 } else { 80 }) {
                    Err(message) => report.error(url.span(), &url_field, message),
                    Ok(address) => {
                        let path =
                            template(report, &url_field, &path, url.span(), columns, variables);
                        place = Some((address, tls, authority, path));
                    }
                }
            }
        }
    }
    let mut headers = Vec::new();
    for (header, value) in &step.headers {
        let header_field = format!("{field}.headers.{header}");
        match http::HeaderName::from_bytes(header.as_bytes()) {
            Ok(header) => {
                let written = value.get_ref();
                if let Some(value) = template(
                    report,
                    &header_field,
                    written,
                    value.span(),
                    columns,
                    variables,
                ) {
                    headers.push((header, value));
                }
            }
            Err(_) => report.error(
                value.span(),
                &header_field,
                format!("{header:?} is not a header name"),
            ),
        }
    }
    let body = step.body.as_ref().map(|body| {
        let field = format!("{field}.body");
        template(
            report,
            &field,
            body.get_ref(),
            body.span(),
            columns,
            variables,
        )
    });
    let (statuses, body_check) = match step.check {
        None => (Vec::new(), None),
        Some(check) => {
            let mut statuses = Vec::new();
            if let Some(written) = check.status {
                for status in &written.get_ref().0 {
                    match u16::try_from(*status) {
                        Ok(s) if (100..600).contains(&s) => statuses.push(s),
                        _ => report.error(
                            written.span(),
                            &format!("{field}.check.status"),
                            format!("expected a status from 100 to 599, found {status}"),
                        ),
                    }
                }
            }
            let body_check = check
                .body
                .as_ref()
                .and_then(|code| expression(report, &format!("{field}.check.body"), code));
            (statuses, body_check)
        }
    };
    // Captures are the later steps' to use, not this one's.
    let mut captures = Vec::new();
    for (capture, source) in &step.capture {
        let capture_field = format!("{field}.capture.{capture}");
        if capture == "row" || capture.starts_with("row.") || capture.contains(['{', '}']) {
            report.error(
                source.span(),
                &capture_field,
                "a capture's name is used as {{name}}: `row` and braces are taken",
            );
            continue;
        }
        let from = match source.get_ref().strip_prefix("header:") {
            Some(header) => match http::HeaderName::from_bytes(header.trim().as_bytes()) {
                Ok(header) => Some(Capture::Header(header)),
                Err(_) => {
                    report.error(
                        source.span(),
                        &capture_field,
                        format!("{:?} is not a header name", header.trim()),
                    );
                    None
                }
            },
            None => expression(report, &capture_field, source).map(Capture::Jq),
        };
        let variable = match variables.iter().position(|v| v == capture) {
            Some(i) => i,
            None => {
                variables.push(capture.clone());
                variables.len() - 1
            }
        };
        if let Some(source) = from {
            captures.push(StepCapture {
                name: capture.clone(),
                variable,
                source,
            });
        }
    }
    let thresholds = thresholds(report, &format!("{field}.threshold"), step.threshold);
    if report.error_count() > before {
        return None;
    }
    let (address, tls, authority, path) = place?;
    Some(Step {
        name: name?.into_inner(),
        method: method?,
        address,
        server_name: trafik_load::target::server_name(&authority),
        tls,
        authority,
        path: path?,
        headers,
        body: body.flatten(),
        captures,
        statuses,
        body_check,
        think: step.think.map(|t| t.into_inner().0).unwrap_or_default(),
        thresholds,
    })
}

/// A template, each unknown name reported at the string written at `span`.
fn template(
    report: &mut Report,
    field: &str,
    text: &str,
    span: std::ops::Range<usize>,
    columns: Columns,
    variables: &[String],
) -> Option<Template> {
    match Template::compile(text, columns, variables) {
        Ok(template) => Some(template),
        Err(errors) => {
            for message in errors {
                report.error(span.clone(), field, message);
            }
            None
        }
    }
}

/// A jq expression over the answer, each error reported at the string.
fn expression(report: &mut Report, field: &str, code: &Spanned<String>) -> Option<Arc<Expression>> {
    match Expression::compile(code.get_ref(), &[]) {
        Ok(expression) => Some(Arc::new(expression)),
        Err(errors) => {
            for error in errors {
                report.error(code.span(), field, format!("jq: {}", error.message));
            }
            None
        }
    }
}

fn thresholds(
    report: &mut Report,
    field: &str,
    written: Option<Spanned<OneOrMany<String>>>,
) -> Vec<Threshold> {
    let Some(written) = written else {
        return Vec::new();
    };
    let mut thresholds = Vec::new();
    for text in &written.get_ref().0 {
        match text.parse::<Threshold>() {
            Ok(threshold) => thresholds.push(threshold),
            Err(message) => report.error(written.span(), field, message),
        }
    }
    thresholds
}
