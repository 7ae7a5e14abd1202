//! Whether a response may be stored (RFC 9111 §3), how long it stays fresh (§4.2.1), how old it
//! is (§4.2.3), what a stale copy may still be used for (§4.2.4, RFC 5861), and how a 304
//! refreshes it (§4.3.4).

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, Method, StatusCode};

use crate::control::CacheControl;
use crate::store::Weigh;

/// What a cache does with answers that do not say how long they stay fresh, and how long a
/// stale copy may still be served (unless the answer says otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// Freshness of answers without `max-age`, `s-maxage` or `Expires`.
    pub default_ttl: Duration,
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
}

/// Why a response was not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotStored {
    Method,
    Status,
    NoStore,
    Private,
    /// The request carried `Authorization` and the answer did not say `public` or `s-maxage`.
    Authorization,
    /// The answer sets a cookie and did not say `public` or `s-maxage`.
    SetCookie,
    /// `Vary: *`: no later request can be known to match.
    VaryAll,
    /// Neither fresh for any time nor revalidatable.
    NeverFresh,
}

impl NotStored {
    /// The `detail` written in `Cache-Status`.
    pub fn detail(self) -> &'static str {
        match self {
            NotStored::Method => "method",
            NotStored::Status => "status",
            NotStored::NoStore => "no-store",
            NotStored::Private => "private",
            NotStored::Authorization => "authorization",
            NotStored::SetCookie => "set-cookie",
            NotStored::VaryAll => "vary-all",
            NotStored::NeverFresh => "no-freshness",
        }
    }
}

/// Statuses a cache may store by default (RFC 9110 §15.1 "heuristically cacheable"); others
/// are passed on.
fn cacheable_status(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200 | 203 | 204 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Whether a shared cache may store this answer to this request (§3, §3.5).
pub fn storable(
    method: &Method,
    request: &HeaderMap,
    status: StatusCode,
    response: &HeaderMap,
) -> Result<CacheControl, NotStored> {
    if method != Method::GET && method != Method::HEAD {
        return Err(NotStored::Method);
    }
    if !cacheable_status(status) {
        return Err(NotStored::Status);
    }
    let asked = CacheControl::parse(request);
    let control = CacheControl::parse(response);
    if asked.no_store || control.no_store {
        return Err(NotStored::NoStore);
    }
    if control.private {
        return Err(NotStored::Private);
    }
    let vouched = control.public || control.s_maxage.is_some();
    if request.contains_key(header::AUTHORIZATION) && !vouched && !control.must_revalidate {
        return Err(NotStored::Authorization);
    }
    if response.contains_key(header::SET_COOKIE) && !vouched {
        return Err(NotStored::SetCookie);
    }
    if vary_names(response).is_none() {
        return Err(NotStored::VaryAll);
    }
    Ok(control)
}

/// The header names a response varies on; `None` for `Vary: *`.
pub fn vary_names(response: &HeaderMap) -> Option<Vec<HeaderName>> {
    let mut names = Vec::new();
    for value in response.get_all(header::VARY) {
        for name in value.to_str().unwrap_or("*").split(',') {
            let name = name.trim();
            if name == "*" {
                return None;
            }
            if let Ok(name) = HeaderName::from_bytes(name.as_bytes())
                && !names.contains(&name)
            {
                names.push(name);
            }
        }
    }
    names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    Some(names)
}

/// A stored response and what its freshness is computed from.
#[derive(Clone, Debug)]
pub struct Stored {
    pub status: StatusCode,
    /// The origin's headers without `Age` and `Set-Cookie` (a stored answer is everyone's).
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Increases with every object the cache stores (fetched, refreshed or pushed).
    pub version: u64,
    /// When it arrived (the response_time of §4.2.3).
    pub received: SystemTime,
    /// Its age when it arrived (corrected_initial_age).
    pub initial_age: Duration,
    pub lifetime: Duration,
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
    /// Every use needs the origin's word first (`no-cache`).
    pub always_revalidate: bool,
    /// A stale copy may not be served at all (`must-revalidate`, `s-maxage`...).
    pub forbids_stale: bool,
}

/// What a stored copy may be used for now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// Served as it is; `ttl` is what is left of its freshness.
    Fresh { ttl: Duration },
    /// Stale by `by`; may be served while it is refreshed in the background.
    StaleWhileRevalidate { by: Duration },
    /// Must be revalidated (or fetched again) before it is served; `if_error` says whether it
    /// may still be served if the origin fails.
    Revalidate { by: Duration, if_error: bool },
}

impl Weigh for Stored {
    fn bytes(&self) -> u64 {
        let headers: usize = self
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum();
        (self.body.len() + headers) as u64
    }
}

impl Stored {
    /// Builds the stored copy of an answer received at `received` to a request sent at `sent`.
    /// `control` is what [`storable`] returned.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        status: StatusCode,
        mut headers: HeaderMap,
        body: Bytes,
        control: &CacheControl,
        rules: &Rules,
        sent: SystemTime,
        received: SystemTime,
        version: u64,
    ) -> Result<Stored, NotStored> {
        let initial_age = initial_age(&headers, sent, received);
        let lifetime = lifetime(control, &headers, rules);
        let validatable =
            headers.contains_key(header::ETAG) || headers.contains_key(header::LAST_MODIFIED);
        if lifetime.is_zero() && !validatable {
            return Err(NotStored::NeverFresh);
        }
        headers.remove(header::AGE);
        headers.remove(header::SET_COOKIE);
        Ok(Stored {
            status,
            headers,
            body,
            version,
            received,
            initial_age,
            lifetime,
            stale_while_revalidate: control
                .stale_while_revalidate
                .unwrap_or(rules.stale_while_revalidate),
            stale_if_error: control.stale_if_error.unwrap_or(rules.stale_if_error),
            always_revalidate: control.no_cache,
            forbids_stale: control.forbids_stale(),
        })
    }

    /// `current_age` (§4.2.3).
    pub fn age(&self, now: SystemTime) -> Duration {
        // Saturating: an origin's `Age` may say any number of seconds.
        self.initial_age
            .saturating_add(now.duration_since(self.received).unwrap_or_default())
    }

    pub fn usable(&self, now: SystemTime) -> Use {
        let age = self.age(now);
        if age < self.lifetime && !self.always_revalidate {
            return Use::Fresh {
                ttl: self.lifetime - age,
            };
        }
        let by = age.saturating_sub(self.lifetime);
        if self.forbids_stale {
            return Use::Revalidate {
                by,
                if_error: false,
            };
        }
        if !self.always_revalidate && by < self.stale_while_revalidate {
            return Use::StaleWhileRevalidate { by };
        }
        Use::Revalidate {
            by,
            if_error: by < self.stale_if_error,
        }
    }

    pub fn etag(&self) -> Option<&HeaderValue> {
        self.headers.get(header::ETAG)
    }

    pub fn last_modified(&self) -> Option<&HeaderValue> {
        self.headers.get(header::LAST_MODIFIED)
    }

    /// The copy a 304 makes of this one (§4.3.4): the 304's headers replace the stored ones of
    /// the same name, and freshness starts again from the 304.
    #[allow(clippy::too_many_arguments)]
    pub fn refreshed(
        &self,
        not_modified: &HeaderMap,
        rules: &Rules,
        sent: SystemTime,
        received: SystemTime,
        version: u64,
    ) -> Stored {
        let mut headers = self.headers.clone();
        for name in not_modified.keys() {
            if *name == header::CONTENT_LENGTH || *name == header::TRANSFER_ENCODING {
                continue;
            }
            headers.remove(name);
            for value in not_modified.get_all(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        let control = CacheControl::parse(&headers);
        Stored::new(
            self.status,
            headers,
            self.body.clone(),
            &control,
            rules,
            sent,
            received,
            version,
        )
        .unwrap_or_else(|_| Stored {
            version,
            received,
            ..self.clone()
        })
    }
}

/// The freshness lifetime (§4.2.1): `s-maxage`, `max-age`, `Expires` − `Date`, else the
/// cache's default.
pub fn lifetime(control: &CacheControl, headers: &HeaderMap, rules: &Rules) -> Duration {
    if let Some(age) = control.s_maxage.or(control.max_age) {
        return age;
    }
    if let Some(expires) = headers.get(header::EXPIRES) {
        // An invalid Expires (such as "0") means already expired (§5.3).
        let Some(expires) = http_date(expires) else {
            return Duration::ZERO;
        };
        let date = headers
            .get(header::DATE)
            .and_then(http_date)
            .unwrap_or(expires);
        return expires.duration_since(date).unwrap_or_default();
    }
    rules.default_ttl
}

/// corrected_initial_age (§4.2.3) from `Age`, `Date` and the request's round trip.
pub fn initial_age(headers: &HeaderMap, sent: SystemTime, received: SystemTime) -> Duration {
    let apparent = headers
        .get(header::DATE)
        .and_then(http_date)
        .and_then(|date| received.duration_since(date).ok())
        .unwrap_or_default();
    let delay = received.duration_since(sent).unwrap_or_default();
    let stated = headers
        .get(header::AGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or_default();
    apparent.max(stated.saturating_add(delay))
}

pub fn http_date(value: &HeaderValue) -> Option<SystemTime> {
    httpdate::parse_http_date(value.to_str().ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules {
        default_ttl: Duration::from_secs(10),
        stale_while_revalidate: Duration::from_secs(5),
        stale_if_error: Duration::from_secs(60),
    };

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn store(response: &[(&str, &str)], at: SystemTime) -> Result<Stored, NotStored> {
        let response = headers(response);
        let control = storable(&Method::GET, &HeaderMap::new(), StatusCode::OK, &response)?;
        Stored::new(
            StatusCode::OK,
            response,
            Bytes::new(),
            &control,
            &RULES,
            at,
            at,
            1,
        )
    }

    #[test]
    fn what_a_shared_cache_refuses() {
        let plain = HeaderMap::new();
        let ok = StatusCode::OK;
        let refuse = |method: Method, request: &HeaderMap, status, response: &[(&str, &str)]| {
            storable(&method, request, status, &headers(response)).err()
        };
        assert_eq!(
            refuse(Method::POST, &plain, ok, &[]),
            Some(NotStored::Method)
        );
        assert_eq!(
            refuse(Method::GET, &plain, StatusCode::INTERNAL_SERVER_ERROR, &[]),
            Some(NotStored::Status)
        );
        assert_eq!(
            refuse(Method::GET, &plain, ok, &[("cache-control", "no-store")]),
            Some(NotStored::NoStore)
        );
        assert_eq!(
            refuse(
                Method::GET,
                &headers(&[("cache-control", "no-store")]),
                ok,
                &[]
            ),
            Some(NotStored::NoStore)
        );
        assert_eq!(
            refuse(
                Method::GET,
                &plain,
                ok,
                &[("cache-control", "private, max-age=60")]
            ),
            Some(NotStored::Private)
        );
        let authorized = headers(&[("authorization", "Bearer x")]);
        assert_eq!(
            refuse(
                Method::GET,
                &authorized,
                ok,
                &[("cache-control", "max-age=60")]
            ),
            Some(NotStored::Authorization)
        );
        assert_eq!(
            refuse(
                Method::GET,
                &authorized,
                ok,
                &[("cache-control", "public, max-age=60")]
            ),
            None
        );
        assert_eq!(
            refuse(Method::GET, &plain, ok, &[("set-cookie", "a=1")]),
            Some(NotStored::SetCookie)
        );
        assert_eq!(
            refuse(
                Method::GET,
                &plain,
                ok,
                &[("set-cookie", "a=1"), ("cache-control", "s-maxage=5")]
            ),
            None
        );
        assert_eq!(
            refuse(Method::GET, &plain, ok, &[("vary", "accept, *")]),
            Some(NotStored::VaryAll)
        );
    }

    #[test]
    fn lifetime_comes_from_s_maxage_then_max_age_then_expires_then_the_default() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let date = httpdate::fmt_http_date(at);
        let expires = httpdate::fmt_http_date(at + Duration::from_secs(30));
        let of = |pairs: &[(&str, &str)]| store(pairs, at).unwrap().lifetime.as_secs();
        assert_eq!(of(&[("cache-control", "max-age=20, s-maxage=40")]), 40);
        assert_eq!(
            of(&[("cache-control", "max-age=20"), ("expires", &expires)]),
            20
        );
        assert_eq!(of(&[("date", &date), ("expires", &expires)]), 30);
        assert_eq!(of(&[]), 10);
        assert_eq!(
            store(&[("expires", "0")], at).err(),
            Some(NotStored::NeverFresh),
            "an invalid Expires is already stale, and nothing can revalidate it"
        );
        assert_eq!(of(&[("expires", "0"), ("etag", "\"a\"")]), 0);
    }

    #[test]
    fn age_counts_the_origin_age_and_the_time_stored() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let stored = store(&[("age", "4"), ("cache-control", "max-age=10")], at).unwrap();
        assert_eq!(stored.age(at + Duration::from_secs(3)).as_secs(), 7);
        assert_eq!(
            stored.usable(at + Duration::from_secs(3)),
            Use::Fresh {
                ttl: Duration::from_secs(3)
            }
        );
        assert!(!stored.headers.contains_key(header::AGE));
    }

    #[test]
    fn stale_copies_by_window() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let stored = store(&[("cache-control", "max-age=10")], at).unwrap();
        let after = |s| stored.usable(at + Duration::from_secs(s));
        assert!(matches!(after(9), Use::Fresh { .. }));
        assert!(matches!(after(12), Use::StaleWhileRevalidate { .. }));
        assert!(matches!(after(30), Use::Revalidate { if_error: true, .. }));
        assert!(matches!(
            after(100),
            Use::Revalidate {
                if_error: false,
                ..
            }
        ));
        let strict = store(&[("cache-control", "max-age=10, must-revalidate")], at).unwrap();
        assert!(matches!(
            strict.usable(at + Duration::from_secs(12)),
            Use::Revalidate {
                if_error: false,
                ..
            }
        ));
        let always = store(&[("cache-control", "no-cache"), ("etag", "\"v1\"")], at).unwrap();
        assert!(matches!(always.usable(at), Use::Revalidate { .. }));
        let own = store(&[("cache-control", "max-age=1, stale-if-error=5")], at).unwrap();
        assert!(matches!(
            own.usable(at + Duration::from_secs(20)),
            Use::Revalidate {
                if_error: false,
                ..
            }
        ));
    }

    #[test]
    fn a_304_refreshes_headers_and_freshness() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let stored = store(
            &[
                ("cache-control", "max-age=10"),
                ("etag", "\"v1\""),
                ("x-a", "old"),
            ],
            at,
        )
        .unwrap();
        let later = at + Duration::from_secs(50);
        let refreshed = stored.refreshed(
            &headers(&[
                ("cache-control", "max-age=100"),
                ("x-a", "new"),
                ("content-length", "0"),
            ]),
            &RULES,
            later,
            later,
            2,
        );
        assert_eq!(refreshed.headers["x-a"], "new");
        assert_eq!(refreshed.headers["etag"], "\"v1\"");
        assert!(!refreshed.headers.contains_key("content-length"));
        assert_eq!(refreshed.version, 2);
        assert!(matches!(
            refreshed.usable(later + Duration::from_secs(60)),
            Use::Fresh { .. }
        ));
    }

    #[test]
    fn an_age_past_any_duration_makes_a_stale_copy_not_a_panic() {
        let at = SystemTime::now();
        let stored = store(
            &[
                ("age", "18446744073709551615"),
                ("cache-control", "max-age=60"),
                ("etag", "\"v1\""),
            ],
            at,
        )
        .expect("validatable");
        assert_eq!(stored.age(at + Duration::from_secs(5)), Duration::MAX);
        assert!(matches!(
            stored.usable(at + Duration::from_secs(5)),
            Use::Revalidate { .. } | Use::StaleWhileRevalidate { .. }
        ));
    }
}
