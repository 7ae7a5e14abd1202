//! The queue model of "Dengeleme Algoritmaları": requests arrive every `arrival` rounds with
//! seeded costs; each replica serves its queue in order. Round robin against least
//! connections, with equal replicas and with one slowed down — plus power of two choices and
//! peak-EWMA, to show whether they beat least connections when a replica slows.

use std::time::Duration;

use serde::Serialize;
use trafik_balance::{
    BackendSet, BackendSpec, LeastConnections, PeakEwma, PickContext, PowerOfTwoChoices,
    RoundRobin, Selector,
};

use crate::SimError;
use crate::course::DoubleLcg;
use crate::table::Table;

/// One model round as time for the latency-aware rule.
const NANOS_PER_ROUND: u64 = 1_000_000;
/// Peak-EWMA forgets a slow answer over this many rounds.
const EWMA_DECAY_ROUNDS: u64 = 50;

#[derive(Clone, Debug)]
pub struct QueueOptions {
    pub replicas: usize,
    pub requests: usize,
    pub arrival: u64,
    pub seed: u64,
    /// Slow-down multipliers of the second scenario, one per replica.
    pub slow: Vec<u64>,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            replicas: 3,
            requests: 300,
            arrival: 2,
            seed: 20_240_730,
            slow: vec![3, 1, 1],
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct QueueReport {
    pub requests: usize,
    pub replicas: usize,
    pub arrival: u64,
    pub total_work: u64,
    pub utilization: f64,
    pub scenarios: Vec<Scenario>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    pub multipliers: Vec<u64>,
    pub rows: Vec<QueueRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct QueueRow {
    pub rule: &'static str,
    /// Rounds a request waited before its replica started it, on average.
    pub mean_wait: f64,
    /// The longest queue any replica had when a request arrived.
    pub max_queue: u64,
    /// The round the last request finished.
    pub finish: u64,
    /// Rounds of work each replica did.
    pub work: Vec<u64>,
}

const RULES: [&str; 4] = [
    "round-robin",
    "least-connections",
    "power-of-two",
    "peak-ewma",
];

pub fn run(options: &QueueOptions) -> Result<QueueReport, SimError> {
    if options.replicas == 0 || options.requests == 0 || options.arrival == 0 {
        return Err(SimError::new(
            "--replicas, --requests and --arrival must be at least 1",
        ));
    }
    if options.slow.len() != options.replicas {
        return Err(SimError::new(format!(
            "--slow has {} multipliers but there are {} replicas: give one per replica",
            options.slow.len(),
            options.replicas
        )));
    }
    if options.slow.contains(&0) {
        return Err(SimError::new("--slow multipliers must be at least 1"));
    }
    let mut lcg = DoubleLcg::new(options.seed);
    let costs: Vec<u64> = (0..options.requests).map(|_| lcg.next_cost()).collect();
    let total_work: u64 = costs.iter().sum();
    let scenarios = [vec![1; options.replicas], options.slow.clone()]
        .into_iter()
        .map(|multipliers| Scenario {
            rows: RULES
                .iter()
                .map(|&rule| simulate(rule, &costs, &multipliers, options))
                .collect(),
            multipliers,
        })
        .collect();
    Ok(QueueReport {
        requests: options.requests,
        replicas: options.replicas,
        arrival: options.arrival,
        total_work,
        utilization: (total_work as f64 / (options.requests as f64 * options.arrival as f64))
            / options.replicas as f64,
        scenarios,
    })
}

/// One replica's queue: when it is next free, the work it did, its requests' finish rounds
/// (with their arrival, for latency) and how many of them have finished.
#[derive(Default)]
struct Replica {
    free_at: u64,
    work: u64,
    finishes: Vec<(u64, u64)>,
    done: usize,
}

fn simulate(
    rule: &'static str,
    costs: &[u64],
    multipliers: &[u64],
    options: &QueueOptions,
) -> QueueRow {
    let backends = BackendSet::new((0..options.replicas).map(|i| BackendSpec {
        id: format!("k{}", i + 1),
        weight: 1,
    }));
    let selector: Box<dyn Selector> = match rule {
        "round-robin" => Box::new(RoundRobin::default()),
        "least-connections" => Box::new(LeastConnections::raw()),
        "power-of-two" => Box::new(PowerOfTwoChoices::new(options.seed)),
        _ => Box::new(PeakEwma::new(
            &backends,
            Duration::from_nanos(EWMA_DECAY_ROUNDS * NANOS_PER_ROUND),
            options.seed,
        )),
    };
    let mut replicas: Vec<Replica> = (0..options.replicas).map(|_| Replica::default()).collect();
    let (mut total_wait, mut max_queue) = (0u64, 0u64);
    for (i, &cost) in costs.iter().enumerate() {
        let now = i as u64 * options.arrival;
        // Requests finished by now leave their queues; their latency is what the rule learns,
        // in the order they finished.
        let mut finished = Vec::new();
        for (index, replica) in replicas.iter_mut().enumerate() {
            while replica.done < replica.finishes.len() && replica.finishes[replica.done].0 <= now {
                let (end, arrived) = replica.finishes[replica.done];
                finished.push((end, index, end - arrived));
                replica.done += 1;
                backends.finish(index);
            }
        }
        finished.sort_unstable();
        for (end, index, latency) in finished {
            selector.observe(
                index,
                Duration::from_nanos(latency * NANOS_PER_ROUND),
                end * NANOS_PER_ROUND,
            );
        }
        let open = replicas.iter().map(|r| (r.finishes.len() - r.done) as u64);
        max_queue = max_queue.max(open.max().unwrap_or(0));
        let context = PickContext {
            now: now * NANOS_PER_ROUND,
            ..PickContext::default()
        };
        let target = selector.pick(&backends, &context).unwrap_or(0);
        let replica = &mut replicas[target];
        let start = now.max(replica.free_at);
        total_wait += start - now;
        let work = cost * multipliers[target];
        replica.free_at = start + work;
        replica.work += work;
        replica.finishes.push((replica.free_at, now));
        backends.start(target);
    }
    QueueRow {
        rule,
        mean_wait: total_wait as f64 / costs.len() as f64,
        max_queue,
        finish: replicas.iter().map(|r| r.free_at).max().unwrap_or(0),
        work: replicas.iter().map(|r| r.work).collect(),
    }
}

impl QueueReport {
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} requests, {} replicas, one every {} rounds, total work {} rounds\nutilization with equal replicas = {:.3}\n",
            self.requests, self.replicas, self.arrival, self.total_work, self.utilization
        );
        for scenario in &self.scenarios {
            let label: Vec<String> = scenario.multipliers.iter().map(u64::to_string).collect();
            out.push_str(&format!(
                "\nreplica speed multipliers {}\n",
                label.join("/")
            ));
            let mut table = Table::new(&[
                "rule",
                "mean wait",
                "max queue",
                "finish",
                "work per replica",
            ]);
            for r in &scenario.rows {
                let work: Vec<String> = r.work.iter().map(u64::to_string).collect();
                table.row(vec![
                    r.rule.into(),
                    format!("{:.2}", r.mean_wait),
                    r.max_queue.to_string(),
                    r.finish.to_string(),
                    work.join("/"),
                ]);
            }
            out.push_str(&table.render());
        }
        out
    }
}
