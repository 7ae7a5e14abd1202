//! Request paths in one canonical form before routes see them, so a route cannot be reached
//! (or bypassed) by spelling its path another way: `/public/../admin`, `/admin//x` and
//! `/%61dmin` are all `/admin…` here, and the backend receives the same form.

/// The normalized form of `path`, or `None` when it is already normal (the common case, which
/// costs one scan and no allocation).
///
/// Percent-escapes of unreserved characters (RFC 3986 §2.3) are decoded, other escapes keep
/// their bytes with upper-case hex, runs of `/` become one, and `.`/`..` segments are removed
/// (§5.2.4; `..` never climbs above the root).
pub fn normalize(path: &str) -> Option<String> {
    if is_plain(path.as_bytes()) {
        return None;
    }
    let decoded = decode_unreserved(path);
    let mut segments: Vec<&str> = Vec::new();
    let ends_open = decoded.ends_with('/')
        || decoded.ends_with("/.")
        || decoded.ends_with("/..")
        || decoded == "."
        || decoded == "..";
    for segment in decoded.split('/') {
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
    (normal != path).then_some(normal)
}

/// True when `path` starts with `/` and has no `%`, `//` or `/.`: nothing to normalize. One
/// pass, since every request goes through it.
fn is_plain(path: &[u8]) -> bool {
    if path.first() != Some(&b'/') {
        return false;
    }
    let mut after_slash = false;
    for &byte in path {
        match byte {
            b'%' => return false,
            b'/' | b'.' if after_slash => return false,
            _ => {}
        }
        after_slash = byte == b'/';
    }
    true
}

fn decode_unreserved(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = bytes.get(i + 1..i + 3)
            && let Ok(hex) = std::str::from_utf8(hex)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
                out.push(byte as char);
            } else {
                out.push('%');
                out.push_str(&hex.to_ascii_uppercase());
            }
            i += 3;
            continue;
        }
        // Not an escape: copy the character as it is (paths from hyper are ASCII, but a
        // multi-byte character must not be split).
        let width = path[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&path[i..i + width]);
        i += width;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::normalize;

    fn normal(path: &str) -> String {
        normalize(path).unwrap_or_else(|| path.to_owned())
    }

    #[test]
    fn ordinary_paths_are_left_alone_without_allocating() {
        for path in ["/", "/takip/TR-1", "/a.b/c", "/a/b/", "/x..y/z"] {
            assert_eq!(normalize(path), None, "{path}");
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
    fn reserved_escapes_stay_escaped_with_upper_case_hex() {
        assert_eq!(normal("/a%2fb"), "/a%2Fb");
        assert_eq!(normal("/a%20b"), "/a%20b");
        assert_eq!(normal("/bad%zz"), "/bad%zz");
        assert_eq!(normal("/cut%2"), "/cut%2");
    }

    #[test]
    fn duplicate_slashes_collapse() {
        assert_eq!(normal("//admin//x"), "/admin/x");
        assert_eq!(normal("///"), "/");
    }
}
