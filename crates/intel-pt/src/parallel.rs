//! One trace buffer decoded on several threads: cut at its PSBs (each PSB+
//! restates where execution is, so a segment decodes on its own), the
//! segments decoded in parallel on rayon's pool, the events handed out in
//! trace order.
//!
//! The events are those of [`FlowDecoder::run`] on the whole buffer when
//! each PSB+ carries a TSC (as hardware sends them with TSC on): a segment
//! starts with the state its PSB+ gives, and ends where the walk would
//! read the next PSB, after checking that PSB+'s FUP as the sequential walk
//! does (an error if the walk does not reach it; else the segment walks up
//! to it, where the next one starts). Segments go in windows of a few
//! per thread, so memory stays bounded whatever the buffer's size (two
//! windows of events); decoders (and their block caches) are reused from
//! window to window and buffer to buffer. A segment's cached blocks are
//! kept as blocks (a header, a byte per instruction, the targets of inner
//! jumps and calls) and handed out as blocks, not as an event for each
//! instruction.

use std::sync::Mutex;

use isa::Insn;

use crate::flow::{CodeSource, CycConv, FlowConfig, FlowDecoder, FlowEvent, FlowSink, InsnBlock, MtcConv, Time};

/// Segments per thread in one window.
const PER_THREAD: usize = 4;

/// Decodes buffers over one code source, PSB segments in parallel.
pub struct ParallelFlow<'a, C: CodeSource + Sync> {
    code: &'a C,
    cfg: FlowConfig,
    mtc: Option<MtcConv>,
    cyc: Option<CycConv>,
    /// Idle decoders, their block caches warm.
    decoders: Mutex<Vec<FlowDecoder<'a, C>>>,
    /// Segment recordings for reuse.
    spare: Mutex<Vec<Recording>>,
}

/// One segment's output, kept until its turn to be handed out.
#[derive(Default)]
struct Recording {
    items: Vec<Item>,
    /// The instruction bytes of the blocks (as [`InsnBlock`] keeps them).
    lens: Vec<u8>,
    /// Their inner jumps' and calls' targets.
    targets: Vec<u64>,
}

enum Item {
    Event(FlowEvent),
    /// A block, its instructions before the last at `lens[lens_at..]` and
    /// its targets at `targets[targets_at..]`, as many as it has.
    Block { ip: u64, last_ip: u64, lo: Time, hi: Time, last: Insn, lens_at: usize, n: u16, targets_at: usize, n_targets: u16 },
}

impl FlowSink for Recording {
    fn event(&mut self, e: FlowEvent) {
        self.items.push(Item::Event(e));
    }

    fn block(&mut self, b: InsnBlock<'_>) {
        let (lens, targets) = b.parts();
        self.items.push(Item::Block {
            ip: b.ip,
            last_ip: b.last_ip,
            lo: b.lo,
            hi: b.hi,
            last: b.last(),
            lens_at: self.lens.len(),
            n: lens.len() as u16,
            targets_at: self.targets.len(),
            n_targets: targets.len() as u16,
        });
        self.lens.extend_from_slice(lens);
        self.targets.extend_from_slice(targets);
    }
}

impl Recording {
    /// Hands everything to `sink` in order, and empties itself.
    fn replay(&mut self, sink: &mut impl FlowSink) {
        for item in self.items.drain(..) {
            match item {
                Item::Event(e) => sink.event(e),
                Item::Block { ip, last_ip, lo, hi, last, lens_at, n, targets_at, n_targets } => {
                    let lens = &self.lens[lens_at..lens_at + n as usize];
                    let targets = &self.targets[targets_at..targets_at + n_targets as usize];
                    sink.block(InsnBlock::from_parts(ip, last_ip, lo, hi, lens, targets, last));
                }
            }
        }
        self.lens.clear();
        self.targets.clear();
    }
}

impl<'a, C: CodeSource + Sync> ParallelFlow<'a, C> {
    pub fn new(code: &'a C, cfg: FlowConfig) -> Self {
        ParallelFlow { code, cfg, mtc: None, cyc: None, decoders: Mutex::new(Vec::new()), spare: Mutex::new(Vec::new()) }
    }

    /// MTC timing, as [`FlowDecoder::with_mtc`].
    pub fn with_mtc(mut self, mtc: impl Into<Option<MtcConv>>) -> Self {
        self.mtc = mtc.into();
        self
    }

    /// CYC timing, as [`FlowDecoder::with_cyc`] (the same events as one
    /// decoder when each PSB+ has a CBR, as hardware sends it).
    pub fn with_cyc(mut self, cyc: impl Into<Option<CycConv>>) -> Self {
        self.cyc = cyc.into();
        self
    }

    /// Decodes `buf`, reporting every event in order on the calling thread,
    /// each instruction as a [`FlowEvent::Insn`].
    pub fn run(&self, buf: &'a [u8], mut emit: impl FnMut(FlowEvent)) {
        self.run_with(buf, &mut emit);
    }

    /// Decodes `buf`, reporting every event to `sink` in order on the
    /// calling thread, cached blocks whole ([`FlowSink::block`]): while one
    /// window of segments is decoded on the pool, the window before is
    /// handed out.
    pub fn run_with(&self, buf: &'a [u8], sink: &mut impl FlowSink) {
        let cuts = segments(buf);
        let window = rayon::current_num_threads().max(1) * PER_THREAD;
        let mut ready: Vec<Recording> = Vec::new();
        for group in cuts.chunks(window) {
            let mut next: Vec<Recording> = (0..group.len()).map(|_| self.spare()).collect();
            rayon::in_place_scope(|s| {
                for (rec, &(start, end)) in next.iter_mut().zip(group) {
                    s.spawn(move |_| self.decode(buf, start, end, rec));
                }
                self.hand_out(&mut ready, sink);
            });
            ready = next;
        }
        self.hand_out(&mut ready, sink);
    }

    /// One segment's output into `rec`, on a decoder from the pool.
    fn decode(&self, buf: &'a [u8], start: usize, end: usize, rec: &mut Recording) {
        let mut dec = self.decoders.lock().expect("no panic while held").pop().unwrap_or_else(|| {
            FlowDecoder::new(&[], self.code, self.cfg.clone()).with_mtc(self.mtc).with_cyc(self.cyc)
        });
        dec.reset_segment(buf, start, end);
        dec.run_with(rec);
        self.decoders.lock().expect("no panic while held").push(dec);
    }

    fn hand_out(&self, ready: &mut Vec<Recording>, sink: &mut impl FlowSink) {
        for mut rec in ready.drain(..) {
            rec.replay(sink);
            self.spare.lock().expect("no panic while held").push(rec);
        }
    }

    fn spare(&self) -> Recording {
        self.spare.lock().expect("no panic while held").pop().unwrap_or_default()
    }
}

/// The PSB segments of `buf`: from each PSB to the next (the last to the
/// end). Bytes before the first PSB are skipped, as [`FlowDecoder::run`]
/// skips them; a buffer without a PSB is one segment.
pub fn segments(buf: &[u8]) -> Vec<(usize, usize)> {
    if crate::find_psb(buf).is_none() {
        return vec![(0, buf.len())];
    }
    let mut starts = Vec::new();
    let mut at = 0;
    while let Some(p) = crate::find_psb(&buf[at..]) {
        starts.push(at + p);
        at += p + crate::PSB.len();
    }
    starts.iter().enumerate().map(|(i, &s)| (s, starts.get(i + 1).copied().unwrap_or(buf.len()))).collect()
}
