//! Scenarios: user journeys instead of one URL. A scenario is weighted flows of steps; each
//! arrival of the open loop is one virtual user that runs one flow from its first step to its
//! last, with a row of the data file, its own cookie jar and the values it captured from
//! earlier answers. The file's syntax is read and checked by the `trafik` binary, which reports
//! every error at its line and column; this module holds what it compiles to.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use trafik_gateway::jq::Expression;

use crate::data::Rows;
use crate::record::Percentiles;

/// A whole scenario, ready to run.
#[derive(Debug)]
pub struct Scenario {
    pub flows: Vec<Flow>,
    /// The data file's rows, dealt in turn (cycling) as `per` says.
    pub rows: Rows,
    pub per: DataPer,
    /// Thresholds over the latency of every step together.
    pub thresholds: Vec<Threshold>,
}

impl Scenario {
    /// The flow arrival `n` runs: flows take turns in proportion to their weights.
    pub fn flow_of(&self, n: u64) -> usize {
        let total: u64 = self.flows.iter().map(|f| u64::from(f.weight)).sum();
        let mut position = n % total.max(1);
        for (i, flow) in self.flows.iter().enumerate() {
            if position < u64::from(flow.weight) {
                return i;
            }
            position -= u64::from(flow.weight);
        }
        0
    }

    /// The longest a virtual user can take, each step at its think time and `timeout`: how long
    /// the users that started at the end of a run may still be on their way.
    pub fn longest_journey(&self, timeout: Duration) -> Duration {
        self.flows
            .iter()
            .map(|f| f.steps.iter().map(|s| s.think + timeout).sum::<Duration>() * f.iterations)
            .max()
            .unwrap_or_default()
    }
}

/// What takes the next row of the data file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataPer {
    /// A virtual user keeps one row through all its iterations (one account, many visits).
    #[default]
    User,
    /// Each iteration of a flow takes the next row (a new search, order or item each time).
    Iteration,
}

#[derive(Debug)]
pub struct Flow {
    pub name: String,
    pub weight: u32,
    /// How many times a virtual user runs the steps, keeping its connections, cookies and
    /// captures from one iteration to the next.
    pub iterations: u32,
    pub steps: Vec<Step>,
    /// The names captured by the flow's steps; a virtual user keeps one value for each.
    pub variables: Vec<String>,
}

#[derive(Debug)]
pub struct Step {
    pub name: String,
    pub method: http::Method,
    pub address: SocketAddr,
    /// `host[:port]` as written, for the `Host` header.
    pub authority: String,
    /// `https://`: the connection speaks TLS to `server_name`.
    pub tls: bool,
    pub server_name: String,
    /// The path and query.
    pub path: Template,
    pub headers: Vec<(http::HeaderName, Template)>,
    pub body: Option<Template>,
    /// Values taken from the answer into the flow's variables.
    pub captures: Vec<StepCapture>,
    /// Statuses that pass; empty: any 2xx or 3xx.
    pub statuses: Vec<u16>,
    /// A jq expression over the JSON answer that must give `true`.
    pub body_check: Option<Arc<Expression>>,
    /// How long the virtual user waits before sending this step.
    pub think: Duration,
    pub thresholds: Vec<Threshold>,
}

/// A value a step takes from its answer.
#[derive(Debug)]
pub struct StepCapture {
    pub name: String,
    /// Its index in the flow's variables.
    pub variable: usize,
    pub source: Capture,
}

/// Where a captured value comes from.
#[derive(Debug)]
pub enum Capture {
    /// jq over the JSON answer; a string is taken as it is, another value as its JSON text.
    Jq(Arc<Expression>),
    /// An answer header's value.
    Header(http::HeaderName),
}

/// The data file's columns, as templates are checked against them.
#[derive(Clone, Copy, Debug)]
pub enum Columns<'a> {
    Read(&'a [String]),
    /// The scenario has no data file: `{{row.…}}` is an error.
    NoFile,
    /// The data file could not be read (that is reported): `{{row.…}}` is not checked.
    Unread,
}

/// Text with `{{row.COLUMN}}` and `{{capture}}` placeholders, resolved when compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    /// A column of the virtual user's data row.
    Row(usize),
    /// A value the virtual user captured.
    Variable(usize),
}

impl Template {
    /// Compiles `text` against the data file's `columns` and the `variables` captured before
    /// this step; every unknown name is an error, all of them at once.
    pub fn compile(
        text: &str,
        columns: Columns,
        variables: &[String],
    ) -> Result<Template, Vec<String>> {
        let mut parts = Vec::new();
        let mut errors = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let Some(close) = rest[open..].find("}}") else {
                errors.push(format!("`{}` has no closing }}}}", &rest[open..]));
                rest = "";
                break;
            };
            let name = rest[open + 2..open + close].trim();
            if let Some(column) = name.strip_prefix("row.") {
                match columns {
                    Columns::Read(columns) => match columns.iter().position(|c| c == column) {
                        Some(i) => parts.push(Part::Row(i)),
                        None => errors.push(format!(
                            "{{{{{name}}}}}: the data file has no column {column:?} (its columns: {})",
                            listing(columns.iter().map(|c| format!("row.{c}")))
                        )),
                    },
                    Columns::NoFile => errors.push(format!(
                        "{{{{{name}}}}}: no data file gives rows: add [data] file = \"users.csv\""
                    )),
                    Columns::Unread => parts.push(Part::Row(usize::MAX)),
                }
            } else {
                match variables.iter().position(|v| v == name) {
                    Some(i) => parts.push(Part::Variable(i)),
                    None => errors.push(format!(
                        "{{{{{name}}}}}: nothing captures {name:?} in an earlier step of this flow (captured before this step: {})",
                        listing(variables.iter().cloned())
                    )),
                }
            }
            rest = &rest[open + close + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        if errors.is_empty() {
            Ok(Template { parts })
        } else {
            Err(errors)
        }
    }

    /// Appends the text with this virtual user's row and captured values to `out`, as they
    /// are (headers and bodies).
    pub fn render(&self, row: &[String], variables: &[Option<String>], out: &mut String) {
        self.render_with(row, variables, out, |value, out| out.push_str(value));
    }

    /// The same for a path and query: each value is percent-encoded as a URL component, so a
    /// row with spaces, `&`, `/` or non-ASCII letters stays one value and makes a valid URI;
    /// the text around the values is the scenario's own URL and stays as written.
    pub fn render_in_url(&self, row: &[String], variables: &[Option<String>], out: &mut String) {
        self.render_with(row, variables, out, |value, out| {
            out.extend(percent_encoding::utf8_percent_encode(value, COMPONENT));
        });
    }

    fn render_with(
        &self,
        row: &[String],
        variables: &[Option<String>],
        out: &mut String,
        value: impl Fn(&str, &mut String),
    ) {
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Row(i) => value(row.get(*i).map_or("", String::as_str), out),
                Part::Variable(i) => value(
                    variables.get(*i).and_then(Option::as_deref).unwrap_or(""),
                    out,
                ),
            }
        }
    }
}

/// What a value in a URL keeps as it is: letters, digits and `-._~` (RFC 3986's unreserved
/// characters, as JavaScript's encodeURIComponent keeps them); everything else is encoded.
const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn listing(names: impl Iterator<Item = String>) -> String {
    let names: Vec<String> = names.collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// A latency limit such as `p99 < 50ms`, over one step or the whole run.
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    /// As written, for reports.
    pub text: String,
    /// p50, p90, p95, p99, p999 or max.
    pub percentile: String,
    /// `<` (strict) or `<=`.
    pub strict: bool,
    pub limit_ms: f64,
}

impl std::str::FromStr for Threshold {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let expected = || {
            format!(
                "expected PERCENTILE < DURATION such as \"p99 < 50ms\" (percentiles p50, p90, p95, p99, p999, max; < or <=), found {text:?}"
            )
        };
        let (percentile, strict, limit) = if let Some((p, l)) = text.split_once("<=") {
            (p, false, l)
        } else if let Some((p, l)) = text.split_once('<') {
            (p, true, l)
        } else {
            return Err(expected());
        };
        let percentile = percentile.trim();
        if Percentiles::default().get(percentile).is_none() {
            return Err(expected());
        }
        let limit_ms = milliseconds(limit.trim()).ok_or_else(expected)?;
        Ok(Threshold {
            text: text.trim().to_owned(),
            percentile: percentile.to_owned(),
            strict,
            limit_ms,
        })
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Threshold {
    /// The measured value and whether it holds; nothing measured holds no threshold.
    pub fn judge(&self, latency: &Histogram<u64>) -> (Option<f64>, bool) {
        if latency.is_empty() {
            return (None, false);
        }
        let value = Percentiles::of(latency).get(&self.percentile);
        let passed = value.is_some_and(|v| {
            if self.strict {
                v < self.limit_ms
            } else {
                v <= self.limit_ms
            }
        });
        (value, passed)
    }
}

/// `50ms`, `1.5s`, `800us` or `800µs` in milliseconds.
fn milliseconds(text: &str) -> Option<f64> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match unit.trim() {
        "ms" => 1.0,
        "s" => 1000.0,
        "us" | "µs" => 0.001,
        _ => return None,
    };
    Some(number * factor).filter(|ms| ms.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_take_row_columns_and_captures() {
        let columns = vec!["kullanici".to_owned(), "no".to_owned()];
        let variables = vec!["token".to_owned()];
        let template = Template::compile(
            "/takip/{{row.no}}?t={{ token }}&u={{row.kullanici}}",
            Columns::Read(&columns),
            &variables,
        )
        .unwrap();
        let mut out = String::new();
        let row = vec!["ayse".to_owned(), "TR-7".to_owned()];
        template.render(&row, &[Some("abc".to_owned())], &mut out);
        assert_eq!(out, "/takip/TR-7?t=abc&u=ayse");
    }

    #[test]
    fn values_in_a_url_are_percent_encoded_and_in_headers_and_bodies_kept() {
        let columns = vec!["ad".to_owned()];
        let url = Template::compile(
            "/ara/{{row.ad}}?q={{row.ad}}&dil=tr",
            Columns::Read(&columns),
            &[],
        )
        .unwrap();
        let row = vec!["Ayşe & Veli/ğ ~x".to_owned()];
        let mut out = String::new();
        url.render_in_url(&row, &[], &mut out);
        let value = "Ay%C5%9Fe%20%26%20Veli%2F%C4%9F%20~x";
        assert_eq!(out, format!("/ara/{value}?q={value}&dil=tr"));
        let body = Template::compile("{{row.ad}}", Columns::Read(&columns), &[]).unwrap();
        out.clear();
        body.render(&row, &[], &mut out);
        assert_eq!(out, row[0]);
    }

    #[test]
    fn unknown_names_are_all_reported() {
        let columns = vec!["no".to_owned()];
        let errors =
            Template::compile("{{row.numara}} {{token}} {{x", Columns::Read(&columns), &[])
                .unwrap_err();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors[0].contains("no column \"numara\" (its columns: row.no)"),
            "{errors:?}"
        );
        assert!(
            errors[1].contains("nothing captures \"token\""),
            "{errors:?}"
        );
        assert!(errors[2].contains("no closing"), "{errors:?}");
        let errors = Template::compile("{{row.no}}", Columns::NoFile, &[]).unwrap_err();
        assert!(errors[0].contains("add [data] file"), "{errors:?}");
    }

    #[test]
    fn thresholds_parse_and_judge() {
        let threshold: Threshold = "p99 < 50ms".parse().unwrap();
        assert_eq!(threshold.percentile, "p99");
        assert!(threshold.strict);
        assert_eq!(threshold.limit_ms, 50.0);
        assert_eq!("max <= 1.5s".parse::<Threshold>().unwrap().limit_ms, 1500.0);
        assert!("p97 < 5ms".parse::<Threshold>().is_err());
        assert!("p99 > 5ms".parse::<Threshold>().is_err());
        assert!("p99 < 5 parsecs".parse::<Threshold>().is_err());
        let mut latency = crate::record::histogram();
        assert_eq!(threshold.judge(&latency), (None, false));
        latency.record(10_000).unwrap();
        assert!(threshold.judge(&latency).1);
        latency.record(60_000).unwrap();
        assert!(!threshold.judge(&latency).1);
    }

    #[test]
    fn flows_take_turns_by_weight() {
        let flow = |name: &str, weight| Flow {
            name: name.to_owned(),
            weight,
            iterations: 1,
            steps: Vec::new(),
            variables: Vec::new(),
        };
        let scenario = Scenario {
            flows: vec![flow("a", 3), flow("b", 1)],
            rows: Rows::default(),
            per: DataPer::User,
            thresholds: Vec::new(),
        };
        let picks: Vec<usize> = (0..8).map(|n| scenario.flow_of(n)).collect();
        assert_eq!(picks, [0, 0, 0, 1, 0, 0, 0, 1]);
    }
}
