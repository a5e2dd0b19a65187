//! The status a PSB+ restates, checked against the walk in sync: where the
//! code on the way to its FUP runs out, the missing code is the error (the
//! instructions up to it ran), placed at the PSB+'s PSBEND as libipt places
//! it, and the walk goes on at the FUP; a MODE.Exec that restates another
//! execution mode than the trace gave is an error at that packet (libipt's
//! bad status update). The same sequentially and in PSB segments.

#[path = "common/hand.rs"]
mod hand;

use codeimage::window::Static;
use codeimage::CodeTimeline;
use hand::{Trace, K};
use intel_pt::flow::{FlowConfig, FlowDecoder, FlowErrorKind, FlowEvent, Recovery};
use intel_pt::parallel::ParallelFlow;
use intel_pt::{Packet, Tnt};

/// ```text
/// 00: jz 02
/// 02: call 40     (no code at 40)
/// 50: nop
/// 51: jz 53
/// 53: nop
/// ```
fn code() -> CodeTimeline {
    hand::timeline(&[(0, &[0x74, 0x00, 0xe8, 0x39, 0, 0, 0]), (0x50, &[0x90, 0x74, 0x00, 0x90])], &[])
}

fn cfg() -> FlowConfig {
    hand::config(false, 32)
}

impl Trace {
    /// A PSB+ with a TSC, a MODE.Exec (64-bit unless `bits32`) and a FUP
    /// at `fup`; the offsets of its MODE.Exec and PSBEND.
    fn psb(&mut self, tsc: u64, bits32: bool, fup: u64) -> (usize, usize) {
        self.put(Packet::Psb).put(Packet::Tsc(tsc));
        let mode = self.out.len();
        self.put(Packet::ModeExec { csl: !bits32, csd: bits32, if_flag: true });
        let ip = self.enc.compress(K + fup);
        self.put(Packet::Fup(ip));
        let psbend = self.out.len();
        self.put(Packet::PsbEnd);
        (mode, psbend)
    }
    fn tnt(&mut self, taken: bool) -> &mut Trace {
        self.put(Packet::TntShort(Tnt { bits: taken as u64, count: 1 }))
    }
}

fn decode(trace: &[u8], code: &CodeTimeline, recovery: Recovery) -> Vec<FlowEvent> {
    let mut out = Vec::new();
    FlowDecoder::new(trace, &Static(code), cfg()).with_recovery(recovery).run(|e| out.push(e));
    out
}

/// Each event as (IP from K, error kind): instructions and errors only
/// (the trace ends at 53, an end event).
fn short(events: &[FlowEvent]) -> Vec<(u64, Option<FlowErrorKind>)> {
    events
        .iter()
        .filter_map(|e| match *e {
            FlowEvent::Insn { ip, .. } => Some((ip - K, None)),
            FlowEvent::Error { ip, kind, .. } => Some((ip.map_or(u64::MAX, |ip| ip - K), Some(kind))),
            _ => None,
        })
        .collect()
}

fn parallel(trace: &[u8], code: &CodeTimeline) -> Vec<FlowEvent> {
    let mut out = Vec::new();
    ParallelFlow::new(FlowDecoder::new(&[], &Static(code), cfg())).run(trace, |e| out.push(e));
    out
}

#[test]
fn missing_code_on_the_way_to_a_psbs_fup_is_the_error_and_the_walk_goes_on_at_the_fup() {
    let code = code();
    // 00, jz taken: at 02, the CALL leads to no code; the PSB+ says 50.
    let mut t = Trace::new();
    t.psb(10, false, 0);
    t.tnt(true);
    let (_, psbend) = t.psb(20, false, 0x50);
    t.tnt(true);
    let trace = t.out.clone();
    let unmapped = Some(FlowErrorKind::Unmapped);
    let got = decode(&trace, &code, Recovery::NextTip);
    assert_eq!(short(&got), [(0, None), (2, None), (0x40, unmapped), (0x50, None), (0x51, None)]);
    let error = got.iter().find(|e| matches!(e, FlowEvent::Error { .. })).unwrap();
    assert!(matches!(*error, FlowEvent::Error { offset, .. } if offset == psbend), "{error:?}: at the PSBEND, {psbend}");
    assert_eq!(parallel(&trace, &code), got, "segments decoded apart");
    // libipt's recovery waits for the next PSB.
    assert_eq!(short(&decode(&trace, &code, Recovery::NextPsb)), [(0, None), (2, None), (0x40, unmapped)]);
}

#[test]
fn a_psb_that_restates_another_execution_mode_is_an_error_at_its_mode_exec() {
    let code = code();
    for bits32 in [false, true] {
        // At 50, the Jcc at 51 needs a packet: the PSB+ (FUP 51) comes first.
        let mut t = Trace::new();
        t.psb(10, false, 0x50);
        let (mode, _) = t.psb(20, bits32, 0x51);
        t.tnt(true);
        let trace = t.out.clone();
        let got = decode(&trace, &code, Recovery::NextTip);
        if !bits32 {
            assert_eq!(short(&got), [(0x50, None), (0x51, None)]);
            continue;
        }
        // The walk resumes at the FUP (its path to there is in doubt).
        let kind = FlowErrorKind::ModeMismatch { fup: Some(K + 0x51) };
        assert_eq!(short(&got), [(0x50, Some(kind)), (0x51, None)]);
        assert!(got.iter().any(|e| matches!(*e, FlowEvent::Error { offset, .. } if offset == mode)), "at the MODE.Exec, {mode}");
        assert_eq!(parallel(&trace, &code), got, "segments decoded apart");
        // libipt's recoveries: on at the next PSB (none here).
        for recovery in [Recovery::NextPsb, Recovery::EachTip] {
            assert_eq!(short(&decode(&trace, &code, recovery)), [(0x50, Some(kind))], "{recovery:?}");
        }
    }
}
