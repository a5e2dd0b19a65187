//! Code that loops without needing a packet (a kernel function patched to
//! `jmp .`, a fuzzed image with a jump loop): the walk reports one
//! never-ending-loop error naming the IP and offset, decodes no more of that
//! PSB segment, and goes on at the next PSB; a loop of any length is found
//! long before the instruction limit.

use codeimage::window::Static;
use intel_pt::flow::{FlowConfig, FlowDecoder, FlowErrorKind, FlowEvent};
use intel_pt::{Ip, IpCompression, Packet, Tnt};

#[path = "common/hand.rs"]
mod hand;
use hand::{Trace, K};

/// The limit `poketrace decode` walks with.
const MAX_WALK: u64 = 1 << 20;

/// Nops, then a jump back to the first: a loop of `nops + 1` instructions.
fn nop_loop(nops: usize) -> Vec<u8> {
    let mut code = vec![0x90; nops];
    let back = -(nops as i32 + 5);
    code.push(0xe9);
    code.extend_from_slice(&back.to_le_bytes());
    code
}

fn config() -> FlowConfig {
    FlowConfig { max_walk: MAX_WALK, ..hand::config(false, 32) }
}

fn full(ip: u64) -> Ip {
    Ip { compression: IpCompression::Full, payload: ip, ip: Some(ip) }
}

/// A PSB+ whose FUP is at `ip`.
fn psb_at(t: &mut Trace, ip: u64) {
    t.put(Packet::Psb).put(Packet::Fup(full(ip))).put(Packet::PsbEnd);
}

/// The good code at 0x40: `jz 0x42; jmp *%rax`, traced as a taken bit and a TIP.PGD.
fn good_segment(t: &mut Trace) {
    psb_at(t, K + 0x40);
    t.put(Packet::TntShort(Tnt { bits: 1, count: 1 })).put(Packet::TipPgd(Ip { compression: IpCompression::Suppressed, payload: 0, ip: None }));
}

fn decode(pieces: &[(u64, &[u8])], trace: &[u8]) -> Vec<FlowEvent> {
    let code = hand::timeline(pieces, &[]);
    let mut out = Vec::new();
    FlowDecoder::new(trace, &Static(&code), config()).run(|e| out.push(e));
    out
}

fn errors(events: &[FlowEvent]) -> Vec<(usize, FlowErrorKind, Option<u64>)> {
    events
        .iter()
        .filter_map(|e| match *e {
            FlowEvent::Error { offset, kind, ip, .. } => Some((offset, kind, ip)),
            _ => None,
        })
        .collect()
}

/// Instructions at `ip` decoded before the first error.
fn insns_at(events: &[FlowEvent], at: u64) -> usize {
    events.iter().take_while(|e| !matches!(e, FlowEvent::Error { .. })).filter(|e| matches!(e, FlowEvent::Insn { ip, .. } if *ip == at)).count()
}

#[test]
fn a_jump_to_itself_is_one_error_and_the_next_psb_decodes() {
    let good: &[u8] = &[0x74, 0x00, 0xff, 0xe0];
    let pieces: &[(u64, &[u8])] = &[(0x00, &[0xeb, 0xfe]), (0x40, good)];
    let mut t = Trace::new();
    psb_at(&mut t, K);
    // Packets the loop never takes: before, each TIP into the loop started
    // another 2^20 instructions.
    for _ in 0..3 {
        t.put(Packet::Tip(full(K)));
    }
    let second = t.out.len();
    good_segment(&mut t);
    let got = decode(pieces, &t.out);
    let loops = insns_at(&got, K);
    assert!((2..=2048).contains(&loops), "{loops} instructions of the loop");
    let errs = errors(&got);
    assert_eq!(errs.len(), 1, "{errs:x?}");
    let (offset, kind, ip) = errs[0];
    assert_eq!((kind, ip), (FlowErrorKind::NoProgress, Some(K)));
    assert!(offset < second, "the error is in the first segment: {offset} >= {second}");
    assert_eq!(kind.describe(), "never-ending loop: the walk needs no packet to go on");
    // After the error, exactly what the second segment decodes alone.
    let mut alone = Trace::new();
    good_segment(&mut alone);
    let tail = decode(pieces, &alone.out);
    let at = got.iter().position(|e| matches!(e, FlowEvent::Error { .. })).unwrap();
    let strip = |e: &FlowEvent| match *e {
        FlowEvent::Insn { ip, len, .. } => format!("I {ip:x} {len}"),
        other => format!("{:?}", std::mem::discriminant(&other)),
    };
    assert_eq!(got[at + 1..].iter().map(strip).collect::<Vec<_>>(), tail.iter().map(strip).collect::<Vec<_>>());
    assert!(tail.iter().any(|e| matches!(e, FlowEvent::Insn { ip, .. } if *ip == K + 0x42)), "{tail:x?}");
}

#[test]
fn a_long_loop_is_found_within_a_few_times_its_length() {
    for nops in [10, 1000, 3000, 20_000] {
        let body = nop_loop(nops);
        let pieces: &[(u64, &[u8])] = &[(0x1000, &body)];
        let mut t = Trace::new();
        psb_at(&mut t, K + 0x1000);
        t.put(Packet::Tip(full(K + 0x1000)));
        let got = decode(pieces, &t.out);
        let walked = got.iter().filter(|e| matches!(e, FlowEvent::Insn { .. })).count();
        let len = nops + 1;
        assert!(walked >= len, "{nops} nops: {walked} instructions before the error");
        assert!(walked <= 4 * len.max(1024) + 1024, "{nops} nops: {walked} instructions before the error");
        assert_eq!(
            errors(&got).iter().map(|e| (e.1, e.2)).collect::<Vec<_>>(),
            [(FlowErrorKind::NoProgress, Some(K + 0x1000 + (walked % len) as u64))]
        );
    }
}

/// Straight code longer than the loop check's start is no loop: decoded
/// in full to the branch that takes a packet.
#[test]
fn long_straight_code_is_not_a_loop() {
    let mut body = vec![0x90; 5000];
    body.extend_from_slice(&[0xff, 0xe0]);
    let pieces: &[(u64, &[u8])] = &[(0x1000, &body)];
    let mut t = Trace::new();
    psb_at(&mut t, K + 0x1000);
    t.put(Packet::TipPgd(Ip { compression: IpCompression::Suppressed, payload: 0, ip: None }));
    let got = decode(pieces, &t.out);
    assert!(errors(&got).is_empty(), "{:x?}", errors(&got));
    assert_eq!(got.iter().filter(|e| matches!(e, FlowEvent::Insn { .. })).count(), 5001);
}
