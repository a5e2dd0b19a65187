//! Reading the packets up to the next flow packet (TNT, TIP, TIP.PGD,
//! FUP): the timing packets on the way go to the clock, a TIP.PGE moves
//! the walk, a PSB+ restates where execution is.

use super::event::FlowErrorKind;
use super::psb::psb_fup;
use super::state::{packet_failure, ExecMode, Failure, Flow, State};
use super::walk::Walker;
use crate::decode::Quick;
use crate::Packet;
use codeimage::window::CodeSource;

/// What [`Walker::next_whole`] made of the next packet.
enum Whole {
    /// One of the packets [`Walker::next_flow`] handles, at this offset.
    Quick(usize, Quick),
    /// Handled, or skipped: read on.
    Handled,
    /// Stop reading: `next_flow` gives `None`.
    Stop,
}

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
            // The common packets without building a `Packet`; the others,
            // decoded whole, are handled here or passed on as those.
            let (offset, quick) = match st.packets.dec.next_quick() {
                Some(q) => q,
                None => match self.next_whole::<BEFORE_PSB>(st)? {
                    Whole::Quick(offset, quick) => (offset, quick),
                    Whole::Handled => continue,
                    Whole::Stop => return Ok(None),
                },
            };
            let flow = match quick {
                Quick::Tnt { bits, count } => Flow::Tnt { bits, count },
                Quick::Tip(ip) => Flow::Tip(ip),
                Quick::TipPgd(ip) => Flow::Pgd(ip),
                Quick::Fup(ip) if st.awaiting_fup.is_some() => self.bind_fup(st, ip),
                Quick::Fup(ip) => Flow::Fup(ip),
                Quick::TipPge(ip) => {
                    self.tip_pge(st, ip);
                    st.clock.lo = st.clock.now;
                    continue;
                }
                Quick::Tsc(tsc) => {
                    st.clock.tsc(&self.timing, &st.packets, offset, tsc);
                    if self.timing_events {
                        self.queue_state(st, Packet::Tsc(tsc), false);
                    }
                    continue;
                }
                Quick::Mtc(payload) => {
                    st.clock.mtc(&self.timing, &st.packets, offset, payload);
                    if self.timing_events {
                        self.queue_state(st, Packet::Mtc(payload), false);
                    }
                    continue;
                }
                Quick::Cyc(_) if self.errata.skd007 && st.packets.dec.skd007_cut(offset) => continue,
                Quick::Cyc(cycles) => {
                    st.clock.cyc(&self.timing, cycles);
                    if self.timing_events {
                        self.queue_state(st, Packet::Cyc(cycles), false);
                    }
                    continue;
                }
                Quick::Pad => continue,
            };
            st.peeked = Some((offset, flow));
            return Ok(st.peeked);
        }
    }

    /// The packet [`PacketDecoder::next_quick`] leaves, decoded whole: a
    /// packet only this path handles (TMA, CBR, PSB+, OVF), one of the
    /// [`Quick`] kinds for [`Self::next_flow`] to handle, or another
    /// (skipped). [`Whole::Stop`]: at the end of the trace, or before a
    /// PSB with `BEFORE_PSB` (see [`Self::peek_before_fetch`]). Apart, so
    /// that the walk's loop stays small without it.
    #[cold]
    #[inline(never)]
    fn next_whole<const BEFORE_PSB: bool>(&self, st: &mut State<'a>) -> Result<Whole, Failure> {
        let before = BEFORE_PSB.then(|| st.packets.clone());
        let packet = match st.packets.next_packet() {
            Ok(p) => p,
            Err(e) => {
                st.clock.lo = st.clock.now;
                return Err(packet_failure(e));
            }
        };
        let Some((offset, packet)) = packet else {
            return Ok(Whole::Stop);
        };
        match packet {
            Packet::Tma { ctc, fast_counter } => {
                st.clock.tma(&self.timing, &st.packets, offset, ctc, fast_counter);
                if self.timing_events {
                    self.queue_state(st, packet, false);
                }
            }
            Packet::Cbr(ratio) => {
                st.clock.cbr(&self.timing, ratio);
                self.queue_state(st, packet, false);
            }
            Packet::ModeExec { csl, csd, .. } => {
                st.mode = Some(ExecMode::of(csl, csd));
                self.queue_state(st, packet, false);
            }
            Packet::ModeTsx { .. }
            | Packet::Pip { .. }
            | Packet::Vmcs(_)
            | Packet::Mnt(_)
            | Packet::Ptw { .. }
            | Packet::Exstop { .. }
            | Packet::Mwait { .. }
            | Packet::Pwre { .. }
            | Packet::Pwrx { .. }
            | Packet::Trig { .. }
            | Packet::Stop => self.queue_state(st, packet, false),
            Packet::Evd { event_type, .. } => {
                // Event data of kinds no one event has together.
                let given = st.evd_types | evd_bit(event_type);
                if !EVD_GROUPS.iter().any(|&g| given & !g == 0) {
                    st.evd_types = 0;
                    st.clock.lo = st.clock.now;
                    return Err(Failure { offset, kind: FlowErrorKind::BadContext });
                }
                st.evd_types = given;
                self.queue_state(st, packet, false);
            }
            Packet::Cfe { event_type, .. } => {
                // Event data only of the kinds this event has.
                let given = std::mem::take(&mut st.evd_types);
                if given & !evd_types_of(event_type) != 0 {
                    st.clock.lo = st.clock.now;
                    return Err(Failure { offset, kind: FlowErrorKind::BadContext });
                }
                self.queue_state(st, packet, false);
            }
            Packet::Psb => {
                // At its FUP the walk reads the PSB+ first: what runs
                // from there ran after it (as a decode starting there
                // reads it).
                if let Some(before) = before.filter(|_| psb_fup(st.packets.clone()) != st.ip) {
                    st.packets = before;
                    return Ok(Whole::Stop);
                }
                let r = self.psb_plus(st, offset);
                st.clock.lo = st.clock.now;
                r?;
            }
            Packet::Ovf => {
                st.awaiting_fup = None;
                // CYC packets may be lost with the rest.
                st.clock.cyc_lost(&self.timing);
                st.clock.lo = st.clock.now;
                return Err(Failure { offset, kind: FlowErrorKind::Overflow });
            }
            _ => return Ok(Quick::of(&packet).map_or(Whole::Handled, |quick| Whole::Quick(offset, quick))),
        }
        Ok(Whole::Handled)
    }

    /// A TIP.PGE: tracing (re)starts at `ip`, a flow packet taken.
    #[inline(always)]
    fn tip_pge(&self, st: &mut State<'a>, ip: Option<u64>) {
        if self.state_events {
            self.queue_enabled(st, ip);
        }
        st.ip = ip;
        st.walked = 0;
        if st.clock.cyc_pending() {
            st.clock.cyc_taken(&st.packets);
        }
    }
}

/// The EVD types this decoder knows, a bit each (SDM): the page fault
/// address (0), the VMX exit qualification (1) and reason (2); others are
/// not checked.
fn evd_bit(event_type: u8) -> u8 {
    if event_type < 3 {
        1 << event_type
    } else {
        0
    }
}

/// The EVD types a control flow event takes: an interrupt the page fault
/// address, a VM exit the exit qualification and reason.
const EVD_GROUPS: [u8; 2] = [1 << 0, 1 << 1 | 1 << 2];

/// The EVD types a CFE of `event_type` takes (interrupt: 1; VM exit: 8, 9).
fn evd_types_of(event_type: u8) -> u8 {
    match event_type {
        1 => EVD_GROUPS[0],
        8 | 9 => EVD_GROUPS[1],
        _ => 0,
    }
}
