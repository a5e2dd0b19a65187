//! `poketrace report`: one self-contained HTML page (no network) of a
//! perf.data directory: the poke history per site and each CPU's trace
//! coverage on one time axis, and the summary tables (pokes per kind and
//! site, decode per CPU, and for simulated runs `check`'s table).

mod axis;
mod coverage;
mod html;
mod pokes;

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use perfdata::PerfFile;
use tracedecode::{Input, Out};

use crate::symbols::Symbolizer;
use coverage::Coverage;

/// Writes the report of `input` to `output`, with `check`'s reports when
/// given (else computed for a simulated run). Exit status: 0, or 1 when the
/// report is incomplete (decode errors, lost data, no trace).
pub fn run(input: &Path, output: &Path, check: Option<&[sim::check::ModeReport]>) -> Result<i32> {
    let file = PerfFile::open(input)?;
    let mut symbols = Symbolizer::for_input(&file, None)?;
    let mut reader = pokes::PokesReader::new(&file, &mut symbols);
    let (Input { trace, time_conv, queues, bad_records, .. }, sideband) = crate::prepare::read_input(&file, |r| reader.observe(r))?;
    let pokes = reader.finish(bad_records.len() as u64);
    let (first, last) = pokes.span.unwrap_or((0, 0));
    let mut cov = Coverage::new(first);
    cov.axis.bin(last);
    let mut problems: Vec<String> = Vec::new();
    if pokes.bad_records > 0 {
        problems.push(format!("{} records could not be read", pokes.bad_records));
    }
    problems.extend(crate::lines::input_problems(trace.as_ref(), time_conv.as_ref(), &queues));
    if let Some(trace) = &trace {
        let mut progress = crate::progress::Progress::over("report", first, last);
        let mut emit = |l: &Out| {
            progress.line(l.time);
            cov.line(l);
            Ok(())
        };
        problems.extend(crate::lines::decode_all(&file, trace, time_conv.as_ref(), &queues, sideband, &mut emit)?);
        progress.finish();
    }
    for l in &pokes.losses {
        cov.loss(l.cpu, l.from, l.at);
    }
    if !pokes.losses.is_empty() {
        problems.push(format!("{} LOST or damaged AUX records", pokes.losses.len()));
    }
    let errors: u64 = cov.totals.values().map(|c| c.errors).sum();
    if errors > 0 {
        problems.push(format!("{errors} decode errors"));
    }
    let check = match check {
        Some(reports) => Some(check_rows(reports)),
        None if input.join("truth").is_dir() => Some(check_rows(&sim::check::check(input)?)),
        None => None,
    };
    let mut out = std::io::BufWriter::new(std::fs::File::create(output).with_context(|| format!("creating {}", output.display()))?);
    html::write(&mut out, &input.display().to_string(), &pokes, &cov, check.as_ref(), &problems)?;
    out.flush()?;
    eprintln!(
        "poketrace report: {} pokes at {} sites, {} CPUs, written to {}",
        pokes.pokes.len(),
        pokes.sites.len(),
        cov.rows.len(),
        output.display()
    );
    for p in &problems {
        eprintln!("poketrace report: {p}");
    }
    Ok(if problems.is_empty() { 0 } else { 1 })
}

/// `check`'s totals per mode.
fn check_rows(reports: &[sim::check::ModeReport]) -> html::CheckRows {
    reports
        .iter()
        .map(|r| {
            let t = &r.total;
            (r.mode.name().to_string(), [t.instructions, t.correct, t.wrong, t.missing, t.errors, t.uncertain])
        })
        .collect()
}
