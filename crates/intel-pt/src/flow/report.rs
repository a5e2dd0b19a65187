//! The events of state packets and TIP.PGEs (with state events on): queued
//! as the packets are read ahead of the walk, and handed to the sink where
//! they fall among the instructions: after the instruction that takes the
//! flow packet they come before, or at the FUP they are bound to.

use isa::{BranchClass, Insn};

use super::event::{FlowEvent, FlowSink};
use super::state::{Flow, State};
use super::walk::Walker;
use crate::Packet;
use codeimage::window::CodeSource;

impl<'a, C: CodeSource> Walker<'a, C> {
    /// A state packet read ahead of the walk (at `restated`: in a PSB+).
    #[cold]
    pub(super) fn queue_state(&self, st: &mut State<'a>, packet: Packet, restated: bool) {
        if !self.state_events {
            return;
        }
        let binds = wants_fup(&packet).then_some(match packet {
            // An IRET, VM entry or UIRET is the instruction at the FUP, which
            // runs (its TIP is its target): no asynchronous event.
            Packet::Cfe { event_type, .. } => !matches!(event_type, 2 | 7 | 13),
            _ => matches!(packet, Packet::ModeTsx { .. } | Packet::ModeExec { .. }),
        });
        if !restated {
            if let Some(shared) = binds {
                st.awaiting_fup = Some(st.awaiting_fup.unwrap_or(false) || shared);
            }
        }
        st.pending = true;
        let event = FlowEvent::State { time: st.clock.now, ip: None, packet, restated };
        if let (Packet::Trig { ip: false, icnt: Some(n), .. }, Some(_)) = (packet, st.ip) {
            st.counted.push((n, event));
            return;
        }
        let to_insn = matches!(packet, Packet::Ptw { ip: false, .. }) || matches!(packet, Packet::Pip { .. } | Packet::Vmcs(_)) && st.ip.is_some();
        if to_insn && !restated {
            st.held.push(event);
            return;
        }
        if let Packet::Exstop { ip: false } = packet {
            // The power entry before it is reported after it (as libipt
            // reports a PWRE after the EXSTOP of its session).
            let pwre = |e: &FlowEvent| matches!(e, FlowEvent::State { packet: Packet::Pwre { .. }, .. });
            if let Some(at) = st.events[st.ready..].iter().position(pwre) {
                st.events.insert(st.ready + at, event);
                return;
            }
        }
        st.events.push(event);
        if restated {
            st.ready = st.events.len();
        }
    }

    /// A FUP while state packets wait for one: it gives them its IP.
    #[cold]
    pub(super) fn bind_fup(&self, st: &mut State<'a>, ip: Option<u64>) -> Flow {
        let shared = st.awaiting_fup.take().unwrap_or(false);
        for e in st.events.iter_mut().skip(st.ready) {
            if let FlowEvent::State { ip: at @ None, restated: false, packet, .. } = e {
                if wants_fup(packet) {
                    *at = ip;
                }
            }
        }
        let after = st.events[st.ready..].iter().any(|e| matches!(e, FlowEvent::State { packet: Packet::Cfe { event_type: 2 | 7 | 13, .. }, .. }));
        if self.errata.bdm64 && st.walked == 0 {
            self.bdm64(st, ip);
        }
        Flow::Bind { ip, shared, after }
    }

    /// BDM64: right after a transaction aborts, the packet of the branch
    /// before the abort may name a wrong target. When the abort's FUP, `to`,
    /// cannot be reached without a packet from where that branch took the
    /// walk, the branch is taken to have gone there.
    fn bdm64(&self, st: &mut State<'a>, to: Option<u64>) {
        let abort = |e: &FlowEvent| matches!(e, FlowEvent::State { packet: Packet::ModeTsx { abort: true, .. }, .. });
        let (Some(at), Some(to)) = (st.ip, to) else { return };
        if st.events[st.ready..].iter().any(abort) && !self.reaches(at, to, st.clock.lo, st.clock.hi, None) {
            st.ip = Some(to);
        }
    }

    /// A TIP.PGE at `ip`: tracing starts there. Its event goes before the
    /// MODE.Exec that came with it (which takes its IP), after the rest;
    /// after an error, a disable goes before it.
    #[cold]
    pub(super) fn queue_enabled(&self, st: &mut State<'a>, ip: Option<u64>) {
        let (Some(ip), true) = (ip, self.state_events) else { return };
        let resumed = st.last_disable.take() == Some(ip);
        let mut at = st.events.len();
        while at > st.ready && matches!(st.events[at - 1], FlowEvent::State { packet: Packet::ModeExec { .. }, .. }) {
            at -= 1;
        }
        for e in &mut st.events[at..] {
            if let FlowEvent::State { ip: pending, .. } = e {
                *pending = Some(ip);
            }
        }
        st.awaiting_fup = None;
        st.events.insert(at, FlowEvent::Enabled { time: st.clock.now, ip, resumed });
        if st.after_error {
            // Waiting for a TIP after an error, tracing counts as on (as
            // libipt resyncs): a TIP.PGE says it was off first.
            st.events.insert(at, FlowEvent::End { time: st.clock.now, at: None, disabled: true, to: None, insn: None });
        }
        st.pending = true;
        st.ready = st.events.len();
    }

    /// Hands the queued events that may go now to `sink`: those before a
    /// flow packet the walk has taken (`all`: every one, at the end).
    #[cold]
    #[inline(never)]
    pub(super) fn flush(&self, st: &mut State<'a>, sink: &mut impl FlowSink, all: bool) {
        if st.overflow.is_some() && (all || st.ip.is_some()) {
            self.report_overflow(st, sink);
        }
        let caught_up = all || st.peeked.is_none();
        let n = if caught_up { st.events.len() } else { st.ready };
        for e in st.events.drain(..n) {
            sink.event(e);
        }
        if caught_up && self.timing_events {
            sink.caught_up();
        }
        st.ready = 0;
        if all {
            for e in st.held.drain(..) {
                sink.event(e);
            }
            for (_, e) in st.counted.drain(..) {
                sink.event(e);
            }
        } else {
            self.release_counted(st, sink);
        }
        st.pending = st.any_pending();
    }

    /// Tracing resumed after an overflow: the state packets read since
    /// that need no IP, then the overflow.
    #[cold]
    fn report_overflow(&self, st: &mut State<'a>, sink: &mut impl FlowSink) {
        let free = |e: &FlowEvent| matches!(e, FlowEvent::State { ip: None, packet, restated: false, .. } if !wants_fup(packet));
        let n = st.events.iter().take_while(|e| free(e)).count();
        for e in st.events.drain(..n) {
            sink.event(e);
        }
        st.ready = st.ready.saturating_sub(n);
        if let Some(e) = st.overflow.take() {
            sink.event(e);
        }
    }

    /// The counted TRIGs whose count has run out, at the walk's IP.
    #[cold]
    #[inline(never)]
    pub(super) fn release_counted(&self, st: &mut State<'a>, sink: &mut impl FlowSink) {
        let due = st.counted.iter().take_while(|c| c.0 == 0).count();
        for (_, mut e) in st.counted.drain(..due) {
            if let FlowEvent::State { ip, .. } = &mut e {
                *ip = st.ip;
            }
            sink.event(e);
        }
        st.pending = st.any_pending();
    }

    /// After an instruction ran: one less to count for the next counted
    /// TRIG; those due go out.
    #[cold]
    #[inline(never)]
    pub(super) fn count_insn(&self, st: &mut State<'a>, sink: &mut impl FlowSink, trial: bool) {
        if let Some(first) = st.counted.first_mut() {
            first.0 = first.0.saturating_sub(1);
        }
        if !trial {
            self.release_counted(st, sink);
        }
    }

    /// At the FUP at `ip` that state packets are bound to: those with its
    /// IP first, then those read up to the next flow packet that need no
    /// IP (as libipt reports them); those bound to a later FUP stay.
    #[cold]
    #[inline(never)]
    pub(super) fn flush_bound(&self, st: &mut State<'a>, ip: u64, sink: &mut impl FlowSink) {
        let bound = |e: &FlowEvent| matches!(e, FlowEvent::State { ip: Some(at), restated: false, .. } if *at == ip);
        let free = |e: &FlowEvent| match e {
            FlowEvent::State { ip: None, packet, .. } => !wants_fup(packet),
            FlowEvent::State { .. } => false,
            _ => true,
        };
        // Those read before the first bound one that wait for no later FUP
        // (a PSB+'s restated state, events of their own, EVD data for a
        // bound event) go before it, as libipt reads them; but a PWRE goes
        // after the EXSTOP of its session, with the rest.
        let waits = |e: &FlowEvent| match e {
            FlowEvent::State { packet: Packet::Pwre { .. }, .. } => true,
            FlowEvent::State { ip: None, packet, restated: false, .. } => wants_fup(packet),
            _ => false,
        };
        let first = st.events.iter().position(bound).unwrap_or(st.events.len());
        let leading = |i: usize, e: &FlowEvent| i < first && !waits(e);
        for (i, e) in st.events.iter().enumerate() {
            if leading(i, e) {
                sink.event(*e);
            }
        }
        for e in st.events.iter().filter(|e| bound(e)) {
            sink.event(*e);
        }
        for (i, e) in st.events.iter().enumerate() {
            if !leading(i, e) && !bound(e) && free(e) {
                sink.event(*e);
            }
        }
        let mut i = 0;
        st.events.retain(|e| {
            let keep = !leading(i, e) && !bound(e) && !free(e);
            i += 1;
            keep
        });
        st.ready = 0;
        st.pending = st.any_pending();
    }

    /// After `insn` at `ip` ran (`None`: after an asynchronous event): the
    /// held state packets it is the instruction of. A PIP or VMCS goes with
    /// a MOV to CR3, a far transfer or an asynchronous event (the VMCS
    /// first, as libipt reports them); a PTWRITE without IP with a PTWRITE.
    #[cold]
    #[inline(never)]
    pub(super) fn release_held(&self, st: &mut State<'a>, at: Option<(u64, &Insn)>, sink: &mut impl FlowSink) {
        let context = match at {
            None => true,
            Some((ip, insn)) => insn.class == BranchClass::FarTransfer || self.is_cr3_write(st, ip, insn),
        };
        let ptwrite = at.is_some_and(|(ip, _)| self.is_ptwrite(st, ip));
        // A MOV to CR3 takes one PIP; a far transfer or an event all.
        let all = at.is_none_or(|(_, insn)| insn.class == BranchClass::FarTransfer);
        let mut released: Vec<FlowEvent> = Vec::new();
        let (mut ptw_done, mut pip_done) = (false, false);
        st.held.retain(|e| {
            let go = match e {
                FlowEvent::State { packet: Packet::Pip { .. } | Packet::Vmcs(_), .. } if context && (all || !pip_done) => {
                    pip_done = true;
                    true
                }
                FlowEvent::State { packet: Packet::Ptw { .. }, .. } if ptwrite && !ptw_done => {
                    ptw_done = true;
                    true
                }
                _ => false,
            };
            if go {
                released.push(*e);
            }
            !go
        });
        released.sort_by_key(|e| !matches!(e, FlowEvent::State { packet: Packet::Vmcs(_), .. }));
        for e in released {
            sink.event(e);
        }
        st.pending = st.any_pending();
    }
}

/// Whether a state packet gets its IP from the FUP that follows it.
pub(super) fn wants_fup(packet: &Packet) -> bool {
    matches!(
        packet,
        Packet::ModeTsx { .. }
            | Packet::ModeExec { .. }
            | Packet::Ptw { ip: true, .. }
            | Packet::Exstop { ip: true }
            | Packet::Mwait { .. }
            | Packet::Cfe { ip: true, .. }
            | Packet::Trig { ip: true, .. }
    )
}
