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

use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex};

mod interleave;
mod record;
mod segments;

use self::record::Recording;
pub use self::segments::{psb_runs, psb_segments, segments, PsbSegments};
use crate::flow::walk::Walker;
use crate::flow::{CodeSource, FlowDecoder, FlowEvent, FlowSink, SharedBlocks};

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
    /// Segments a thread walks at once; `None`: [`LANES`] when the block
    /// table is large (`BlockCache::large`), else one.
    lanes: Option<usize>,
    /// How each decoder walks (as the decoder given to [`Self::new`]), and
    /// the idle decoders.
    decoders: Mutex<(Walker<'a, C>, Vec<FlowDecoder<'a, C>>)>,
    /// The decoded blocks all decoders share, kept from buffer to buffer.
    blocks: Arc<SharedBlocks>,
    /// Segment recordings for reuse.
    spare: Mutex<Vec<Recording>>,
}

impl<'a, C: CodeSource + Sync> ParallelFlow<'a, C> {
    /// Decodes as `decoder` would: over its code source, with its
    /// configuration and its settings (`with_mtc`, `with_cyc`,
    /// `with_upper_bounds`, `with_recovery`); its buffer is not used, and
    /// its block cache gives way to one the threads share. (With CYC
    /// timing the events are one decoder's when each PSB+ has a CBR, as
    /// hardware sends it.)
    pub fn new(decoder: FlowDecoder<'a, C>) -> Self {
        let blocks = Arc::<SharedBlocks>::default();
        let walker = decoder.walker.same();
        let first = decoder.with_shared_blocks(blocks.clone());
        ParallelFlow { lanes: None, decoders: Mutex::new((walker, vec![first])), blocks, spare: Mutex::new(Vec::new()) }
    }

    /// The decoded-block table its decoders share, for other decoders over
    /// the same code to share too ([`FlowDecoder::with_shared_blocks`]).
    pub fn blocks(&self) -> Arc<SharedBlocks> {
        self.blocks.clone()
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
            0,
            &segments(buf),
            false,
            || self.spare(),
            |mut rec: Recording, _| {
                rec.replay(sink);
                self.spare.lock().expect("no panic while held").push(rec);
            },
        );
    }

    /// [`Self::run_with`] for only the PSB segments of `buf` that start in
    /// `starts`, with offsets from `base` (where `buf` is in the whole
    /// trace): the events each gives within the whole run, in order.
    pub fn run_with_in(&self, buf: &'a [u8], base: usize, starts: Range<usize>, sink: &mut impl FlowSink) {
        let mut cuts = segments(buf);
        cuts.retain(|(start, _)| starts.contains(start));
        self.segments_in_groups(
            buf,
            base,
            &cuts,
            false,
            || self.spare(),
            |mut rec: Recording, _| {
                rec.replay(sink);
                self.spare.lock().expect("no panic while held").push(rec);
            },
        );
    }

    /// Decodes `buf` with a sink of its own for each PSB segment, made by
    /// `make` and filled on the pool, then given to `done` in trace order on
    /// the calling thread (while the segments after it decode; a calling
    /// thread of the pool decodes some itself while it waits, one outside
    /// it sleeps).
    /// Nothing is recorded and replayed: the way to scale with cores when
    /// what a segment's events become (counts, coverage, formatted lines)
    /// can be worked out apart and put together in order.
    pub fn run_segments<S: FlowSink + Send>(&self, buf: &'a [u8], make: impl FnMut() -> S, mut done: impl FnMut(S)) {
        self.segments_in_groups(buf, 0, &segments(buf), true, make, |s, _| done(s));
    }

    /// [`Self::run_segments`] over the segments `cuts` (as [`segments`]
    /// gives them), `done` given each segment's byte range with its sink:
    /// no segment handed out later reads `buf` before that range's start
    /// (to let go of the bytes behind it).
    pub fn run_cuts<S: FlowSink + Send>(&self, buf: &'a [u8], cuts: &[(usize, usize)], make: impl FnMut() -> S, done: impl FnMut(S, Range<usize>)) {
        self.segments_in_groups(buf, 0, cuts, true, make, done);
    }

    /// [`Self::run_segments`] for only the PSB segments of `buf` that start
    /// in `starts`, with offsets from `base` (where `buf` is in the whole
    /// trace): each gives the events it gives within the whole run, so
    /// consecutive ranges decoded apart, in order, give the whole run's events.
    pub fn run_segments_in<S: FlowSink + Send>(
        &self,
        buf: &'a [u8],
        base: usize,
        starts: Range<usize>,
        make: impl FnMut() -> S,
        mut done: impl FnMut(S),
    ) {
        let mut cuts = segments(buf);
        cuts.retain(|(start, _)| starts.contains(start));
        self.segments_in_groups(buf, base, &cuts, true, make, |s, _| done(s));
    }

    /// [`Self::run_cuts`] over `cuts`, offsets from `base`, with
    /// groups of one segment unless `grouped`.
    fn segments_in_groups<S: FlowSink + Send>(
        &self,
        buf: &'a [u8],
        base: usize,
        cuts: &[(usize, usize)],
        grouped: bool,
        mut make: impl FnMut() -> S,
        mut done: impl FnMut(S, Range<usize>),
    ) {
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
        // Groups decoded so far, rung as each is, for a caller outside the
        // pool, which sleeps while it waits (a caller on the pool decodes).
        let (decoded, filled) = (Mutex::new(0usize), Condvar::new());
        let outside = rayon::current_thread_index().is_none();
        rayon::in_place_scope_fifo(|s| {
            let mut spawned = 0;
            for next in 0..groups.len() {
                while spawned < groups.len() && spawned < next + ahead {
                    let (slot, group, decoded_so_far, filled) = (&slots[spawned % ahead], groups[spawned], &decoded, &filled);
                    let sinks: Vec<S> = group.iter().map(|_| make()).collect();
                    s.spawn_fifo(move |_| {
                        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.decode(buf, base, group, sinks)));
                        *slot.lock().expect("no panic while held") = Some(decoded);
                        *decoded_so_far.lock().expect("no panic while held") += 1;
                        filled.notify_all();
                    });
                    spawned += 1;
                }
                let sinks = loop {
                    let seen = *decoded.lock().expect("no panic while held");
                    let taken = slots[next % ahead].lock().expect("no panic while held").take();
                    match taken {
                        Some(Ok(sinks)) => break sinks,
                        Some(Err(panic)) => std::panic::resume_unwind(panic),
                        None if outside => {
                            let count = decoded.lock().expect("no panic while held");
                            drop(filled.wait_while(count, |n| *n == seen).expect("no panic while held"));
                        }
                        None => {
                            // Waiting: decode a group here if one is waiting.
                            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                                std::thread::yield_now();
                            }
                        }
                    }
                };
                for (sink, &(start, end)) in sinks.into_iter().zip(groups[next]) {
                    done(sink, start..end);
                }
            }
        });
    }

    /// The events of the segments `group` gives, a segment's into each of
    /// `sinks` (as many), on a decoder from the pool: the segments walked
    /// at once when the blocks outgrow the caches near the core (or as
    /// [`Self::with_lanes`] says), else one after the other.
    fn decode<S: FlowSink>(&self, buf: &'a [u8], base: usize, group: &[(usize, usize)], mut sinks: Vec<S>) -> Vec<S> {
        let mut dec = {
            let mut decoders = self.decoders.lock().expect("no panic while held");
            match decoders.1.pop() {
                Some(dec) => dec,
                None => FlowDecoder::with_walker(&[], decoders.0.same()).with_shared_blocks(self.blocks.clone()),
            }
        };
        dec.cache.refresh();
        let lanes = self.lanes.unwrap_or(if dec.cache.large() { LANES } else { 1 });
        if lanes > 1 && group.len() > 1 {
            let (mut made, mut out) = (sinks.into_iter(), Vec::with_capacity(group.len()));
            dec.interleave(buf, base, group, lanes, || made.next().expect("a sink per segment"), |s| out.push(s));
            sinks = out;
        } else {
            for (&(start, end), sink) in group.iter().zip(&mut sinks) {
                dec.reset_segment(buf, base, start, end);
                dec.run_with(sink);
            }
        }
        self.decoders.lock().expect("no panic while held").1.push(dec);
        sinks
    }

    fn spare(&self) -> Recording {
        self.spare.lock().expect("no panic while held").pop().unwrap_or_default()
    }
}
