//! `[listener.route.jwt]`: one key source (an inline secret, a PEM key file, or a JWKS file or
//! http:// URL), the algorithm pinned for a secret or key file, the claims a token must carry
//! and the ones forwarded. Key files are read here, so `serve` runs with what `check` read.

use http::{HeaderName, Uri};
use toml::Spanned;
use trafik_policy::jwt::{self, PinnedKey};
use trafik_proxy::plan::{JwksSource, JwtKeys, JwtPlan};

use super::report::Report;
use super::schema::Jwt;

pub fn check(report: &mut Report, route: &str, settings: &Spanned<Jwt>) -> Option<JwtPlan> {
    let field = format!("{route}.jwt");
    let jwt = settings.get_ref();
    let errors_before = report.error_count();
    let sources = [
        ("secret", &jwt.secret),
        ("key_file", &jwt.key_file),
        ("jwks", &jwt.jwks),
    ];
    for (key, value) in sources
        .iter()
        .filter_map(|(k, v)| Some((k, v.as_ref()?)))
        .skip(1)
    {
        report.error(
            value.span(),
            &format!("{field}.{key}"),
            "expected one key source: `secret`, `key_file` or `jwks`",
        );
    }
    let algorithm = match (&jwt.algorithm, &jwt.jwks) {
        (Some(name), None) => match jwt::algorithm(name.get_ref()) {
            Ok(algorithm) => Some(algorithm),
            Err(message) => {
                report.error(name.span(), &format!("{field}.algorithm"), message);
                None
            }
        },
        (Some(name), Some(_)) => {
            report.error(
                name.span(),
                &format!("{field}.algorithm"),
                "a JWKS key names its own algorithm (`alg`); `algorithm` pins a `secret` or `key_file`",
            );
            None
        }
        (None, _) => None,
    };
    // The algorithm a secret or key file is pinned to; missing only when none is written (a
    // written but wrong one is reported above).
    let pinned = |report: &mut Report, example: &str| {
        if jwt.algorithm.is_none() {
            report.required(
                None::<trafik_policy::Algorithm>,
                settings.span(),
                &format!("{field}.algorithm"),
                &format!("algorithm = \"{example}\", the one algorithm this key verifies"),
            );
        }
        algorithm
    };
    let keys = if let Some(secret) = &jwt.secret {
        pinned(report, "HS256").and_then(|algorithm| {
            let pinned = PinnedKey::secret(algorithm, secret.get_ref().as_bytes());
            keep(
                report,
                secret.span(),
                &format!("{field}.secret"),
                pinned.map(|_| ()),
            )?;
            Some(JwtKeys::Secret {
                algorithm: format!("{algorithm:?}"),
                secret: secret.get_ref().as_bytes().to_vec(),
            })
        })
    } else if let Some(file) = &jwt.key_file {
        let key_field = format!("{field}.key_file");
        let pem = std::fs::read(report.path(file.get_ref()))
            .map_err(|e| format!("cannot read {:?}: {e}", file.get_ref()));
        let pem = keep(report, file.span(), &key_field, pem);
        let algorithm = pinned(report, "RS256");
        pem.zip(algorithm).and_then(|(pem, algorithm)| {
            let pinned = PinnedKey::pem(algorithm, &pem).map(|_| ());
            keep(report, file.span(), &key_field, pinned)?;
            Some(JwtKeys::Pem {
                algorithm: format!("{algorithm:?}"),
                pem,
            })
        })
    } else if let Some(jwks) = &jwt.jwks {
        jwks_source(report, &field, jwks).map(|source| JwtKeys::Jwks {
            source,
            refresh: report.above_zero(
                &jwt.jwks_refresh,
                &format!("{field}.jwks_refresh"),
                "an interval",
                "the keys would be read without pause",
            ),
        })
    } else {
        report.required(
            None::<()>,
            settings.span(),
            &format!("{field}.secret"),
            "secret = \"…\" with algorithm = \"HS256\", key_file = \"key.pem\", or jwks = \"jwks.json\" or \"http://…\"",
        );
        None
    };
    let mut forward = Vec::new();
    for line in &jwt.forward_claims {
        let parsed = line.get_ref().split_once(':').and_then(|(claim, header)| {
            let header = HeaderName::from_bytes(header.trim().as_bytes()).ok()?;
            let claim = claim.trim();
            (!claim.is_empty() && trafik_proxy::http::headers::is_settable(&header))
                .then(|| (claim.to_owned(), header))
        });
        match parsed {
            Some(pair) => forward.push(pair),
            None => report.error(
                line.span(),
                &format!("{field}.forward_claims"),
                format!(
                    "expected \"claim: header-name\" such as \"sub: x-kullanici\" (not a header trafik manages), found {:?}",
                    line.get_ref()
                ),
            ),
        }
    }
    let keys = keys?;
    (report.error_count() == errors_before).then(|| JwtPlan {
        keys,
        issuers: jwt.issuer.iter().map(|i| i.get_ref().clone()).collect(),
        audiences: jwt.audiences.iter().map(|a| a.get_ref().clone()).collect(),
        leeway: jwt.leeway.get_ref().0,
        forward,
        keep_token: jwt.keep_token,
    })
}

/// A JWKS file (read and parsed now) or an http:// URL (fetched by `serve` in the background).
fn jwks_source(report: &mut Report, field: &str, jwks: &Spanned<String>) -> Option<JwksSource> {
    let key_field = format!("{field}.jwks");
    let written = jwks.get_ref();
    if written.starts_with("http://") {
        let url = written
            .parse::<Uri>()
            .ok()
            .filter(|u| u.host().is_some())
            .ok_or_else(|| format!("expected an http:// URL with a host, found {written:?}"));
        return keep(report, jwks.span(), &key_field, url).map(JwksSource::Url);
    }
    if written.contains("://") {
        report.error(
            jwks.span(),
            &key_field,
            "expected a file or an http:// URL (trafik fetches JWKS over plain HTTP, from a local identity provider or sidecar)",
        );
        return None;
    }
    let path = report.path(written);
    let parsed = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {written:?}: {e}"))
        .and_then(|text| trafik_policy::jwt::KeySet::from_jwks(&text).map(|_| ()));
    keep(report, jwks.span(), &key_field, parsed)?;
    Some(JwksSource::File(path))
}

/// The value, or its error reported at `span`.
fn keep<T>(
    report: &mut Report,
    span: std::ops::Range<usize>,
    field: &str,
    value: Result<T, String>,
) -> Option<T> {
    value
        .map_err(|message| report.error(span, field, message))
        .ok()
}
