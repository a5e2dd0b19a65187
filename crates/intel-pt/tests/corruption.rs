//! Bad input: truncation at every offset, byte flips, random bytes. The
//! decoder reports an error at the bad packet's offset or resyncs, and never
//! panics or loops.

mod common;

use common::{decode_all, every_kind, Rng};
use intel_pt::{find_psb, Packet, PacketDecoder, PacketErrorKind, Resync, PSB};

#[test]
fn every_kind_stream_decodes_back() {
    let (bytes, packets) = every_kind();
    let got = decode_all(&bytes);
    assert!(got.errors.is_empty(), "{:?}", got.errors);
    assert_eq!(got.packets.iter().map(|p| p.1).collect::<Vec<_>>(), packets);
}

#[test]
fn truncated_at_every_offset() {
    let (bytes, _) = every_kind();
    let whole = decode_all(&bytes).packets;
    let ends: Vec<usize> = whole.iter().skip(1).map(|p| p.0).chain([bytes.len()]).collect();
    for cut in 0..bytes.len() {
        let got = decode_all(&bytes[..cut]);
        // Every packet that ends before the cut is decoded as in the whole stream...
        let complete = ends.iter().take_while(|&&end| end <= cut).count();
        assert_eq!(got.packets[..complete], whole[..complete], "cut at {cut}");
        // ...and a cut inside a packet is reported where that packet starts.
        let boundary = if complete == 0 { 0 } else { ends[complete - 1] };
        if boundary == cut {
            assert!(got.errors.is_empty(), "cut at {cut}: {:?}", got.errors);
            assert_eq!(got.packets.len(), complete);
        } else {
            let e = got.errors[0];
            assert_eq!(e.offset, boundary, "cut at {cut}");
            assert!(matches!(e.kind, PacketErrorKind::Truncated { .. }), "cut at {cut}: {e}");
        }
    }
}

#[test]
fn byte_flips_report_or_resync() {
    let (bytes, _) = every_kind();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut errors = 0;
    for _ in 0..20_000 {
        let mut bad = bytes.clone();
        for _ in 0..1 + rng.below(3) {
            let i = rng.below(bad.len() as u64) as usize;
            bad[i] ^= 1 << rng.below(8);
        }
        let got = decode_all(&bad);
        errors += got.errors.len();
        // After a resync at a PSB, the stream's last PSB+ decodes as written.
        if let Some(r) = got.resyncs.last().filter(|r| r.psb_found) {
            assert!(bad[r.end..].starts_with(&PSB));
            assert!(got.packets.iter().any(|&(o, p)| o == r.end && p == Packet::Psb));
        }
    }
    assert!(errors > 1000, "flips are noticed ({errors} errors)");
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for len in [0, 1, 2, 3, 15, 16, 17, 100, 5000] {
        for _ in 0..200 {
            let mut buf: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if len > 40 && rng.bool() {
                let at = rng.below(len as u64 - 16) as usize;
                buf[at..at + 16].copy_from_slice(&PSB);
            }
            decode_all(&buf);
        }
    }
}

#[test]
fn sync_forward_reports_the_skipped_range() {
    let mut buf = vec![0x05, 0x02, 0x82, 0x02]; // garbage, and a PSB cut short
    buf.extend_from_slice(&PSB);
    buf.extend_from_slice(&[0x02, 0x23, 0x05, 0x00]);
    let mut dec = PacketDecoder::new(&buf);
    let r = dec.sync_forward();
    assert_eq!((r.start, r.end, r.psb_found), (0, 4, true), "the initial sync");
    let mut dec = PacketDecoder::new(&buf);
    let e = dec.next_packet().unwrap_err();
    assert_eq!((e.offset, e.kind), (0, PacketErrorKind::BadOpcode(0x05)));
    let r = dec.sync_forward();
    assert_eq!((r.start, r.end, r.psb_found), (0, 4, true));
    assert_eq!(dec.sync_forward(), Resync { start: 4, end: 4, psb_found: true }, "standing on a PSB, syncing stays");
    assert_eq!(dec.next_packet().unwrap(), Some((4, Packet::Psb)));
    assert_eq!(dec.next_packet().unwrap(), Some((20, Packet::PsbEnd)));
    assert_eq!(dec.next_packet().unwrap_err().offset, 22);
    let r = dec.sync_forward();
    assert_eq!((r.start, r.end, r.psb_found), (22, 24, false));
    assert_eq!(dec.next_packet().unwrap(), None);
    // At the end, syncing again skips nothing and still terminates.
    let r = dec.sync_forward();
    assert_eq!((r.start, r.end, r.psb_found), (24, 24, false));
}

#[test]
fn psb_search_matches_a_plain_scan() {
    let mut rng = Rng(77);
    for _ in 0..300 {
        let len = rng.below(300) as usize;
        let mut buf: Vec<u8> = (0..len).map(|_| [0x02, 0x82, rng.next() as u8][rng.below(3) as usize]).collect();
        if len > 16 && rng.bool() {
            let at = rng.below(len as u64 - 15) as usize;
            buf[at..at + 16].copy_from_slice(&PSB);
        }
        let plain = buf.windows(16).position(|w| w == PSB);
        assert_eq!(find_psb(&buf), plain);
    }
}
