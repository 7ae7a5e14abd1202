//! JSON numbers compared as the decimals they are written as. Read as f64,
//! `100.0000000000000000001` is 100.0 and passes `maximum = 100`; the gate's schema limits
//! (`minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`) are judged here instead,
//! on the number's text (serde_json's `arbitrary_precision` keeps it).

use std::cmp::Ordering;

use jsonschema::{Keyword, ValidationError, paths::Location};
use serde_json::{Map, Number, Value};

/// A decimal number: `0.DIGITS × 10^exponent`, `digits` without leading or trailing zeros;
/// zero has no digits (and no sign: `-0` is 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exponent: i64,
}

impl Decimal {
    /// The value of a JSON number literal (RFC 8259 §6), exactly; `None` for other text.
    /// Exponents saturate at i64, far past any limit an f64 (or a TOML file) can write.
    pub fn parse(text: &str) -> Option<Decimal> {
        let (negative, unsigned) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
            Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
            None => (unsigned, None),
        };
        let (whole, fraction) = match mantissa.split_once('.') {
            Some((whole, fraction)) if !fraction.is_empty() => (whole, fraction),
            Some(_) => return None,
            None => (mantissa, ""),
        };
        let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || (whole.len() > 1 && whole.starts_with('0')) {
            return None;
        }
        if !all_digits(whole) || !all_digits(fraction) {
            return None;
        }
        let written_exponent = match exponent {
            None => 0,
            Some(text) => {
                let (sign, digits) = match text.as_bytes().first() {
                    Some(b'-') => (-1, &text[1..]),
                    Some(b'+') => (1, &text[1..]),
                    _ => (1, text),
                };
                if digits.is_empty() || !all_digits(digits) {
                    return None;
                }
                digits.bytes().fold(0i64, |value, digit| {
                    value
                        .saturating_mul(10)
                        .saturating_add(sign * i64::from(digit - b'0'))
                })
            }
        };
        let mut digits: Vec<u8> = whole.bytes().chain(fraction.bytes()).collect();
        let mut point = whole.len() as i64;
        let leading = digits.iter().take_while(|&&d| d == b'0').count();
        digits.drain(..leading);
        point -= leading as i64;
        while digits.last() == Some(&b'0') {
            digits.pop();
        }
        if digits.is_empty() {
            return Some(Decimal {
                negative: false,
                digits,
                exponent: 0,
            });
        }
        Some(Decimal {
            negative,
            digits,
            exponent: point.saturating_add(written_exponent),
        })
    }

    fn sign(&self) -> i8 {
        match (self.digits.is_empty(), self.negative) {
            (true, _) => 0,
            (false, true) => -1,
            (false, false) => 1,
        }
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        let by_sign = self.sign().cmp(&other.sign());
        if by_sign != Ordering::Equal || self.sign() == 0 {
            return by_sign;
        }
        // Same sign, neither zero: the larger exponent is the larger magnitude; with equal
        // exponents, the digits compare as text (no trailing zeros, so a prefix is smaller).
        let magnitude = self
            .exponent
            .cmp(&other.exponent)
            .then_with(|| self.digits.cmp(&other.digits));
        if self.negative {
            magnitude.reverse()
        } else {
            magnitude
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// One of JSON Schema's numeric limits.
#[derive(Clone, Copy, Debug)]
enum Bound {
    Minimum,
    Maximum,
    ExclusiveMinimum,
    ExclusiveMaximum,
}

impl Bound {
    fn admits(self, value: Ordering) -> bool {
        match self {
            Bound::Minimum => value != Ordering::Less,
            Bound::Maximum => value != Ordering::Greater,
            Bound::ExclusiveMinimum => value == Ordering::Greater,
            Bound::ExclusiveMaximum => value == Ordering::Less,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Bound::Minimum => "less than the minimum of",
            Bound::Maximum => "greater than the maximum of",
            Bound::ExclusiveMinimum => "less than or equal to the exclusive minimum of",
            Bound::ExclusiveMaximum => "greater than or equal to the exclusive maximum of",
        }
    }
}

/// A limit compiled from the schema; `None` admits every instance (draft 4's boolean
/// `exclusiveMaximum`, which its `maximum` applies).
struct Limit(Option<(Bound, Decimal, Number)>);

impl<'i> Keyword<'i> for Limit {
    fn validate(&self, instance: &'i Value) -> Result<(), ValidationError<'i>> {
        match (&self.0, instance) {
            (Some((bound, limit, written)), Value::Number(number)) => {
                let admitted = Decimal::parse(number.as_str())
                    .is_some_and(|value| bound.admits(value.cmp(limit)));
                if admitted {
                    Ok(())
                } else {
                    Err(ValidationError::custom(format!(
                        "{number} is {} {written}",
                        bound.describe()
                    )))
                }
            }
            _ => Ok(()),
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        self.validate(instance).is_ok()
    }
}

/// The keyword `name`'s limit in `parent`, the schema object that holds it.
fn limit(
    name: &str,
    parent: &Map<String, Value>,
    value: &Value,
) -> Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'static>> {
    // Draft 4: `exclusiveMaximum: true` makes `maximum` exclusive and is no limit itself.
    let exclusive = |name: &str| parent.get(name) == Some(&Value::Bool(true));
    let bound = match name {
        "minimum" if exclusive("exclusiveMinimum") => Bound::ExclusiveMinimum,
        "maximum" if exclusive("exclusiveMaximum") => Bound::ExclusiveMaximum,
        "minimum" => Bound::Minimum,
        "maximum" => Bound::Maximum,
        "exclusiveMinimum" => Bound::ExclusiveMinimum,
        _ => Bound::ExclusiveMaximum,
    };
    match value {
        Value::Bool(_) if name.starts_with("exclusive") => Ok(Box::new(Limit(None))),
        Value::Number(number) => match Decimal::parse(number.as_str()) {
            Some(decimal) => Ok(Box::new(Limit(Some((bound, decimal, number.clone()))))),
            None => Err(ValidationError::schema(format!(
                "{name} is not a number: {number}"
            ))),
        },
        _ => Err(ValidationError::schema(format!(
            "{name} must be a number, found {value}"
        ))),
    }
}

/// `options` with the four numeric limits judged exactly.
pub fn exact_limits(
    options: jsonschema::ValidationOptions<'_>,
) -> jsonschema::ValidationOptions<'_> {
    let mut options = options;
    for name in ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] {
        options = options.with_keyword(name, move |parent, value, _: Location| {
            limit(name, parent, value)
        });
    }
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decimal(text: &str) -> Decimal {
        Decimal::parse(text).unwrap_or_else(|| panic!("{text}"))
    }

    #[test]
    fn equal_values_written_differently_are_equal() {
        for group in [
            &[
                "100",
                "100.0",
                "1e2",
                "1E+2",
                "0.001e5",
                "100.000000000000000000000",
            ][..],
            &["0", "-0", "0.000", "0e99", "-0.0e-5"],
            &["-12.5", "-1.25e1", "-125e-1"],
        ] {
            for text in group {
                assert_eq!(decimal(text), decimal(group[0]), "{text} = {}", group[0]);
            }
        }
    }

    #[test]
    fn order_is_exact_past_f64() {
        let ascending = [
            "-1e400",
            "-100.0000000000000000001",
            "-100",
            "-99.99999999999999999999",
            "-1e-400",
            "0",
            "1e-400",
            "0.09999999999999999999",
            "0.1",
            "0.10000000000000000001",
            "99.99999999999999999999",
            "100",
            "100.0000000000000000001",
            "1e400",
            "1e9223372036854775807999",
        ];
        for pair in ascending.windows(2) {
            assert!(
                decimal(pair[0]) < decimal(pair[1]),
                "{} < {}",
                pair[0],
                pair[1]
            );
            assert!(
                decimal(pair[1]) > decimal(pair[0]),
                "{} > {}",
                pair[1],
                pair[0]
            );
        }
    }

    #[test]
    fn only_json_number_literals_are_read() {
        for text in [
            "", "-", "01", "1.", ".5", "1e", "1e+", "+1", "1x", "0x10", "1.5.2", "NaN",
        ] {
            assert_eq!(Decimal::parse(text), None, "{text:?}");
        }
    }
}
