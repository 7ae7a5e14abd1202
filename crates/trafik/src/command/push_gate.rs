//! The gate of `trafik config push --canary`: a small grammar (`error_rate<1%,p99<200ms`) and
//! its verdict on one window of a canary's traffic, taken as the difference of two `/status`
//! readings (responses by class and the request-duration histogram, summed over listeners), so
//! nothing before the window counts.

use serde_json::Value;
use trafik_proxy::metrics::CLASSES;
use trafik_proxy::metrics::histogram::{BUCKETS, Merged};

/// The figures a gate may name, for the error that refuses another.
const KNOWN: &str = "requests, error_rate, 2xx, 4xx, 5xx, p50, p90, p99";

/// One figure of the window.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Figure {
    /// Responses in the window.
    Requests,
    /// Responses of one status class (index into [`CLASSES`]): a count, or with `%` a share.
    Class { index: usize, share: bool },
    /// A latency quantile (0..=1), in milliseconds.
    Quantile(f64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Comparison {
    Below,
    AtMost,
    Above,
    AtLeast,
}

impl Comparison {
    fn holds(self, value: f64, limit: f64) -> bool {
        match self {
            Comparison::Below => value < limit,
            Comparison::AtMost => value <= limit,
            Comparison::Above => value > limit,
            Comparison::AtLeast => value >= limit,
        }
    }
}

/// One `figure OP limit` of the gate; the limit in the figure's own unit (a share as a
/// fraction, a duration in milliseconds, a count as is).
#[derive(Clone, Debug, PartialEq)]
struct Condition {
    text: String,
    name: String,
    figure: Figure,
    comparison: Comparison,
    limit: f64,
}

/// Every condition of a gate; the window passes when all hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Gate {
    conditions: Vec<Condition>,
}

impl Gate {
    /// Reads `error_rate<1%,p99<200ms`: conditions separated by commas, each a figure, one of
    /// `<`, `<=`, `>`, `>=`, and a number with the figure's unit (`%` for shares, `ms`/`s` for
    /// latencies, none for counts). Every problem is reported at once.
    pub fn parse(text: &str) -> Result<Gate, String> {
        let mut conditions = Vec::new();
        let mut errors = Vec::new();
        for part in text.split(',').map(str::trim) {
            match condition(part) {
                Ok(condition) => conditions.push(condition),
                Err(error) => errors.push(format!("--gate `{part}`: {error}")),
            }
        }
        if errors.is_empty() {
            Ok(Gate { conditions })
        } else {
            Err(errors.join("\n"))
        }
    }

    /// Every condition judged on `window`, in the gate's order.
    pub fn judge(&self, window: &Window) -> Vec<Judged> {
        self.conditions
            .iter()
            .map(|condition| {
                let value = window.value(condition.figure);
                Judged {
                    condition: condition.text.clone(),
                    figure: match value {
                        Some(value) => {
                            format!("{} {}", condition.name, shown(condition.figure, value))
                        }
                        None => format!(
                            "{} unknown: no request reached the canary in the window",
                            condition.name
                        ),
                    },
                    passed: value.is_some_and(|v| condition.comparison.holds(v, condition.limit)),
                }
            })
            .collect()
    }
}

/// One condition's verdict: the figure measured, as said to a person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    pub condition: String,
    pub figure: String,
    pub passed: bool,
}

fn shown(figure: Figure, value: f64) -> String {
    match figure {
        Figure::Class { share: true, .. } => format!("{:.2} %", value * 100.0),
        Figure::Quantile(_) => format!("{value:.1} ms"),
        _ => format!("{value}"),
    }
}

fn condition(text: &str) -> Result<Condition, String> {
    let at = text
        .find(['<', '>'])
        .ok_or("expected FIGURE<LIMIT or FIGURE>LIMIT, such as error_rate<1% or p99<200ms")?;
    let name = text[..at].trim();
    let rest = &text[at..];
    let (comparison, rest) = [
        ("<=", Comparison::AtMost),
        (">=", Comparison::AtLeast),
        ("<", Comparison::Below),
        (">", Comparison::Above),
    ]
    .into_iter()
    .find_map(|(sign, comparison)| Some((comparison, rest.strip_prefix(sign)?)))
    .ok_or("expected <, <=, > or >=")?;
    let rest = rest.trim();
    let digits = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let number: f64 = rest[..digits].parse().map_err(|_| {
        format!(
            "expected a number after the comparison, got {:?}",
            &rest[..digits]
        )
    })?;
    let unit = rest[digits..].trim();
    let (figure, limit) = match name {
        "requests" => (Figure::Requests, count(name, number, unit)?),
        "error_rate" => (
            Figure::Class {
                index: 4,
                share: true,
            },
            share(name, number, unit)?,
        ),
        "p50" | "p90" | "p99" => {
            let quantile = name[1..].parse::<f64>().unwrap_or(0.0) / 100.0;
            let millis = match unit {
                "ms" => number,
                "s" => number * 1000.0,
                "us" | "µs" => number / 1000.0,
                _ => return Err(format!("{name} takes a duration in ms or s, got {unit:?}")),
            };
            (Figure::Quantile(quantile), millis)
        }
        _ => match CLASSES.iter().position(|class| *class == name) {
            Some(index) if unit == "%" => (
                Figure::Class { index, share: true },
                share(name, number, unit)?,
            ),
            Some(index) => (
                Figure::Class {
                    index,
                    share: false,
                },
                count(name, number, unit)?,
            ),
            None => {
                return Err(format!("unknown figure {name:?}; a gate knows {KNOWN}"));
            }
        },
    };
    Ok(Condition {
        text: text.to_owned(),
        name: name.to_owned(),
        figure,
        comparison,
        limit,
    })
}

fn share(name: &str, number: f64, unit: &str) -> Result<f64, String> {
    match unit {
        "%" if number <= 100.0 => Ok(number / 100.0),
        "%" => Err(format!("{name} is a share: at most 100%")),
        _ => Err(format!("{name} is a share: give it in %, got {unit:?}")),
    }
}

fn count(name: &str, number: f64, unit: &str) -> Result<f64, String> {
    if unit.is_empty() {
        Ok(number)
    } else {
        Err(format!("{name} is a count: no unit, got {unit:?}"))
    }
}

/// An instance's cumulative counters at one moment, summed over its listeners.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reading {
    classes: [u64; 5],
    durations: Merged,
}

impl Reading {
    /// From a `/status` document's `listeners` (their `responses` and `durations`).
    pub fn from_status(status: &Value) -> Result<Reading, String> {
        let listeners = status["listeners"]
            .as_array()
            .ok_or("the canary's /status has no listeners")?;
        let mut reading = Reading::default();
        for listener in listeners {
            for (total, class) in reading.classes.iter_mut().zip(CLASSES) {
                *total += listener["responses"][class].as_u64().unwrap_or(0);
            }
            let counts = listener["durations"]["counts"]
                .as_array()
                .filter(|counts| counts.len() == BUCKETS)
                .ok_or("the canary's /status has no request durations (an older trafik?)")?;
            for (total, count) in reading.durations.counts.iter_mut().zip(counts) {
                *total += count.as_u64().unwrap_or(0);
            }
        }
        Ok(reading)
    }
}

/// What happened between two readings.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    classes: [u64; 5],
    durations: Merged,
}

impl Window {
    /// `end` minus `start`; a counter that went back (a listener the canary's configuration
    /// removed) counts from zero.
    pub fn between(start: &Reading, end: &Reading) -> Window {
        let mut window = Window {
            classes: [0; 5],
            durations: Merged::default(),
        };
        for (i, class) in window.classes.iter_mut().enumerate() {
            *class = end.classes[i].saturating_sub(start.classes[i]);
        }
        for (i, count) in window.durations.counts.iter_mut().enumerate() {
            *count = end.durations.counts[i].saturating_sub(start.durations.counts[i]);
        }
        window
    }

    pub fn requests(&self) -> u64 {
        self.classes.iter().sum()
    }

    /// The figure's value; `None` for a share or a quantile of no requests.
    fn value(&self, figure: Figure) -> Option<f64> {
        let requests = self.requests();
        match figure {
            Figure::Requests => Some(requests as f64),
            Figure::Class {
                index,
                share: false,
            } => Some(self.classes[index] as f64),
            Figure::Class { index, share: true } => {
                (requests > 0).then(|| self.classes[index] as f64 / requests as f64)
            }
            Figure::Quantile(q) => self.durations.quantile(q).map(|micros| micros / 1000.0),
        }
    }

    /// The window's figures for the record: requests, responses by class, p50 and p99.
    pub fn summary(&self) -> Value {
        let millis = |q| self.durations.quantile(q).map(|micros| micros / 1000.0);
        serde_json::json!({
            "requests": self.requests(),
            "responses": CLASSES.iter().zip(self.classes).map(|(c, n)| (c.to_string(), Value::from(n))).collect::<serde_json::Map<_, _>>(),
            "error_rate": self.value(Figure::Class { index: 4, share: true }),
            "p50_ms": millis(0.5),
            "p99_ms": millis(0.99),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(classes: [u64; 5], counts: [u64; BUCKETS]) -> Value {
        let responses: serde_json::Map<_, _> = CLASSES
            .iter()
            .zip(classes)
            .map(|(c, n)| (c.to_string(), json!(n)))
            .collect();
        json!({ "listeners": [{ "responses": responses, "durations": { "counts": counts } }] })
    }

    #[test]
    fn a_gate_reads_shares_latencies_and_counts() {
        let gate =
            Gate::parse("error_rate<1%, p99 < 200ms,p50<=0.1s,requests>=10,4xx<5,5xx<2%").unwrap();
        let limits: Vec<(Figure, Comparison, f64)> = gate
            .conditions
            .iter()
            .map(|c| (c.figure, c.comparison, c.limit))
            .collect();
        assert_eq!(
            limits,
            [
                (
                    Figure::Class {
                        index: 4,
                        share: true
                    },
                    Comparison::Below,
                    0.01
                ),
                (Figure::Quantile(0.99), Comparison::Below, 200.0),
                (Figure::Quantile(0.5), Comparison::AtMost, 100.0),
                (Figure::Requests, Comparison::AtLeast, 10.0),
                (
                    Figure::Class {
                        index: 3,
                        share: false
                    },
                    Comparison::Below,
                    5.0
                ),
                (
                    Figure::Class {
                        index: 4,
                        share: true
                    },
                    Comparison::Below,
                    0.02
                ),
            ]
        );
    }

    #[test]
    fn unknown_figures_and_wrong_units_are_refused_all_at_once() {
        let error = Gate::parse("p95<200ms,error_rate<1ms,p99<200,latency>3").unwrap_err();
        let lines: Vec<&str> = error.lines().collect();
        assert_eq!(lines.len(), 4, "{error}");
        assert!(
            lines[0].contains("unknown figure \"p95\"") && lines[0].contains("p99"),
            "{error}"
        );
        assert!(lines[1].contains("error_rate is a share"), "{error}");
        assert!(lines[2].contains("p99 takes a duration"), "{error}");
        assert!(lines[3].contains("unknown figure \"latency\""), "{error}");
        assert!(Gate::parse("error_rate=1%").is_err());
        assert!(Gate::parse("error_rate<").is_err());
    }

    #[test]
    fn the_window_is_the_difference_of_two_readings() {
        // Before the window: 1,000 slow failures, which must not count.
        let mut before = [0; BUCKETS];
        before[12] = 1_000;
        let start = Reading::from_status(&status([0, 0, 0, 0, 1_000], before)).unwrap();
        // During it: 99 fast answers (0..100 µs) and one 5xx at 50..100 ms.
        let mut after = before;
        after[0] += 99;
        after[9] += 1;
        let end = Reading::from_status(&status([0, 99, 0, 0, 1_001], after)).unwrap();
        let window = Window::between(&start, &end);
        assert_eq!(window.requests(), 100);
        let judged = Gate::parse("error_rate<2%,p50<1ms,p99<1ms")
            .unwrap()
            .judge(&window);
        assert_eq!(
            judged.iter().map(|j| j.passed).collect::<Vec<_>>(),
            [true, true, true],
            "{judged:?}"
        );
        assert_eq!(judged[0].figure, "error_rate 1.00 %");
        let failed = Gate::parse("error_rate<1%").unwrap().judge(&window);
        assert!(!failed[0].passed);
    }

    #[test]
    fn a_window_without_requests_fails_shares_and_latencies() {
        let reading = Reading::from_status(&status([0; 5], [0; BUCKETS])).unwrap();
        let window = Window::between(&reading, &reading);
        let judged = Gate::parse("error_rate<1%,p99<200ms,5xx<1")
            .unwrap()
            .judge(&window);
        assert!(!judged[0].passed && judged[0].figure.contains("no request reached"));
        assert!(!judged[1].passed);
        assert!(judged[2].passed);
    }
}
