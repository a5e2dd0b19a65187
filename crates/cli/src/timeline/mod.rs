//! `poketrace timeline`: Intel PT or CoreSight ETMv4 in a perf.data
//! directory as a call-stack timeline in the Trace Event Format (Perfetto,
//! chrome://tracing, speedscope), with the code changes and the decode's
//! problems on tracks of their own. Problems with the input go on the
//! decode track too: the file is written whatever the input.

mod builder;
mod cpu;
mod filter;
mod names;
mod proto;
mod sideband;
mod stack;
mod tef;
mod tracks;

use std::path::Path;

use anyhow::Result;
use perfdata::PerfFile;
use serde_json::json;
use tracedecode::{Input, Out};

pub use filter::Filter;

use builder::Builder;
use tef::TefWriter;

/// Writes the timeline of `input` to `output`. Exit status: 0, or 1 when
/// the timeline is incomplete (decode errors, lost data, no trace, no
/// TIME_CONV where the trace's times need it), or 2 when the input could
/// not be read at all (the file then holds only that).
pub fn run(input: &Path, output: &Path, filter: &Filter) -> Result<i32> {
    let file = match PerfFile::open(input) {
        Ok(f) => f,
        Err(e) => {
            let mut w = TefWriter::create(output, 0)?;
            w.name_track(tracks::INPUT, Some("input"), Some("decode"), Some(-2))?;
            let what = format!("cannot read {}: {e}", input.display());
            w.instant(tracks::INPUT, 0, &what, "input", &json!({}))?;
            w.finish()?;
            eprintln!("poketrace timeline: {what}; {} holds only this", output.display());
            return Ok(2);
        }
    };
    // The input, its side-band and the session's span in one pass over the records.
    let mut span = crate::lines::SessionSpan::default();
    let (Input { trace, time_conv, queues, threads, breaks, .. }, sideband) = crate::prepare::read_input(&file, |r| span.observe(r))?;
    let span = span.0;
    // Times start at the whole second before the session's first record.
    let base = span.map_or(0, |(first, _)| first / 1_000_000_000 * 1_000_000_000);
    let mut w = TefWriter::create(output, base)?;
    w.name_track(tracks::INPUT, Some("input"), Some("decode"), Some(-2))?;
    let mut problems: Vec<String> = Vec::new();
    let mut symbols = crate::symbols::Symbolizer::for_input(&file, None)?;
    let sb = sideband::read(&file, &mut symbols, &mut w)?;
    let (t0, t1) = span.unwrap_or((base, base));
    let mut decode_symbols = crate::symbols::Symbolizer::for_input(&file, None)?;
    decode_symbols.add_user_mappings(&sideband.mappings, &crate::symbols::user_code(None));
    let queues: Vec<_> = queues.into_iter().filter(|q| q.cpu == u32::MAX || filter.cpu(q.cpu)).collect();
    if sb.bad_records > 0 {
        problems.push(format!("{} records could not be read", sb.bad_records));
    }
    if !breaks.is_empty() {
        problems.push(format!("{} gaps or overlaps in the AUX data: each side decoded on its own, never across", breaks.len()));
    }
    if sb.lost_records > 0 || sb.aux_damaged > 0 {
        problems.push(format!("{} records lost, {} AUX records damaged (see the lost data tracks)", sb.lost_records, sb.aux_damaged));
    }
    problems.extend(crate::lines::input_problems(trace.as_ref(), time_conv.as_ref(), &queues));
    for p in &problems {
        w.instant(tracks::INPUT, t0, p, "input", &json!({}))?;
    }
    let mut b = Builder::new(w, filter, &threads, &queues, decode_symbols, sb.ksymbols);
    let mut progress = crate::progress::Progress::over("timeline", t0, t1);
    if let Some(trace) = &trace {
        let mut emit = |l: &Out| {
            progress.line(l.time);
            b.line(l)
        };
        problems.extend(crate::lines::decode_all(&file, trace, time_conv.as_ref(), &queues, sideband, &mut emit)?);
    }
    progress.finish();
    let (w, counts, restarts) = b.finish()?;
    if counts.errors > 0 {
        problems.push(format!("{} decode errors ({} overflows)", counts.errors, counts.overflows));
    }
    eprintln!(
        "poketrace timeline: {} lines, {} threads, {} pokes, {} decode errors, {} uncertain instructions, {} stack restarts, {} events written to {}",
        counts.lines,
        counts.threads,
        sb.pokes,
        counts.errors,
        counts.uncertain,
        restarts,
        w.events,
        output.display()
    );
    if w.clamped > 0 {
        eprintln!("poketrace timeline: {} events came before their track's last and were moved to its time", w.clamped);
    }
    for p in &problems {
        eprintln!("poketrace timeline: {p}");
    }
    w.finish()?;
    Ok(if problems.is_empty() { 0 } else { 1 })
}
