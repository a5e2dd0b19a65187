//! Intel PT units decoded apart (`decode --segment`): each unit's PSB
//! segments decoded as within the whole buffer, for the lines that need no
//! state from the segment before (errors only, `--itrace=e`).

use codeimage::window::{CodeSource, Interval, PerfStyle, Static};
use codeimage::CodeTimeline;
use intel_pt::parallel::ParallelFlow;

use super::errors::ErrorLines;
use super::plan::{decoder, Plan};
use crate::lanes::Lanes;
use crate::line::Out;
use crate::mode::ImageMode;
use crate::queue::Queue;
use crate::units::Unit;
use crate::Error;

/// The error lines of `units` (from [`crate::units::pt_unit`]), in the
/// (time, queue) order [`super::decode`] gives: for units that together
/// are a buffer's, its lines, and for units one after the other, in order,
/// the lines of each. Refused where a unit's segments would not decode as
/// within the whole buffer: PSB+ without a TSC. A unit decodes within its
/// buffer's run without a gap, as the whole decode decodes each run.
pub fn decode_units<E: From<Error>>(
    plan: Plan<'_>,
    queues: &[Queue],
    units: &[Unit],
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
    if let Some(u) = units.iter().find(|u| run_of(&queues[u.queue], u).is_none()) {
        return Err(Error::Setup(format!("--segment {}: not inside one run of AUX buffer {} without a gap", u.id, u.id.idx)).into());
    }
    match image {
        ImageMode::Timeline => units_over(plan, queues, units, &Interval(tl), true, emit),
        ImageMode::PerfStyle => units_over(plan, queues, units, &PerfStyle(tl), false, emit),
        ImageMode::Static => units_over(plan, queues, units, &Static(code), false, emit),
    }
}

/// [`decode_units`] over `code`.
fn units_over<C: CodeSource + Sync, E: From<Error>>(
    plan: Plan<'_>,
    queues: &[Queue],
    units: &[Unit],
    code: &C,
    upper_bounds: bool,
    emit: &mut impl FnMut(&Out) -> Result<(), E>,
) -> Result<(), E> {
    let par = ParallelFlow::new(decoder(plan.setup, code, upper_bounds));
    let decode_one = |queue: usize, lanes: &Lanes| {
        let q = &queues[queue];
        for u in units.iter().filter(|u| u.queue == queue) {
            let Some((base, piece)) = run_of(q, u) else { continue }; // (checked above)
            let segment = || ErrorLines::new(queue, q.cpu, None);
            par.run_segments_in(piece, base, u.id.start - base..u.id.end - base, segment, |mut seg| seg.finish(lanes));
        }
    };
    crate::pool::decode_merged(queues.len(), decode_one, emit)
}

/// The run of `q` without a gap that holds `u`, and where it starts.
fn run_of<'q>(q: &'q Queue, u: &Unit) -> Option<(usize, &'q [u8])> {
    q.pieces().find(|(base, p)| *base <= u.id.start && u.id.end <= base + p.len())
}
