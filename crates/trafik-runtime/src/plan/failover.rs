//! Each pool's, route's and DNS name's failover budget, read off the checked plan: the settings
//! go to `trafik_balance::failover`, which holds the model. `trafik check`, `trafik plan` and
//! `/status` all print these.

use std::time::Duration;

pub use trafik_balance::failover::Budget;
use trafik_balance::failover::{self, ActiveChecks, Ejection, PoolFailover, Region};

use super::{HealthPlan, ListenerKind, Plan, PoolPlan, RegionHealth, RoutePlan, TargetPlan};
use crate::plan::ServiceChoice;

/// A pool's budget: its checks, its outlier ejection by failed connects, its retries and the
/// share of its heaviest backend.
pub fn pool(plan: &PoolPlan) -> Budget {
    let weights: Vec<u64> = plan
        .backend_specs()
        .map(|backend| u64::from(backend.weight))
        .collect();
    let total: u64 = weights.iter().sum();
    // Backends known only at run time (names, SRV records): assume more than one, of equal
    // weight, unless the pool lists nothing else (then the worst case is a lone backend).
    let largest_share = match (weights.iter().max(), plan.discover.is_empty()) {
        (Some(largest), true) => *largest as f64 / total as f64,
        (Some(largest), false) => *largest as f64 / (total + largest) as f64,
        (None, _) => 1.0,
    };
    failover::pool(&PoolFailover {
        checks: plan.health.as_ref().map(checks),
        ejection: plan
            .outlier
            .as_ref()
            .filter(|rules| rules.consecutive_connect_failures > 0)
            .map(|rules| Ejection {
                connect_failures: rules.consecutive_connect_failures,
                base: rules.base_ejection,
                max: rules.max_ejection,
            }),
        retries: plan.retries,
        retry_budget: plan.retry.budget_ratio,
        retry_floor: plan.retry.budget_floor,
        largest_share,
    })
}

/// The settings of `trafik_balance::failover` of a health plan.
pub fn checks(health: &HealthPlan) -> ActiveChecks {
    ActiveChecks {
        interval: health.interval,
        timeout: health.timeout,
        fall: health.fall,
    }
}

/// One route (or layer-4 listener) and the budget of the pool it sends to: the worst of its
/// pools when it has several.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteBudget {
    /// `listener host/path` (host `*` for any), or the listener alone at layer 4.
    pub route: String,
    pub pool: String,
    pub budget: Budget,
}

/// Every budget of a plan.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Budgets {
    pub pools: Vec<(String, Budget)>,
    pub routes: Vec<RouteBudget>,
    /// DNS policy names with their budget.
    pub names: Vec<(String, Budget)>,
}

/// The budgets of every pool, every route that reaches a pool, and every DNS policy name.
pub fn budgets(plan: &Plan) -> Budgets {
    let pools: Vec<(String, Budget)> = plan
        .pools
        .iter()
        .map(|p| (p.name.clone(), pool(p)))
        .collect();
    let mut routes: Vec<RouteBudget> = Vec::new();
    for listener in &plan.listeners {
        let mut add = |mut route: String, names: Vec<&str>| {
            // Routes told apart by methods or conditions only: numbered from the second on.
            let numbered = format!("{route} #");
            let same = routes
                .iter()
                .filter(|r| r.route == route || r.route.starts_with(&numbered))
                .count();
            if same > 0 {
                route = format!("{route} #{}", same + 1);
            }
            if let Some((pool, budget)) = worst(&pools, names) {
                routes.push(RouteBudget {
                    route,
                    pool,
                    budget,
                });
            }
        };
        match &listener.kind {
            ListenerKind::Http { routes }
            | ListenerKind::Https { routes, .. }
            | ListenerKind::H3 { routes, .. } => {
                for route in routes {
                    add(
                        route_label(&listener.name, route),
                        target_pools(&route.target),
                    );
                }
            }
            ListenerKind::Tcp { pool } => add(listener.name.clone(), vec![pool]),
            ListenerKind::TlsPassthrough { routes } => {
                for route in routes {
                    let name = route
                        .server_name
                        .as_ref()
                        .map_or("*".to_owned(), ToString::to_string);
                    add(format!("{} {name}", listener.name), vec![&route.pool]);
                }
            }
        }
    }
    let names = plan.dns.as_ref().map_or_else(Vec::new, |dns| {
        let region_checks = |index: usize| match dns.health.get(index) {
            Some(RegionHealth::Check { plan, .. }) => Some(checks(plan)),
            // Down when every backend is: they die together at worst, each found by its checks.
            Some(RegionHealth::Pool(name)) => plan
                .pools
                .iter()
                .find(|p| &p.name == name)
                .and_then(|p| p.health.as_ref())
                .map(checks),
            Some(RegionHealth::Always) | None => None,
        };
        dns.zones
            .zones
            .iter()
            .flat_map(|zone| &zone.names)
            .map(|name| {
                let regions: Vec<Region> = name
                    .policy
                    .regions()
                    .into_iter()
                    .map(|index| Region {
                        name: dns
                            .zones
                            .regions
                            .get(index)
                            .map_or_else(|| index.to_string(), |r| r.name.clone()),
                        checks: region_checks(index),
                    })
                    .collect();
                let ttl = Duration::from_secs(u64::from(name.ttl));
                (name.name.clone(), failover::dns_name(ttl, &regions))
            })
            .collect()
    });
    Budgets {
        pools,
        routes,
        names,
    }
}

/// The budget of a route's target: its pool's, or the worst of its pools'; `None` when it
/// reaches no pool (static files, a redirect).
pub fn target(pools: &[(String, Budget)], target: &TargetPlan) -> Option<(String, Budget)> {
    worst(pools, target_pools(target))
}

fn worst(budgets: &[(String, Budget)], pools: Vec<&str>) -> Option<(String, Budget)> {
    pools
        .into_iter()
        .filter_map(|name| budgets.iter().find(|(n, _)| n == name))
        .max_by_key(|(_, budget)| severity(budget))
        .map(|(name, budget)| (name.clone(), budget.clone()))
}

/// Orders budgets from best to worst: unbounded last, then by bound, then failing clients.
fn severity(budget: &Budget) -> (bool, Option<Duration>, bool) {
    let hidden = budget.exposure.is_some_and(|e| e.hidden());
    (budget.bound.is_none(), budget.bound, !hidden)
}

/// `web kargo.test/takip`, `web */`: the listener, the host (`*` for any) and the path.
fn route_label(listener: &str, route: &RoutePlan) -> String {
    let path = route
        .path_template
        .as_ref()
        .map_or(route.path_prefix.as_str(), |t| t.text());
    format!("{listener} {}{path}", route.host.as_deref().unwrap_or("*"))
}

/// The pools a target may send a request to.
fn target_pools(target: &TargetPlan) -> Vec<&str> {
    match target {
        TargetPlan::Pool { pool, .. } => vec![pool],
        TargetPlan::Service { service, .. } => match service {
            ServiceChoice::Named(pool) => vec![pool],
            ServiceChoice::Capture { services, .. } => {
                services.iter().map(String::as_str).collect()
            }
        },
        TargetPlan::Split { pools, .. } => pools.iter().map(|(pool, _)| pool.as_str()).collect(),
        TargetPlan::Cached { target, .. } => target_pools(target),
        TargetPlan::Aggregate(aggregate) => aggregate
            .parts
            .iter()
            .map(|part| part.service.as_str())
            .collect(),
        TargetPlan::Ambassador(ambassador) => vec![&ambassador.service],
        TargetPlan::Static { .. } | TargetPlan::Redirect(_) => Vec::new(),
    }
}
