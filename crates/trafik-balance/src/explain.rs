//! What a rule would pick for a request, and why, without taking the pick: the same code as
//! [`Selector::pick`](crate::Selector::pick) run on a copy of the rule's moving parts (the
//! round-robin turn, the random draws), so the explained pick is the next real one as long as
//! no other request picks in between.

/// A rule's pick told with its reason.
#[derive(Clone, Debug, PartialEq)]
pub struct Explained {
    /// The backend the next pick goes to, `None` when none is available.
    pub pick: Option<usize>,
    /// What the rule read and how it decided, in words.
    pub reason: String,
    /// Per backend, the latency estimate (nanoseconds) a latency-aware rule read; empty for
    /// the others.
    pub latency_estimates: Vec<f64>,
}

impl Explained {
    pub(crate) fn new(pick: Option<usize>, reason: String) -> Self {
        Explained {
            pick,
            reason,
            latency_estimates: Vec::new(),
        }
    }

    /// The answer when no backend may take the request.
    pub(crate) fn none_available() -> Self {
        Explained::new(
            None,
            "no backend is available (down, draining, ejected or tried)".into(),
        )
    }
}

/// The reason of a rule that draws two backends and keeps the better: `told` says what the
/// rule read of each.
pub(crate) fn compared(
    (a, b): (usize, Option<usize>),
    chosen: &str,
    told: impl Fn(usize) -> String,
) -> String {
    match b {
        Some(b) => format!("compared {} and {} → {chosen}", told(a), told(b)),
        None => format!("{} is the only backend available", told(a)),
    }
}
