//! `[pool.outlier]`: passive health (outlier ejection), on by default.

use trafik_balance::OutlierRules;

use super::report::Report;
use super::schema::Outlier;

/// `pool` is the pool's field path, such as `pool[0]`; `None` when the pool turns it off.
pub fn check(report: &mut Report, pool: &str, outlier: Outlier) -> Option<OutlierRules> {
    let field = |key: &str| format!("{pool}.outlier.{key}");
    let rate = *outlier.min_success_rate.get_ref();
    if !(0.0..=1.0).contains(&rate) {
        report.error(
            outlier.min_success_rate.span(),
            &field("min_success_rate"),
            format!("expected a share from 0.0 (off) to 1.0, such as 0.8, found {rate}"),
        );
    }
    if *outlier.success_rate_window.get_ref() == 0 {
        report.error(
            outlier.success_rate_window.span(),
            &field("success_rate_window"),
            "expected at least 1 request per window, such as 20",
        );
    }
    let base_ejection = report.above_zero(
        &outlier.base_ejection,
        &field("base_ejection"),
        "a duration",
        "an ejected backend would come back at once",
    );
    let max_ejection = outlier.max_ejection.get_ref().0;
    if max_ejection < base_ejection {
        report.error(
            outlier.max_ejection.span(),
            &field("max_ejection"),
            format!(
                "expected at least base_ejection ({}), found {}",
                outlier.base_ejection.get_ref(),
                outlier.max_ejection.get_ref()
            ),
        );
    }
    let percent = *outlier.max_ejected_percent.get_ref();
    if percent > 100 {
        report.error(
            outlier.max_ejected_percent.span(),
            &field("max_ejected_percent"),
            format!("expected a percentage up to 100, found {percent}"),
        );
    }
    outlier.enabled.then(|| OutlierRules {
        consecutive_connect_failures: outlier.consecutive_connect_failures,
        consecutive_errors: outlier.consecutive_errors,
        min_success_rate: rate,
        success_rate_window: *outlier.success_rate_window.get_ref(),
        base_ejection,
        max_ejection,
        max_ejected_percent: percent,
    })
}
