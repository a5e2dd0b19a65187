//! Shared by the integration tests: streams that hold every packet kind,
//! random valid streams, and a decode loop that resyncs after errors.
#![allow(dead_code)] // each test binary uses its own part of this module

use intel_pt::{Encoder, Ip, IpCompression, Packet, PacketDecoder, PacketError, PayloadSize, Resync, Tnt};

/// A deterministic xorshift, so the random streams are the same every run.
pub use testkit::Rng;

/// An IP packet's field for `ip` with the given compression after `last`.
pub fn ip_with(compression: IpCompression, ip: u64, last: u64) -> Ip {
    let payload = match compression.payload_len() {
        0 => 0,
        8 => ip,
        n => ip & ((1 << (8 * n)) - 1),
    };
    Ip { compression, payload, ip: compression.apply(payload, last) }
}

/// A stream with every packet kind and every IP compression, in an order a
/// processor could produce, and the packets in it.
pub fn every_kind() -> (Vec<u8>, Vec<Packet>) {
    let mut enc = Encoder::new();
    let mut out = Vec::new();
    let mut packets = Vec::new();
    let mut put = |p: Packet, enc: &mut Encoder| {
        enc.encode(&p, &mut out).unwrap_or_else(|e| panic!("{p:?}: {e}"));
        packets.push(p);
    };
    let k = 0xffff_ffff_8100_0000u64;
    put(Packet::Psb, &mut enc);
    put(Packet::ModeExec { csl: true, csd: false, if_flag: true }, &mut enc);
    put(Packet::Pip { cr3: 0x1_2345_6780, nr: true }, &mut enc);
    put(Packet::Vmcs(0xa_bcde_f000), &mut enc);
    put(Packet::Tsc(0x0012_3456_789a_bcde), &mut enc);
    put(Packet::Tma { ctc: 0x1234, fast_counter: 0x1ff }, &mut enc);
    put(Packet::Cbr(0x2a), &mut enc);
    put(Packet::ModeTsx { intx: true, abort: false }, &mut enc);
    put(Packet::Fup(ip_with(IpCompression::Full, k + 0x10, 0)), &mut enc);
    put(Packet::PsbEnd, &mut enc);
    put(Packet::TipPge(ip_with(IpCompression::Sext48, k + 0x20, k + 0x10)), &mut enc);
    put(Packet::TntShort(Tnt { bits: 0b10110, count: 5 }), &mut enc);
    put(Packet::TntShort(Tnt { bits: 0, count: 1 }), &mut enc);
    put(Packet::TntLong(Tnt { bits: 0x5555_5555_5555, count: 47 }), &mut enc);
    put(Packet::Tip(ip_with(IpCompression::Update16, k + 0x1234, k + 0x20)), &mut enc);
    put(Packet::Tip(ip_with(IpCompression::Update32, k + 0x0234_5678, k + 0x1234)), &mut enc);
    put(Packet::Tip(ip_with(IpCompression::Update48, 0xffff_0000_1000_0000, k + 0x0234_5678)), &mut enc);
    put(Packet::Tip(ip_with(IpCompression::Full, 0x0000_7fff_0000_1000, 0xffff_0000_1000_0000)), &mut enc);
    put(Packet::Tip(ip_with(IpCompression::Suppressed, 0, 0x0000_7fff_0000_1000)), &mut enc);
    put(Packet::Mtc(0x42), &mut enc);
    put(Packet::Cyc(0x1f), &mut enc);
    put(Packet::Cyc(0x1234_5678), &mut enc);
    put(Packet::Pad, &mut enc);
    put(Packet::Ptw { payload: 0xdead_beef, size: PayloadSize::Four, ip: false }, &mut enc);
    put(Packet::Ptw { payload: 0x0123_4567_89ab_cdef, size: PayloadSize::Eight, ip: true }, &mut enc);
    put(Packet::Fup(ip_with(IpCompression::Update16, 0x0000_7fff_0000_2000, 0x0000_7fff_0000_1000)), &mut enc);
    put(Packet::Exstop { ip: false }, &mut enc);
    put(Packet::Mwait { hints: 0x20, ext: 1 }, &mut enc);
    put(Packet::Pwre { hw: true, cstate: 2, sub_cstate: 1 }, &mut enc);
    put(Packet::Exstop { ip: true }, &mut enc);
    put(Packet::Fup(ip_with(IpCompression::Update16, 0x0000_7fff_0000_2004, 0x0000_7fff_0000_2000)), &mut enc);
    put(Packet::Pwrx { last_cstate: 2, deepest_cstate: 3, wake_reason: 1 }, &mut enc);
    put(Packet::Bbp { block_type: 1, size: PayloadSize::Eight }, &mut enc);
    put(Packet::Bip { id: 0, payload: 0x1122_3344_5566_7788, size: PayloadSize::Eight }, &mut enc);
    put(Packet::Bip { id: 4, payload: 0x7fff_0000_2004, size: PayloadSize::Eight }, &mut enc);
    put(Packet::Bep { ip: true }, &mut enc);
    put(Packet::Fup(ip_with(IpCompression::Update16, 0x0000_7fff_0000_2008, 0x0000_7fff_0000_2004)), &mut enc);
    put(Packet::Bbp { block_type: 2, size: PayloadSize::Four }, &mut enc);
    put(Packet::Bip { id: 0x1f, payload: 0xcafe_f00d, size: PayloadSize::Four }, &mut enc);
    put(Packet::Mtc(0x43), &mut enc);
    put(Packet::Bip { id: 1, payload: 7, size: PayloadSize::Four }, &mut enc);
    put(Packet::Bep { ip: false }, &mut enc);
    put(Packet::Cfe { ip: true, event_type: 1, vector: 0x0e }, &mut enc);
    put(Packet::Evd { event_type: 0, payload: 0x7fff_dead_0000 }, &mut enc);
    put(Packet::Fup(ip_with(IpCompression::Update16, 0x0000_7fff_0000_200c, 0x0000_7fff_0000_2008)), &mut enc);
    put(Packet::Cfe { ip: false, event_type: 0x1f, vector: 0 }, &mut enc);
    put(Packet::Mnt(0x0102_0304_0506_0708), &mut enc);
    put(Packet::Ovf, &mut enc);
    put(Packet::Fup(ip_with(IpCompression::Sext48, k + 0x40, 0x0000_7fff_0000_200c)), &mut enc);
    put(Packet::TipPgd(ip_with(IpCompression::Suppressed, 0, k + 0x40)), &mut enc);
    put(Packet::Stop, &mut enc);
    put(Packet::Psb, &mut enc);
    put(Packet::PsbEnd, &mut enc);
    (out, packets)
}

/// Which kinds a random stream may hold, for decoders that lack some.
#[derive(Clone, Copy)]
pub struct Kinds {
    /// BBP/BIP/BEP (libipt has none of them).
    pub pebs: bool,
    /// CFE/EVD.
    pub event_trace: bool,
}

/// A random valid stream of about `target` bytes: PSB+ headers every few KiB,
/// IPs drawn near a few code regions so that every compression occurs.
pub fn random_stream(rng: &mut Rng, target: usize, kinds: Kinds) -> Vec<u8> {
    let regions = [0xffff_ffff_8100_0000u64, 0x0000_5555_5555_0000, 0x0000_7f12_3456_0000, 0x0000_0000_0040_0000];
    let mut enc = Encoder::new();
    let mut out = Vec::with_capacity(target + 64);
    let mut since_psb = usize::MAX;
    let mut block: Option<(PayloadSize, u32)> = None;
    while out.len() < target {
        if since_psb > 4096 {
            since_psb = 0;
            block = None;
            for p in [
                Packet::Psb,
                Packet::Tsc(rng.bits(56)),
                Packet::Tma { ctc: rng.bits(16) as u16, fast_counter: rng.bits(9) as u16 },
                Packet::Cbr(rng.bits(8) as u8),
                Packet::ModeExec { csl: true, csd: false, if_flag: rng.bool() },
                Packet::Pip { cr3: rng.bits(47) << 5, nr: rng.bool() },
            ] {
                enc.encode(&p, &mut out).unwrap();
            }
            let ip = regions[rng.below(4) as usize] + rng.bits(20);
            enc.encode(&Packet::Fup(enc.compress(ip)), &mut out).unwrap();
            enc.encode(&Packet::PsbEnd, &mut out).unwrap();
            continue;
        }
        let before = out.len();
        let packet = if let Some((size, left)) = block {
            // Inside a PEBS block: items, then the end.
            if left == 0 {
                block = None;
                Packet::Bep { ip: false }
            } else {
                block = Some((size, left - 1));
                Packet::Bip { id: rng.bits(5) as u8, payload: rng.bits(8 * size.bytes() as u32), size }
            }
        } else {
            random_packet(rng, &enc, &regions, kinds, &mut block)
        };
        enc.encode(&packet, &mut out).unwrap_or_else(|e| panic!("{packet:?}: {e}"));
        since_psb += out.len() - before;
    }
    out
}

fn random_packet(rng: &mut Rng, enc: &Encoder, regions: &[u64; 4], kinds: Kinds, block: &mut Option<(PayloadSize, u32)>) -> Packet {
    let ip = |rng: &mut Rng| {
        let region = regions[rng.below(4) as usize];
        let target = match rng.below(4) {
            0 => (enc.last_ip() & !0xffff) | rng.bits(16),
            1 => (enc.last_ip() & !0xffff_ffff) | rng.bits(32),
            _ => region + rng.bits(24),
        };
        match rng.below(8) {
            0 => ip_with(IpCompression::Full, target, enc.last_ip()),
            1 => ip_with(IpCompression::Update48, target, enc.last_ip()),
            2 => ip_with(IpCompression::Suppressed, 0, enc.last_ip()),
            _ => enc.compress(target),
        }
    };
    let tnt = |rng: &mut Rng, max: u8| {
        let count = 1 + rng.below(max as u64) as u8;
        Tnt { bits: rng.bits(count as u32), count }
    };
    loop {
        return match rng.below(40) {
            0..=9 => Packet::TntShort(tnt(rng, 6)),
            10..=11 => Packet::TntLong(tnt(rng, 47)),
            12..=15 => Packet::Tip(ip(rng)),
            16 => Packet::TipPge(ip(rng)),
            17 => Packet::TipPgd(ip(rng)),
            18..=19 => Packet::Fup(ip(rng)),
            20..=21 => Packet::Mtc(rng.bits(8) as u8),
            22..=24 => {
                let width = 1 + rng.below(40) as u32;
                Packet::Cyc(rng.bits(width))
            }
            25 => Packet::Pad,
            26 => Packet::Tsc(rng.bits(56)),
            27 => {
                // CS.L and CS.D both set is reserved, which perf rejects.
                let csl = rng.bool();
                Packet::ModeExec { csl, csd: !csl && rng.bool(), if_flag: rng.bool() }
            }
            28 => {
                // InTX and TXAbort both set is reserved, which perf rejects.
                let intx = rng.bool();
                Packet::ModeTsx { intx, abort: !intx && rng.bool() }
            }
            29 => Packet::Cbr(rng.bits(8) as u8),
            30 => match rng.below(5) {
                0 => Packet::Ovf,
                1 => Packet::Stop,
                2 => Packet::Vmcs(rng.bits(40) << 12),
                3 => Packet::Mnt(rng.next()),
                _ => Packet::Tma { ctc: rng.bits(16) as u16, fast_counter: rng.bits(9) as u16 },
            },
            31 => {
                let size = if rng.bool() { PayloadSize::Four } else { PayloadSize::Eight };
                Packet::Ptw { payload: rng.bits(8 * size.bytes() as u32), size, ip: rng.bool() }
            }
            32 => Packet::Exstop { ip: rng.bool() },
            33 => Packet::Mwait { hints: rng.bits(8) as u8, ext: rng.bits(2) as u8 },
            34 => Packet::Pwre { hw: rng.bool(), cstate: rng.bits(4) as u8, sub_cstate: rng.bits(4) as u8 },
            35 => Packet::Pwrx { last_cstate: rng.bits(4) as u8, deepest_cstate: rng.bits(4) as u8, wake_reason: rng.bits(4) as u8 },
            36 | 37 if kinds.event_trace => {
                if rng.bool() {
                    Packet::Cfe { ip: rng.bool(), event_type: rng.bits(5) as u8, vector: rng.bits(8) as u8 }
                } else {
                    Packet::Evd { event_type: rng.bits(6) as u8, payload: rng.next() }
                }
            }
            38 | 39 if kinds.pebs => {
                let size = if rng.bool() { PayloadSize::Four } else { PayloadSize::Eight };
                *block = Some((size, rng.below(4) as u32));
                Packet::Bbp { block_type: rng.bits(5) as u8, size }
            }
            _ => continue,
        };
    }
}

/// Everything a decode of `buf` yields, resyncing at the next PSB after each
/// error; panics if the decoder stops making progress.
pub struct Decoded {
    pub packets: Vec<(usize, Packet)>,
    pub errors: Vec<PacketError>,
    pub resyncs: Vec<Resync>,
}

pub fn decode_all(buf: &[u8]) -> Decoded {
    let mut dec = PacketDecoder::new(buf);
    let mut d = Decoded { packets: Vec::new(), errors: Vec::new(), resyncs: Vec::new() };
    let mut steps = 0usize;
    loop {
        steps += 1;
        assert!(steps <= buf.len() + 2, "no progress at offset {}", dec.offset());
        match dec.next_packet() {
            Ok(Some(p)) => d.packets.push(p),
            Ok(None) => break,
            Err(e) => {
                assert_eq!(e.offset, dec.offset(), "the decoder stays at the bad packet");
                assert!(e.offset < buf.len());
                d.errors.push(e);
                let r = dec.sync_forward();
                assert!(r.end > r.start && r.start == e.offset, "{r:?} after {e:?}");
                d.resyncs.push(r);
            }
        }
    }
    d
}
