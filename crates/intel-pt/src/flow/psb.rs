//! PSB+ and where the walk goes on: a PSB+ restates where execution is
//! (checked against the walk when in sync), and after an error the walk
//! resumes at the next TIP, PSB or FUP; a PSB segment's walk ends where it
//! would read the next segment's PSB.

use super::config::Recovery;
use super::event::{FlowErrorKind, FlowEvent, FlowSink};
use super::packets::Packets;
use super::state::{packet_failure, DeadEnd, ExecMode, Failure, Flow, State, DISABLED_AT_BRANCH, SEGMENT_END};
use super::walk::Walker;
use crate::Packet;
use codeimage::window::CodeSource;

impl<'a, C: CodeSource> Walker<'a, C> {
    /// After a failure of the walk: the end of its segment (walking on to
    /// the next segment's start), or an error event and where the walk goes
    /// on from. Whether the run goes on.
    #[cold]
    #[inline(never)]
    pub(super) fn recover(&self, st: &mut State<'a>, f: Failure, base: usize, sink: &mut impl FlowSink) -> bool {
        if f.offset == SEGMENT_END {
            if let Some(to) = st.tail_to.take() {
                self.walk_tail(st, to, base, sink);
            }
            return false;
        }
        // Missing code on the way to a PSB+'s FUP: the walk goes on there.
        let dead_end = st.dead_end.take().filter(|d| is_dead_end(st, d, &f));
        if !st.events.is_empty() && !self.keeps_bound(st, &f, sink) {
            if f.kind == FlowErrorKind::Overflow {
                // What waited for a FUP the overflow took goes after the
                // rest (an MWAIT waits with the EXSTOP after it).
                let exstop = st.events.iter().any(|e| matches!(e, FlowEvent::State { packet: Packet::Exstop { ip: true }, .. }));
                st.events.sort_by_key(|e| match e {
                    FlowEvent::State { ip: None, packet: Packet::Mwait { .. }, .. } => exstop,
                    FlowEvent::State { ip: None, packet, restated: false, .. } => super::report::wants_fup(packet),
                    _ => false,
                });
            }
            self.flush(st, sink, true);
        }
        if f.offset == DISABLED_AT_BRANCH {
            // A TIP.PGD where the branch at `st.ip` needed a TNT: tracing
            // stopped after it.
            sink.event(FlowEvent::End { time: st.clock.lo, at: None, disabled: true, to: st.pgd_ip, insn: None });
            st.ip = None;
            st.walked = 0;
            return true;
        }
        // (A packet out of context is the packets' error, at no instruction.)
        let ip = st.ip.filter(|_| f.kind != FlowErrorKind::BadContext);
        let error = FlowEvent::Error { offset: base + f.offset, time: st.clock.lo, ip, kind: f.kind };
        if f.kind == FlowErrorKind::Overflow && self.state_events && self.resumes_at_fup(st) {
            st.overflow = Some(error);
            st.pending = true;
        } else {
            sink.event(error);
        }
        // State packets that waited for an instruction the walk did not
        // reach (a PIP for a MOV to CR3) belong to where it lost its way.
        st.held.clear();
        st.pending = st.any_pending();
        if f.kind == FlowErrorKind::EndOfTrace {
            return false;
        }
        if f.kind == FlowErrorKind::Overflow {
            // The packets go on: tracing resumes at the FUP that
            // follows (or a TIP.PGE, or a PSB+), as the SDM says
            // and libipt and perf do. What was pending is lost, and
            // so may be MODE.Exec packets.
            st.ip = None;
            st.mode = None;
            st.tnt_count = 0;
            st.stack.clear();
            st.peeked = None;
            st.walked = 0;
            st.after_ovf = true;
            st.after_error = false;
            st.awaiting_fup = None;
            return true;
        }
        if let Some(d) = dead_end.filter(|_| self.recovery != Recovery::NextPsb) {
            // The next IP the trace gives is the PSB+'s FUP, read already
            // (and the flow packet after it, peeked).
            st.ip = Some(d.fup);
            st.resumed_at = Some(d.fup);
            st.stack.clear();
            st.walked = 0;
            return true;
        }
        // A PSB+ whose status the walk did not have says where execution
        // is: the walk goes on from there (a segment's run ends at its
        // next PSB). With libipt's recoveries another execution mode
        // stops the decode until the next PSB: its resync meets the same
        // status again.
        let psb_fup = match f.kind {
            FlowErrorKind::PsbMismatch { fup } => Some(fup),
            FlowErrorKind::ModeMismatch { fup } if self.recovery == Recovery::NextTip => Some(fup),
            _ => None,
        };
        if let Some(fup) = psb_fup {
            if f.offset >= st.stop_at {
                return false;
            }
            st.ip = fup;
            st.resumed_at = fup;
            st.peeked = None;
            st.walked = 0;
            return true;
        }
        // The walk and the trace disagree, but the packets are
        // whole: the next TIP (or TIP.PGE, or PSB+) says where
        // execution went, as perf resumes. A bad packet needs
        // the next PSB to find packets again; so does no code
        // where the walk had just resumed (a TIP's target, a
        // PSB+'s FUP): the last IP that compressed IPs build on
        // is bad too. A never-ending loop waits for the next PSB too, as
        // perf does: the next TIP would most likely lead into it again.
        let resumed_into_nothing = matches!(f.kind, FlowErrorKind::Unmapped | FlowErrorKind::BadInsn) && st.ip.is_some() && st.ip == st.resumed_at;
        st.resumed_at = None;
        let wait_for_psb =
            matches!(f.kind, FlowErrorKind::Packet(_) | FlowErrorKind::BadContext | FlowErrorKind::NoProgress | FlowErrorKind::ModeMismatch { .. });
        let at_tip = match self.recovery {
            Recovery::NextTip => !resumed_into_nothing,
            Recovery::EachTip => true,
            Recovery::NextPsb => false,
        };
        if at_tip && !wait_for_psb {
            st.ip = None;
            st.tnt_count = 0;
            st.stack.clear();
            st.walked = 0;
            st.after_error = true;
            return true;
        }
        let resync = st.packets.sync_forward();
        st.ip = None;
        st.mode = None;
        st.tnt_count = 0;
        st.stack.clear();
        st.peeked = None;
        // The walk starts afresh: a NoProgress count carried over
        // would fail the next PSB segment at its first instruction.
        st.walked = 0;
        if !resync.psb_found || resync.end >= st.stop_at {
            return false;
        }
        true
    }

    /// Whether the events of state packets wait past the error `f` for
    /// their FUP, the next flow packet, where the walk resumes; if so, the
    /// others go out now.
    #[cold]
    fn keeps_bound(&self, st: &mut State<'a>, f: &Failure, sink: &mut impl FlowSink) -> bool {
        let resumes =
            self.recovery != Recovery::NextPsb && !matches!(f.kind, FlowErrorKind::Packet(_) | FlowErrorKind::Overflow | FlowErrorKind::EndOfTrace);
        if !resumes || !matches!(st.peeked, Some((_, Flow::Bind { ip: Some(_), .. }))) {
            return false;
        }
        let waits = |e: &FlowEvent| matches!(e, FlowEvent::State { packet, restated: false, .. } if super::report::wants_fup(packet));
        for e in st.events.iter().filter(|e| !waits(e)) {
            sink.event(*e);
        }
        st.events.retain(waits);
        st.ready = 0;
        true
    }

    /// PSB+: status up to PSBEND. Its FUP is where execution is: a walk not
    /// in sync starts there; a walk in sync must reach it before it needs a
    /// packet (the processor sends pending TNT bits before a PSB, and the walk
    /// reads packets only once it has used up those it holds), else the
    /// trace and the walk disagree ([`FlowErrorKind::PsbMismatch`]) — unless
    /// the code on the way runs out first: then the trace is not at fault,
    /// the walk goes on to where the code is missing and fails there, as
    /// libipt's does ([`DeadEnd`]). Its MODE.Exec restates the execution
    /// mode: another than the trace gave is an error too
    /// ([`FlowErrorKind::ModeMismatch`], libipt's bad status update).
    /// Returns the FUP's IP.
    pub(super) fn psb_plus(&self, st: &mut State<'a>, psb_at: usize) -> Result<Option<u64>, Failure> {
        // What runs up to the FUP ran before the PSB's own TSC.
        let (lo, hi) = (st.clock.now, st.clock.hi);
        st.tnt_count = 0;
        // No RET is compressed whose CALL came before a PSB (SDM).
        st.stack.clear();
        let mut fup = None;
        let mut restated = None;
        // A PSB segment decodes on its own: CYC timing starts again from
        // its TSC (the cycle count goes on across it, but the count of
        // the last CYC before it is not known to a decoder starting here).
        st.clock.cyc_lost(&self.timing);
        if self.timing_events {
            self.queue_state(st, Packet::Psb, true);
        }
        let psbend = loop {
            let Some((offset, packet)) = st.packets.next_packet().map_err(packet_failure)? else {
                // Cut short: no PSBEND to say the status is complete.
                st.ip = st.ip.or(fup);
                return Ok(fup);
            };
            match packet {
                Packet::PsbEnd => break offset,
                Packet::Cyc(_) if self.errata.skd007 && st.packets.dec.skd007_cut(offset) => {}
                Packet::Tsc(_) | Packet::Tma { .. } | Packet::Mtc(_) | Packet::Cbr(_) | Packet::Cyc(_) => {
                    self.psb_timing(st, offset, packet);
                    if self.timing_events {
                        self.queue_state(st, packet, true);
                    }
                }
                Packet::Fup(ip) if ip.ip.is_some() => fup = ip.ip,
                Packet::Ovf => return Err(Failure { offset, kind: FlowErrorKind::Overflow }),
                Packet::ModeExec { csl, csd, .. } => {
                    restated = Some((offset, ExecMode::of(csl, csd)));
                    self.queue_state(st, packet, true);
                }
                Packet::ModeTsx { .. } | Packet::Pip { .. } | Packet::Vmcs(_) => self.queue_state(st, packet, true),
                // (Not state a PSB+ restates: an event of its own.)
                Packet::Mnt(_) => {
                    self.queue_state(st, packet, false);
                    st.ready = st.events.len();
                }
                _ => {}
            }
        };
        let walked = st.mode;
        if let Some((_, mode)) = restated {
            st.mode = Some(mode);
        }
        st.dead_end = None;
        let mut dead_end = None;
        match (st.ip, fup) {
            (None, _) => {
                st.ip = fup;
                return Ok(fup);
            }
            (Some(at), Some(to)) => {
                let tried = st.tried.filter(|t| t.0 == at).map(|t| t.1);
                if !self.reaches(at, to, lo, hi, tried) {
                    let Some(end) = self.dead_end(at, lo, hi, tried) else {
                        return Err(Failure { offset: psb_at, kind: FlowErrorKind::PsbMismatch { fup } });
                    };
                    dead_end = Some(DeadEnd { at: end, psbend, fup: to });
                }
            }
            (Some(_), None) => return Err(Failure { offset: psb_at, kind: FlowErrorKind::PsbMismatch { fup } }),
        }
        if let (Some(was), Some((offset, mode))) = (walked, restated) {
            if was != mode {
                return Err(Failure { offset, kind: FlowErrorKind::ModeMismatch { fup } });
            }
        }
        st.dead_end = dead_end;
        Ok(fup)
    }
    /// A timing packet of a PSB+, to the clock.
    fn psb_timing(&self, st: &mut State<'a>, offset: usize, packet: Packet) {
        match packet {
            Packet::Tsc(tsc) => st.clock.tsc(&self.timing, &st.packets, offset, tsc),
            Packet::Tma { ctc, fast_counter } => st.clock.tma(&self.timing, &st.packets, offset, ctc, fast_counter),
            Packet::Mtc(payload) => st.clock.mtc(&self.timing, &st.packets, offset, payload),
            Packet::Cbr(ratio) => st.clock.cbr(&self.timing, ratio),
            Packet::Cyc(cycles) => st.clock.cyc(&self.timing, cycles),
            _ => {}
        }
    }

    /// After an overflow: whether tracing resumes at the FUP that follows
    /// (not when APL12 makes that FUP one of tracing that stays off).
    #[cold]
    fn resumes_at_fup(&self, st: &State<'a>) -> bool {
        let mut after = st.clone();
        fup_next(&mut after.packets) && !(self.errata.apl12 && self.tracing_stays_off(&after))
    }

    /// Whether the next flow packet says tracing is off: a TIP.PGE, or a
    /// PSB+ without a FUP.
    #[cold]
    pub(super) fn tracing_stays_off(&self, st: &State<'a>) -> bool {
        let mut dec = st.packets.clone();
        loop {
            match dec.next_packet() {
                Ok(Some((_, Packet::TipPge(_)))) => return true,
                Ok(Some((_, Packet::Psb))) => return psb_fup(dec).is_none(),
                Ok(Some((_, Packet::TntShort(_) | Packet::TntLong(_) | Packet::Tip(_) | Packet::TipPgd(_) | Packet::Fup(_)))) => return false,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return false,
            }
        }
    }

    /// Where a segment's walk reads the next segment's PSB: the end of its
    /// run. A walk in sync checks that PSB+'s FUP first, as the walk over
    /// the whole buffer does there, so that both report the same; and when
    /// the FUP is ahead, the run walks up to it ([`Self::walk_tail`]).
    #[cold]
    pub(super) fn segment_end(&self, st: &mut State<'a>) -> Failure {
        let end = Failure { offset: SEGMENT_END, kind: FlowErrorKind::EndOfTrace };
        let Some(at) = st.ip else { return end };
        let Ok(Some((offset, Packet::Psb))) = st.packets.next_packet() else { return end };
        match self.psb_plus(st, offset) {
            Err(f @ Failure { kind: FlowErrorKind::PsbMismatch { .. } | FlowErrorKind::ModeMismatch { .. }, .. }) => f,
            Err(_) => end,
            Ok(fup) => {
                st.tail_to = fup.filter(|&to| to != at);
                end
            }
        }
    }

    /// A segment's last instructions: from where its walk read the next
    /// segment's PSB up to that PSB+'s FUP, `to` (reached without a packet),
    /// where the next segment starts; or up to missing code on the way
    /// ([`DeadEnd`]), reported as the walk over the whole buffer reports it
    /// (`base`: where `st`'s packets are in the whole trace). Stops early
    /// at anything else.
    #[cold]
    pub(super) fn walk_tail(&self, st: &mut State<'a>, to: u64, base: usize, sink: &mut impl FlowSink) {
        st.stop_at = usize::MAX;
        for _ in 0..self.cfg.max_walk {
            if st.ip == Some(to) {
                break;
            }
            match self.step(st, sink, false) {
                Ok(true) if st.peeked.is_some() => {}
                Err(f) if st.dead_end.is_some_and(|d| is_dead_end(st, &d, &f)) => {
                    if !st.events.is_empty() {
                        self.flush(st, sink, true);
                    }
                    sink.event(FlowEvent::Error { offset: base + f.offset, time: st.clock.lo, ip: st.ip, kind: f.kind });
                    break;
                }
                _ => break,
            }
        }
        st.dead_end = None;
    }
}

/// Whether the failure `f` is the walk running out of code at `d`.
fn is_dead_end(st: &State<'_>, d: &DeadEnd, f: &Failure) -> bool {
    matches!(f.kind, FlowErrorKind::Unmapped | FlowErrorKind::BadInsn) && st.ip == Some(d.at)
}

/// The IP of the FUP in the PSB+ whose PSB `dec` has just read (`None`
/// without one, or at a bad packet before its PSBEND).
#[cold]
pub(super) fn psb_fup(mut dec: Packets<'_>) -> Option<u64> {
    let mut fup = None;
    loop {
        match dec.next_packet() {
            Ok(Some((_, Packet::PsbEnd))) => return fup,
            Ok(Some((_, Packet::Fup(ip)))) => fup = ip.ip.or(fup),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return None,
        }
    }
}

/// Whether the next flow packet `dec` reads is a FUP (after an overflow:
/// tracing resumes there, and the overflow is reported there).
#[cold]
fn fup_next(dec: &mut Packets<'_>) -> bool {
    loop {
        match dec.next_packet() {
            Ok(Some((_, Packet::Fup(_)))) => return true,
            Ok(Some((
                _,
                Packet::TipPge(_) | Packet::TipPgd(_) | Packet::Tip(_) | Packet::TntShort(_) | Packet::TntLong(_) | Packet::Psb | Packet::Ovf,
            ))) => return false,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return false,
        }
    }
}
