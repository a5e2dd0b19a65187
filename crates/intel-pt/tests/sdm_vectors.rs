//! Byte vectors written by hand from the packet tables of the Intel SDM
//! (Vol. 3C, "Intel Processor Trace", packet definitions), one or more per
//! packet kind, and the malformed encodings each check rejects.

use intel_pt::{encode, Ip, IpCompression, Packet, PacketDecoder, PacketErrorKind, PacketKind, PayloadSize, Tnt};

/// Decodes `bytes` from a fresh decoder, after `prefix` packets (whose
/// state, last IP or an open block, the vector depends on).
fn decode_after(prefix: &[u8], bytes: &[u8]) -> Result<Packet, PacketErrorKind> {
    let all = [prefix, bytes].concat();
    let mut dec = PacketDecoder::new(&all);
    while dec.offset() < prefix.len() {
        dec.next_packet().unwrap().unwrap();
    }
    assert_eq!(dec.offset(), prefix.len(), "prefix ends on a packet boundary");
    match dec.next_packet() {
        Ok(Some((_, p))) => {
            assert_eq!(dec.offset(), all.len(), "{p:?} is all of {bytes:02x?}");
            Ok(p)
        }
        Ok(None) => panic!("no packet"),
        Err(e) => {
            assert_eq!(e.offset, prefix.len());
            Err(e.kind)
        }
    }
}

/// Checks a vector both ways: it decodes to `want`, and `want` encodes to it.
fn check(prefix: &[u8], bytes: &[u8], want: Packet) {
    assert_eq!(decode_after(prefix, bytes), Ok(want), "{bytes:02x?}");
    let mut out = Vec::new();
    encode(&want, &mut out).unwrap();
    assert_eq!(out, bytes, "{want:?}");
}

fn ip(compression: IpCompression, payload: u64, ip: Option<u64>) -> Ip {
    Ip { compression, payload, ip }
}

const PSB: &[u8] = &[0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82];

#[test]
fn packets_without_payload() {
    check(&[], &[0x00], Packet::Pad);
    check(&[], PSB, Packet::Psb);
    check(&[], &[0x02, 0x23], Packet::PsbEnd);
    check(&[], &[0x02, 0xf3], Packet::Ovf);
    check(&[], &[0x02, 0x83], Packet::Stop);
}

#[test]
fn tnt() {
    // Short: 1 | N T | 0 — the stop bit, two outcomes (oldest first), then 0.
    check(&[], &[0b0000_1010], Packet::TntShort(Tnt { bits: 0b01, count: 2 }));
    check(&[], &[0b1111_1110], Packet::TntShort(Tnt { bits: 0b11_1111, count: 6 }));
    check(&[], &[0b0000_0100], Packet::TntShort(Tnt { bits: 0, count: 1 }));
    // Long: 02 A3, then 48 bits with the stop bit at the top of the outcomes.
    check(&[], &[0x02, 0xa3, 0x05, 0, 0, 0, 0, 0], Packet::TntLong(Tnt { bits: 0b01, count: 2 }));
    check(&[], &[0x02, 0xa3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], Packet::TntLong(Tnt { bits: (1 << 47) - 1, count: 47 }));
    assert_eq!(decode_after(&[], &[0x02, 0xa3, 0, 0, 0, 0, 0, 0]), Err(PacketErrorKind::EmptyTnt));
    assert_eq!(decode_after(&[], &[0x02, 0xa3, 1, 0, 0, 0, 0, 0]), Err(PacketErrorKind::EmptyTnt));
}

#[test]
fn ip_packets_and_every_compression() {
    use IpCompression::*;
    // The header is IPBytes (bits 7:5) over the opcode (bits 4:0).
    check(&[], &[0x0d], Packet::Tip(ip(Suppressed, 0, None)));
    check(&[], &[0x2d, 0x34, 0x12], Packet::Tip(ip(Update16, 0x1234, Some(0x1234))));
    check(&[], &[0x4d, 0x78, 0x56, 0x34, 0x12], Packet::Tip(ip(Update32, 0x1234_5678, Some(0x1234_5678))));
    // IPBytes 3: bit 47 sign-extends.
    let k = 0xffff_ffff_8100_1000;
    check(&[], &[0x6d, 0x00, 0x10, 0x00, 0x81, 0xff, 0xff], Packet::Tip(ip(Sext48, 0xffff_8100_1000, Some(k))));
    check(&[], &[0x71, 0x00, 0x10, 0x00, 0x81, 0xff, 0x7f], Packet::TipPge(ip(Sext48, 0x7fff_8100_1000, Some(0x7fff_8100_1000))));
    check(&[], &[0xdd, 1, 2, 3, 4, 5, 6, 7, 8], Packet::Fup(ip(Full, 0x0807_0605_0403_0201, Some(0x0807_0605_0403_0201))));
    check(&[], &[0x01], Packet::TipPgd(ip(Suppressed, 0, None)));

    // Updates keep the upper bits of the last IP; IPBytes 4 keeps 63:48.
    let last = [0xdd, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]; // FUP 0x1122334455667788
    check(&last, &[0x2d, 0xcd, 0xab], Packet::Tip(ip(Update16, 0xabcd, Some(0x1122_3344_5566_abcd))));
    check(&last, &[0x51, 0x0d, 0xf0, 0xad, 0xde], Packet::TipPge(ip(Update32, 0xdead_f00d, Some(0x1122_3344_dead_f00d))));
    check(&last, &[0x81, 1, 2, 3, 4, 5, 6], Packet::TipPgd(ip(Update48, 0x0605_0403_0201, Some(0x1122_0605_0403_0201))));
    check(&last, &[0x3d, 0xfe, 0xca], Packet::Fup(ip(Update16, 0xcafe, Some(0x1122_3344_5566_cafe))));
    // A suppressed IP leaves the last IP alone.
    check(&[last.as_slice(), &[0x0d]].concat(), &[0x2d, 0, 0], Packet::Tip(ip(Update16, 0, Some(0x1122_3344_5566_0000))));
    // A PSB resets it to zero.
    check(&[last.as_slice(), PSB].concat(), &[0x4d, 1, 0, 0, 0], Packet::Tip(ip(Update32, 1, Some(1))));

    for header in [0xad, 0xed, 0xb1, 0xe1, 0xa1, 0xfd] {
        let packet = match header & 0x1f {
            0x0d => PacketKind::Tip,
            0x11 => PacketKind::TipPge,
            0x01 => PacketKind::TipPgd,
            _ => PacketKind::Fup,
        };
        assert_eq!(decode_after(&[], &[header, 0, 0, 0, 0, 0, 0, 0, 0]), Err(PacketErrorKind::BadIpBytes { packet, ipbytes: header >> 5 }));
    }
}

#[test]
fn mode() {
    check(&[], &[0x99, 0x01], Packet::ModeExec { csl: true, csd: false, if_flag: false });
    check(&[], &[0x99, 0x02], Packet::ModeExec { csl: false, csd: true, if_flag: false });
    check(&[], &[0x99, 0x04], Packet::ModeExec { csl: false, csd: false, if_flag: true });
    check(&[], &[0x99, 0x21], Packet::ModeTsx { intx: true, abort: false });
    check(&[], &[0x99, 0x22], Packet::ModeTsx { intx: false, abort: true });
    assert_eq!(decode_after(&[], &[0x99, 0x40]), Err(PacketErrorKind::BadModeLeaf(2)));
}

#[test]
fn paging_and_virtualisation() {
    // PIP: CR3[51:5] in payload bits 47:1, NR in bit 0.
    check(&[], &[0x02, 0x43, 0x01, 0x45, 0x23, 0x01, 0, 0], Packet::Pip { cr3: 0x1234_5000, nr: true });
    check(&[], &[0x02, 0x43, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff], Packet::Pip { cr3: 0x000f_ffff_ffff_ffe0, nr: false });
    // VMCS: bits 51:12 of the VMCS pointer.
    check(&[], &[0x02, 0xc8, 0x12, 0x34, 0x56, 0x78, 0x9a], Packet::Vmcs(0x9a_7856_3412 << 12));
}

#[test]
fn timing() {
    check(&[], &[0x19, 0xde, 0xbc, 0x9a, 0x78, 0x56, 0x34, 0x12], Packet::Tsc(0x0012_3456_789a_bcde));
    check(&[], &[0x59, 0x42], Packet::Mtc(0x42));
    // TMA: CTC[15:0], a reserved byte, FastCounter[7:0], FC[8] in bit 0.
    check(&[], &[0x02, 0x73, 0x34, 0x12, 0x00, 0xff, 0x01], Packet::Tma { ctc: 0x1234, fast_counter: 0x1ff });
    check(&[], &[0x02, 0x03, 0x2a, 0x00], Packet::Cbr(42));
    // CYC: value bits 7:3 of the header, Exp in bit 2; then 7 bits per byte, Exp in bit 0.
    check(&[], &[0x0b], Packet::Cyc(1));
    check(&[], &[0x03], Packet::Cyc(0));
    check(&[], &[0x07, 0x02], Packet::Cyc(32));
    check(&[], &[0xff, 0xff, 0x02], Packet::Cyc(0x1fff));
    let longest = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe];
    check(&[], &longest, Packet::Cyc((1 << 61) - 1));
    assert_eq!(decode_after(&[], &[0x07, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00]), Err(PacketErrorKind::CycTooLong));
}

#[test]
fn reserved_bits_are_ignored() {
    // TMA's reserved byte and FC bits 15:9; CBR's second byte; MODE.Exec bits 4:3.
    assert_eq!(decode_after(&[], &[0x02, 0x73, 0x34, 0x12, 0xaa, 0xff, 0xff]), Ok(Packet::Tma { ctc: 0x1234, fast_counter: 0x1ff }));
    assert_eq!(decode_after(&[], &[0x02, 0x03, 0x2a, 0x55]), Ok(Packet::Cbr(42)));
    assert_eq!(decode_after(&[], &[0x99, 0x19]), Ok(Packet::ModeExec { csl: true, csd: false, if_flag: false }));
}

#[test]
fn maintenance_and_ptwrite() {
    check(&[], &[0x02, 0xc3, 0x88, 1, 2, 3, 4, 5, 6, 7, 8], Packet::Mnt(0x0807_0605_0403_0201));
    assert_eq!(decode_after(&[], &[0x02, 0xc3, 0x87, 0, 0, 0, 0, 0, 0, 0, 0]), Err(PacketErrorKind::BadExt2Opcode(0x87)));
    // PTWRITE: IP in bit 7, PayloadBytes in bits 6:5, 10010b in bits 4:0.
    check(&[], &[0x02, 0x12, 0xef, 0xbe, 0xad, 0xde], Packet::Ptw { payload: 0xdead_beef, size: PayloadSize::Four, ip: false });
    check(&[], &[0x02, 0xb2, 1, 2, 3, 4, 5, 6, 7, 8], Packet::Ptw { payload: 0x0807_0605_0403_0201, size: PayloadSize::Eight, ip: true });
    assert_eq!(decode_after(&[], &[0x02, 0x52, 0, 0, 0, 0]), Err(PacketErrorKind::BadPtwSize(2)));
    assert_eq!(decode_after(&[], &[0x02, 0xf2, 0, 0, 0, 0]), Err(PacketErrorKind::BadPtwSize(3)));
}

#[test]
fn power() {
    check(&[], &[0x02, 0x62], Packet::Exstop { ip: false });
    check(&[], &[0x02, 0xe2], Packet::Exstop { ip: true });
    // MWAIT: hints in byte 2, extensions in bits 1:0 of byte 6.
    check(&[], &[0x02, 0xc2, 0x20, 0, 0, 0, 0x01, 0, 0, 0], Packet::Mwait { hints: 0x20, ext: 1 });
    // PWRE: HW in bit 7 of byte 2; C-state and sub C-state in byte 3.
    check(&[], &[0x02, 0x22, 0x80, 0x21], Packet::Pwre { hw: true, cstate: 2, sub_cstate: 1 });
    // PWRX: last (7:4) and deepest (3:0) core C-state, then the wake reason.
    check(&[], &[0x02, 0xa2, 0x23, 0x01, 0, 0, 0], Packet::Pwrx { last_cstate: 2, deepest_cstate: 3, wake_reason: 1 });
}

#[test]
fn pebs_blocks() {
    // BBP: SZ in bit 7 (1: 4-byte items), type in bits 4:0.
    check(&[], &[0x02, 0x63, 0x81], Packet::Bbp { block_type: 1, size: PayloadSize::Four });
    check(&[], &[0x02, 0x63, 0x1f], Packet::Bbp { block_type: 0x1f, size: PayloadSize::Eight });
    // BIP: ID in bits 7:3 over 100b, only inside a block.
    check(&[0x02, 0x63, 0x81], &[0x0c, 1, 2, 3, 4], Packet::Bip { id: 1, payload: 0x0403_0201, size: PayloadSize::Four });
    check(&[0x02, 0x63, 0x01], &[0xfc, 1, 2, 3, 4, 5, 6, 7, 8], Packet::Bip { id: 0x1f, payload: 0x0807_0605_0403_0201, size: PayloadSize::Eight });
    // Timing packets leave the block open; a TNT or TIP closes it.
    check(&[0x02, 0x63, 0x81, 0x59, 0x00], &[0x0c, 1, 2, 3, 4], Packet::Bip { id: 1, payload: 0x0403_0201, size: PayloadSize::Four });
    check(&[0x02, 0x63, 0x81, 0x0d], &[0x0c], Packet::TntShort(Tnt { bits: 0b10, count: 2 }));
    // Outside a block the same byte is a TNT.
    check(&[], &[0x0c], Packet::TntShort(Tnt { bits: 0b10, count: 2 }));
    check(&[], &[0x02, 0x33], Packet::Bep { ip: false });
    check(&[], &[0x02, 0xb3], Packet::Bep { ip: true });
}

#[test]
fn event_trace() {
    // CFE: IP in bit 7 and type in bits 4:0 of byte 2, vector in byte 3.
    check(&[], &[0x02, 0x13, 0x81, 0x0e], Packet::Cfe { ip: true, event_type: 1, vector: 0x0e });
    check(&[], &[0x02, 0x13, 0x1f, 0x00], Packet::Cfe { ip: false, event_type: 0x1f, vector: 0 });
    // EVD: type in bits 5:0 of byte 2, then 8 bytes of payload.
    check(&[], &[0x02, 0x53, 0x3f, 1, 2, 3, 4, 5, 6, 7, 8], Packet::Evd { event_type: 0x3f, payload: 0x0807_0605_0403_0201 });
}

#[test]
fn trigger() {
    // TRIG: D9, flags (IP 0x80, ICNT valid 0x40, MULT 0x20), trigger bits,
    // then the 16-bit instruction count when valid.
    check(&[], &[0xd9, 0xe0, 0xa1, 0x17, 0x00], Packet::Trig { trbv: 0xa1, ip: true, mult: true, icnt: Some(23) });
    check(&[], &[0xd9, 0x40, 0x1a, 0x00, 0x01], Packet::Trig { trbv: 0x1a, ip: false, mult: false, icnt: Some(0x100) });
    check(&[], &[0xd9, 0x20, 0x01], Packet::Trig { trbv: 1, ip: false, mult: true, icnt: None });
    assert_eq!(
        decode_after(&[], &[0xd9, 0x40, 0x1a, 0x00]),
        Err(PacketErrorKind::Truncated { packet: Some(PacketKind::Trig), needed: 5, available: 4 })
    );
    assert_eq!(decode_after(&[], &[0xd9, 0x00]), Err(PacketErrorKind::Truncated { packet: Some(PacketKind::Trig), needed: 3, available: 2 }));
}

#[test]
fn unknown_opcodes_and_bad_psb() {
    for b in [0x05, 0x09, 0x15, 0x25, 0x39] {
        assert_eq!(decode_after(&[], &[b, 0, 0, 0, 0, 0, 0, 0, 0]), Err(PacketErrorKind::BadOpcode(b)), "{b:#x}");
    }
    for b in [0x00, 0x04, 0x82 ^ 0x80, 0xff] {
        assert_eq!(decode_after(&[], &[0x02, b, 0, 0, 0, 0, 0, 0, 0, 0]), Err(PacketErrorKind::BadExtOpcode(b)), "{b:#x}");
    }
    let mut bad = PSB.to_vec();
    bad[15] = 0x83;
    assert_eq!(decode_after(&[], &bad), Err(PacketErrorKind::BadPsb));
    assert_eq!(decode_after(&[], &[0x02]), Err(PacketErrorKind::Truncated { packet: None, needed: 2, available: 1 }));
    assert_eq!(decode_after(&[], &[0x19, 1, 2]), Err(PacketErrorKind::Truncated { packet: Some(PacketKind::Tsc), needed: 8, available: 3 }));
}
