//! The stickiness lesson's model: a skewed client mix on 3 then 4 replicas, per-request
//! round robin against sticky bindings by `key mod N` and on the ring — the load each replica
//! carries, the clients re-bound when a replica is added and the sessions lost when one fails.

use serde::Serialize;
use trafik_balance::{
    BackendSet, BackendSpec, HashRing, Modulo, PickContext, RoundRobin, Selector,
};

use crate::SimError;
use crate::course::fnv_mix32;
use crate::table::Table;

#[derive(Clone, Debug)]
pub struct StickyOptions {
    /// (name prefix, clients, requests per client).
    pub clients: Vec<(String, usize, u64)>,
    pub virtual_nodes: u32,
}

impl Default for StickyOptions {
    fn default() -> Self {
        StickyOptions {
            clients: vec![
                ("buyuk".into(), 1, 2000),
                ("orta".into(), 9, 400),
                ("kucuk".into(), 90, 50),
            ],
            virtual_nodes: 200,
        }
    }
}

/// Parses `name:clients:requests,...`.
pub fn parse_clients(text: &str) -> Result<Vec<(String, usize, u64)>, SimError> {
    text.split(',')
        .map(|group| {
            let parts: Vec<&str> = group.split(':').collect();
            match parts.as_slice() {
                [name, count, requests] if !name.is_empty() => Ok((
                    name.to_string(),
                    count.parse().map_err(|_| {
                        SimError::new(format!(
                            "client count {count:?} in {group:?} is not a whole number"
                        ))
                    })?,
                    requests.parse().map_err(|_| {
                        SimError::new(format!(
                            "request count {requests:?} in {group:?} is not a whole number"
                        ))
                    })?,
                )),
                _ => Err(SimError::new(format!(
                    "client group {group:?} should be name:clients:requests, such as buyuk:1:2000"
                ))),
            }
        })
        .collect()
}

#[derive(Clone, Debug, Serialize)]
pub struct StickyReport {
    pub clients: usize,
    pub requests: u64,
    /// The largest client's share of all requests.
    pub largest_share: f64,
    pub rows: Vec<LoadRow>,
    pub scale_out: Vec<ScaleOutRow>,
    pub failure: Vec<FailureRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LoadRow {
    pub rule: &'static str,
    pub load_before: Vec<u64>,
    pub imbalance_before: f64,
    pub load_after: Vec<u64>,
    pub imbalance_after: f64,
    /// How much the busiest replica's share fell when a replica was added.
    pub peak_drop: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ScaleOutRow {
    pub rule: &'static str,
    pub rebound_clients: usize,
    pub rebound_share: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct FailureRow {
    pub rule: &'static str,
    pub lost_sessions: usize,
    pub lost_share: f64,
}

struct Client {
    name: String,
    requests: u64,
}

const RULES: [&str; 3] = ["non-sticky", "sticky-modulo", "sticky-consistent"];

pub fn run(options: &StickyOptions) -> Result<StickyReport, SimError> {
    let clients: Vec<Client> = options
        .clients
        .iter()
        .flat_map(|(prefix, count, requests)| {
            (0..*count).map(move |i| Client {
                name: format!("{prefix}-{i}"),
                requests: *requests,
            })
        })
        .collect();
    let total: u64 = clients.iter().map(|c| c.requests).sum();
    if total == 0 {
        return Err(SimError::new("--clients describes no requests"));
    }
    if options.virtual_nodes == 0 {
        return Err(SimError::new("--vnodes must be at least 1"));
    }
    let three = replicas(3);
    let four = replicas(4);
    let model = Model {
        clients: &clients,
        total,
        virtual_nodes: options.virtual_nodes,
    };

    let rows = RULES
        .iter()
        .map(|&rule| {
            let (before, after) = (model.load(rule, &three), model.load(rule, &four));
            let peak = |load: &[u64]| *load.iter().max().unwrap_or(&0) as f64 / total as f64;
            LoadRow {
                rule,
                imbalance_before: peak(&before) * 3.0,
                imbalance_after: peak(&after) * 4.0,
                peak_drop: 1.0 - peak(&after) / peak(&before),
                load_before: before,
                load_after: after,
            }
        })
        .collect();
    let scale_out = RULES[1..]
        .iter()
        .map(|&rule| {
            let (before, after) = (
                model.bind(rule, &three, None),
                model.bind(rule, &four, None),
            );
            let moved: Vec<&Client> = clients
                .iter()
                .zip(before.iter().zip(&after))
                .filter(|(_, (b, a))| three[**b] != four[**a])
                .map(|(c, _)| c)
                .collect();
            ScaleOutRow {
                rule,
                rebound_clients: moved.len(),
                rebound_share: moved.iter().map(|c| c.requests).sum::<u64>() as f64 / total as f64,
            }
        })
        .collect();
    // k1 fails: a session is lost when its client must move.
    let failure = RULES
        .iter()
        .map(|&rule| {
            if rule == "non-sticky" {
                return FailureRow {
                    rule,
                    lost_sessions: 0,
                    lost_share: 0.0,
                };
            }
            let (before, after) = (
                model.bind(rule, &three, None),
                model.bind(rule, &three, Some(0)),
            );
            let lost: Vec<&Client> = clients
                .iter()
                .zip(before.iter().zip(&after))
                .filter(|(_, (b, a))| b != a)
                .map(|(c, _)| c)
                .collect();
            FailureRow {
                rule,
                lost_sessions: lost.len(),
                lost_share: lost.iter().map(|c| c.requests).sum::<u64>() as f64 / total as f64,
            }
        })
        .collect();
    Ok(StickyReport {
        clients: clients.len(),
        requests: total,
        largest_share: clients.iter().map(|c| c.requests).max().unwrap_or(0) as f64 / total as f64,
        rows,
        scale_out,
        failure,
    })
}

fn replicas(count: usize) -> Vec<String> {
    (1..=count).map(|i| format!("k{i}")).collect()
}

struct Model<'a> {
    clients: &'a [Client],
    total: u64,
    virtual_nodes: u32,
}

impl Model<'_> {
    /// Each client's replica under a sticky rule, with replica `down` failed if given.
    fn bind(&self, rule: &str, names: &[String], down: Option<usize>) -> Vec<usize> {
        let backends = set(names);
        if let Some(down) = down {
            backends.set_up(down, false);
        }
        let selector: Box<dyn Selector> = if rule == "sticky-modulo" {
            Box::new(Modulo)
        } else {
            // The lesson's ring: each replica at `karma("{name}#{v}")`.
            let v = self.virtual_nodes;
            Box::new(HashRing::from_points(names.iter().enumerate().flat_map(
                |(i, name)| (0..v).map(move |v| (u64::from(fnv_mix32(&format!("{name}#{v}"))), i)),
            )))
        };
        self.clients
            .iter()
            .map(|c| {
                let context = PickContext {
                    key: Some(u64::from(fnv_mix32(&c.name))),
                    ..PickContext::default()
                };
                selector.pick(&backends, &context).unwrap_or(0)
            })
            .collect()
    }

    /// Requests each replica serves.
    fn load(&self, rule: &str, names: &[String]) -> Vec<u64> {
        let mut load = vec![0u64; names.len()];
        if rule == "non-sticky" {
            // Every request is its own decision, in turn.
            let backends = set(names);
            let rr = RoundRobin::default();
            for _ in 0..self.total {
                load[rr.pick(&backends, &PickContext::default()).unwrap_or(0)] += 1;
            }
        } else {
            for (client, replica) in self.clients.iter().zip(self.bind(rule, names, None)) {
                load[replica] += client.requests;
            }
        }
        load
    }
}

fn set(names: &[String]) -> BackendSet {
    BackendSet::new(names.iter().map(|n| BackendSpec {
        id: n.clone(),
        weight: 1,
    }))
}

impl StickyReport {
    pub fn render(&self) -> String {
        let join = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join("/");
        let mut out = format!(
            "{} clients, {} requests; largest client's share = {:.4}\n\n",
            self.clients, self.requests, self.largest_share
        );
        let mut table = Table::new(&[
            "rule",
            "load on 3",
            "imbalance",
            "load on 4",
            "imbalance",
            "busiest drop",
        ]);
        for r in &self.rows {
            table.row(vec![
                r.rule.into(),
                join(&r.load_before),
                format!("{:.3}", r.imbalance_before),
                join(&r.load_after),
                format!("{:.3}", r.imbalance_after),
                format!("{:.4}", r.peak_drop),
            ]);
        }
        out.push_str(&table.render());
        out.push_str("\nadding a replica re-binds:\n");
        let mut table = Table::new(&["rule", "clients", "request share"]);
        for r in &self.scale_out {
            table.row(vec![
                r.rule.into(),
                format!("{}/{}", r.rebound_clients, self.clients),
                format!("{:.4}", r.rebound_share),
            ]);
        }
        out.push_str(&table.render());
        out.push_str("\nk1 failing on 3 replicas loses:\n");
        let mut table = Table::new(&["rule", "sessions", "request share"]);
        for r in &self.failure {
            table.row(vec![
                r.rule.into(),
                format!("{}/{}", r.lost_sessions, self.clients),
                format!("{:.4}", r.lost_share),
            ]);
        }
        out.push_str(&table.render());
        out
    }
}
