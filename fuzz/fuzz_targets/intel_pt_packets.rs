//! Decodes arbitrary bytes as Intel PT, resyncing at the next PSB after each
//! error, as a trace reader would. Any panic, endless loop, error whose
//! offset is not where the decoder stands, resync that does not move
//! forward, or decoded packet that does not encode back to itself is a bug.
#![no_main]

use intel_pt::{encode, Packet, PacketDecoder};
use libfuzzer_sys::fuzz_target;

/// The packet as a fresh decoder would see it (IPs rebuilt from last IP 0).
fn fresh(p: Packet) -> Packet {
    let from_zero = |mut ip: intel_pt::Ip| {
        ip.ip = ip.compression.apply(ip.payload, 0);
        ip
    };
    match p {
        Packet::Tip(ip) => Packet::Tip(from_zero(ip)),
        Packet::TipPge(ip) => Packet::TipPge(from_zero(ip)),
        Packet::TipPgd(ip) => Packet::TipPgd(from_zero(ip)),
        Packet::Fup(ip) => Packet::Fup(from_zero(ip)),
        p => p,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut dec = PacketDecoder::new(data);
    let mut steps = 0;
    let mut bytes = Vec::new();
    loop {
        steps += 1;
        assert!(steps <= data.len() + 2, "no progress at {}", dec.offset());
        match dec.next_packet() {
            Ok(Some((offset, p))) => {
                let used = dec.offset() - offset;
                bytes.clear();
                let n = encode(&p, &mut bytes).expect("a decoded packet encodes");
                // A CYC may have been written longer than it needs; nothing else may.
                assert!(n == used || (matches!(p, Packet::Cyc(_)) && n < used), "{p:?}: {n} bytes, {used} read");
                let again = match p {
                    // A BIP needs its block around it.
                    Packet::Bip { .. } => p,
                    _ => PacketDecoder::new(&bytes).next_packet().expect("decodes").expect("a packet").1,
                };
                assert_eq!(again, fresh(p));
            }
            Ok(None) => break,
            Err(e) => {
                assert_eq!(e.offset, dec.offset());
                assert!(e.offset < data.len());
                let _ = e.to_string();
                let r = dec.sync_forward();
                assert!(r.start == e.offset && r.end > r.start && r.end <= data.len());
            }
        }
    }
});
