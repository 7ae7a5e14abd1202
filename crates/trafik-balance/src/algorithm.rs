use std::fmt;
use std::str::FromStr;

use crate::{BackendSet, RoundRobin, Selector};

/// The selection rules a pool can be configured with, by their configuration names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Algorithm {
    /// [`RoundRobin`].
    #[default]
    RoundRobin,
}

impl Algorithm {
    /// Every algorithm, in the order help texts list them.
    pub const ALL: &'static [Algorithm] = &[Algorithm::RoundRobin];

    /// The name used in configuration files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::RoundRobin => "round-robin",
        }
    }

    /// Builds the rule for a pool. Hash rules place `backends` here, once per pool.
    pub fn build(self, _backends: &BackendSet) -> Box<dyn Selector> {
        match self {
            Algorithm::RoundRobin => Box::new(RoundRobin::default()),
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
    fn every_algorithm_parses_back_from_its_name() {
        for &algorithm in Algorithm::ALL {
            assert_eq!(algorithm.name().parse::<Algorithm>(), Ok(algorithm));
        }
    }

    #[test]
    fn an_unknown_name_lists_the_known_ones() {
        let error = "fastest".parse::<Algorithm>().unwrap_err();
        assert!(error.to_string().contains("round-robin"), "{error}");
    }
}
