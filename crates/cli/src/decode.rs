//! `poketrace decode`: Intel PT or CoreSight ETMv4 in a perf.data
//! directory, decoded over the code timeline, printed like `perf script --itrace`.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use codeimage::CodeTimeline;
use perfdata::PerfFile;
use tracedecode::pt::Plan;
use tracedecode::setup::PtSetup;
use tracedecode::units::{self, Unit, UnitId};
use tracedecode::{ImageMode, Input, Itrace, Kind, Out, Summary, Trace};

use crate::prepare::Prepared;
use crate::print::Layout;
use crate::text::Text;

/// What `decode` prints and from which code image.
pub struct Options {
    pub itrace: Itrace,
    pub image: ImageMode,
    pub layout: Layout,
    /// Where the files of user mappings are looked up.
    pub user: codeimage::UserCode,
    /// Counts instead of lines (`--stat`).
    pub stat: bool,
    /// Threads for a buffer's PSB segments (`--threads`; default: the cores).
    pub threads: Option<u32>,
    /// Only these units (`--segment`); all when empty.
    pub segments: Vec<UnitId>,
}

/// Exit status 1 when the output is known to be incomplete ([`Summary::incomplete`]).
pub fn run(input: &Path, opts: &Options, out: &mut impl Write) -> Result<i32> {
    let (itrace, image) = (&opts.itrace, opts.image);
    let segments = segment_threads(opts.threads);
    let file = PerfFile::open(input)?;
    let (Input { trace, time_conv, queues: aux, threads, breaks, .. }, sideband) = crate::prepare::read_input(&file, |_| ())?;
    let info = trace.context("no Intel PT or CoreSight AUXTRACE_INFO in the input")?;
    if matches!(info, Trace::CoreSight(_)) && image == ImageMode::PerfStyle {
        bail!("--image perf on CoreSight ETMv4 input: perf's model is decoded for Intel PT only; use --image timeline or --image static");
    }
    let Prepared { symbols, idioms, bare, built } = Prepared::read(&file, sideband, image, &opts.user, "decode")?;
    let mut summary = Summary {
        bad_records: built.errors.len() as u64,
        lost: built.losses.lost_records(),
        truncated: built.losses.aux_damaged(),
        gaps: breaks.len() as u64,
        ..Summary::default()
    };
    let tl: &CodeTimeline = &built.timeline;
    let code = bare.as_ref().unwrap_or(tl);
    if opts.stat {
        let Trace::IntelPt(info) = &info else { bail!("--stat: counts are made for Intel PT only") };
        let setup = PtSetup::new(&file, info, idioms);
        let counted = tracedecode::pt::stat(Plan { setup: &setup, segments }, &aux, image, tl, code)?;
        crate::print::stat::write_stat(out, &counted, matches!(opts.layout, Layout::Json))?;
        report_damage(&breaks, &built.losses);
        summary.add(&counted);
        eprintln!("poketrace decode: {summary}, image {}", image_name(image));
        return Ok(if summary.incomplete() { 1 } else { 0 });
    }
    summary.buffers = aux.len() as u64;
    let mut buf = Text::with_capacity(2 * TEXT_FLUSH);
    let mut progress = crate::progress::Progress::over_file("decode", &file);
    // Who ran the last line, for its queue and CPU and the times that holds for.
    let mut last_who = (usize::MAX, 0, 0..0, None);
    let mut memo = crate::print::text::Memo::default();
    let mut emit = |l: &Out| -> Result<()> {
        progress.line(l.time);
        let printed = itrace.errors || !matches!(l.kind, Kind::Error { .. });
        summary.observe(l, printed);
        if !printed {
            return Ok(());
        }
        if (last_who.0, last_who.1) != (l.queue, l.cpu) || !last_who.2.contains(&l.time) {
            let (who, span) = threads.at_span(&aux[l.queue], l.cpu, l.time);
            last_who = (l.queue, l.cpu, span, who);
        }
        let who = last_who.3;
        opts.layout.write(&mut buf, l, who, &symbols, &mut memo);
        if buf.as_bytes().len() >= TEXT_FLUSH {
            out.write_all(buf.as_bytes())?;
            buf.clear();
        }
        Ok(())
    };
    // All buffers in time order, as perf merges its queues.
    match &info {
        Trace::IntelPt(info) => {
            let setup = PtSetup::new(&file, info, idioms);
            let plan = Plan { setup: &setup, segments };
            if opts.segments.is_empty() {
                tracedecode::pt::decode(plan, &aux, itrace, image, tl, code, &mut emit)?
            } else {
                let units = chosen_units(&opts.segments, |id| units::pt_unit(&aux, id, &setup.cfg.time))?;
                tracedecode::pt::decode_units(plan, &aux, &units, itrace, image, tl, code, &mut emit)?
            }
        }
        Trace::CoreSight(info) if opts.segments.is_empty() => tracedecode::cs::decode(info, time_conv.as_ref(), &aux, itrace, code, &mut emit)?,
        Trace::CoreSight(info) => {
            let units = chosen_units(&opts.segments, |id| units::cs_unit(&aux, id))?;
            tracedecode::cs::decode_units(info, time_conv.as_ref(), &aux, &units, itrace, code, &mut emit)?
        }
    }
    progress.finish();
    out.write_all(buf.as_bytes())?;
    report_damage(&breaks, &built.losses);
    eprintln!("poketrace decode: {summary}, image {}", image_name(image));
    Ok(if summary.incomplete() { 1 } else { 0 })
}

/// The units `ids` name, in trace order, each checked by `unit` to be a
/// unit of the input, and checked not to overlap.
pub fn chosen_units(ids: &[UnitId], unit: impl Fn(UnitId) -> Result<Unit, String>) -> Result<Vec<Unit>> {
    let mut chosen = ids.iter().map(|&id| unit(id).map_err(anyhow::Error::msg)).collect::<Result<Vec<Unit>>>()?;
    chosen.sort_by_key(|u| u.id);
    chosen.dedup_by_key(|u| u.id);
    if let Some(w) = chosen.windows(2).find(|w| w[0].id.idx == w[1].id.idx && w[1].id.start < w[0].id.end) {
        bail!("--segment {} and {} overlap", w[0].id, w[1].id);
    }
    Ok(chosen)
}

/// Gaps in the AUX data and lost records, on stderr (the first few of each).
fn report_damage(breaks: &[tracedecode::AuxBreak], losses: &perfdata::Losses) {
    for b in breaks.iter().take(MAX_REPORTED) {
        eprintln!("poketrace decode: {}", b.describe());
    }
    if breaks.len() > MAX_REPORTED {
        eprintln!("poketrace decode: ... and {} more gaps or overlaps in the AUX data", breaks.len() - MAX_REPORTED);
    }
    for line in losses.report(MAX_REPORTED) {
        eprintln!("poketrace decode: the recording is incomplete: {line}");
    }
}

/// Gaps named on stderr at most (then a count).
const MAX_REPORTED: usize = 10;

/// Whether buffers are cut at their PSBs, on a pool of `threads` (or as
/// many as the cores): not with one.
pub(crate) fn segment_threads(threads: Option<u32>) -> bool {
    let threads = threads.map_or_else(|| std::thread::available_parallelism().map_or(1, usize::from), |n| n as usize);
    // (The pool may have been made already, as large as the cores.)
    threads > 1 && (rayon::ThreadPoolBuilder::new().num_threads(threads).build_global().is_ok() || rayon::current_num_threads() > 1)
}

/// The `--image` name of a mode.
fn image_name(image: ImageMode) -> String {
    image.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
}

/// Bytes of lines kept before they are written out.
const TEXT_FLUSH: usize = 1 << 16;
