//! The fixed order of a route's stages and what each may read (lesson 13: a check moves to the
//! edge only if it reads request metadata — headers, path, source address, size, token; checks
//! that read the application's records stay in the application).

/// A route's stages, in the order a request meets them. Responses meet the same stages in
/// reverse, so the access log, first in, writes last: after response shaping, with every
/// verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    AccessLog,
    Gate,
    Auth,
    RateLimit,
    BodyLimit,
    Cache,
    Target,
    ResponseShaping,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::AccessLog => "access-log",
            Stage::Gate => "gate",
            Stage::Auth => "auth",
            Stage::RateLimit => "rate-limit",
            Stage::BodyLimit => "body-limit",
            Stage::Cache => "cache",
            Stage::Target => "target",
            Stage::ResponseShaping => "response-shaping",
        }
    }
}

/// What a check reads to decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    Headers,
    Path,
    Query,
    SourceAddress,
    /// `Content-Length`, or the bytes counted while the body streams.
    Size,
    /// The bearer token, its form or its verified claims.
    Token,
    /// The JSON body's shape (never its meaning: which records it names).
    BodyShape,
    /// A record of the application (a shipment's owner, a contract's quota): not the edge's.
    Domain(String),
}

impl Input {
    /// Whether the edge has this input without asking the application.
    pub fn is_request_metadata(&self) -> bool {
        !matches!(self, Input::Domain(_))
    }
}

/// The reason `trafik check` gives for a check placed at the edge that reads domain data.
pub fn edge_refusal(stage: Stage, inputs: &[Input]) -> Option<String> {
    let domain: Vec<&str> = inputs
        .iter()
        .filter_map(|input| match input {
            Input::Domain(name) => Some(name.as_str()),
            _ => None,
        })
        .collect();
    (!domain.is_empty()).then(|| {
        format!(
            "the {} stage runs at the edge, which sees only request metadata (headers, path, source address, size, token); {} is the application's data, so this check belongs in the service",
            stage.name(),
            domain.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_run_in_the_documented_order() {
        let mut stages = [
            Stage::Target,
            Stage::Cache,
            Stage::BodyLimit,
            Stage::ResponseShaping,
            Stage::Auth,
            Stage::Gate,
            Stage::RateLimit,
            Stage::AccessLog,
        ];
        stages.sort();
        let names: Vec<&str> = stages.iter().map(|s| s.name()).collect();
        assert_eq!(
            names.join(" → "),
            "access-log → gate → auth → rate-limit → body-limit → cache → target → response-shaping"
        );
    }

    #[test]
    fn only_domain_inputs_are_refused_at_the_edge() {
        assert_eq!(
            edge_refusal(Stage::RateLimit, &[Input::SourceAddress, Input::Token]),
            None
        );
        let refusal =
            edge_refusal(Stage::RateLimit, &[Input::Domain("record:sozlesme".into())]).unwrap();
        assert!(refusal.contains("record:sozlesme"), "{refusal}");
    }
}
