//! `[server]`: the instance's name, data-plane threads, drain and client-side timeouts.

use std::time::Duration;

use trafik_proxy::ClientPlan;

use super::report::Report;
use super::schema::Server;

/// What `[server]` resolves to.
pub struct Instance {
    pub name: String,
    pub workers: usize,
    pub client: ClientPlan,
    pub drain_timeout: Duration,
}

pub fn check(report: &mut Report, server: Server) -> Instance {
    let workers = match server.workers {
        Some(workers) if *workers.get_ref() == 0 => {
            report.error(
                workers.span(),
                "server.workers",
                "expected at least 1 worker (leave it out for one per core)",
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
    };
    Instance {
        name: server.name,
        workers,
        client,
        // Zero is allowed: stop at once, without waiting for requests in flight.
        drain_timeout: server.drain_timeout.0,
    }
}

/// The data-plane threads to run when the config does not say: one per core.
fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
