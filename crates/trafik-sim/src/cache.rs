//! The CDN lesson's trace model: one request trace through a single cache, then through an edge
//! cache in front of an application cache. Each cache is a `trafik-cache` store, the one the
//! edge cache serves from, so the model measures the proxy's own eviction policy.
//!
//! The trace: shipments are tracked in "bursts" of up to `queries` requests; `open` bursts are
//! interleaved round robin; of every `queries` requests, the first `burst` go to an open burst
//! and the rest are keys seen once.

use serde::Serialize;
use trafik_cache::{Limits, Policy, Store};

use crate::SimError;
use crate::table::Table;

#[derive(Clone, Debug)]
pub struct CacheOptions {
    pub requests: u64,
    pub queries: u64,
    pub open: usize,
    /// Keys each cache holds.
    pub capacity: usize,
    /// Burst lengths of the table's rows, each 1..=queries.
    pub bursts: Vec<u64>,
    /// The burst length of the summary lines.
    pub summary_burst: u64,
    pub policy: Policy,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            requests: 200_000,
            queries: 10,
            open: 100,
            capacity: 1_000,
            bursts: vec![10, 5, 2],
            summary_burst: 10,
            policy: Policy::Lru,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CacheReport {
    pub requests: u64,
    pub queries: u64,
    pub open: usize,
    pub capacity: usize,
    pub policy: &'static str,
    pub rows: Vec<CacheRow>,
    pub summary: Summary,
}

/// One burst length: the single cache, then the edge cache and the application cache behind it.
#[derive(Clone, Debug, Serialize)]
pub struct CacheRow {
    pub burst: u64,
    pub single_hit_ratio: f64,
    pub edge_hit_ratio: f64,
    /// Requests the edge missed: they reach the application.
    pub app_requests: u64,
    pub app_hit_ratio: f64,
    /// Requests the application cache missed: they reach the store.
    pub store_requests: u64,
    /// Store requests with the single cache alone.
    pub single_store_requests: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub burst: u64,
    pub store_requests_without_edge: u64,
    pub store_requests_with_edge: u64,
    pub store_ratio: f64,
    pub app_requests: u64,
    pub app_ratio: f64,
    pub edge_hit_ratio: f64,
    /// The course's assumed edge hit ratio (V9) and the measured difference, in points.
    pub assumed_hit_ratio: f64,
    pub difference_points: f64,
}

/// The course's assumption V9, compared with the measured ratio.
const ASSUMED_HIT_RATIO: f64 = 0.90;

pub fn run(options: &CacheOptions) -> Result<CacheReport, SimError> {
    if options.queries == 0 || options.open == 0 || options.capacity == 0 {
        return Err(SimError::new(
            "--queries, --open and --capacity must be at least 1",
        ));
    }
    for &burst in options.bursts.iter().chain([&options.summary_burst]) {
        if burst == 0 || burst > options.queries {
            return Err(SimError::new(format!(
                "burst length {burst} should be between 1 and --queries ({})",
                options.queries
            )));
        }
    }
    let rows: Vec<CacheRow> = options.bursts.iter().map(|&b| row(options, b)).collect();
    let summary_row = rows
        .iter()
        .find(|r| r.burst == options.summary_burst)
        .cloned()
        .unwrap_or_else(|| row(options, options.summary_burst));
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let summary = Summary {
        burst: summary_row.burst,
        store_requests_without_edge: summary_row.single_store_requests,
        store_requests_with_edge: summary_row.store_requests,
        store_ratio: ratio(
            summary_row.store_requests,
            summary_row.single_store_requests,
        ),
        app_requests: summary_row.app_requests,
        app_ratio: ratio(summary_row.app_requests, options.requests),
        edge_hit_ratio: summary_row.edge_hit_ratio,
        assumed_hit_ratio: ASSUMED_HIT_RATIO,
        difference_points: (summary_row.edge_hit_ratio - ASSUMED_HIT_RATIO).abs() * 100.0,
    };
    Ok(CacheReport {
        requests: options.requests,
        queries: options.queries,
        open: options.open,
        capacity: options.capacity,
        policy: options.policy.name(),
        rows,
        summary,
    })
}

/// A cache of keys with its hit and miss counts.
struct Counted {
    store: Store<String, ()>,
    hits: u64,
    misses: u64,
}

impl Counted {
    fn new(options: &CacheOptions) -> Self {
        let limits = Limits {
            max_entries: options.capacity,
            // Every key weighs 1, so the byte limit is the same capacity.
            max_bytes: options.capacity as u64,
        };
        Counted {
            store: Store::new(options.policy, limits),
            hits: 0,
            misses: 0,
        }
    }

    /// Looks `key` up; a miss stores it (the answer fetched from behind).
    fn ask(&mut self, key: &str) -> bool {
        if self.store.get(key).is_some() {
            self.hits += 1;
            return true;
        }
        self.misses += 1;
        self.store.insert(key.to_owned(), ());
        false
    }

    fn ratio(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 {
            0.0
        } else {
            self.hits as f64 / total as f64
        }
    }
}

fn row(options: &CacheOptions, burst: u64) -> CacheRow {
    let mut single = Counted::new(options);
    let mut edge = Counted::new(options);
    let mut app = Counted::new(options);
    for key in Trace::new(options, burst) {
        single.ask(&key);
        if !edge.ask(&key) {
            app.ask(&key);
        }
    }
    CacheRow {
        burst,
        single_hit_ratio: single.ratio(),
        edge_hit_ratio: edge.ratio(),
        app_requests: edge.misses,
        app_hit_ratio: app.ratio(),
        store_requests: app.misses,
        single_store_requests: single.misses,
    }
}

/// The lesson's request trace for one burst length: the keys, in order.
pub fn trace(options: &CacheOptions, burst: u64) -> impl Iterator<Item = String> {
    Trace::new(options, burst)
}

/// The request trace: keys `G<n>` of bursts, `D<n>` of keys seen once.
struct Trace {
    requests: u64,
    queries: u64,
    burst: u64,
    open_limit: usize,
    /// Open bursts: (shipment number, requests left).
    open: Vec<(u64, u64)>,
    next_shipment: u64,
    next_single: u64,
    turn: usize,
    sent: u64,
}

impl Trace {
    fn new(options: &CacheOptions, burst: u64) -> Self {
        Trace {
            requests: options.requests,
            queries: options.queries,
            burst,
            open_limit: options.open,
            open: Vec::with_capacity(options.open),
            next_shipment: 1,
            next_single: 1,
            turn: 0,
            sent: 0,
        }
    }
}

impl Iterator for Trace {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        if self.sent == self.requests {
            return None;
        }
        let index = self.sent;
        self.sent += 1;
        if index % self.queries >= self.burst {
            self.next_single += 1;
            return Some(format!("D{}", self.next_single - 1));
        }
        while self.open.len() < self.open_limit {
            self.open.push((self.next_shipment, self.burst));
            self.next_shipment += 1;
        }
        self.turn = (self.turn + 1) % self.open.len();
        let (shipment, left) = &mut self.open[self.turn];
        let key = format!("G{shipment}");
        *left -= 1;
        if *left == 0 {
            self.open.remove(self.turn);
        }
        Some(key)
    }
}

impl CacheReport {
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} requests, {} queries per shipment, {} open bursts, caches of {} keys ({})\n\n",
            self.requests, self.queries, self.open, self.capacity, self.policy
        );
        let mut table = Table::new(&[
            "burst",
            "single cache",
            "edge hit",
            "reach app",
            "app hit",
            "reach store",
        ]);
        for r in &self.rows {
            table.row(vec![
                r.burst.to_string(),
                format!("{:.4}", r.single_hit_ratio),
                format!("{:.4}", r.edge_hit_ratio),
                r.app_requests.to_string(),
                format!("{:.4}", r.app_hit_ratio),
                r.store_requests.to_string(),
            ]);
        }
        out.push_str(&table.render());
        let s = &self.summary;
        out.push_str(&format!(
            "\nburst {}: store requests without the edge {}, with it {} (x{:.3})\n",
            s.burst, s.store_requests_without_edge, s.store_requests_with_edge, s.store_ratio
        ));
        out.push_str(&format!(
            "requests reaching the app {} -> {} (x{:.3})\n",
            self.requests, s.app_requests, s.app_ratio
        ));
        out.push_str(&format!(
            "measured edge hit ratio {:.4}, assumed {:.2} -> difference {:.2} points\n",
            s.edge_hit_ratio, s.assumed_hit_ratio, s.difference_points
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lesson's printed table (kenar/iz.mjs), reproduced on the LRU store.
    #[test]
    fn the_course_table_with_defaults() {
        let report = run(&CacheOptions::default()).unwrap();
        let got: Vec<(u64, String, String, u64, String, u64)> = report
            .rows
            .iter()
            .map(|r| {
                (
                    r.burst,
                    format!("{:.4}", r.single_hit_ratio),
                    format!("{:.4}", r.edge_hit_ratio),
                    r.app_requests,
                    format!("{:.4}", r.app_hit_ratio),
                    r.store_requests,
                )
            })
            .collect();
        let want = [
            (10, "0.8998", "0.8998", 20046, "0.0000", 20046),
            (5, "0.3998", "0.3998", 120044, "0.0000", 120044),
            (2, "0.0759", "0.0759", 184815, "0.0021", 184418),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|&(b, s, e, a, h, d)| (b, s.to_owned(), e.to_owned(), a, h.to_owned(), d))
            .collect();
        assert_eq!(got, want);
        assert_eq!(report.summary.store_requests_without_edge, 20046);
        assert_eq!(format!("{:.2}", report.summary.difference_points), "0.02");
    }

    #[test]
    fn a_burst_longer_than_the_queries_is_refused() {
        let options = CacheOptions {
            bursts: vec![11],
            ..CacheOptions::default()
        };
        assert!(run(&options).is_err());
    }
}
