//! `trafik plan OLD NEW`: both configurations checked as `trafik check` would, their pools
//! compared on the proxy's selection code (`trafik_sim::change`).

use std::process::ExitCode;

use trafik_balance::Algorithm;
use trafik_proxy::plan::{PoolPlan, StickyPlan};
use trafik_sim::change::{self, KeySample, PoolShape};

use super::{load_config, say};
use crate::cli::PlanArgs;
use crate::config::Loaded;

pub fn run(args: PlanArgs) -> Result<ExitCode, String> {
    let (before, after) = match (args.files.as_slice(), args.etcd.etcd.is_some()) {
        ([old, new], false) => (
            pools(&load_config(Some(old))?),
            pools(&load_config(Some(new))?),
        ),
        ([new], true) => (
            pools(&super::fleet::current(&args.etcd)?),
            pools(&load_config(Some(new))?),
        ),
        _ => {
            return Err(
                "give OLD and NEW files, or --etcd URL and the NEW file to compare with the fleet's configuration"
                    .into(),
            );
        }
    };
    let sample = KeySample {
        prefix: args.key_prefix,
        count: args.keys,
    };
    let report = change::compare(&before, &after, &sample);
    if args.json {
        say(&serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
    } else {
        say(report.render().trim_end());
    }
    Ok(ExitCode::SUCCESS)
}

fn pools(loaded: &Loaded) -> Vec<PoolShape> {
    loaded.plan.pools.iter().map(shape).collect()
}

/// What placement depends on in a pool, as the proxy builds it: key stickiness places by its
/// own modulo or ring (`trafik_proxy::sticky`), otherwise the pool's algorithm does.
pub fn shape(pool: &PoolPlan) -> PoolShape {
    let mut options = pool.selector_options.clone();
    let keyed = pool.hash_key.is_some();
    let algorithm = match &pool.sticky {
        Some(StickyPlan::Modulo) if keyed => Algorithm::Modulo,
        Some(StickyPlan::Consistent { virtual_nodes }) if keyed => {
            options.virtual_nodes = *virtual_nodes;
            Algorithm::ConsistentHash
        }
        _ => pool.algorithm,
    };
    PoolShape {
        name: pool.name.clone(),
        algorithm,
        options,
        backends: pool.backend_specs().collect(),
        labels: pool
            .backends
            .iter()
            .map(|b| b.name.clone().unwrap_or_else(|| b.address.to_string()))
            .collect(),
        sticky_clients: matches!(pool.sticky, Some(StickyPlan::Cookie { .. })),
    }
}
