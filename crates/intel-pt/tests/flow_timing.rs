//! MTC timing (`FlowDecoder::with_mtc`): after a TSC and its TMA, each MTC
//! moves the start of the time the instructions after the next flow packet
//! ran in, by the CTC ticks it shows (wrapping at 8 bits) converted to TSC
//! ticks, as perf converts them; never back, never past the next TSC. The
//! next MTC bounds the time of what comes before the flow packet after it:
//! the end of the CTC period it names. (What runs between two flow packets
//! may have run on either side of a timing packet between them.)
//! Without `with_mtc` MTC and TMA change nothing. Traces written with the
//! packet `Encoder`.

use codeimage::window::Static;
use codeimage::{BaseImage, CodeTimeline, TimelineBuilder};
use intel_pt::flow::{CycConv, FlowConfig, FlowDecoder, FlowEvent, MtcConv, Time, TimeConv};
use intel_pt::parallel::ParallelFlow;
use intel_pt::{Encoder, Packet, Tnt};

#[path = "common/hand.rs"]
mod hand;
use hand::{Trace, K};

/// A loop at `K`: `nop; jne K`, left when a branch is not taken, then `ret`.
fn code() -> CodeTimeline {
    let mut base = BaseImage::new();
    base.add_bytes(K, vec![0x90, 0x75, 0xfd, 0xc3], "loop");
    TimelineBuilder::new(base).build()
}

fn cfg() -> FlowConfig {
    hand::config(false, 64)
}

/// PSB+ with TSC 1000 and TMA (CTC 0x123, fast counter 4), then one turn
/// of the loop after each of the timing packets given, then the way out.
fn trace(timing: &[Packet]) -> Vec<u8> {
    let mut enc = Encoder::new();
    let mut out = Vec::new();
    let mut put = |enc: &mut Encoder, p: Packet| enc.encode(&p, &mut out).expect("encodes");
    put(&mut enc, Packet::Psb);
    put(&mut enc, Packet::Tsc(1000));
    put(&mut enc, Packet::Tma { ctc: 0x123, fast_counter: 4 });
    let fup = enc.compress(K);
    put(&mut enc, Packet::Fup(fup));
    put(&mut enc, Packet::PsbEnd);
    for &p in timing {
        put(&mut enc, Packet::TntShort(Tnt { bits: 1, count: 1 }));
        put(&mut enc, p);
    }
    put(&mut enc, Packet::TntShort(Tnt { bits: 0, count: 1 }));
    let end = enc.compress(K + 3);
    put(&mut enc, Packet::TipPgd(end));
    out
}

/// The `lo` of each turn's NOP.
fn starts(events: &[FlowEvent]) -> Vec<Time> {
    events
        .iter()
        .filter_map(|e| match *e {
            FlowEvent::Insn { ip, lo, .. } if ip == K => Some(lo),
            _ => None,
        })
        .collect()
}

/// Period 4 (shift 2), 3 TSC ticks per CTC tick: the CTC count starts at
/// TSC 1000 - 4 (fast counter) - 3 * (0x123 & 3) = 987, at MTC 0x48.
const MTC: MtcConv = MtcConv { shift: 2, ratio_n: 3, ratio_d: 1 };

#[test]
fn mtc_moves_time_on() {
    let code = code();
    let src = Static(&code);
    let t = trace(&[Packet::Mtc(0x4a), Packet::Mtc(0x4b), Packet::Mtc(0x4b), Packet::Tsc(1100), Packet::Mtc(0x4c), Packet::Tsc(2000)]);
    let mut events = Vec::new();
    FlowDecoder::new(&t, &src, cfg()).with_mtc(MTC).run(|e| events.push(e));
    // 0x4a: 2 MTC ticks = 8 CTC = 24 TSC past 987; 0x4b: 12 CTC = 36;
    // the same MTC again: no move; TSC 1100; 0x4c: 16 CTC = 1035, behind
    // the TSC, so the time stays 1100; TSC 2000. Each from the turn after
    // the packet's: a turn's NOP runs before the TNT after the packet.
    assert_eq!(starts(&events), [1000, 1000, 1011, 1023, 1023, 1100, 1100]);
    let his: Vec<Time> = events
        .iter()
        .filter_map(|e| match *e {
            FlowEvent::Insn { ip, hi, .. } if ip == K => Some(hi),
            _ => None,
        })
        .collect();
    // Each turn ran before the end of the next MTC's period (0x4a: 12 CTC
    // ticks past the base, 1023; 0x4b: 16, 1035), else the next TSC; 0x4c's
    // period ends (1047) before the TSC before it: no earlier than that TSC.
    assert_eq!(his, [1023, 1035, 1035, 1100, 1100, 2000, Time::MAX]);

    // The same, in PSB segments on the pool.
    let mut par = Vec::new();
    ParallelFlow::new(FlowDecoder::new(&[], &src, cfg()).with_mtc(MTC)).run(&t, |e| par.push(e));
    assert_eq!(par, events);
}

#[test]
fn mtc_wraps_and_stops_at_the_next_tsc() {
    let code = code();
    let src = Static(&code);
    // 0x48 -> 0x47 is 255 MTC ticks: 1020 CTC = 3060 TSC past 987 = 4047,
    // past the next TSC (3000): held there.
    let t = trace(&[Packet::Mtc(0x47), Packet::Tsc(3000)]);
    let mut events = Vec::new();
    FlowDecoder::new(&t, &src, cfg()).with_mtc(MTC).run(|e| events.push(e));
    assert_eq!(starts(&events), [1000, 1000, 3000]);
    // A smaller ratio: 255 * 4 CTC * 1/2 = 510 TSC: 1000 - 4 - 3/2 (1) + 510 = 1505.
    let mut events = Vec::new();
    FlowDecoder::new(&t, &src, cfg()).with_mtc(MtcConv { shift: 2, ratio_n: 1, ratio_d: 2 }).run(|e| events.push(e));
    assert_eq!(starts(&events), [1000, 1000, 1505]);
}

#[test]
fn without_mtc_timing_mtc_changes_nothing() {
    let code = code();
    let src = Static(&code);
    let with = trace(&[Packet::Mtc(0x4a), Packet::Tma { ctc: 7, fast_counter: 1 }, Packet::Mtc(0x10), Packet::Tsc(1100)]);
    let without = trace(&[Packet::Pad, Packet::Pad, Packet::Pad, Packet::Tsc(1100)]);
    let mut a = Vec::new();
    FlowDecoder::new(&with, &src, cfg()).run(|e| a.push(e));
    let mut b = Vec::new();
    FlowDecoder::new(&without, &src, cfg()).run(|e| b.push(e));
    assert_eq!(starts(&a), [1000; 5]);
    let ends: Vec<Time> = a
        .iter()
        .filter_map(|e| match *e {
            FlowEvent::Insn { ip, hi, .. } if ip == K => Some(hi),
            _ => None,
        })
        .collect();
    assert_eq!(ends, [1100, 1100, 1100, 1100, Time::MAX]);
    assert_eq!(starts(&a), starts(&b));
    // An MTC before any TMA is not placed either.
    let mut enc = Encoder::new();
    let mut t = Vec::new();
    for p in [
        Packet::Psb,
        Packet::Tsc(500),
        Packet::Fup(enc.compress(K)),
        Packet::PsbEnd,
        Packet::TntShort(Tnt { bits: 1, count: 1 }),
        Packet::Mtc(9),
        Packet::TntShort(Tnt { bits: 0, count: 1 }),
    ] {
        enc.encode(&p, &mut t).expect("encodes");
    }
    let mut c = Vec::new();
    FlowDecoder::new(&t, &src, cfg()).with_mtc(MTC).run(|e| c.push(e));
    assert_eq!(starts(&c), [500, 500]);
}

#[test]
fn mtc_from_perf_config() {
    // perf's masks: MTC enable bit 9, mtc_period bits 14-17.
    let (mtc_bit, freq_bits) = (1 << 9, 0xf << 14);
    assert_eq!(MtcConv::from_perf(1 << 9 | 3 << 14, mtc_bit, freq_bits, 200, 2), Some(MtcConv { shift: 3, ratio_n: 200, ratio_d: 2 }));
    assert_eq!(MtcConv::from_perf(3 << 14, mtc_bit, freq_bits, 200, 2), None, "MTC off");
    assert_eq!(MtcConv::from_perf(1 << 9, mtc_bit, freq_bits, 0, 2), None, "no ratio");
    assert_eq!(MtcConv::from_perf(1 << 9 | 9 << 14, mtc_bit, freq_bits, 1, 1).map(|m| m.shift), Some(9));
}

// CYC timing (`FlowDecoder::with_cyc`): a CYC gives the cycles since the
// last one, a core cycle is max_non_turbo_ratio / CBR TSC ticks; what
// follows the flow packet after a CYC ran no earlier than it, what comes
// before that packet no later.

impl Trace {
    fn fup(&mut self, at: u64) -> &mut Trace {
        let ip = self.enc.compress(at);
        self.put(Packet::Fup(ip))
    }
    fn pgd(&mut self, at: u64) -> &mut Trace {
        let ip = self.enc.compress(at);
        self.put(Packet::TipPgd(ip))
    }
    /// PSB+ with these timing packets, at `K`.
    fn psb(&mut self, timing: &[Packet]) -> &mut Trace {
        self.put(Packet::Psb);
        for &p in timing {
            self.put(p);
        }
        self.fup(K).put(Packet::PsbEnd)
    }
    /// One turn of the loop (TNT taken), or the way out (not taken).
    fn turn(&mut self, taken: bool) -> &mut Trace {
        self.put(Packet::TntShort(Tnt { bits: taken as u64, count: 1 }))
    }
    /// The way out of the loop, and the end of tracing at the RET.
    fn end(&mut self, timing: &[Packet]) -> Vec<u8> {
        for &p in timing {
            self.put(p);
        }
        self.turn(false).pgd(K + 3);
        std::mem::take(&mut self.out)
    }
}

/// `(lo, hi)` of each turn's NOP and of each JNE.
fn windows(events: &[FlowEvent], at: u64) -> Vec<(Time, Time)> {
    events
        .iter()
        .filter_map(|e| match *e {
            FlowEvent::Insn { ip, lo, hi, .. } if ip == at => Some((lo, hi)),
            _ => None,
        })
        .collect()
}

fn decode(t: &[u8], mtc: Option<MtcConv>, cyc: Option<CycConv>) -> Vec<FlowEvent> {
    let code = code();
    let src = Static(&code);
    let mut events = Vec::new();
    FlowDecoder::new(t, &src, cfg()).with_mtc(mtc).with_cyc(cyc).run(|e| events.push(e));
    let mut par = Vec::new();
    ParallelFlow::new(FlowDecoder::new(&[], &src, cfg()).with_mtc(mtc).with_cyc(cyc)).run(t, |e| par.push(e));
    assert_eq!(par, events, "PSB segments on the pool decode as one");
    events
}

/// 3 TSC ticks (ns here) per core cycle at CBR 1.
const CYC3: CycConv = CycConv { max_non_turbo_ratio: 3 };

#[test]
fn cyc_times_between_tscs() {
    let mut t = Trace::new();
    t.psb(&[Packet::Tsc(1000), Packet::Cbr(1)]);
    for c in [10, 5, 7] {
        t.put(Packet::Cyc(c)).turn(true);
    }
    let t = t.end(&[Packet::Cyc(4)]);
    let events = decode(&t, None, Some(CYC3));
    // The CYC before PSB+ ran by its TSC (1000): the first CYC by 1000 + 30;
    // its lower bound is the TSC. Each later CYC adds its cycles to both
    // bounds: 1015..1045, 1036..1066, 1048..1078. The NOP of a turn runs
    // between the last CYC's lower bound (taken in with its TNT) and the
    // upper bound of the CYC before the JNE.
    assert_eq!(windows(&events, K), [(1000, 1030), (1000, 1045), (1015, 1066), (1036, 1078)]);
    assert_eq!(windows(&events, K + 1), windows(&events, K));
    // Tracing stops at the RET, after the last CYC: no earlier than it.
    assert!(matches!(events.last(), Some(FlowEvent::End { time: 1048, at: Some(at), .. }) if *at == K + 3), "{:?}", events.last());
    // Without CYC timing the same trace is timed by its TSC alone.
    let plain = decode(&t, None, None);
    assert!(windows(&plain, K).iter().all(|&w| w == (1000, Time::MAX)));
}

/// A CYC chain through MTCs: the MTC of tick 0x48 is at 987 (the TMA's CTC
/// 0x123, fast counter 4 at TSC 1000, 3 TSC ticks per CTC tick, period 4),
/// 0x4a at 1011, 0x4b at 1023. Branches at 1006, 1015, 1018, 1027, 1039;
/// the CYC before PSB+ at 1000.
fn mtc_cyc_trace() -> Vec<u8> {
    let mut t = Trace::new();
    t.psb(&[Packet::Tsc(1000), Packet::Tma { ctc: 0x123, fast_counter: 4 }, Packet::Cbr(1)]);
    t.put(Packet::Cyc(2)).turn(true).put(Packet::Mtc(0x4a));
    t.put(Packet::Cyc(3)).turn(true);
    t.put(Packet::Cyc(1)).turn(true).put(Packet::Mtc(0x4b));
    t.put(Packet::Cyc(3)).turn(true);
    t.end(&[Packet::Cyc(4)])
}

#[test]
fn cyc_times_between_mtcs() {
    let t = mtc_cyc_trace();
    let events = decode(&t, Some(MTC), Some(CYC3));
    // The upper bounds count from the TSC, which the CYC before PSB+ ran
    // by: exact. The lower bounds count from the first CYC, no earlier than
    // the TSC (1000; it ran at 1006), each raised to the last MTC where that
    // is later: 1000 + 9 = 1009 (1011 by MTC 0x4a), 1014, 1023, 1035. Each
    // holds for the NOP of the turn after its TNT's; a JNE, which takes its
    // TNT, ran after the MTC before it.
    let want = [(1000, 1006), (1000, 1015), (1011, 1018), (1014, 1027), (1023, 1039)];
    assert_eq!(windows(&events, K), want);
    assert_eq!(windows(&events, K + 1), [(1000, 1006), (1011, 1015), (1011, 1018), (1023, 1027), (1023, 1039)]);
    let branches = [1006, 1015, 1018, 1027, 1039];
    for (&(lo, hi), b) in windows(&events, K + 1).iter().zip(branches) {
        assert!(lo <= b && b <= hi, "branch at {b} outside [{lo}, {hi}]");
    }
    // MTC alone: each turn within its MTC period.
    let mtc_only = decode(&t, Some(MTC), None);
    assert_eq!(windows(&mtc_only, K), [(1000, 1023), (1000, 1035), (1011, 1035), (1011, Time::MAX), (1023, Time::MAX)]);
}

#[test]
fn cyc_is_ignored_without_cbr_or_ratio() {
    let with_cyc = mtc_cyc_trace();
    let mtc_only = windows(&decode(&with_cyc, Some(MTC), None), K);
    // No ratio: `None`, or a zero ratio (perf writes 0 when it does not know).
    assert_eq!(windows(&decode(&with_cyc, Some(MTC), CycConv::from_perf(2, 2, 0)), K), mtc_only);
    assert_eq!(windows(&decode(&with_cyc, Some(MTC), Some(CycConv { max_non_turbo_ratio: 0 })), K), mtc_only);
    // No CBR in the trace, or a CBR of 0.
    for cbr in [None, Some(0)] {
        let mut t = Trace::new();
        let mut psb = vec![Packet::Tsc(1000), Packet::Tma { ctc: 0x123, fast_counter: 4 }];
        psb.extend(cbr.map(Packet::Cbr));
        t.psb(&psb);
        t.put(Packet::Cyc(2)).turn(true).put(Packet::Mtc(0x4a));
        t.put(Packet::Cyc(3)).turn(true);
        t.put(Packet::Cyc(1)).turn(true).put(Packet::Mtc(0x4b));
        t.put(Packet::Cyc(3)).turn(true);
        let t = t.end(&[Packet::Cyc(4)]);
        assert_eq!(windows(&decode(&t, Some(MTC), Some(CYC3)), K), mtc_only, "CBR {cbr:?}");
    }
}

#[test]
fn cyc_from_perf_config() {
    // perf's cyc bit is config bit 1; AUXTRACE_INFO word 15 the ratio.
    assert_eq!(CycConv::from_perf(1 << 1 | 1 << 10, 1 << 1, 24), Some(CycConv { max_non_turbo_ratio: 24 }));
    assert_eq!(CycConv::from_perf(1 << 10, 1 << 1, 24), None, "CYC off");
    assert_eq!(CycConv::from_perf(1 << 1, 0, 24), None, "no cyc bit");
    assert_eq!(CycConv::from_perf(1 << 1, 1 << 1, 0), None, "no ratio");
    assert_eq!(CycConv::from_perf(1 << 1, 1 << 1, 1 << 40), None, "a ratio no CPU has");
}

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A consistent trace of `turns` turns, as hardware times it: the JNE of
/// turn i at `b[i]`, its NOP just before; a CYC before each TNT (the core
/// at CBR cycles a ns: max non-turbo ratio 1, CBR 2, or with `changes` now
/// and then 4 or 2 again, from a point between two branches, with its CBR
/// packet there); an MTC after a TNT when the CTC (3 ns a tick, period 4)
/// has passed a period; a PSB+ (TSC, TMA, CBR) now and then. Returns the
/// trace and the branch times.
fn timed_trace(seed: u64, turns: usize, changes: bool) -> (Vec<u8>, Vec<u64>) {
    let mut rng = Rng(seed);
    let mut t = Trace::new();
    let mut now = 5000 + rng.below(100);
    // Core cycles: the count at the last CYC, and since then.
    let (mut rate, mut counted) = (2u64, rng.below(40));
    let psb = |t: &mut Trace, now: u64, rate: u64| {
        let ctc = now / 3;
        t.psb(&[Packet::Tsc(now), Packet::Tma { ctc: ctc as u16, fast_counter: (now % 3) as u16 }, Packet::Cbr(rate as u8)]);
        ctc >> 2
    };
    let mut tick = psb(&mut t, now, rate);
    let mut change = None;
    let mut branches = Vec::new();
    for i in 0..turns {
        let next = now + 2 + rng.below(if i % 10 < 7 { 6 } else { 60 });
        counted += match change.take() {
            // The new ratio from `at`, between the last branch and this one.
            Some(new) => {
                let at = now + rng.below(next - now + 1);
                let c = (at - now) * rate + (next - at) * new;
                rate = new;
                c
            }
            None => (next - now) * rate,
        };
        now = next;
        branches.push(now);
        let last = i + 1 == turns;
        t.put(Packet::Cyc(counted));
        counted = 0;
        t.turn(!last);
        if last {
            break;
        }
        if rng.below(25) == 0 {
            tick = psb(&mut t, now, rate);
        } else if (now / 3) >> 2 > tick {
            tick = (now / 3) >> 2;
            t.put(Packet::Mtc(tick as u8));
        }
        if changes && rng.below(8) == 0 {
            let new = 6 - rate;
            t.put(Packet::Cbr(new as u8));
            change = Some(new);
        }
    }
    t.pgd(K + 3);
    (t.out, branches)
}

#[test]
fn cyc_windows_hold_the_truth_and_narrow_them() {
    let cyc = CycConv { max_non_turbo_ratio: 1 };
    let mtc = MtcConv { shift: 2, ratio_n: 3, ratio_d: 1 };
    let (mut with_cyc, mut mtc_only) = (0u128, 0u128);
    for seed in 1..40 {
        let (t, branches) = timed_trace(seed, 400, seed % 2 == 0);
        let events = decode(&t, Some(mtc), Some(cyc));
        let (nops, jnes) = (windows(&events, K), windows(&events, K + 1));
        assert_eq!(jnes.len(), branches.len(), "seed {seed}");
        let mut last_lo = 0;
        for (i, &b) in branches.iter().enumerate() {
            let ((nlo, nhi), (jlo, jhi)) = (nops[i], jnes[i]);
            let nop = b - 1;
            assert!(nlo <= nop && nop <= nhi, "seed {seed} turn {i}: NOP at {nop} outside [{nlo}, {nhi}]");
            assert!(jlo <= b && b <= jhi, "seed {seed} turn {i}: JNE at {b} outside [{jlo}, {jhi}]");
            assert!(last_lo <= nlo && nlo <= jlo, "seed {seed} turn {i}: time went back");
            last_lo = jlo;
            with_cyc += u128::from(jhi - jlo);
        }
        let plain = decode(&t, Some(mtc), None);
        for ((lo, hi), b) in windows(&plain, K + 1).into_iter().zip(&branches) {
            assert!(lo <= *b && *b <= hi);
            mtc_only += u128::from(hi.min(lo + 10_000) - lo);
        }
    }
    // The branches are 2 to 61 ns apart and an MTC period is 12 ns: CYC
    // leaves each JNE the time since the last branch, MTC about a period.
    eprintln!("sum of JNE windows: {with_cyc} ns with CYC, {mtc_only} ns with MTC alone");
    assert!(with_cyc * 2 < mtc_only, "mean window: {with_cyc} with CYC, {mtc_only} with MTC alone");
}

#[test]
fn bad_cyc_and_cbr_values_do_not_panic() {
    let mut rng = Rng(7);
    let convs = [
        TimeConv { shift: 0, mult: 1, zero: 0 },
        TimeConv { shift: 63, mult: u64::MAX, zero: u64::MAX },
        TimeConv { shift: 200, mult: 3, zero: 1 << 63 },
    ];
    for round in 0..300 {
        let mut t = Trace::new();
        t.psb(&[Packet::Tsc(rng.below(1 << 40)), Packet::Cbr(rng.below(256) as u8)]);
        for _ in 0..40 {
            let p = match rng.below(6) {
                0 => Packet::Cyc([0, 1, (1 << 61) - 1, rng.below(1 << 20)][rng.below(4) as usize]),
                1 => Packet::Cbr([0, 1, 255, rng.below(256) as u8][rng.below(4) as usize]),
                2 => Packet::Mtc(rng.below(256) as u8),
                3 => Packet::Tsc(rng.below(u64::MAX >> 8)),
                4 => Packet::Tma { ctc: rng.below(1 << 16) as u16, fast_counter: rng.below(512) as u16 },
                _ => Packet::Ovf,
            };
            t.put(p).turn(true);
        }
        let t = t.end(&[Packet::Cyc(u64::MAX >> 3)]);
        let code = code();
        let src = Static(&code);
        let ratio = [1, 3, u32::MAX][round % 3];
        let mut cfg = cfg();
        cfg.time = convs[round % convs.len()];
        FlowDecoder::new(&t, &src, cfg).with_mtc(MTC).with_cyc(CycConv { max_non_turbo_ratio: ratio }).run(|e| {
            if let FlowEvent::Insn { lo, hi, .. } = e {
                assert!(lo <= hi, "round {round}: [{lo}, {hi}]");
            }
        });
    }
}

#[path = "common/flow.rs"]
mod common;

/// Without upper bounds (`with_upper_bounds(false)`): over a source that
/// does not read `hi` (Static, PerfStyle) each event is what it is with
/// them, `hi` unbounded; over one that does (Interval), nothing changes.
/// On a simulated run with pokes and a TSC every 200 ns.
#[test]
fn without_upper_bounds_only_hi_changes() {
    use codeimage::window::{Interval, PerfStyle};
    use intel_pt::flow::CodeSource;
    fn events<C: CodeSource + Sync>(trace: &[u8], code: &C, cfg: &FlowConfig, bounds: bool) -> Vec<FlowEvent> {
        let mut out = Vec::new();
        FlowDecoder::new(trace, code, cfg.clone()).with_upper_bounds(bounds).run(|e| out.push(e));
        let mut parallel = Vec::new();
        ParallelFlow::new(FlowDecoder::new(&[], code, cfg.clone()).with_upper_bounds(bounds)).run(trace, |e| parallel.push(e));
        assert!(parallel == out, "parallel and sequential differ (bounds {bounds})");
        out
    }
    fn unbounded(e: &FlowEvent) -> FlowEvent {
        match *e {
            FlowEvent::Insn { ip, len, class, lo, uncertain, code, .. } => FlowEvent::Insn { ip, len, class, lo, hi: Time::MAX, uncertain, code },
            other => other,
        }
    }
    let sim = sim::SimConfig { cpus: 1, protocol: sim::Protocol::Int3, pokes: 50, instructions: 30_000, ..sim::SimConfig::default() };
    let (_, run) = common::simulate("upper-bounds", &sim, None);
    let trace = &run.aux[0];
    for (what, with, without) in [
        ("Static", events(trace, &Static(&run.bare), &run.cfg, true), events(trace, &Static(&run.bare), &run.cfg, false)),
        ("PerfStyle", events(trace, &PerfStyle(&run.full), &run.cfg, true), events(trace, &PerfStyle(&run.full), &run.cfg, false)),
    ] {
        let bounded = with.iter().filter(|e| matches!(e, FlowEvent::Insn { hi, .. } if *hi != Time::MAX)).count();
        assert!(bounded > with.len() / 2, "{what}: {bounded} of {} events bounded with bounds on", with.len());
        assert!(without.iter().all(|e| !matches!(e, FlowEvent::Insn { hi, .. } if *hi != Time::MAX)), "{what}: a bound without bounds");
        let want: Vec<FlowEvent> = with.iter().map(unbounded).collect();
        assert!(without == want, "{what}: events other than hi differ without bounds");
    }
    let (with, without) = (events(trace, &Interval(&run.full), &run.cfg, true), events(trace, &Interval(&run.full), &run.cfg, false));
    assert!(with == without && with.len() > 20_000, "Interval: upper bounds off changed its events");
}
