//! A pool's pick told, not taken: the order a [`Call`](super::Call) picks in ([`Pool::preset`],
//! then the rule), each step asked through its explaining twin ([`Sticky::explain_by_key`],
//! [`Selector::explain`](trafik_balance::Selector::explain)), with what every candidate looked
//! like to the rule. Nothing is counted and no state moves.

use serde_json::{Value, json};
use trafik_balance::{Explained, Nanos};

use super::{Pool, Preset};
use crate::sticky::{Rebinding, Sticky};
use crate::view::Selection;

/// The explanation of the next pick of `pool` for a request the pool read as `selection`, at
/// `now` on the clock of the pool's calls (latency-aware rules decay their estimates by it).
pub fn explain(pool: &Pool, selection: &Selection, now: Nanos) -> Value {
    let context = trafik_balance::PickContext {
        now,
        ..selection.context
    };
    let backends = &pool.backends;
    let by_key = |sticky: &Sticky| sticky.explain_by_key(backends, &context);
    let (decided_by, told) = match pool.preset(selection.bound, by_key) {
        Some(Preset::Bound(index)) => (
            "sticky cookie",
            Explained {
                pick: Some(index),
                reason: format!(
                    "the client's cookie binds it to {}, which is up{}",
                    pool.display_name(index),
                    if backends.is_draining(index) {
                        " (draining, it keeps the sessions bound to it)"
                    } else {
                        ""
                    }
                ),
                latency_estimates: Vec::new(),
            },
        ),
        Some(Preset::ByKey(told)) => ("key stickiness", told),
        None => ("rule", pool.selector.explain(backends, &context)),
    };
    let candidates: Vec<Value> = (0..pool.members.len())
        .map(|index| candidate(pool, index, &told, &context))
        .collect();
    let sticky = pool.sticky.as_ref().map(|sticky| {
        let binding = match (selection.bound, selection.rebinding()) {
            (Some(index), _) => format!("bound by cookie to {}", pool.display_name(index)),
            (None, Some(Rebinding::New)) if sticky.uses_cookie() => {
                "no valid cookie: the answer binds the client to the backend picked".to_owned()
            }
            (None, Some(Rebinding::Lost)) => {
                "its cookie's backend cannot take it: the session is lost and re-bound".to_owned()
            }
            (None, Some(Rebinding::Foreign)) => {
                "a cookie this pool did not sign: re-bound".to_owned()
            }
            _ => match context.key {
                Some(key) => format!("key {key:#018x} stays on its home backend while it is up"),
                None => "the request carries no key: spread like any other".to_owned(),
            },
        };
        json!({ "mode": sticky.mode(), "binding": binding })
    });
    let mut notes = Vec::new();
    if let Some(index) = told.pick {
        if let Some(share) = pool.slow_start.share(index) {
            notes.push(format!(
                "{} is in its slow start and keeps {:.0} % of its picks: this one may go to another backend",
                pool.display_name(index),
                share * 100.0
            ));
        }
        if pool.at_request_limit(index) {
            notes.push(format!(
                "{} is at max_requests_per_backend: passed over for another, or the queue",
                pool.display_name(index)
            ));
        }
    }
    json!({
        "pool": pool.plan.name,
        "algorithm": pool.plan.algorithm.name(),
        "key": context.key.map(|key| format!("{key:#018x}")),
        "decided_by": decided_by,
        "reason": told.reason,
        "sticky": sticky,
        "notes": notes,
        "candidates": candidates,
        "backend": told.pick.map(|index| json!({
            "name": pool.display_name(index),
            "address": pool.address(index).to_string(),
        })),
    })
}

/// What the rule read of backend `index`.
fn candidate(
    pool: &Pool,
    index: usize,
    told: &Explained,
    context: &trafik_balance::PickContext,
) -> Value {
    let backends = &pool.backends;
    let standing = pool.passive.as_ref().map(|p| p.standing(index));
    let in_flight = pool.members[index]
        .counters
        .sum(|c| crate::counters::read_gauge(&c.in_flight));
    json!({
        "name": pool.display_name(index),
        "address": pool.address(index).to_string(),
        "chosen": told.pick == Some(index),
        "available": backends.is_available(index, context),
        "up": backends.is_up(index),
        "draining": backends.is_draining(index),
        "ejected": backends.is_ejected(index),
        "ejected_seconds_left": standing.and_then(|s| s.seconds_left),
        "in_flight": in_flight,
        "weight": backends.spec(index).weight,
        "slow_start_share": pool.slow_start.share(index),
        "at_request_limit": pool.at_request_limit(index),
        "ewma_ms": told.latency_estimates.get(index).map(|nanos| nanos / 1e6),
    })
}
