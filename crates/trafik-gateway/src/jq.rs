//! jq expressions over JSON bodies, by the `jaq` crates: compiled once when the configuration
//! loads (errors carry byte offsets into the expression, for `trafik check` to place), then run
//! per request with the route's captures bound as variables (`$no`).

use std::ops::Range;

use jaq_core::load::{Arena, File, Loader};
use jaq_core::native::{Filter as NativeFilter, Fun, bome, run, v};
use jaq_core::{Compiler, Ctx, DataT, RunPtr, Vars, data};
use jaq_json::Val;

type Data = data::JustLut<Val>;

/// A compiled jq expression with its variables' names.
pub struct Expression {
    filter: jaq_core::compile::Filter<jaq_core::Native<Data>>,
    variables: Vec<String>,
}

/// A problem in an expression: where (byte offsets into it) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpressionError {
    pub span: Range<usize>,
    pub message: String,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expression")
            .field("variables", &self.variables)
            .finish_non_exhaustive()
    }
}

impl Expression {
    /// Compiles `code`, which may use the variables named (without `$`) besides jq's standard
    /// filters and [`rfc3339ms`](self#rfc3339ms).
    pub fn compile(code: &str, variables: &[&str]) -> Result<Expression, Vec<ExpressionError>> {
        let defs = jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs());
        let funs = jaq_core::funs::<Data>()
            .chain(jaq_std::funs())
            .chain(jaq_json::funs())
            .chain(gateway_funs());
        let arena = Arena::default();
        let loader = Loader::new(defs);
        let place = |part: &str| jaq_core::load::span(code, part);
        let modules = loader
            .load(&arena, File { code, path: () })
            .map_err(|errors| {
                errors
                    .into_iter()
                    .filter(|(file, _)| file.code == code)
                    .flat_map(|(_, error)| load_errors(error, &place))
                    .collect::<Vec<_>>()
            })?;
        let names: Vec<String> = variables.iter().map(|name| format!("${name}")).collect();
        let filter = Compiler::default()
            .with_funs(funs)
            .with_global_vars(names.iter().map(String::as_str))
            .compile(modules)
            .map_err(|errors| {
                errors
                    .into_iter()
                    .filter(|(file, _)| file.code == code)
                    .flat_map(|(_, undefined)| undefined)
                    .map(|(name, kind)| ExpressionError {
                        span: place(name),
                        message: format!("undefined {} {name}", kind.as_str()),
                    })
                    .collect::<Vec<_>>()
            })?;
        Ok(Expression {
            filter,
            variables: variables.iter().map(|name| (*name).to_owned()).collect(),
        })
    }

    /// The variables it was compiled with, in the order [`Expression::run`] takes their values.
    pub fn variables(&self) -> &[String] {
        &self.variables
    }

    /// The expression's first output for `input`, with the variables' values in order; an
    /// expression that fails or yields nothing is an error.
    pub fn run(&self, input: Val, values: impl IntoIterator<Item = Val>) -> Result<Val, String> {
        let context = Ctx::<Data>::new(&self.filter.lut, Vars::new(values));
        let mut outputs = self.filter.id.run((context, input));
        match outputs.next() {
            Some(Ok(value)) => Ok(value),
            Some(Err(exception)) => Err(match exception.get_err() {
                Ok(error) => error.to_string(),
                Err(_) => "the expression broke out of its end".to_owned(),
            }),
            None => Err("the expression gave no value".to_owned()),
        }
    }
}

/// Lex and parse errors, each placed at the text it is about.
fn load_errors(
    error: jaq_core::load::Error<&str>,
    place: &impl Fn(&str) -> Range<usize>,
) -> Vec<ExpressionError> {
    use jaq_core::load::Error;
    match error {
        Error::Io(errors) => errors
            .into_iter()
            .map(|(path, message)| ExpressionError {
                span: place(path),
                message,
            })
            .collect(),
        Error::Lex(errors) => errors
            .into_iter()
            .map(|(expected, found)| ExpressionError {
                span: place(found),
                message: format!("expected {}", expected.as_str()),
            })
            .collect(),
        Error::Parse(errors) => errors
            .into_iter()
            .map(|(expected, found)| ExpressionError {
                span: place(found),
                message: match found {
                    "" => format!("expected {}, found the end", expected.as_str()),
                    found => format!("expected {}, found {found:?}", expected.as_str()),
                },
            })
            .collect(),
    }
}

/// The gateway's own filters: `rfc3339ms` turns unix seconds (a number) or an RFC 3339 time (a
/// string) into RFC 3339 in UTC with milliseconds, as JavaScript's `toISOString` writes it
/// (`2026-03-11T08:24:00.000Z`), the form the course's services agree on.
fn gateway_funs<D: DataT>() -> impl Iterator<Item = Fun<D>>
where
    for<'a> D::V<'a>: jaq_std::ValT,
{
    let funs: [NativeFilter<RunPtr<D>>; 1] = [("rfc3339ms", v(0), |cv| {
        bome(rfc3339ms(&cv.1).map(D::V::from))
    })];
    funs.into_iter().map(run)
}

fn rfc3339ms<V: jaq_std::ValT>(value: &V) -> Result<String, jaq_core::Error<V>> {
    let instant = if let Some(seconds) = value.as_f64().filter(|_| !value.is_utf8_str()) {
        jiff::Timestamp::from_millisecond((seconds * 1000.0).round() as i64)
            .map_err(|e| jaq_core::Error::str(e.to_string()))?
    } else if let Some(text) = value.as_bytes().filter(|_| value.is_utf8_str()) {
        let text = std::str::from_utf8(text).map_err(|e| jaq_core::Error::str(e.to_string()))?;
        text.parse::<jiff::Timestamp>()
            .map_err(|e| jaq_core::Error::str(format!("{text:?} is not an RFC 3339 time: {e}")))?
    } else {
        return Err(jaq_core::Error::str(
            "rfc3339ms takes unix seconds or an RFC 3339 time",
        ));
    };
    Ok(instant.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
}

/// Reads a JSON body; `None` for anything that is not one JSON value, and for one nested
/// deeper than [`DEEPEST`] or with a number longer than [`LONGEST_NUMBER`] (see [`bounded`]).
pub fn parse(body: &[u8]) -> Option<Val> {
    bounded(body).then(|| jaq_json::read::parse_single(body).ok())?
}

/// The deepest nesting of arrays and objects read (serde_json's default limit too).
pub const DEEPEST: usize = 128;

/// The longest number read, in characters.
pub const LONGEST_NUMBER: usize = 1024;

/// Whether `body` stays within what the parser may be given: it recurses once per `[` or `{`
/// on the worker's stack (a backend's `[[[[…` a million deep overflowed it and aborted the
/// process), and reads a long number into a big integer in time quadratic in its digits. One
/// pass over the bytes, strings skipped.
fn bounded(body: &[u8]) -> bool {
    let (mut depth, mut number, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &byte in body {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        let in_number = byte.is_ascii_digit() || matches!(byte, b'-' | b'+' | b'.' | b'e' | b'E');
        number = if in_number { number + 1 } else { 0 };
        if depth > DEEPEST || number > LONGEST_NUMBER {
            return false;
        }
    }
    true
}

/// Writes a value as compact JSON, keys in the order the value has them.
pub fn write(value: &Val) -> Vec<u8> {
    value.to_string().into_bytes()
}

/// A value as an HTTP status code, if it is one (100 to 599).
pub fn as_status(value: &Val) -> Option<u16> {
    use jaq_std::ValT as _;
    value
        .as_isize()
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| (100..600).contains(n))
}

/// A string value (a capture, a status text).
pub fn text(value: &str) -> Val {
    Val::from(value.to_owned())
}

/// A number value (a status code).
pub fn number(value: usize) -> Val {
    Val::from(value)
}

pub use jaq_json::Val as Value;

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(code: &str, input: &str, vars: &[(&str, &str)]) -> String {
        let names: Vec<&str> = vars.iter().map(|(n, _)| *n).collect();
        let expression = Expression::compile(code, &names).unwrap();
        let output = expression
            .run(
                parse(input.as_bytes()).unwrap(),
                vars.iter().map(|(_, v)| text(v)),
            )
            .unwrap();
        String::from_utf8(write(&output)).unwrap()
    }

    #[test]
    fn a_body_nested_past_the_deepest_or_with_an_endless_number_is_no_json() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(deep(DEEPEST).as_bytes()).is_some());
        // A million deep overflowed the stack the parser recursed on.
        assert!(parse(deep(1_000_000).as_bytes()).is_none());
        assert!(parse(format!("{{\"a\":{}}}", deep(DEEPEST)).as_bytes()).is_none());
        // Brackets inside strings are text.
        let quoted = format!("{{\"a\":\"{}\\\"\"}}", "[".repeat(10_000));
        assert!(parse(quoted.as_bytes()).is_some());
        assert!(parse("9".repeat(LONGEST_NUMBER).as_bytes()).is_some());
        assert!(parse("9".repeat(4 << 20).as_bytes()).is_none());
    }

    #[test]
    fn objects_keep_the_order_the_expression_builds() {
        let merged = eval(
            ".durum + {ucret: (.ucret | if . then {tarife, net} else null end)}",
            r#"{"durum":{"z":1,"a":2},"ucret":{"net":3,"tarife":4,"x":5}}"#,
            &[],
        );
        assert_eq!(merged, r#"{"z":1,"a":2,"ucret":{"tarife":4,"net":3}}"#);
        let missing = eval(
            ".durum + {ucret: (.ucret | if . then {tarife} else null end)}",
            r#"{"durum":{"b":"x"},"ucret":null}"#,
            &[],
        );
        assert_eq!(missing, r#"{"b":"x","ucret":null}"#);
    }

    #[test]
    fn variables_are_bound_in_the_order_given() {
        assert_eq!(
            eval(
                "{takipNo: $no, p: $part} + .",
                r#"{"k":[1,"2"]}"#,
                &[("no", "TR-1"), ("part", "durum")]
            ),
            r#"{"takipNo":"TR-1","p":"durum","k":[1,"2"]}"#
        );
    }

    #[test]
    fn times_become_rfc3339_with_milliseconds() {
        assert_eq!(
            eval(
                "[.a, .b, .c] | map(rfc3339ms)",
                r#"{"a":1773217440,"b":"2026-03-11T08:24:00Z","c":"2026-03-11T10:24:00.5+02:00"}"#,
                &[]
            ),
            r#"["2026-03-11T08:24:00.000Z","2026-03-11T08:24:00.000Z","2026-03-11T08:24:00.500Z"]"#
        );
        let expression = Expression::compile("rfc3339ms", &[]).unwrap();
        assert!(expression.run(Val::Bool(true), []).is_err());
        assert!(expression.run(text("dun"), []).is_err());
    }

    #[test]
    fn strings_are_escaped_as_json() {
        assert_eq!(
            eval(".", r#"{"a":"\"\\\n\u0001é"}"#, &[]),
            r#"{"a":"\"\\\n\u0001é"}"#
        );
    }

    #[test]
    fn errors_name_the_place_in_the_expression() {
        let errors = Expression::compile(".a | $nope", &["no"]).unwrap_err();
        assert_eq!(errors[0].span, 5..10, "{errors:?}");
        assert!(errors[0].message.contains("variable"), "{errors:?}");
        let errors = Expression::compile("{a: (.b | }", &[]).unwrap_err();
        assert_eq!(errors[0].span.start, 10, "{errors:?}");
        let errors = Expression::compile(".a | nosuchfilter(1)", &[]).unwrap_err();
        assert_eq!(
            &".a | nosuchfilter(1)"[errors[0].span.clone()],
            "nosuchfilter"
        );
    }

    #[test]
    fn a_failing_or_empty_expression_is_an_error_not_a_panic() {
        let expression = Expression::compile(".a.b", &[]).unwrap();
        assert!(expression.run(text("x"), []).is_err());
        let expression = Expression::compile("empty", &[]).unwrap();
        assert!(expression.run(Val::Null, []).is_err());
    }
}
