//! Each model, with default options, reproduces the course's printed table number for number.
//! The tables are kept as the text printed them, in `fixtures/`.

use trafik_sim::{queue, remap, sticky, subjects};

/// The rows of a fixture that start with one of `labels`, each split into its fields after the
/// label.
fn rows(fixture: &str, labels: &[&str]) -> Vec<(String, Vec<String>)> {
    fixture
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let label = labels.iter().find(|l| line.starts_with(*l))?;
            let rest = line[label.len()..]
                .split_whitespace()
                .map(str::to_owned)
                .collect();
            Some((label.to_string(), rest))
        })
        .collect()
}

#[test]
fn seed_001_forty_subjects() {
    let fixture = include_str!("fixtures/seed001-subjects.txt");
    let report = subjects::run(&subjects::SubjectsOptions::default()).unwrap();
    assert!(fixture.starts_with(&format!(
        "özne {} | toplam kapasite {} | en küçük {} en büyük {}",
        report.subjects, report.total_capacity, report.min_capacity, report.max_capacity
    )));
    let names = [
        ("sirali", "round-robin"),
        ("kapasiteye gore", "capacity-share"),
        ("en az baglanti", "least-connections"),
        ("tutarli karma", "consistent-hash"),
    ];
    let labels: Vec<&str> = names.iter().map(|(turkish, _)| *turkish).collect();
    let printed = rows(fixture, &labels);
    // The main table has 7 fields per row; the removal table 2.
    let (main, removal): (Vec<_>, Vec<_>) = printed.into_iter().partition(|(_, f)| f.len() == 6);
    assert_eq!(main.len(), report.table.len());
    for ((label, fields), row) in main.iter().zip(&report.table) {
        let rule = names.iter().find(|(t, _)| t == label).unwrap().1;
        assert_eq!(row.rule, rule);
        let ours = [
            row.load,
            row.overloaded,
            row.overflow,
            row.idle,
            row.undistributed,
            row.unloaded,
        ];
        let theirs: Vec<u64> = fields.iter().map(|f| f.parse().unwrap()).collect();
        assert_eq!(ours.to_vec(), theirs, "{rule} at load {}", row.load);
    }
    assert_eq!(removal.len(), 3);
    for ((label, fields), row) in removal.iter().zip(&report.removal.rows) {
        assert_eq!(row.rule, names.iter().find(|(t, _)| t == label).unwrap().1);
        assert_eq!(
            vec![row.removed_share.to_string(), row.moved.to_string()],
            *fields
        );
    }
}

#[test]
fn queue_model_equal_and_slow_replicas() {
    let fixture = include_str!("fixtures/seed004-queue.txt");
    let report = queue::run(&queue::QueueOptions::default()).unwrap();
    assert!(fixture.starts_with(&format!(
        "{} istek, {} kopya, varis araligi {} tur, toplam is {} tur\nesit kopyalarda model dolulugu = {:.3}",
        report.requests, report.replicas, report.arrival, report.total_work, report.utilization
    )));
    let printed = rows(fixture, &["sirali", "en-az-baglanti"]);
    let ours: Vec<_> = report
        .scenarios
        .iter()
        .flat_map(|s| {
            s.rows
                .iter()
                .filter(|r| r.rule == "round-robin" || r.rule == "least-connections")
        })
        .collect();
    assert_eq!(printed.len(), ours.len());
    for ((label, fields), row) in printed.iter().zip(ours) {
        let work: Vec<String> = row.work.iter().map(u64::to_string).collect();
        let expected = vec![
            format!("{:.2}", row.mean_wait),
            row.max_queue.to_string(),
            row.finish.to_string(),
            work.join("/"),
        ];
        assert_eq!(*fields, expected, "{label} ({})", row.rule);
    }
}

#[test]
fn modulo_against_the_ring_and_the_cache_warm_up() {
    let fixture = include_str!("fixtures/seed004-hash.txt");
    let report = remap::run(&remap::RemapOptions::default()).unwrap();
    let printed = rows(fixture, &["bolme kalani", "tutarli karma"]);
    // Table rows: 4 numbers, after "(v=N)" for the ring; warm-up rows: 6 numbers.
    let (table, warmup): (Vec<_>, Vec<_>) = printed.into_iter().partition(|(_, f)| f.len() < 6);
    let course_rows: Vec<_> = report
        .rows
        .iter()
        .filter(|r| r.rule == "modulo" || r.rule == "ring")
        .collect();
    assert_eq!(table.len(), course_rows.len());
    for ((_, fields), row) in table.iter().zip(&course_rows) {
        let fields: Vec<&String> = fields.iter().filter(|f| !f.starts_with("(v=")).collect();
        let ours = [
            format!("{:.3}", row.imbalance_before),
            format!("{:.3}", row.imbalance_after),
            format!("{:.4}", row.moved_add),
            format!("{:.4}", row.moved_remove),
        ];
        assert_eq!(
            fields,
            ours.iter().collect::<Vec<_>>(),
            "{} {:?}",
            row.rule,
            row.vnodes
        );
    }
    assert!(fixture.contains(&format!(
        "kusursuz tasimada 3->4 oran = {:.4}",
        report.ideal_move
    )));
    assert_eq!(warmup.len(), 2);
    for ((_, fields), row) in warmup.iter().zip(&report.warmup) {
        let fields: Vec<&String> = fields.iter().collect();
        let ours = [
            format!("{:.4}", row.moved),
            format!("{:.4}", row.miss_ratio),
            format!("{:.2}", row.behind_cache),
            format!("{:.2}", row.store_requests),
            format!("{:.2}", row.multiple),
            format!("{:.0}", row.extra_store_requests),
        ];
        assert_eq!(fields, ours.iter().collect::<Vec<_>>(), "{}", row.rule);
    }
    assert!(fixture.contains(&format!(
        "onbellek arkasi {:.2} istek/s",
        report.base_behind_cache
    )));
}

#[test]
fn stickiness_on_three_and_four_replicas() {
    let fixture = include_str!("fixtures/seed004-sticky.txt");
    let report = sticky::run(&sticky::StickyOptions::default()).unwrap();
    assert!(fixture.starts_with(&format!(
        "{} istemci, {} istek; en buyuk istemcinin payi = {:.4}",
        report.clients, report.requests, report.largest_share
    )));
    let names = [
        ("yapiskansiz", "non-sticky"),
        ("yapiskan-kalan", "sticky-modulo"),
        ("yapiskan-tutarli", "sticky-consistent"),
    ];
    let labels: Vec<&str> = names.iter().map(|n| n.0).collect();
    let printed = rows(fixture, &labels);
    let join = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join("/");
    // Load table rows have 5 fields, scale-out rows 4, failure rows 4 or more.
    for (row, (label, fields)) in report.rows.iter().zip(printed.iter().take(3)) {
        assert_eq!(row.rule, names.iter().find(|n| n.0 == label).unwrap().1);
        let ours = [
            join(&row.load_before),
            format!("{:.3}", row.imbalance_before),
            join(&row.load_after),
            format!("{:.3}", row.imbalance_after),
            format!("{:.4}", row.peak_drop),
        ];
        assert_eq!(*fields, ours.to_vec(), "{}", row.rule);
    }
    for (row, (_, fields)) in report.scale_out.iter().zip(printed.iter().skip(3).take(2)) {
        let ours = [
            "istemci".to_owned(),
            format!("{:>3}/{}", row.rebound_clients, report.clients)
                .trim()
                .to_owned(),
            "istek".into(),
            "payi".into(),
            format!("{:.4}", row.rebound_share),
        ];
        assert_eq!(*fields, ours.to_vec(), "{}", row.rule);
    }
    for (row, (_, fields)) in report.failure.iter().zip(printed.iter().skip(5)) {
        assert_eq!(
            fields[1],
            format!("{}/{}", row.lost_sessions, report.clients),
            "{}",
            row.rule
        );
        assert_eq!(fields[4], format!("{:.4}", row.lost_share), "{}", row.rule);
    }
    assert_eq!(printed.len(), 8);
}

#[test]
fn beyond_the_course_load_aware_rules_beat_round_robin_when_a_replica_slows() {
    let report = queue::run(&queue::QueueOptions::default()).unwrap();
    let slow = &report.scenarios[1];
    let wait = |rule: &str| slow.rows.iter().find(|r| r.rule == rule).unwrap().mean_wait;
    for rule in ["least-connections", "power-of-two", "peak-ewma"] {
        assert!(
            wait(rule) < wait("round-robin") / 2.0,
            "{rule}: {}",
            wait(rule)
        );
    }
}

#[test]
fn bad_options_are_refused_with_a_reason() {
    let error = subjects::run(&subjects::SubjectsOptions {
        remove: 41,
        ..Default::default()
    })
    .unwrap_err();
    assert!(error.to_string().contains("numbered 1 to 40"), "{error}");
    let error = queue::run(&queue::QueueOptions {
        slow: vec![3, 1],
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("2 multipliers but there are 3 replicas"),
        "{error}"
    );
    let error = sticky::parse_clients("buyuk:1").unwrap_err();
    assert!(
        error.to_string().contains("name:clients:requests"),
        "{error}"
    );
    let error = remap::run(&remap::RemapOptions {
        added: Some("k2".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert!(
        error.to_string().contains("already one of the replicas"),
        "{error}"
    );
}
