//! Every line of a trace (branches, instructions, errors) decoded over the
//! code timeline, in time order: what `timeline` and `report` draw from.

use anyhow::Result;
use codeimage::{BaseImage, Sideband, UserCode};
use perfdata::{PerfFile, Record, RecordBody, TimeConv};
use tracedecode::pt::Plan;
use tracedecode::setup::{self, PtSetup};
use tracedecode::{ImageMode, Itrace, Out, Queue, Trace};

/// Decodes `queues` of `trace` over the code `sideband` gives (read with
/// them, [`crate::prepare::read_input`]) and passes each line to `emit`.
/// Returns the problems met: code image errors, and a decode that stopped part-way.
pub fn decode_all(
    file: &PerfFile,
    trace: &Trace,
    time_conv: Option<&TimeConv>,
    queues: &[Queue],
    sideband: Sideband<'_>,
    emit: &mut impl FnMut(&Out) -> Result<()>,
) -> Result<Vec<String>> {
    let itrace = Itrace { branches: true, instructions: true, errors: true, period: 1, insn_bytes: false };
    let mut base = BaseImage::new();
    codeimage::add_base_mapped(file, &sideband.mappings, &mut base, &UserCode::default())?;
    let built = sideband.timeline(base);
    let mut problems: Vec<String> = built.errors.iter().map(|e| format!("code image: {e}")).collect();
    let tl = &built.timeline;
    let decoded = match trace {
        Trace::IntelPt(info) => {
            let setup = PtSetup::new(file, info, setup::kernel_idioms(file)?);
            tracedecode::pt::decode(Plan { setup: &setup, segments: false }, queues, &itrace, ImageMode::Timeline, tl, tl, emit)
        }
        Trace::CoreSight(info) => tracedecode::cs::decode(info, time_conv, queues, &itrace, tl, emit),
    };
    if let Err(e) = decoded {
        problems.push(format!("decode stopped: {e:#}"));
    }
    Ok(problems)
}

/// What is wrong with the input before decoding: no trace, no AUX data,
/// CoreSight timestamps that need a TIME_CONV the input lacks.
pub fn input_problems(trace: Option<&Trace>, time_conv: Option<&TimeConv>, queues: &[Queue]) -> Option<String> {
    match trace {
        None => Some("no Intel PT or CoreSight AUXTRACE_INFO: nothing to decode".into()),
        Some(_) if queues.iter().all(|q| q.trace.is_empty()) => Some("no AUX trace data (no AUXTRACE records)".into()),
        Some(Trace::CoreSight(info)) if time_conv.is_none() && info.cpus.iter().any(|c| c.etmv4().and_then(|r| r.ts_source) == Some(1)) => {
            Some("no TIME_CONV record: CoreSight timestamps are not converted to perf time, so times are the trace's own".into())
        }
        Some(_) => None,
    }
}

/// Whether `r` happens during the session (trace starts, AUX data, pokes,
/// ksymbols, losses, switches): not the records perf synthesizes at time 0.
pub fn in_session(r: &Record<'_>) -> bool {
    matches!(
        r.body,
        RecordBody::ItraceStart(_)
            | RecordBody::Aux(_)
            | RecordBody::TextPoke(_)
            | RecordBody::Ksymbol(_)
            | RecordBody::Lost(_)
            | RecordBody::Switch
            | RecordBody::SwitchCpuWide(_)
    )
}

/// First and last times of the session's records, as they are seen.
#[derive(Clone, Copy, Default)]
pub struct SessionSpan(pub Option<(u64, u64)>);

impl SessionSpan {
    pub fn observe(&mut self, r: &Record<'_>) {
        if let Some(t) = Some(r).filter(|r| in_session(r)).and_then(|r| r.sample_id.time) {
            self.0 = Some(self.0.map_or((t, t), |(a, b)| (a.min(t), b.max(t))));
        }
    }
}

/// First and last times of the session's records in `file` (a pass over them).
pub fn session_span(file: &PerfFile) -> Option<(u64, u64)> {
    let mut span = SessionSpan::default();
    file.records().flatten().for_each(|r| span.observe(&r));
    span.0
}
