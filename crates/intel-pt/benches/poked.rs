//! Decoding code that is poked, in parallel: the simulator's kernel on 4
//! CPUs with 3000 pokes asked for (`--protocol int3`; those that fall in the
//! run are made), decoded over the code timeline
//! (`codeimage::window::Interval`), one decoder per buffer in turn against PSB
//! segments on 1 and 2 threads (`ParallelFlow::run_segments`, a counting
//! sink per segment), in the same run. Blocks in poked code have a version
//! for each window their bytes hold over; this is the input on which a
//! block table shared by the threads must not fill with old versions
//! (the flow bench's inputs are not poked).
//!
//!     cargo bench -p intel-pt --bench poked
//!     POKED_BENCH_INSNS=500000 cargo bench -p intel-pt --bench poked   # instructions per CPU
//!
//! For callgrind each row runs in a function of its own (`poked::timed_*`).

#[path = "../tests/common/flow.rs"]
mod common;

use std::sync::OnceLock;

use codeimage::window::Interval;
use common::Run;
use divan::counter::{BytesCount, ItemsCount};
use divan::{black_box, Bencher};
use intel_pt::flow::FlowDecoder;

struct Fixture {
    run: Run,
    bytes: usize,
    instructions: u64,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let insns = std::env::var("POKED_BENCH_INSNS").ok().and_then(|s| s.parse().ok()).unwrap_or(2_000_000);
        let cfg = sim::SimConfig { cpus: 4, protocol: sim::Protocol::Int3, pokes: 3000, instructions: insns, ..sim::SimConfig::default() };
        let (summary, run) = common::simulate("bench-poked", &cfg, None);
        assert!(summary.pokes > 1000, "{} pokes", summary.pokes);
        let bytes = run.aux.iter().map(Vec::len).sum();
        let f = Fixture { run, bytes, instructions: 0 };
        let (n, errors) = sequential(&f);
        assert_eq!(errors, 0);
        assert!(n > 0 && n <= summary.instructions.iter().sum::<u64>());
        for threads in [1, 2] {
            assert_eq!(segments(&f, threads), (n, 0), "{threads} threads: the sequential decode's instructions");
        }
        Fixture { instructions: n, ..f }
    })
}

/// Each CPU's buffer in turn, one decoder for all.
fn sequential(f: &Fixture) -> (u64, u64) {
    let code = Interval(&f.run.full);
    common::blocks_on(&mut FlowDecoder::new(&[], &code, f.run.cfg.clone()), &f.run.aux)
}

/// Each CPU's buffer in turn, its PSB segments on `threads` threads.
fn segments(f: &Fixture, threads: usize) -> (u64, u64) {
    common::ours_segments(&f.run.aux, &Interval(&f.run.full), &f.run.cfg, threads)
}

#[inline(never)]
fn timed_sequential(f: &Fixture) -> (u64, u64) {
    sequential(f)
}
#[inline(never)]
fn timed_segments_1_thread(f: &Fixture) -> (u64, u64) {
    segments(f, 1)
}
#[inline(never)]
fn timed_segments_2_threads(f: &Fixture) -> (u64, u64) {
    segments(f, 2)
}

/// The rows: name, the timed function.
type Row = (&'static str, fn(&Fixture) -> (u64, u64));
const ROWS: [Row; 3] = [
    ("one decoder, each buffer in turn", timed_sequential),
    ("PSB segments, a sink per segment, 1 thread", timed_segments_1_thread),
    ("PSB segments, a sink per segment, 2 threads", timed_segments_2_threads),
];

fn main() {
    let f = fixture();
    eprintln!("{} CPUs, {:.2} MB of Intel PT, {} instructions", f.run.aux.len(), f.bytes as f64 / 1e6, f.instructions);
    divan::main();
    // Each row on its own, fastest of POKED_BENCH_REPS (default 5), as a
    // speed-up over the first row.
    let reps: usize = std::env::var("POKED_BENCH_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    println!("\n| decode | time (fastest of {reps}) | M instructions/s | speed vs one decoder |\n|---|---|---|---|");
    let mut first = None;
    for (name, run) in ROWS {
        black_box(run(f));
        let best = common::fastest(reps, &mut || {
            black_box(run(black_box(f)));
        });
        let base = *first.get_or_insert(best);
        println!(
            "| {name} | {:.1} ms | {:.1} | {:.2}x |",
            best.as_secs_f64() * 1e3,
            f.instructions as f64 / best.as_secs_f64() / 1e6,
            base.as_secs_f64() / best.as_secs_f64()
        );
    }
}

fn bench_row(b: Bencher, row: usize) {
    let (_, run) = ROWS[row];
    let f = fixture();
    b.counter(BytesCount::new(f.bytes)).counter(ItemsCount::new(f.instructions)).bench_local(|| black_box(run(black_box(f))));
}

#[divan::bench(sample_count = 10)]
fn sequential_decoder(b: Bencher) {
    bench_row(b, 0);
}
#[divan::bench(sample_count = 10)]
fn segments_1_thread(b: Bencher) {
    bench_row(b, 1);
}
#[divan::bench(sample_count = 10)]
fn segments_2_threads(b: Bencher) {
    bench_row(b, 2);
}
