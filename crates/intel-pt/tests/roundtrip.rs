//! Encode then decode: every packet kind over its whole field ranges, single
//! and in streams; the IP compressor; and the encoder's range checks.

mod common;

use intel_pt::{compress_ip, encode, Encoder, Ip, IpCompression, Packet, PacketDecoder, PacketKind, PayloadSize, Tnt};
use proptest::prelude::*;

fn size() -> impl Strategy<Value = PayloadSize> {
    prop_oneof![Just(PayloadSize::Four), Just(PayloadSize::Eight)]
}

fn compression() -> impl Strategy<Value = IpCompression> {
    prop::sample::select(vec![
        IpCompression::Suppressed,
        IpCompression::Update16,
        IpCompression::Update32,
        IpCompression::Sext48,
        IpCompression::Update48,
        IpCompression::Full,
    ])
}

/// An IP field as a decoder starting from last IP `last` rebuilds it.
fn ip_field(last: u64) -> impl Strategy<Value = Ip> {
    (compression(), any::<u64>()).prop_map(move |(c, raw)| common::ip_with(c, raw, last))
}

fn tnt(max: u8) -> impl Strategy<Value = Tnt> {
    (1..=max, any::<u64>()).prop_map(|(count, raw)| Tnt { bits: raw & ((1 << count) - 1), count })
}

/// Any valid packet other than BIP (which needs a block around it), with
/// IPs as rebuilt from last IP `last`.
fn packet(last: u64) -> impl Strategy<Value = Packet> {
    prop_oneof![
        Just(Packet::Pad),
        Just(Packet::Psb),
        Just(Packet::PsbEnd),
        Just(Packet::Ovf),
        Just(Packet::Stop),
        tnt(6).prop_map(Packet::TntShort),
        tnt(47).prop_map(Packet::TntLong),
        ip_field(last).prop_map(Packet::Tip),
        ip_field(last).prop_map(Packet::TipPge),
        ip_field(last).prop_map(Packet::TipPgd),
        ip_field(last).prop_map(Packet::Fup),
        any::<(bool, bool, bool)>().prop_map(|(csl, csd, if_flag)| Packet::ModeExec { csl, csd, if_flag }),
        any::<(bool, bool)>().prop_map(|(intx, abort)| Packet::ModeTsx { intx, abort }),
        (0..1u64 << 47, any::<bool>()).prop_map(|(c, nr)| Packet::Pip { cr3: c << 5, nr }),
        (0..1u64 << 56).prop_map(Packet::Tsc),
        any::<u8>().prop_map(Packet::Mtc),
        prop_oneof![0..32u64, 0..1u64 << 12, 0..1u64 << 61].prop_map(Packet::Cyc),
        (any::<u16>(), 0..512u16).prop_map(|(ctc, fast_counter)| Packet::Tma { ctc, fast_counter }),
        any::<u8>().prop_map(Packet::Cbr),
        (0..1u64 << 40).prop_map(|v| Packet::Vmcs(v << 12)),
        any::<u64>().prop_map(Packet::Mnt),
        (any::<u64>(), size(), any::<bool>()).prop_map(|(p, size, ip)| Packet::Ptw {
            payload: if size == PayloadSize::Four { p as u32 as u64 } else { p },
            size,
            ip
        }),
        any::<bool>().prop_map(|ip| Packet::Exstop { ip }),
        (any::<u8>(), 0..4u8).prop_map(|(hints, ext)| Packet::Mwait { hints, ext }),
        (any::<bool>(), 0..16u8, 0..16u8).prop_map(|(hw, cstate, sub_cstate)| Packet::Pwre { hw, cstate, sub_cstate }),
        (0..16u8, 0..16u8, 0..16u8).prop_map(|(last_cstate, deepest_cstate, wake_reason)| Packet::Pwrx { last_cstate, deepest_cstate, wake_reason }),
        (0..32u8, size()).prop_map(|(block_type, size)| Packet::Bbp { block_type, size }),
        any::<bool>().prop_map(|ip| Packet::Bep { ip }),
        (any::<bool>(), 0..32u8, any::<u8>()).prop_map(|(ip, event_type, vector)| Packet::Cfe { ip, event_type, vector }),
        (0..64u8, any::<u64>()).prop_map(|(event_type, payload)| Packet::Evd { event_type, payload }),
    ]
}

fn decode_one(bytes: &[u8]) -> (Packet, usize) {
    let mut dec = PacketDecoder::new(bytes);
    let (offset, p) = dec.next_packet().unwrap().unwrap();
    assert_eq!(offset, 0);
    (p, dec.offset())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn every_packet_round_trips(p in packet(0)) {
        let mut bytes = Vec::new();
        let n = encode(&p, &mut bytes).unwrap();
        prop_assert_eq!(n, bytes.len());
        prop_assert_eq!(decode_one(&bytes), (p, n));
    }

    #[test]
    fn bip_round_trips_inside_its_block(block_type in 0..32u8, size in size(), id in 0..32u8, raw in any::<u64>()) {
        let payload = if size == PayloadSize::Four { raw as u32 as u64 } else { raw };
        let items = [Packet::Bbp { block_type, size }, Packet::Bip { id, payload, size }, Packet::Bep { ip: false }];
        let mut enc = Encoder::new();
        let mut bytes = Vec::new();
        for p in &items {
            enc.encode(p, &mut bytes).unwrap();
        }
        let got = common::decode_all(&bytes);
        prop_assert!(got.errors.is_empty());
        prop_assert_eq!(got.packets.iter().map(|p| p.1).collect::<Vec<_>>(), items.to_vec());
    }

    /// Streams of packets through the stateful encoder decode to the same
    /// packets at the offsets the encoder wrote them, IPs rebuilt included.
    #[test]
    fn streams_round_trip(seed in any::<u64>(), pebs in any::<bool>()) {
        let mut rng = common::Rng(seed | 1);
        let bytes = common::random_stream(&mut rng, 3000, common::Kinds { pebs, event_trace: true });
        let got = common::decode_all(&bytes);
        prop_assert!(got.errors.is_empty(), "{:?}", got.errors);
        let mut again = Vec::new();
        let mut enc = Encoder::new();
        for (offset, p) in &got.packets {
            prop_assert_eq!(*offset, again.len());
            enc.encode(p, &mut again).unwrap();
        }
        prop_assert_eq!(again, bytes);
    }

    /// The compressor's choice rebuilds the IP, and no shorter form would.
    #[test]
    fn compress_ip_is_shortest(ip in any::<u64>(), last in any::<u64>(), share in 0..4u32) {
        // Make shared upper bits likely.
        let ip = match share {
            0 => last & !0xffff | ip & 0xffff,
            1 => last & !0xffff_ffff | ip & 0xffff_ffff,
            2 => ((ip << 16) as i64 >> 16) as u64,
            _ => ip,
        };
        let c = compress_ip(ip, last);
        prop_assert_eq!(c.compression.apply(c.payload, last), Some(ip));
        let mut bytes = Vec::new();
        encode(&Packet::Tip(c), &mut bytes).unwrap();
        for shorter in [IpCompression::Update16, IpCompression::Update32, IpCompression::Sext48, IpCompression::Update48] {
            if shorter.payload_len() < c.compression.payload_len() {
                let alt = common::ip_with(shorter, ip, last);
                prop_assert_ne!(alt.ip, Some(ip), "{:?} would do", shorter);
            }
        }
    }

    /// Any field values: the encoder either refuses or round-trips exactly,
    /// never truncates silently.
    #[test]
    fn encoder_refuses_or_round_trips(kind in 0..12u8, a in any::<u64>(), b in any::<u8>(), c in any::<u8>()) {
        let p = match kind {
            0 => Packet::TntShort(Tnt { bits: a, count: b }),
            1 => Packet::TntLong(Tnt { bits: a, count: b }),
            2 => Packet::Tip(Ip { compression: IpCompression::Update32, payload: a, ip: None }),
            3 => Packet::Pip { cr3: a, nr: false },
            4 => Packet::Tsc(a),
            5 => Packet::Cyc(a),
            6 => Packet::Vmcs(a),
            7 => Packet::Tma { ctc: a as u16, fast_counter: (a >> 16) as u16 },
            8 => Packet::Pwre { hw: false, cstate: b, sub_cstate: c },
            9 => Packet::Ptw { payload: a, size: PayloadSize::Four, ip: false },
            10 => Packet::Cfe { ip: false, event_type: b, vector: c },
            _ => Packet::Evd { event_type: b, payload: a },
        };
        let mut bytes = Vec::new();
        if encode(&p, &mut bytes).is_ok() {
            let (mut got, _) = decode_one(&bytes);
            if let (Packet::Tip(want), Packet::Tip(ip)) = (p, &mut got) {
                ip.ip = want.ip; // the stateless encoder does not consult `ip`
            }
            prop_assert_eq!(got, p);
        } else {
            prop_assert!(bytes.is_empty());
        }
    }
}

#[test]
fn stateful_encoder_checks_what_the_decoder_will_see() {
    let mut enc = Encoder::new();
    let mut out = Vec::new();
    let wrong = Ip { compression: IpCompression::Update16, payload: 0x1234, ip: Some(0x5678) };
    assert_eq!(enc.encode(&Packet::Tip(wrong), &mut out).unwrap_err().packet, PacketKind::Tip);
    let bip = Packet::Bip { id: 1, payload: 2, size: PayloadSize::Four };
    assert!(enc.encode(&bip, &mut out).is_err(), "BIP outside a block");
    enc.encode(&Packet::Bbp { block_type: 0, size: PayloadSize::Eight }, &mut out).unwrap();
    assert!(enc.encode(&bip, &mut out).is_err(), "BIP of the wrong size");
    // 0x04 is a one-outcome short TNT, and a BIP header inside a block.
    assert!(enc.encode(&Packet::TntShort(Tnt { bits: 0, count: 1 }), &mut out).is_err());
    assert!(out.len() == 3, "refused packets write nothing");
    enc.encode(&Packet::TntShort(Tnt { bits: 1, count: 1 }), &mut out).unwrap(); // 0x06 closes the block
    enc.encode(&Packet::TntShort(Tnt { bits: 0, count: 1 }), &mut out).unwrap();
    assert_eq!(out, [0x02, 0x63, 0x00, 0x06, 0x04]);
}

#[test]
fn tnt_outcomes_are_oldest_first() {
    // 0b0_1_10110_0: the stop bit, then taken, not, taken, taken, not (oldest first).
    let (p, _) = decode_one(&[0b0110_1100]);
    let Packet::TntShort(t) = p else { panic!("{p:?}") };
    assert_eq!((0..t.count).map(|i| t.taken(i)).collect::<Vec<_>>(), [true, false, true, true, false]);
}
