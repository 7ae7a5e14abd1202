//! `[pool.adaptive_concurrency]`: an optional limit on requests in flight to the pool that
//! follows their latency (see `trafik_balance::AdaptiveLimit`).

use toml::Spanned;
use trafik_balance::ConcurrencyRules;

use super::report::Report;
use super::schema::AdaptiveConcurrency;

/// `pool` is the pool's field path, such as `pool[0]`.
pub fn check(
    report: &mut Report,
    pool: &str,
    settings: Spanned<AdaptiveConcurrency>,
) -> ConcurrencyRules {
    let settings = settings.into_inner();
    let field = |key: &str| format!("{pool}.adaptive_concurrency.{key}");
    let (min, max, initial) = (
        *settings.min_limit.get_ref(),
        *settings.max_limit.get_ref(),
        *settings.initial_limit.get_ref(),
    );
    if min == 0 {
        report.error(
            settings.min_limit.span(),
            &field("min_limit"),
            "expected at least 1 (a limit of 0 would refuse every request)",
        );
    }
    if max < min {
        report.error(
            settings.max_limit.span(),
            &field("max_limit"),
            format!("expected at least min_limit ({min}), found {max}"),
        );
    }
    if !(min..=max.max(min)).contains(&initial) {
        report.error(
            settings.initial_limit.span(),
            &field("initial_limit"),
            format!(
                "expected a limit from min_limit ({min}) to max_limit ({max}), found {initial}"
            ),
        );
    }
    let tolerance = *settings.tolerance.get_ref();
    if !(1.0..=100.0).contains(&tolerance) {
        report.error(
            settings.tolerance.span(),
            &field("tolerance"),
            format!(
                "expected a factor from 1.0 to 100.0, such as 2.0 (latency may reach twice the baseline), found {tolerance}"
            ),
        );
    }
    let baseline_window = report.above_zero(
        &settings.baseline_window,
        &field("baseline_window"),
        "a duration",
        "no latency would be remembered as the baseline",
    );
    ConcurrencyRules {
        min_limit: min,
        max_limit: max,
        initial_limit: initial,
        tolerance,
        baseline_window,
    }
}
