//! The flow decoder's rules on hand-made packet sequences over a small A64
//! program, checked against what the ETMv4 architecture says each packet
//! means: atoms walk to the next P0 instruction, speculation resolves by
//! commit / cancel / mispredict / discard, the return stack supplies return
//! targets, exceptions end the code before their preferred return address.
//! The real snapshots (decode_oracle.rs) never speculate or use the return
//! stack, so these rules are tested here.

mod common;

use codeimage::window::{PerfStyle, Static};
use codeimage::{BaseImage, CodeTimeline, TimelineBuilder};
use common::packets::{atoms, decode_all, long_addr};
use etm::flow::{ElemKind, FlowDecoder, FlowError, InstrRange, InstrSubtype, InstrType, Isa, TraceOnReason, UnsyncReason};
use etm::packet::{Atoms, Context, Exception, Packet, Timestamp, TraceInfo};
use etm::EtmV4Config;

/// The program, at 0x2000:
///   2000 nop
///   2004 b.ne 0x2000
///   2008 bl   0x2100
///   200c b    0x2000
///   2010 br   x1
///   2014 isb
///   2018 wfi
///   201c nop
///   ...
///   2100 ret
fn code() -> CodeTimeline {
    let mut words = vec![0xd503201f_u32; 0x44];
    words[0] = 0xd503201f; // nop
    words[1] = 0x54ffffe1; // b.ne 0x2000
    words[2] = 0x9400003e; // bl 0x2100
    words[3] = 0x17fffffd; // b 0x2000
    words[4] = 0xd61f0020; // br x1
    words[5] = 0xd5033fdf; // isb
    words[6] = 0xd503207f; // wfi
    words[0x40] = 0xd65f03c0; // ret at 0x2100
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut base = BaseImage::new();
    base.add_bytes(0x2000, bytes, "program");
    TimelineBuilder::new(base).build()
}

fn config(max_spec: u32, return_stack: bool) -> EtmV4Config {
    EtmV4Config { configr: 0x1 | if return_stack { 1 << 12 } else { 0 }, traceidr: 0x10, idr8: max_spec, ..EtmV4Config::default() }
}

fn ctx(aarch64: bool) -> Context {
    Context { el: 1, aarch64, non_secure: true, vmid: None, context_id: Some(7) }
}

/// A-sync, TRACE_INFO, TRACE_ON, address and context at `start`.
fn sync(start: u64) -> Vec<Packet> {
    vec![Packet::Async, Packet::TraceInfo(TraceInfo::default()), Packet::TraceOn, Packet::AddressContext(long_addr(start), ctx(true))]
}

/// Decodes the packets (index = position) and returns the elements with
/// their indices, EO_TRACE included.
fn decode(cfg: EtmV4Config, packets: &[Packet]) -> Vec<(u64, ElemKind)> {
    let code = code();
    let mut d = FlowDecoder::new(Static(&code), &[cfg]);
    decode_all(&mut d, packets).into_iter().map(|e| (e.index, e.kind)).collect()
}

fn range(start: u64, end: u64, num_i: u32, executed: bool, ty: InstrType, sub: InstrSubtype, cond: bool) -> ElemKind {
    ElemKind::InstrRange(InstrRange {
        start,
        end,
        num_i,
        last_size: 4,
        isa: Isa::A64,
        executed,
        last_type: ty,
        last_subtype: sub,
        last_cond: cond,
        uncertain: false,
        picked: Default::default(),
    })
}

fn ranges(elems: &[(u64, ElemKind)]) -> Vec<(u64, u64, bool)> {
    elems
        .iter()
        .filter_map(|(_, k)| match k {
            ElemKind::InstrRange(r) => Some((r.start, r.end, r.executed)),
            _ => None,
        })
        .collect()
}

#[test]
fn atoms_follow_the_code_without_speculation() {
    let mut p = sync(0x2000);
    p.push(atoms("ENEE"));
    let e = decode(config(0, false), &p);
    use InstrSubtype as S;
    use InstrType as T;
    assert_eq!(e[0], (0, ElemKind::NoSync(UnsyncReason::InitDecoder)));
    assert_eq!(e[1], (2, ElemKind::TraceOn(TraceOnReason::Normal)));
    assert!(matches!(e[2], (3, ElemKind::PeContext(c)) if c.isa == Isa::A64 && c.context_id == Some(7)));
    assert_eq!(
        e[3..7],
        [
            (4, range(0x2000, 0x2008, 2, true, T::Branch, S::None, true)),
            (4, range(0x2000, 0x2008, 2, false, T::Branch, S::None, true)),
            (4, range(0x2008, 0x200c, 1, true, T::Branch, S::Link, false)),
            (4, range(0x2100, 0x2104, 1, true, T::IndirectBranch, S::Ret, false)),
        ]
    );
    assert_eq!(e[7], (4, ElemKind::EoTrace(UnsyncReason::EndOfTrace)));
    assert_eq!(e.len(), 8);
}

#[test]
fn return_stack_gives_the_return_target() {
    let mut p = sync(0x2008);
    // bl, ret (target from the return stack), b back to 0x2000, b.ne taken.
    p.push(atoms("EEEE"));
    let e = decode(config(0, true), &p);
    assert_eq!(ranges(&e), [(0x2008, 0x200c, true), (0x2100, 0x2104, true), (0x200c, 0x2010, true), (0x2000, 0x2008, true),]);
    // Without the return stack the return needs an address: the atoms after it are skipped.
    let e = decode(config(0, false), &p);
    assert_eq!(ranges(&e), [(0x2008, 0x200c, true), (0x2100, 0x2104, true)]);
}

#[test]
fn an_address_after_an_indirect_branch_overrides_the_return_stack() {
    let mut p = sync(0x2008);
    p.push(atoms("EE"));
    p.push(Packet::Address(long_addr(0x2010)));
    p.push(atoms("E"));
    let e = decode(config(0, true), &p);
    assert_eq!(ranges(&e), [(0x2008, 0x200c, true), (0x2100, 0x2104, true), (0x2010, 0x2014, true)]);
}

#[test]
fn speculative_atoms_wait_for_their_commit() {
    let mut p = sync(0x2000);
    p.push(atoms("EN"));
    let e = decode(config(8, false), &p);
    // Nothing committed: TRACE_ON and the context are not output either,
    // and at the end the uncommitted atoms are dropped.
    assert_eq!(e.iter().map(|x| x.1).collect::<Vec<_>>(), [ElemKind::NoSync(UnsyncReason::InitDecoder), ElemKind::EoTrace(UnsyncReason::EndOfTrace)]);
    p.push(Packet::Commit(1));
    let e = decode(config(8, false), &p);
    assert_eq!(ranges(&e), [(0x2000, 0x2008, true)]);
    assert!(e.iter().any(|x| matches!(x.1, ElemKind::TraceOn(_))));
    // The commit packet's index.
    assert!(e.iter().all(|x| !matches!(x.1, ElemKind::InstrRange(_)) || x.0 == 4));
}

#[test]
fn speculation_depth_above_the_maximum_commits_the_oldest() {
    let mut p = sync(0x2000);
    p.push(atoms("ENE")); // depth 3 over a maximum of 2: the oldest commits
    let e = decode(config(2, false), &p);
    assert_eq!(ranges(&e), [(0x2000, 0x2008, true)]);
}

#[test]
fn cancel_drops_the_newest_and_mispredict_flips_the_newest_left() {
    let mut p = sync(0x2000);
    p.push(atoms("EEN"));
    // Cancel the N; the newest remaining E was mispredicted: it is N.
    p.push(Packet::CancelF1 { count: 1, mispredict: true });
    p.push(Packet::Commit(2));
    let e = decode(config(8, false), &p);
    assert_eq!(ranges(&e), [(0x2000, 0x2008, true), (0x2000, 0x2008, false)]);

    // Cancel format 2 with atoms: cancel one, flip the newest left, then add the packet's atoms.
    let mut p = sync(0x2000);
    p.push(atoms("EE"));
    p.push(Packet::CancelF2(Atoms::new(0b1, 1)));
    p.push(Packet::Commit(2));
    let e = decode(config(8, false), &p);
    // E flipped to N (falls through to the bl), then the new E takes the bl.
    assert_eq!(ranges(&e), [(0x2000, 0x2008, false), (0x2008, 0x200c, true)]);
}

#[test]
fn mispredict_drops_addresses_traced_after_the_atom() {
    let mut p = sync(0x2010);
    p.push(atoms("E")); // br x1
    p.push(Packet::Address(long_addr(0x2100)));
    p.push(Packet::Mispredict(Atoms::default())); // the br was not taken: no target
    p.push(atoms("E"));
    p.push(Packet::Commit(2));
    let e = decode(config(8, false), &p);
    use InstrSubtype as S;
    use InstrType as T;
    let r: Vec<ElemKind> = e.iter().map(|x| x.1).filter(|k| matches!(k, ElemKind::InstrRange(_))).collect();
    assert_eq!(r, [range(0x2010, 0x2014, 1, false, T::IndirectBranch, S::None, false), range(0x2014, 0x2018, 1, true, T::Isb, S::None, false),]);
}

#[test]
fn discard_drops_speculation_and_overflow_marks_the_restart() {
    let mut p = sync(0x2000);
    p.push(atoms("EE"));
    p.push(Packet::Timestamp(Timestamp { value: 0x1234, updated_bits: 64, cycle_count: None }));
    p.push(Packet::Overflow);
    p.push(Packet::Ignore);
    p.extend(sync(0x2000));
    p.push(Packet::Commit(0));
    p.push(atoms("E"));
    p.push(Packet::Commit(1));
    let e = decode(config(8, false), &p);
    let kinds: Vec<ElemKind> = e.iter().map(|x| x.1).collect();
    // The timestamp survives the discard; the atoms do not.
    assert!(kinds.contains(&ElemKind::Timestamp { value: 0x1234, cycles: None }));
    assert!(kinds.contains(&ElemKind::NoSync(UnsyncReason::Overflow)));
    assert!(kinds.contains(&ElemKind::TraceOn(TraceOnReason::Overflow)));
    assert_eq!(ranges(&e), [(0x2000, 0x2008, true)]);
}

#[test]
fn exception_ends_the_code_before_its_return_address() {
    let mut p = sync(0x2000);
    p.push(atoms("N")); // 2000..2008 not taken, now at 0x2008
    p.push(Packet::Exception(Exception { number: 14, addr_interp: 1, ..Default::default() }));
    p.push(Packet::Address(long_addr(0x2010))); // preferred return address: after the bl and b
    p.push(Packet::Address(long_addr(0x2100))); // the handler
    p.push(atoms("E"));
    let e = decode(config(0, false), &p);
    let tail: Vec<(u64, ElemKind)> = e.into_iter().skip(4).collect();
    use InstrSubtype as S;
    use InstrType as T;
    assert_eq!(
        tail,
        [
            (5, range(0x2008, 0x2010, 2, true, T::Branch, S::None, false)),
            (5, ElemKind::Exception { number: 14, ret_addr: 0x2010, ret_addr_is_target: false }),
            (8, range(0x2100, 0x2104, 1, true, T::IndirectBranch, S::Ret, false)),
            (8, ElemKind::EoTrace(UnsyncReason::EndOfTrace)),
        ]
    );
}

#[test]
fn code_outside_the_image_is_not_accessible() {
    let mut p = sync(0x9000);
    p.push(atoms("EE"));
    p.push(Packet::Address(long_addr(0x2010)));
    p.push(atoms("E"));
    let e = decode(config(0, false), &p);
    let kinds: Vec<ElemKind> = e.iter().map(|x| x.1).collect();
    assert_eq!(kinds.iter().filter(|k| **k == ElemKind::AddrNacc(0x9000)).count(), 1);
    assert_eq!(ranges(&e), [(0x2010, 0x2014, true)]);
}

#[test]
fn aarch32_code_is_reported_not_guessed() {
    let mut p = sync(0x2000);
    p[3] = Packet::AddressContext(long_addr(0x2000), ctx(false));
    p.push(atoms("E"));
    let e = decode(config(0, false), &p);
    assert!(e.iter().any(|x| matches!(x.1, ElemKind::PeContext(c) if c.isa == Isa::A32)));
    assert!(e.iter().any(|x| x.1 == ElemKind::Error(FlowError::UnsupportedIsa { isa: Isa::A32, addr: 0x2000 })));
    assert!(ranges(&e).is_empty());
}

#[test]
fn bad_trace_gives_an_error_then_waits_for_the_next_async() {
    let mut p = sync(0x2000);
    p.push(Packet::Commit(3)); // more than the stack holds
    p.push(atoms("E")); // ignored: not synchronised
    p.extend(sync(0x2000));
    p.push(atoms("E"));
    let e = decode(config(8, false), &p);
    let kinds: Vec<ElemKind> = e.iter().map(|x| x.1).collect();
    let err = kinds.iter().position(|k| *k == ElemKind::Error(FlowError::CommitOverrun)).expect("an error element");
    assert_eq!(kinds[err + 1], ElemKind::NoSync(UnsyncReason::BadPacket));
    // A reserved header resets the same way; after the next A-sync and
    // TRACE_INFO decoding resumes.
    let mut p = sync(0x2000);
    p.push(Packet::Reserved { header: 0x0a });
    p.push(atoms("E"));
    p.extend(sync(0x2000));
    p.push(atoms("E"));
    let e = decode(config(0, false), &p);
    let kinds: Vec<ElemKind> = e.iter().map(|x| x.1).collect();
    let err = kinds.iter().position(|k| matches!(k, ElemKind::Error(FlowError::BadPacket(_)))).unwrap();
    assert_eq!(kinds[err + 1], ElemKind::NoSync(UnsyncReason::BadPacket));
    assert_eq!(ranges(&e), [(0x2000, 0x2008, true)]);
}

#[test]
fn wfi_is_p0_only_when_the_trace_unit_says_so() {
    let mut p = sync(0x2014);
    p.push(atoms("EE"));
    let wfx = EtmV4Config {
        idr1: 0x4100F430, // ETMv4.3
        idr2: 0x488 | (1 << 31),
        ..config(0, false)
    };
    // WFXMODE is RES0 before ETMv4.3.
    let old = EtmV4Config { idr1: 0x4100F420, ..wfx };
    assert_eq!(ranges(&decode(old, &p)), [(0x2014, 0x2018, true), (0x2018, 0x2104, true)]);
    assert_eq!(ranges(&decode(wfx, &p)), [(0x2014, 0x2018, true), (0x2018, 0x201c, true)]);
    // Without WFXMODE the walk runs through the wfi and the nops to the ret at 0x2100.
    assert_eq!(ranges(&decode(config(0, false), &p)), [(0x2014, 0x2018, true), (0x2018, 0x2104, true)]);
}

#[test]
fn timestamps_come_out_in_trace_order_with_cycle_counts_when_enabled() {
    let mut p = sync(0x2000);
    p.push(atoms("E"));
    p.push(Packet::Timestamp(Timestamp { value: 0x99, updated_bits: 64, cycle_count: Some(12) }));
    p.push(atoms("N"));
    let cci = EtmV4Config { configr: 0x1 | (1 << 4), ..config(0, false) };
    let e = decode(cci, &p);
    let ts = e.iter().position(|x| matches!(x.1, ElemKind::Timestamp { value: 0x99, cycles: Some(12) })).unwrap();
    assert!(matches!(e[ts - 1].1, ElemKind::InstrRange(r) if r.executed));
    assert!(matches!(e[ts + 1].1, ElemKind::InstrRange(r) if !r.executed));
}

/// A TRACE_INFO claiming a huge speculation depth (found by cargo-fuzz:
/// the depth overflowed): the commit it forces runs out of elements.
#[test]
fn huge_speculation_depth_is_an_error_not_an_overflow() {
    let mut p = sync(0x2000);
    p[1] = Packet::TraceInfo(TraceInfo { spec_depth: u32::MAX, ..TraceInfo::default() });
    p.push(atoms("EEEE"));
    p.push(Packet::Exception(Exception { number: 1, addr_interp: 1, ..Default::default() }));
    p.push(Packet::Address(long_addr(0x2000)));
    let e = decode(config(0, false), &p);
    assert!(e.iter().any(|x| x.1 == ElemKind::Error(FlowError::CommitOverrun)));
}

/// The code is read as it was at the latest timestamp: a poke at time 100
/// turns the nop at 0x2000 into `b 0x2008`; atoms before it walk the old
/// code, atoms after it the new (a walk cached before the poke is not reused).
#[test]
fn code_is_read_at_the_trace_time() {
    let mut b = codeimage::TimelineBuilder::new({
        let mut base = BaseImage::new();
        let r = code();
        let bytes = r.base().regions()[0].bytes().to_vec();
        base.add_bytes(0x2000, bytes, "program");
        base
    });
    b.poke(codeimage::Poke {
        time: 100,
        settled: None,
        addr: 0x2000,
        old: &0xd503201f_u32.to_le_bytes(),
        new: &0x14000002_u32.to_le_bytes(),
        cpu: None,
    });
    let poked = b.build();
    let ts = |value| Packet::Timestamp(Timestamp { value, updated_bits: 64, cycle_count: None });
    let mut p = sync(0x2000);
    p.push(ts(50));
    p.push(atoms("E")); // b.ne at 0x2004 taken: back to 0x2000
    p.push(ts(150));
    p.push(atoms("E")); // now `b 0x2008` at 0x2000
    p.push(ts(160));
    p.push(atoms("E")); // bl at 0x2008
    let mut d = FlowDecoder::new(PerfStyle(&poked), &[config(0, false)]);
    let e: Vec<(u64, ElemKind)> = decode_all(&mut d, &p).into_iter().map(|e| (e.index, e.kind)).collect();
    assert_eq!(ranges(&e), [(0x2000, 0x2008, true), (0x2000, 0x2004, true), (0x2008, 0x200c, true)]);
}

/// With a perf clock, the code is read at the perf time of each timestamp:
/// the poke at perf time 100 lands between trace timestamps 30 and 50 (perf
/// times 90 and 110), so the second atom walks the new code.
#[test]
fn code_is_read_at_the_perf_time_of_the_timestamps() {
    let mut b = codeimage::TimelineBuilder::new({
        let mut base = BaseImage::new();
        let bytes = code().base().regions()[0].bytes().to_vec();
        base.add_bytes(0x2000, bytes, "program");
        base
    });
    let (nop, branch) = (0xd503201f_u32.to_le_bytes(), 0x14000002_u32.to_le_bytes());
    b.poke(codeimage::Poke { time: 100, settled: None, addr: 0x2000, old: &nop, new: &branch, cpu: None });
    let poked = b.build();
    let ts = |value| Packet::Timestamp(Timestamp { value, updated_bits: 64, cycle_count: None });
    let mut p = sync(0x2000);
    p.push(ts(30));
    p.push(atoms("E")); // b.ne at 0x2004 taken: back to 0x2000
    p.push(ts(50));
    p.push(atoms("E")); // `b 0x2008` at 0x2000 after the poke
    let conv = perfdata::TimeConv { time_shift: 0, time_mult: 1, time_zero: 60, extended: None };
    let mut d = FlowDecoder::new(PerfStyle(&poked), &[config(0, false)]).with_perf_clock(conv);
    let e: Vec<(u64, ElemKind)> = decode_all(&mut d, &p).into_iter().map(|e| (e.index, e.kind)).collect();
    assert_eq!(ranges(&e), [(0x2000, 0x2008, true), (0x2000, 0x2004, true)]);
    // Without it the timestamps are the image's times, both before the poke.
    let mut d = FlowDecoder::new(PerfStyle(&poked), &[config(0, false)]);
    let e: Vec<(u64, ElemKind)> = decode_all(&mut d, &p).into_iter().map(|e| (e.index, e.kind)).collect();
    assert_eq!(ranges(&e), [(0x2000, 0x2008, true), (0x2000, 0x2008, true)]);
}

/// Unframed source data is reported under the framing's trace ID (OpenCSD
/// uses 0), whatever the source's TRCTRACEIDR says: its elements too.
#[test]
fn unframed_data_decodes_under_the_framing_trace_id() {
    let cfg = config(0, false);
    let mut enc = etm::Encoder::new(&cfg);
    let mut data = Vec::new();
    for p in sync(0x2000) {
        enc.encode(&p, &mut data).unwrap();
    }
    enc.atoms(&[true, false], &mut data);
    let code = code();
    let framing = etm::Framing::Raw { trace_id: 0 };
    let mut r = etm::PacketReader::new(&data, framing, &[cfg], etm::ErrorRecovery::Resync);
    let mut d = FlowDecoder::for_buffer(Static(&code), framing, &[cfg]);
    let mut got = Vec::new();
    etm::flow::run(&mut r, &mut d, |item| {
        if let etm::flow::Item::Element(e) = item {
            got.push((e.trace_id, e.index, e.kind));
        }
    });
    let r: Vec<(u8, u64, u64)> = got
        .iter()
        .filter_map(|(id, _, k)| match k {
            ElemKind::InstrRange(r) => Some((*id, r.start, r.end)),
            _ => None,
        })
        .collect();
    assert_eq!(r, [(0, 0x2000, 0x2008), (0, 0x2000, 0x2008)]);
    assert!(got.iter().any(|(id, _, k)| *id == 0 && matches!(k, ElemKind::EoTrace(_))));
}
