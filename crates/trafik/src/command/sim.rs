//! `trafik sim`: the course's models on trafik's selection code; each prints its table, or JSON.

use std::process::ExitCode;

use trafik_sim::{SimError, cache, distribution, dns, queue, remap, sticky, subjects};

use super::say;
use crate::cli::{
    CacheArgs, DistributionArgs, DnsArgs, FailoverArgs, HashArgs, QueueArgs, SimModel, StickyArgs,
    SubjectsArgs,
};

pub fn run(model: SimModel) -> Result<ExitCode, String> {
    match model {
        SimModel::Subjects(args) => show(
            subjects::run(&(&args).into()),
            args.json,
            subjects::SubjectsReport::render,
        ),
        SimModel::Queue(args) => show(
            queue::run(&(&args).into()),
            args.json,
            queue::QueueReport::render,
        ),
        SimModel::Hash(args) => show(
            remap::run(&(&args).into()),
            args.json,
            remap::RemapReport::render,
        ),
        SimModel::Sticky(args) => show(
            sticky::run(&(&args).into()),
            args.json,
            sticky::StickyReport::render,
        ),
        SimModel::Cache(args) => show(
            cache::run(&(&args).into()),
            args.json,
            cache::CacheReport::render,
        ),
        SimModel::Distribution(args) => show(
            distribution::run(&(&args).into()),
            args.json,
            distribution::DistributionReport::render,
        ),
        SimModel::Dns(args) => show(
            dns::run_dns(&(&args).into()),
            args.json,
            dns::DnsReport::render,
        ),
        SimModel::Failover(args) => show(
            dns::run_failover(&(&args).into()),
            args.json,
            dns::FailoverReport::render,
        ),
    }?;
    Ok(ExitCode::SUCCESS)
}

fn show<R: serde::Serialize>(
    report: Result<R, SimError>,
    json: bool,
    render: fn(&R) -> String,
) -> Result<(), String> {
    let report = report.map_err(|e| e.to_string())?;
    if json {
        say(&serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
    } else {
        say(render(&report).trim_end());
    }
    Ok(())
}

impl From<&SubjectsArgs> for subjects::SubjectsOptions {
    fn from(args: &SubjectsArgs) -> Self {
        subjects::SubjectsOptions {
            seed: args.seed,
            subjects: args.subjects,
            loads: args.loads.clone(),
            virtual_nodes: args.vnodes,
            remove: args.remove,
            removal_load: args.removal_load,
        }
    }
}

impl From<&QueueArgs> for queue::QueueOptions {
    fn from(args: &QueueArgs) -> Self {
        queue::QueueOptions {
            replicas: args.replicas,
            requests: args.requests,
            arrival: args.arrival,
            seed: args.seed,
            slow: args.slow.clone(),
        }
    }
}

impl From<&HashArgs> for remap::RemapOptions {
    fn from(args: &HashArgs) -> Self {
        remap::RemapOptions {
            keys: args.keys,
            key_prefix: args.key_prefix.clone(),
            key_base: args.key_base,
            replicas: args.replicas.clone(),
            added: args.added.clone(),
            virtual_nodes: args.vnodes.clone(),
            maglev_size: args.maglev_size,
            balance_factor: args.balance_factor,
            warmup: remap::WarmupInputs {
                read_rate: args.read_rate,
                write_rate: args.write_rate,
                hit_ratio: args.hit_ratio,
                store_base: args.store_base,
                window_s: args.warmup.as_secs_f64(),
            },
        }
    }
}

impl From<&StickyArgs> for sticky::StickyOptions {
    fn from(args: &StickyArgs) -> Self {
        sticky::StickyOptions {
            clients: args.clients.0.clone(),
            virtual_nodes: args.vnodes,
        }
    }
}

impl From<&CacheArgs> for cache::CacheOptions {
    fn from(args: &CacheArgs) -> Self {
        cache::CacheOptions {
            requests: args.requests,
            queries: args.queries,
            open: args.open,
            capacity: args.capacity,
            bursts: args.bursts.clone(),
            summary_burst: args.summary_burst,
            policy: args.policy,
        }
    }
}

impl From<&DistributionArgs> for distribution::DistributionOptions {
    fn from(args: &DistributionArgs) -> Self {
        distribution::DistributionOptions {
            edges: args.edges,
            ttl: args.ttl,
            rounds: args.rounds,
            update_round: args.update_round,
            common_objects: args.common_objects,
            private_objects: args.private_objects,
            stagger: args.stagger,
        }
    }
}

impl From<&DnsArgs> for dns::DnsOptions {
    fn from(args: &DnsArgs) -> Self {
        dns::DnsOptions {
            resolvers: args.resolvers,
            rate: args.rate,
            ttls: args.ttls.clone(),
            ttl: args.ttl,
            duration: args.duration,
        }
    }
}

impl From<&FailoverArgs> for dns::FailoverOptions {
    fn from(args: &FailoverArgs) -> Self {
        dns::FailoverOptions {
            resolvers: args.resolvers,
            rate: args.rate,
            ttls: args.ttls.clone(),
            ttl: args.ttl,
            fail_at: args.fail_at,
            detection: args.detection,
            duration: args.duration,
            region: args.region.clone(),
            policy: args.policy.clone(),
            availability: args.availability,
        }
    }
}
