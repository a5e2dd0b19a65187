//! Packet decoding from known bytes, and encoder round trips: canonical
//! packets of every kind, the address and atom helpers, random traces and
//! the real snapshots' packets re-encoded.

mod common;

use common::{synth, Item, Rng};
use etm::packet::*;
use etm::{Container, Encoder, ErrorRecovery, EtmV4Config, Framing, PacketDecoder};
use proptest::prelude::*;

const ASYNC: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80];

fn full() -> EtmV4Config {
    synth::configs()[0].1
}

/// Decodes `bytes` after an A-sync and a TRACE_INFO (threshold 0x10) with `c`.
fn decode(c: &EtmV4Config, bytes: &[u8]) -> Vec<(u64, Packet, Vec<u8>)> {
    let mut data = ASYNC.to_vec();
    data.extend_from_slice(&[0x01, 0x08, 0x10]);
    data.extend_from_slice(bytes);
    let mut d = PacketDecoder::new(c).with_recovery(ErrorRecovery::Continue);
    let mut pos = 0;
    let mut out = Vec::new();
    while let Some(p) = d.decode(&data, 0, &mut pos) {
        out.push((p.index, p.packet, p.raw.to_vec()));
    }
    if let Some(p) = d.finish() {
        out.push((p.index, p.packet, p.raw.to_vec()));
    }
    assert_eq!(out[0].1, Packet::Async);
    assert!(matches!(out[1].1, Packet::TraceInfo(TraceInfo { cc_threshold: Some(0x10), .. })));
    out.drain(..2);
    out
}

fn one(c: &EtmV4Config, bytes: &[u8]) -> Packet {
    let out = decode(c, bytes);
    assert_eq!(out.len(), 1, "{bytes:02x?} gave {out:?}");
    assert_eq!(out[0].2, bytes, "raw bytes");
    out[0].1
}

fn atoms(s: &str) -> Atoms {
    let bits = s.chars().enumerate().fold(0, |b, (i, c)| b | ((c == 'E') as u32) << i);
    Atoms::new(bits, s.len() as u8)
}

#[test]
fn every_header_decodes_as_the_architecture_says() {
    let c = full();
    let ctx = |el, aarch64, non_secure, vmid, context_id| Context { el, aarch64, non_secure, vmid, context_id };
    assert_eq!(one(&c, &[0x04]), Packet::TraceOn);
    assert_eq!(one(&c, &[0x07]), Packet::ExceptionReturn);
    assert_eq!(one(&c, &[0x00, 0x03]), Packet::Discard);
    assert_eq!(one(&c, &[0x00, 0x05]), Packet::Overflow);
    assert_eq!(one(&c, &ASYNC), Packet::Async);
    assert_eq!(
        one(&c, &[0x01, 0x1F, 0x01, 0x02, 0x03, 0x90, 0x01, 0x05]),
        Packet::TraceInfo(TraceInfo { info: 1, p0_key: Some(2), spec_depth: 3, cc_threshold: Some(0x90), window: Some(5) })
    );
    // Timestamps merge into the value; a TRACE_INFO starts it from 0.
    assert_eq!(one(&c, &[0x02, 0x85, 0x01]), Packet::Timestamp(Timestamp { value: 0x85, updated_bits: 14, cycle_count: None }));
    assert_eq!(one(&c, &[0x03, 0x7F, 0x22]), Packet::Timestamp(Timestamp { value: 0x7F, updated_bits: 7, cycle_count: Some(0x22) }));
    let ts = decode(&c, &[0x02, 0xFF, 0xFF, 0x7F, 0x02, 0x05]);
    assert_eq!(ts[1].1, Packet::Timestamp(Timestamp { value: 0x1F_FF85, updated_bits: 7, cycle_count: None }));
    let e = |number, addr_interp, fault_pending| Packet::Exception(Exception { number, addr_interp, fault_pending, m_profile: false });
    assert_eq!(one(&c, &[0x06, 0x1C]), e(14, 0, false));
    assert_eq!(one(&c, &[0x06, 0x1D]), e(14, 1, false));
    assert_eq!(one(&c, &[0x06, 0x5C]), e(14, 2, false));
    assert_eq!(one(&c, &[0x06, 0x81, 0x21]), e(0x20, 1, true));
    // Cycle counts: the TRACE_INFO threshold (0x10) is added.
    assert_eq!(one(&c, &[0x0E, 0x05, 0x7F]), Packet::CycleCount(CycleCount { format: 1, count: Some(0x8F), commit: Some(5) }));
    assert_eq!(one(&c, &[0x0F, 0x03]), Packet::CycleCount(CycleCount { format: 1, count: None, commit: Some(3) }));
    assert_eq!(one(&c, &[0x0C, 0x34]), Packet::CycleCount(CycleCount { format: 2, count: Some(0x14), commit: Some(4) }));
    assert_eq!(one(&c, &[0x0D, 0x34]), Packet::CycleCount(CycleCount { format: 2, count: Some(0x14), commit: Some(3 + 0x20 - 15) }));
    assert_eq!(one(&c, &[0x1D]), Packet::CycleCount(CycleCount { format: 3, count: Some(0x11), commit: Some(4) }));
    assert_eq!(one(&c, &[0x23]), Packet::DataSync { numbered: true, value: 3 });
    assert_eq!(one(&c, &[0x2C]), Packet::DataSync { numbered: false, value: 4 });
    assert_eq!(one(&c, &[0x2D, 0x81, 0x01]), Packet::Commit(129));
    assert_eq!(one(&c, &[0x2E, 0x02]), Packet::CancelF1 { count: 2, mispredict: false });
    assert_eq!(one(&c, &[0x2F, 0x03]), Packet::CancelF1 { count: 3, mispredict: true });
    assert_eq!(one(&c, &[0x30]), Packet::Mispredict(Atoms::default()));
    assert_eq!(one(&c, &[0x31]), Packet::Mispredict(atoms("E")));
    assert_eq!(one(&c, &[0x33]), Packet::Mispredict(atoms("N")));
    assert_eq!(one(&c, &[0x36]), Packet::CancelF2(atoms("EE")));
    assert_eq!(one(&c, &[0x3B]), Packet::CancelF3 { e_atom: true, count: 3 });
    assert_eq!(one(&c, &[0x41]), Packet::CondInstr(CondInstr::F2 { code: 1 }));
    assert_eq!(one(&c, &[0x6C, 0x85, 0x01]), Packet::CondInstr(CondInstr::F1 { key: 0x85 }));
    assert_eq!(one(&c, &[0x6D, 0x07]), Packet::CondInstr(CondInstr::F3 { count: 4, final_elem: true }));
    assert_eq!(one(&c, &[0x43]), Packet::CondFlush);
    assert_eq!(one(&c, &[0x45]), Packet::CondResult(CondResult::F4 { token: 1 }));
    assert_eq!(one(&c, &[0x4D]), Packet::CondResult(CondResult::F2 { key_incr: 2, token: 1 }));
    assert_eq!(one(&c, &[0x52, 0x34]), Packet::CondResult(CondResult::F3 { tokens: 0x234 }));
    assert_eq!(one(&c, &[0x6E, 0x25]), Packet::CondResult(CondResult::F1 { results: [Some((2, 5)), None], ci: [false, false] }));
    assert_eq!(one(&c, &[0x69, 0x83, 0x01, 0x04]), Packet::CondResult(CondResult::F1 { results: [Some((8, 3)), Some((0, 4))], ci: [true, false] }));
    assert_eq!(one(&c, &[0x70]), Packet::Ignore);
    assert_eq!(one(&c, &[0x73]), Packet::Event(3));
    assert_eq!(one(&c, &[0x80]), Packet::Context(None));
    assert_eq!(one(&c, &[0x81, 0x35]), Packet::Context(Some(ctx(1, true, true, None, None))));
    assert_eq!(one(&c, &[0x81, 0xC2, 1, 2, 3, 4, 5, 6, 7, 8]), Packet::Context(Some(ctx(2, false, false, Some(0x0403_0201), Some(0x0807_0605)))));
    for (format, byte, pattern) in [
        (1, 0xF7, "E"),
        (2, 0xDA, "NE"),
        (3, 0xFD, "ENE"),
        (4, 0xDC, "NEEE"),
        (5, 0xF5, "NEEEE"),
        (5, 0xD6, "NENEN"),
        (6, 0xC0, "EEEE"),
        (6, 0xE1, "EEEEN"),
        (6, 0xD4, "EEEEEEEEEEEEEEEEEEEEEEEE"),
    ] {
        assert_eq!(one(&c, &[byte]), Packet::Atom { format, atoms: atoms(pattern) }, "{byte:#x}");
    }
    // Unknown and unconfigured headers, broken sequences, a cut packet.
    assert_eq!(one(&c, &[0x08]), Packet::Reserved { header: 0x08 });
    let plain = synth::configs()[2].1;
    assert_eq!(one(&plain, &[0x20]), Packet::ReservedConfig { header: 0x20, would_be: PacketType::NumDsMkr });
    assert_eq!(one(&plain, &[0xA0]), Packet::Reserved { header: 0xA0 });
    assert_eq!(one(&c, &[0x00, 0x07]), Packet::BadSequence { during: PacketType::Extension });
    assert_eq!(one(&c, &[0x00, 0x00, 0x01]), Packet::BadSequence { during: PacketType::Async });
    assert_eq!(one(&c, &[0x9D, 1, 2]), Packet::IncompleteEot { during: PacketType::AddrL64Is0 });
}

#[test]
fn addresses_expand_against_the_history() {
    let c = full();
    let a = |value, is, form, update_bits, valid_bits, is64| Address { value, is, form, update_bits, valid_bits, is64 };
    let out = decode(
        &c,
        &[
            0x81, 0x10, // context: AArch64
            0x9D, 0x12, 0x5A, 0xFE, 0xFF, 0x00, 0x00, 0x00, 0x80, // 64-bit IS0 (a57_single_step's)
            0x95, 0x3D, // short: low 9 bits
            0x96, 0x81, 0x02, // short IS1: low 16 bits
            0x9A, 0x04, 0x00, 0x34, 0x12, // 32-bit: upper half kept in AArch64
            0x92, // exact match: two back
            0x82, 0x00, 0x00, 0x00, 0x40, 0x00, // 32-bit with context: AArch32 from now on
            0x9B, 0x02, 0x01, 0x00, 0x00, // 32-bit IS1 in AArch32: upper half cleared
        ],
    );
    let addrs: Vec<Packet> = out.iter().map(|o| o.1).collect();
    let long = a(0x8000_0000_FFFE_B448, 0, AddrForm::Long64, 64, 64, true);
    assert_eq!(addrs[1], Packet::Address(long));
    assert_eq!(addrs[2], Packet::Address(a(0x8000_0000_FFFE_B4F4, 0, AddrForm::Short, 9, 64, true)));
    assert_eq!(addrs[3], Packet::Address(a(0x8000_0000_FFFE_0202, 1, AddrForm::Short, 16, 64, true)));
    assert_eq!(addrs[4], Packet::Address(a(0x8000_0000_1234_0010, 0, AddrForm::Long32, 32, 64, true)));
    assert_eq!(addrs[5], Packet::ExactMatch { index: 2, addr: a(0x8000_0000_FFFE_B4F4, 0, AddrForm::Short, 9, 64, true) });
    let Packet::AddressContext(ac, ctx) = addrs[6] else { panic!("{:?}", addrs[6]) };
    assert_eq!((ac.value, ac.is64, ctx.aarch64), (0x8000_0000_4000_0000, true, false));
    assert_eq!(addrs[7], Packet::Address(a(0x0000_0104, 1, AddrForm::Long32, 32, 64, false)));
}

#[test]
fn commit_option_removes_commit_fields() {
    let c = synth::configs()[1].1;
    assert!(c.commit_opt1());
    assert_eq!(one(&c, &[0x0E, 0x05]), Packet::CycleCount(CycleCount { format: 1, count: Some(0x15), commit: None }));
    assert_eq!(one(&c, &[0x0F]), Packet::CycleCount(CycleCount { format: 1, count: None, commit: None }));
    assert_eq!(one(&c, &[0x1D]), Packet::CycleCount(CycleCount { format: 3, count: Some(0x11), commit: None }));
}

#[test]
fn m_profile_function_return_and_long_exceptions() {
    let m = synth::configs()[3].1;
    assert_eq!(one(&m, &[0x05]), Packet::FunctionReturn);
    assert_eq!(one(&m, &[0x06, 0x97, 0x30]), Packet::Exception(Exception { number: 0x20B, addr_interp: 1, fault_pending: true, m_profile: true }));
    assert_eq!(one(&full(), &[0x05]), Packet::Reserved { header: 0x05 });
}

#[test]
fn a_packet_split_across_blocks_is_the_same_packet() {
    let c = full();
    let mut data = ASYNC.to_vec();
    data.extend_from_slice(&[0x01, 0x00, 0x85, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x01, 0x81, 0xC2, 1, 2, 3, 4, 5, 6, 7, 8, 0xF7]);
    let whole = {
        let mut d = PacketDecoder::new(&c);
        let mut pos = 0;
        std::iter::from_fn(|| d.decode(&data, 0, &mut pos).map(|p| (p.index, p.packet, p.raw.to_vec()))).collect::<Vec<_>>()
    };
    assert_eq!(whole.len(), 5);
    for cut in 1..data.len() {
        let mut d = PacketDecoder::new(&c);
        let mut got = Vec::new();
        for (base, block) in [(0, &data[..cut]), (cut, &data[cut..])] {
            let mut pos = 0;
            while let Some(p) = d.decode(block, base as u64, &mut pos) {
                got.push((p.index, p.packet, p.raw.to_vec()));
            }
        }
        assert_eq!(got, whole, "cut at {cut}");
    }
}

/// Canonical packets of every kind come back from encode then decode unchanged.
#[test]
fn every_packet_kind_round_trips() {
    for (name, c) in synth::configs() {
        let mut enc = Encoder::new(&c);
        let mut bytes = Vec::new();
        let mut want = Vec::new();
        let ctx = Context {
            el: 2,
            aarch64: true,
            non_secure: true,
            vmid: (c.vmid_bytes() > 0).then_some(7),
            context_id: (c.context_id_bytes() > 0).then_some(0x1234),
        };
        let a64 = Address { value: 0xFFFF_0000_1234_5678 & !3, is: 0, form: AddrForm::Long64, update_bits: 64, valid_bits: 64, is64: true };
        let mut packets = vec![
            Packet::Async,
            Packet::TraceInfo(TraceInfo { info: 1, p0_key: Some(3), spec_depth: 0, cc_threshold: Some(0x40), window: None }),
            Packet::TraceOn,
            Packet::Context(Some(ctx)),
            Packet::Address(a64),
            Packet::Address(Address { value: a64.value & !0x1FF | 0x1F4, form: AddrForm::Short, update_bits: 9, ..a64 }),
            Packet::Address(Address { value: a64.value & !0xFFFF | 0xBEEE, is: 1, form: AddrForm::Short, update_bits: 16, ..a64 }),
            Packet::Address(Address { value: a64.value & !0xFFFF_FFFF | 0x8000_0000, form: AddrForm::Long32, update_bits: 32, ..a64 }),
            Packet::ExactMatch { index: 2, addr: Address { value: a64.value & !0x1FF | 0x1F4, form: AddrForm::Short, update_bits: 9, ..a64 } },
            Packet::AddressContext(Address { value: 0x4000, form: AddrForm::Long64, ..a64 }, ctx),
            Packet::Context(None),
            Packet::Timestamp(Timestamp { value: 0x1234_5678, updated_bits: 35, cycle_count: Some(0x456) }),
            Packet::Timestamp(Timestamp { value: 0x0123_4567_89AB_CDEF, updated_bits: 64, cycle_count: None }),
            Packet::Exception(Exception { number: 14, addr_interp: 1, fault_pending: false, m_profile: c.profile == etm::Profile::M }),
            Packet::ExceptionReturn,
            Packet::CycleCount(CycleCount { format: 1, count: Some(0x40 + 1000), commit: (!c.commit_opt1()).then_some(3) }),
            Packet::CycleCount(CycleCount { format: 1, count: None, commit: (!c.commit_opt1()).then_some(0) }),
            Packet::CycleCount(CycleCount { format: 2, count: Some(0x40 + 15), commit: Some(16) }),
            Packet::CycleCount(CycleCount { format: 3, count: Some(0x40 + 3), commit: (!c.commit_opt1()).then_some(2) }),
            Packet::Commit(300),
            Packet::CancelF1 { count: 2, mispredict: true },
            Packet::Mispredict(atoms("EE")),
            Packet::CancelF2(atoms("N")),
            Packet::CancelF3 { e_atom: true, count: 5 },
            Packet::Event(9),
            Packet::Discard,
            Packet::Overflow,
            Packet::Atom { format: 6, atoms: atoms("EEEEEEEEEN") },
            Packet::Atom { format: 4, atoms: atoms("ENEN") },
            Packet::Atom { format: 5, atoms: atoms("ENENE") },
        ];
        if c.cond_trace_enabled() {
            packets.extend([
                Packet::CondInstr(CondInstr::F1 { key: 77 }),
                Packet::CondInstr(CondInstr::F2 { code: 2 }),
                Packet::CondInstr(CondInstr::F3 { count: 9, final_elem: true }),
                Packet::CondFlush,
                Packet::CondResult(CondResult::F1 { results: [Some((300, 5)), Some((1, 15))], ci: [false, true] }),
                Packet::CondResult(CondResult::F2 { key_incr: 1, token: 2 }),
                Packet::CondResult(CondResult::F3 { tokens: 0xABC }),
                Packet::CondResult(CondResult::F4 { token: 0 }),
            ]);
        }
        if c.data_trace_enabled() {
            packets.extend([Packet::DataSync { numbered: true, value: 7 }, Packet::DataSync { numbered: false, value: 2 }]);
        }
        if c.has_q_elements() {
            packets.extend([
                Packet::Q(QPacket { qtype: 0xC, count: Some(12), addr: QAddress::None }),
                Packet::Q(QPacket { qtype: 0xF, count: None, addr: QAddress::None }),
                Packet::Q(QPacket {
                    qtype: 0xA,
                    count: Some(1),
                    addr: QAddress::Address(Address { value: 0x8888_0000, form: AddrForm::Long32, update_bits: 32, ..a64 }),
                }),
            ]);
        }
        if c.version() >= 0x43 {
            packets.push(Packet::Ignore);
        }
        if c.profile == etm::Profile::M {
            packets.extend([
                Packet::FunctionReturn,
                Packet::Exception(Exception { number: 0x3EF, addr_interp: 2, fault_pending: true, m_profile: true }),
            ]);
        }
        for p in &packets {
            enc.encode(p, &mut bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            want.push(*p);
        }
        let mut d = PacketDecoder::new(&c);
        let mut pos = 0;
        let got: Vec<Packet> = std::iter::from_fn(|| d.decode(&bytes, 0, &mut pos).map(|p| p.packet)).collect();
        // Addresses come back with what the decoder knows of them: compare values and forms.
        let norm = |p: &Packet| match *p {
            Packet::Address(a) => Packet::Address(Address { valid_bits: 0, is64: false, ..a }),
            Packet::ExactMatch { index, addr } => Packet::ExactMatch { index, addr: Address { valid_bits: 0, is64: false, ..addr } },
            Packet::AddressContext(a, c) => Packet::AddressContext(Address { valid_bits: 0, is64: false, ..a }, c),
            Packet::Q(q) => Packet::Q(QPacket {
                addr: match q.addr {
                    QAddress::Address(a) => QAddress::Address(Address { valid_bits: 0, is64: false, ..a }),
                    x => x,
                },
                ..q
            }),
            other => other,
        };
        assert_eq!(got.iter().map(norm).collect::<Vec<_>>(), want.iter().map(norm).collect::<Vec<_>>(), "{name}");
    }
}

#[test]
fn unencodable_packets_are_errors_not_bytes() {
    let mut enc = Encoder::new(&full());
    let mut out = Vec::new();
    for p in [
        Packet::NotSync { in_async: false },
        Packet::BadSequence { during: PacketType::Async },
        Packet::Atom { format: 4, atoms: atoms("EEEE") },
        Packet::Atom { format: 6, atoms: atoms("ENE") },
        Packet::Event(0),
        Packet::CancelF3 { e_atom: false, count: 9 },
        Packet::Timestamp(Timestamp { value: 1, updated_bits: 10, cycle_count: None }),
        Packet::CycleCount(CycleCount { format: 3, count: Some(99), commit: Some(1) }),
    ] {
        assert!(enc.encode(&p, &mut out).is_err(), "{p:?}");
        assert!(out.is_empty(), "{p:?} left bytes behind");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The atom helper's packets decode to the same atoms, in order.
    #[test]
    fn atom_runs_round_trip(run in proptest::collection::vec(any::<bool>(), 1..200)) {
        let c = full();
        let mut enc = Encoder::new(&c);
        let mut bytes = ASYNC.to_vec();
        enc.atoms(&run, &mut bytes);
        let mut d = PacketDecoder::new(&c);
        let mut pos = 0;
        let mut got = Vec::new();
        while let Some(p) = d.decode(&bytes, 0, &mut pos) {
            if let Packet::Atom { atoms, .. } = p.packet {
                got.extend(atoms.iter());
            }
        }
        prop_assert_eq!(got, run);
    }

    /// The address helper picks forms that decode to the address asked for.
    #[test]
    fn compressed_addresses_round_trip(steps in proptest::collection::vec((0u8..5, any::<u64>(), any::<bool>()), 1..100), aarch64 in any::<bool>()) {
        let c = full();
        let mut enc = Encoder::new(&c);
        let mut bytes = ASYNC.to_vec();
        enc.encode(&Packet::TraceInfo(TraceInfo::default()), &mut bytes).unwrap();
        enc.encode(&Packet::Context(Some(Context { aarch64, ..Context::default() })), &mut bytes).unwrap();
        let mut want = Vec::new();
        let mut pc = 0x1000u64;
        for (kind, r, is1) in steps {
            let is = is1 as u8;
            pc = match kind {
                0 => pc.wrapping_add(r % 64 * 4),
                1 => pc ^ (r % (1 << 16)) << 2,
                2 => pc ^ (r % (1 << 30)) << 2,
                3 => want.get(want.len().saturating_sub(1 + (r % 3) as usize)).map_or(pc, |w: &(u64, u8)| w.0),
                _ => r,
            } & !(if is == 0 { 3 } else { 1 }) & if aarch64 { u64::MAX } else { 0xFFFF_FFFF };
            enc.address(pc, is, &mut bytes).unwrap();
            want.push((pc, is));
        }
        let mut d = PacketDecoder::new(&c);
        let mut pos = 0;
        let mut got = Vec::new();
        while let Some(p) = d.decode(&bytes, 0, &mut pos) {
            match p.packet {
                Packet::Address(a) | Packet::ExactMatch { addr: a, .. } => got.push((a.value, a.is)),
                _ => {}
            }
        }
        prop_assert_eq!(got, want);
    }
}

/// Re-encodes decoded packets (from the first A-sync, errors left out) and
/// checks that decoding the result gives the same packets.
fn fixpoint(c: &EtmV4Config, packets: &[Packet]) -> usize {
    let start = packets.iter().position(|p| *p == Packet::Async).unwrap_or(packets.len());
    let kept: Vec<Packet> = packets[start..].iter().filter(|p| !p.is_error() && !matches!(p, Packet::NotSync { .. })).copied().collect();
    let mut enc = Encoder::new(c);
    let mut bytes = Vec::new();
    for p in &kept {
        enc.encode(p, &mut bytes).unwrap_or_else(|e| panic!("{p:?}: {e}"));
    }
    let mut d = PacketDecoder::new(c);
    let mut pos = 0;
    let again: Vec<Packet> = std::iter::from_fn(|| d.decode(&bytes, 0, &mut pos).map(|p| p.packet)).collect();
    assert_eq!(again.len(), kept.len());
    for (i, (a, b)) in again.iter().zip(&kept).enumerate() {
        assert_eq!(a, b, "packet {i}");
    }
    kept.len()
}

#[test]
fn random_traces_survive_decode_encode_decode() {
    let mut rng = Rng(42);
    for (_, c) in synth::configs() {
        for _ in 0..20 {
            let t = synth::trace(&mut rng, &c, 300, false);
            let items = common::decode_all(&t, Container::Plain, Framing::Raw { trace_id: 1 }, &[c], ErrorRecovery::Resync);
            let packets: Vec<Packet> = items.iter().filter_map(|i| if let Item::Packet { packet, .. } = i { Some(*packet) } else { None }).collect();
            fixpoint(&c, &packets);
        }
    }
}

#[test]
fn real_snapshot_packets_survive_decode_encode_decode() {
    let mut total = 0;
    for name in common::SNAPSHOTS {
        let Some(dir) = common::snapshot(name) else {
            continue;
        };
        let b = common::first_buffer(&dir);
        let items = common::decode_all(&b.data, b.container, b.framing, &b.configs, ErrorRecovery::Resync);
        for c in &b.configs {
            let id = if matches!(b.framing, Framing::Raw { .. }) { 0 } else { c.trace_id() };
            let mut packets = Vec::new();
            for item in &items {
                match item {
                    Item::Packet { id: i, packet, .. } if *i == id => packets.push(*packet),
                    // A frame fault: what follows is a new stream.
                    Item::Frame(_) => {
                        total += fixpoint(c, &packets);
                        packets.clear();
                    }
                    _ => {}
                }
            }
            total += fixpoint(c, &packets);
        }
    }
    eprintln!("{total} real packets re-encoded");
}

/// Continuation fields have no length limit of their own (as in OpenCSD);
/// a packet longer than MAX_PACKET_LEN is cut there as a bad sequence,
/// whether it arrives in one block or in pieces.
#[test]
fn overlong_packets_are_cut_at_the_limit() {
    let c = full();
    let mut data = ASYNC.to_vec();
    data.push(0x2E); // CANCEL_F1: a count field follows
    data.extend(std::iter::repeat_n(0xFF, 300));
    data.push(0x05);
    data.push(0xF7);
    let max = etm::decode::MAX_PACKET_LEN;
    for cut in [0, 13, 100, 12 + max, data.len() - 1] {
        let mut d = PacketDecoder::new(&c).with_recovery(ErrorRecovery::Continue);
        let mut got = Vec::new();
        for (base, block) in [(0, &data[..cut]), (cut, &data[cut..])] {
            let mut pos = 0;
            while let Some(p) = d.decode(block, base as u64, &mut pos) {
                got.push((p.index, p.packet, p.raw.len()));
            }
        }
        assert_eq!(got[1], (12, Packet::BadSequence { during: PacketType::CancelF1 }, max), "cut at {cut}");
        assert_eq!(got.last().unwrap().1, Packet::Atom { format: 1, atoms: atoms("E") }, "cut at {cut}");
    }
}
