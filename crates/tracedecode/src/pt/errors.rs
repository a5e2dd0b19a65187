//! The sink for `--itrace=e` (and for no lines at all): decode errors as
//! lines, cached blocks passed over untouched.

use intel_pt::flow::{FlowEvent, FlowSink, InsnBlock};

use super::error_code::perf_error_code;
use crate::lanes::{Lanes, BATCH};
use crate::line::{Kind, Out};

/// One CPU's decode errors as lines, of a whole buffer or of one of its
/// PSB segments (errors need no state from before). Made whether printed
/// or not (`Itrace::errors`): they are counted.
pub(super) struct ErrorLines<'a> {
    queue: usize,
    cpu: u32,
    lines: Vec<Out>,
    /// Where full batches of a whole buffer's lines go; a segment keeps its own.
    lanes: Option<&'a Lanes>,
}

impl<'a> ErrorLines<'a> {
    pub(super) fn new(queue: usize, cpu: u32, lanes: Option<&'a Lanes>) -> Self {
        ErrorLines { queue, cpu, lines: Vec::new(), lanes }
    }

    /// Hands the last lines to `lanes`, at the end of the buffer or segment.
    pub(super) fn finish(&mut self, lanes: &Lanes) {
        let last = std::mem::take(&mut self.lines);
        if !last.is_empty() {
            lanes.send(self.queue, last);
        }
    }
}

impl FlowSink for ErrorLines<'_> {
    #[inline(always)]
    fn block(&mut self, _: InsnBlock<'_>) {}

    #[inline(always)]
    fn event(&mut self, e: FlowEvent) {
        if let FlowEvent::Error { offset, time, ip, kind } = e {
            let kind = Kind::Error { offset, ip, code: perf_error_code(&kind), reason: kind.describe() };
            self.lines.push(Out { time, queue: self.queue, cpu: self.cpu, kind });
            if let (true, Some(lanes)) = (self.lines.len() >= BATCH, self.lanes) {
                lanes.send(self.queue, std::mem::take(&mut self.lines));
            }
        }
    }
}
