//! Where the walk's instruction does not simply run: an asynchronous event
//! at its IP (FUP, then a TIP into a handler or a TIP.PGD), and the end of
//! tracing before its code is read (a TIP.PGD at its IP, or the end of the
//! trace).

use super::event::{EventInsn, FlowEvent, FlowSink};
use super::state::{Failure, Flow, State};
use super::walk::{Decoded, Walker};
use codeimage::window::CodeSource;

impl<'a, C: CodeSource> Walker<'a, C> {
    /// A FUP at `ip`, taken: with a TIP after it, an event into a handler
    /// ([`FlowEvent::Trap`]); with a TIP.PGD, tracing stops here.
    pub(super) fn async_event(&self, st: &mut State<'a>, ip: u64, d: Decoded, sink: &mut impl FlowSink, trial: bool) -> Result<bool, Failure> {
        let Decoded { insn, uncertain, code } = d;
        let to = self.take_tip::<false>(st)?;
        if to.is_none() && self.errata.skd022 && self.is_vm_entry(st, ip) {
            // SKD022: the VM entry ran; tracing stopped after it.
            if !trial {
                sink.event(FlowEvent::Insn { ip, len: insn.len, class: insn.class, lo: st.clock.lo, hi: st.clock.hi, uncertain, code });
                self.flush(st, sink, false);
                sink.event(FlowEvent::End { time: st.clock.lo, at: None, disabled: true, to: st.pgd_ip, insn: None });
            }
            st.last_disable = None;
            st.ip = None;
            return Ok(true);
        }
        if !trial {
            if !st.events.is_empty() {
                self.flush(st, sink, false);
            }
            sink.event(match to {
                Some(to) => FlowEvent::Trap { from: ip, to, time: st.clock.lo, insn: Some(EventInsn { len: insn.len, code }) },
                None => {
                    FlowEvent::End { time: st.clock.lo, at: Some(ip), disabled: true, to: st.pgd_ip, insn: Some(EventInsn { len: insn.len, code }) }
                }
            });
            if !st.held.is_empty() {
                self.release_held(st, None, sink);
            }
        }
        if to.is_none() {
            st.last_disable = Some(ip);
        }
        st.ip = to;
        Ok(true)
    }

    /// The peeked TIP.PGD names `ip`, where the walk is: tracing stops
    /// there, before its code is read (the code may not be there).
    pub(super) fn disabled_at(&self, st: &mut State<'a>, ip: u64, sink: &mut impl FlowSink, trial: bool) {
        st.take_peeked();
        st.walked = 0;
        if !trial {
            if !st.events.is_empty() {
                self.flush(st, sink, false);
            }
            sink.event(FlowEvent::End { time: st.clock.lo, at: Some(ip), disabled: true, to: Some(ip), insn: None });
        }
        st.last_disable = Some(ip);
        st.ip = None;
    }

    /// Before the code at `ip` is read: tracing ends there when the next
    /// flow packet is a TIP.PGD at `ip` (its code may not be there: a branch
    /// left the traced code) or the trace ends. If so, whether the run goes on.
    pub(super) fn ends_before_fetch(
        &self,
        st: &mut State<'a>,
        ip: u64,
        peeked: Option<(usize, Flow)>,
        sink: &mut impl FlowSink,
        trial: bool,
    ) -> Option<bool> {
        match peeked {
            Some((_, Flow::Pgd(Some(f)))) if f == ip => {
                self.disabled_at(st, ip, sink, trial);
                Some(true)
            }
            // (State packets waiting for an instruction keep the walk going.)
            None if st.held.is_empty() && self.at_trace_end(st) => {
                if !trial {
                    if !st.events.is_empty() {
                        self.flush(st, sink, true);
                    }
                    sink.event(FlowEvent::End { time: st.clock.lo, at: Some(ip), disabled: false, to: None, insn: None });
                }
                Some(false)
            }
            _ => None,
        }
    }

    /// After an error, the FUP at `from` just taken: with a TIP after it,
    /// an asynchronous event that says where execution went
    /// ([`FlowEvent::Trap`]), where the walk resumes, as libipt takes it;
    /// else the FUP alone is dropped.
    #[cold]
    pub(super) fn resume_at_event(&self, st: &mut State<'a>, from: u64, sink: &mut impl FlowSink, trial: bool) -> Result<bool, Failure> {
        let Some((_, Flow::Tip(Some(to)))) = self.peek_flow(st)? else { return Ok(true) };
        st.take_peeked();
        if !trial {
            if !st.events.is_empty() {
                self.flush(st, sink, false);
            }
            sink.event(FlowEvent::Trap { from, to, time: st.clock.lo, insn: None });
        }
        st.after_error = false;
        st.resumed_at = Some(to);
        st.ip = Some(to);
        Ok(true)
    }

    /// Whether no packet is left to read.
    pub(super) fn at_trace_end(&self, st: &State<'a>) -> bool {
        st.peeked.is_none() && st.packets.offset() < st.stop_at && matches!(st.packets.dec.clone().skip_packet(), Ok(None))
    }
}
