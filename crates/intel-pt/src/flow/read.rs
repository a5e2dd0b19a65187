//! Reading the packets up to the next flow packet (TNT, TIP, TIP.PGD,
//! FUP): the timing packets on the way go to the clock, a TIP.PGE moves
//! the walk, a PSB+ restates where execution is.

use super::code::CodeSource;
use super::event::FlowErrorKind;
use super::psb::psb_fup;
use super::state::{packet_failure, Failure, Flow, State};
use super::walk::Walker;
use crate::decode::Quick;
use crate::Packet;

impl<'a, C: CodeSource> Walker<'a, C> {
    /// The next flow packet, processing timing and sync packets on the way.
    #[inline(always)]
    pub(super) fn peek_flow(&self, st: &mut State<'a>) -> Result<Option<(usize, Flow)>, Failure> {
        match st.peeked {
            Some(p) => Ok(Some(p)),
            None => self.next_flow::<false>(st),
        }
    }

    /// [`Self::peek_flow`] before the walk reads the code at its IP, so that
    /// the code is read for the time up to the next flow packet (the timing
    /// packets before it raise `hi`). Stops before a PSB whose FUP is not
    /// the walk's IP (also at the segment's end), with `None`: its PSB+ is
    /// read where the walk would read it, so that its FUP is checked in the
    /// trial of each candidate content.
    #[inline(always)]
    pub(super) fn peek_before_fetch(&self, st: &mut State<'a>) -> Result<Option<(usize, Flow)>, Failure> {
        match st.peeked {
            Some(p) => Ok(Some(p)),
            None => self.next_flow::<true>(st),
        }
    }

    /// [`Self::peek_flow`] with nothing peeked yet; with `BEFORE_PSB`,
    /// [`Self::peek_before_fetch`]. The timing packets on the way move
    /// `now`, not `lo` (see `Clock::lo`); a TIP.PGE or a PSB+ moves `lo`
    /// too, since what follows them ran after them, and so does an error.
    #[inline]
    fn next_flow<const BEFORE_PSB: bool>(&self, st: &mut State<'a>) -> Result<Option<(usize, Flow)>, Failure> {
        loop {
            // (`stop_at` is usize::MAX when there is no segment end.)
            if st.packets.offset() >= st.stop_at {
                if BEFORE_PSB {
                    return Ok(None);
                }
                let f = self.segment_end(st);
                st.clock.lo = st.clock.now;
                return Err(f);
            }
            // The common packets without building a `Packet` (the same
            // handling as the arms below).
            if let Some((offset, quick)) = st.packets.dec.next_quick() {
                let flow = match quick {
                    Quick::Tnt { bits, count } => Flow::Tnt { bits, count },
                    Quick::Tip(ip) => Flow::Tip(ip),
                    Quick::TipPgd(ip) => Flow::Pgd(ip),
                    Quick::Fup(ip) => Flow::Fup(ip),
                    Quick::TipPge(ip) => {
                        self.tip_pge(st, ip);
                        st.clock.lo = st.clock.now;
                        continue;
                    }
                    Quick::Tsc(tsc) => {
                        st.clock.tsc(&self.timing, &st.packets, offset, tsc);
                        continue;
                    }
                    Quick::Mtc(payload) => {
                        st.clock.mtc(&self.timing, &st.packets, offset, payload);
                        continue;
                    }
                    Quick::Cyc(cycles) => {
                        st.clock.cyc(&self.timing, cycles);
                        continue;
                    }
                    Quick::Pad => continue,
                };
                st.peeked = Some((offset, flow));
                return Ok(st.peeked);
            }
            let before = BEFORE_PSB.then(|| st.packets.clone());
            let packet = match st.packets.next_packet() {
                Ok(p) => p,
                Err(e) => {
                    st.clock.lo = st.clock.now;
                    return Err(packet_failure(e));
                }
            };
            let Some((offset, packet)) = packet else {
                return Ok(None);
            };
            let flow = match packet {
                Packet::TntShort(t) | Packet::TntLong(t) => Flow::Tnt { bits: t.bits, count: t.count },
                Packet::Tip(ip) => Flow::Tip(ip.ip),
                Packet::TipPgd(ip) => Flow::Pgd(ip.ip),
                Packet::TipPge(ip) => {
                    self.tip_pge(st, ip.ip);
                    st.clock.lo = st.clock.now;
                    continue;
                }
                Packet::Fup(ip) => Flow::Fup(ip.ip),
                Packet::Tsc(tsc) => {
                    st.clock.tsc(&self.timing, &st.packets, offset, tsc);
                    continue;
                }
                Packet::Tma { ctc, fast_counter } => {
                    st.clock.tma(&self.timing, &st.packets, offset, ctc, fast_counter);
                    continue;
                }
                Packet::Mtc(payload) => {
                    st.clock.mtc(&self.timing, &st.packets, offset, payload);
                    continue;
                }
                Packet::Cyc(cycles) => {
                    st.clock.cyc(&self.timing, cycles);
                    continue;
                }
                Packet::Cbr(ratio) => {
                    st.clock.cbr(&self.timing, ratio);
                    continue;
                }
                Packet::Psb => {
                    // At its FUP the walk reads the PSB+ first: what runs
                    // from there ran after it (as a decode starting there
                    // reads it).
                    if let Some(before) = before.filter(|_| psb_fup(st.packets.clone()) != st.ip) {
                        st.packets = before;
                        return Ok(None);
                    }
                    let r = self.psb_plus(st, offset);
                    st.clock.lo = st.clock.now;
                    r?;
                    continue;
                }
                Packet::Ovf => {
                    // CYC packets may be lost with the rest.
                    st.clock.cyc_lost(&self.timing);
                    st.clock.lo = st.clock.now;
                    return Err(Failure { offset, kind: FlowErrorKind::Overflow });
                }
                _ => continue,
            };
            st.peeked = Some((offset, flow));
            return Ok(st.peeked);
        }
    }

    /// A TIP.PGE: tracing (re)starts at `ip`, a flow packet taken.
    #[inline(always)]
    fn tip_pge(&self, st: &mut State<'a>, ip: Option<u64>) {
        st.ip = ip;
        st.walked = 0;
        if st.clock.cyc_pending() {
            st.clock.cyc_taken(&st.packets);
        }
    }
}
