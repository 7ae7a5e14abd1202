//! `[server]`: the instance's name, data-plane threads, drain, client-side timeouts and the
//! hop trace.

use std::time::Duration;

use http::HeaderName;
use toml::Spanned;
use trafik_proxy::http::headers::is_hop_by_hop;
use trafik_proxy::{AnswerLimits, ClientPlan, HeadLimits, ResolverPlan};

use super::report::Report;
use super::schema::{ClientLimits, Engine, Server, UpstreamLimits};
use super::values::Size;

/// What `[server]` resolves to.
pub struct Instance {
    pub name: String,
    pub workers: usize,
    pub client: ClientPlan,
    pub drain_timeout: Duration,
    pub trace_header: Option<HeaderName>,
    pub resolver: ResolverPlan,
}

pub fn check(report: &mut Report, server: Server) -> Instance {
    let resolver = resolver(report, &server);
    let workers = match server.workers {
        Some(workers) if !(1..=MOST_WORKERS).contains(workers.get_ref()) => {
            report.error(
                workers.span(),
                "server.workers",
                format!(
                    "expected from 1 to {MOST_WORKERS} workers (leave it out for one per core)"
                ),
            );
            1
        }
        Some(workers) => workers.into_inner(),
        None => default_workers(),
    };
    let timeouts = &server.timeouts;
    let client = ClientPlan {
        header_read_timeout: report.above_zero(
            &timeouts.client_header,
            "server.timeouts.client_header",
            "a timeout",
            "no request could be read",
        ),
        idle_timeout: report.above_zero(
            &timeouts.idle,
            "server.timeouts.idle",
            "a timeout",
            "every connection would be closed at once",
        ),
        trust_forwarded: server.trust_forwarded,
        access_log: server.access_log,
        limits: limits(report, &server.limits),
        upstream_limits: upstream_limits(report, &server.upstream_limits),
        engine: match server.engine {
            Engine::Trafik => trafik_proxy::Engine::Trafik,
            Engine::Hyper => trafik_proxy::Engine::Hyper,
        },
    };
    let trace_header = server.trace_header.and_then(|header| {
        let refuse = |report: &mut Report, message: String| {
            report.error(header.span(), "server.trace_header", message);
            None
        };
        match HeaderName::from_bytes(header.get_ref().as_bytes()) {
            Ok(name) if is_hop_by_hop(&name) => refuse(
                report,
                format!(
                    "{name:?} is removed at every hop; choose another name, such as \"x-durak\""
                ),
            ),
            Ok(name) => Some(name),
            Err(_) => refuse(
                report,
                format!(
                    "expected a header name such as \"x-durak\", found {:?}",
                    header.get_ref()
                ),
            ),
        }
    });
    Instance {
        resolver,
        name: server.name,
        workers,
        client,
        // Zero is allowed: stop at once, without waiting for requests in flight.
        drain_timeout: server.drain_timeout.0,
        trace_header,
    }
}

/// Where backend names are asked, and the bounds on asking again: both above zero, the
/// lower one not above the upper one.
fn resolver(report: &mut Report, server: &Server) -> ResolverPlan {
    let min = report.above_zero(
        &server.resolve_min,
        "server.resolve_min",
        "a time",
        "a name with a TTL of 0 would be asked without pause",
    );
    let max = report.above_zero(
        &server.resolve_max,
        "server.resolve_max",
        "a time",
        "every name would be asked without pause",
    );
    if min > max {
        report.error(
            server.resolve_min.span(),
            "server.resolve_min",
            format!(
                "expected at most resolve_max ({}), found {}",
                server.resolve_max.get_ref(),
                server.resolve_min.get_ref()
            ),
        );
    }
    ResolverPlan {
        server: server.resolver.as_ref().map(|address| address.get_ref().0),
        min,
        max,
    }
}

/// The data-plane threads to run when the config does not say: one per core.
fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// At least one header (`Host`) and hyper's smallest head buffer; at most 1 MiB of head. At
/// least one stream a connection, at most [`MOST_STREAMS`].
fn limits(report: &mut Report, limits: &ClientLimits) -> HeadLimits {
    let (headers, bytes) = head_size(report, "server.limits", &limits.headers, &limits.head_bytes);
    if !(1..=MOST_STREAMS).contains(limits.streams.get_ref()) {
        report.error(
            limits.streams.span(),
            "server.limits.streams",
            format!("expected from 1 to {MOST_STREAMS} streams a connection, such as 100"),
        );
    }
    HeadLimits {
        headers,
        bytes,
        min_body_rate: limits.min_body_rate.0,
        streams: *limits.streams.get_ref(),
    }
}

/// The most streams a client connection may be allowed: each may hold a backend connection and
/// its buffers, so a few connections could otherwise take every descriptor.
const MOST_STREAMS: u32 = 10_000;

/// As a request head's, so a backend's answer head is held to the same bounds.
fn upstream_limits(report: &mut Report, limits: &UpstreamLimits) -> AnswerLimits {
    let (headers, bytes) = head_size(
        report,
        "server.upstream_limits",
        &limits.headers,
        &limits.head_bytes,
    );
    AnswerLimits { headers, bytes }
}

/// The most workers: each is a thread with its own runtime, buffers and listening sockets; a
/// number past what any machine runs failed at start (threads, descriptors, memory) with no
/// word of which setting asked for it.
const MOST_WORKERS: usize = 1024;

/// The most header fields a head may be allowed: the parsers make room for that many on every
/// head past the fast path's 64 (a trillion passed `trafik check` and aborted the process on
/// the first such head), and a 1 MiB head cannot hold more than about 260,000 anyway.
const MOST_FIELDS: usize = 10_000;

/// The field count and byte size of a head in `section`: from one field to [`MOST_FIELDS`],
/// from hyper's smallest head buffer to 1 MiB.
fn head_size(
    report: &mut Report,
    section: &str,
    headers: &Spanned<usize>,
    bytes: &Spanned<Size>,
) -> (usize, usize) {
    if !(1..=MOST_FIELDS).contains(headers.get_ref()) {
        report.error(
            headers.span(),
            &format!("{section}.headers"),
            format!("expected from 1 to {MOST_FIELDS} header fields, such as 100"),
        );
    }
    let size = bytes.get_ref().0;
    let range = HeadLimits::MIN_BYTES as u64..=1024 * 1024;
    if !range.contains(&size) {
        report.error(
            bytes.span(),
            &format!("{section}.head_bytes"),
            format!("expected from 8KiB to 1MiB, found {size} bytes"),
        );
    }
    (*headers.get_ref(), size as usize)
}
