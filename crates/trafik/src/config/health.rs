//! `[pool.health]`: active checks that take a backend out after `fall` failed probes and back
//! in after `rise` passed ones.

use std::time::Duration;

use toml::Spanned;
use trafik_proxy::{HealthCheck, HealthPlan};

use super::report::Report;
use super::schema::{Health, HealthKind};
use super::values::Dur;

/// The shortest time between probes of one backend.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// `pool` is the pool's field path, such as `pool[0]`; `http2` whether its backends may speak
/// HTTP/2, which gRPC checks need.
pub fn check(report: &mut Report, pool: &str, health: Spanned<Health>, http2: bool) -> HealthPlan {
    let health = health.into_inner();
    let field = |key: &str| format!("{pool}.health.{key}");
    if *health.kind.get_ref() == HealthKind::Grpc && !http2 {
        report.error(
            health.kind.span(),
            &field("kind"),
            "a gRPC health check speaks HTTP/2: set the pool's protocol = \"h2c\", \"h2\" or \"auto\"",
        );
    }
    if !health.path.get_ref().starts_with('/') {
        report.error(
            health.path.span(),
            &field("path"),
            format!(
                "expected a path starting with \"/\", found {:?}",
                health.path.get_ref()
            ),
        );
    }
    let interval = health.interval.get_ref().0;
    if interval < MIN_INTERVAL {
        report.error(
            health.interval.span(),
            &field("interval"),
            format!(
                "expected an interval of at least {} (such as \"2s\"), found {}: shorter ones spend a core probing",
                Dur(MIN_INTERVAL),
                health.interval.get_ref()
            ),
        );
    }
    let timeout = report.above_zero(
        &health.timeout,
        &field("timeout"),
        "a timeout",
        "every probe would fail",
    );
    for (count, key, what) in [
        (
            &health.fall,
            "fall",
            "failure before a backend is marked down",
        ),
        (
            &health.rise,
            "rise",
            "success before a backend is marked up again",
        ),
    ] {
        if *count.get_ref() == 0 {
            report.error(
                count.span(),
                &field(key),
                format!("expected at least 1 {what}, found 0"),
            );
        }
    }
    HealthPlan {
        check: match health.kind.into_inner() {
            HealthKind::Http => HealthCheck::Http {
                path: health.path.into_inner(),
            },
            HealthKind::Tcp => HealthCheck::Tcp,
            HealthKind::Grpc => HealthCheck::Grpc {
                service: health.service,
            },
        },
        interval,
        timeout,
        fall: health.fall.into_inner(),
        rise: health.rise.into_inner(),
    }
}
