//! The server names a TLS passthrough route takes.

use std::fmt;
use std::str::FromStr;

/// The server names one passthrough route takes, written `kargo.example` or `*.kargo.example`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerNamePattern {
    /// This name only (stored in lower case).
    Exact(String),
    /// Every name under this domain, at any depth: `*.kargo.example` takes `a.kargo.example`
    /// and `a.b.kargo.example`, not `kargo.example` itself.
    Subdomains(String),
}

impl ServerNamePattern {
    /// Returns true if and only if `name` (in lower case, as the ClientHello reader gives it) is taken.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            ServerNamePattern::Exact(exact) => name == exact,
            ServerNamePattern::Subdomains(domain) => name
                .strip_suffix(domain.as_str())
                .and_then(|head| head.strip_suffix('.'))
                .is_some_and(|head| !head.is_empty()),
        }
    }
}

impl FromStr for ServerNamePattern {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let expected = || {
            format!(
                "expected a server name such as \"kargo.example\" or \"*.kargo.example\", found {text:?}"
            )
        };
        let lower = text.to_ascii_lowercase();
        let (pattern, name) = match lower.strip_prefix("*.") {
            Some(domain) => (ServerNamePattern::Subdomains(domain.to_owned()), domain),
            None => (ServerNamePattern::Exact(lower.clone()), lower.as_str()),
        };
        let labels_valid = name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
        if !labels_valid || name.len() > 253 {
            return Err(expected());
        }
        Ok(pattern)
    }
}

impl fmt::Display for ServerNamePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerNamePattern::Exact(name) => f.write_str(name),
            ServerNamePattern::Subdomains(domain) => write!(f, "*.{domain}"),
        }
    }
}
