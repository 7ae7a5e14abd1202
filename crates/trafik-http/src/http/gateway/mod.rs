//! The API gateway's route targets: a service of the map ([`service`]), aggregation and
//! backend for frontend ([`aggregate`]), the ambassador ([`ambassador`]). They call pools
//! through [`fetch`], which goes through [`PoolTarget`]'s own selection, connect and retries;
//! the shaping itself (templates, jq, contracts) is `trafik_gateway`'s.

pub mod aggregate;
pub mod ambassador;
pub mod counters;
pub mod fetch;
pub mod service;

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value as Json, json};
use trafik_metrics_text::{Exposition, Kind};

use self::aggregate::{AggregateTarget, Part};
use self::ambassador::AmbassadorTarget;
use self::counters::{CallCounters, GatewayCounters, totals};
use self::service::{Choice, ServiceTarget};
use crate::counters::PerWorker;
use crate::http::target::{PoolTarget, Target};
use crate::plan::TargetPlan;
use crate::plan::{AggregatePlan, AmbassadorPlan, ServiceChoice};
use crate::snapshot::Snapshot;
use trafik_gateway::template::UpstreamTemplate;

/// What [`build`] makes of a gateway target: the target, and its counters for the admin API.
pub type Built = (Target, Option<Arc<GatewayCounters>>);

/// Resolves a gateway target's pool names; `route` names it in counters (`LISTENER PATH`).
/// Returns `None` for a target that is not the gateway's.
pub fn build(
    plan: &TargetPlan,
    route: &str,
    pools: &HashMap<&str, usize>,
    workers: usize,
) -> Option<Result<Built, String>> {
    let resolve = Resolver { route, pools };
    Some(match plan {
        TargetPlan::Pool { .. }
        | TargetPlan::Static { .. }
        | TargetPlan::Cached { .. }
        | TargetPlan::Split { .. }
        | TargetPlan::Redirect(_) => {
            return None;
        }
        TargetPlan::Service {
            service,
            upstream_path,
            retry_non_idempotent,
        } => resolve.service(service, upstream_path, *retry_non_idempotent),
        TargetPlan::Aggregate(aggregate) => resolve.aggregate(aggregate, workers),
        TargetPlan::Ambassador(ambassador) => resolve.ambassador(ambassador, workers),
    })
}

/// Finds the pools a gateway target names.
struct Resolver<'a> {
    route: &'a str,
    pools: &'a HashMap<&'a str, usize>,
}

impl Resolver<'_> {
    fn pool(&self, name: &str, retry_non_idempotent: bool) -> Result<PoolTarget, String> {
        self.pools
            .get(name)
            .map(|&pool| PoolTarget {
                pool,
                retry_non_idempotent,
            })
            .ok_or_else(|| format!("route {}: no pool is named {name:?}", self.route))
    }

    fn service(
        &self,
        service: &ServiceChoice,
        upstream_path: &Option<UpstreamTemplate>,
        retry: bool,
    ) -> Result<Built, String> {
        let choice = match service {
            ServiceChoice::Named(name) => Choice::Named(self.pool(name, retry)?),
            ServiceChoice::Capture { capture, services } => Choice::Capture {
                capture: *capture,
                services: services
                    .iter()
                    .map(|name| Ok((name.clone(), self.pool(name, retry)?)))
                    .collect::<Result<_, String>>()?,
            },
        };
        let target = ServiceTarget {
            choice,
            upstream_path: upstream_path.clone(),
        };
        Ok((Target::Service(target), None))
    }

    fn aggregate(&self, aggregate: &AggregatePlan, workers: usize) -> Result<Built, String> {
        let names: Vec<String> = aggregate.parts.iter().map(|p| p.name.clone()).collect();
        let mut filters = vec!["merge".to_owned()];
        if let Some(views) = &aggregate.views {
            filters.extend(views.views.iter().map(|v| format!("view {}", v.client)));
        }
        let counters = Arc::new(GatewayCounters::new(
            self.route.to_owned(),
            "aggregate",
            &names,
            &filters,
            workers,
        ));
        let parts = aggregate
            .parts
            .iter()
            .map(|part| {
                Ok(Part {
                    pool: self.pool(&part.service, false)?,
                    path: part.path.clone(),
                    timeout: part.timeout,
                })
            })
            .collect::<Result<_, String>>()?;
        let target = AggregateTarget {
            parts,
            contracts: aggregate
                .parts
                .iter()
                .map(|p| (p.name.clone(), p.missing))
                .collect(),
            merge: aggregate.merge.clone(),
            views: aggregate.views.clone(),
            batch: aggregate.batch.clone(),
            counters: counters.clone(),
        };
        Ok((Target::Aggregate(target), Some(counters)))
    }

    fn ambassador(&self, ambassador: &AmbassadorPlan, workers: usize) -> Result<Built, String> {
        let counters = Arc::new(GatewayCounters::new(
            self.route.to_owned(),
            "ambassador",
            std::slice::from_ref(&ambassador.service),
            &["answer", "status"][..1 + usize::from(ambassador.status.is_some())]
                .iter()
                .map(|name| (*name).to_owned())
                .collect::<Vec<_>>(),
            workers,
        ));
        let target = AmbassadorTarget {
            pool: self.pool(&ambassador.service, false)?,
            path: ambassador.path.clone(),
            timeout: ambassador.timeout,
            answer: ambassador.answer.clone(),
            status: ambassador.status.clone(),
            counters: counters.clone(),
        };
        Ok((Target::Ambassador(target), Some(counters)))
    }
}

/// The gateway routes' counters for `/status`.
pub fn status(snapshot: &Snapshot) -> Json {
    let named = |list: &[(String, PerWorker<CallCounters>)], keys: &[&str]| -> Json {
        list.iter()
            .map(|(name, shards)| {
                let mut entry = json!({ "name": name });
                for (key, value) in totals(shards) {
                    if keys.contains(&key) {
                        entry[key] = value.into();
                    }
                }
                entry
            })
            .collect::<Vec<_>>()
            .into()
    };
    let all = ["calls", "failures", "missing", "bytes", "nanos"];
    let routes: Vec<Json> = snapshot
        .stateful
        .gateway
        .iter()
        .map(|route| {
            let mut entry = json!({ "route": route.route, "kind": route.kind });
            for (key, value) in totals(&route.total) {
                entry[key] = value.into();
            }
            entry["parts"] = named(&route.parts, &all);
            entry["filters"] = named(&route.filters, &["calls", "failures", "nanos"]);
            entry
        })
        .collect();
    routes.into()
}

/// The same counters in the Prometheus text format: per route (`part=""`) and per part, then
/// per jq filter; nothing without a gateway route.
pub fn metrics(snapshot: &Snapshot, exposition: &mut Exposition) {
    if snapshot.stateful.gateway.is_empty() {
        return;
    }
    let families = [
        (
            "calls",
            "Requests to the gateway route / calls to the part.",
        ),
        (
            "failures",
            "Failed answers (route) and calls without a 2xx answer (part).",
        ),
        (
            "missing",
            "Partial answers (route) and times the part was missing.",
        ),
        (
            "bytes",
            "Body bytes written to clients (route) and read from upstream (part).",
        ),
        (
            "nanos",
            "Time answering (route) and in the upstream call (part), in nanoseconds.",
        ),
    ];
    for (index, (name, help)) in families.into_iter().enumerate() {
        let name = format!("trafik_gateway_{name}_total");
        let mut family = exposition.family(&name, Kind::Counter, help);
        for route in &snapshot.stateful.gateway {
            let parts = route.parts.iter().map(|(n, s)| (n.as_str(), s));
            for (part, shards) in std::iter::once(("", &route.total)).chain(parts) {
                let labels = [("route", route.route.as_str()), ("part", part)];
                family.sample(&labels, totals(shards)[index].1);
            }
        }
    }
    let filter_families = [
        (
            0,
            "calls",
            "Runs of the route's jq filter (merge, view NAME, answer, status).",
        ),
        (1, "failures", "Runs of the jq filter that failed."),
        (4, "nanos", "Time in the jq filter, in nanoseconds."),
    ];
    for (index, name, help) in filter_families {
        let name = format!("trafik_gateway_filter_{name}_total");
        let mut family = exposition.family(&name, Kind::Counter, help);
        for route in &snapshot.stateful.gateway {
            for (filter, shards) in &route.filters {
                let labels = [("route", route.route.as_str()), ("filter", filter)];
                family.sample(&labels, totals(shards)[index].1);
            }
        }
    }
}
