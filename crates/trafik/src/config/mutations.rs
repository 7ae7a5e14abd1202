//! The config loader against mutated files: every example config and the README's listing,
//! cut, spliced and sprinkled with the bytes TOML and trafik's values care about. No input may
//! panic the checker, and a file it passes must build a plan. A short pass runs with the tests;
//! `TRAFIK_FUZZ_CASES=1000000 cargo test -p trafik --bin trafik mutations -- --ignored` runs
//! a long one.

use trafik_balance::random::SharedRng;

use super::load;

/// The seeds: every example config and the README's listing of every key.
fn corpus() -> Vec<String> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut files: Vec<String> = std::fs::read_dir(format!("{root}/examples"))
        .expect("the examples folder")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .collect();
    files.push(include_str!("default.toml").to_owned());
    files
}

/// Bytes and fragments that sit on the edges of TOML and of trafik's values.
const PIECES: [&str; 24] = [
    "\"",
    "'",
    "=",
    "[",
    "]",
    "[[",
    "]]",
    "\n",
    "#",
    ",",
    "{",
    "}",
    "0",
    "-1",
    "4294967296",
    "1e309",
    "nan",
    "\"0s\"",
    "\"1us\"",
    "\"999999h\"",
    "\"0.0.0.0:0\"",
    "\u{0}",
    "é",
    "\\u",
];

/// One mutation of `text`: a byte range removed, a piece inserted, or a line repeated.
fn mutate(text: &str, random: &SharedRng) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for _ in 0..=random.below(3) {
        let at = random.below(bytes.len() + 1);
        match random.below(3) {
            0 => {
                let end = (at + random.below(16)).min(bytes.len());
                bytes.drain(at..end);
            }
            1 => {
                let piece = PIECES[random.below(PIECES.len())].as_bytes();
                bytes.splice(at..at, piece.iter().copied());
            }
            _ => {
                let start = bytes[..at]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                let end = bytes[at..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |i| at + i + 1);
                let line = bytes[start..end].to_vec();
                bytes.splice(end..end, line);
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Runs `cases` mutations; returns how many the checker accepted.
fn run(cases: u64, seed: u64) -> u64 {
    let corpus = corpus();
    let random = SharedRng::new(seed);
    let mut accepted = 0;
    for _ in 0..cases {
        let seed_file = &corpus[random.below(corpus.len())];
        let text = mutate(seed_file, &random);
        // A panic fails the test with the input that caused it.
        let outcome = std::panic::catch_unwind(|| load("fuzz.toml", &text));
        match outcome {
            Ok(Ok(_)) => accepted += 1,
            Ok(Err(errors)) => assert!(!errors.is_empty(), "refused without a reason:\n{text}"),
            Err(_) => panic!("the checker panicked on:\n{text}"),
        }
    }
    accepted
}

#[test]
fn mutated_configs_never_panic_the_checker() {
    let accepted = run(2_000, 13);
    // Some mutations only touch comments or values within range: the pass reaches the planner.
    assert!(
        accepted > 0,
        "no mutation was accepted: the pass tests only the parser"
    );
}

#[test]
#[ignore = "a long run by hand: TRAFIK_FUZZ_CASES sets the count"]
fn mutated_configs_long_run() {
    let cases = std::env::var("TRAFIK_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(13, |d| d.as_nanos() as u64);
    let started = std::time::Instant::now();
    let accepted = run(cases, seed);
    eprintln!(
        "{cases} mutated configs (seed {seed}) in {:.1} s, {accepted} accepted, none panicked",
        started.elapsed().as_secs_f64()
    );
}
