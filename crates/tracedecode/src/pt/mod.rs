//! Intel PT: each queue decoded over the chosen image into the sink its
//! output needs (lines of perf's samples, errors only, or counts), all
//! queues' lines merged in time order as they come.

mod brstack;
mod count;
mod error_code;
mod errors;
mod lines;
mod plan;
mod profile;
mod samples;
mod units;

use std::cell::RefCell;
use std::sync::Mutex;

use codeimage::window::{CodeSource, Interval, PerfStyle, Static};
use codeimage::CodeTimeline;
use intel_pt::parallel::ParallelFlow;

pub use self::brstack::{Branch, BranchSample, Ring, DEPTH};
use self::count::Count;
pub use self::error_code::perf_error_code;
use self::errors::ErrorLines;
use self::lines::Collector;
use self::profile::Profiler;
pub use self::samples::{branch_samples, SampleCounts};
use crate::aux::Behind;
use crate::itrace::Itrace;
use crate::lanes::Lanes;
use crate::line::Out;
use crate::mode::ImageMode;
use crate::profile::Profile;
use crate::queue::Queue;
use crate::summary::Summary;
use crate::Error;

pub use self::plan::Plan;
use self::plan::{cuts, decoder, run_pieces};
pub use self::units::decode_units;

/// Decodes every queue over `tl` (or `code`, the code before any change,
/// for [`ImageMode::Static`]) and passes its lines to `emit` in (time,
/// queue) order, a few batches per queue in memory at most. Only the
/// lines `itrace` asks for are made: without branches or instructions,
/// the decoders' blocks are not looked at.
pub fn decode<E: From<Error>>(
    plan: Plan<'_>,
    queues: &[Queue<'_>],
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
    queues: &[Queue<'_>],
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
            run_pieces(&mut dec, plan.setup, q, sink);
            sink.finish();
        } else if plan.cut() && q.breaks.is_empty() {
            let segment = || ErrorLines::new(queue, q.cpu, None);
            let mut behind = Behind::new(&q.trace);
            par.run_cuts(&q.trace, &cuts(q), segment, |mut seg, at| {
                seg.finish(lanes);
                behind.past(at.start);
            });
        } else {
            let sink = &mut ErrorLines::new(queue, q.cpu, Some(lanes));
            run_pieces(&mut dec, plan.setup, q, sink);
            sink.finish(lanes);
        }
    };
    crate::pool::decode_merged(queues.len(), decode_one, emit)
}

/// Decodes every queue as [`decode`] does and counts what the lines of
/// `--itrace=bie` would show, without making them; the pokes crossed are
/// those of `tl`.
pub fn stat(plan: Plan<'_>, queues: &[Queue<'_>], image: ImageMode, tl: &CodeTimeline, code: &CodeTimeline) -> Result<Summary, Error> {
    let mut total = match image {
        ImageMode::Timeline => stat_over(plan, queues, &Interval(tl), true)?,
        ImageMode::PerfStyle => stat_over(plan, queues, &PerfStyle(tl), false)?,
        ImageMode::Static => stat_over(plan, queues, &Static(code), false)?,
    };
    total.count_pokes_crossed(tl.pokes().iter().map(|p| p.time));
    Ok(total)
}

/// [`stat`] over `code`.
fn stat_over<C: CodeSource + Sync>(plan: Plan<'_>, queues: &[Queue<'_>], code: &C, upper_bounds: bool) -> Result<Summary, Error> {
    let par = ParallelFlow::new(decoder(plan.setup, code, upper_bounds));
    let total = Mutex::new(Summary::default());
    let decode_one = |queue: usize, _: &Lanes| {
        let q = &queues[queue];
        let mut count = Count::buffer();
        if plan.cut() && q.breaks.is_empty() {
            let mut behind = Behind::new(&q.trace);
            par.run_cuts(&q.trace, &cuts(q), Count::segment, |seg, at| {
                count.append(seg);
                behind.past(at.start);
            });
        } else {
            let mut dec = decoder(plan.setup, code, upper_bounds).with_shared_blocks(par.blocks());
            run_pieces(&mut dec, plan.setup, q, &mut count);
        }
        total.lock().unwrap_or_else(|e| e.into_inner()).add(&count.finish());
    };
    crate::pool::decode_merged::<Error>(queues.len(), decode_one, &mut |_| Ok(()))?;
    Ok(total.into_inner().unwrap_or_else(|e| e.into_inner()))
}

/// Decodes every queue as [`decode`] does and counts its taken branches
/// and fall-through ranges, each instruction as the bytes it was decoded
/// from; what runs when `keep(queue, time)` says no is not counted.
pub fn profile(
    plan: Plan<'_>,
    queues: &[Queue],
    image: ImageMode,
    tl: &CodeTimeline,
    code: &CodeTimeline,
    keep: &(impl Fn(&Queue, u64) -> bool + Sync),
) -> Result<Profile, Error> {
    match image {
        ImageMode::Timeline => profile_over(plan, queues, &Interval(tl), true, keep),
        ImageMode::PerfStyle => profile_over(plan, queues, &PerfStyle(tl), false, keep),
        ImageMode::Static => profile_over(plan, queues, &Static(code), false, keep),
    }
}

/// [`profile`] over `code`.
fn profile_over<C: CodeSource + Sync>(
    plan: Plan<'_>,
    queues: &[Queue],
    code: &C,
    upper_bounds: bool,
    keep: &(impl Fn(&Queue, u64) -> bool + Sync),
) -> Result<Profile, Error> {
    let par = ParallelFlow::new(decoder(plan.setup, code, upper_bounds));
    let total = Mutex::new(Profile::default());
    let decode_one = |queue: usize, _: &Lanes| {
        let q = &queues[queue];
        let keep_here = |time: u64| keep(q, time);
        let mut whole = Profiler::buffer(keep_here);
        if plan.cut() && q.breaks.is_empty() {
            // (Segments are made and appended on this thread: their buffers go round.)
            let spare = RefCell::new(Vec::new());
            let make = || Profiler::segment(keep_here, spare.borrow_mut().pop().unwrap_or_default());
            par.run_segments(&q.trace, make, |seg| spare.borrow_mut().push(whole.append(seg)));
        } else {
            let mut dec = decoder(plan.setup, code, upper_bounds).with_shared_blocks(par.blocks());
            run_pieces(&mut dec, plan.setup, q, &mut whole);
        }
        total.lock().unwrap_or_else(|e| e.into_inner()).add(whole.finish());
    };
    crate::pool::decode_merged::<Error>(queues.len(), decode_one, &mut |_| Ok(()))?;
    Ok(total.into_inner().unwrap_or_else(|e| e.into_inner()))
}
