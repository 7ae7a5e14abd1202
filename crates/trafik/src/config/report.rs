//! Where a setting was written, and the problems found in it, each told where the user can fix it:
//! a file's line and column, or a quick-mode flag.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use super::values::Dur;

/// Where the settings come from.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    /// A TOML file; `name` is used in messages.
    File { name: &'a str, text: &'a str },
    /// Quick-mode flags; `flag` gives the flag that sets a field such as `server.workers`.
    Flags {
        flag: fn(&str) -> Option<&'static str>,
    },
}

/// One problem in the settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// `FILE:LINE:COLUMN`, or the flag that sets the field.
    pub place: String,
    /// The field's path, such as `pool[0].health.interval`; empty when the place says it all.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in [&self.place, &self.field] {
            if !part.is_empty() {
                write!(f, "{part}: ")?;
            }
        }
        f.write_str(&self.message)
    }
}

/// Every problem found, one per line, then how many there were and that nothing was started:
/// the one report `trafik check`, `serve` and quick mode print for a configuration they refuse
/// (a file that cannot be read, a `--listen` that names no listener, included).
pub fn render<E: fmt::Display>(errors: &[E]) -> String {
    render_then(errors, "nothing was started")
}

/// [`render`], saying `outcome` of what the refusal left undone instead.
pub fn render_then<E: fmt::Display>(errors: &[E], outcome: &str) -> String {
    let mut lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let count = errors.len();
    lines.push(format!(
        "{count} error{} in the configuration; {outcome}",
        if count == 1 { "" } else { "s" }
    ));
    lines.join("\n")
}

/// Collects problems instead of stopping at the first, so one run shows them all.
pub struct Report<'a> {
    source: Source<'a>,
    errors: Vec<ConfigError>,
    /// Problems in other files a setting names (a zone file), after the config's own.
    elsewhere: Vec<ConfigError>,
}

impl<'a> Report<'a> {
    pub fn new(source: Source<'a>) -> Self {
        Report {
            source,
            errors: Vec::new(),
            elsewhere: Vec::new(),
        }
    }

    /// A problem with the value written at `span` (byte offsets into the file).
    pub fn error(&mut self, span: Range<usize>, field: &str, message: impl Into<String>) {
        let (place, field) = match self.source {
            Source::File { name, text } => {
                let (line, column) = line_and_column(text, span.start);
                (format!("{name}:{line}:{column}"), field.to_owned())
            }
            Source::Flags { flag } => match flag(field) {
                Some(flag) => (flag.to_owned(), String::new()),
                None => (field.to_owned(), String::new()),
            },
        };
        self.errors.push(ConfigError {
            place,
            field,
            message: message.into(),
        });
    }

    /// A problem at `place` in another file, such as `kargo.zone:12`, found reading `field`.
    pub fn error_in_file(&mut self, place: String, field: &str, message: impl Into<String>) {
        self.elsewhere.push(ConfigError {
            place,
            field: field.to_owned(),
            message: message.into(),
        });
    }

    /// `value`, or an error at `table` (the section that lacks it) saying what to add.
    pub fn required<T>(
        &mut self,
        value: Option<T>,
        table: Range<usize>,
        field: &str,
        example: &str,
    ) -> Option<T> {
        if value.is_none() {
            let key = field.rsplit('.').next().unwrap_or(field);
            self.error(table, field, format!("missing `{key}`: add {example}"));
        }
        value
    }

    /// The duration in `value`, or an error when it is zero: `what` is "a timeout", "an
    /// interval"…, `because` what a zero would do.
    pub fn above_zero(
        &mut self,
        value: &Spanned<Dur>,
        field: &str,
        what: &str,
        because: &str,
    ) -> Duration {
        if value.get_ref().0.is_zero() {
            self.error(
                value.span(),
                field,
                format!("expected {what} above zero ({because})"),
            );
        }
        value.get_ref().0
    }

    /// How the user turns `field` to `value` where the settings come from: a key in its table,
    /// or a flag.
    pub fn setting(&self, field: &str, value: &str) -> String {
        match self.source {
            Source::File { .. } => {
                let (table, key) = field.rsplit_once('.').unwrap_or(("", field));
                format!("`{key} = {value}` in [{table}]")
            }
            Source::Flags { flag } => flag(field).unwrap_or(field).to_owned(),
        }
    }

    /// The file a setting names: relative to the config file's folder, so a config finds its
    /// certificates wherever trafik is started from; relative to the working directory for
    /// quick-mode flags, as a shell user expects.
    pub fn path(&self, written: &str) -> PathBuf {
        match self.source {
            Source::File { name, .. } => match Path::new(name).parent() {
                Some(folder) => folder.join(written),
                None => PathBuf::from(written),
            },
            Source::Flags { .. } => PathBuf::from(written),
        }
    }

    /// The problems in the order they appear in the file.
    pub fn into_errors(self) -> Vec<ConfigError> {
        let mut errors = self.errors;
        errors.sort_by_key(|e| place_order(&e.place));
        errors.extend(self.elsewhere);
        errors
    }

    /// The file's text, to place errors inside a value (a jq expression's own line:column).
    pub fn file_text(&self) -> Option<&'a str> {
        match self.source {
            Source::File { text, .. } => Some(text),
            Source::Flags { .. } => None,
        }
    }

    /// How many problems were found so far: a checker compares before and after its own.
    pub fn error_count(&self) -> usize {
        self.errors.len() + self.elsewhere.len()
    }

    pub fn is_clean(&self) -> bool {
        self.errors.is_empty() && self.elsewhere.is_empty()
    }
}

/// `FILE:LINE:COLUMN` sorted by line and column; flags keep the order they were found in.
fn place_order(place: &str) -> (usize, usize) {
    let mut numbers = place.rsplit(':').map(|n| n.parse().unwrap_or(0));
    let column = numbers.next().unwrap_or(0);
    let line = numbers.next().unwrap_or(0);
    (line, column)
}

/// 1-based line and column (in characters) of a byte offset.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_count_from_one() {
        let text = "ab\ncdé\nf";
        assert_eq!(line_and_column(text, 0), (1, 1));
        assert_eq!(line_and_column(text, 4), (2, 2));
        assert_eq!(line_and_column(text, text.len()), (3, 2));
    }

    #[test]
    fn a_flag_error_names_the_flag() {
        let mut report = Report::new(Source::Flags {
            flag: |field| (field == "server.workers").then_some("--workers"),
        });
        report.error(0..0, "server.workers", "expected at least 1 worker");
        assert_eq!(
            report.into_errors()[0].to_string(),
            "--workers: expected at least 1 worker"
        );
    }
}
