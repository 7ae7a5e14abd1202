//! `[listener.route.compress]`: the codings offered (the preferred first), the media types
//! compressed and the smallest answer worth it; each coding's level within its range.

use toml::Spanned;
use trafik_policy::negotiate::{Coding, valid_type_pattern};
use trafik_proxy::plan::CompressPlan;

use super::report::Report;
use super::schema::Compress;

pub fn check(
    report: &mut Report,
    route_field: &str,
    settings: &Spanned<Compress>,
) -> Option<CompressPlan> {
    let field = format!("{route_field}.compress");
    let compress = settings.get_ref();
    let errors_before = report.error_count();
    let mut encodings = Vec::new();
    for name in compress.encodings.get_ref() {
        match Coding::from_token(name.get_ref()) {
            Some(coding) if encodings.contains(&coding) => report.error(
                name.span(),
                &format!("{field}.encodings"),
                format!("{:?} is listed twice", name.get_ref()),
            ),
            Some(coding) => encodings.push(coding),
            None => report.error(
                name.span(),
                &format!("{field}.encodings"),
                format!(
                    "expected \"zstd\", \"br\" or \"gzip\", found {:?}",
                    name.get_ref()
                ),
            ),
        }
    }
    if compress.encodings.get_ref().is_empty() {
        report.error(
            compress.encodings.span(),
            &format!("{field}.encodings"),
            "expected at least one of \"zstd\", \"br\", \"gzip\" (remove the table to compress nothing)",
        );
    }
    let mut types = Vec::new();
    for pattern in &compress.types {
        let text = pattern.get_ref().to_ascii_lowercase();
        match valid_type_pattern(&text) {
            true => types.push(text),
            false => report.error(
                pattern.span(),
                &format!("{field}.types"),
                format!(
                    "expected a media type such as \"application/json\" or \"text/*\", found {:?}",
                    pattern.get_ref()
                ),
            ),
        }
    }
    let mut level = |key: &str, value: i64, range: std::ops::RangeInclusive<i64>, span| {
        if !range.contains(&value) {
            report.error(
                span,
                &format!("{field}.{key}"),
                format!(
                    "expected a level from {} to {}, found {value}",
                    range.start(),
                    range.end()
                ),
            );
        }
    };
    level(
        "gzip_level",
        compress.gzip_level.get_ref().to_owned().into(),
        1..=9,
        compress.gzip_level.span(),
    );
    level(
        "br_level",
        compress.br_level.get_ref().to_owned().into(),
        0..=11,
        compress.br_level.span(),
    );
    level(
        "zstd_level",
        compress.zstd_level.get_ref().to_owned().into(),
        1..=19,
        compress.zstd_level.span(),
    );
    (report.error_count() == errors_before).then(|| CompressPlan {
        encodings,
        types,
        min_length: compress.min_length.get_ref().0,
        gzip_level: *compress.gzip_level.get_ref(),
        br_level: *compress.br_level.get_ref(),
        zstd_level: *compress.zstd_level.get_ref(),
    })
}
