//! A PSB+ met while the walk is in sync: its FUP says where execution is,
//! which the walk must reach before it needs a packet (the processor sends
//! pending TNT bits before a PSB). Where it does, the PSB+ changes nothing
//! (and libipt, which binds the PSB+'s status to the FUP's IP, decodes the
//! same); where it does not, an error names the PSB's offset and the walk
//! goes on from the FUP's IP, the same sequentially and in PSB segments.

#[path = "common/alt.rs"]
mod alt;
#[path = "common/flow.rs"]
mod flow;
#[path = "common/hand.rs"]
mod hand;

use alt::AltAt;
use codeimage::window::Static;
use codeimage::{BaseImage, CodeTimeline, TimelineBuilder};
use hand::{Trace, K};
use intel_pt::flow::{CodeSource, Fetch, FlowConfig, FlowDecoder, FlowErrorKind, FlowEvent, InsnCode, Time};
use intel_pt::parallel::ParallelFlow;
use intel_pt::{Packet, Tnt};

/// ```text
/// 00: jz 02
/// 02: jmp 08
/// 04: nop x4
/// 08: call 20
/// 0d: nop
/// 0e: jz 10
/// 10: jz 12
/// 20: nop
/// 21: jz 23
/// 23: ret
/// 30: jmp 30
/// ```
/// From 02 the walk reaches 08, 20 and 21 without a packet, not 04 nor 0d.
fn code() -> CodeTimeline {
    let mut base = BaseImage::new();
    let bytes = [0x74, 0x00, 0xeb, 0x04, 0x90, 0x90, 0x90, 0x90, 0xe8, 0x13, 0, 0, 0, 0x90, 0x74, 0x00, 0x74, 0x00];
    base.add_bytes(K, bytes.to_vec(), "main");
    base.add_bytes(K + 0x20, vec![0x90, 0x74, 0x00, 0xc3], "callee");
    base.add_bytes(K + 0x30, vec![0xeb, 0xfe], "spin");
    TimelineBuilder::new(base).build()
}

fn cfg(noretcomp: bool) -> FlowConfig {
    hand::config(noretcomp, 32)
}

impl Trace {
    fn psb(&mut self, tsc: u64, fup: Option<u64>) -> &mut Trace {
        self.put(Packet::Psb).put(Packet::Tsc(tsc)).put(Packet::ModeExec { csl: true, csd: false, if_flag: true });
        if let Some(f) = fup {
            let ip = self.enc.compress(K + f);
            self.put(Packet::Fup(ip));
        }
        self.put(Packet::PsbEnd)
    }
    fn tnt(&mut self, taken: bool) -> &mut Trace {
        self.put(Packet::TntShort(Tnt { bits: taken as u64, count: 1 }))
    }
    fn tip(&mut self, off: u64) -> &mut Trace {
        let ip = self.enc.compress(K + off);
        self.put(Packet::Tip(ip))
    }
    fn pge(&mut self, off: u64) -> &mut Trace {
        let ip = self.enc.compress(K + off);
        self.put(Packet::TipPge(ip))
    }
}

/// Starts at 00, jz taken: the walk is at 02 when it next reads a packet.
fn start() -> Trace {
    let mut t = Trace::new();
    t.psb(10, Some(0)).tnt(true);
    t
}

/// From 21 on: jz 21 not taken, the RET's TIP to 0d, jz 0e taken.
fn finish(t: &mut Trace) -> Vec<u8> {
    t.tnt(false).tip(0x0d).tnt(true);
    t.out.clone()
}

fn decode(trace: &[u8], code: &impl CodeSource, cfg: &FlowConfig) -> Vec<FlowEvent> {
    let mut out = Vec::new();
    FlowDecoder::new(trace, code, cfg.clone()).run(|e| out.push(e));
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum E {
    I(u64),
    End(Option<u64>),
    Err(FlowErrorKind),
}

fn short(events: &[FlowEvent]) -> Vec<E> {
    events
        .iter()
        .map(|e| match *e {
            FlowEvent::Insn { ip, .. } => E::I(ip - K),
            FlowEvent::End { at, .. } => E::End(at.map(|a| a - K)),
            FlowEvent::Error { kind, .. } => E::Err(kind),
            FlowEvent::Trap { .. } => panic!("no trap here"),
            FlowEvent::Enabled { .. } | FlowEvent::State { .. } => unreachable!("state events are off"),
        })
        .collect()
}

const WHOLE: [E; 9] = [E::I(0), E::I(2), E::I(8), E::I(0x20), E::I(0x21), E::I(0x23), E::I(0x0d), E::I(0x0e), E::End(Some(0x10))];

/// The events of the run without a PSB+ in the middle: the same for every
/// FUP on the walk's path, with return compression on or off.
#[test]
fn a_psb_whose_fup_is_on_the_walks_path_changes_nothing() {
    let code = code();
    let plain = finish(&mut start());
    let want = &WHOLE[..];
    for noretcomp in [true, false] {
        assert_eq!(short(&decode(&plain, &Static(&code), &cfg(noretcomp))), want);
        // 02 where the walk is; 08 past a direct jump; 20 and 21 past a call.
        for fup in [0x02, 0x08, 0x20, 0x21] {
            let mut t = start();
            t.psb(20, Some(fup));
            let got = decode(&finish(&mut t), &Static(&code), &cfg(noretcomp));
            assert_eq!(short(&got), want, "FUP at {fup:#x}");
            // The instructions after the PSB+ are timed by its TSC.
            assert!(got.iter().all(|e| !matches!(e, FlowEvent::Insn { ip, lo, .. } if *ip == K + 0x20 && *lo != 20)));
        }
    }
}

/// The PSB's offset in the trace built by `start` then `psb`.
fn psb_at() -> usize {
    start().out.len()
}

#[test]
fn a_psb_whose_fup_is_off_the_walks_path_is_an_error_and_the_walk_resumes_there() {
    let code = code();
    for noretcomp in [true, false] {
        // 04 is jumped over, 0d comes after the call returns, 23 after a Jcc.
        for (fup, resumed) in [(0x04, &[4u64, 5, 6, 7][..]), (0x0d, &[]), (0x23, &[])] {
            let mut t = start();
            t.psb(20, Some(fup));
            let trace = finish(&mut t);
            let got = decode(&trace, &Static(&code), &cfg(noretcomp));
            let kind = FlowErrorKind::PsbMismatch { fup: Some(K + fup) };
            assert_eq!(got[1], FlowEvent::Error { offset: psb_at(), time: 20, ip: Some(K + 2), kind }, "FUP at {fup:#x}");
            let s = short(&got);
            assert_eq!(s[..2], [E::I(0), E::Err(kind)]);
            // From the FUP's IP on, as the trace has it.
            let mut want: Vec<E> = resumed.iter().map(|&o| E::I(o)).collect();
            if fup == 0x04 {
                want.extend_from_slice(&WHOLE[2..]);
                assert_eq!(s[2..], want[..]);
            } else {
                assert_eq!(s[2], E::I(fup), "resumes at the FUP");
            }
        }
        // No FUP: tracing is off, says the PSB+, while the walk traces. The
        // walk waits for TIP.PGE.
        let mut t = start();
        t.psb(20, None).tnt(false).pge(0x0d).tnt(true);
        let s = short(&decode(&t.out, &Static(&code), &cfg(noretcomp)));
        assert_eq!(s, [E::I(0), E::Err(FlowErrorKind::PsbMismatch { fup: None }), E::I(0x0d), E::I(0x0e), E::End(Some(0x10))]);
    }
}

#[test]
fn psb_segments_decoded_apart_report_the_mismatch_as_the_whole_walk_does() {
    let code = code();
    for fup in [0x02, 0x04, 0x08, 0x0d, 0x21] {
        let mut t = start();
        t.psb(20, Some(fup));
        let trace = finish(&mut t);
        let whole = decode(&trace, &Static(&code), &cfg(true));
        let mut par = Vec::new();
        ParallelFlow::new(FlowDecoder::new(&[], &Static(&code), cfg(true))).run(&trace, |e| par.push(e));
        assert_eq!(par, whole, "FUP at {fup:#x}");
    }
}

#[test]
fn a_fup_reached_through_one_candidate_content_is_not_an_error_and_picks_it() {
    // 02 may also be a JMP to 04 (a site being poked): 04 is on that path.
    let code = code();
    let src = AltAt { code: &code, at: K + 2, alt: &[0xeb, 0x00] };
    let mut t = start();
    t.psb(20, Some(0x04));
    let got = decode(&finish(&mut t), &src, &cfg(true));
    assert!(!got.iter().any(|e| matches!(e, FlowEvent::Error { .. })), "{:?}", short(&got));
    // Both contents fit the packets after the PSB+; its FUP fits only the
    // JMP to 04, which is taken, certain.
    let mut want = vec![E::I(0), E::I(2), E::I(4), E::I(5), E::I(6), E::I(7)];
    want.extend_from_slice(&WHOLE[2..]);
    assert_eq!(short(&got), want);
    assert!(got.iter().any(|e| matches!(e, FlowEvent::Insn { ip, uncertain: false, .. } if *ip == K + 2)));
    // The event carries the bytes of the content taken; others, one content.
    assert_eq!(chosen_at(&got, K + 2), Some(vec![0xeb, 0x00]));
    assert!(got.iter().all(|e| !matches!(e, FlowEvent::Insn { ip, code, .. } if *ip != K + 2 && *code != InsnCode::Exact)));
    // Without the PSB+, both fit: uncertain, the first content taken.
    let got = decode(&finish(&mut start()), &src, &cfg(true));
    assert_eq!(short(&got), WHOLE);
    assert!(got.iter().any(|e| matches!(e, FlowEvent::Insn { ip, uncertain: true, .. } if *ip == K + 2)));
    assert_eq!(chosen_at(&got, K + 2), Some(vec![0xeb, 0x04]));
}

/// The bytes of the content chosen for the first instruction at `at`, as its event carries them.
fn chosen_at(got: &[FlowEvent], at: u64) -> Option<Vec<u8>> {
    got.iter().find_map(|e| match e {
        FlowEvent::Insn { ip, len, code: InsnCode::Chosen(b), .. } if *ip == at => Some(b[..usize::from(*len)].to_vec()),
        _ => None,
    })
}

/// The code source, counting its fetches.
struct Counting<'a>(Static<'a>, std::cell::Cell<u64>);

impl CodeSource for Counting<'_> {
    fn fetch(&self, addr: u64, lo: Time, hi: Time, which: usize, buf: &mut [u8; 16]) -> Fetch {
        self.1.set(self.1.get() + 1);
        self.0.fetch(addr, lo, hi, which, buf)
    }
}

#[test]
fn a_walk_stuck_in_a_loop_without_packets_is_told_apart_at_once() {
    // The walk is at `jmp $` when it meets the PSB+; the FUP is elsewhere.
    // Following the loop for max_walk instructions would not reach it: the
    // check stops when the walk comes back to where it started.
    let code = code();
    let src = Counting(Static(&code), std::cell::Cell::new(0));
    let mut t = Trace::new();
    t.psb(10, Some(0x30));
    t.psb(20, Some(0)).tnt(true);
    let c = FlowConfig { max_walk: 1 << 20, ..cfg(true) };
    let got = short(&decode(&finish(&mut t), &src, &c));
    assert_eq!(got[0], E::Err(FlowErrorKind::PsbMismatch { fup: Some(K) }));
    assert_eq!(got[1..], WHOLE);
    assert!(src.1.get() < 100, "{} fetches", src.1.get());
}

/// libipt's block decoder, given the same code, decodes the same
/// instructions where the FUP is on the path, and reports no error either;
/// where it is not, libipt sees a mismatch too (it walks on to the next
/// branch, finds the trace does not fit, and syncs to the next PSB).
#[test]
fn libipt_agrees_where_the_fup_is_on_the_path() {
    let code = code();
    let run = flow::Run { dir: std::env::temp_dir(), aux: Vec::new(), cfg: cfg(true), bare: code, full: self::code(), sections: Vec::new() };
    let image = flow::LibiptImage::new(&run, flow::ImageKind::Callback);
    for fup in [None, Some(0x02), Some(0x08), Some(0x20), Some(0x21)] {
        let mut t = start();
        if let Some(fup) = fup {
            t.psb(20, Some(fup));
        }
        let trace = finish(&mut t);
        let ours = flow::ours(&trace, &Static(&run.bare), &run.cfg);
        let theirs = flow::libipt(&trace, &image, flow::CPU, &run.bare);
        let insns = |evs: &[flow::Ev]| evs.iter().filter_map(|e| if let flow::Ev::Insn(ip) = e { Some(ip - K) } else { None }).collect::<Vec<_>>();
        let errors = |evs: &[flow::Ev]| evs.iter().filter(|e| matches!(e, flow::Ev::Error { .. })).count();
        assert_eq!(insns(&ours), [0, 2, 8, 0x20, 0x21, 0x23, 0x0d, 0x0e], "FUP {fup:x?}");
        assert_eq!(errors(&ours), 0);
        // libipt also reports the Jcc at 10, whose bit the trace ends
        // without, and an error for that; ours ends before it.
        assert_eq!(insns(&theirs), [0, 2, 8, 0x20, 0x21, 0x23, 0x0d, 0x0e, 0x10], "FUP {fup:x?}: libipt {theirs:x?}");
        assert_eq!(errors(&theirs), 1, "FUP {fup:x?}: libipt {theirs:x?}");
        assert!(matches!(theirs.last(), Some(flow::Ev::Error { offset, .. }) if *offset == trace.len() as u64), "{theirs:x?}");
    }
    for fup in [None, Some(0x04), Some(0x0d), Some(0x23)] {
        let mut t = start();
        t.psb(20, fup);
        let trace = finish(&mut t);
        let theirs = flow::libipt(&trace, &image, flow::CPU, &run.bare);
        let first = theirs.iter().find_map(|e| if let flow::Ev::Error { offset, .. } = e { Some(*offset) } else { None });
        assert!(first.is_some_and(|o| o >= psb_at() as u64 && o < trace.len() as u64), "FUP {fup:x?}: libipt {theirs:x?}");
    }
}
