//! The flow rules, one at a time, on hand-made packet streams over tiny
//! hand-assembled code images: TNT bits taken by Jcc in order, TIPs for
//! indirect branches, return compression, FUP + TIP as a trap, FUP +
//! TIP.PGD as the end, PSB+ and TIP.PGE starting the walk, OVF, and the
//! candidate mechanism that picks the code content the packets fit.

use codeimage::window::{Interval, PerfStyle, Static};
use codeimage::CodeTimeline;
use intel_pt::flow::{CodeSource, FlowConfig, FlowDecoder, FlowErrorKind, FlowEvent, Time};
use intel_pt::{Packet, Tnt};
use isa::BranchClass;

#[path = "common/hand.rs"]
mod hand;
use hand::{timeline, Trace, K};

/// Code at `K + offset` for each piece.
fn image(pieces: &[(u64, &[u8])]) -> CodeTimeline {
    timeline(pieces, &[])
}

#[path = "common/alt.rs"]
mod alt;
use alt::AltAt;

/// Packets with IPs as offsets from `K`.
impl Trace {
    fn ip(&self, off: u64) -> intel_pt::Ip {
        self.enc.compress(K + off)
    }
    /// PSB+, with a TSC and the FUP of where execution is when given.
    fn psb(&mut self, tsc: Option<u64>, fup: Option<u64>) -> &mut Trace {
        self.put(Packet::Psb);
        if let Some(t) = tsc {
            self.put(Packet::Tsc(t));
        }
        self.put(Packet::ModeExec { csl: true, csd: false, if_flag: true });
        if let Some(f) = fup {
            let ip = self.ip(f);
            self.put(Packet::Fup(ip));
        }
        self.put(Packet::PsbEnd)
    }
    fn pge(&mut self, off: u64) -> &mut Trace {
        let ip = self.ip(off);
        self.put(Packet::TipPge(ip))
    }
    fn tip(&mut self, off: u64) -> &mut Trace {
        let ip = self.ip(off);
        self.put(Packet::Tip(ip))
    }
    fn fup(&mut self, off: u64) -> &mut Trace {
        let ip = self.ip(off);
        self.put(Packet::Fup(ip))
    }
    fn pgd(&mut self, off: Option<u64>) -> &mut Trace {
        let ip = match off {
            Some(off) => self.ip(off),
            None => intel_pt::Ip { compression: intel_pt::IpCompression::Suppressed, payload: 0, ip: None },
        };
        self.put(Packet::TipPgd(ip))
    }
    /// Outcomes oldest first, `T` taken and `N` not taken.
    fn tnt(&mut self, outcomes: &str) -> &mut Trace {
        let mut t = Tnt { bits: 0, count: 0 };
        for c in outcomes.chars() {
            t.bits = t.bits << 1 | (c == 'T') as u64;
            t.count += 1;
        }
        self.put(if t.count <= 6 { Packet::TntShort(t) } else { Packet::TntLong(t) })
    }
    fn tsc(&mut self, t: u64) -> &mut Trace {
        self.put(Packet::Tsc(t))
    }
    fn bytes(&self) -> Vec<u8> {
        self.out.clone()
    }
}

fn cfg(noretcomp: bool) -> FlowConfig {
    hand::config(noretcomp, 64)
}

fn decode(trace: &[u8], code: &impl CodeSource, cfg: FlowConfig) -> Vec<FlowEvent> {
    let mut out = Vec::new();
    FlowDecoder::new(trace, code, cfg).run(|e| out.push(e));
    out
}

/// An event in short, IPs as offsets from `K`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum E {
    I(u64),
    Trap(u64, u64),
    End(Option<u64>),
    Err(FlowErrorKind),
}

fn short(events: &[FlowEvent]) -> Vec<E> {
    events
        .iter()
        .map(|e| match *e {
            FlowEvent::Insn { ip, .. } => E::I(ip - K),
            FlowEvent::Trap { from, to, .. } => E::Trap(from - K, to - K),
            FlowEvent::End { at, .. } => E::End(at.map(|a| a - K)),
            FlowEvent::Error { kind, .. } => E::Err(kind),
            FlowEvent::Enabled { .. } | FlowEvent::State { .. } => unreachable!("state events are off"),
        })
        .collect()
}

fn insn(events: &[FlowEvent], off: u64) -> (BranchClass, u8, bool, Time, Time) {
    events
        .iter()
        .find_map(|e| match *e {
            FlowEvent::Insn { ip, len, class, lo, hi, uncertain, .. } if ip == K + off => Some((class, len, uncertain, lo, hi)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no instruction at +{off:#x} in {events:?}"))
}

/// Class, length and uncertainty of the instruction at `off`.
fn cert(events: &[FlowEvent], off: u64) -> (BranchClass, u8, bool) {
    let (class, len, uncertain, _, _) = insn(events, off);
    (class, len, uncertain)
}

/// Three Jcc whose outcomes show in which instructions run.
const JCC: &[u8] = &[
    0x74, 0x02, // 00: jz 04
    0x90, // 02
    0x90, // 03
    0x75, 0x01, // 04: jnz 07
    0x90, // 06
    0x74, 0x00, // 07: jz 09 (taken or not, 09)
    0x90, // 09
];

#[test]
fn tnt_bits_are_taken_by_jcc_in_order() {
    let code = image(&[(0, JCC)]);
    let run = |outcomes: &str| {
        let t = Trace::new().psb(None, None).pge(0).tnt(outcomes).bytes();
        short(&decode(&t, &Static(&code), cfg(true)))
    };
    use E::*;
    assert_eq!(run("TNT"), [I(0), I(4), I(6), I(7), End(Some(9))]);
    assert_eq!(run("NTN"), [I(0), I(2), I(3), I(4), I(7), End(Some(9))]);
    assert_eq!(run("TTT"), [I(0), I(4), I(7), End(Some(9))]);
    // Outcomes split over packets are taken in the same order.
    let t = Trace::new().psb(None, None).pge(0).tnt("N").tnt("T").tnt("N").bytes();
    assert_eq!(short(&decode(&t, &Static(&code), cfg(true))), [I(0), I(2), I(3), I(4), I(7), End(Some(9))]);
    let e = decode(&t, &Static(&code), cfg(true));
    assert_eq!(insn(&e, 0).0, BranchClass::CondBranch);
}

#[test]
fn a_long_tnt_drives_a_loop() {
    let code = image(&[(0, &[0x90, 0x75, 0xfd, 0x90])]); // 00: nop; 01: jnz 00; 03: nop
    let outcomes = "T".repeat(46) + "N";
    let t = Trace::new().psb(None, None).pge(0).tnt(&outcomes).bytes();
    let got = short(&decode(&t, &Static(&code), cfg(true)));
    let mut want: Vec<E> = (0..47).flat_map(|_| [E::I(0), E::I(1)]).collect();
    want.push(E::End(Some(3)));
    assert_eq!(got, want);
}

/// An indirect call, an indirect jump and a return.
const INDIRECT: &[(u64, &[u8])] = &[
    (0x00, &[0xff, 0xd0, 0x90, 0x90]), // 00: call rax; 02: nop; 03: nop
    (0x10, &[0xff, 0xe0]),             // 10: jmp rax
    (0x20, &[0xc3]),                   // 20: ret
];

#[test]
fn indirect_branches_take_tips_without_return_compression() {
    let code = image(INDIRECT);
    let t = Trace::new().psb(None, None).pge(0).tip(0x10).tip(0x20).tip(0x02).bytes();
    let e = decode(&t, &Static(&code), cfg(true));
    use E::*;
    assert_eq!(short(&e), [I(0), I(0x10), I(0x20), End(Some(2))]);
    assert_eq!(insn(&e, 0).0, BranchClass::IndirectCall);
    assert_eq!(insn(&e, 0x10).0, BranchClass::IndirectJump);
    assert_eq!(insn(&e, 0x20).0, BranchClass::Return);
    // noretcomp: the RET goes where its TIP says, not where the call stack says.
    let t = Trace::new().psb(None, None).pge(0).tip(0x10).tip(0x20).tip(0x03).bytes();
    assert_eq!(short(&decode(&t, &Static(&code), cfg(true))), [I(0), I(0x10), I(0x20), End(Some(3))]);
    // noretcomp: a RET never takes a TNT bit, even with its call on the stack.
    let t = Trace::new().psb(None, None).pge(0).tip(0x10).tip(0x20).tnt("T").bytes();
    assert_eq!(short(&decode(&t, &Static(&code), cfg(true))), [I(0), I(0x10), I(0x20), Err(FlowErrorKind::NoTip)]);
}

/// A deferred TIP: the TNT of the branches after an indirect call comes
/// before the call's TIP. With deferred TIPs its bits wait for those
/// branches (here the RET, compressed); without, the TNT is an error.
#[test]
fn a_deferred_tip_comes_after_the_tnt_of_later_branches() {
    let code = image(INDIRECT);
    let t = Trace::new().psb(None, None).pge(0).tnt("T").tip(0x20).bytes();
    let mut deferred = Vec::new();
    FlowDecoder::new(&t, &Static(&code), cfg(false)).with_deferred_tips(true).run(|e| deferred.push(e));
    use E::*;
    assert_eq!(short(&deferred), [I(0), I(0x20), End(Some(2))]);
    assert_eq!(short(&decode(&t, &Static(&code), cfg(false)))[..2], [I(0), Err(FlowErrorKind::NoTip)]);
    // One TNT only: a second before the TIP is an error.
    let t = Trace::new().psb(None, None).pge(0).tnt("T").tnt("T").tip(0x20).bytes();
    let mut twice = Vec::new();
    FlowDecoder::new(&t, &Static(&code), cfg(false)).with_deferred_tips(true).run(|e| twice.push(e));
    assert_eq!(short(&twice)[..2], [I(0), Err(FlowErrorKind::NoTip)]);
}

/// Deferred TIPs with TNT bits left (SDM): one TNT holds the branches
/// before and after indirect jumps and calls, whose TIPs follow it in order.
const DEFERRED: &[(u64, &[u8])] = &[
    (0x00, &[0x74, 0x00, 0xff, 0xe0]), // 00: jz 02; 02: jmp rax
    (0x10, &[0x74, 0x00, 0xff, 0xd3]), // 10: jz 12; 12: call rbx
    (0x20, &[0x74, 0x00, 0x90]),       // 20: jz 22; 22: nop
    (0x30, &[0x74, 0x00, 0xc3]),       // 30: jz 32; 32: ret
];

#[test]
fn deferred_tips_follow_the_tnt_whose_bits_are_left_at_the_transfer() {
    let code = image(DEFERRED);
    let t = Trace::new().psb(None, None).pge(0).tnt("TTT").tip(0x10).tip(0x20).bytes();
    let run = |t: &[u8], on: bool, noretcomp: bool| {
        let mut out = Vec::new();
        FlowDecoder::new(t, &Static(&code), cfg(noretcomp)).with_deferred_tips(on).run(|e| out.push(e));
        short(&out)
    };
    use E::*;
    assert_eq!(run(&t, true, false), [I(0), I(2), I(0x10), I(0x12), I(0x20), End(Some(0x22))]);
    assert_eq!(run(&t, false, false)[..3], [I(0), I(2), Err(FlowErrorKind::NoTip)]);
    // A RET's TIP is not deferred (an uncompressed RET has no TNT in
    // progress, says the SDM): bits left there are an error.
    let t = Trace::new().psb(None, None).pge(0x30).tnt("TT").tip(0x22).bytes();
    assert_eq!(run(&t, true, true)[..3], [I(0x30), I(0x32), Err(FlowErrorKind::NoTip)]);
}

/// Direct calls and returns.
const CALLS: &[(u64, &[u8])] = &[
    (0x00, &[0xe8, 0x0b, 0, 0, 0, 0x74, 0x00, 0x90]), // 00: call 10; 05: jz 07; 07: nop
    (0x10, &[0xc3]),                                  // 10: ret
    (0x20, &[0xe8, 0x0b, 0, 0, 0, 0x90]),             // 20: call 30; 25: nop
    (0x30, &[0xe8, 0x0b, 0, 0, 0, 0xc3]),             // 30: call 40; 35: ret
    (0x40, &[0xc3]),                                  // 40: ret
    (0x50, &[0xe8, 0, 0, 0, 0, 0xc3]),                // 50: call 55 (zero-length); 55: ret
];

#[test]
fn return_compression_takes_a_taken_bit_when_the_call_stack_has_the_call() {
    let code = image(CALLS);
    let run = |t: &Trace| short(&decode(&t.bytes(), &Static(&code), cfg(false)));
    use E::*;
    // The RET is the first bit (taken), the Jcc the second (not taken).
    assert_eq!(run(Trace::new().psb(None, None).pge(0).tnt("TN")), [I(0), I(0x10), I(5), End(Some(7))]);
    // Nested: both RETs compressed, each to its own call's next IP.
    assert_eq!(run(Trace::new().psb(None, None).pge(0x20).tnt("TT")), [I(0x20), I(0x30), I(0x40), I(0x35), End(Some(0x25))]);
    // The processor may still send a TIP for a RET whose call is on the stack
    // (its target did not match): the TIP is followed.
    assert_eq!(run(Trace::new().psb(None, None).pge(0).tip(7)), [I(0), I(0x10), End(Some(7))]);
    // A compressed RET is a taken bit: a not-taken one is an error, not a
    // reason to look for a TIP after it (the walk resumes at that TIP's
    // target after the error).
    assert_eq!(run(Trace::new().psb(None, None).pge(0).tnt("N").tip(7)), [I(0), I(0x10), Err(FlowErrorKind::NoTip), End(Some(7))]);
    // No call on the stack: a RET needs a TIP, and a TNT bit there is an error.
    assert_eq!(run(Trace::new().psb(None, None).pge(0x10).tip(5).tnt("N")), [I(0x10), I(5), End(Some(7))]);
    assert_eq!(run(Trace::new().psb(None, None).pge(0x10).tnt("T")), [I(0x10), Err(FlowErrorKind::NoTip)]);
    // A zero-length CALL is not pushed (SDM): its RET is not compressed.
    assert_eq!(run(Trace::new().psb(None, None).pge(0x50).tnt("T")), [I(0x50), I(0x55), Err(FlowErrorKind::NoTip)]);
    assert_eq!(run(Trace::new().psb(None, None).pge(0x50).tip(0x25)), [I(0x50), I(0x55), End(Some(0x25))]);
}

#[test]
fn the_return_stack_keeps_the_youngest_64_calls() {
    // 00: jz 07; 02: call 00; 07: ret -- a not-taken Jcc recurses one level
    // deeper, a taken one goes to the RET, which returns to the RET.
    let code = image(&[(0x00, &[0x74, 0x05, 0xe8, 0xf9, 0xff, 0xff, 0xff, 0xc3])]);
    let run = |depth: usize, compressed: usize| {
        let bits = "N".repeat(depth) + "T" + &"T".repeat(compressed);
        let mut t = Trace::new();
        t.psb(None, None).pge(0);
        for chunk in bits.as_bytes().chunks(47) {
            t.tnt(std::str::from_utf8(chunk).unwrap());
        }
        short(&decode(&t.bytes(), &Static(&code), cfg(false)))
    };
    let rets = |e: &[E]| e.iter().filter(|&&x| x == E::I(7)).count();
    // 64 deep: 64 compressed RETs; the next RET has nothing left to return to.
    let e = run(64, 64);
    assert_eq!((rets(&e), e.last()), (64, Some(&E::End(Some(7)))));
    let e = run(64, 65);
    assert_eq!((rets(&e), e.last()), (65, Some(&E::Err(FlowErrorKind::NoTip))));
    // 70 deep: only the youngest 64 return addresses are kept (SDM), so the
    // 65th RET is not compressed and a 65th taken bit is an error.
    let e = run(70, 64);
    assert_eq!((rets(&e), e.last()), (64, Some(&E::End(Some(7)))));
    let e = run(70, 65);
    assert_eq!((rets(&e), e.last()), (65, Some(&E::Err(FlowErrorKind::NoTip))));
}

/// A trap site and a handler that returns with IRETQ.
const TRAP: &[(u64, &[u8])] = &[
    (0x00, &[0x90, 0xcc, 0x90, 0x90]), // 00: nop; 01: int3; 02: nop; 03: nop
    (0x30, &[0x48, 0xcf]),             // 30: iretq
];

#[test]
fn fup_and_tip_at_an_instruction_are_a_trap_not_an_instruction() {
    let code = image(TRAP);
    let run = |t: &Trace| decode(&t.bytes(), &Static(&code), cfg(true));
    use E::*;
    // INT3 at 01: FUP(01) TIP(handler); IRETQ back to after it.
    let e = run(Trace::new().psb(Some(500), None).pge(0).fup(1).tip(0x30).tip(2));
    assert_eq!(short(&e), [I(0), Trap(1, 0x30), I(0x30), End(Some(2))]);
    assert!(e.iter().any(|e| matches!(e, FlowEvent::Trap { from, to, time: 500, insn: Some(_) } if *from == K + 1 && *to == K + 0x30)));
    assert_eq!(insn(&e, 0x30).0, BranchClass::FarTransfer);
    // An interrupt before the NOP at 00: the NOP is not reported as run, and
    // runs after the handler returns to it.
    let e = run(Trace::new().psb(None, None).pge(0).fup(0).tip(0x30).tip(0));
    assert_eq!(short(&e), [Trap(0, 0x30), I(0x30), End(Some(0))]);
    // An INT3 without its FUP and TIP is an error; the walk resumes at the
    // TIP's target.
    let e = run(Trace::new().psb(None, None).pge(0).tip(0x30));
    assert_eq!(short(&e), [I(0), I(1), Err(FlowErrorKind::NoTrapPackets), End(Some(0x30))]);
}

#[test]
fn fup_and_tip_pgd_end_tracing_at_that_ip() {
    let code = image(TRAP);
    let run = |t: &Trace| short(&decode(&t.bytes(), &Static(&code), cfg(true)));
    use E::*;
    // Stopping before the INT3 runs.
    assert_eq!(run(Trace::new().psb(None, None).pge(0).fup(1).pgd(None)), [I(0), End(Some(1))]);
    // Stopping before the NOP at 02 (after the handler returned there).
    assert_eq!(
        run(Trace::new().psb(None, None).pge(0).fup(1).tip(0x30).tip(2).fup(3).pgd(Some(3))),
        [I(0), Trap(1, 0x30), I(0x30), I(2), End(Some(3))]
    );
    // FUP + TIP.PGD with the IP suppressed: the FUP says where.
    assert_eq!(run(Trace::new().psb(None, None).pge(2).fup(3).pgd(None)), [I(2), End(Some(3))]);
    // A TIP.PGD alone at the IP the walk reached.
    assert_eq!(run(Trace::new().psb(None, None).pge(2).pgd(Some(3))), [I(2), End(Some(3))]);
    // Tracing stops, then starts again elsewhere.
    assert_eq!(run(Trace::new().psb(None, None).pge(2).pgd(Some(3)).pge(0x30).tip(3)), [I(2), End(Some(3)), I(0x30), End(Some(3))]);
}

#[test]
fn tip_pgd_at_an_indirect_branch_ends_tracing_there() {
    let code = image(INDIRECT);
    let e = decode(&Trace::new().psb(Some(7), None).pge(0x10).pgd(None).bytes(), &Static(&code), cfg(true));
    assert_eq!(short(&e), [E::I(0x10), E::End(None)]);
    assert_eq!(e[1], FlowEvent::End { time: 7, at: None, disabled: true, to: None, insn: None });
    // And starts again at the next TIP.PGE.
    let e = decode(&Trace::new().psb(None, None).pge(0).pgd(Some(0x40)).pge(0x20).tip(3).bytes(), &Static(&code), cfg(true));
    assert_eq!(short(&e), [E::I(0), E::End(None), E::I(0x20), E::End(Some(3))]);
    // The TIP.PGD's IP is where the branch went; the end of the data disables nothing.
    assert!(matches!(e[1], FlowEvent::End { at: None, disabled: true, to: Some(t), .. } if t == K + 0x40), "{:?}", e[1]);
    assert!(matches!(e[3], FlowEvent::End { disabled: false, to: None, .. }), "{:?}", e[3]);
}

#[test]
fn tip_pge_starts_the_walk_and_flow_packets_before_it_are_dropped() {
    let code = image(&[(0, JCC)]);
    let t = Trace::new().psb(None, None).tnt("NN").tip(0x40).pge(0).tnt("T").bytes();
    use E::*;
    assert_eq!(short(&decode(&t, &Static(&code), cfg(true))), [I(0), End(Some(4))]);
    // Nothing at all before it: the walk starts at the first TIP.PGE.
    let t = Trace::new().pge(4).tnt("TT").bytes();
    assert_eq!(short(&decode(&t, &Static(&code), cfg(true))), [I(4), I(7), End(Some(9))]);
}

#[test]
fn psb_plus_fup_starts_the_walk_after_garbage() {
    let code = image(&[(0, JCC)]);
    let mut t = vec![0xd9, 0x55, 0x02, 0x82, 0x02];
    t.extend(Trace::new().psb(Some(1000), Some(4)).tnt("TT").tsc(2000).bytes());
    let e = decode(&t, &Static(&code), cfg(true));
    use E::*;
    assert_eq!(short(&e), [I(4), I(7), End(Some(9))]);
    // Time: from the PSB+'s TSC, up to the next TSC.
    assert_eq!(insn(&e, 4).3..insn(&e, 4).4, 1000..2000);
    // A PSB+ in the middle, where the walk is, changes nothing.
    let t = Trace::new().psb(None, Some(0)).tnt("T").psb(Some(5), Some(4)).tnt("TT").bytes();
    assert_eq!(short(&decode(&t, &Static(&code), cfg(true))), [I(0), I(4), I(7), End(Some(9))]);
    // A PSB+ without FUP (tracing off): the walk waits for TIP.PGE.
    let t = Trace::new().psb(None, None).tnt("TT").pge(4).tnt("NT").bytes();
    assert_eq!(short(&decode(&t, &Static(&code), cfg(true))), [I(4), I(6), I(7), End(Some(9))]);
}

#[test]
fn overflow_is_an_error_and_decoding_resumes_at_the_fup_after_it() {
    let code = image(&[(0, JCC)]);
    use E::*;
    // OVF, then where tracing resumed (FUP), as the SDM has it: the walk
    // goes on from there, what was pending before the overflow is lost.
    let mut t = Trace::new();
    t.psb(Some(10), Some(0)).tnt("T");
    let ovf_at = t.out.len();
    t.put(Packet::Ovf).tsc(20).fup(7).tnt("N");
    let e = decode(&t.bytes(), &Static(&code), cfg(true));
    assert_eq!(short(&e), [I(0), Err(FlowErrorKind::Overflow), I(7), End(Some(9))]);
    assert_eq!(e[1], FlowEvent::Error { offset: ovf_at, time: 10, ip: Some(K + 4), kind: FlowErrorKind::Overflow });
    assert_eq!(insn(&e, 7).3, 20);
    // OVF then a PSB+: resumes at its FUP.
    let mut t = Trace::new();
    t.psb(Some(10), Some(0)).tnt("T").put(Packet::Ovf);
    t.psb(Some(30), Some(4)).tnt("TT");
    let e = decode(&t.bytes(), &Static(&code), cfg(true));
    assert_eq!(short(&e), [I(0), Err(FlowErrorKind::Overflow), I(4), I(7), End(Some(9))]);
    assert_eq!(insn(&e, 4).3, 30);
}

/// The code of the candidate tests: a patch site at 00 (NOP5, or a JMP),
/// a Jcc after it, and where the JMP goes.
const SITE: &[(u64, &[u8])] = &[
    (0x00, &[0x0f, 0x1f, 0x44, 0x00, 0x00, 0x74, 0x00, 0x90]), // 00: nop5; 05: jz 07; 07: nop
    (0x20, &[0xff, 0xe0]),                                     // 20: jmp rax
    (0x30, &[0x74, 0x00, 0x90]),                               // 30: jz 32; 32: nop
];
const JMP_20: [u8; 5] = [0xe9, 0x1b, 0, 0, 0];
const JMP_30: [u8; 5] = [0xe9, 0x2b, 0, 0, 0];

#[test]
fn the_candidate_the_packets_fit_is_chosen_and_certain() {
    let code = image(SITE);
    use E::*;
    // A TNT next: only the NOP5 (into the Jcc) fits.
    let src = AltAt { code: &code, at: K, alt: &JMP_20 };
    let e = decode(&Trace::new().psb(None, Some(0)).tnt("T").bytes(), &src, cfg(true));
    assert_eq!(short(&e), [I(0), I(5), End(Some(7))]);
    assert_eq!(cert(&e, 0), (BranchClass::Nop, 5, false));
    // A TIP next: only the JMP (to the indirect jump) fits.
    let e = decode(&Trace::new().psb(None, Some(0)).tip(7).bytes(), &src, cfg(true));
    assert_eq!(short(&e), [I(0), I(0x20), End(Some(7))]);
    assert_eq!(cert(&e, 0), (BranchClass::DirectJump, 5, false));
}

#[test]
fn candidates_that_all_fit_are_uncertain() {
    let code = image(SITE);
    use E::*;
    // Both lead to a Jcc: both fit a TNT; the first (the image's) is taken.
    let src = AltAt { code: &code, at: K, alt: &JMP_30 };
    let e = decode(&Trace::new().psb(None, Some(0)).tnt("T").bytes(), &src, cfg(true));
    assert_eq!(short(&e), [I(0), I(5), End(Some(7))]);
    assert_eq!(cert(&e, 0), (BranchClass::Nop, 5, true));
    // Neither fits a TIP: the first is taken, uncertain, and the error shows where.
    let e = decode(&Trace::new().psb(None, Some(0)).tip(7).bytes(), &src, cfg(true));
    assert_eq!(short(&e), [I(0), I(5), Err(FlowErrorKind::NoTnt)]);
    assert!(insn(&e, 0).2);
    // Contents that differ only after the instruction make no choice.
    let src = AltAt { code: &code, at: K, alt: &[0x0f, 0x1f, 0x44, 0x00, 0x00, 0x75] };
    let e = decode(&Trace::new().psb(None, Some(0)).tnt("T").bytes(), &src, cfg(true));
    assert_eq!(short(&e), [I(0), I(5), End(Some(7))]);
    assert!(!insn(&e, 0).2);
}

#[test]
fn a_poke_between_two_tscs_is_resolved_by_the_packets() {
    // NOP5 -> JMP 20 at time 150; the trace knows only that the site ran in [100, 200].
    let code = timeline(SITE, &[(150, 0, &SITE[0].1[..5], &JMP_20)]);
    use E::*;
    let jumped = Trace::new().psb(Some(100), Some(0)).tip(7).tsc(200).bytes();
    let fell = Trace::new().psb(Some(100), Some(0)).tnt("T").tsc(200).bytes();
    let e = decode(&jumped, &Interval(&code), cfg(true));
    assert_eq!(short(&e), [I(0), I(0x20), End(Some(7))]);
    // The JMP holds from 150 on: it ran no earlier, and neither did what follows.
    assert_eq!(insn(&e, 0), (BranchClass::DirectJump, 5, false, 150, 200));
    assert_eq!(insn(&e, 0x20).3, 150);
    let e = decode(&fell, &Interval(&code), cfg(true));
    assert_eq!(short(&e), [I(0), I(5), End(Some(7))]);
    assert_eq!(insn(&e, 0), (BranchClass::Nop, 5, false, 100, 200));
    // The image read at the interval's start alone sees the old NOP5 and fails.
    assert_eq!(short(&decode(&jumped, &PerfStyle(&code), cfg(true))), [I(0), I(5), Err(FlowErrorKind::NoTnt)]);
    assert_eq!(short(&decode(&jumped, &Static(&code), cfg(true))), [I(0), I(5), Err(FlowErrorKind::NoTnt)]);
    // After the poke, no candidates: the JMP, exactly.
    let later = Trace::new().psb(Some(160), Some(0)).tip(7).tsc(200).bytes();
    let e = decode(&later, &Interval(&code), cfg(true));
    assert_eq!(insn(&e, 0), (BranchClass::DirectJump, 5, false, 160, 200));
}

#[test]
fn an_instruction_after_a_flow_packet_is_read_up_to_the_next_one() {
    // A kprobe's INT3 at +0x10 is taken out at 250, after the TSC (200)
    // that follows the TIP to it. The NOP that is there then ran after the
    // TIP and before the next TIP: within [100, 300], not [100, 200]. Read
    // for the time before that TSC, the walk met the INT3 and, with no FUP
    // for it in the trace, failed (`NoTrapPackets`, the poked bench's
    // errors). `jmp *%rax` at 0 and at +0x11.
    let code = timeline(&[(0, &[0xff, 0xe0]), (0x10, &[0xcc, 0xff, 0xe0]), (0x30, &[0x90])], &[(250, 0x10, &[0xcc], &[0x90])]);
    let t = Trace::new().psb(Some(100), Some(0)).tip(0x10).tsc(200).tip(0x30).tsc(300).pgd(Some(0x30)).bytes();
    let e = decode(&t, &Interval(&code), cfg(true));
    use E::*;
    assert_eq!(short(&e), [I(0), I(0x10), I(0x11), End(Some(0x30))]);
    // The NOP, settled by the trace: no earlier than its content holds.
    assert_eq!(insn(&e, 0x10), (BranchClass::Nop, 1, false, 250, 300));
    // The JMP takes the TIP after TSC 200.
    assert_eq!(insn(&e, 0x11).3, 250);
    // Without the change in the image, the INT3 runs and the trace has no trap for it.
    let unpoked = timeline(&[(0, &[0xff, 0xe0]), (0x10, &[0xcc, 0xff, 0xe0]), (0x30, &[0x90])], &[]);
    assert_eq!(short(&decode(&t, &Interval(&unpoked), cfg(true)))[2], Err(FlowErrorKind::NoTrapPackets));
}
