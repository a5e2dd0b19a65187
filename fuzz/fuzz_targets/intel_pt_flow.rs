//! Decodes arbitrary bytes as the Intel PT trace of a small program with the
//! instruction-flow decoder, over a code image that the input may poke.
//! Any panic, more events than the work bound (the decoder's guard against
//! loops), unbounded allocation (-rss_limit_mb / -malloc_limit_mb), error
//! naming an offset outside the buffer or before an earlier error,
//! instruction outside the image, or more code fetches than trials without
//! nesting can make, is a bug; so is any difference between stepping
//! instruction by instruction (the counting source offers no windows, so
//! nothing is cached) and the cached decode handing out blocks whole to a
//! `FlowSink`, expanded; or, without upper bounds on time, any difference
//! but an unbounded `hi` (none at all over a source that reads `hi`); or a
//! difference between the parallel decode replayed into one sink, into a
//! sink per segment, and with segments walked at once (`run_interleaved`,
//! and `ParallelFlow::with_lanes`).
//!
//! Input: byte 0 is the configuration (bit 0 noretcomp; bits 2:1 the code
//! source: static, perf-style, interval, interval; bits 5:3 trial_insns;
//! bit 6 set: resume at the next PSB after an error, not at the next TIP;
//! bit 7 which copy of the program the pokes change), byte 1
//! the number of pokes (low 2 bits), then each poke as 3 bytes (where,
//! length 1 to 5, time) and its new bytes; the rest is the trace. The
//! program is mapped twice, at a kernel address (for sign-extended IPs) and
//! at 0x1000 (reachable by 16-bit updates from a last IP of 0); pokes change
//! one copy, since pokes at both would make the timeline's span index cover
//! all the addresses between them (its 4 MiB maximum, on every input). The
//! time conversion is the identity, and poke times are 1000 + 4 * t, which
//! is where the seeds' TSCs are (`seeds/intel_pt_flow/`, written by
//! `cargo test -p intel-pt --test flow_bad_input -- --ignored write_fuzz_seeds`).
//!
//! The work is linear in the trace but its constant is large when the
//! interval source gives candidates everywhere (each candidate instruction
//! tries each content for trial_insns instructions, at most max_walk of them
//! a TNT bit): max_walk and trial_insns are kept small here so that an input
//! stays well under a second with the sanitizers. A loop that escapes the
//! bound fails the event-count assertion, before -timeout would:
//!
//!     cd fuzz
//!     cargo +nightly fuzz run intel_pt_flow corpus/intel_pt_flow seeds/intel_pt_flow -- \
//!         -max_total_time=300 -max_len=2048 -timeout=60
#![no_main]

use std::cell::Cell;

use codeimage::window::{Interval, PerfStyle, Static};
use codeimage::{BaseImage, CodeTimeline, Poke, TimelineBuilder};
use intel_pt::flow::{CodeSource, Content, Fetch, FlowConfig, FlowDecoder, FlowEvent, FlowSink, InsnBlock, Recovery, Time, TimeConv};
use intel_pt::parallel::ParallelFlow;
use libfuzzer_sys::fuzz_target;

const BASES: [u64; 2] = [0xffff_ffff_8100_0000, 0x1000];

/// The program of `crates/intel-pt/tests/flow_bad_input.rs`: a loop with
/// Jcc, an indirect call, an INT3 and its handler's IRETQ, a RET, a `jmp $`
/// and an invalid byte.
const PROGRAM: &[(u64, &[u8])] = &[
    (0x00, &[0x74, 0x02, 0x90, 0x90, 0xff, 0xd0, 0x75, 0xf8, 0x90, 0xeb, 0xf5]),
    (0x40, &[0x74, 0x01, 0xcc, 0xc3]),
    (0x60, &[0x48, 0xcf]),
    (0x80, &[0xeb, 0xfe]),
    (0x90, &[0x06, 0x06]),
];

const MAX_WALK: u64 = 16;

/// Counts the fetches of the source it wraps (and hands on its candidates,
/// with the times they hold, as the source gives them).
struct Counting<'a, C> {
    inner: &'a C,
    fetches: Cell<u64>,
}

impl<C: CodeSource> CodeSource for Counting<'_, C> {
    fn fetch(&self, addr: u64, lo: Time, hi: Time, which: usize, buf: &mut [u8; 16]) -> Fetch {
        self.fetches.set(self.fetches.get() + 1);
        self.inner.fetch(addr, lo, hi, which, buf)
    }

    fn candidates(&self, addr: u64, lo: Time, hi: Time, count: usize, out: &mut Vec<Content>) {
        self.fetches.set(self.fetches.get() + 1);
        self.inner.candidates(addr, lo, hi, count, out)
    }
}

/// The events of a cached decode, its blocks expanded.
struct Expanded(Vec<FlowEvent>);

impl FlowSink for Expanded {
    fn event(&mut self, e: FlowEvent) {
        self.0.push(e);
    }

    fn block(&mut self, b: InsnBlock<'_>) {
        let before = self.0.len();
        b.for_each_insn(|e| self.0.push(e));
        assert_eq!(self.0.len() - before, b.len(), "block at {:#x}: its length", b.ip);
        assert!(matches!(self.0.last(), Some(FlowEvent::Insn { ip, .. }) if *ip == b.last_ip), "block at {:#x}: its last IP", b.ip);
    }
}

fn mapped(ip: u64) -> bool {
    BASES.iter().any(|&b| PROGRAM.iter().any(|&(off, bytes)| (b + off..b + off + bytes.len() as u64).contains(&ip)))
}

fn check(trace: &[u8], code: &(impl CodeSource + Sync), cfg: &FlowConfig, recovery: Recovery) {
    let src = Counting { inner: code, fetches: Cell::new(0) };
    let bound = (trace.len() as u64 * 6 + 2) * (cfg.max_walk + 1);
    let mut events = 0u64;
    let mut last_error = 0;
    let mut stepped = Vec::new();
    FlowDecoder::new(trace, &src, cfg.clone()).with_recovery(recovery).run(|e| {
        stepped.push(e);
        events += 1;
        assert!(events <= bound, "more than {bound} events for {} bytes", trace.len());
        match e {
            FlowEvent::Insn { ip, len, .. } => {
                assert!(mapped(ip), "instruction at {ip:#x}, outside the image");
                assert!((1..=15).contains(&len));
            }
            FlowEvent::Error { offset, kind, .. } => {
                assert!(offset <= trace.len(), "{kind:?} at {offset}, past {}", trace.len());
                assert!(offset >= last_error, "{kind:?} at {offset}, before an earlier error at {last_error}");
                last_error = offset;
                let _ = kind.describe();
            }
            FlowEvent::Trap { .. } | FlowEvent::End { .. } | FlowEvent::Enabled { .. } | FlowEvent::State { .. } => {}
        }
    });
    // Each event's step fetches once, then at most 8 candidates, then tries
    // each for trial_insns steps, where a choice takes the first candidate
    // (no trial inside a trial): linear, not exponential. A PSB+ met while
    // walking is checked against the walk's path, at most max_walk steps of
    // 9 fetches, by the walk and by the trials of each choice within
    // trial_insns steps before it.
    let per_event = 9 + 8 * cfg.trial_insns * 9;
    let mut psbs = 0;
    let mut at = 0;
    while let Some(p) = intel_pt::find_psb(&trace[at..]) {
        psbs += 1;
        at += p + intel_pt::PSB.len();
    }
    let bound = events * per_event + psbs * 9 * (cfg.max_walk + 1) * (1 + 8 * (cfg.trial_insns + 1));
    assert!(src.fetches.get() <= bound, "{} fetches for {events} events and {psbs} PSBs", src.fetches.get());
    let mut cached = Expanded(Vec::new());
    FlowDecoder::new(trace, code, cfg.clone()).with_recovery(recovery).run_with(&mut cached);
    if let Some(i) = (0..stepped.len().max(cached.0.len())).find(|&i| stepped.get(i) != cached.0.get(i)) {
        panic!("event {i}: stepped {:x?}, cached {:x?}", stepped.get(i), cached.0.get(i));
    }
    // Without upper bounds only `hi` may change, and only over a source
    // that does not read it.
    let mut unbounded = Expanded(Vec::new());
    FlowDecoder::new(trace, code, cfg.clone()).with_recovery(recovery).with_upper_bounds(false).run_with(&mut unbounded);
    let want: Vec<FlowEvent> = if code.reads_hi() {
        stepped
    } else {
        stepped
            .iter()
            .map(|e| match *e {
                FlowEvent::Insn { ip, len, class, lo, uncertain, code, .. } => FlowEvent::Insn { ip, len, class, lo, hi: Time::MAX, uncertain, code },
                other => other,
            })
            .collect()
    };
    if let Some(i) = (0..want.len().max(unbounded.0.len())).find(|&i| want.get(i) != unbounded.0.get(i)) {
        panic!("event {i}: with bounds {:x?}, without {:x?}", want.get(i), unbounded.0.get(i));
    }
    // PSB segments in parallel, recorded and replayed, and into a sink per
    // segment: no panic, whole blocks (their order against the sequential
    // walk may differ on damaged input, where a segment restarts at its
    // PSB+ and the sequential walk may not).
    let par = ParallelFlow::new(FlowDecoder::new(&[], code, cfg.clone()).with_recovery(recovery));
    let mut replayed = Expanded(Vec::new());
    par.run_with(trace, &mut replayed);
    let mut joined = Vec::new();
    par.run_segments(trace, || Expanded(Vec::new()), |s| joined.extend(s.0));
    assert!(joined == replayed.0, "a sink per segment and the replay differ");
    // Segments walked at once, on this thread or on each of the pool's:
    // the same events as a sink per segment.
    let lanes = 1 + trace.len() % 4;
    let mut interleaved = Vec::new();
    FlowDecoder::new(&[], code, cfg.clone()).with_recovery(recovery).run_interleaved(
        trace,
        lanes,
        || Expanded(Vec::new()),
        |s| interleaved.extend(s.0),
    );
    if let Some(i) = (0..joined.len().max(interleaved.len())).find(|&i| joined.get(i) != interleaved.get(i)) {
        panic!("event {i}: a sink per segment {:x?}, {lanes} lanes {:x?}", joined.get(i), interleaved.get(i));
    }
    let mut grouped = Vec::new();
    ParallelFlow::new(FlowDecoder::new(&[], code, cfg.clone()).with_recovery(recovery)).with_lanes(lanes).run_segments(
        trace,
        || Expanded(Vec::new()),
        |s| grouped.extend(s.0),
    );
    assert!(grouped == joined, "{lanes} lanes a thread and a sink per segment differ");
}

fuzz_target!(|data: &[u8]| {
    let [flags, npokes, rest @ ..] = data else {
        return;
    };
    let mut rest = rest;
    let mut pokes: Vec<(Time, u64, Vec<u8>, Vec<u8>)> = Vec::new();
    for _ in 0..npokes & 3 {
        let [at, len, time, tail @ ..] = rest else {
            return;
        };
        let (off, bytes) = PROGRAM[usize::from(at % PROGRAM.len() as u8)];
        let start = usize::from(at / PROGRAM.len() as u8) % bytes.len();
        let len = usize::from(1 + len % 5).min(bytes.len() - start).min(tail.len());
        // No empty pokes: codeimage's TimelineBuilder::build mishandles one
        // inside another poke's range (`span.start - p.addr` underflows;
        // reported), and this target is about the flow decoder.
        if len > 0 {
            pokes.push((1000 + 4 * Time::from(*time), off + start as u64, bytes[start..start + len].to_vec(), tail[..len].to_vec()));
        }
        rest = &tail[len..];
    }
    let mut base = BaseImage::new();
    for b in BASES {
        for &(off, bytes) in PROGRAM {
            base.add_bytes(b + off, bytes.to_vec(), format!("code+{off:#x}"));
        }
    }
    let mut builder = TimelineBuilder::new(base);
    let poked = BASES[usize::from(flags >> 7)];
    for (time, off, old, new) in &pokes {
        builder.poke(Poke { time: *time, settled: None, addr: poked + off, old, new, cpu: None });
    }
    let code: CodeTimeline = builder.build();
    let cfg = FlowConfig {
        time: TimeConv { shift: 0, mult: 1, zero: 0 },
        noretcomp: flags & 1 != 0,
        idioms: isa::KernelIdioms::default(),
        max_walk: MAX_WALK,
        trial_insns: u64::from((flags >> 3) & 7),
    };
    let recovery = if flags & 0x40 != 0 { Recovery::NextPsb } else { Recovery::NextTip };
    match (flags >> 1) & 3 {
        0 => check(rest, &Static(&code), &cfg, recovery),
        1 => check(rest, &PerfStyle(&code), &cfg, recovery),
        _ => check(rest, &Interval(&code), &cfg, recovery),
    }
});
