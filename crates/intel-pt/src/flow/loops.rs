//! Never-ending loops: code that loops without needing a packet (a `jmp .`
//! where the trace says nothing ran, reached by a wrong IP or over code
//! other than what ran) is no execution a trace can describe. Like perf's
//! "Never-ending loop" check (its `intel-pt.max-loops`), the walk gives up
//! on it with one error and waits for the next PSB.
//!
//! Free in the hot loop: the walk compares the instructions walked since
//! the last packet with [`Walker::loop_from`] as it always did with its
//! limit; only past that does it step an instruction at a time and look
//! for a repeated position (Brent's cycle finding: a mark, moved each time
//! the walk since it has doubled), so a loop of any length is found within
//! a few times its length, and `max_walk` still bounds the rest.

use super::event::FlowErrorKind;
use super::state::{Failure, Position, State};
use super::walk::Walker;
use codeimage::window::CodeSource;

impl<'a, C: CodeSource> Walker<'a, C> {
    /// At `ip`, `st.walked` instructions past the last packet (more than
    /// `loop_from`): an error when that passes `max_walk` or the walk is
    /// back where it was at the mark since the last packet.
    #[cold]
    #[inline(never)]
    pub(super) fn check_loop(&self, st: &mut State<'a>, ip: u64) -> Result<(), Failure> {
        let never_ending = Failure { offset: st.packets.offset(), kind: FlowErrorKind::NoProgress };
        if st.walked > self.cfg.max_walk {
            return Err(never_ending);
        }
        let here: Position = (ip, st.packets.offset(), st.tnt_count);
        let (mark, at) = st.loop_mark;
        // A mark of this run of the walk: set at an earlier instruction
        // with the same packets ahead.
        let same_run = mark.1 == here.1 && mark.2 == here.2 && at < st.walked;
        if same_run && mark == here {
            return Err(never_ending);
        }
        if !same_run || st.walked >= 2 * at {
            st.loop_mark = (here, st.walked);
        }
        Ok(())
    }
}
