//! Request paths in one canonical form before routes see them, so a route cannot be reached
//! (or bypassed) by spelling its path another way: `/public/../admin`, `/admin//x` and
//! `/%61dmin` are all `/admin…` here, and the backend receives the same form.

use percent_encoding::{percent_decode_str, percent_encode_byte};

/// A path trafik refuses (400): a spelling that some backends resolve across a segment
/// boundary it cannot see — an encoded `/` or `\`, a backslash, or a dot segment carrying
/// `;` parameters (`..;/`, which Java servers read as `..`) — or a malformed escape, which
/// backends read each their own way.
#[derive(Debug, PartialEq, Eq)]
pub struct Ambiguous;

/// The normalized form of an origin-form `path`, or `None` when it is already normal (the
/// common case, which costs one scan and no allocation). Targets that are not paths (`*`, an
/// authority) are left alone.
///
/// Percent-escapes of unreserved characters (RFC 3986 §2.3) are decoded, other escapes keep
/// their bytes with upper-case hex, runs of `/` become one, and `.`/`..` segments are removed
/// (§5.2.4; `..` never climbs above the root).
pub fn normalize(path: &str) -> Result<Option<String>, Ambiguous> {
    if !path.starts_with('/') || is_plain(path.as_bytes()) {
        return Ok(None);
    }
    if !escapes_are_well_formed(path.as_bytes()) {
        return Err(Ambiguous);
    }
    let decoded = decode_unreserved(path);
    let upper = decoded.to_ascii_uppercase();
    if decoded.contains('\\') || upper.contains("%2F") || upper.contains("%5C") {
        return Err(Ambiguous);
    }
    let mut segments: Vec<&str> = Vec::new();
    let ends_open = decoded.ends_with('/')
        || decoded.ends_with("/.")
        || decoded.ends_with("/..")
        || decoded == "."
        || decoded == "..";
    for segment in decoded.split('/') {
        if segment.starts_with(".;") || segment.starts_with("..;") {
            return Err(Ambiguous);
        }
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            other => segments.push(other),
        }
    }
    let mut normal = String::with_capacity(decoded.len() + 1);
    for segment in &segments {
        normal.push('/');
        normal.push_str(segment);
    }
    if segments.is_empty() || ends_open {
        normal.push('/');
    }
    Ok((normal != path).then_some(normal))
}

/// True when `path` has no `%`, `\\`, `//` or `/.`: nothing to normalize or refuse. One pass,
/// since every request goes through it.
fn is_plain(path: &[u8]) -> bool {
    let mut after_slash = false;
    for &byte in path {
        match byte {
            b'%' | b'\\' => return false,
            b'/' | b'.' if after_slash => return false,
            _ => {}
        }
        after_slash = byte == b'/';
    }
    true
}

/// Whether every `%` in `text` starts an escape of two hex digits. The `percent-encoding`
/// decoder passes anything else through unchanged, so each caller that must not guess at a
/// malformed escape (`%zz`, a cut `%4`, or `%+f`, which `u8::from_str_radix` reads as 0x0f)
/// checks with this first.
pub fn escapes_are_well_formed(text: &[u8]) -> bool {
    let mut rest = text;
    while let Some(at) = rest.iter().position(|&byte| byte == b'%') {
        match rest.get(at + 1..at + 3) {
            Some([high, low]) if high.is_ascii_hexdigit() && low.is_ascii_hexdigit() => {
                rest = &rest[at + 3..];
            }
            _ => return false,
        }
    }
    true
}

/// `path` with escapes of unreserved characters decoded and the others in upper-case hex;
/// its escapes are well formed.
fn decode_unreserved(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let (escape, after) = rest[at..].split_at(3);
        let byte = percent_decode_str(escape)
            .next()
            .expect("normalize let only escapes of two hex digits through");
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(percent_encode_byte(byte));
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::{Ambiguous, normalize};

    fn normal(path: &str) -> String {
        normalize(path).unwrap().unwrap_or_else(|| path.to_owned())
    }

    #[test]
    fn ordinary_paths_are_left_alone_without_allocating() {
        for path in ["/", "/takip/TR-1", "/a.b/c", "/a/b/", "/x..y/z"] {
            assert_eq!(normalize(path), Ok(None), "{path}");
        }
    }

    #[test]
    fn dot_segments_cannot_climb_out_of_a_prefix() {
        assert_eq!(normal("/public/../admin"), "/admin");
        assert_eq!(normal("/public/./a"), "/public/a");
        assert_eq!(normal("/../../etc/passwd"), "/etc/passwd");
        assert_eq!(normal("/a/b/.."), "/a/");
        assert_eq!(normal("/a/."), "/a/");
    }

    #[test]
    fn escaped_dots_and_letters_are_decoded_before_dot_segments_go() {
        assert_eq!(normal("/public/%2e%2E/admin"), "/admin");
        assert_eq!(normal("/%61dmin"), "/admin");
        assert_eq!(normal("/a%7eb"), "/a~b");
    }

    #[test]
    fn spellings_a_backend_may_resolve_across_segments_are_refused() {
        for path in [
            "/public/..;/admin",
            "/public/.;/admin",
            "/public/%2e%2e%2fadmin",
            "/public/..%5cadmin",
            "/public\\..\\admin",
            "/a%2fb",
        ] {
            assert_eq!(normalize(path), Err(Ambiguous), "{path}");
        }
    }

    #[test]
    fn targets_that_are_not_paths_are_left_alone() {
        assert_eq!(normalize("*"), Ok(None));
        assert_eq!(normalize(""), Ok(None));
    }

    #[test]
    fn reserved_escapes_stay_escaped_with_upper_case_hex() {
        assert_eq!(normal("/a%3bb"), "/a%3Bb");
        assert_eq!(normal("/a%20b"), "/a%20b");
    }

    #[test]
    fn malformed_escapes_are_refused_not_guessed_at() {
        for path in [
            // `u8::from_str_radix` reads a sign: `%+f` is not the byte 0x0f.
            "/%+f",
            "/a%-1b",
            "/bad%zz",
            "/cut%2",
            "/cut%",
            // A stray `%` before escapes of hex digits would become a new escape (`%2e`) once
            // they are decoded, for the backend to decode into `..`.
            "/public/%%32%65%%32%65/admin",
        ] {
            assert_eq!(normalize(path), Err(Ambiguous), "{path}");
        }
    }

    #[test]
    fn duplicate_slashes_collapse() {
        assert_eq!(normal("//admin//x"), "/admin/x");
        assert_eq!(normal("///"), "/");
    }
}
