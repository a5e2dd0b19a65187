//! Packets for ptdump from the project's packet decoder, with libipt's
//! view of a trace on top: how it syncs to a PSB, which bytes it rejects
//! as bad packets, and the packet-level errata it works around.
//!
//! `intel_pt::PacketDecoder` ignores reserved bits and cannot be moved to an
//! offset; this module covers both here (a TMA's reserved bits are checked,
//! and a decoder is started afresh on the rest of the buffer to move). It also
//! reads PWRE's HW flag where libipt puts it as well as where the SDM does.

use intel_pt::{find_psb, Packet, PacketDecoder, PacketErrorKind};

use super::cpu::Errata;
use super::error::Fault;

/// One packet as ptdump shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    Packet(Packet),
    /// A packet an erratum corrupted (SKZ84's TMA), shown as `<invalid>`.
    Invalid,
}

/// A decoded item, where it starts and how many bytes it takes.
#[derive(Clone, Copy, Debug)]
pub struct Decoded {
    pub offset: usize,
    pub size: usize,
    pub item: Item,
}

/// Walks a trace buffer packet by packet.
pub struct Reader<'a> {
    buf: &'a [u8],
    /// Where `dec` starts in `buf`.
    base: usize,
    dec: PacketDecoder<'a>,
    /// The PSB the last sync went to.
    sync: Option<usize>,
    errata: Errata,
}

const PSB_LEN: usize = intel_pt::PSB.len();

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], errata: Errata) -> Self {
        Reader { buf, base: 0, dec: PacketDecoder::new(buf), sync: None, errata }
    }

    /// `size` bytes of the trace from `offset`, as far as it goes.
    pub fn bytes(&self, offset: usize, size: usize) -> &'a [u8] {
        let start = offset.min(self.buf.len());
        &self.buf[start..(start + size).min(self.buf.len())]
    }

    /// Where the next packet starts.
    pub fn offset(&self) -> usize {
        self.base + self.dec.offset()
    }

    fn move_to(&mut self, pos: usize) {
        self.base = pos.min(self.buf.len());
        self.dec = PacketDecoder::new(&self.buf[self.base..]);
    }

    /// Takes `pos` as a sync point without looking for a PSB (`--no-sync`).
    pub fn sync_at(&mut self, pos: usize) {
        self.move_to(pos);
        self.sync = Some(self.base);
    }

    /// Moves to the next PSB as libipt does: searching from 15 bytes before
    /// the current position, so that a PSB partly swallowed by a bad
    /// packet's bytes is found, but past the PSB last synced to; and of a
    /// run of PSB patterns, to the last 16 bytes. False when none is left.
    pub fn sync_forward(&mut self) -> bool {
        let mut pos = self.offset();
        if self.sync == Some(pos) {
            pos += PSB_LEN;
        }
        let from = pos.saturating_sub(PSB_LEN - 1).min(self.buf.len());
        let Some(mut at) = find_psb(&self.buf[from..]).map(|at| from + at) else {
            return false;
        };
        while self.buf.get(at + PSB_LEN..at + PSB_LEN + 2) == Some(&intel_pt::PSB[..2]) {
            at += 2;
        }
        self.sync_at(at);
        true
    }

    /// The next packet; `Ok(None)` at the end of the buffer, or where a
    /// packet is cut off by it (libipt's end of stream); on error the
    /// offset of the bad packet and why, the position unmoved.
    pub fn next(&mut self) -> Result<Option<Decoded>, (usize, Fault)> {
        let offset = self.offset();
        let mut probe = self.dec.clone();
        match probe.next_packet() {
            Ok(None) => Ok(None),
            Ok(Some((_, packet))) => {
                let size = probe.offset() - self.dec.offset();
                self.dec = probe;
                self.check(offset, size, packet)
            }
            Err(e) => match e.kind {
                PacketErrorKind::Truncated { .. } => Ok(None),
                PacketErrorKind::BadOpcode(_) | PacketErrorKind::BadExtOpcode(_) | PacketErrorKind::BadExt2Opcode(_) => {
                    Err((offset, Fault::BadOpcode))
                }
                _ => Err((offset, Fault::BadPacket)),
            },
        }
    }

    /// A packet the decoder took, checked as libipt checks it.
    fn check(&mut self, offset: usize, size: usize, packet: Packet) -> Result<Option<Decoded>, (usize, Fault)> {
        let bytes = &self.buf[offset..offset + size];
        let decoded = |size, item| Ok(Some(Decoded { offset, size, item }));
        match packet {
            // libipt knows no PEBS-via-PT packets.
            Packet::Bbp { .. } | Packet::Bip { .. } | Packet::Bep { .. } => {
                self.move_to(offset);
                Err((offset, Fault::BadOpcode))
            }
            // Byte 4 and bits 15:9 of the fast counter are reserved.
            Packet::Tma { .. } if bytes[4] != 0 || bytes[6] & 0xfe != 0 => {
                if self.errata.skz84 {
                    self.move_to(offset + size + 1);
                    return decoded(size + 1, Item::Invalid);
                }
                self.move_to(offset);
                Err((offset, Fault::BadPacket))
            }
            // SKD007: a 2-byte CYC whose second byte reads as an extended
            // opcode, then F3: the CYC sits inside an OVF; show the OVF.
            Packet::Cyc(v) if self.errata.skd007 && size == 2 && v & !0x1f == 0x20 && self.buf.get(offset + 2) == Some(&0xf3) => {
                self.move_to(offset + 3);
                decoded(2, Item::Packet(Packet::Ovf))
            }
            // PWRE's HW flag: bit 7 of byte 2 in the SDM (and the decoder),
            // bit 3 in libipt; either counts.
            Packet::Pwre { hw, cstate, sub_cstate } => {
                decoded(size, Item::Packet(Packet::Pwre { hw: hw || bytes[2] & 0x08 != 0, cstate, sub_cstate }))
            }
            _ => decoded(size, Item::Packet(packet)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each item as (offset, size, item), or the error it stopped at.
    type Walked = Result<(usize, usize, Item), (usize, Fault)>;

    fn items(buf: &[u8], errata: Errata) -> Vec<Walked> {
        let mut r = Reader::new(buf, errata);
        let mut out = Vec::new();
        loop {
            match r.next() {
                Ok(Some(d)) => out.push(Ok((d.offset, d.size, d.item))),
                Ok(None) => return out,
                Err(e) => {
                    out.push(Err(e));
                    if !r.sync_forward() {
                        return out;
                    }
                }
            }
        }
    }

    #[test]
    fn trig_tma_reserved_bits_and_truncation() {
        let trace = [0xd9, 0xe0, 0xa1, 0x17, 0x00, 0x02, 0x73, 0x01, 0x01, 0x01, 0x01, 0x00, 0x19];
        let got = items(&trace, Errata::default());
        let trig = Item::Packet(Packet::Trig { trbv: 0xa1, ip: true, mult: true, icnt: Some(23) });
        assert_eq!(got, [Ok((0, 5, trig)), Err((5, Fault::BadPacket))]);
        let got = items(&trace, Errata { skz84: true, ..Errata::default() });
        // The invalid TMA takes 8 bytes, the TSC's first one too.
        assert_eq!(got, [Ok((0, 5, trig)), Ok((5, 8, Item::Invalid))]);
    }

    #[test]
    fn resync_finds_a_psb_that_overlaps_the_bad_packet() {
        // MNT whose payload is the first half of a PSB, then its second half.
        let mut trace = vec![0x02, 0xc3, 0x88];
        trace.extend_from_slice(&intel_pt::PSB[..8]);
        trace.extend_from_slice(&intel_pt::PSB[..8]);
        trace.extend_from_slice(&[0x02, 0x23, 0, 0, 0, 0, 0, 0]);
        let got = items(&trace, Errata::default());
        assert_eq!(got.len(), 10, "{got:?}");
        assert_eq!(got[1], Err((11, Fault::BadPacket)));
        assert_eq!(got[2], Ok((3, 16, Item::Packet(Packet::Psb))));
        assert_eq!(got[3], Ok((19, 2, Item::Packet(Packet::PsbEnd))));
    }

    /// Of a run of PSB patterns longer than a PSB, the sync point is its
    /// last 16 bytes, and a resync never goes back to the PSB it left.
    #[test]
    fn sync_takes_the_last_psb_of_a_run() {
        let mut trace = vec![0x00];
        trace.extend_from_slice(&[0x02, 0x82].repeat(10));
        trace.extend_from_slice(&[0x02, 0x23, 0x02, 0x55]);
        let mut r = Reader::new(&trace, Errata::default());
        assert!(r.sync_forward());
        assert_eq!(r.offset(), 5);
        assert_eq!(r.next().unwrap().map(|d| (d.offset, d.item)), Some((5, Item::Packet(Packet::Psb))));
        assert_eq!(r.next().unwrap().map(|d| (d.offset, d.item)), Some((21, Item::Packet(Packet::PsbEnd))));
        assert_eq!(r.next().unwrap_err(), (23, Fault::BadOpcode));
        assert!(!r.sync_forward());
    }
}
