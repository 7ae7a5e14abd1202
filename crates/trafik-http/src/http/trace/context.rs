//! W3C Trace Context (`traceparent`, `tracestate`): reading and writing the headers. Pure, no
//! I/O: ids are passed in.

use std::fmt::Write as _;

/// A trace id and the span that sent the request, as `traceparent` carries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub flags: u8,
}

impl Parent {
    /// The sampled flag: the caller records this trace.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

/// Reads a `traceparent` value; `None` for anything the specification says to ignore: a
/// wrong length or separator, upper-case or non-hex digits, version `ff`, an all-zero trace or
/// span id, or (version 00) text after the flags. A later version is read by its first four
/// fields, as the specification asks.
pub fn parse_traceparent(value: &[u8]) -> Option<Parent> {
    if value.len() < 55 {
        return None;
    }
    let version = hex_byte(&value[0..2])?;
    let exact = value.len() == 55;
    let extended = version != 0 && value.get(55) == Some(&b'-');
    if version == 0xff || value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    if !(exact || extended) {
        return None;
    }
    let mut trace_id = [0; 16];
    for (i, byte) in trace_id.iter_mut().enumerate() {
        *byte = hex_byte(&value[3 + 2 * i..5 + 2 * i])?;
    }
    let mut span_id = [0; 8];
    for (i, byte) in span_id.iter_mut().enumerate() {
        *byte = hex_byte(&value[36 + 2 * i..38 + 2 * i])?;
    }
    let flags = hex_byte(&value[53..55])?;
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some(Parent {
        trace_id,
        span_id,
        flags,
    })
}

/// `00-TRACE-SPAN-FLAGS`: the value trafik sends on, naming its own span.
pub fn traceparent(trace_id: &[u8; 16], span_id: &[u8; 8], flags: u8) -> String {
    format!("00-{}-{}-{:02x}", hex(trace_id), hex(span_id), flags)
}

/// Whether the `tracestate` values (all of them, joined) form a valid list: at most 32
/// members of `key=value`, keys of lower-case letters, digits and `_-*/` with an optional
/// `@vendor`, values of printable ASCII without `,` or `=` and no trailing space. Empty members
/// are allowed. A list that is not valid is not passed on.
pub fn valid_tracestate<'a>(values: impl Iterator<Item = &'a [u8]>) -> bool {
    let mut members = 0;
    for value in values {
        let Ok(text) = std::str::from_utf8(value) else {
            return false;
        };
        for member in text.split(',') {
            let member = member.trim_matches([' ', '\t']);
            if member.is_empty() {
                continue;
            }
            members += 1;
            let Some((key, value)) = member.split_once('=') else {
                return false;
            };
            if !valid_key(key) || !valid_value(value) {
                return false;
            }
        }
    }
    members <= 32
}

fn valid_key(key: &str) -> bool {
    let (tenant, vendor) = match key.split_once('@') {
        Some((tenant, vendor)) => (tenant, Some(vendor)),
        None => (key, None),
    };
    let part = |text: &str, most: usize| {
        let allowed = |c: char| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-' | '*' | '/')
        };
        !text.is_empty() && text.len() <= most && text.chars().all(allowed)
    };
    match vendor {
        None => key.starts_with(|c: char| c.is_ascii_lowercase()) && part(key, 256),
        Some(vendor) => {
            part(tenant, 241)
                && part(vendor, 14)
                && vendor.starts_with(|c: char| c.is_ascii_lowercase())
        }
    }
}

fn valid_value(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 256
        && !value.ends_with(' ')
        && value
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
}

fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    Some(digit(pair[0])? << 4 | digit(pair[1])?)
}

/// Lower-case hex, as Trace Context and OTLP/JSON write ids.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_specifications_example_is_read_and_written_back() {
        let parent = parse_traceparent(GOOD.as_bytes()).unwrap();
        assert!(parent.sampled());
        assert_eq!(hex(&parent.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            traceparent(&parent.trace_id, &parent.span_id, parent.flags),
            GOOD
        );
    }

    #[test]
    fn malformed_values_are_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse_traceparent(bad.as_bytes()), None, "{bad}");
        }
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert!(parse_traceparent(later.as_bytes()).is_some());
    }

    #[test]
    fn tracestate_lists_are_checked() {
        let valid = |values: &[&str]| valid_tracestate(values.iter().map(|v| v.as_bytes()));
        assert!(valid(&["rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"]));
        assert!(valid(&["rojo=1", "tenant@vendor=x y"]));
        assert!(valid(&[""]));
        assert!(!valid(&["Rojo=1"]));
        assert!(!valid(&["rojo"]));
        assert!(!valid(&["rojo=a=b"]));
        let many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        assert!(!valid(&[many.join(",").as_str()]));
    }
}
