//! Errata that show in the bytes of the trace, undone before decoding.

use intel_pt::{Packet, PacketDecoder};

/// SKD007: an overflow may land inside a 2-byte CYC, whose second byte then
/// reads `02` and the OVF's `F3` follows. The CYC's first byte becomes a PAD,
/// so that the decoder reads the OVF there (offsets stay as they are).
/// Found packet by packet, as the decoder reads them; after a bad packet,
/// from the next PSB.
pub fn undo_skd007(trace: &mut [u8]) -> usize {
    let mut cuts = Vec::new();
    let mut dec = PacketDecoder::new(trace);
    loop {
        match dec.next_packet() {
            Ok(Some((at, Packet::Cyc(_)))) if dec.offset() == at + 2 && trace.get(at + 1..at + 3) == Some(&[0x02, 0xf3]) => cuts.push(at),
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(_) => {
                if !dec.sync_forward().psb_found {
                    break;
                }
            }
        }
    }
    for &at in &cuts {
        trace[at] = 0;
    }
    cuts.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cyc_cut_by_an_overflow_becomes_pad_and_overflow() {
        let mut psb = intel_pt::PSB.to_vec();
        // PSBEND, CYC (2 bytes: 0xf7 0x02), F3, a 2-byte CYC that is whole.
        psb.extend_from_slice(&[0x02, 0x23, 0xf7, 0x02, 0xf3, 0xf7, 0x04]);
        assert_eq!(undo_skd007(&mut psb), 1);
        assert_eq!(&psb[18..], &[0x00, 0x02, 0xf3, 0xf7, 0x04]);
        let mut dec = PacketDecoder::new(&psb[18..]);
        assert!(matches!(dec.next_packet(), Ok(Some((0, Packet::Pad)))));
        assert!(matches!(dec.next_packet(), Ok(Some((1, Packet::Ovf)))));
    }
}
