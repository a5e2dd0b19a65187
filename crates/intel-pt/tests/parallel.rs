//! PSB segments decoded in parallel give the events of one sequential
//! decode, in order: on simulated runs with poked code (every source), with
//! 1 and 3 threads, and with corrupt bytes inside segments (the error, then
//! the next segment); recorded and replayed into one sink, into a sink per
//! segment, or walked a few segments at once on one thread (alone, or on
//! each thread of the pool); runs of consecutive segments decoded one after
//! the other into one sink; and runs of consecutive segments decoded apart.

#[path = "common/flow.rs"]
mod common;

use codeimage::window::{Interval, PerfStyle, Static};
use intel_pt::flow::{CodeSource, FlowConfig, FlowDecoder, FlowEvent, Recovery};
use intel_pt::parallel::{psb_runs, segments, ParallelFlow};

fn sequential(trace: &[u8], code: &impl CodeSource, cfg: &FlowConfig) -> Vec<FlowEvent> {
    let mut out = Vec::new();
    FlowDecoder::new(trace, code, cfg.clone()).run(|e| out.push(e));
    out
}

/// `run_segments`' sinks joined in the order given, and how many there were.
fn joined_segments<'a, C: CodeSource + Sync>(par: &ParallelFlow<'a, C>, trace: &'a [u8]) -> (Vec<FlowEvent>, usize) {
    let (mut joined, mut parts) = (Vec::new(), 0);
    par.run_segments(trace, common::Blocks::default, |b| {
        joined.extend(b.events);
        parts += 1;
    });
    (joined, parts)
}

fn same<C: CodeSource + Sync>(what: &str, traces: &[Vec<u8>], code: &C, cfg: &FlowConfig, threads: usize) -> usize {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
    let par = ParallelFlow::new(FlowDecoder::new(&[], code, cfg.clone()));
    let mut n = 0;
    for (cpu, trace) in traces.iter().enumerate() {
        let mut got = Vec::new();
        pool.install(|| par.run(trace, |e| got.push(e)));
        let want = sequential(trace, code, cfg);
        if let Some(i) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
            panic!("{what}, {threads} threads, cpu {cpu}: event {i} differs: parallel {:x?}, sequential {:x?}", got.get(i), want.get(i));
        }
        // Blocks are handed out whole, with the instructions they hold.
        let mut blocks = common::Blocks::default();
        pool.install(|| par.run_with(trace, &mut blocks));
        assert!(blocks.blocks > 0, "{what}: no blocks");
        assert!(blocks.events == want, "{what}, {threads} threads, cpu {cpu}: blocks expanded differ");
        // A sink per segment, given back in order: the same, put together.
        let (joined, parts) = pool.install(|| joined_segments(&par, trace));
        assert_eq!(parts, segments(trace).len(), "{what}: a sink per segment");
        assert!(joined == want, "{what}, {threads} threads, cpu {cpu}: segment sinks joined differ");
        // Runs of consecutive segments decoded one after the other on one
        // decoder into one sink (as `poketrace decode` walks a buffer to let
        // go of the bytes behind it): the same.
        for at_least in [1, trace.len() / 3] {
            let (mut dec, mut got) = (FlowDecoder::new(&[], code, cfg.clone()), Vec::new());
            for (start, end) in psb_runs(trace, at_least) {
                dec.reset_segment(trace, 0, start, end);
                dec.run(|e| got.push(e));
            }
            assert!(got == want, "{what}, cpu {cpu}: runs of at least {at_least} bytes one after the other differ");
        }
        // Each thread walking its segments a few at once (what large code
        // gets): the same in a sink per segment; replayed (one at a time
        // there) too.
        let lanes = ParallelFlow::new(FlowDecoder::new(&[], code, cfg.clone())).with_lanes(4);
        let mut got = Vec::new();
        pool.install(|| lanes.run(trace, |e| got.push(e)));
        assert!(got == want, "{what}, {threads} threads, cpu {cpu}: 4 lanes a thread, replayed, differ");
        let (joined, parts) = pool.install(|| joined_segments(&lanes, trace));
        assert_eq!(parts, segments(trace).len(), "{what}, 4 lanes a thread: a sink per segment");
        assert!(joined == want, "{what}, {threads} threads, cpu {cpu}: 4 lanes a thread, segment sinks joined differ");
        // Three runs of consecutive segments decoded apart (`run_segments_in`),
        // and all in one run (in groups, walked at once with 4 lanes), the
        // buffer said to be 1000 bytes into the trace: the same, error
        // offsets 1000 on.
        let moved: Vec<FlowEvent> = want
            .iter()
            .map(|&e| match e {
                FlowEvent::Error { offset, time, ip, kind } => FlowEvent::Error { offset: offset + 1000, time, ip, kind },
                e => e,
            })
            .collect();
        let cuts = segments(trace);
        for (how, par, runs) in [("one lane", &par, 3), ("4 lanes", &lanes, 3), ("4 lanes, one run", &lanes, 1)] {
            let mut joined = Vec::new();
            for run in cuts.chunks(cuts.len().div_ceil(runs)) {
                let starts = run[0].0..run[run.len() - 1].1;
                pool.install(|| par.run_segments_in(trace, 1000, starts, common::Blocks::default, |b| joined.extend(b.events)));
            }
            assert!(joined == moved, "{what}, {threads} threads, cpu {cpu}, {how}: runs of segments decoded apart differ");
        }
        // The segments walked in turn on this thread, a few at once or all.
        for lanes in [1, 3, 64] {
            let (mut joined, mut parts) = (Vec::new(), 0);
            FlowDecoder::new(&[], code, cfg.clone()).run_interleaved(trace, lanes, common::Blocks::default, |b| {
                joined.extend(b.events);
                parts += 1;
            });
            assert_eq!(parts, segments(trace).len(), "{what}, {lanes} lanes: a sink per segment");
            if let Some(i) = (0..joined.len().max(want.len())).find(|&i| joined.get(i) != want.get(i)) {
                panic!("{what}, {lanes} lanes, cpu {cpu}: event {i} differs: interleaved {:x?}, sequential {:x?}", joined.get(i), want.get(i));
            }
        }
        n += got.len();
    }
    n
}

#[test]
fn parallel_equals_sequential() {
    for (protocol, pokes) in [(sim::Protocol::Int3, 150), (sim::Protocol::None, 0)] {
        let cfg = sim::SimConfig { cpus: 2, protocol, pokes, instructions: 40_000, psb_period: 1024, ..sim::SimConfig::default() };
        let name = format!("parallel-{protocol}");
        let (_, run) = common::simulate(&name, &cfg, None);
        assert!(run.aux.iter().all(|t| segments(t).len() > 10), "{name}: few segments");
        for threads in [1, 3] {
            let n = same(&format!("{name} Static"), &run.aux, &Static(&run.bare), &run.cfg, threads)
                + same(&format!("{name} PerfStyle"), &run.aux, &PerfStyle(&run.full), &run.cfg, threads)
                + same(&format!("{name} Interval"), &run.aux, &Interval(&run.full), &run.cfg, threads);
            assert!(n > 3 * 2 * 30_000, "{name}: {n} events");
        }
        // Corrupt bytes inside a few segments: an error there, the rest decoded.
        let mut bad = run.aux.clone();
        for t in &mut bad {
            for (k, (start, end)) in segments(t).into_iter().enumerate().filter(|(k, _)| k % 7 == 3) {
                t[start + (end - start) / 2 + k % 5] ^= 0x5a;
            }
        }
        let events = same(&format!("{name} corrupt"), &bad, &Static(&run.bare), &run.cfg, 3);
        // Resuming at the next PSB after an error, as told.
        for (cpu, t) in bad.iter().enumerate() {
            let code = Static(&run.bare);
            let mut want = Vec::new();
            FlowDecoder::new(t, &code, run.cfg.clone()).with_recovery(Recovery::NextPsb).run(|e| want.push(e));
            let mut got = Vec::new();
            ParallelFlow::new(FlowDecoder::new(&[], &code, run.cfg.clone()).with_recovery(Recovery::NextPsb)).run(t, |e| got.push(e));
            assert!(got == want, "{name} corrupt, NextPsb, cpu {cpu}: parallel and sequential differ");
            let mut interleaved = Vec::new();
            FlowDecoder::new(&[], &code, run.cfg.clone())
                .with_recovery(Recovery::NextPsb)
                .run_interleaved(t, 4, common::Blocks::default, |b| interleaved.extend(b.events));
            assert!(interleaved == want, "{name} corrupt, NextPsb, cpu {cpu}: interleaved and sequential differ");
            assert!(sequential(t, &code, &run.cfg) != want, "{name} corrupt, cpu {cpu}: NextPsb changed nothing");
        }
        let errors = bad
            .iter()
            .map(|t| sequential(t, &Static(&run.bare), &run.cfg).iter().filter(|e| matches!(e, FlowEvent::Error { .. })).count())
            .sum::<usize>();
        assert!(errors > 0 && events > 10_000, "{name}: {errors} errors in {events} events");
    }
}

/// Dense pokes (the poked bench's run, shorter): where a PSB+ comes before
/// the next flow packet and its FUP is the walk's IP, the whole-buffer walk
/// reads the code after the PSB+, as the decode of the segment starting
/// there does (before, it read it for the time before the PSB and could
/// take another content there). And no errors: the walk reads each
/// instruction for the time up to the next flow packet.
#[test]
fn poke_dense_segments_read_the_code_as_the_whole_walk_does() {
    let cfg = sim::SimConfig { cpus: 4, protocol: sim::Protocol::Int3, pokes: 3000, instructions: 300_000, ..sim::SimConfig::default() };
    let (summary, run) = common::simulate("parallel-poke-dense", &cfg, None);
    assert!(summary.pokes > 1000, "{} pokes", summary.pokes);
    let code = Interval(&run.full);
    let n = same("poke-dense Interval", &run.aux, &code, &run.cfg, 2);
    assert!(n > 1_000_000, "{n} events");
    let errors: usize = run.aux.iter().map(|t| sequential(t, &code, &run.cfg).iter().filter(|e| matches!(e, FlowEvent::Error { .. })).count()).sum();
    assert_eq!(errors, 0);
}

#[test]
fn segments_cut_at_each_psb() {
    let mut trace = vec![0u8; 5];
    trace.extend_from_slice(&intel_pt::PSB);
    trace.extend_from_slice(&[0x02, 0x23, 0, 0]);
    trace.extend_from_slice(&intel_pt::PSB);
    trace.extend_from_slice(&[0x02, 0x23]);
    assert_eq!(segments(&trace), [(5, 25), (25, 43)]);
    assert_eq!(segments(&[0, 0, 0]), [(0, 3)]);
    assert_eq!(segments(&[]), [(0, 0)]);
}

/// A sink that panics on the pool: the panic reaches the caller (no wait
/// for a segment that never comes).
#[test]
fn a_panicking_segment_sink_panics_the_caller() {
    struct Boom;
    impl intel_pt::flow::FlowSink for Boom {
        fn event(&mut self, _: FlowEvent) {
            panic!("boom");
        }
    }
    let cfg =
        sim::SimConfig { cpus: 1, protocol: sim::Protocol::None, pokes: 0, instructions: 20_000, psb_period: 1024, ..sim::SimConfig::default() };
    let (_, run) = common::simulate("parallel-panic", &cfg, None);
    let code = Static(&run.bare);
    let par = ParallelFlow::new(FlowDecoder::new(&[], &code, run.cfg.clone()));
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("thread pool");
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pool.install(|| par.run_segments(&run.aux[0], || Boom, |_| {}))));
    let message = got.expect_err("the sink's panic").downcast::<&str>().map(|m| *m);
    assert_eq!(message.ok(), Some("boom"));
}
