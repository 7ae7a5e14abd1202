//! Reading a file's text into the schema, with every unknown key and wrong type reported at once.
//!
//! Serde stops at the first problem. So the text is parsed first into a spanned TOML document
//! (`toml::de::DeTable`), and serde reads the schema from that document; each time it fails,
//! the failing key or array element is taken out of the document and serde reads again, until it
//! reads clean. Each problem keeps serde's own message ("unknown field `x`, expected one of …")
//! and the span of what was written, and the schema stays the one place that says what a key
//! is: there is no second list of keys to keep in step, which `serde_ignored` (unknown keys
//! only) or a hand-written walk over the document would need.

use serde_path_to_error::Segment;
use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue};

use super::report::Report;
use super::schema::File;
use crate::suggest::did_you_mean;

/// The schema read from `text`, or `None` when a problem was reported.
pub fn file(text: &str, report: &mut Report) -> Option<File> {
    let (document, syntax_errors) = DeTable::parse_recoverable(text);
    if !syntax_errors.is_empty() {
        for error in syntax_errors {
            report.error(error.span().unwrap_or_default(), "", error.message());
        }
        return None;
    }
    let written = DeValue::Table(document.get_ref().clone());
    let mut document = document;
    let mut clean = true;
    loop {
        let deserializer = toml::de::Deserializer::from(document.clone());
        let error = match serde_path_to_error::deserialize::<_, File>(deserializer) {
            Ok(file) => return clean.then_some(file),
            Err(error) => error,
        };
        clean = false;
        let steps = steps(error.path());
        let mut field = String::new();
        let mut current = DeValue::Table(std::mem::take(document.get_mut()));
        let taken_out = take_out(&written, &mut current, &steps, &mut field);
        if let DeValue::Table(table) = current {
            *document.get_mut() = table;
        }
        let mut message = error.inner().message().to_owned();
        if let Some(hint) = unknown_field_hint(&message) {
            message.push_str(&hint);
        }
        report.error(error.inner().span().unwrap_or_default(), &field, message);
        if !taken_out {
            return None;
        }
    }
}

/// One step of a path into the document.
enum Step {
    Key(String),
    Index(usize),
}

/// The path serde reports, without the steps `Spanned` adds (the user never wrote them).
fn steps(path: &serde_path_to_error::Path) -> Vec<Step> {
    path.iter()
        .filter_map(|segment| match segment {
            Segment::Map { key } if key.starts_with("$__serde_spanned_private") => None,
            Segment::Map { key } => Some(Step::Key(key.clone())),
            Segment::Seq { index } => Some(Step::Index(*index)),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .collect()
}

/// Takes the value at `steps` out of `current`, writing its path into `field` as the file
/// has it: array indices are those of `written`, the document before anything was taken out.
fn take_out(written: &DeValue, current: &mut DeValue, steps: &[Step], field: &mut String) -> bool {
    let Some((step, rest)) = steps.split_first() else {
        return false;
    };
    match (step, written, current) {
        (Step::Key(key), DeValue::Table(written), DeValue::Table(current)) => {
            if !field.is_empty() {
                field.push('.');
            }
            field.push_str(key);
            if rest.is_empty() {
                return current.remove(key.as_str()).is_some();
            }
            match (written.get(key.as_str()), current.get_mut(key.as_str())) {
                (Some(written), Some(current)) => {
                    take_out(written.get_ref(), current.get_mut(), rest, field)
                }
                _ => false,
            }
        }
        (Step::Index(index), DeValue::Array(written), DeValue::Array(current)) => {
            let Some(span) = current.get(*index).map(Spanned::span) else {
                return false;
            };
            let position = written.iter().position(|w| w.span() == span);
            field.push_str(&format!("[{}]", position.unwrap_or(*index)));
            if rest.is_empty() {
                *current = without(current, *index);
                return true;
            }
            match (position, current.get_mut(*index)) {
                (Some(position), Some(element)) => {
                    take_out(written[position].get_ref(), element.get_mut(), rest, field)
                }
                _ => false,
            }
        }
        _ => false,
    }
}

fn without<'i>(array: &DeArray<'i>, index: usize) -> DeArray<'i> {
    let kept = array.iter().enumerate().filter(|(i, _)| *i != index);
    kept.map(|(_, value)| value.clone()).collect()
}

/// For serde's "unknown field `x`, expected one of `a`, `b`", the closest known name.
fn unknown_field_hint(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, expected) = rest.split_once('`')?;
    let candidates = expected.split('`').skip(1).step_by(2);
    did_you_mean(unknown, candidates).map(|s| format!("; did you mean `{s}`?"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::report::Source;

    fn fields(text: &str) -> Vec<String> {
        let mut report = Report::new(Source::File { name: "t", text });
        assert!(file(text, &mut report).is_none());
        let errors = report.into_errors();
        errors.into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn errors_in_one_array_keep_the_indices_the_file_has() {
        let text = "[[listener]]\n[[listener.route]]\nmethods = [1, \"GET\", 2]\n";
        assert_eq!(
            fields(text),
            [
                "listener[0].route[0].methods[0]",
                "listener[0].route[0].methods[2]"
            ]
        );
    }

    #[test]
    fn an_unknown_table_and_a_wrong_type_inside_a_later_one_are_both_found() {
        let text = "[servr]\nname = 1\n[[pool]]\nretries = \"one\"\n";
        assert_eq!(fields(text), ["servr", "pool[0].retries"]);
    }
}
