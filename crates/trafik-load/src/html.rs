//! A self-contained HTML page with the run's plots (inline SVG, no scripts, no downloads).

use std::fmt::Write as _;

use crate::journey::ThresholdResult;
use crate::record::CurvePoint;
use crate::report::Report;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 260.0;
const MARGIN: f64 = 48.0;

/// One line of a plot: a name, a colour and (second, value) points.
struct Series<'a> {
    name: &'a str,
    colour: &'a str,
    /// A dashed line, for a reference the others are read against.
    dashed: bool,
    points: Vec<(f64, f64)>,
}

fn plot(title: &str, series: &[Series<'_>]) -> String {
    let x_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let x = |v: f64| MARGIN + v / x_max * (WIDTH - 2.0 * MARGIN);
    let y = |v: f64| HEIGHT - MARGIN + -v / y_max * (HEIGHT - 2.0 * MARGIN);
    let mut svg = format!(
        "<svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" aria-label=\"{title}\">\
         <text x=\"{MARGIN}\" y=\"20\" font-weight=\"bold\">{title}</text>\
         <line x1=\"{MARGIN}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#888\"/>\
         <line x1=\"{MARGIN}\" y1=\"{MARGIN}\" x2=\"{MARGIN}\" y2=\"{b}\" stroke=\"#888\"/>",
        b = HEIGHT - MARGIN,
        r = WIDTH - MARGIN
    );
    for tick in 0..=4 {
        let value = y_max * f64::from(tick) / 4.0;
        let _ = write!(
            svg,
            "<text x=\"4\" y=\"{:.1}\" font-size=\"11\">{value:.1}</text>",
            y(value) + 4.0
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">second of the run (0–{x_max:.0})</text>",
        MARGIN,
        HEIGHT - 12.0
    );
    for (i, s) in series.iter().enumerate() {
        let points: Vec<String> = s
            .points
            .iter()
            .map(|&(a, b)| format!("{:.1},{:.1}", x(a), y(b)))
            .collect();
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"{dash} points=\"{}\"/>\
             <text x=\"{:.1}\" y=\"20\" fill=\"{c}\" font-size=\"12\">{}</text>",
            points.join(" "),
            WIDTH - MARGIN - 90.0 * (series.len() - i) as f64,
            s.name,
            c = s.colour,
            dash = if s.dashed {
                " stroke-dasharray=\"6 4\""
            } else {
                ""
            }
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Latency by percentile on a log axis of 1/(1-p), as HdrHistogram plots it: each decade
/// (90 %, 99 %, 99.9 % …) gets the same width, so the tail is not squeezed into the right edge.
/// `thresholds` are dashed lines at their limits, labelled with what they say.
fn percentile_plot(title: &str, points: &[CurvePoint], thresholds: &[(String, f64)]) -> String {
    if points.is_empty() {
        return format!("<p>{}: nothing measured.</p>", html_escape(title));
    }
    let decades = |p: f64| (100.0 / (100.0 - p)).log10();
    // 100 % has no place on the axis: it goes one decade past the deepest finite point.
    let finite_max = points
        .iter()
        .filter(|p| p.percentile < 100.0)
        .map(|p| decades(p.percentile))
        .fold(0.0f64, f64::max);
    let x_max = (finite_max.floor() + 1.0).max(1.0);
    let at = |p: f64| if p < 100.0 { decades(p) } else { x_max };
    let y_max = points
        .iter()
        .map(|p| p.ms)
        .chain(thresholds.iter().map(|t| t.1))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let x = |v: f64| MARGIN + v / x_max * (WIDTH - 2.0 * MARGIN);
    let y = |v: f64| HEIGHT - MARGIN - v / y_max * (HEIGHT - 2.0 * MARGIN);
    let mut svg = format!(
        "<svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" aria-label=\"{title}\">\
         <text x=\"{MARGIN}\" y=\"20\" font-weight=\"bold\">{title}</text>\
         <line x1=\"{MARGIN}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#888\"/>\
         <line x1=\"{MARGIN}\" y1=\"{MARGIN}\" x2=\"{MARGIN}\" y2=\"{b}\" stroke=\"#888\"/>",
        title = html_escape(title),
        b = HEIGHT - MARGIN,
        r = WIDTH - MARGIN
    );
    for tick in 0..=4 {
        let value = y_max * f64::from(tick) / 4.0;
        let _ = write!(
            svg,
            "<text x=\"4\" y=\"{:.1}\" font-size=\"11\">{value:.1}</text>",
            y(value) + 4.0
        );
    }
    // A tick a decade: 0 %, 90 %, 99 %, 99.9 % …, and max at the end.
    for decade in 0..=x_max as u32 {
        let label = if f64::from(decade) == x_max {
            "max".to_owned()
        } else {
            nines(decade)
        };
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{label}</text>",
            x(f64::from(decade)),
            HEIGHT - MARGIN + 14.0
        );
    }
    let line: Vec<String> = points
        .iter()
        .map(|p| format!("{:.1},{:.1}", x(at(p.percentile)), y(p.ms)))
        .collect();
    let _ = write!(
        svg,
        "<polyline fill=\"none\" stroke=\"#e76f51\" stroke-width=\"2\" points=\"{}\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">percentile (ms on the left)</text>",
        line.join(" "),
        MARGIN,
        HEIGHT - 12.0
    );
    for (label, limit) in thresholds {
        let _ = write!(
            svg,
            "<line class=\"threshold\" x1=\"{MARGIN}\" y1=\"{h:.1}\" x2=\"{r}\" y2=\"{h:.1}\" stroke=\"#888\" stroke-dasharray=\"6 4\"/>\
             <text x=\"{r}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
            y(*limit) - 3.0,
            html_escape(label),
            h = y(*limit),
            r = WIDTH - MARGIN
        );
    }
    svg.push_str("</svg>");
    svg
}

/// The percentile `decades` decades into the tail, written exactly: 0%, 90%, 99%, 99.9% …
fn nines(decades: u32) -> String {
    match decades {
        0 => "0%".to_owned(),
        1 => "90%".to_owned(),
        2 => "99%".to_owned(),
        n => format!("99.{}%", "9".repeat(n as usize - 2)),
    }
}

/// Threshold lines for a percentile plot.
fn lines(thresholds: &[ThresholdResult]) -> Vec<(String, f64)> {
    thresholds
        .iter()
        .map(|t| (t.threshold.clone(), t.limit_ms))
        .collect()
}

/// The page for `report`.
pub fn page(report: &Report) -> String {
    let at = |f: &dyn Fn(&crate::record::Interval) -> f64| -> Vec<(f64, f64)> {
        report
            .intervals
            .iter()
            .map(|i| (f64::from(i.second), f(i)))
            .collect()
    };
    // The threshold as a dashed line across the run, for the percentile it applies to.
    let threshold = report.threshold_ms.map(|limit| Series {
        name: "threshold",
        colour: "#888888",
        dashed: true,
        points: at(&|_| limit),
    });
    let mut latency_series = vec![
        Series {
            name: "p50",
            colour: "#2a9d8f",
            dashed: false,
            points: at(&|i| i.latency_ms.p50),
        },
        Series {
            name: "p95",
            colour: "#e9c46a",
            dashed: false,
            points: at(&|i| i.latency_ms.p95),
        },
        Series {
            name: "p99",
            colour: "#e76f51",
            dashed: false,
            points: at(&|i| i.latency_ms.p99),
        },
    ];
    latency_series.extend(threshold);
    let latency = plot("Latency from the intended send (ms)", &latency_series);
    // The curve is of the corrected latency: a threshold on the service time is not drawn on it.
    let mut run_lines: Vec<(String, f64)> = report
        .threshold_ms
        .filter(|_| report.threshold_on.metric != "service")
        .map(|limit| {
            let on = &report.threshold_on;
            (
                format!("{}.{} <= {limit} ms", on.metric, on.percentile),
                limit,
            )
        })
        .into_iter()
        .collect();
    if let Some(scenario) = &report.scenario {
        run_lines.extend(lines(&scenario.thresholds));
    }
    let curve = percentile_plot(
        "Latency by percentile, whole run (ms)",
        &report.percentile_curve,
        &run_lines,
    );
    let rate = plot(
        "Requests per second",
        &[
            Series {
                name: "planned",
                colour: "#888888",
                dashed: true,
                points: at(&|i| i.planned as f64),
            },
            Series {
                name: "sent",
                colour: "#264653",
                dashed: false,
                points: at(&|i| i.sent as f64),
            },
            Series {
                name: "errors",
                colour: "#d62828",
                dashed: false,
                points: at(&|i| i.errors as f64),
            },
        ],
    );
    let verdict = if report.passed {
        "<p>Passed.</p>".to_owned()
    } else {
        report
            .failures
            .iter()
            .map(|reason| format!("<p><strong>failed:</strong> {}</p>", html_escape(reason)))
            .collect()
    };
    let errors = error_table(report);
    let steps = step_table(report);
    let summary = html_escape(&report.render());
    let json = html_escape(&serde_json::to_string_pretty(report).unwrap_or_default());
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>trafik load: {url}</title>\
         <style>body{{font-family:sans-serif;max-width:820px;margin:2em auto}}pre{{background:#f4f4f4;padding:1em;overflow:auto}}</style>\
         </head><body><h1>trafik load</h1><p>{url}</p>{verdict}{curve}{latency}{rate}{steps}<h2>Errors</h2>{errors}<h2>Summary</h2><pre>{summary}</pre>\
         <details><summary>All numbers (JSON)</summary><pre>{json}</pre></details></body></html>\n",
        url = html_escape(&report.url)
    )
}

/// A scenario's steps with their latency and thresholds; empty for a plain run.
fn step_table(report: &Report) -> String {
    let Some(scenario) = &report.scenario else {
        return String::new();
    };
    let rows: String = scenario
        .steps
        .iter()
        .map(|step| {
            let thresholds: Vec<String> = step
                .thresholds
                .iter()
                .map(|t| {
                    let verdict = if t.passed { "passed" } else { "<strong>FAILED</strong>" };
                    format!("{} {verdict}", html_escape(&t.threshold))
                })
                .collect();
            format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td></tr>",
                html_escape(&step.flow),
                html_escape(&step.name),
                step.sent,
                step.completed,
                step.failed_checks,
                step.errors,
                step.latency_ms.p50,
                step.latency_ms.p99,
                thresholds.join(", ")
            )
        })
        .collect();
    let curves: String = scenario
        .steps
        .iter()
        .map(|step| {
            percentile_plot(
                &format!(
                    "Latency by percentile, step {}/{} (ms)",
                    step.flow, step.name
                ),
                &step.percentile_curve,
                &lines(&step.thresholds),
            )
        })
        .collect();
    format!(
        "<h2>Steps</h2><table><tr><th>flow</th><th>step</th><th>sent</th><th>completed</th>\
         <th>failed checks</th><th>errors</th><th>p50 ms</th><th>p99 ms</th><th>thresholds</th></tr>{rows}</table>{curves}"
    )
}

/// The errors by kind, only the kinds that occurred.
fn error_table(report: &Report) -> String {
    let rows: String = report
        .errors
        .kinds()
        .iter()
        .filter(|(_, count)| *count > 0)
        .map(|(kind, count)| format!("<tr><td>{kind}</td><td>{count}</td></tr>"))
        .collect();
    if rows.is_empty() {
        return "<p>None.</p>".to_owned();
    }
    format!(
        "<p>{:.1} % of finished requests failed (limit {}).</p>\
         <table><tr><th>kind</th><th>requests</th></tr>{rows}</table>",
        100.0 * report.error_rate,
        report.max_error_rate
    )
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percentile_axis_is_in_nines() {
        let labels: Vec<String> = (0..5).map(nines).collect();
        assert_eq!(labels, ["0%", "90%", "99%", "99.9%", "99.99%"]);
    }
}
