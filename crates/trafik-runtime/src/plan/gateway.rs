//! What the binary hands the data plane for the gateway's targets. Expressions arrive compiled
//! (by `trafik check` and `serve` alike), so a plan that loads never fails on its jq.
//!
//! Variables: every expression of a route sees the route's captures, in the order of its path
//! template, then the batch item (aggregates with a batch) or `$status` (ambassadors).

use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use trafik_gateway::jq::Expression;
use trafik_gateway::parts::Missing;
use trafik_gateway::template::UpstreamTemplate;

/// Which pool of the service map answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceChoice {
    /// This pool, by name.
    Named(String),
    /// The capture at this index of the route's template names the pool, among `services`
    /// only; any other value is answered 404.
    Capture {
        capture: usize,
        services: Vec<String>,
    },
}

/// `target = "aggregate"`: the parts called in parallel, merged, projected per client.
#[derive(Clone, Debug)]
pub struct AggregatePlan {
    pub parts: Vec<PartPlan>,
    /// Reads `{"part": answer, ...}` in part order and writes the answer.
    pub merge: Arc<Expression>,
    pub views: Option<ViewsPlan>,
    /// One request for several records: `?no=A,B,C`.
    pub batch: Option<BatchPlan>,
}

/// One upstream call of an aggregate.
#[derive(Clone, Debug)]
pub struct PartPlan {
    /// The part's key in the merge expression's input (`.ucret`) and in `x-trafik-eksik`.
    pub name: String,
    /// The pool that answers it.
    pub service: String,
    pub path: UpstreamTemplate,
    /// For the whole call: connect, answer and body.
    pub timeout: Duration,
    pub missing: Missing,
}

/// Backend for frontend: a projection of the merged answer per client type.
#[derive(Clone, Debug)]
pub struct ViewsPlan {
    pub chooser: ClientChooser,
    pub views: Vec<ViewPlan>,
}

/// How a request tells its client type. A token claim comes here as a further variant once
/// JWT verification lands; path prefixes need nothing here (one route per prefix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientChooser {
    /// The value of this request header.
    Header(HeaderName),
}

#[derive(Clone, Debug)]
pub struct ViewPlan {
    /// The client type it serves.
    pub client: String,
    pub project: Arc<Expression>,
}

/// List batching: each item of the query parameter is one record, fetched concurrently (at
/// most `concurrency` at once), answered as an array in request order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchPlan {
    /// The query parameter, also the item's variable name (`$no`) and capture in part paths.
    pub parameter: String,
    pub concurrency: usize,
}

/// `target = "ambassador"`: the local contract mapped to an external one and back.
#[derive(Clone, Debug)]
pub struct AmbassadorPlan {
    pub service: String,
    /// The external path (`/v1/durum?no={no}`).
    pub path: UpstreamTemplate,
    pub timeout: Duration,
    /// Maps the external answer's body (null if it is not JSON) to the local one.
    pub answer: Arc<Expression>,
    /// The local status from the same input; the external status when `None`.
    pub status: Option<Arc<Expression>>,
}
