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
//! window to window and buffer to buffer.

use std::sync::Mutex;

use crate::flow::{CodeSource, CycConv, FlowConfig, FlowDecoder, FlowEvent, MtcConv};

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
    /// Event buffers for reuse.
    spare: Mutex<Vec<Vec<FlowEvent>>>,
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

    /// Decodes `buf`, reporting every event in order on the calling thread:
    /// while one window of segments is decoded on the pool, the events of
    /// the window before are handed out.
    pub fn run(&self, buf: &'a [u8], mut emit: impl FnMut(FlowEvent)) {
        let cuts = segments(buf);
        let window = rayon::current_num_threads().max(1) * PER_THREAD;
        let mut ready: Vec<Vec<FlowEvent>> = Vec::new();
        for group in cuts.chunks(window) {
            let mut next: Vec<Vec<FlowEvent>> = (0..group.len()).map(|_| self.spare()).collect();
            rayon::in_place_scope(|s| {
                for (events, &(start, end)) in next.iter_mut().zip(group) {
                    s.spawn(move |_| self.decode(buf, start, end, events));
                }
                self.hand_out(&mut ready, &mut emit);
            });
            ready = next;
        }
        self.hand_out(&mut ready, &mut emit);
    }

    /// One segment's events into `events`, on a decoder from the pool.
    fn decode(&self, buf: &'a [u8], start: usize, end: usize, events: &mut Vec<FlowEvent>) {
        let mut dec = self.decoders.lock().expect("no panic while held").pop().unwrap_or_else(|| {
            FlowDecoder::new(&[], self.code, self.cfg.clone()).with_mtc(self.mtc).with_cyc(self.cyc)
        });
        dec.reset_segment(buf, start, end);
        dec.run(|e| events.push(e));
        self.decoders.lock().expect("no panic while held").push(dec);
    }

    fn hand_out(&self, ready: &mut Vec<Vec<FlowEvent>>, emit: &mut impl FnMut(FlowEvent)) {
        for mut events in ready.drain(..) {
            events.drain(..).for_each(&mut *emit);
            self.spare.lock().expect("no panic while held").push(events);
        }
    }

    fn spare(&self) -> Vec<FlowEvent> {
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
