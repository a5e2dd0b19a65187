//! The flow decoder over windows between timestamps: where code changes
//! between two timestamps, every content it had is tried against the trace
//! that follows; the one that fits is reported, several that fit give
//! uncertain ranges, none an error.

mod common;

use codeimage::window::{Interval, PerfStyle};
use codeimage::{BaseImage, CodeTimeline, Poke, TimelineBuilder};
use common::packets::{atoms, decode_all, long_addr, ts, TRACE_ID};
use etm::flow::{ElemKind, FlowDecoder, FlowError, InstrRange};
use etm::packet::{Context, Packet, TraceInfo};
use etm::{EtmV4Config, TracePacket};

const NOP: u32 = 0xd503201f;

/// The program, at 0x2000, and one poke at time 100 of `at` from its
/// word to `new`:
///   2000 nop
///   2004 b.ne 0x2000
///   2008 bl   0x2100
///   200c b    0x2000
///   2100 ret
///   2110 ret
fn code(at: u64, new: u32) -> CodeTimeline {
    code_with(at, new, None)
}

/// The same with the poke a PRE/POST pair: old or new from 100 to `settled`.
fn code_with(at: u64, new: u32, settled: Option<u64>) -> CodeTimeline {
    let mut words = vec![NOP; 0x48];
    words[1] = 0x54ffffe1; // b.ne 0x2000
    words[2] = 0x9400003e; // bl 0x2100
    words[3] = 0x17fffffd; // b 0x2000
    words[0x40] = 0xd65f03c0; // ret at 0x2100
    words[0x44] = 0xd65f03c0; // ret at 0x2110
    let old = words[((at - 0x2000) / 4) as usize];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut base = BaseImage::new();
    base.add_bytes(0x2000, bytes, "program");
    let mut b = TimelineBuilder::new(base);
    b.poke(Poke { time: 100, settled, addr: at, old: &old.to_le_bytes(), new: &new.to_le_bytes(), cpu: None });
    b.build()
}

fn config() -> EtmV4Config {
    EtmV4Config { configr: 0x1, traceidr: 0x10, ..EtmV4Config::default() }
}

/// Sync at 0x2000 with timestamp 50, then `body`, then timestamp 150: the
/// poke at 100 lands inside the window of every atom in `body`.
fn trace(body: &[Packet]) -> Vec<Packet> {
    let ctx = Context { el: 1, aarch64: true, non_secure: true, vmid: None, context_id: None };
    let mut p = vec![Packet::Async, Packet::TraceInfo(TraceInfo::default()), Packet::TraceOn, ts(50), Packet::AddressContext(long_addr(0x2000), ctx)];
    p.extend_from_slice(body);
    p.push(ts(150));
    p
}

/// The elements, decoding over windows (`windows`) or at the latest timestamp.
fn decode(code: &CodeTimeline, packets: &[Packet], windows: bool) -> Vec<ElemKind> {
    let elems = if windows {
        let mut d = FlowDecoder::new(Interval(code), &[config()]);
        d.set_timestamps(TRACE_ID, vec![50, 150]);
        decode_all(&mut d, packets)
    } else {
        decode_all(&mut FlowDecoder::new(PerfStyle(code), &[config()]), packets)
    };
    elems.into_iter().map(|e| e.kind).collect()
}

/// (start, end, executed, uncertain) of each range.
fn ranges(elems: &[ElemKind]) -> Vec<(u64, u64, bool, bool)> {
    elems
        .iter()
        .filter_map(|k| match k {
            ElemKind::InstrRange(InstrRange { start, end, executed, uncertain, .. }) => Some((*start, *end, *executed, *uncertain)),
            _ => None,
        })
        .collect()
}

fn errors(elems: &[ElemKind]) -> Vec<FlowError> {
    elems
        .iter()
        .filter_map(|k| match k {
            ElemKind::Error(e) => Some(*e),
            _ => None,
        })
        .collect()
}

/// NOP -> B at 0x2000 inside the window, and the CPU ran the NOP: the B
/// would need its atom taken; the trace's N decides for the NOP.
#[test]
fn nop_to_b_decided_by_an_n_atom() {
    let code = code(0x2000, 0x14000002); // b 0x2008
    let p = trace(&[atoms("NEE"), Packet::Address(long_addr(0x200c)), atoms("E")]);
    let got = decode(&code, &p, true);
    assert_eq!(
        ranges(&got),
        [(0x2000, 0x2008, false, false), (0x2008, 0x200c, true, false), (0x2100, 0x2104, true, false), (0x200c, 0x2010, true, false),]
    );
    assert!(errors(&got).is_empty(), "{got:?}");
}

/// NOP -> B at 0x2000 inside the window, and the CPU ran the B: read at
/// the window's start (the NOP) the trace goes astray; over the window the
/// return's address packet only fits the B.
#[test]
fn nop_to_b_decided_by_the_addresses_that_follow() {
    let code = code(0x2000, 0x14000002); // b 0x2008
    let p = trace(&[atoms("EEE"), Packet::Address(long_addr(0x200c)), atoms("E")]);
    let got = decode(&code, &p, true);
    assert_eq!(
        ranges(&got),
        [(0x2000, 0x2004, true, false), (0x2008, 0x200c, true, false), (0x2100, 0x2104, true, false), (0x200c, 0x2010, true, false),]
    );
    assert!(errors(&got).is_empty(), "{got:?}");
    // At one time (the latest timestamp, 50) the NOP is taken: a different walk.
    let single = decode(&code, &p, false);
    assert_eq!(ranges(&single)[0], (0x2000, 0x2008, true, false));
}

/// The words each range decoded from a content newer than its window's start.
fn picked(elems: &[ElemKind]) -> Vec<Vec<(u64, u32)>> {
    elems
        .iter()
        .filter_map(|k| match k {
            ElemKind::InstrRange(r) => Some((r.start..r.end).step_by(4).filter_map(|a| Some((a, r.picked_word(a)?))).collect()),
            _ => None,
        })
        .collect()
}

/// A range walked over the new content carries the word it decoded there
/// (the code at the window's start is the NOP); one walked over the oldest
/// content carries none.
#[test]
fn ranges_carry_the_words_picked() {
    let b = 0x14000002; // b 0x2008
    let code = code(0x2000, b);
    let p = trace(&[atoms("EEE"), Packet::Address(long_addr(0x200c)), atoms("E")]);
    assert_eq!(picked(&decode(&code, &p, true)), [vec![(0x2000, b)], vec![], vec![], vec![]]);
    let p = trace(&[atoms("NEE"), Packet::Address(long_addr(0x200c)), atoms("E")]);
    assert!(picked(&decode(&code, &p, true)).iter().all(Vec::is_empty));
}

/// BL 0x2100 -> BL 0x2110 inside the window, both callees one RET: the
/// trace fits both. The old target is reported, its range uncertain, and
/// so is what follows up to the packet after which both walk on alike; the
/// call itself, the same in both, is certain.
#[test]
fn bl_retarget_with_alike_callees_is_uncertain() {
    let code = code(0x2008, 0x94000042); // bl 0x2110
    let p = trace(&[atoms("NEE"), Packet::Address(long_addr(0x200c)), atoms("E")]);
    let got = decode(&code, &p, true);
    assert_eq!(
        ranges(&got),
        [(0x2000, 0x2008, false, false), (0x2008, 0x200c, true, false), (0x2100, 0x2104, true, true), (0x200c, 0x2010, true, true),]
    );
    assert!(errors(&got).is_empty(), "{got:?}");
}

/// Atoms that fit neither content (an unconditional branch not taken in
/// both): an error element naming the address, no range from the guess.
#[test]
fn no_content_fits_is_an_error() {
    let code = code(0x2000, 0x14000002); // b 0x2008
    let p = trace(&[atoms("NN")]);
    let got = decode(&code, &p, true);
    assert_eq!(errors(&got), [FlowError::NoCandidateFits { addr: 0x2000 }], "{got:?}");
    assert!(ranges(&got).is_empty(), "{got:?}");
}

/// Code that does not change inside its window decodes as at one time.
#[test]
fn unchanged_code_decodes_as_at_one_time() {
    let code = code(0x2000, 0x14000002);
    // After the poke (timestamps 150 and later): one content per window.
    let mut p = trace(&[]);
    p.push(atoms("EEE"));
    p.push(Packet::Address(long_addr(0x200c)));
    p.push(atoms("E"));
    let mut d = FlowDecoder::new(Interval(&code), &[config()]);
    d.set_timestamps(0x10, vec![50, 150]);
    let mut windowed = Vec::new();
    let mut single = Vec::new();
    let mut s = FlowDecoder::new(PerfStyle(&code), &[config()]);
    for (i, pk) in p.iter().enumerate() {
        let tp = TracePacket { trace_id: 0x10, index: i as u64, packet: *pk, raw: &[] };
        d.packet(&tp, &mut windowed);
        s.packet(&tp, &mut single);
    }
    assert_eq!(windowed, single);
    assert_eq!(
        ranges(&windowed.iter().map(|e| e.kind).collect::<Vec<_>>()),
        [(0x2000, 0x2004, true, false), (0x2008, 0x200c, true, false), (0x2100, 0x2104, true, false), (0x200c, 0x2010, true, false),]
    );
}

/// A PRE/POST pair around the write (100..120, inside the window): either
/// content may run between the two events; the trace decides as for a
/// write at one time.
#[test]
fn pre_post_pair_is_decided_by_the_trace() {
    let code = code_with(0x2000, 0x14000002, Some(120)); // b 0x2008
    for (atoms_run, first) in [("NEE", (0x2000, 0x2008, false, false)), ("EEE", (0x2000, 0x2004, true, false))] {
        let p = trace(&[atoms(atoms_run), Packet::Address(long_addr(0x200c)), atoms("E")]);
        let got = decode(&code, &p, true);
        assert_eq!(ranges(&got)[0], first, "{atoms_run}: {got:?}");
        assert!(ranges(&got).iter().all(|r| !r.3), "{atoms_run}: {got:?}");
        assert!(errors(&got).is_empty(), "{got:?}");
    }
}
