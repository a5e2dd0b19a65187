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
//! to it, where the next one starts). Consecutive segments go in groups
//! (up to 32), a group decoded on one thread: its segments walked
//! at once ([`FlowDecoder::run_interleaved`]) when the blocks outgrow the
//! caches near the core, so that the thread waits for memory for several
//! walks at a time, else one after the other. A few groups per thread
//! decode ahead of the one handed out next, each started as soon as one is
//! handed out (no barrier between rounds), so memory stays bounded whatever
//! the buffer's size; decoders are reused from group to group and buffer
//! to buffer, and their block caches share one table, so a block is built
//! once, by whichever thread meets it first. A segment's cached blocks are
//! kept as copies of their cache entries (with the instruction bytes and
//! inner targets that do not fit in one) and handed out as blocks, not as
//! an event for each instruction.

use std::sync::{Arc, Mutex};

use crate::block_cache::Block;
use crate::flow::{CodeSource, CycConv, FlowConfig, FlowDecoder, FlowEvent, FlowSink, InsnBlock, MtcConv, Recovery, SharedBlocks, Time};

/// Groups of segments decoding ahead of the one handed out next, per thread.
const PER_THREAD: usize = 4;
/// Segments one thread walks at once over code too large for the caches
/// near the core ([`FlowDecoder::run_interleaved`]).
const LANES: usize = 16;
/// Segments in one group at most: one thread decodes a group, its segments
/// at once ([`LANES`]) or one after the other.
const GROUP: usize = 2 * LANES;

/// Decodes buffers over one code source, PSB segments in parallel.
pub struct ParallelFlow<'a, C: CodeSource + Sync> {
    code: &'a C,
    cfg: FlowConfig,
    mtc: Option<MtcConv>,
    cyc: Option<CycConv>,
    upper_bounds: bool,
    recovery: Recovery,
    /// Segments a thread walks at once; `None`: [`LANES`] when the block
    /// table is large ([`crate::block_cache::BlockCache::large`]), else one.
    lanes: Option<usize>,
    /// Idle decoders.
    decoders: Mutex<Vec<FlowDecoder<'a, C>>>,
    /// The decoded blocks all decoders share, kept from buffer to buffer.
    blocks: Arc<SharedBlocks>,
    /// Segment recordings for reuse.
    spare: Mutex<Vec<Recording>>,
}

/// One segment's output, kept until its turn to be handed out: the cache
/// entries of its blocks, copied whole (one aligned 64-byte write), the
/// times they ran at where those change, and apart from them its other
/// events; times and events with how many blocks came before them.
struct Recording {
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
    fn replay(&mut self, sink: &mut impl FlowSink) {
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

impl<'a, C: CodeSource + Sync> ParallelFlow<'a, C> {
    pub fn new(code: &'a C, cfg: FlowConfig) -> Self {
        ParallelFlow {
            code,
            cfg,
            mtc: None,
            cyc: None,
            upper_bounds: true,
            recovery: Recovery::default(),
            lanes: None,
            decoders: Mutex::new(Vec::new()),
            blocks: Arc::default(),
            spare: Mutex::new(Vec::new()),
        }
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

    /// Upper bounds on the events' times or not, as
    /// [`FlowDecoder::with_upper_bounds`].
    pub fn with_upper_bounds(mut self, on: bool) -> Self {
        self.upper_bounds = on;
        self
    }

    /// Where a segment's walk goes on after an error, as
    /// [`FlowDecoder::with_recovery`].
    pub fn with_recovery(mut self, recovery: Recovery) -> Self {
        self.recovery = recovery;
        self
    }

    /// How many segments a thread walks at once in [`Self::run_segments`]
    /// (at least one), instead of 16 when the blocks outgrow the
    /// caches near the core and one otherwise. The events are the same.
    /// ([`Self::run_with`] walks one at a time: it records each segment.)
    pub fn with_lanes(mut self, lanes: usize) -> Self {
        self.lanes = Some(lanes.max(1));
        self
    }

    /// Decodes `buf`, reporting every event in order on the calling thread,
    /// each instruction as a [`FlowEvent::Insn`].
    pub fn run(&self, buf: &'a [u8], mut emit: impl FnMut(FlowEvent)) {
        self.run_with(buf, &mut emit);
    }

    /// Decodes `buf`, reporting every event to `sink` in order on the
    /// calling thread, cached blocks whole ([`FlowSink::block`]): each
    /// segment is recorded on the pool ([`Self::run_segments`]) and replayed
    /// into `sink` while the segments after it decode.
    pub fn run_with(&self, buf: &'a [u8], sink: &mut impl FlowSink) {
        // (One segment at a time: walks at once would keep many more
        // recordings, each a copy of its blocks, than the caches hold.)
        self.segments_in_groups(
            buf,
            false,
            || self.spare(),
            |mut rec: Recording| {
                rec.replay(sink);
                self.spare.lock().expect("no panic while held").push(rec);
            },
        );
    }

    /// Decodes `buf` with a sink of its own for each PSB segment, made by
    /// `make` and filled on the pool, then given to `done` in trace order on
    /// the calling thread (while the segments after it decode; a calling
    /// thread of the pool decodes some itself while it waits).
    /// Nothing is recorded and replayed: the way to scale with cores when
    /// what a segment's events become (counts, coverage, formatted lines)
    /// can be worked out apart and put together in order.
    pub fn run_segments<S: FlowSink + Send>(&self, buf: &'a [u8], make: impl FnMut() -> S, done: impl FnMut(S)) {
        self.segments_in_groups(buf, true, make, done);
    }

    /// [`Self::run_segments`], with groups of one segment unless `grouped`.
    fn segments_in_groups<S: FlowSink + Send>(&self, buf: &'a [u8], grouped: bool, mut make: impl FnMut() -> S, mut done: impl FnMut(S)) {
        let cuts = segments(buf);
        let threads = rayon::current_num_threads().max(1);
        // Consecutive segments in groups, a group decoded by one thread: as
        // many as keep each thread [`PER_THREAD`] groups to decode.
        let group = if grouped { (cuts.len() / (threads * PER_THREAD)).clamp(1, GROUP) } else { 1 };
        let groups: Vec<&[(usize, usize)]> = cuts.chunks(group).collect();
        // Groups decoding (or decoded) from the next to hand out on: a new
        // one starts as each is handed out, so no thread idles while
        // another ends the last of a round. Group `i` goes to slot
        // `i % ahead`, free once group `i - ahead` was handed out.
        let ahead = (threads * PER_THREAD).min(groups.len());
        // (A sink that panics on the pool ends the wait with its panic.)
        let slots: Vec<Mutex<Option<std::thread::Result<Vec<S>>>>> = (0..ahead).map(|_| Mutex::new(None)).collect();
        rayon::in_place_scope_fifo(|s| {
            let mut spawned = 0;
            for next in 0..groups.len() {
                while spawned < groups.len() && spawned < next + ahead {
                    let (slot, group) = (&slots[spawned % ahead], groups[spawned]);
                    let sinks: Vec<S> = group.iter().map(|_| make()).collect();
                    s.spawn_fifo(move |_| {
                        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.decode(buf, group, sinks)));
                        *slot.lock().expect("no panic while held") = Some(decoded);
                    });
                    spawned += 1;
                }
                let sinks = loop {
                    match slots[next % ahead].lock().expect("no panic while held").take() {
                        Some(Ok(sinks)) => break sinks,
                        Some(Err(panic)) => std::panic::resume_unwind(panic),
                        None => {}
                    }
                    // Waiting: decode a group here if one is waiting.
                    if rayon::yield_now() != Some(rayon::Yield::Executed) {
                        std::thread::yield_now();
                    }
                };
                sinks.into_iter().for_each(&mut done);
            }
        });
    }

    /// The events of the segments `group` gives, a segment's into each of
    /// `sinks` (as many), on a decoder from the pool: the segments walked
    /// at once when the blocks outgrow the caches near the core (or as
    /// [`Self::with_lanes`] says), else one after the other.
    fn decode<S: FlowSink>(&self, buf: &'a [u8], group: &[(usize, usize)], mut sinks: Vec<S>) -> Vec<S> {
        let mut dec = self.decoders.lock().expect("no panic while held").pop().unwrap_or_else(|| {
            FlowDecoder::new(&[], self.code, self.cfg.clone())
                .with_mtc(self.mtc)
                .with_cyc(self.cyc)
                .with_upper_bounds(self.upper_bounds)
                .with_recovery(self.recovery)
                .with_shared_blocks(self.blocks.clone())
        });
        dec.refresh_blocks();
        let lanes = self.lanes.unwrap_or(if dec.blocks_large() { LANES } else { 1 });
        if lanes > 1 && group.len() > 1 {
            let (mut made, mut out) = (sinks.into_iter(), Vec::with_capacity(group.len()));
            dec.interleave(buf, group, lanes, || made.next().expect("a sink per segment"), |s| out.push(s));
            sinks = out;
        } else {
            for (&(start, end), sink) in group.iter().zip(&mut sinks) {
                dec.reset_segment(buf, start, end);
                dec.run_with(sink);
            }
        }
        self.decoders.lock().expect("no panic while held").push(dec);
        sinks
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
