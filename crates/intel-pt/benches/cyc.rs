//! What CYC timing costs the flow decoder: the simulator's kernel on 4 CPUs
//! (no pokes, MTC every 200 ns), traced without and with cycle-accurate
//! mode (`cyc_thresh` 0: a CYC before every flow packet), each decoded over
//! the code timeline (`codeimage::window::Interval`) with and without
//! `FlowDecoder::with_cyc`, in the same run.
//!
//!     cargo bench -p intel-pt --bench cyc
//!     CYC_BENCH_INSNS=200000 cargo bench -p intel-pt --bench cyc   # instructions per CPU
//!
//! For callgrind each row runs in a function of its own (`cyc::timed_*`).

#[path = "../tests/common/flow.rs"]
mod common;

use std::sync::OnceLock;

use codeimage::window::Interval;
use common::Run;
use divan::counter::{BytesCount, ItemsCount};
use divan::{black_box, Bencher};
use intel_pt::flow::{CycConv, FlowDecoder, FlowEvent, MtcConv};

/// The simulator's timing: MTC period 8 CTC ticks of 25 ns; a TSC runs at
/// 10 times the bus clock (`sim`'s max non-turbo ratio).
const MTC: MtcConv = MtcConv { shift: 3, ratio_n: 25, ratio_d: 1 };
const CYC: CycConv = CycConv { max_non_turbo_ratio: 10 };

struct Fixture {
    run: Run,
    bytes: usize,
    instructions: u64,
}

/// `plain`: the trace without CYC packets; `cyc`: with them.
fn fixture(cyc: bool) -> &'static Fixture {
    static F: [OnceLock<Fixture>; 2] = [OnceLock::new(), OnceLock::new()];
    F[cyc as usize].get_or_init(|| {
        let insns = std::env::var("CYC_BENCH_INSNS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
        let cfg = sim::SimConfig {
            cpus: 4,
            protocol: sim::Protocol::None,
            pokes: 0,
            instructions: insns,
            mtc_freq: Some(3),
            cyc_thresh: cyc.then_some(0),
            ..sim::SimConfig::default()
        };
        let (summary, run) = common::simulate(if cyc { "bench-cyc" } else { "bench-cyc-plain" }, &cfg, None);
        let bytes = run.aux.iter().map(Vec::len).sum();
        let f = Fixture { run, bytes, instructions: 0 };
        let (n, errors) = decode(&f, true);
        assert_eq!((n, errors), decode(&f, false), "the same instructions, with CYC timing or without");
        assert_eq!(errors, 0);
        assert!(n > 0 && n <= summary.instructions.iter().sum::<u64>());
        Fixture { instructions: n, ..f }
    })
}

/// Instructions and errors over every CPU's trace, one decoder for all.
fn decode(f: &Fixture, with_cyc: bool) -> (u64, u64) {
    let (mut n, mut errors) = (0u64, 0u64);
    let code = Interval(&f.run.full);
    let mut dec = FlowDecoder::new(&[], &code, f.run.cfg.clone()).with_mtc(MTC).with_cyc(with_cyc.then_some(CYC));
    for t in &f.run.aux {
        dec.reset(t);
        dec.run(|e| match e {
            FlowEvent::Insn { .. } => n += 1,
            FlowEvent::Error { .. } => errors += 1,
            _ => {}
        });
    }
    (n, errors)
}

#[inline(never)]
fn timed_plain_trace(f: &Fixture) -> (u64, u64) {
    decode(f, false)
}
#[inline(never)]
fn timed_plain_trace_with_cyc(f: &Fixture) -> (u64, u64) {
    black_box(1); // not folded into its twins
    decode(f, true)
}
#[inline(never)]
fn timed_cyc_trace(f: &Fixture) -> (u64, u64) {
    black_box(2);
    decode(f, false)
}
#[inline(never)]
fn timed_cyc_trace_with_cyc(f: &Fixture) -> (u64, u64) {
    black_box(3);
    decode(f, true)
}

/// The rows: name, which trace, the timed function.
type Row = (&'static str, bool, fn(&Fixture) -> (u64, u64));
const ROWS: [Row; 4] = [
    ("trace without CYC, CYC timing off", false, timed_plain_trace),
    ("trace without CYC, CYC timing on", false, timed_plain_trace_with_cyc),
    ("trace with CYC, CYC timing off", true, timed_cyc_trace),
    ("trace with CYC, CYC timing on", true, timed_cyc_trace_with_cyc),
];

fn main() {
    for cyc in [false, true] {
        let f = fixture(cyc);
        eprintln!("trace {} CYC: {:.2} MB, {} instructions", if cyc { "with" } else { "without" }, f.bytes as f64 / 1e6, f.instructions);
    }
    divan::main();
    // Each row on its own, fastest of CYC_BENCH_REPS (default 5), as a
    // ratio to the first row.
    let reps: usize = std::env::var("CYC_BENCH_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    println!("\n| decode | time (fastest of {reps}) | M instructions/s | vs CYC off, no CYC |\n|---|---|---|---|");
    let mut first = None;
    for (name, cyc, run) in ROWS {
        let f = fixture(cyc);
        black_box(run(f));
        let best = common::fastest(reps, &mut || {
            black_box(run(black_box(f)));
        });
        let base = *first.get_or_insert(best);
        println!(
            "| {name} | {:.1} ms | {:.1} | {:.3}x |",
            best.as_secs_f64() * 1e3,
            f.instructions as f64 / best.as_secs_f64() / 1e6,
            best.as_secs_f64() / base.as_secs_f64()
        );
    }
}

fn bench_row(b: Bencher, row: usize) {
    let (_, cyc, run) = ROWS[row];
    let f = fixture(cyc);
    b.counter(BytesCount::new(f.bytes)).counter(ItemsCount::new(f.instructions)).bench_local(|| black_box(run(black_box(f))));
}

#[divan::bench(sample_count = 10)]
fn plain_trace(b: Bencher) {
    bench_row(b, 0);
}
#[divan::bench(sample_count = 10)]
fn plain_trace_with_cyc(b: Bencher) {
    bench_row(b, 1);
}
#[divan::bench(sample_count = 10)]
fn cyc_trace(b: Bencher) {
    bench_row(b, 2);
}
#[divan::bench(sample_count = 10)]
fn cyc_trace_with_cyc(b: Bencher) {
    bench_row(b, 3);
}
