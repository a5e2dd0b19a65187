//! The walk's packet decoder, and the scans ahead of it for the next TSC
//! or MTC that bound the time of what is walked.

use crate::{Packet, PacketDecoder, PacketError};

/// The walk's packet decoder. The scans for the next TSC (or MTC) look
/// ahead on a copy that only finds packet boundaries
/// ([`PacketDecoder::skip_packet`]); the walk decodes each packet once.
#[derive(Clone)]
pub(super) struct Packets<'a> {
    pub dec: PacketDecoder<'a>,
}

/// How a scan for the next TSC ended.
pub(super) enum Scan {
    Tsc(usize, u64),
    Mtc(usize, u8),
    /// Past the limit (at the packet there), or a bad packet there.
    Stop(usize),
    End,
}

impl Packets<'_> {
    /// Where the walk is: the offset of the next packet it takes.
    pub fn offset(&self) -> usize {
        self.dec.offset()
    }

    /// The walk's one copy of the full packet decoder (the common packets
    /// come through `next_quick`): out of line, so that the walk stays
    /// small while other callers inline `PacketDecoder::next_packet`.
    #[inline(never)]
    pub fn next_packet(&mut self) -> Result<Option<(usize, Packet)>, PacketError> {
        self.dec.next_packet()
    }

    /// The next packet, decoded on a copy (the walk's position stays);
    /// `None` at the end or at a bad packet.
    #[inline(never)]
    pub fn decoded_next(&self) -> Option<Packet> {
        self.dec.clone().next_packet().ok().flatten().map(|p| p.1)
    }

    pub fn sync_forward(&mut self) -> crate::Resync {
        self.dec.sync_forward()
    }

    /// The first TSC (or MTC, with `mtc`) from the walk's position; a packet
    /// past `limit`, or a bad one, stops the scan there.
    pub fn scan_to_tsc(&self, limit: usize, mtc: bool) -> Scan {
        let mut dec = self.dec.clone();
        let stop = [0x19, if mtc { 0x59 } else { 0x19 }];
        loop {
            dec.skip_until(stop, limit);
            match dec.skip_packet() {
                Ok(Some((off, bytes))) => match bytes[0] {
                    0x19 => return Scan::Tsc(off, crate::decode::le(&bytes[1..8])),
                    0x59 if mtc => return Scan::Mtc(off, bytes[1]),
                    _ if off > limit => return Scan::Stop(off),
                    _ => {}
                },
                Ok(None) => return Scan::End,
                Err(e) => return Scan::Stop(e.offset),
            }
        }
    }
}
