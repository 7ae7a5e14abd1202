//! A strict reader of the Prometheus text format (0.0.4), for checking `/metrics`. The crates
//! that read this format (prometheus-parse) skip what they cannot read, so they would accept a
//! broken exposition; this one refuses any line outside the grammar, a sample before its
//! family's `# TYPE`, a family split in two, and histograms whose buckets do not add up.

use std::collections::{BTreeMap, HashMap, HashSet};

/// One sample: its name (with any `_bucket`/`_sum`/`_count`), labels and value.
#[derive(Clone, Debug)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A whole exposition, read.
#[derive(Debug, Default)]
pub struct Exposition {
    pub types: HashMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// The value of the one sample named `name` whose labels include `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<_> = self.matching(name, labels).collect();
        assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
        found[0].value
    }

    /// Samples named `name` whose labels include `labels`.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }
}

/// Reads `text`, or says which line breaks the format and how.
pub fn parse(text: &str) -> Result<Exposition, String> {
    let mut exposition = Exposition::default();
    let mut finished: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    // Each series (name and label set) once: a scraper refuses a second sample of one.
    let mut series: HashSet<String> = HashSet::new();
    for (number, line) in text.lines().enumerate() {
        let fail = |why: &str| format!("line {}: {why}: {line:?}", number + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut words = rest.splitn(3, ' ');
            let (keyword, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let rest = words.next().unwrap_or("");
            if !is_metric_name(name) {
                return Err(fail("bad metric name"));
            }
            match keyword {
                "HELP" => {}
                "TYPE" => {
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&rest) {
                        return Err(fail("unknown type"));
                    }
                    if exposition.types.insert(name.into(), rest.into()).is_some() {
                        return Err(fail("a second TYPE for the family"));
                    }
                }
                _ => continue, // a plain comment
            }
            if current.as_deref() != Some(name) {
                if let Some(done) = current.replace(name.to_owned()) {
                    finished.insert(done);
                }
                if finished.contains(name) {
                    return Err(fail("the family appears twice"));
                }
            }
            continue;
        }
        let sample = sample(line).map_err(|why| fail(&why))?;
        let family = family_of(&sample.name, &exposition.types);
        if current.as_deref() != Some(family.as_str()) {
            return Err(fail(
                "sample outside its family's block (no TYPE before it)",
            ));
        }
        if exposition.types[&family] == "histogram"
            && sample.name.ends_with("_bucket")
            && !sample.labels.contains_key("le")
        {
            return Err(fail("histogram bucket without le"));
        }
        let labels: BTreeMap<&String, &String> = sample.labels.iter().collect();
        if !series.insert(format!("{}{labels:?}", sample.name)) {
            return Err(fail("the series appears twice"));
        }
        exposition.samples.push(sample);
    }
    check_histograms(&exposition)?;
    Ok(exposition)
}

/// The family a sample belongs to: itself, or a histogram's or summary's base name.
fn family_of(name: &str, types: &HashMap<String, String>) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix)
            && matches!(
                types.get(base).map(String::as_str),
                Some("histogram" | "summary")
            )
        {
            return base.to_owned();
        }
    }
    name.to_owned()
}

/// Buckets never decrease as `le` grows, end with `+Inf`, and `+Inf` equals `_count`.
fn check_histograms(exposition: &Exposition) -> Result<(), String> {
    let histograms = exposition.types.iter().filter(|(_, t)| *t == "histogram");
    for (family, _) in histograms {
        let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        let bucket = format!("{family}_bucket");
        for sample in exposition.samples.iter().filter(|s| s.name == bucket) {
            let mut labels = sample.labels.clone();
            let le = labels.remove("le").unwrap();
            let le: f64 = parse_value(&le).map_err(|_| format!("{family}: le {le:?}"))?;
            series
                .entry(format!("{labels:?}"))
                .or_default()
                .push((le, sample.value));
        }
        for (labels, buckets) in series {
            let ordered = buckets
                .windows(2)
                .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1);
            if !ordered {
                return Err(format!(
                    "{family} {labels}: buckets not cumulative: {buckets:?}"
                ));
            }
            let last = buckets.last().unwrap();
            if last.0 != f64::INFINITY {
                return Err(format!("{family} {labels}: no +Inf bucket"));
            }
            let count = exposition
                .samples
                .iter()
                .find(|s| {
                    s.name == format!("{family}_count") && format!("{:?}", s.labels) == labels
                })
                .ok_or_else(|| format!("{family} {labels}: no _count"))?;
            if count.value != last.1 {
                return Err(format!(
                    "{family} {labels}: +Inf {} but _count {}",
                    last.1, count.value
                ));
            }
        }
    }
    Ok(())
}

fn sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value after the name")?;
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return Err("bad metric name".into());
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(inside) = rest.strip_prefix('{') {
        rest = inside;
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = rest.find('=').ok_or("label without =")?;
            let label = &rest[..eq];
            if !is_label_name(label) {
                return Err(format!("bad label name {label:?}"));
            }
            let mut chars = rest[eq + 1..].char_indices();
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err("label value not quoted".into());
            }
            let mut value = String::new();
            let end = loop {
                match chars.next().ok_or("unterminated label value")? {
                    (i, '"') => break eq + 1 + i + 1,
                    (_, '\\') => match chars.next().ok_or("dangling escape")?.1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        other => return Err(format!("unknown escape \\{other}")),
                    },
                    (_, '\n') => return Err("newline in label value".into()),
                    (_, c) => value.push(c),
                }
            };
            if labels.insert(label.to_owned(), value).is_some() {
                return Err(format!("label {label} twice"));
            }
            rest = &rest[end..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }
    let mut parts = rest
        .strip_prefix(' ')
        .ok_or("no space before the value")?
        .split(' ');
    let value = parse_value(parts.next().unwrap_or(""))?;
    if let Some(timestamp) = parts.next()
        && timestamp.parse::<i64>().is_err()
    {
        return Err("bad timestamp".into());
    }
    if parts.next().is_some() {
        return Err("text after the timestamp".into());
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ if text
            .chars()
            .all(|c| c.is_ascii_digit() || "+-.eE".contains(c)) =>
        {
            text.parse().map_err(|_| format!("bad value {text:?}"))
        }
        _ => Err(format!("bad value {text:?}")),
    }
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[test]
fn the_reader_refuses_what_prometheus_would() {
    let good = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\\\"\"} 3\n\
                # TYPE h histogram\nh_bucket{le=\"0.1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.3\nh_count 2\n";
    let read = parse(good).unwrap();
    assert_eq!(read.value("a_total", &[("x", "1\"")]), 3.0);
    for bad in [
        "a_total 3\n",                                         // no TYPE
        "# TYPE a counter\na{x=1} 3\n",                        // unquoted
        "# TYPE a counter\na{x=\"1\"} three\n",                // value
        "# TYPE a counter\na 1\n# TYPE b counter\nb 1\na 2\n", // split family
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
        "# TYPE 9a counter\n",
        "# TYPE a counter\na{x=\"1\",y=\"2\"} 1\na{y=\"2\",x=\"1\"} 1\n", // one series twice
    ] {
        assert!(parse(bad).is_err(), "accepted {bad:?}");
    }
}
