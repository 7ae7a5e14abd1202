//! Seed 001: four distribution rules over 40 subjects of unequal capacity — overflow, idle
//! capacity, undistributed units, and the keys that move when one subject leaves.

use serde::Serialize;
use trafik_balance::{
    BackendSet, BackendSpec, CapacityShare, HashRing, LeastConnections, PickContext, RoundRobin,
    Selector,
};

use crate::SimError;
use crate::course::{Lehmer, knuth_ring_hash};
use crate::table::Table;

#[derive(Clone, Debug)]
pub struct SubjectsOptions {
    pub seed: u64,
    pub subjects: usize,
    pub loads: Vec<u64>,
    pub virtual_nodes: u32,
    /// The subject number (1-based) taken out in the removal table.
    pub remove: usize,
    pub removal_load: u64,
}

impl Default for SubjectsOptions {
    fn default() -> Self {
        SubjectsOptions {
            seed: 20_260_812,
            subjects: 40,
            loads: vec![1200, 2000, 2600],
            virtual_nodes: 128,
            remove: 20,
            removal_load: 1200,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct SubjectsReport {
    pub subjects: usize,
    pub total_capacity: u64,
    pub min_capacity: u64,
    pub max_capacity: u64,
    pub table: Vec<LoadRow>,
    pub removal: Removal,
}

#[derive(Clone, Debug, Serialize)]
pub struct LoadRow {
    pub rule: &'static str,
    pub load: u64,
    /// Subjects given more than their capacity.
    pub overloaded: u64,
    /// Units above capacity, summed.
    pub overflow: u64,
    /// Unused capacity, summed.
    pub idle: u64,
    /// Units no subject received.
    pub undistributed: u64,
    /// Subjects that received nothing.
    pub unloaded: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Removal {
    pub subject: usize,
    pub load: u64,
    pub rows: Vec<RemovalRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RemovalRow {
    pub rule: &'static str,
    /// Units the removed subject held.
    pub removed_share: u64,
    /// Keys whose subject changed when it left.
    pub moved: u64,
}

/// The rules of the table, by their trafik names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rule {
    RoundRobin,
    CapacityShare,
    LeastConnections,
    ConsistentHash,
}

impl Rule {
    fn name(self) -> &'static str {
        match self {
            Rule::RoundRobin => "round-robin",
            Rule::CapacityShare => "capacity-share",
            Rule::LeastConnections => "least-connections",
            Rule::ConsistentHash => "consistent-hash",
        }
    }
}

/// Runs the model.
pub fn run(options: &SubjectsOptions) -> Result<SubjectsReport, SimError> {
    if options.subjects == 0 {
        return Err(SimError::new("--subjects must be at least 1"));
    }
    if options.remove == 0 || options.remove > options.subjects {
        return Err(SimError::new(format!(
            "--remove {} names no subject: subjects are numbered 1 to {}",
            options.remove, options.subjects
        )));
    }
    let capacities = draw_capacities(options.seed, options.subjects);
    let mut table = Vec::new();
    for rule in [
        Rule::RoundRobin,
        Rule::CapacityShare,
        Rule::LeastConnections,
        Rule::ConsistentHash,
    ] {
        for &load in &options.loads {
            let (shares, _) = distribute(rule, load, &capacities, None, options.virtual_nodes);
            table.push(row(rule, load, &shares, &capacities));
        }
    }
    let removed = options.remove - 1;
    let rows = [
        Rule::RoundRobin,
        Rule::LeastConnections,
        Rule::ConsistentHash,
    ]
    .into_iter()
    .map(|rule| {
        let load = options.removal_load;
        let (shares, before) = distribute(rule, load, &capacities, None, options.virtual_nodes);
        let (_, after) = distribute(
            rule,
            load,
            &capacities,
            Some(removed),
            options.virtual_nodes,
        );
        RemovalRow {
            rule: rule.name(),
            removed_share: shares[removed],
            moved: before.iter().zip(&after).filter(|(b, a)| b != a).count() as u64,
        }
    })
    .collect();
    Ok(SubjectsReport {
        subjects: options.subjects,
        total_capacity: capacities.iter().sum(),
        min_capacity: capacities.iter().copied().min().unwrap_or(0),
        max_capacity: capacities.iter().copied().max().unwrap_or(0),
        table,
        removal: Removal {
            subject: options.remove,
            load: options.removal_load,
            rows,
        },
    })
}

/// Each subject draws capacity 20–100, then (unused here) latency, class and a flag, in that
/// order, as the model does: the draws must be consumed to keep the sequence.
fn draw_capacities(seed: u64, subjects: usize) -> Vec<u64> {
    let mut r = Lehmer::new(seed);
    (0..subjects)
        .map(|_| {
            let capacity = 20 + r.below(81);
            let _latency = r.below(45);
            let _class = r.below(3);
            let _special = r.below(9);
            capacity
        })
        .collect()
}

/// Distributes `load` units (keys 1..=load) over the subjects with `rule`, optionally with one
/// subject out of service. Returns units per subject and each key's subject.
fn distribute(
    rule: Rule,
    load: u64,
    capacities: &[u64],
    out_of_service: Option<usize>,
    virtual_nodes: u32,
) -> (Vec<u64>, Vec<usize>) {
    let backends = BackendSet::new(capacities.iter().enumerate().map(|(i, &c)| BackendSpec {
        id: (i + 1).to_string(),
        weight: c as u32,
    }));
    if let Some(out) = out_of_service {
        backends.set_up(out, false);
    }
    let mut shares = vec![0u64; capacities.len()];
    let mut keys = Vec::with_capacity(load as usize);
    let selector: Box<dyn Selector> = match rule {
        Rule::CapacityShare => {
            let mut weights = capacities.to_vec();
            if let Some(out) = out_of_service {
                weights[out] = 0;
            }
            return (CapacityShare::split(load, &weights).shares, keys);
        }
        Rule::RoundRobin => Box::new(RoundRobin::default()),
        Rule::LeastConnections => Box::new(LeastConnections::weighted()),
        // The model places subject `no` at knuth(no × 7919 + k) for k < virtual_nodes.
        Rule::ConsistentHash => {
            Box::new(HashRing::from_points((0..capacities.len()).flat_map(|i| {
                (0..u64::from(virtual_nodes))
                    .map(move |k| (knuth_ring_hash((i as u64 + 1) * 7919 + k), i))
            })))
        }
    };
    for key in 1..=load {
        let context = PickContext {
            key: Some(knuth_ring_hash(key)),
            ..PickContext::default()
        };
        let Some(chosen) = selector.pick(&backends, &context) else {
            break;
        };
        // Least connections counts what each subject was given as its open connections.
        backends.start(chosen);
        shares[chosen] += 1;
        keys.push(chosen);
    }
    (shares, keys)
}

fn row(rule: Rule, load: u64, shares: &[u64], capacities: &[u64]) -> LoadRow {
    let mut row = LoadRow {
        rule: rule.name(),
        load,
        overloaded: 0,
        overflow: 0,
        idle: 0,
        undistributed: load - shares.iter().sum::<u64>(),
        unloaded: shares.iter().filter(|&&s| s == 0).count() as u64,
    };
    for (&share, &capacity) in shares.iter().zip(capacities) {
        if share > capacity {
            row.overloaded += 1;
            row.overflow += share - capacity;
        }
        row.idle += capacity.saturating_sub(share);
    }
    row
}

impl SubjectsReport {
    /// The tables as text.
    pub fn render(&self) -> String {
        let mut out = format!(
            "subjects {} | total capacity {} | smallest {} largest {}\n\n",
            self.subjects, self.total_capacity, self.min_capacity, self.max_capacity
        );
        let mut table = Table::new(&[
            "rule",
            "load",
            "overloaded",
            "overflow",
            "idle",
            "undistributed",
            "unloaded",
        ]);
        for r in &self.table {
            table.row(vec![
                r.rule.into(),
                r.load.to_string(),
                r.overloaded.to_string(),
                r.overflow.to_string(),
                r.idle.to_string(),
                r.undistributed.to_string(),
                r.unloaded.to_string(),
            ]);
        }
        out.push_str(&table.render());
        out.push_str(&format!(
            "\nsubject {} leaves at load {}:\n",
            self.removal.subject, self.removal.load
        ));
        let mut table = Table::new(&["rule", "its share", "keys moved"]);
        for r in &self.removal.rows {
            table.row(vec![
                r.rule.into(),
                r.removed_share.to_string(),
                r.moved.to_string(),
            ]);
        }
        out.push_str(&table.render());
        out
    }
}
