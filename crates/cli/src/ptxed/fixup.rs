//! The trace's bytes made right before decoding: an erratum that shows in
//! them (SKD007), and a bit that libipt reads where the SDM does not (PWRE's
//! HW flag), both found packet by packet as the decoder reads them.

use intel_pt::{Packet, PacketDecoder};

/// SKD007: an overflow may land inside a 2-byte CYC, whose second byte then
/// reads `02` and the OVF's `F3` follows. The CYC's first byte becomes a PAD,
/// so that the decoder reads the OVF there (offsets stay as they are).
/// Found packet by packet, as the decoder reads them; after a bad packet,
/// from the next PSB.
pub fn undo_skd007(trace: &mut [u8]) -> usize {
    let cuts = packets_where(trace, |at, p, len, bytes| matches!(p, Packet::Cyc(_)) && len == 2 && bytes.get(at + 1..at + 3) == Some(&[0x02, 0xf3]));
    for &at in &cuts {
        trace[at] = 0;
    }
    cuts.len()
}

/// PWRE's HW flag is bit 7 of its first payload byte in the SDM (and the
/// decoder), bit 3 in libipt, whose test traces set that one: either counts
/// (bit 7 is set where bit 3 is).
pub fn pwre_hw_as_libipt(trace: &mut [u8]) -> usize {
    let at = packets_where(trace, |at, p, _, bytes| matches!(p, Packet::Pwre { hw: false, .. }) && bytes[at + 2] & 0x08 != 0);
    for &a in &at {
        trace[a + 2] |= 0x80;
    }
    at.len()
}

/// The offsets of the packets `want(offset, packet, length, trace)` picks.
fn packets_where(trace: &[u8], want: impl Fn(usize, &Packet, usize, &[u8]) -> bool) -> Vec<usize> {
    let mut found = Vec::new();
    let mut dec = PacketDecoder::new(trace);
    loop {
        match dec.next_packet() {
            Ok(Some((at, p))) => {
                if want(at, &p, dec.offset() - at, trace) {
                    found.push(at);
                }
            }
            Ok(None) => break,
            Err(_) => {
                if !dec.sync_forward().psb_found {
                    break;
                }
            }
        }
    }
    found
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

    #[test]
    fn pwre_hw_counts_at_libipts_bit_too() {
        let mut t = intel_pt::PSB.to_vec();
        t.extend_from_slice(&[0x02, 0x23, 0x02, 0x22, 0x08, 0x0f, 0x02, 0x22, 0x00, 0x0f]);
        assert_eq!(pwre_hw_as_libipt(&mut t), 1);
        assert_eq!(&t[18..], &[0x02, 0x22, 0x88, 0x0f, 0x02, 0x22, 0x00, 0x0f]);
    }
}
