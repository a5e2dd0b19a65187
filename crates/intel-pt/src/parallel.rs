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

use isa::{BranchClass, Insn};

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

/// One segment's output, kept until its turn to be handed out: its blocks,
/// and apart from them (an event is far larger than a block's record) its
/// other events, each with how many blocks came before it.
#[derive(Default)]
struct Recording {
    blocks: Vec<BlockRec>,
    events: Vec<(usize, FlowEvent)>,
    /// The instruction bytes of the blocks (as [`InsnBlock`] keeps them).
    lens: Vec<u8>,
    /// Their inner jumps' and calls' targets.
    targets: Vec<u64>,
}

/// An [`InsnBlock`] kept: its instructions before the last (at most 255:
/// a block has at most 256 instructions), up to [`INLINE_LENS`] of them in
/// `lens` itself, more at `lens` in the recording's arena; its targets at
/// `targets_at` in theirs; its last instruction taken apart.
struct BlockRec {
    ip: u64,
    last_ip: u64,
    lo: Time,
    hi: Time,
    last_target: u64,
    lens: u64,
    targets_at: u32,
    n: u8,
    n_targets: u8,
    last_len: u8,
    last_class: BranchClass,
    has_target: bool,
}

impl FlowSink for Recording {
    fn event(&mut self, e: FlowEvent) {
        self.events.push((self.blocks.len(), e));
    }

    #[inline(always)]
    fn block(&mut self, b: InsnBlock<'_>) {
        let (lens, targets) = b.parts();
        if self.targets.len() > u32::MAX as usize - 256 {
            // Past what the offsets hold (a buffer of several GiB without
            // a PSB): instruction by instruction.
            b.for_each_insn(|e| self.event(e));
            return;
        }
        let packed = if lens.len() <= INLINE_LENS {
            lens.iter().rev().fold(0u64, |w, &l| w << 8 | u64::from(l))
        } else {
            let at = self.lens.len() as u64;
            self.lens.extend_from_slice(lens);
            at
        };
        let last = b.last();
        self.blocks.push(BlockRec {
            ip: b.ip,
            last_ip: b.last_ip,
            lo: b.lo,
            hi: b.hi,
            last_target: last.target.unwrap_or(0),
            lens: packed,
            targets_at: self.targets.len() as u32,
            n: lens.len() as u8,
            n_targets: targets.len() as u8,
            last_len: last.len,
            last_class: last.class,
            has_target: last.target.is_some(),
        });
        if !targets.is_empty() {
            self.targets.extend_from_slice(targets);
        }
    }
}

/// Instruction bytes a [`BlockRec`] holds itself.
const INLINE_LENS: usize = 8;

impl Recording {
    /// Hands everything to `sink` in order, and empties itself.
    fn replay(&mut self, sink: &mut impl FlowSink) {
        let mut events = 0;
        for (i, r) in self.blocks.iter().enumerate() {
            while let Some(&(_, e)) = self.events.get(events).filter(|(before, _)| *before == i) {
                sink.event(e);
                events += 1;
            }
            let inline = r.lens.to_le_bytes();
            let lens = if r.n as usize <= INLINE_LENS { &inline[..r.n as usize] } else { &self.lens[r.lens as usize..r.lens as usize + r.n as usize] };
            let targets = &self.targets[r.targets_at as usize..r.targets_at as usize + r.n_targets as usize];
            let last = Insn { len: r.last_len, class: r.last_class, target: r.has_target.then_some(r.last_target) };
            sink.block(InsnBlock::from_parts(r.ip, r.last_ip, r.lo, r.hi, lens, targets, last));
        }
        for &(_, e) in &self.events[events..] {
            sink.event(e);
        }
        self.blocks.clear();
        self.events.clear();
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
