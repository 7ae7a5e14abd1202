//! `Cache-Control` directives (RFC 9111 §5.2), as far as a shared cache acts on them.

use std::time::Duration;

use http::header::CACHE_CONTROL;

use crate::fields::{FieldValues, visible};

/// The directives of every `Cache-Control` field of a message, merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheControl {
    pub max_age: Option<Duration>,
    pub s_maxage: Option<Duration>,
    pub no_store: bool,
    /// Unqualified `no-cache`: a stored copy must be revalidated before every use.
    pub no_cache: bool,
    /// `private`: for one user's cache only; a shared cache does not store it.
    pub private: bool,
    pub public: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    /// RFC 5861: how long after going stale a copy may be served while it is refreshed.
    pub stale_while_revalidate: Option<Duration>,
    /// RFC 5861: how long after going stale a copy may be served when the origin fails.
    pub stale_if_error: Option<Duration>,
    /// A request's `only-if-cached`.
    pub only_if_cached: bool,
}

impl CacheControl {
    pub fn parse<F: FieldValues + ?Sized>(fields: &F) -> CacheControl {
        let mut control = CacheControl::default();
        fields.each_value(&CACHE_CONTROL, &mut |value| {
            let Some(text) = visible(value) else { return };
            for directive in split_directives(text) {
                let (name, argument) = match directive.split_once('=') {
                    Some((name, argument)) => {
                        (name.trim(), Some(argument.trim().trim_matches('"')))
                    }
                    None => (directive.trim(), None),
                };
                let seconds = || argument.and_then(delta_seconds);
                match name.to_ascii_lowercase().as_str() {
                    "max-age" => control.max_age = seconds().or(control.max_age),
                    "s-maxage" => control.s_maxage = seconds().or(control.s_maxage),
                    "no-store" => control.no_store = true,
                    // `no-cache="field"` only forbids sending that field unvalidated; trafik
                    // treats it like the plain form, which is stricter.
                    "no-cache" => control.no_cache = true,
                    // `private="field"` likewise: not stored at all by this shared cache.
                    "private" => control.private = true,
                    "public" => control.public = true,
                    "must-revalidate" => control.must_revalidate = true,
                    "proxy-revalidate" => control.proxy_revalidate = true,
                    "stale-while-revalidate" => control.stale_while_revalidate = seconds(),
                    "stale-if-error" => control.stale_if_error = seconds(),
                    "only-if-cached" => control.only_if_cached = true,
                    _ => {}
                }
            }
        });
        control
    }

    /// Whether a stale copy must not be served without the origin's word (§4.2.4).
    pub fn forbids_stale(&self) -> bool {
        self.must_revalidate || self.proxy_revalidate || self.no_cache || self.s_maxage.is_some()
    }
}

/// Splits at commas outside quoted strings.
fn split_directives(text: &str) -> impl Iterator<Item = &str> {
    let mut quoted = false;
    let mut start = 0;
    let mut parts = Vec::new();
    for (index, byte) in text.bytes().enumerate() {
        match byte {
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                parts.push(&text[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty())
}

/// `delta-seconds` (§1.2.2): digits; too large a value means "very long", not an error.
fn delta_seconds(text: &str) -> Option<Duration> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Duration::from_secs(
        text.parse().unwrap_or(u64::from(u32::MAX)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    fn parse(values: &[&str]) -> CacheControl {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(CACHE_CONTROL, HeaderValue::from_str(value).unwrap());
        }
        CacheControl::parse(&headers)
    }

    #[test]
    fn directives_are_read_across_fields_and_quotes() {
        let control = parse(&[
            "public, max-age=60",
            "s-maxage=\"120\", no-cache=\"set-cookie, x\"",
        ]);
        assert_eq!(control.max_age, Some(Duration::from_secs(60)));
        assert_eq!(control.s_maxage, Some(Duration::from_secs(120)));
        assert!(control.public && control.no_cache && !control.no_store);
    }

    #[test]
    fn bad_and_huge_ages() {
        assert_eq!(parse(&["max-age=-1"]).max_age, None);
        assert_eq!(parse(&["max-age=1x"]).max_age, None);
        assert_eq!(
            parse(&["max-age=99999999999999999999999"]).max_age,
            Some(Duration::from_secs(u64::from(u32::MAX)))
        );
        let swr = parse(&["max-age=1, stale-while-revalidate=30, stale-if-error=600"]);
        assert_eq!(swr.stale_while_revalidate, Some(Duration::from_secs(30)));
        assert_eq!(swr.stale_if_error, Some(Duration::from_secs(600)));
    }
}
