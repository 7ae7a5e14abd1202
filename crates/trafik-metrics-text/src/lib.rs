//! The Prometheus text exposition format (0.0.4), written one way by every exporter in trafik:
//! each family as `# HELP`, `# TYPE`, then all its samples, with label values escaped. The
//! format refuses a family whose samples are split or come before its `# TYPE`; a
//! [`Family`] holds the [`Exposition`] until it is done, so no other lines can come between.

use std::fmt::{Display, Write as _};

#[cfg(any(test, feature = "strict-reader"))]
pub mod strict_reader;

/// A family's type, as its `# TYPE` line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A whole exposition, one family after another.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// Starts the family `name` with its `# HELP` and `# TYPE` lines; its samples follow
    /// through the returned [`Family`].
    pub fn family<'a>(&'a mut self, name: &'a str, kind: Kind, help: &str) -> Family<'a> {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let kind = kind.name();
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
        Family {
            text: &mut self.text,
            name,
        }
    }

    pub fn into_text(self) -> String {
        self.text
    }
}

/// The samples of one family, written right after its `# TYPE` line.
pub struct Family<'a> {
    text: &'a mut String,
    name: &'a str,
}

impl Family<'_> {
    /// One sample: `labels` as (name, value) pairs, values escaped here.
    pub fn sample<V: AsRef<str>>(&mut self, labels: &[(&str, V)], value: impl Display) {
        self.series("", labels, None, value);
    }

    /// One histogram series: `buckets` are each bucket's own count with its upper bound, in
    /// increasing order and ending with `f64::INFINITY`; they are written cumulative, with
    /// `_sum` (`sum`) and `_count`.
    pub fn histogram<V: AsRef<str>>(
        &mut self,
        labels: &[(&str, V)],
        buckets: impl IntoIterator<Item = (f64, u64)>,
        sum: f64,
    ) {
        let mut cumulative = 0;
        for (bound, count) in buckets {
            cumulative += count;
            let le = if bound == f64::INFINITY {
                "+Inf".to_owned()
            } else {
                bound.to_string()
            };
            self.series("_bucket", labels, Some(("le", &le)), cumulative);
        }
        self.series("_sum", labels, None, sum);
        self.series("_count", labels, None, cumulative);
    }

    fn series<V: AsRef<str>>(
        &mut self,
        suffix: &str,
        labels: &[(&str, V)],
        extra: Option<(&str, &str)>,
        value: impl Display,
    ) {
        let text = &mut *self.text;
        text.push_str(self.name);
        text.push_str(suffix);
        let pairs = labels.iter().map(|(name, value)| (*name, value.as_ref()));
        for (index, (name, value)) in pairs.chain(extra).enumerate() {
            text.push(if index == 0 { '{' } else { ',' });
            text.push_str(name);
            text.push_str("=\"");
            for character in value.chars() {
                match character {
                    '\\' => text.push_str("\\\\"),
                    '"' => text.push_str("\\\""),
                    '\n' => text.push_str("\\n"),
                    other => text.push(other),
                }
            }
            text.push('"');
        }
        if !labels.is_empty() || extra.is_some() {
            text.push('}');
        }
        let _ = writeln!(text, " {value}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_written_whole_with_their_label_values_escaped() {
        let mut exposition = Exposition::default();
        let mut requests = exposition.family("a_total", Kind::Counter, "Requests.\nAll of them.");
        requests.sample(&[("pool", "ta\"k\\ip\nx")], 3);
        requests.sample(&[("pool", "b")], 4);
        let mut durations = exposition.family("d_seconds", Kind::Histogram, "Durations.");
        durations.histogram(
            &[("pool", "b")],
            [(0.5, 1), (1.0, 0), (f64::INFINITY, 2)],
            4.25,
        );
        let text = exposition.into_text();
        assert_eq!(
            text,
            "# HELP a_total Requests.\\nAll of them.\n# TYPE a_total counter\n\
             a_total{pool=\"ta\\\"k\\\\ip\\nx\"} 3\na_total{pool=\"b\"} 4\n\
             # HELP d_seconds Durations.\n# TYPE d_seconds histogram\n\
             d_seconds_bucket{pool=\"b\",le=\"0.5\"} 1\nd_seconds_bucket{pool=\"b\",le=\"1\"} 1\n\
             d_seconds_bucket{pool=\"b\",le=\"+Inf\"} 3\nd_seconds_sum{pool=\"b\"} 4.25\n\
             d_seconds_count{pool=\"b\"} 3\n"
        );
        let read = strict_reader::parse(&text).unwrap();
        assert_eq!(read.value("a_total", &[("pool", "ta\"k\\ip\nx")]), 3.0);
        assert_eq!(read.value("d_seconds_count", &[("pool", "b")]), 3.0);
    }
}
