//! Reading a file's text into the schema, with every unknown key and wrong type reported at once.
//!
//! Serde stops at the first problem. So the text is parsed first into a spanned TOML document
//! (`toml::de::DeTable`), and serde reads the schema from that document; each time it fails,
//! the failing key or array element is taken out of the document and serde reads again, until it
//! reads clean. Each problem keeps serde's own message ("unknown field `x`, expected one of …")
//! and the span of what was written, and the schema stays the one place that says what a key
//! is: there is no second list of keys to keep in step, which `serde_ignored` (unknown keys
//! only) or a hand-written walk over the document would need.
//!
//! What reads clean once the failing keys are out goes on to the section checks, so one run
//! reports every error; [`Reading::as_written`] then tells their errors against the file as
//! written.

use serde_path_to_error::Segment;
use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue};

use super::report::{ConfigError, Report};
use crate::suggest::did_you_mean;

/// The file as written and as read, to tell the section checks' errors against the former.
pub struct Reading<'i> {
    written: DeValue<'i>,
    read: DeValue<'i>,
    /// Each key or array element taken out, as the file has it (`pool[0].backends[1]`).
    taken_out: Vec<String>,
}

/// The schema `T` (a configuration, a load scenario) read from `text`, with every key and array
/// element that failed taken out (each one reported); `None` when the text is not TOML, or a
/// failing value could not be taken out.
pub fn file<'i, T: serde::de::DeserializeOwned>(
    text: &'i str,
    report: &mut Report,
) -> (Option<T>, Reading<'i>) {
    let (document, syntax_errors) = DeTable::parse_recoverable(text);
    let written = DeValue::Table(document.get_ref().clone());
    let mut reading = Reading {
        read: written.clone(),
        written,
        taken_out: Vec::new(),
    };
    if !syntax_errors.is_empty() {
        for error in syntax_errors {
            report.error(error.span().unwrap_or_default(), "", error.message());
        }
        return (None, reading);
    }
    let mut document = document;
    loop {
        let deserializer = toml::de::Deserializer::from(document.clone());
        let error = match serde_path_to_error::deserialize::<_, T>(deserializer) {
            Ok(file) => {
                reading.read = DeValue::Table(document.into_inner());
                return (Some(file), reading);
            }
            Err(error) => error,
        };
        let steps = steps(error.path());
        let mut field = String::new();
        let mut current = DeValue::Table(std::mem::take(document.get_mut()));
        let taken_out = take_out(&reading.written, &mut current, &steps, &mut field);
        if let DeValue::Table(table) = current {
            *document.get_mut() = table;
        }
        let mut message = error.inner().message().to_owned();
        if let Some(hint) = unknown_field_hint(&message) {
            message.push_str(&hint);
        }
        report.error(error.inner().span().unwrap_or_default(), &field, message);
        if !taken_out {
            return (None, reading);
        }
        reading.taken_out.push(field);
    }
}

impl Reading<'_> {
    /// The section checks' `errors` about the document as read, told as the file has it: an
    /// array that lost an element gets its indices back, and an error about a value taken out
    /// (missing, or a key inside it) is dropped, since reading reported that value already.
    /// Errors that follow from it elsewhere stay (a route naming a pool whose `name` was taken
    /// out finds no such pool): they name their own field, and are true of what was read.
    pub fn as_written(&self, errors: Vec<ConfigError>) -> Vec<ConfigError> {
        errors
            .into_iter()
            .map(|mut error| {
                error.field = self.field_as_written(&error.field);
                error
            })
            .filter(|error| !self.reported(&error.field))
            .collect()
    }

    /// Whether reading reported `field` already: it, or a value it lies in, was taken out.
    fn reported(&self, field: &str) -> bool {
        self.taken_out.iter().any(|taken| within(field, taken))
    }

    /// `field`, a path into the document as read, with each array index that of the element
    /// in the file; where the path leaves the document, the rest is kept as it is.
    fn field_as_written(&self, field: &str) -> String {
        let Some(steps) = parse_field(field) else {
            return field.to_owned();
        };
        let mut renamed = String::new();
        let mut place = Some((&self.written, &self.read));
        for step in steps {
            place = match (step, place) {
                (Step::Key(key), place) => {
                    if !renamed.is_empty() {
                        renamed.push('.');
                    }
                    renamed.push_str(&key);
                    match place {
                        Some((DeValue::Table(written), DeValue::Table(read))) => {
                            written.get(key.as_str()).zip(read.get(key.as_str()))
                        }
                        _ => None,
                    }
                    .map(|(written, read)| (written.get_ref(), read.get_ref()))
                }
                (Step::Index(index), Some((DeValue::Array(written), DeValue::Array(read)))) => {
                    let element = read.get(index);
                    let position = element
                        .and_then(|e| written.iter().position(|w| w.span() == e.span()))
                        .unwrap_or(index);
                    renamed.push_str(&format!("[{position}]"));
                    written
                        .get(position)
                        .zip(element)
                        .map(|(written, read)| (written.get_ref(), read.get_ref()))
                }
                (Step::Index(index), _) => {
                    renamed.push_str(&format!("[{index}]"));
                    None
                }
            };
        }
        renamed
    }
}

/// Whether `field` is `outer` or a key or element inside it.
fn within(field: &str, outer: &str) -> bool {
    field
        .strip_prefix(outer)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// The steps of a field as the checks write it (`listener[0].route[1].pool`); `None` for a
/// field of another form.
fn parse_field(field: &str) -> Option<Vec<Step>> {
    let mut steps = Vec::new();
    for part in field.split('.') {
        let (key, mut indices) = part.split_at(part.find('[').unwrap_or(part.len()));
        if key.is_empty() {
            return None;
        }
        steps.push(Step::Key(key.to_owned()));
        while let Some(rest) = indices.strip_prefix('[') {
            let (index, rest) = rest.split_once(']')?;
            steps.push(Step::Index(index.parse().ok()?));
            indices = rest;
        }
        if !indices.is_empty() {
            return None;
        }
    }
    Some(steps)
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
        let _ = file::<crate::config::schema::File>(text, &mut report);
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
