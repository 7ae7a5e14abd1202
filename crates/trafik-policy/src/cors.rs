//! Cross-origin resource sharing at the edge (the Fetch standard's CORS protocol): which
//! origins may read a route's answers, and whether a preflight's method and headers are allowed.
//! The data plane writes the `Access-Control-*` headers from these verdicts.

/// The origins a route lets read its answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origins {
    /// `scheme://host[:port]`, lowercase.
    exact: Vec<String>,
    /// `https://*.a.test` kept as (`https://`, `.a.test`): any subdomain of `a.test`, at any
    /// depth, but not `a.test` itself.
    subdomains: Vec<(String, String)>,
    /// `*`: any origin (never with credentials).
    any: bool,
}

impl Origins {
    /// Reads a configured list: exact origins, `scheme://*.domain[:port]` patterns, or `*`.
    pub fn parse(list: &[String]) -> Result<Origins, String> {
        let mut origins = Origins {
            exact: Vec::new(),
            subdomains: Vec::new(),
            any: false,
        };
        for origin in list {
            if origin == "*" {
                origins.any = true;
                continue;
            }
            let lower = origin.to_ascii_lowercase();
            let (scheme, rest) = lower.split_once("://").ok_or_else(|| {
                format!("expected an origin such as \"https://a.test\" or \"https://*.a.test\", found {origin:?}")
            })?;
            if scheme.is_empty()
                || !scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
            {
                return Err(format!("{origin:?} has no valid scheme"));
            }
            let (host, wildcard) = match rest.strip_prefix("*.") {
                Some(host) => (host, true),
                None => (rest, false),
            };
            if !valid_host_port(host) {
                return Err(format!(
                    "{origin:?} is not scheme://host[:port] (no path, no trailing slash; a wildcard only as the first label, as in https://*.a.test)"
                ));
            }
            match wildcard {
                true => origins
                    .subdomains
                    .push((format!("{scheme}://"), format!(".{host}"))),
                false => origins.exact.push(lower),
            }
        }
        Ok(origins)
    }

    /// The origins as configured (lowercase), for the plan `trafik check` prints.
    pub fn patterns(&self) -> Vec<String> {
        let subdomains = self
            .subdomains
            .iter()
            .map(|(scheme, suffix)| format!("{scheme}*{suffix}"));
        let any = self.any.then(|| "*".to_owned());
        self.exact
            .iter()
            .cloned()
            .chain(subdomains)
            .chain(any)
            .collect()
    }

    /// Whether every origin is allowed (`*`).
    pub fn any(&self) -> bool {
        self.any
    }

    /// Whether `origin` (the request's `Origin`) may read the answers.
    pub fn allows(&self, origin: &str) -> bool {
        if self.any {
            return true;
        }
        if self.exact.iter().any(|o| o.eq_ignore_ascii_case(origin)) {
            return true;
        }
        self.subdomains.iter().any(|(scheme, suffix)| {
            let lower = origin.to_ascii_lowercase();
            lower
                .strip_prefix(scheme.as_str())
                .and_then(|rest| rest.strip_suffix(suffix.as_str()))
                .is_some_and(|sub| !sub.is_empty() && sub.split('.').all(valid_label))
        })
    }
}

/// `host` or `host:port`: DNS labels (or an IPv4 address) and an optional port.
fn valid_host_port(text: &str) -> bool {
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (text, None),
    };
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    port_ok && !host.is_empty() && host.split('.').all(valid_label)
}

fn valid_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// Whether the comma-separated `requested` headers (`Access-Control-Request-Headers`) are all
/// in `allowed` (lowercase names; `*` allows any); the first refused one otherwise.
pub fn refused_header<'a>(requested: &'a str, allowed: &[String]) -> Option<&'a str> {
    if allowed.iter().any(|a| a == "*") {
        return None;
    }
    requested
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .find(|name| !allowed.iter().any(|a| a.eq_ignore_ascii_case(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(list: &[&str]) -> Origins {
        Origins::parse(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn exact_origins_and_wildcard_subdomains() {
        let allowed = origins(&[
            "https://a.test",
            "https://*.b.test",
            "http://127.0.0.1:8080",
        ]);
        assert!(allowed.allows("https://a.test"));
        assert!(allowed.allows("HTTPS://A.TEST"));
        assert!(!allowed.allows("http://a.test"));
        assert!(!allowed.allows("https://a.test:8443"));
        assert!(!allowed.allows("https://x.a.test"));
        assert!(allowed.allows("https://x.b.test"));
        assert!(allowed.allows("https://y.x.b.test"));
        assert!(!allowed.allows("https://b.test"));
        assert!(!allowed.allows("https://xb.test"));
        assert!(!allowed.allows("https://.b.test"));
        assert!(!allowed.allows("https://evil.test/.b.test"));
        assert!(!allowed.allows("https://x.b.test:444"));
        assert!(!allowed.allows("null"));
        assert!(allowed.allows("http://127.0.0.1:8080"));
        assert!(!allowed.any());
        assert_eq!(
            allowed.patterns(),
            [
                "https://a.test",
                "http://127.0.0.1:8080",
                "https://*.b.test"
            ]
        );
        assert!(origins(&["*"]).allows("https://anything.test"));
    }

    #[test]
    fn malformed_origins_are_refused() {
        for bad in [
            "a.test",
            "https://a.test/",
            "https://a.test/path",
            "https://a.*.test",
            "https://*",
            "https://a.test:",
            "https://a.test:80a",
            "://a.test",
        ] {
            assert!(Origins::parse(&[bad.to_owned()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn requested_headers_must_all_be_allowed() {
        let allowed = ["content-type".to_owned(), "x-takip".to_owned()];
        assert_eq!(refused_header("Content-Type, X-Takip", &allowed), None);
        assert_eq!(refused_header("", &allowed), None);
        assert_eq!(
            refused_header("content-type,x-gizli", &allowed),
            Some("x-gizli")
        );
        assert_eq!(refused_header("x-gizli", &["*".to_owned()]), None);
    }
}
