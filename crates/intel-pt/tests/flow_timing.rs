//! MTC timing (`FlowDecoder::with_mtc`): after a TSC and its TMA, each MTC
//! moves the start of the time the following instructions ran in, by the
//! CTC ticks it shows (wrapping at 8 bits) converted to TSC ticks, as perf
//! converts them; never back, never past the next TSC. The next MTC bounds
//! the time of what comes before it: the end of the CTC period it names.
//! Without `with_mtc` MTC and TMA change nothing. Traces written with the
//! packet `Encoder`.

use codeimage::{BaseImage, CodeTimeline, TimelineBuilder};
use intel_pt::flow::{FlowConfig, FlowDecoder, FlowEvent, MtcConv, Time, TimeConv};
use intel_pt::parallel::ParallelFlow;
use intel_pt::sources::Static;
use intel_pt::{Encoder, Packet, Tnt};

const K: u64 = 0xffff_ffff_8100_0000;

/// A loop at `K`: `nop; jne K`, left when a branch is not taken, then `ret`.
fn code() -> CodeTimeline {
    let mut base = BaseImage::new();
    base.add_bytes(K, vec![0x90, 0x75, 0xfd, 0xc3], "loop");
    TimelineBuilder::new(base).build()
}

fn cfg() -> FlowConfig {
    FlowConfig { time: TimeConv { shift: 0, mult: 1, zero: 0 }, noretcomp: false, idioms: isa::KernelIdioms::default(), max_walk: 1000, trial_insns: 64 }
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
    events.iter().filter_map(|e| match *e { FlowEvent::Insn { ip, lo, .. } if ip == K => Some(lo), _ => None }).collect()
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
    // the TSC, so the time stays 1100; TSC 2000.
    assert_eq!(starts(&events), [1000, 1011, 1023, 1023, 1100, 1100, 2000]);
    let his: Vec<Time> = events.iter().filter_map(|e| match *e { FlowEvent::Insn { ip, hi, .. } if ip == K => Some(hi), _ => None }).collect();
    // Each turn ran before the end of the next MTC's period (0x4a: 12 CTC
    // ticks past the base, 1023; 0x4b: 16, 1035), else the next TSC; 0x4c's
    // period ends (1047) before the TSC before it: no earlier than that TSC.
    assert_eq!(his, [1023, 1035, 1035, 1100, 1100, 2000, Time::MAX]);

    // The same, in PSB segments on the pool.
    let mut par = Vec::new();
    ParallelFlow::new(&src, cfg()).with_mtc(MTC).run(&t, |e| par.push(e));
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
    assert_eq!(starts(&events), [1000, 3000, 3000]);
    // A smaller ratio: 255 * 4 CTC * 1/2 = 510 TSC: 1000 - 4 - 3/2 (1) + 510 = 1505.
    let mut events = Vec::new();
    FlowDecoder::new(&t, &src, cfg()).with_mtc(MtcConv { shift: 2, ratio_n: 1, ratio_d: 2 }).run(|e| events.push(e));
    assert_eq!(starts(&events), [1000, 1505, 3000]);
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
    assert_eq!(starts(&a), [1000, 1000, 1000, 1000, 1100]);
    assert_eq!(starts(&a), starts(&b));
    // An MTC before any TMA is not placed either.
    let mut enc = Encoder::new();
    let mut t = Vec::new();
    for p in [Packet::Psb, Packet::Tsc(500), Packet::Fup(enc.compress(K)), Packet::PsbEnd, Packet::TntShort(Tnt { bits: 1, count: 1 }), Packet::Mtc(9), Packet::TntShort(Tnt { bits: 0, count: 1 })] {
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
