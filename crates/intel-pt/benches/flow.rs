//! Instruction-flow decoding speed: our `FlowDecoder` against libipt 2.1.2's
//! block decoder (`pt_blk_next`, through `libipt-sys`), on the same traces in
//! the same run. Two simulated runs with static code (4 CPUs, `--pokes 0
//! --protocol none`, 4M instructions per CPU), each CPU's buffer decoded in
//! turn on one thread: `sim_kernel`, the simulator's generated kernel, and
//! `usr_bin_perf`, random walks through /usr/bin/perf's real code
//! (`simulate --elf`; skipped without the file). `tests/libipt_flow.rs`
//! shows both decoders agree on such traces event for event.
//!
//!     cargo bench -p intel-pt --bench flow
//!     FLOW_BENCH_INSNS=500000 cargo bench -p intel-pt --bench flow   # instructions per CPU
//!     FLOW_BENCH_INPUT=usr_bin_perf cargo bench -p intel-pt --bench flow   # one input only
//!
//! - `ours_static_source`: over `codeimage::window::Static` (the code before any change).
//! - `ours_interval_source`: over `codeimage::window::Interval` on the code timeline
//!   (no pokes in these runs, so every read is exact: the cost of asking).
//! - summary rows only: `ours, Static, blocks` (a `FlowSink` taking cached
//!   blocks whole, as a libipt user takes `pt_block`s: the like-for-like
//!   row), the same `no upper bounds` (`with_upper_bounds(false)`: no
//!   look-ahead for the next TSC, which libipt does not make either), its
//!   PSB-segment rows (recorded and replayed into one sink, or `a sink per
//!   PSB segment`, `run_segments`), `ours, Static, warm` and `ours,
//!   Static, blocks, no upper bounds, warm` (one decoder kept across runs,
//!   warm as libipt's image is) and `libipt section cache, cold` (a new
//!   image each run), the reference of the last column.
//! - `libipt_file`: code as file sections (`pt_image_add_file` on kcore's
//!   PT_LOAD ranges or the program's MMAP2): libipt's block cache is on.
//! - `libipt_cached`: the same sections through an image section cache
//!   (`pt_iscache_add_file` + `pt_image_add_cached`); block cache on.
//! - `libipt_callback`: code read through `pt_image_set_callback` from our
//!   `CodeTimeline`: no section, so no block cache.
//!
//! libipt is counted in blocks' `ninsn` (what a block-decoder user gets);
//! ours emits an event per instruction, or (`blocks`) is counted in blocks.
//! The image and section cache are built outside the timed loop; libipt's
//! block cache lives in the section and stays warm across samples.
//!
//! For callgrind, each decoder runs in a function of its own
//! (`flow::timed_*`), apart from the start-up cross-check (`flow::check_*`);
//! with `--sample-count 1 --sample-size 1` divan calls it twice.

#[path = "../tests/common/flow.rs"]
mod common;
#[path = "../tests/common/kernel_elf.rs"]
mod kernel_elf;

use std::sync::OnceLock;

use codeimage::window::{Interval, Static};
use common::{blocks_on, fastest, ours_segments, pool, Count, ImageKind, LibiptImage, Run};
use divan::counter::{BytesCount, ItemsCount};
use divan::{black_box, Bencher};
use intel_pt::flow::{CodeSource, FlowConfig, FlowDecoder, FlowEvent, FlowSink};
use intel_pt::parallel::ParallelFlow;

struct Fixture {
    run: Run,
    /// Each CPU's trace as hardware would start it (`without_start_pge`):
    /// libipt decodes all of it, ours the same as the simulator's.
    traces: Vec<Vec<u8>>,
    bytes: usize,
    instructions: u64,
}

/// The inputs: random walks through a real Debian kernel's code (the vmlinux
/// of scripts/fetch-test-kernels.sh), the simulator's generated kernel (64
/// small functions, 5.5 KB of code) and random walks through /usr/bin/perf's
/// real code (2.4 MB).
const INPUTS: [&str; 3] = ["vmlinux", "sim_kernel", "usr_bin_perf"];
const PERF: &str = "/usr/bin/perf";

/// scripts/fetch-test-kernels.sh's vmlinux (cached after the first run), if
/// it works, made walkable (`kernel_elf`).
fn vmlinux() -> Option<std::path::PathBuf> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fetch-test-kernels.sh");
    let out = std::process::Command::new("bash").arg(&script).output().ok().filter(|o| o.status.success())?;
    let path = std::path::Path::new(String::from_utf8_lossy(&out.stdout).trim()).join("vmlinux-x86_64");
    let walkable = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("vmlinux-walkable-2.elf");
    path.is_file().then(|| kernel_elf::walkable_vmlinux(&path, &walkable))
}

fn main() {
    for input in INPUTS {
        if let Some(f) = fixture(input) {
            eprintln!(
                "{input}: {} CPUs, {:.2} MB of Intel PT, {} instructions ({:.3} bytes of trace per instruction), {} libipt blocks ({:.2} instructions per block)",
                f.traces.len(),
                f.bytes as f64 / 1e6,
                f.instructions,
                f.bytes as f64 / f.instructions as f64,
                blocks(f),
                f.instructions as f64 / blocks(f) as f64,
            );
        }
    }
    divan::main();
    summary();
}

/// After divan: each decoder timed on its own (fastest of `FLOW_BENCH_REPS`,
/// default 5), as a table with the ratio to libipt's fastest image. Only the
/// rows `FLOW_BENCH_ONLY` picks (see [`picks`]), and libipt's section cache.
fn summary() {
    let reps: usize = std::env::var("FLOW_BENCH_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let best = |run: &mut dyn FnMut() -> (u64, u64)| {
        fastest(reps, &mut || {
            black_box(run());
        })
    };
    println!("\n| input | decoder | time (fastest of {reps}) | M instructions/s | MB/s of trace | vs libipt (warm) | vs libipt cold |\n|---|---|---|---|---|---|---|");
    for input in INPUTS {
        let Some(f) = fixture(input) else { continue };
        let mut rows: Vec<(&str, std::time::Duration)> = Vec::new();
        let only = std::env::var("FLOW_BENCH_ONLY").unwrap_or_default();
        // Each row runs once untimed (libipt's block cache, kept in the
        // image, starts warm as in the divan loop; ours starts each run cold).
        let mut row = |name: &'static str, warm: &mut dyn FnMut() -> (u64, u64), timed: &mut dyn FnMut() -> (u64, u64)| {
            if picks(&only, name) || name.contains("section cache") {
                black_box(warm());
                rows.push((name, best(timed)));
            }
        };
        row("ours, Static", &mut || ours_static(f), &mut || timed_ours_static(f));
        row("ours, Interval", &mut || ours_interval(f), &mut || timed_ours_interval(f));
        row("ours, Static, blocks", &mut || ours_blocks(f), &mut || timed_ours_blocks(f));
        row("ours, Static, blocks, no upper bounds", &mut || ours_blocks_unbounded(f), &mut || timed_ours_blocks_unbounded(f));
        row("ours, Static, blocks, PSB segments on 1 thread", &mut || (0, 0), &mut || timed_ours_parallel(f, 1));
        row("ours, Static, blocks, PSB segments on 2 threads", &mut || (0, 0), &mut || timed_ours_parallel(f, 2));
        row("ours, Static, blocks, a sink per PSB segment on 1 thread", &mut || (0, 0), &mut || timed_ours_segments(f, 1));
        row("ours, Static, blocks, a sink per PSB segment on 2 threads", &mut || (0, 0), &mut || timed_ours_segments(f, 2));
        let image = LibiptImage::new(&f.run, ImageKind::File);
        row("ours, Static, blocks, no upper bounds, interleaved PSB segments on 1 thread", &mut || ours_interleaved(f), &mut || {
            timed_ours_interleaved(f)
        });
        row("libipt file sections", &mut || libipt(f, &image), &mut || timed_libipt_file(f, &image));
        let image = LibiptImage::new(&f.run, ImageKind::Cached);
        row("libipt section cache", &mut || libipt(f, &image), &mut || timed_libipt_cached(f, &image));
        let image = LibiptImage::new(&f.run, ImageKind::Callback);
        row("libipt callback", &mut || libipt(f, &image), &mut || timed_libipt_callback(f, &image));
        // Cold against cold: libipt on a new image and section cache each
        // run (made outside the timing; its sections map and their block
        // caches fill during the decode), ours with a new decoder.
        if picks(&only, "libipt section cache, cold") {
            let cold = (0..reps.max(1))
                .map(|_| {
                    let image = LibiptImage::new(&f.run, ImageKind::Cached);
                    let t = std::time::Instant::now();
                    black_box(timed_libipt_cached(f, &image));
                    t.elapsed()
                })
                .min()
                .unwrap();
            rows.push(("libipt section cache, cold", cold));
        }
        // Warm against warm: ours with one decoder kept across runs, so its
        // block cache is warm as libipt's is in the rows above.
        if picks(&only, "ours, Static, warm") {
            let code = Static(&f.run.bare);
            let mut warm = FlowDecoder::new(&[], &code, f.run.cfg.clone());
            black_box(ours_on(&mut warm, &f.traces));
            rows.push(("ours, Static, warm", best(&mut || timed_ours_warm(&mut warm, &f.traces))));
        }
        if picks(&only, "ours, Static, blocks, no upper bounds, warm") {
            let code = Static(&f.run.bare);
            let mut warm = FlowDecoder::new(&[], &code, f.run.cfg.clone()).with_upper_bounds(false);
            black_box(blocks_on(&mut warm, &f.traces));
            rows.push(("ours, Static, blocks, no upper bounds, warm", best(&mut || timed_ours_blocks_warm(&mut warm, &f.traces))));
        }
        if picks(&only, "ours, Static, blocks, no upper bounds, interleaved PSB segments on 1 thread, warm") {
            let code = Static(&f.run.bare);
            let mut warm = FlowDecoder::new(&[], &code, f.run.cfg.clone()).with_upper_bounds(false);
            black_box(interleaved_on(&mut warm, &f.traces));
            rows.push((
                "ours, Static, blocks, no upper bounds, interleaved PSB segments on 1 thread, warm",
                best(&mut || timed_interleaved_warm(&mut warm, &f.traces)),
            ));
        }
        let libipt_best =
            rows.iter().filter(|(n, _)| n.starts_with("libipt") && !n.ends_with("callback") && !n.ends_with("cold")).map(|r| r.1).min().unwrap();
        let libipt_cold = rows.iter().find(|(n, _)| *n == "libipt section cache, cold").map(|r| r.1);
        for (name, d) in rows {
            let secs = d.as_secs_f64();
            let cold = libipt_cold.map_or("".into(), |c| format!("{:.2}x", c.as_secs_f64() / secs));
            println!(
                "| {input} | {name} | {:.1} ms | {:.1} | {:.1} | {:.2}x | {cold} |",
                secs * 1e3,
                f.instructions as f64 / secs / 1e6,
                f.bytes as f64 / secs / 1e6,
                libipt_best.as_secs_f64() / secs
            );
        }
    }
}

/// Whether `FLOW_BENCH_ONLY` (`only`) picks the row `name`: alternatives
/// split by `|`, each a part of the name or, ending in `$`, all of it.
fn picks(only: &str, name: &str) -> bool {
    only.split('|').any(|p| p.strip_suffix('$').map_or(name.contains(p), |whole| name == whole))
}

/// `None` when the input is skipped: not the one `FLOW_BENCH_INPUT` names,
/// or no /usr/bin/perf.
fn fixture(input: &str) -> Option<&'static Fixture> {
    if std::env::var("FLOW_BENCH_INPUT").is_ok_and(|only| only != input) {
        return None;
    }
    static KERNEL: OnceLock<Fixture> = OnceLock::new();
    static PERF_WALK: OnceLock<Option<Fixture>> = OnceLock::new();
    static VMLINUX: OnceLock<Option<Fixture>> = OnceLock::new();
    match input {
        "vmlinux" => VMLINUX.get_or_init(|| vmlinux().map(|p| make("vmlinux", Some(&p)))).as_ref(),
        "sim_kernel" => Some(KERNEL.get_or_init(|| make("sim_kernel", None))),
        "usr_bin_perf" => {
            PERF_WALK.get_or_init(|| std::path::Path::new(PERF).is_file().then(|| make("usr_bin_perf", Some(std::path::Path::new(PERF))))).as_ref()
        }
        _ => unreachable!(),
    }
}

fn make(name: &str, elf: Option<&std::path::Path>) -> Fixture {
    let default = if name == "vmlinux" { 25_000_000 } else { 4_000_000 };
    let insns = std::env::var("FLOW_BENCH_INSNS").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    let cfg = sim::SimConfig { cpus: 4, protocol: sim::Protocol::None, pokes: 0, instructions: insns, ..sim::SimConfig::default() };
    let (summary, run) = common::simulate(&format!("bench-{name}"), &cfg, elf);
    let traces: Vec<Vec<u8>> = run.aux.iter().map(|t| common::without_start_pge(t).0).collect();
    let bytes = traces.iter().map(Vec::len).sum();
    // What ran: instructions, and traps (INT3, UD2, SYSCALL end a random
    // walk's path), which both decoders report as events, not instructions.
    let ran: u64 = summary.instructions.iter().sum();
    let (instructions, traps) = run.aux.iter().map(|t| insns_and_traps(t, &run)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert_eq!(instructions + traps, ran, "{name}: every instruction that ran is decoded");
    // Every decoder decodes every instruction, without an error.
    let f = Fixture { run, traces, bytes, instructions };
    assert_eq!(check_ours_static(&f), (instructions, 0));
    assert_eq!(check_ours_interval(&f), (instructions, 0));
    assert_eq!(ours_blocks(&f), (instructions, 0));
    assert_eq!(ours_blocks_unbounded(&f), (instructions, 0));
    for threads in [1, 2] {
        assert_eq!(ours_parallel(&f.traces, &Static(&f.run.bare), &f.run.cfg, threads), (instructions, 0), "{threads} threads");
        assert_eq!(ours_segments(&f.traces, &Static(&f.run.bare), &f.run.cfg, threads), (instructions, 0), "{threads} threads, segment sinks");
    }
    assert_eq!(ours_interleaved(&f), (instructions, 0), "interleaved");
    for kind in [ImageKind::File, ImageKind::Cached, ImageKind::Callback] {
        let image = LibiptImage::new(&f.run, kind);
        assert_eq!(check_libipt(&f, &image), (instructions, 0), "libipt {kind:?}");
    }
    f
}

/// Our instructions and traps on one CPU's trace (over `Static`).
fn insns_and_traps(trace: &[u8], run: &Run) -> (u64, u64) {
    let (mut n, mut traps) = (0, 0);
    FlowDecoder::new(trace, &Static(&run.bare), run.cfg.clone()).run(|e| match e {
        FlowEvent::Insn { .. } => n += 1,
        FlowEvent::Trap { .. } => traps += 1,
        _ => {}
    });
    (n, traps)
}

/// libipt's blocks over the whole input.
fn blocks(f: &Fixture) -> u64 {
    let image = LibiptImage::new(&f.run, ImageKind::File);
    let mut n = 0;
    for t in &f.traces {
        common::libipt_decode(t, &image, common::CPU, |o| n += matches!(o, common::Out::Block(_)) as u64);
    }
    n
}

/// Instructions and errors over every CPU's trace in turn, on one thread.
/// Ours: one decoder for all the traces, so that its block cache carries
/// over (as libipt's does, in the image's sections).
fn ours<C: CodeSource>(traces: &[Vec<u8>], code: &C, cfg: &FlowConfig) -> (u64, u64) {
    ours_on(&mut FlowDecoder::new(&[], code, cfg.clone()), traces)
}

/// [`ours`] on a decoder given, whose block cache may be warm.
/// Each instruction comes as an event (`run`).
fn ours_on<'a, C: CodeSource>(dec: &mut FlowDecoder<'a, C>, traces: &'a [Vec<u8>]) -> (u64, u64) {
    let mut count = Count::default();
    for t in traces {
        dec.reset(t);
        dec.run(|e| count.event(e));
    }
    (count.insns, count.errors)
}

fn ours_blocks(f: &Fixture) -> (u64, u64) {
    ours_blocks_bounded(f, true)
}

/// [`ours_blocks`] without the look-ahead for each instruction's latest time
/// (`with_upper_bounds(false)`), which libipt does not work out.
fn ours_blocks_unbounded(f: &Fixture) -> (u64, u64) {
    ours_blocks_bounded(f, false)
}

fn ours_blocks_bounded(f: &Fixture, bounds: bool) -> (u64, u64) {
    let code = Static(&f.run.bare);
    blocks_on(&mut FlowDecoder::new(&[], &code, f.run.cfg.clone()).with_upper_bounds(bounds), &f.traces)
}

fn ours_static(f: &Fixture) -> (u64, u64) {
    ours(&f.traces, &Static(&f.run.bare), &f.run.cfg)
}

fn ours_interval(f: &Fixture) -> (u64, u64) {
    ours(&f.traces, &Interval(&f.run.full), &f.run.cfg)
}

/// Ours with each CPU's trace cut at its PSBs, the segments decoded on
/// `threads` threads (a pool of its own) and handed out in order, blocks
/// whole (as `ours_blocks`).
fn ours_parallel<C: CodeSource + Sync>(traces: &[Vec<u8>], code: &C, cfg: &FlowConfig, threads: usize) -> (u64, u64) {
    let par = ParallelFlow::new(FlowDecoder::new(&[], code, cfg.clone()));
    let mut sink = Count::default();
    pool(threads).install(|| {
        for t in traces {
            par.run_with(t, &mut sink);
        }
    });
    (sink.insns, sink.errors)
}

/// Ours with each CPU's trace cut at its PSBs, `FLOW_BENCH_LANES` (16) of
/// the segments walked at once on one thread (`run_interleaved`), into a
/// counting sink each; no upper bounds.
fn ours_interleaved(f: &Fixture) -> (u64, u64) {
    let code = Static(&f.run.bare);
    interleaved_on(&mut FlowDecoder::new(&[], &code, f.run.cfg.clone()).with_upper_bounds(false), &f.traces)
}

/// [`ours_interleaved`] on a decoder given, whose block cache may be warm.
fn interleaved_on<'a, C: CodeSource>(dec: &mut FlowDecoder<'a, C>, traces: &'a [Vec<u8>]) -> (u64, u64) {
    let mut total = Count::default();
    for t in traces {
        dec.run_interleaved(t, lanes(), Count::default, |c| {
            total.insns += c.insns;
            total.errors += c.errors;
        });
    }
    (total.insns, total.errors)
}

/// PSB segments walked at once: `FLOW_BENCH_LANES`, else 16 (the fastest
/// on vmlinux here; see docs/PERFORMANCE.md).
fn lanes() -> usize {
    std::env::var("FLOW_BENCH_LANES").ok().and_then(|s| s.parse().ok()).unwrap_or(16)
}

fn libipt(f: &Fixture, image: &LibiptImage<'_>) -> (u64, u64) {
    f.traces.iter().map(|t| common::libipt_count(t, image)).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

#[inline(never)]
fn check_ours_static(f: &Fixture) -> (u64, u64) {
    ours_static(f)
}
#[inline(never)]
fn check_ours_interval(f: &Fixture) -> (u64, u64) {
    ours_interval(f)
}
#[inline(never)]
fn check_libipt(f: &Fixture, image: &LibiptImage<'_>) -> (u64, u64) {
    libipt(f, image)
}

#[inline(never)]
fn timed_ours_static(f: &Fixture) -> (u64, u64) {
    ours_static(f)
}
#[inline(never)]
fn timed_ours_warm<'a>(dec: &mut FlowDecoder<'a, Static<'a>>, traces: &'a [Vec<u8>]) -> (u64, u64) {
    ours_on(dec, traces)
}
#[inline(never)]
fn timed_ours_blocks(f: &Fixture) -> (u64, u64) {
    ours_blocks(f)
}
#[inline(never)]
fn timed_ours_blocks_warm<'a>(dec: &mut FlowDecoder<'a, Static<'a>>, traces: &'a [Vec<u8>]) -> (u64, u64) {
    blocks_on(dec, traces)
}
#[inline(never)]
fn timed_ours_blocks_unbounded(f: &Fixture) -> (u64, u64) {
    ours_blocks_unbounded(f)
}
#[inline(never)]
fn timed_ours_interval(f: &Fixture) -> (u64, u64) {
    ours_interval(f)
}
#[inline(never)]
fn timed_ours_parallel(f: &Fixture, threads: usize) -> (u64, u64) {
    ours_parallel(&f.traces, &Static(&f.run.bare), &f.run.cfg, threads)
}
#[inline(never)]
fn timed_ours_segments(f: &Fixture, threads: usize) -> (u64, u64) {
    ours_segments(&f.traces, &Static(&f.run.bare), &f.run.cfg, threads)
}

#[inline(never)]
fn timed_ours_interleaved(f: &Fixture) -> (u64, u64) {
    ours_interleaved(f)
}

#[inline(never)]
fn timed_interleaved_warm<'a>(dec: &mut FlowDecoder<'a, Static<'a>>, traces: &'a [Vec<u8>]) -> (u64, u64) {
    interleaved_on(dec, traces)
}

#[inline(never)]
fn timed_libipt_file(f: &Fixture, image: &LibiptImage<'_>) -> (u64, u64) {
    black_box(0); // not folded into its identical twins
    libipt(f, image)
}
#[inline(never)]
fn timed_libipt_cached(f: &Fixture, image: &LibiptImage<'_>) -> (u64, u64) {
    black_box(1); // not folded into its identical twins
    libipt(f, image)
}
#[inline(never)]
fn timed_libipt_callback(f: &Fixture, image: &LibiptImage<'_>) -> (u64, u64) {
    black_box(2); // not folded into its identical twins
    libipt(f, image)
}

macro_rules! bench {
    ($name:ident, |$f:ident| $setup:expr, |$g:ident, $image:ident| $body:expr) => {
        #[divan::bench(args = INPUTS, sample_count = 10)]
        fn $name(b: Bencher, input: &str) {
            let Some($f) = fixture(input) else {
                eprintln!("{input}: skipped");
                return;
            };
            let $image = $setup;
            b.counter(BytesCount::new($f.bytes)).counter(ItemsCount::new($f.instructions)).bench_local(|| {
                let $g = black_box($f);
                black_box($body)
            });
        }
    };
}

bench!(ours_static_source, |f| (), |g, _i| timed_ours_static(g));
bench!(ours_interval_source, |f| (), |g, _i| timed_ours_interval(g));
bench!(ours_static_parallel_2_threads, |f| (), |g, _i| timed_ours_parallel(g, 2));
bench!(libipt_file, |f| LibiptImage::new(&f.run, ImageKind::File), |g, image| timed_libipt_file(g, &image));
bench!(libipt_cached, |f| LibiptImage::new(&f.run, ImageKind::Cached), |g, image| timed_libipt_cached(g, &image));
bench!(libipt_callback, |f| LibiptImage::new(&f.run, ImageKind::Callback), |g, image| timed_libipt_callback(g, &image));
