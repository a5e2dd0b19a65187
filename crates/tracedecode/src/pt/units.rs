//! Intel PT units decoded apart (`decode --segment`): each unit's PSB
//! segments decoded as within the whole buffer, the lines of each unit
//! those the whole decode gives for its bytes.
//!
//! Error lines need no state from before a unit. Branch and instruction
//! lines do: the last instruction (the branch a unit's first instruction
//! was reached by), whether tracing was on, and where the unit's last
//! instruction went (known at the next segment's first event). So a unit's
//! lines come from a decode that starts a few PSB segments before it (as
//! many as it takes to reach an instruction or an end of tracing, whose
//! lines are dropped) and goes on through the PSB segment after it (lines
//! dropped too). The decoder's own state (call stack, last IP, timing)
//! starts afresh at each PSB, as in decode's parallel PSB segments.

use std::ops::Range;

use codeimage::window::{CodeSource, Interval, PerfStyle, Static};
use codeimage::CodeTimeline;
use intel_pt::parallel::ParallelFlow;

use super::errors::ErrorLines;
use super::lines::Collector;
use super::plan::{decoder, Plan};
use crate::itrace::Itrace;
use crate::lanes::Lanes;
use crate::line::Out;
use crate::mode::ImageMode;
use crate::queue::Queue;
use crate::units::{psb_segments, Unit};
use crate::Error;

/// The lines `itrace` asks for of `units` (from [`crate::units::pt_unit`]),
/// in the (time, queue) order [`super::decode`] gives: for units that
/// together are a buffer's, its lines, and for units one after the other,
/// in order, the lines of each. Refused where a unit's segments would not
/// decode as within the whole buffer: PSB+ without a TSC; and for an
/// instruction period other than 1 (its count runs from the buffer's start).
#[allow(clippy::too_many_arguments)] // (decode's arguments, and the units)
pub fn decode_units<E: From<Error>>(
    plan: Plan<'_>,
    queues: &[Queue],
    units: &[Unit],
    itrace: &Itrace,
    image: ImageMode,
    tl: &CodeTimeline,
    code: &CodeTimeline,
    emit: &mut impl FnMut(&Out) -> Result<(), E>,
) -> Result<(), E> {
    if !plan.setup.psb_tsc {
        return Err(
            Error::Setup("--segment: the trace's PSB+ carry no TSC (the PT event's tsc bit is off), so a unit does not decode alone".into()).into()
        );
    }
    if itrace.instructions && itrace.period != 1 {
        return Err(Error::Setup(
            "--segment: instruction lines by unit are made for each instruction only (a period counts from the buffer's start)".into(),
        )
        .into());
    }
    if let Some(u) = units.iter().find(|u| run_of(&queues[u.queue], u).is_none()) {
        return Err(Error::Setup(format!("--segment {}: not inside one run of AUX buffer {} without a gap", u.id, u.id.idx)).into());
    }
    match image {
        ImageMode::Timeline => units_over(plan, queues, units, itrace, (&Interval(tl), true, tl), emit),
        ImageMode::PerfStyle => units_over(plan, queues, units, itrace, (&PerfStyle(tl), false, tl), emit),
        ImageMode::Static => units_over(plan, queues, units, itrace, (&Static(code), false, tl), emit),
    }
}

/// [`decode_units`] over `code`, working out instructions' latest times
/// when `upper_bounds`; `tl` is the code timeline.
fn units_over<C: CodeSource + Sync, E: From<Error>>(
    plan: Plan<'_>,
    queues: &[Queue],
    units: &[Unit],
    itrace: &Itrace,
    (code, upper_bounds, tl): (&C, bool, &CodeTimeline),
    emit: &mut impl FnMut(&Out) -> Result<(), E>,
) -> Result<(), E> {
    let par = ParallelFlow::new(decoder(plan.setup, code, upper_bounds));
    let decode_one = |queue: usize, lanes: &Lanes| {
        let q = &queues[queue];
        let mine = units.iter().filter(|u| u.queue == queue);
        if !(itrace.branches || itrace.instructions) {
            for u in mine {
                let Some((base, piece)) = run_of(q, u) else { continue }; // (checked above)
                let segment = || ErrorLines::new(queue, q.cpu, None);
                par.run_segments_in(piece, base, u.id.start - base..u.id.end - base, segment, |mut seg| seg.finish(lanes));
            }
            return;
        }
        let cuts = Cuts::of(q);
        // (Units from `pt_unit` start and end at segments' edges.)
        let ranges: Vec<Range<usize>> = mine.filter_map(|u| cuts.range(u)).collect();
        // Units one after the other decode as one.
        for run in ranges.chunk_by(|a, b| a.end == b.start) {
            let (first, last) = (run[0].start, run[run.len() - 1].end);
            let fresh = || {
                let mut sink = Collector::new(queue, q.cpu, itrace, (code, tl), lanes, plan.setup.filter);
                sink.keep_lines(false);
                sink
            };
            // Back from the unit's start until the state lines need is settled.
            let mut sink = fresh();
            let mut back = 1;
            let mut from = first;
            while from > 0 {
                from = first.saturating_sub(back);
                sink = fresh();
                cuts.run(&par, from..first, &mut sink);
                if sink.settled() {
                    break;
                }
                back *= 2;
            }
            sink.keep_lines(true);
            cuts.run(&par, first..last, &mut sink);
            sink.keep_lines(false);
            cuts.run(&par, last..(last + 1).min(cuts.0.len()), &mut sink);
            sink.finish();
        }
    };
    crate::pool::decode_merged(queues.len(), decode_one, emit)
}

/// A queue's PSB segments, run after run: each segment's run's offset in
/// the queue's trace, and its bytes there.
struct Cuts<'q>(Vec<(usize, &'q [u8], Range<usize>)>);

impl<'q> Cuts<'q> {
    fn of(q: &'q Queue) -> Self {
        Cuts(q.pieces().flat_map(|(base, piece)| psb_segments(piece).map(move |(s, e)| (base, piece, base + s..base + e))).collect())
    }

    /// The segments (their indices) that make up `u`, when it starts and
    /// ends at segments' edges in one run without a gap.
    fn range(&self, u: &Unit) -> Option<Range<usize>> {
        let first = self.0.binary_search_by_key(&u.id.start, |c| c.2.start).ok()?;
        let last = self.0.binary_search_by_key(&u.id.end, |c| c.2.end).ok()?;
        (first <= last && self.0[first].0 == self.0[last].0).then_some(first..last + 1)
    }

    /// Decodes segments `which` into `sink`, each run's on its own, as the
    /// whole decode decodes each run.
    fn run<'a, C: CodeSource + Sync>(&self, par: &ParallelFlow<'a, C>, which: Range<usize>, sink: &mut Collector<'_, C>)
    where
        'q: 'a,
    {
        let cuts = &self.0[which];
        for same in cuts.chunk_by(|a, b| a.0 == b.0) {
            let (base, piece) = (same[0].0, same[0].1);
            par.run_with_in(piece, base, same[0].2.start - base..same[same.len() - 1].2.start - base + 1, sink);
        }
    }
}

/// The run of `q` without a gap that holds `u`, and where it starts.
fn run_of<'q>(q: &'q Queue, u: &Unit) -> Option<(usize, &'q [u8])> {
    q.pieces().find(|(base, p)| *base <= u.id.start && u.id.end <= base + p.len())
}
