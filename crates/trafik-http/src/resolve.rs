//! A route's [`TargetPlan`] turned into its run-time [`Target`]. Caches and static sites hold
//! state (stored objects, kept files, counters), so one of the previous snapshot with the same
//! settings is carried over, and routes naming the same cache share one. Gateway targets are
//! built by [`gateway::build`], their counters kept here for the admin API.

use std::collections::HashMap;
use std::sync::Arc;

use crate::http::cache::{CachedTarget, EdgeCache};
use crate::http::files::Site;
use crate::http::gateway::{self, counters::GatewayCounters};
use crate::http::routing::{RedirectTarget, SplitTarget};
use crate::http::target::{PoolTarget, Target};
use crate::plan::{RoutePlan, TargetPlan};

/// The caches and sites of the snapshot being built.
#[derive(Default)]
pub struct Stateful {
    pub caches: Vec<Arc<EdgeCache>>,
    pub sites: Vec<Arc<Site>>,
    pub gateway: Vec<Arc<GatewayCounters>>,
}

/// What a target is built from besides its plan.
pub struct Context<'a> {
    pub pools: &'a HashMap<&'a str, usize>,
    pub previous: Option<&'a Stateful>,
    pub workers: usize,
}

pub fn target(
    plan: &TargetPlan,
    listener: &str,
    route: &RoutePlan,
    context: &Context<'_>,
    built: &mut Stateful,
) -> Result<Target, String> {
    match plan {
        TargetPlan::Pool {
            pool,
            retry_non_idempotent,
        } => {
            let Some(&index) = context.pools.get(pool.as_str()) else {
                return Err(format!("a route names pool {pool:?}, which does not exist"));
            };
            Ok(Target::Pool(PoolTarget {
                pool: index,
                retry_non_idempotent: *retry_non_idempotent,
            }))
        }
        TargetPlan::Split {
            pools,
            sticky,
            retry_non_idempotent,
        } => {
            let mut shares = Vec::with_capacity(pools.len());
            for (pool, weight) in pools {
                let Some(&index) = context.pools.get(pool.as_str()) else {
                    return Err(format!("a split names pool {pool:?}, which does not exist"));
                };
                shares.push((index, pool.clone(), *weight));
            }
            Ok(Target::Split(SplitTarget::new(
                shares,
                sticky.clone(),
                *retry_non_idempotent,
            )))
        }
        TargetPlan::Redirect(plan) => Ok(Target::Redirect(RedirectTarget { plan: plan.clone() })),
        TargetPlan::Static { root, index } => {
            let prefix = &route.path_prefix;
            let before = context
                .previous
                .and_then(|p| p.sites.iter().find(|s| s.same_as(root, index, prefix)));
            let site = match before {
                Some(site) => site.clone(),
                None => Arc::new(Site::new(
                    root.clone(),
                    index.clone(),
                    prefix.clone(),
                    context.workers,
                )?),
            };
            built.sites.push(site.clone());
            Ok(Target::Static(site))
        }
        TargetPlan::Cached {
            cache,
            target: inner,
        } => {
            let shared = built
                .caches
                .iter()
                .chain(context.previous.map_or(&[][..], |p| &p.caches))
                .find(|c| c.plan.name == cache.name)
                .filter(|c| c.plan == *cache)
                .cloned();
            if built
                .caches
                .iter()
                .any(|c| c.plan.name == cache.name && c.plan != *cache)
            {
                return Err(format!(
                    "two routes describe cache {:?} differently",
                    cache.name
                ));
            }
            let edge =
                shared.unwrap_or_else(|| Arc::new(EdgeCache::new(cache.clone(), context.workers)));
            if !built.caches.iter().any(|c| Arc::ptr_eq(c, &edge)) {
                built.caches.push(edge.clone());
            }
            let inner = target(inner, listener, route, context, built)?;
            Ok(Target::Cached(CachedTarget {
                cache: edge,
                host: route.host.as_deref().unwrap_or("").to_ascii_lowercase(),
                inner: Arc::new(inner),
            }))
        }
        TargetPlan::Service { .. } | TargetPlan::Aggregate(_) | TargetPlan::Ambassador(_) => {
            let path = route
                .path_template
                .as_ref()
                .map_or(route.path_prefix.as_str(), |t| t.text());
            let label = format!("{listener} {path}");
            let (target, counters) =
                gateway::build(plan, &label, context.pools, context.workers)
                    .unwrap_or_else(|| Err(format!("route {label}: not a gateway target")))?;
            built.gateway.extend(counters);
            Ok(target)
        }
    }
}
