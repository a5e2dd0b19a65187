//! A PSB segment's events kept until its turn to be handed out in trace
//! order: its cached blocks as copies of their entries, not an event per
//! instruction.

use crate::blocks::Block;
use crate::flow::{FlowEvent, FlowSink, InsnBlock, Time};

/// One segment's output, kept until its turn to be handed out: the cache
/// entries of its blocks, copied whole (one aligned 64-byte write), the
/// times they ran at where those change, and apart from them its other
/// events; times and events with how many blocks came before them.
pub(super) struct Recording {
    blocks: Vec<Block>,
    times: Vec<(usize, (Time, Time, Time))>,
    /// The last of `times`, or [`NO_TIME`].
    time: (Time, Time, Time),
    events: Vec<(usize, FlowEvent)>,
    /// The instruction bytes of the blocks whose entries do not hold them.
    lens: Vec<u8>,
    /// Those blocks' inner jumps' and calls' targets.
    targets: Vec<u64>,
}

/// No `(lo, last_lo, hi)` a block runs in (`hi` is never below `lo`).
const NO_TIME: (Time, Time, Time) = (Time::MAX, Time::MAX, 0);

impl Default for Recording {
    fn default() -> Self {
        Recording { blocks: Vec::new(), times: Vec::new(), time: NO_TIME, events: Vec::new(), lens: Vec::new(), targets: Vec::new() }
    }
}

impl FlowSink for Recording {
    fn event(&mut self, e: FlowEvent) {
        self.events.push((self.blocks.len(), e));
    }

    #[inline(always)]
    fn block(&mut self, b: InsnBlock<'_>) {
        let (entry, lens, targets) = b.parts();
        if entry.inline() {
            self.record_time((b.lo, b.last_lo, b.hi));
            // (Copied in place: `push(*entry)` moves it through the stack.)
            self.blocks.extend_from_slice(std::slice::from_ref(entry));
            return;
        }
        if self.lens.len().max(self.targets.len()) > u32::MAX as usize - 256 {
            // Past what an entry's offsets hold (a buffer of several GiB
            // without a PSB): instruction by instruction.
            b.for_each_insn(|e| self.event(e));
            return;
        }
        self.record_time((b.lo, b.last_lo, b.hi));
        self.blocks.push(entry.moved(self.lens.len() as u32, self.targets.len() as u32));
        self.lens.extend_from_slice(lens);
        self.targets.extend_from_slice(targets);
    }
}

impl Recording {
    /// Notes `(lo, last_lo, hi)` for the block about to be recorded, when
    /// it differs from the last block's.
    #[inline(always)]
    fn record_time(&mut self, time: (Time, Time, Time)) {
        if self.time != time {
            self.time = time;
            self.times.push((self.blocks.len(), time));
        }
    }

    /// Hands everything to `sink` in order, and empties itself: the blocks
    /// in runs between the places where an event comes or the time changes.
    pub(super) fn replay(&mut self, sink: &mut impl FlowSink) {
        let (mut events, mut times) = (self.events.iter().peekable(), self.times.iter().peekable());
        let mut time = (0, 0, 0);
        let mut at = 0;
        loop {
            while let Some(&(_, e)) = events.next_if(|(before, _)| *before == at) {
                sink.event(e);
            }
            if let Some(&(_, t)) = times.next_if(|(before, _)| *before == at) {
                time = t;
            }
            let next = events.peek().map_or(usize::MAX, |e| e.0).min(times.peek().map_or(usize::MAX, |t| t.0));
            let end = next.min(self.blocks.len());
            for b in &self.blocks[at..end] {
                sink.block(InsnBlock::new(b, time, b.insns(&self.lens, &self.targets)));
            }
            if end == self.blocks.len() && next == usize::MAX {
                break;
            }
            at = end;
        }
        self.blocks.clear();
        self.times.clear();
        self.time = NO_TIME;
        self.events.clear();
        self.lens.clear();
        self.targets.clear();
    }
}
