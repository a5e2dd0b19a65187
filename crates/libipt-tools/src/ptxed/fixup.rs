//! The trace's bytes made right before decoding: a bit that libipt reads
//! where the SDM does not (PWRE's HW flag), found packet by packet as the
//! decoder reads them. (Not an erratum of a processor: those are worked
//! around by the decoder, `intel_pt::flow::Errata`.)

use intel_pt::{Packet, PacketDecoder};

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
    fn pwre_hw_counts_at_libipts_bit_too() {
        let mut t = intel_pt::PSB.to_vec();
        t.extend_from_slice(&[0x02, 0x23, 0x02, 0x22, 0x08, 0x0f, 0x02, 0x22, 0x00, 0x0f]);
        assert_eq!(pwre_hw_as_libipt(&mut t), 1);
        assert_eq!(&t[18..], &[0x02, 0x22, 0x88, 0x0f, 0x02, 0x22, 0x00, 0x0f]);
    }
}
