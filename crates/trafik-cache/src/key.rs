//! The cache key: host, path and query (the method only decides whether a request is cached at
//! all: GET and HEAD share one entry), and, for answers with `Vary`, the request's values of
//! the headers named.

use http::header::HeaderName;

use crate::fields::{FieldValues, visible};

/// Separates the host from the path in a key, and the variant from the URI.
const HOST_END: char = '\n';
const VARIANT: char = '\0';

/// `host` (lowercase, no port; empty when the route does not tell hosts apart) and the path
/// with its query.
pub fn primary(host: &str, path_and_query: &str) -> String {
    let mut key = String::with_capacity(host.len() + path_and_query.len() + 1);
    key.extend(host.chars().map(|c| c.to_ascii_lowercase()));
    key.push(HOST_END);
    key.push_str(path_and_query);
    key
}

/// The key of the variant of `primary` that a request with these headers selects.
pub fn variant<F: FieldValues + ?Sized>(
    primary: &str,
    names: &[HeaderName],
    request: &F,
) -> String {
    let mut key = String::from(primary);
    for name in names {
        key.push(VARIANT);
        key.push_str(name.as_str());
        key.push('=');
        let mut values: Vec<&str> = Vec::new();
        request.each_value(name, &mut |value| values.extend(visible(value)));
        // Whitespace around list members does not make another variant (RFC 9111 §4.1).
        let joined = values.join(",");
        let normal: Vec<&str> = joined.split(',').map(str::trim).collect();
        key.push_str(&normal.join(","));
    }
    key
}

/// Whether `key` is `primary` itself or one of its `Vary` variants.
pub fn of_primary(key: &str, primary: &str) -> bool {
    key.strip_prefix(primary)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(VARIANT))
}

/// The path of a key, without host, query or variant.
pub fn path(key: &str) -> &str {
    let uri = key.split_once(HOST_END).map_or(key, |(_, uri)| uri);
    let uri = uri.split(VARIANT).next().unwrap_or(uri);
    uri.split('?').next().unwrap_or(uri)
}

/// Whether a purge of `prefix` reaches this key's path: equal, or continuing at a `/`.
pub fn under(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    #[test]
    fn keys_separate_hosts_and_queries_and_paths_come_back() {
        let a = primary("Kenar.Example", "/takip/1?x=1");
        assert_eq!(a, primary("kenar.example", "/takip/1?x=1"));
        assert_ne!(a, primary("kenar.example", "/takip/1?x=2"));
        assert_ne!(a, primary("other", "/takip/1?x=1"));
        assert_eq!(path(&a), "/takip/1");
        let mut headers = HeaderMap::new();
        headers.insert("accept-language", HeaderValue::from_static("tr, en"));
        let names = [HeaderName::from_static("accept-language")];
        let tr = variant(&a, &names, &headers);
        assert_eq!(path(&tr), "/takip/1");
        headers.insert("accept-language", HeaderValue::from_static("tr,en"));
        assert_eq!(tr, variant(&a, &names, &headers));
        headers.insert("accept-language", HeaderValue::from_static("en"));
        assert_ne!(tr, variant(&a, &names, &headers));
        assert!(of_primary(&a, &a) && of_primary(&tr, &a));
        let longer = primary("kenar.example", "/takip/1?x=10");
        assert!(!of_primary(&longer, &a));
    }

    #[test]
    fn purge_prefixes_stop_at_segments() {
        assert!(under("/takip/1", "/takip/"));
        assert!(under("/takip/1", "/takip"));
        assert!(under("/takip", "/takip"));
        assert!(!under("/takipx", "/takip"));
        assert!(under("/anything", "/"));
    }
}
