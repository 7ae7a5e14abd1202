use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::{
    BackendSet, BoundedLoadRing, DEFAULT_TABLE_SIZE, HashRing, LeastConnections, Maglev, Modulo,
    PeakEwma, PowerOfTwoChoices, RoundRobin, Selector, SmoothWeightedRoundRobin, WeightedRandom,
};

/// The selection rules a pool can be configured with, by their configuration names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Algorithm {
    /// [`RoundRobin`].
    #[default]
    RoundRobin,
    /// [`SmoothWeightedRoundRobin`].
    WeightedRoundRobin,
    /// [`LeastConnections::weighted`]: in flight / weight (equal weights: the raw count).
    LeastConnections,
    /// [`LeastConnections::raw`]: in flight, ignoring weights.
    LeastConnectionsRaw,
    /// [`PowerOfTwoChoices`].
    PowerOfTwo,
    /// [`PeakEwma`].
    PeakEwma,
    /// [`WeightedRandom`].
    Random,
    /// [`HashRing`] (needs a hash key).
    ConsistentHash,
    /// [`Maglev`] (needs a hash key).
    Maglev,
    /// [`BoundedLoadRing`] (needs a hash key).
    BoundedLoad,
    /// [`Modulo`] (needs a hash key).
    Modulo,
}

/// The parameters some rules take.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectorOptions {
    /// Points per backend on a consistent-hash ring.
    pub virtual_nodes: u32,
    /// Bounded loads: no backend above `ceil(factor × average)`.
    pub balance_factor: f64,
    /// Maglev table size (a prime).
    pub table_size: u32,
    /// How fast peak-EWMA forgets a slow answer.
    pub ewma_decay: Duration,
    /// Seed of the random rules.
    pub seed: u64,
}

impl Default for SelectorOptions {
    fn default() -> Self {
        SelectorOptions {
            virtual_nodes: 160,
            balance_factor: 1.25,
            table_size: DEFAULT_TABLE_SIZE,
            ewma_decay: Duration::from_secs(10),
            seed: 0x7472_6166_696b,
        }
    }
}

impl Algorithm {
    /// Every algorithm, in the order help texts list them.
    pub const ALL: &'static [Algorithm] = &[
        Algorithm::RoundRobin,
        Algorithm::WeightedRoundRobin,
        Algorithm::LeastConnections,
        Algorithm::LeastConnectionsRaw,
        Algorithm::PowerOfTwo,
        Algorithm::PeakEwma,
        Algorithm::Random,
        Algorithm::ConsistentHash,
        Algorithm::Maglev,
        Algorithm::BoundedLoad,
        Algorithm::Modulo,
    ];

    /// The name used in configuration files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::RoundRobin => "round-robin",
            Algorithm::WeightedRoundRobin => "weighted-round-robin",
            Algorithm::LeastConnections => "least-connections",
            Algorithm::LeastConnectionsRaw => "least-connections-raw",
            Algorithm::PowerOfTwo => "power-of-two",
            Algorithm::PeakEwma => "peak-ewma",
            Algorithm::Random => "random",
            Algorithm::ConsistentHash => "consistent-hash",
            Algorithm::Maglev => "maglev",
            Algorithm::BoundedLoad => "bounded-load",
            Algorithm::Modulo => "modulo",
        }
    }

    /// Whether the rule places requests by a hash key (and so wants one configured).
    pub fn uses_key(self) -> bool {
        matches!(
            self,
            Algorithm::ConsistentHash
                | Algorithm::Maglev
                | Algorithm::BoundedLoad
                | Algorithm::Modulo
        )
    }

    /// Whether the rule learns from observed latencies and reads the time.
    pub fn uses_latency(self) -> bool {
        self == Algorithm::PeakEwma
    }

    /// Whether the rule reads requests in flight ([`BackendSet::in_flight`]), so the caller
    /// must keep them with [`BackendSet::start`] and [`BackendSet::finish`].
    pub fn reads_in_flight(self) -> bool {
        matches!(
            self,
            Algorithm::LeastConnections
                | Algorithm::LeastConnectionsRaw
                | Algorithm::PowerOfTwo
                | Algorithm::PeakEwma
                | Algorithm::BoundedLoad
        )
    }

    /// Builds the rule for a pool. Hash rules place `backends` here, once per pool.
    pub fn build(self, backends: &BackendSet, options: &SelectorOptions) -> Box<dyn Selector> {
        match self {
            Algorithm::RoundRobin => Box::new(RoundRobin::default()),
            Algorithm::WeightedRoundRobin => Box::new(SmoothWeightedRoundRobin::new(backends)),
            Algorithm::LeastConnections => Box::new(LeastConnections::weighted()),
            Algorithm::LeastConnectionsRaw => Box::new(LeastConnections::raw()),
            Algorithm::PowerOfTwo => Box::new(PowerOfTwoChoices::new(options.seed)),
            Algorithm::PeakEwma => {
                Box::new(PeakEwma::new(backends, options.ewma_decay, options.seed))
            }
            Algorithm::Random => Box::new(WeightedRandom::new(backends, options.seed)),
            Algorithm::ConsistentHash => Box::new(HashRing::new(backends, options.virtual_nodes)),
            Algorithm::Maglev => Box::new(Maglev::new(backends, options.table_size)),
            Algorithm::BoundedLoad => Box::new(BoundedLoadRing::new(
                HashRing::new(backends, options.virtual_nodes),
                options.balance_factor,
            )),
            Algorithm::Modulo => Box::new(Modulo),
        }
    }

    /// The accepted names, comma separated, for error messages.
    pub fn names() -> String {
        Self::ALL
            .iter()
            .map(|a| a.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error for a name that is not an algorithm.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownAlgorithm(pub String);

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown algorithm {:?}; expected one of: {}",
            self.0,
            Algorithm::names()
        )
    }
}

impl std::error::Error for UnknownAlgorithm {}

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|a| a.name() == name)
            .ok_or_else(|| UnknownAlgorithm(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_parses_back_from_its_name_and_builds_a_rule_of_that_name() {
        let backends = BackendSet::new((0..3).map(|i| crate::BackendSpec {
            id: format!("b{i}"),
            weight: 1,
        }));
        for &algorithm in Algorithm::ALL {
            assert_eq!(algorithm.name().parse::<Algorithm>(), Ok(algorithm));
            let rule = algorithm.build(&backends, &SelectorOptions::default());
            assert_eq!(rule.name(), algorithm.name());
        }
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones() {
        let error = "fastest".parse::<Algorithm>().unwrap_err();
        assert!(
            error
                .to_string()
                .contains("round-robin, weighted-round-robin"),
            "{error}"
        );
    }
}
