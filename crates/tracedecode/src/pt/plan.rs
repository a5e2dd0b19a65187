//! How a buffer is decoded: the set-up, segments or not, and the decoder
//! that each way starts from.

use codeimage::window::CodeSource;
use intel_pt::flow::{FlowDecoder, FlowSink};
use intel_pt::parallel::{psb_runs, psb_segments};

use crate::aux::Behind;
use crate::queue::Queue;
use crate::setup::PtSetup;

/// How the queues are decoded: the set-up, and whether a buffer's PSB
/// segments decode in parallel.
#[derive(Clone, Copy)]
pub struct Plan<'a> {
    pub setup: &'a PtSetup,
    /// Each buffer's PSB segments decode on rayon's global pool, where
    /// the output allows (errors only, counts) and each PSB+ carries a TSC;
    /// else a buffer decodes on one thread.
    pub segments: bool,
}

impl Plan<'_> {
    /// Whether a buffer is cut at its PSBs.
    pub(super) fn cut(&self) -> bool {
        self.segments && self.setup.psb_tsc
    }
}

/// A decoder over `code` as the set-up says (with the trace's address
/// filter, when it had one), without a buffer yet.
pub(super) fn decoder<'a, C: CodeSource>(setup: &PtSetup, code: &'a C, upper_bounds: bool) -> FlowDecoder<'a, C> {
    // Deferred TIPs (SDM: an indirect jump's or call's TIP sent after the
    // TNT bits of the branches after it) are read as perf reads them: its
    // decoder takes the TIP after the TNT (intel_pt_walk_tnt), no error.
    let mut dec =
        FlowDecoder::new(&[], code, setup.cfg.clone()).with_mtc(setup.mtc).with_cyc(setup.cyc).with_errata(setup.errata).with_deferred_tips(true);
    if let Some(f) = setup.filter {
        dec = dec.with_addr_filter(f);
    }
    if upper_bounds {
        dec
    } else {
        dec.with_upper_bounds(false)
    }
}

/// Decodes each piece of `q`'s trace on its own: never across a gap in
/// the AUX data (each starts at its first PSB). Where its PSB segments
/// give its events decoded one after the other (PSB+ with a TSC; CYC
/// timing starts again at each PSB+ either way), it is decoded in runs of
/// them of about [`RUN`] bytes, and the bytes behind each let go of.
pub(super) fn run_pieces<'a, C: CodeSource>(dec: &mut FlowDecoder<'a, C>, setup: &PtSetup, q: &'a Queue<'_>, sink: &mut impl FlowSink) {
    let mut behind = Behind::new(&q.trace);
    for (base, piece) in q.pieces() {
        if setup.psb_tsc {
            for (start, end) in psb_runs(piece, RUN) {
                behind.past(base + start);
                dec.reset_segment(piece, base, start, end);
                dec.run_with(sink);
            }
        } else {
            dec.reset_at(piece, base);
            dec.run_with(sink);
        }
        behind.past(base + piece.len());
    }
}

/// Bytes of trace a sequential decode walks between two of its restarts at
/// a PSB (each reads that PSB+ twice, once to check where the run before
/// ends).
const RUN: usize = 1 << 19;

/// The PSB segments of `q`'s trace (as [`intel_pt::parallel::segments`]),
/// the bytes let go of as they are scanned: the decode reads them again.
pub(super) fn cuts(q: &Queue<'_>) -> Vec<(usize, usize)> {
    let mut behind = Behind::new(&q.trace);
    psb_segments(&q.trace).inspect(|&(start, _)| behind.past(start)).collect()
}
