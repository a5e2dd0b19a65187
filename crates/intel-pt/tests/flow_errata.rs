//! The processor errata the flow decoder works around ([`Errata`]), as
//! [`Errata::of`] and [`Errata::of_perf_cpuid`] name them for a model: each
//! with the trace the erratum makes, decoded with and without the workaround.

use codeimage::window::Static;
use intel_pt::flow::{Errata, FlowDecoder, FlowErrorKind, FlowEvent};
use intel_pt::Packet;

#[path = "common/hand.rs"]
mod hand;
use hand::{timeline, Trace, K};

/// Instructions (as offsets from `K`) and errors of decoding `t` over 16
/// NOPs with `errata` (a walk ends where the trace does).
fn run(t: &Trace, errata: Errata) -> Vec<Result<u64, FlowErrorKind>> {
    let nops = [0x90u8; 16];
    let image = timeline(&[(0, &nops)], &[]);
    let source = Static(&image);
    let mut out = Vec::new();
    FlowDecoder::new(&t.out, &source, hand::config(false, 64)).with_errata(errata).run(|e| match e {
        FlowEvent::Insn { ip, .. } => out.push(Ok(ip - K)),
        FlowEvent::Error { kind, .. } => out.push(Err(kind)),
        _ => {}
    });
    out
}

/// PSB+ with the FUP of NOP `at`.
fn psb(t: &mut Trace, at: u64) {
    let ip = t.enc.compress(K + at);
    t.put(Packet::Psb).put(Packet::ModeExec { csl: true, csd: false, if_flag: false }).put(Packet::Fup(ip)).put(Packet::PsbEnd);
}

#[test]
fn skd007_an_overflow_inside_a_cyc_is_an_overflow() {
    let mut t = Trace::new();
    psb(&mut t, 0);
    // A 2-byte CYC (`f7 02`) that an overflow cut: its second byte and the
    // next are the OVF (`02 f3`), after which a FUP says where tracing resumed.
    t.out.extend_from_slice(&[0xf7, 0x02, 0xf3]);
    let ip = t.enc.compress(K + 8);
    t.put(Packet::Fup(ip));
    let skylake = Errata::of(6, 0x4e).expect("a Skylake");
    assert!(skylake.skd007);
    assert_eq!(run(&t, skylake), [Err(FlowErrorKind::Overflow)]);
    // Read as the SDM says, the CYC is whole and `f3` a 1-byte CYC: no overflow.
    let without = run(&t, Errata::default());
    assert!(!without.contains(&Err(FlowErrorKind::Overflow)), "{without:?}");
}

#[test]
fn skd007_leaves_a_whole_cyc_alone() {
    let mut t = Trace::new();
    psb(&mut t, 0);
    // A 2-byte CYC whose second byte is 02, and no OVF after it.
    t.out.extend_from_slice(&[0xf7, 0x02]);
    let ip = t.enc.compress(K + 4);
    t.put(Packet::TipPgd(ip));
    let skylake = Errata::of(6, 0x4e).expect("a Skylake");
    assert_eq!(run(&t, skylake), run(&t, Errata::default()));
    assert!(!run(&t, skylake).iter().any(|e| e.is_err()));
}

#[test]
fn skd007_an_overflow_inside_a_cyc_ends_a_psb_plus() {
    // PSB+ with no PSBEND: the cut CYC and its overflow end it.
    let mut t = Trace::new();
    let ip = t.enc.compress(K);
    t.put(Packet::Psb).put(Packet::ModeExec { csl: true, csd: false, if_flag: false }).put(Packet::Fup(ip));
    t.out.extend_from_slice(&[0xf7, 0x02, 0xf3]);
    let ip = t.enc.compress(K + 12);
    t.put(Packet::Fup(ip));
    assert_eq!(run(&t, Errata::of(6, 0x8e).expect("a Kaby Lake")), [Err(FlowErrorKind::Overflow)]);
    let without = run(&t, Errata::default());
    assert!(!without.contains(&Err(FlowErrorKind::Overflow)), "{without:?}");
}
