//! The push-vs-pull lesson's model: a common class of objects asked for at every edge and a
//! private class asked for at one edge each, distributed by pull (fetched on a miss and again
//! when the copy expires), push (sent to every edge ahead of time, and again when it changes)
//! or hybrid (common pushed, private pulled).
//!
//! Each edge's copy of the common objects is a `trafik-cache` stored response with the TTL as
//! its `max-age`; whether an edge must fetch again is that object's own freshness decision.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Serialize;
use trafik_cache::{CacheControl, Rules, Stored, Use};

use crate::SimError;
use crate::table::Table;

#[derive(Clone, Debug)]
pub struct DistributionOptions {
    pub edges: u64,
    /// Rounds a pulled copy stays fresh.
    pub ttl: u64,
    pub rounds: u64,
    /// The round in which the common objects get a new version.
    pub update_round: u64,
    pub common_objects: u64,
    /// Private objects: the previous lesson's requests reaching the app (20,046).
    pub private_objects: u64,
    /// Edge k's first copy expires in round 1 + (k × stagger) mod ttl.
    pub stagger: u64,
}

impl Default for DistributionOptions {
    fn default() -> Self {
        DistributionOptions {
            edges: 12,
            ttl: 300,
            rounds: 900,
            update_round: 100,
            common_objects: 20,
            private_objects: 20_046,
            stagger: 27,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct DistributionReport {
    pub edges: u64,
    pub ttl: u64,
    pub rounds: u64,
    pub update_round: u64,
    pub classes: Vec<ClassRow>,
    pub modes: Vec<ModeRow>,
    /// Messages of push divided by those of pull.
    pub message_ratio: f64,
    /// Stale rounds of pull per edge, and as a share of the TTL.
    pub stale_rounds_per_edge: f64,
    pub stale_share_of_ttl: f64,
    /// The private class's waste share if each object were asked for at two edges.
    pub private_waste_share_two_edges: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ClassRow {
    pub class: &'static str,
    pub objects: u64,
    /// Edges that ask for each object.
    pub edges: u64,
    pub pull_requests: u64,
    pub push_requests: u64,
    pub wasted: u64,
    pub wasted_share: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ModeRow {
    pub mode: &'static str,
    pub origin_requests: u64,
    pub pushed: u64,
    pub wasted: u64,
    /// Edge-rounds in which an edge served the old version after the update.
    pub stale_rounds: u64,
    pub messages: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Pull,
    Push,
}

pub fn run(options: &DistributionOptions) -> Result<DistributionReport, SimError> {
    if options.edges < 2 || options.ttl == 0 {
        return Err(SimError::new(
            "--edges must be at least 2 and --ttl at least 1",
        ));
    }
    let classes = [
        ("common", options.common_objects, options.edges),
        ("private", options.private_objects, 1),
    ];
    let class_rows: Vec<ClassRow> = classes
        .iter()
        .map(|&(class, objects, edges)| cost(class, objects, edges, options.edges))
        .collect();
    let modes: Vec<ModeRow> = [
        ("pull", Mode::Pull, Mode::Pull),
        ("push", Mode::Push, Mode::Push),
        ("hybrid", Mode::Push, Mode::Pull),
    ]
    .into_iter()
    .map(|(name, common, private)| distribute(options, &class_rows, name, common, private))
    .collect();
    let pull = &modes[0];
    let push = &modes[1];
    let stale_rounds_per_edge = pull.stale_rounds as f64 / options.edges as f64;
    Ok(DistributionReport {
        edges: options.edges,
        ttl: options.ttl,
        rounds: options.rounds,
        update_round: options.update_round,
        message_ratio: push.messages as f64 / pull.messages.max(1) as f64,
        stale_rounds_per_edge,
        stale_share_of_ttl: stale_rounds_per_edge / options.ttl as f64,
        private_waste_share_two_edges: cost("private", options.private_objects, 2, options.edges)
            .wasted_share,
        classes: class_rows,
        modes,
    })
}

/// Pull asks once per object and edge that wants it; push sends every object to every edge.
fn cost(class: &'static str, objects: u64, asking: u64, edges: u64) -> ClassRow {
    let pull_requests = objects * asking;
    let push_requests = objects * edges;
    ClassRow {
        class,
        objects,
        edges: asking,
        pull_requests,
        push_requests,
        wasted: push_requests.saturating_sub(pull_requests),
        wasted_share: 1.0 - asking as f64 / edges as f64,
    }
}

fn distribute(
    options: &DistributionOptions,
    classes: &[ClassRow],
    mode: &'static str,
    common: Mode,
    private: Mode,
) -> ModeRow {
    let mut row = ModeRow {
        mode,
        origin_requests: 0,
        pushed: 0,
        wasted: 0,
        stale_rounds: 0,
        messages: 0,
    };
    for (class, how) in classes.iter().zip([common, private]) {
        match how {
            Mode::Push => {
                row.pushed += class.push_requests;
                row.wasted += class.wasted;
                row.messages += class.push_requests;
            }
            Mode::Pull => {
                row.origin_requests += class.pull_requests;
                row.messages += class.pull_requests;
            }
        }
    }
    // Round r is second r after `start`; each edge's copy of the common objects was stored so
    // that it expires in its staggered round.
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(10 * options.ttl.max(options.rounds));
    let at = |round: u64| start + Duration::from_secs(round);
    let before = |round: u64| start - Duration::from_secs(round);
    let rules = Rules {
        default_ttl: Duration::ZERO,
        stale_while_revalidate: Duration::ZERO,
        stale_if_error: Duration::ZERO,
    };
    let mut copies: Vec<Stored> = (0..options.edges)
        .map(|edge| {
            let expires = 1 + (edge * options.stagger) % options.ttl;
            let stored_at = if expires >= options.ttl {
                at(expires - options.ttl)
            } else {
                before(options.ttl - expires)
            };
            copy(options.ttl, 1, stored_at, &rules)
        })
        .collect();
    for round in 1..=options.rounds {
        let now = at(round);
        if common == Mode::Push && round == options.update_round {
            for copy in &mut copies {
                copy.version = 2;
            }
            row.messages += options.edges;
        }
        for stored in &mut copies {
            if common == Mode::Pull && !matches!(stored.usable(now), Use::Fresh { .. }) {
                let version = if round >= options.update_round { 2 } else { 1 };
                *stored = copy(options.ttl, version, now, &rules);
                row.origin_requests += 1;
                row.messages += 1;
            }
            if round >= options.update_round && stored.version == 1 {
                row.stale_rounds += 1;
            }
        }
    }
    row
}

/// An edge's copy of the common objects, fetched at `at` with `max-age=ttl`.
fn copy(ttl: u64, version: u64, at: SystemTime, rules: &Rules) -> Stored {
    let mut headers = HeaderMap::new();
    let max_age = HeaderValue::from_str(&format!("max-age={ttl}")).expect("digits are a value");
    headers.insert(header::CACHE_CONTROL, max_age);
    let control = CacheControl::parse(&headers);
    Stored::new(
        StatusCode::OK,
        headers,
        Bytes::new(),
        &control,
        rules,
        at,
        at,
        version,
    )
    .expect("a copy with max-age is storable")
}

impl DistributionReport {
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} edges, TTL {} rounds, {} rounds, the common objects change in round {}\n\n",
            self.edges, self.ttl, self.rounds, self.update_round
        );
        let mut table = Table::new(&[
            "class",
            "objects",
            "asking edges",
            "pull",
            "push",
            "wasted",
            "wasted share",
        ]);
        for c in &self.classes {
            table.row(vec![
                c.class.into(),
                c.objects.to_string(),
                c.edges.to_string(),
                c.pull_requests.to_string(),
                c.push_requests.to_string(),
                c.wasted.to_string(),
                format!("{:.1}%", c.wasted_share * 100.0),
            ]);
        }
        out.push_str(&table.render());
        out.push('\n');
        let mut table = Table::new(&[
            "mode",
            "origin requests",
            "pushed",
            "wasted",
            "stale rounds",
            "messages",
        ]);
        for m in &self.modes {
            table.row(vec![
                m.mode.into(),
                m.origin_requests.to_string(),
                m.pushed.to_string(),
                m.wasted.to_string(),
                m.stale_rounds.to_string(),
                m.messages.to_string(),
            ]);
        }
        out.push_str(&table.render());
        out.push_str(&format!(
            "\nmessages push/pull = {:.2}\n\
             stale rounds per edge (pull) = {:.1} ({:.2} of the TTL)\n\
             private objects asked at two edges: wasted share {:.1}% (one edge: {:.1}%)\n",
            self.message_ratio,
            self.stale_rounds_per_edge,
            self.stale_share_of_ttl,
            self.private_waste_share_two_edges * 100.0,
            self.classes[1].wasted_share * 100.0,
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lesson's printed tables (yayma/olc.mjs).
    #[test]
    fn the_course_tables_with_defaults() {
        let report = run(&DistributionOptions::default()).unwrap();
        let modes: Vec<_> = report
            .modes
            .iter()
            .map(|m| {
                (
                    m.mode,
                    m.origin_requests,
                    m.pushed,
                    m.wasted,
                    m.stale_rounds,
                    m.messages,
                )
            })
            .collect();
        assert_eq!(
            modes,
            [
                ("pull", 20322, 0, 0, 1794, 20322),
                ("push", 0, 240792, 220506, 0, 240804),
                ("hybrid", 20046, 240, 0, 0, 20298),
            ]
        );
        let classes: Vec<_> = report
            .classes
            .iter()
            .map(|c| {
                (
                    c.class,
                    c.objects,
                    c.edges,
                    c.pull_requests,
                    c.push_requests,
                    c.wasted,
                )
            })
            .collect();
        assert_eq!(
            classes,
            [
                ("common", 20, 12, 240, 240, 0),
                ("private", 20046, 1, 20046, 240552, 220506),
            ]
        );
        assert_eq!(format!("{:.2}", report.message_ratio), "11.85");
        assert_eq!(format!("{:.1}", report.stale_rounds_per_edge), "149.5");
        assert_eq!(
            format!("{:.1}", report.private_waste_share_two_edges * 100.0),
            "83.3"
        );
    }
}
