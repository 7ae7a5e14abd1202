//! An open-loop HTTP load generator.
//!
//! Each request has an intended send time from a rate plan ([`schedule`]), never from the
//! previous response, and latency is measured from that intended time as well as from the actual
//! send, so a stalled server shows up in the numbers instead of quietly slowing the test down
//! (coordinated omission, as wrk2 avoids it). When the generator cannot keep up it says so:
//! late and dropped sends are counted and the achieved rate is reported next to the target.
//!
//! [`profile::Profile`] holds the course's load, soak and spike tests with their defaults;
//! [`runner::run`] drives the load; [`report::Report`] turns what it measured into JSON, a
//! summary and the load, soak and spike tables; [`html::page`] draws it. [`scenario`] and
//! [`journey`] run user journeys (weighted flows of steps with captures and checks) on the same
//! open-loop clock.

pub mod client;
pub mod data;
pub mod html;
pub mod journey;
pub mod merge;
pub mod profile;
pub mod record;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod schedule;
pub mod target;
pub mod tls;

pub use profile::{Profile, ProfileKind, Spike};
pub use report::{MaxErrorRate, ProfileShape, Report, ReportInputs, ServerCounters, ThresholdOn};
pub use runner::{Pacing, Progress, RunOptions, RunResult, run};
pub use schedule::RatePlan;
pub use target::Target;

/// Fetches a JSON document with one HTTP/1.1 GET (for a server's counters endpoint).
pub async fn fetch_json(url: &str) -> Result<serde_json::Value, String> {
    use http_body_util::{BodyExt, Empty};
    let (authority, path) = target::split_url(url)?;
    let target = Target::new(
        &[url.to_owned()],
        http::Method::GET,
        Vec::new(),
        bytes::Bytes::new(),
    )?;
    let stream = tokio::net::TcpStream::connect(target.address)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("{url}: {e}"))?;
    tokio::spawn(connection);
    let request = http::Request::get(path)
        .header(http::header::HOST, authority)
        .body(Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("{url} answered {}", response.status()));
    }
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{url}: {e}"))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| format!("{url} did not answer JSON: {e}"))
}
