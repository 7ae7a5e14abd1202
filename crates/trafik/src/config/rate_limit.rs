//! `[listener.route.rate_limit]`: `rate` requests `per` a period with a `burst`, counted per
//! `key`, in this instance or (with `redis`) shared by every instance with the same Redis and
//! prefix. A key may name only request metadata (lesson 13): the edge has no domain records.

use std::net::ToSocketAddrs;

use http::HeaderName;
use toml::Spanned;
use trafik_policy::stage::{Input, Stage, edge_refusal};
use trafik_proxy::plan::{GlobalLimit, RateKey, RateLimitPlan};

use super::report::Report;
use super::schema::RateLimit;

/// `has_jwt` says whether the route verifies a token (a `claim:` key needs one).
pub fn check(
    report: &mut Report,
    route: &str,
    path_prefix: &str,
    settings: &Spanned<RateLimit>,
    has_jwt: bool,
) -> Option<RateLimitPlan> {
    let field = format!("{route}.rate_limit");
    let limit = settings.get_ref();
    let errors_before = report.error_count();
    let rate = report.required(
        limit.rate.as_ref(),
        settings.span(),
        &format!("{field}.rate"),
        "rate = 10, the requests let through per `per`",
    );
    for (name, value) in [("rate", rate), ("burst", limit.burst.as_ref())] {
        if let Some(value) = value.filter(|v| *v.get_ref() == 0) {
            report.error(
                value.span(),
                &format!("{field}.{name}"),
                "expected at least 1",
            );
        }
    }
    let period = report.above_zero(
        &limit.per,
        &format!("{field}.per"),
        "a period",
        "no request could pass",
    );
    let key = match rate_key(limit.key.get_ref(), has_jwt) {
        Ok(key) => Some(key),
        Err(message) => {
            report.error(limit.key.span(), &format!("{field}.key"), message);
            None
        }
    };
    let global = limit.redis.as_ref().map(|redis| {
        let address = redis.get_ref();
        if address.to_socket_addrs().is_err() {
            report.error(
                redis.span(),
                &format!("{field}.redis"),
                format!("expected host:port such as \"127.0.0.1:6379\", found {address:?}"),
            );
        }
        let fail_open = match limit.on_redis_error.get_ref().as_str() {
            "open" => true,
            "closed" => false,
            other => {
                report.error(
                    limit.on_redis_error.span(),
                    &format!("{field}.on_redis_error"),
                    format!("expected \"open\" (let requests through) or \"closed\" (answer 503), found {other:?}"),
                );
                true
            }
        };
        let prefix = limit.redis_prefix.as_ref().map_or_else(
            || format!("trafik:rate:{path_prefix}:"),
            |p| p.get_ref().clone(),
        );
        GlobalLimit {
            redis: format!("redis://{address}/"),
            prefix,
            timeout: report.above_zero(
                &limit.redis_timeout,
                &format!("{field}.redis_timeout"),
                "a timeout",
                "every request would find Redis down",
            ),
            fail_open,
            probe_interval: report.above_zero(
                &limit.redis_probe_interval,
                &format!("{field}.redis_probe_interval"),
                "an interval",
                "every request would ask a Redis known to be down",
            ),
        }
    });
    let (rate, key) = (*rate?.get_ref(), key?);
    (report.error_count() == errors_before).then(|| RateLimitPlan {
        rate,
        period,
        burst: limit.burst.as_ref().map_or(rate, |b| *b.get_ref()),
        key,
        global,
    })
}

/// `client-ip`, `header:NAME`, `claim:NAME` or `route`; anything else that names a record of
/// the application is refused by the offloading rule.
fn rate_key(text: &str, has_jwt: bool) -> Result<RateKey, String> {
    let expected = "expected client-ip, header:NAME, claim:NAME or route";
    match text.split_once(':') {
        None if text == "client-ip" => Ok(RateKey::ClientIp),
        None if text == "route" => Ok(RateKey::Route),
        Some(("header", name)) => HeaderName::from_bytes(name.as_bytes())
            .map(RateKey::Header)
            .map_err(|_| format!("{name:?} is not a header name")),
        Some(("claim", _)) if !has_jwt => {
            Err("a claim key needs the route to verify the token: add [listener.route.jwt]".into())
        }
        Some(("claim", name)) if !name.is_empty() => Ok(RateKey::Claim(name.to_owned())),
        Some(("record" | "body", _)) => Err(edge_refusal(
            Stage::RateLimit,
            &[Input::Domain(text.to_owned())],
        )
        .unwrap_or_else(|| expected.to_owned())),
        _ => Err(format!("{expected}, found {text:?}")),
    }
}
