//! The decoded-block cache changes nothing: every event is what decoding
//! instruction by instruction gives (a source that offers no windows is
//! never cached), on simulated runs whose code is poked under every
//! protocol, and a poke inside a cached block is seen from its time on,
//! not before.

#[path = "common/flow.rs"]
mod common;

use codeimage::window::{Interval, PerfStyle, Static};
use codeimage::{BaseImage, CodeTimeline, Poke, TimelineBuilder};
use intel_pt::flow::{CodeSource, Content, Fetch, FlowConfig, FlowDecoder, FlowEvent, Time, TimeConv};
use intel_pt::{Encoder, Packet, Tnt};
use isa::BranchClass;

/// `C` without its windows: the decoder steps instruction by instruction
/// (reading the same candidates, with their times).
struct Uncached<C>(C);

impl<C: CodeSource> CodeSource for Uncached<C> {
    fn fetch(&self, addr: u64, lo: Time, hi: Time, which: usize, buf: &mut [u8; 16]) -> Fetch {
        self.0.fetch(addr, lo, hi, which, buf)
    }

    fn candidates(&self, addr: u64, lo: Time, hi: Time, count: usize, out: &mut Vec<Content>) {
        self.0.candidates(addr, lo, hi, count, out)
    }
}

fn decode(trace: &[u8], code: &impl CodeSource, cfg: &FlowConfig) -> Vec<FlowEvent> {
    let mut out = Vec::new();
    FlowDecoder::new(trace, code, cfg.clone()).run(|e| out.push(e));
    out
}

/// Every CPU's events, cached and not, for each source; one decoder reused
/// across the CPUs (the cache carries over). A sink taking blocks whole
/// gets the same instructions, in blocks.
fn same_events(name: &str, run: &common::Run) -> usize {
    fn check<C: CodeSource>(name: &str, what: &str, run: &common::Run, cached: C, uncached: Uncached<C>) -> usize {
        let mut dec = FlowDecoder::new(&[], &cached, run.cfg.clone());
        let mut n = 0;
        for (cpu, trace) in run.aux.iter().enumerate() {
            let mut got = Vec::new();
            dec.reset(trace);
            dec.run(|e| got.push(e));
            let want = decode(trace, &uncached, &run.cfg);
            if let Some(i) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
                panic!("{name} {what} cpu {cpu}: event {i} differs: cached {:x?}, stepped {:x?}", got.get(i), want.get(i));
            }
            let mut blocks = common::Blocks::default();
            dec.reset(trace);
            dec.run_with(&mut blocks);
            assert!(blocks.events == want, "{name} {what} cpu {cpu}: blocks expanded differ from stepping");
            assert!(blocks.blocks * 2 > want.len() / 10, "{name} {what} cpu {cpu}: {} blocks for {} events", blocks.blocks, want.len());
            n += got.len();
        }
        n
    }
    check(name, "Static", run, Static(&run.bare), Uncached(Static(&run.bare)))
        + check(name, "PerfStyle", run, PerfStyle(&run.full), Uncached(PerfStyle(&run.full)))
        + check(name, "Interval", run, Interval(&run.full), Uncached(Interval(&run.full)))
}

#[test]
fn cached_equals_stepped_on_poked_runs() {
    for (protocol, tsc_period) in [
        (sim::Protocol::Int3, 20),
        (sim::Protocol::Int3, 200),
        (sim::Protocol::PrePost, 50),
        (sim::Protocol::SingleAfter, 100),
        (sim::Protocol::None, 200),
    ] {
        let cfg = sim::SimConfig { cpus: 2, protocol, pokes: 150, instructions: 30_000, tsc_period, ..sim::SimConfig::default() };
        let name = format!("cache-{protocol}-{tsc_period}");
        let (summary, run) = common::simulate(&name, &cfg, None);
        assert!(summary.pokes > 0 || protocol == sim::Protocol::None, "{name}: no pokes");
        let events = same_events(&name, &run);
        assert!(events > 50_000, "{name}: {events} events");
    }
}

const K: u64 = 0xffff_ffff_8100_0000;

/// A loop at `K`: `nop; nop2; jne K` then `ret`, with the two-byte NOP
/// turned into `xor eax, eax` (same length, class `None`) at time 1000.
fn poked_loop() -> CodeTimeline {
    let mut base = BaseImage::new();
    base.add_bytes(K, vec![0x90, 0x66, 0x90, 0x75, 0xfb, 0xc3], "loop");
    let mut b = TimelineBuilder::new(base);
    b.poke(Poke { time: 1000, settled: None, addr: K + 1, old: &[0x66, 0x90], new: &[0x31, 0xc0], cpu: None });
    b.build()
}

/// Ten turns of the loop before the poke (TSC 100 to 500), then turns
/// whose time brackets it (500 to 1500), then after it (1500 to 2000),
/// then out of the loop and the end of tracing.
fn loop_trace() -> Vec<u8> {
    let mut enc = Encoder::new();
    let mut out = Vec::new();
    let mut put = |enc: &mut Encoder, p: Packet| enc.encode(&p, &mut out).expect("encodes");
    let tnt = |n: u8, taken: bool| Packet::TntShort(Tnt { bits: if taken { (1 << n) - 1 } else { 0 }, count: n });
    put(&mut enc, Packet::Psb);
    put(&mut enc, Packet::Tsc(100));
    let fup = enc.compress(K);
    put(&mut enc, Packet::Fup(fup));
    put(&mut enc, Packet::PsbEnd);
    for _ in 0..2 {
        put(&mut enc, tnt(5, true));
    }
    put(&mut enc, Packet::Tsc(500));
    put(&mut enc, tnt(3, true));
    put(&mut enc, Packet::Tsc(1500));
    put(&mut enc, tnt(6, true));
    put(&mut enc, Packet::Tsc(2000));
    put(&mut enc, tnt(1, false));
    let end = enc.compress(K + 5);
    put(&mut enc, Packet::TipPgd(end));
    out
}

#[test]
fn poke_inside_a_cached_block_is_seen_at_its_time() {
    let code = poked_loop();
    let trace = loop_trace();
    let cfg = FlowConfig {
        time: TimeConv { shift: 0, mult: 1, zero: 0 },
        noretcomp: false,
        idioms: isa::KernelIdioms::default(),
        max_walk: 1000,
        trial_insns: 64,
    };
    // The NOP2's slot, K + 1, as each instruction event has it: (lo, hi, class, uncertain).
    let at_site = |events: &[FlowEvent]| -> Vec<(Time, Time, BranchClass, bool)> {
        events
            .iter()
            .filter_map(|e| match *e {
                FlowEvent::Insn { ip, lo, hi, class, uncertain, .. } if ip == K + 1 => Some((lo, hi, class, uncertain)),
                _ => None,
            })
            .collect()
    };

    let interval = decode(&trace, &Interval(&code), &cfg);
    assert_eq!(interval, decode(&trace, &Uncached(Interval(&code)), &cfg));
    let site = at_site(&interval);
    assert_eq!(site.len(), 10 + 3 + 6 + 1, "{site:?}");
    for &(lo, hi, class, uncertain) in &site {
        if hi < 1000 {
            assert_eq!((class, uncertain), (BranchClass::Nop, false), "before the poke: {site:?}");
        } else if lo >= 1000 {
            assert_eq!((class, uncertain), (BranchClass::None, false), "after the poke: {site:?}");
        } else {
            assert!(uncertain, "the interval holds the poke: {site:?}");
        }
    }
    // Each side of the poke is there: the cache neither missed it nor saw it
    // early. A turn that starts with no TNT bit left ran up to a bit in the
    // TNT after the next TSC, so it has both TSCs' bounds: the 14th, whose
    // JE's bit is the first after TSC 1500, may have run its NOP2 before
    // 1500 and is uncertain; 6 turns after that are past the poke.
    assert_eq!(site.iter().filter(|s| s.1 < 1000).count(), 10);
    assert_eq!(site.iter().filter(|s| s.0 >= 1000).count(), 6);
    assert_eq!(site[13].0, 500, "{site:?}");
    assert_eq!(site[13].1, 2000, "{site:?}");

    // Read at the last timestamp taken with a flow packet (perf takes a TSC
    // only when it needs the packet after it): the old NOP up to the TNT
    // after the TSC past the poke, so in 14 turns.
    let perf = decode(&trace, &PerfStyle(&code), &cfg);
    assert_eq!(perf, decode(&trace, &Uncached(PerfStyle(&code)), &cfg));
    let classes: Vec<BranchClass> = at_site(&perf).iter().map(|s| s.2).collect();
    let nops = classes.iter().take_while(|&&c| c == BranchClass::Nop).count();
    assert_eq!(nops, 14, "{classes:?}");
    assert!(classes[nops..].iter().all(|&c| c == BranchClass::None), "{classes:?}");
}

/// `Interval::candidates` (one look at the timeline) gives what `fetch`
/// gives for each `which`, around the poke and away from it.
#[test]
fn interval_candidates_in_one_look() {
    let code = poked_loop();
    let src = Interval(&code);
    for (addr, lo, hi) in [(K + 1, 500, 1500), (K, 500, 1500), (K + 1, 100, 500), (K + 1, 1500, 2000), (K + 64, 0, 10)] {
        let mut buf = [0u8; 16];
        let count = match src.fetch(addr, lo, hi, 0, &mut buf) {
            Fetch::Candidate { count, .. } => count,
            _ => 1,
        };
        let mut want = Vec::new();
        for which in 0..count {
            let mut buf = [0u8; 16];
            if let Fetch::Exact(n) | Fetch::Candidate { filled: n, .. } = src.fetch(addr, lo, hi, which, &mut buf) {
                want.push((buf, n));
            }
        }
        let mut got = Vec::new();
        src.candidates(addr, lo, hi, count, &mut got);
        let bytes: Vec<([u8; 16], usize)> = got.iter().map(|c| (c.bytes, c.len)).collect();
        assert_eq!(bytes, want, "{addr:#x} [{lo}, {hi}]");
        let times: Vec<(Time, Time)> = got.iter().map(|c| (c.from, c.to)).collect();
        if addr <= K + 1 && lo == 500 {
            // The poke lands inside the read: both contents, each up to or from it.
            assert_eq!(times, [(500, 999), (1000, 1500)]);
        } else {
            assert!(times.iter().all(|&t| t == (lo, hi)), "{addr:#x} [{lo}, {hi}]: {times:?}");
        }
    }
}

/// Code at `K` that starts with `je +0`, and its trace: a PSB+ at `K`
/// (TSC 100), the JE's bit, then a TIP.PGE to `pge`, read at the
/// instruction after the JE, then one more TNT bit.
fn je_then_pge(code: Vec<u8>, pge: u64) -> (CodeTimeline, Vec<u8>) {
    let mut base = BaseImage::new();
    base.add_bytes(K, code, "f");
    let mut enc = Encoder::new();
    let mut trace = Vec::new();
    let mut put = |enc: &mut Encoder, p: Packet| enc.encode(&p, &mut trace).expect("encodes");
    put(&mut enc, Packet::Psb);
    put(&mut enc, Packet::Tsc(100));
    let fup = enc.compress(K);
    put(&mut enc, Packet::Fup(fup));
    put(&mut enc, Packet::PsbEnd);
    put(&mut enc, Packet::TntShort(Tnt { bits: 1, count: 1 }));
    let pge = enc.compress(pge);
    put(&mut enc, Packet::TipPge(pge));
    put(&mut enc, Packet::TntShort(Tnt { bits: 1, count: 1 }));
    (TimelineBuilder::new(base).build(), trace)
}

fn identity_time(max_walk: u64) -> FlowConfig {
    FlowConfig { time: TimeConv { shift: 0, mult: 1, zero: 0 }, noretcomp: false, idioms: isa::KernelIdioms::default(), max_walk, trial_insns: 16 }
}

/// Found by the `intel_pt_flow` fuzz target (cached against stepped): a
/// TIP.PGE read while the walk is tracing, before the next instruction
/// runs. Both ways the walk goes on at the TIP.PGE's IP (the call there
/// never ran as far as the trace says): the RET at `K + 4`, whose TIP is
/// missing, is where the error is.
#[test]
fn a_tip_pge_while_tracing_moves_the_walk() {
    // je +0; call *%rax; ret. The TIP.PGE is read after the JE's bit.
    let (code, trace) = je_then_pge(vec![0x74, 0x00, 0xff, 0xd0, 0xc3], K + 4);
    let cfg = identity_time(100);
    for (cached, stepped) in [
        (decode(&trace, &Static(&code), &cfg), decode(&trace, &Uncached(Static(&code)), &cfg)),
        (decode(&trace, &Interval(&code), &cfg), decode(&trace, &Uncached(Interval(&code)), &cfg)),
    ] {
        assert_eq!(cached, stepped);
        let error_ip = cached.iter().find_map(|e| match *e {
            FlowEvent::Error { ip, kind: intel_pt::flow::FlowErrorKind::NoTip, .. } => Some(ip),
            _ => None,
        });
        assert_eq!(error_ip, Some(Some(K + 4)), "{cached:x?}");
        assert!(!cached.iter().any(|e| matches!(e, FlowEvent::Insn { ip, .. } if *ip == K + 2)), "{cached:x?}");
    }
}

/// Found by the `intel_pt_flow` fuzz target: a TIP.PGE read at a cached
/// block's first instruction starts the count of instructions walked
/// without a packet again, as stepping counts it, so both give up on a
/// loop without packets at the same instruction.
#[test]
fn a_tip_pge_restarts_the_walk_count_as_stepping_does() {
    // je +0; 1: nop; jmp 1b (a loop that needs no packet; a block follows it
    // 256 instructions). The TIP.PGE is read at the loop's first instruction.
    let (code, trace) = je_then_pge(vec![0x74, 0x00, 0x90, 0xeb, 0xfd], K + 2);
    let cfg = identity_time(1000);
    let cached = decode(&trace, &Static(&code), &cfg);
    assert_eq!(cached, decode(&trace, &Uncached(Static(&code)), &cfg));
    let insns = cached.iter().take_while(|e| matches!(e, FlowEvent::Insn { .. })).count();
    assert!(matches!(cached.get(insns), Some(FlowEvent::Error { kind: intel_pt::flow::FlowErrorKind::NoProgress, .. })), "{:x?}", cached.get(insns));
    assert_eq!(insns, 1 + 1000, "the JE, then max_walk from the TIP.PGE's IP");
}
