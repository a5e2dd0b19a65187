//! Intel PT: each queue decoded over the chosen image into the sink its
//! output needs (lines of perf's samples, errors only, or counts), all
//! queues' lines merged in time order as they come.

mod count;
mod errors;
mod lines;

use std::sync::Mutex;

use codeimage::window::{CodeSource, Interval, PerfStyle, Static};
use codeimage::CodeTimeline;
use intel_pt::flow::{FlowDecoder, FlowErrorKind, FlowSink};
use intel_pt::parallel::ParallelFlow;

use self::count::Count;
use self::errors::ErrorLines;
use self::lines::Collector;
use crate::itrace::Itrace;
use crate::lanes::Lanes;
use crate::line::Out;
use crate::mode::ImageMode;
use crate::queue::Queue;
use crate::setup::PtSetup;
use crate::stats::Stats;
use crate::Error;

/// Lines a queue's decoder hands over at once.
const BATCH: usize = 4096;

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
    fn cut(&self) -> bool {
        self.segments && self.setup.psb_tsc
    }
}

/// Decodes every queue over `tl` (or `code`, the code before any change,
/// for [`ImageMode::Static`]) and passes its lines to `emit` in (time,
/// queue) order, a few batches per queue in memory at most. Only the
/// lines `itrace` asks for are made: without branches or instructions,
/// the decoders' blocks are not looked at.
pub fn decode<E: From<Error>>(
    plan: Plan<'_>,
    queues: &[Queue],
    itrace: &Itrace,
    image: ImageMode,
    tl: &CodeTimeline,
    code: &CodeTimeline,
    emit: &mut impl FnMut(&Out) -> Result<(), E>,
) -> Result<(), E> {
    match image {
        ImageMode::Timeline => decode_over(plan, queues, itrace, &Interval(tl), true, tl, emit),
        // The lines show no instruction's latest time: none is worked out.
        ImageMode::PerfStyle => decode_over(plan, queues, itrace, &PerfStyle(tl), false, tl, emit),
        ImageMode::Static => decode_over(plan, queues, itrace, &Static(code), false, tl, emit),
    }
}

/// [`decode`] over `code`, working out instructions' latest times when
/// `upper_bounds`; the lines' instruction bytes are those read from `code`.
fn decode_over<C: CodeSource + Sync, E: From<Error>>(
    plan: Plan<'_>,
    queues: &[Queue],
    itrace: &Itrace,
    code: &C,
    upper_bounds: bool,
    tl: &CodeTimeline,
    emit: &mut impl FnMut(&Out) -> Result<(), E>,
) -> Result<(), E> {
    let par = ParallelFlow::new(decoder(plan.setup, code, upper_bounds));
    let decode_one = |queue: usize, lanes: &Lanes| {
        let q = &queues[queue];
        let mut dec = decoder(plan.setup, code, upper_bounds).with_shared_blocks(par.blocks());
        if itrace.branches || itrace.instructions {
            let sink = &mut Collector::new(queue, q.cpu, itrace, (code, tl), lanes, plan.setup.filter);
            run_pieces(&mut dec, q, sink);
            sink.finish();
        } else if plan.cut() && q.breaks.is_empty() {
            let segment = || ErrorLines::new(queue, q.cpu, None);
            par.run_segments(&q.trace, segment, |mut seg| seg.finish(lanes));
        } else {
            let sink = &mut ErrorLines::new(queue, q.cpu, Some(lanes));
            run_pieces(&mut dec, q, sink);
            sink.finish(lanes);
        }
    };
    crate::pool::decode_merged(queues.len(), decode_one, emit)
}

/// Decodes every queue as [`decode`] does and counts what the lines of
/// `--itrace=bie` would show, without making them; the pokes crossed are
/// those of `tl`.
pub fn stat(plan: Plan<'_>, queues: &[Queue], image: ImageMode, tl: &CodeTimeline, code: &CodeTimeline) -> Result<Stats, Error> {
    let mut total = match image {
        ImageMode::Timeline => stat_over(plan, queues, &Interval(tl), true)?,
        ImageMode::PerfStyle => stat_over(plan, queues, &PerfStyle(tl), false)?,
        ImageMode::Static => stat_over(plan, queues, &Static(code), false)?,
    };
    total.count_pokes_crossed(tl.pokes().iter().map(|p| p.time));
    Ok(total)
}

/// [`stat`] over `code`.
fn stat_over<C: CodeSource + Sync>(plan: Plan<'_>, queues: &[Queue], code: &C, upper_bounds: bool) -> Result<Stats, Error> {
    let par = ParallelFlow::new(decoder(plan.setup, code, upper_bounds));
    let total = Mutex::new(Stats::default());
    let decode_one = |queue: usize, _: &Lanes| {
        let q = &queues[queue];
        let mut count = Count::buffer();
        if plan.cut() && q.breaks.is_empty() {
            par.run_segments(&q.trace, Count::segment, |seg| count.append(seg));
        } else {
            let mut dec = decoder(plan.setup, code, upper_bounds).with_shared_blocks(par.blocks());
            run_pieces(&mut dec, q, &mut count);
        }
        total.lock().unwrap_or_else(|e| e.into_inner()).add(&count.finish());
    };
    crate::pool::decode_merged::<Error>(queues.len(), decode_one, &mut |_| Ok(()))?;
    Ok(total.into_inner().unwrap_or_else(|e| e.into_inner()))
}

/// A decoder over `code` as the set-up says (with the trace's address
/// filter, when it had one), without a buffer yet.
fn decoder<'a, C: CodeSource>(setup: &PtSetup, code: &'a C, upper_bounds: bool) -> FlowDecoder<'a, C> {
    let mut dec = FlowDecoder::new(&[], code, setup.cfg.clone()).with_mtc(setup.mtc).with_cyc(setup.cyc);
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
/// the AUX data (each starts at its first PSB).
fn run_pieces<'a, C: CodeSource>(dec: &mut FlowDecoder<'a, C>, q: &'a Queue, sink: &mut impl FlowSink) {
    for (base, piece) in q.pieces() {
        dec.reset_at(piece, base);
        dec.run_with(sink);
    }
}

/// perf's error code for an Intel PT decode error.
pub fn perf_error_code(kind: &FlowErrorKind) -> u32 {
    match kind {
        FlowErrorKind::Packet(_) | FlowErrorKind::BadContext => 3,
        FlowErrorKind::EndOfTrace => 4,
        FlowErrorKind::Unmapped | FlowErrorKind::BadInsn => 5,
        FlowErrorKind::NoTnt | FlowErrorKind::NoTip | FlowErrorKind::NoTrapPackets | FlowErrorKind::PsbMismatch { .. } => 6,
        FlowErrorKind::Overflow => 7,
        FlowErrorKind::NoProgress => 10,
    }
}
