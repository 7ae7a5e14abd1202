//! Conditional requests (RFC 9110 §13) answered from what trafik holds itself: a cached copy or
//! a static file.

use std::time::SystemTime;

use http::{HeaderValue, header};
use trafik_cache::fields::visible;

use super::filter::{Fields, field_text};

/// Whether a GET or HEAD with these headers gets 304 for a representation with this `ETag`
/// and modification time: `If-None-Match` decides when present (weak comparison), else
/// `If-Modified-Since`.
pub fn not_modified(
    request: &dyn Fields,
    etag: Option<&HeaderValue>,
    modified: Option<SystemTime>,
) -> bool {
    if let Some(wanted) = request.get(&header::IF_NONE_MATCH) {
        let Some(etag) = etag.and_then(|e| e.to_str().ok()) else {
            return false;
        };
        let wanted = visible(wanted).unwrap_or("");
        return wanted.trim() == "*"
            || wanted
                .split(',')
                .any(|candidate| weak_equal(candidate.trim(), etag));
    }
    let since = field_text(request, &header::IF_MODIFIED_SINCE)
        .and_then(|date| httpdate::parse_http_date(date).ok());
    match (since, modified) {
        // HTTP dates have whole seconds: a file modified within the second it names is not
        // newer than it.
        (Some(since), Some(modified)) => whole_seconds(modified) <= whole_seconds(since),
        _ => false,
    }
}

/// Whether `If-Range` allows a partial answer: it must name this exact strong `ETag`, or the
/// exact `Last-Modified` date.
pub fn range_applies(request: &dyn Fields, etag: Option<&HeaderValue>, modified: &str) -> bool {
    match field_text(request, &header::IF_RANGE) {
        None => true,
        Some(condition) if condition.starts_with('"') => {
            etag.is_some_and(|etag| etag.as_bytes() == condition.as_bytes())
        }
        Some(condition) => condition == modified,
    }
}

fn whole_seconds(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn weak_equal(a: &str, b: &str) -> bool {
    a.trim_start_matches("W/") == b.trim_start_matches("W/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;
    use std::time::Duration;

    #[test]
    fn etags_decide_before_dates() {
        let etag = HeaderValue::from_static("\"v1\"");
        let modified = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut request = HeaderMap::new();
        request.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_static("\"x\", W/\"v1\""),
        );
        assert!(not_modified(&request, Some(&etag), Some(modified)));
        request.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"v2\""));
        let date = httpdate::fmt_http_date(modified);
        request.insert(
            header::IF_MODIFIED_SINCE,
            HeaderValue::from_str(&date).unwrap(),
        );
        assert!(!not_modified(&request, Some(&etag), Some(modified)));
        request.remove(header::IF_NONE_MATCH);
        assert!(not_modified(&request, Some(&etag), Some(modified)));
        assert!(!not_modified(
            &request,
            Some(&etag),
            Some(modified + Duration::from_secs(1))
        ));
    }
}
