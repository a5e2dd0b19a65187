//! A run tells its progress callback how many instructions have run, every
//! `PROGRESS_EVERY` of them, in order, up to what the summary says ran.

use std::path::Path;

use sim::{simulate_reporting, SimConfig, PROGRESS_EVERY};

#[test]
fn progress_counts_the_instructions_run() {
    let dir = testkit::fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")).join("sim-progress"));
    let cfg = SimConfig { cpus: 2, instructions: 200_000, pokes: 10, ..SimConfig::default() };
    let mut seen = Vec::new();
    let summary = simulate_reporting(&cfg, &dir, &mut |n| seen.push(n)).unwrap();
    let ran: u64 = summary.instructions.iter().sum();
    assert!(ran >= 400_000, "{ran}");
    assert_eq!(seen.len() as u64, ran / PROGRESS_EVERY, "{seen:?}");
    assert!(seen.iter().enumerate().all(|(i, &n)| n == (i as u64 + 1) * PROGRESS_EVERY), "{seen:?}");
}
