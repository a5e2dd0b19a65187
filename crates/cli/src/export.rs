//! `poketrace export --format parquet`: the decode's lines of each unit of
//! `poketrace segments` as a Parquet file, with the pokes, KSYMBOL records
//! and units as tables beside them (layout and columns: the `export` crate).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ::export::{BranchRow, BranchWriter};
use anyhow::{bail, Context, Result};
use arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Int32Builder, StringBuilder, StringDictionaryBuilder, UInt16Builder, UInt32Builder, UInt64Builder,
};
use arrow::datatypes::Int32Type;
use arrow::record_batch::RecordBatch;
use codeimage::CodeTimeline;
use isa::Arch;
use perfdata::{Ksymbol, PerfFile, Record, RecordBody, TextPoke};
use tracedecode::pt::Plan;
use tracedecode::setup::PtSetup;
use tracedecode::units::{self, Unit, UnitId};
use tracedecode::{ImageMode, Input, Itrace, Kind, Out, Queue, Summary, Threads, Trace};

use crate::prepare::Prepared;
use crate::symbols::Symbolizer;

/// The tables `export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Table {
    Branches,
    Pokes,
    Ksymbols,
    Segments,
}

/// What `export` writes, and from which units.
pub struct Options {
    /// b: branch rows, i: a row per instruction; error rows always.
    pub itrace: Itrace,
    pub image: ImageMode,
    pub user: codeimage::UserCode,
    /// Only these units; all when empty.
    pub segments: Vec<UnitId>,
    /// Bytes a unit holds about (as `segments --target-bytes`).
    pub target: usize,
    /// The tables to write; `None`: all without `--segment`, else branches.
    pub tables: Option<Vec<Table>>,
}

/// The input read and its code timeline built, shared by the workers.
struct Decoding<'a> {
    info: Trace,
    time_conv: Option<perfdata::TimeConv>,
    aux: Vec<Queue<'a>>,
    threads: Threads,
    tl: CodeTimeline,
    bare: Option<CodeTimeline>,
    setup: Option<PtSetup>,
    opts: &'a Options,
}

/// Exit status 1 when the output is known to be incomplete, as `decode`'s.
pub fn run(input: &Path, out_dir: &Path, opts: &Options) -> Result<i32> {
    let file = PerfFile::open(input)?;
    let tables = opts.tables.clone().unwrap_or_else(|| {
        if opts.segments.is_empty() {
            vec![Table::Branches, Table::Pokes, Table::Ksymbols, Table::Segments]
        } else {
            vec![Table::Branches]
        }
    });
    let side_wanted = tables.contains(&Table::Pokes) || tables.contains(&Table::Ksymbols);
    let mut side = Vec::new();
    let (Input { trace, time_conv, queues: aux, threads, breaks, .. }, sideband) = crate::prepare::read_input(&file, |r| {
        if side_wanted {
            side.extend(SideRecord::of(r));
        }
    })?;
    let info = trace.context("no Intel PT or CoreSight AUXTRACE_INFO in the input")?;
    if matches!(info, Trace::CoreSight(_)) && opts.image == ImageMode::PerfStyle {
        bail!("--image perf on CoreSight ETMv4 input: perf's model is decoded for Intel PT only; use --image timeline or --image static");
    }
    let Prepared { symbols, idioms, bare, built } = Prepared::read(&file, sideband, opts.image, &opts.user, "export")?;
    let setup = match &info {
        Trace::IntelPt(info) => Some(PtSetup::new(&file, info, idioms)),
        Trace::CoreSight(_) => None,
    };
    let all = match &setup {
        Some(s) => units::pt_units(&aux, opts.target, &s.cfg.time),
        None => units::whole_runs(&aux),
    };
    let chosen = if opts.segments.is_empty() {
        all.clone()
    } else {
        crate::decode::chosen_units(&opts.segments, |id| match &setup {
            Some(s) => units::pt_unit(&aux, id, &s.cfg.time),
            None => units::cs_unit(&aux, id),
        })?
    };
    let mut summary = Summary {
        buffers: aux.len() as u64,
        bad_records: built.errors.len() as u64,
        lost: built.losses.lost_records(),
        truncated: built.losses.aux_damaged(),
        gaps: breaks.len() as u64,
        ..Summary::default()
    };
    let d = Decoding { info, time_conv, aux, threads, tl: built.timeline, bare, setup, opts };
    let mut files = 0;
    if tables.contains(&Table::Branches) {
        let (counts, written) = d.export_units(&chosen, out_dir, &symbols)?;
        summary.lines = counts.lines;
        summary.errors = counts.errors;
        summary.uncertain = counts.uncertain;
        files += written.len();
        if opts.segments.is_empty() {
            remove_stale(&out_dir.join("branches"), &written)?;
        }
    }
    if side_wanted {
        let (pokes, ksymbols) = side_tables(&file, &side, Symbolizer::for_input(&file, None)?)?;
        for (table, batch, name) in [(Table::Pokes, pokes, "pokes.parquet"), (Table::Ksymbols, ksymbols, "ksymbols.parquet")] {
            if tables.contains(&table) {
                ::export::table::write(&out_dir.join(name), &batch)?;
                files += 1;
            }
        }
    }
    if tables.contains(&Table::Segments) {
        ::export::table::write(&out_dir.join("segments.parquet"), &segments_table(&all, &d.aux)?)?;
        files += 1;
    }
    for b in breaks.iter().take(10) {
        eprintln!("poketrace export: {}", b.describe());
    }
    for line in built.losses.report(10) {
        eprintln!("poketrace export: the recording is incomplete: {line}");
    }
    eprintln!("poketrace export: {summary}, {files} files written to {}", out_dir.display());
    Ok(if summary.incomplete() { 1 } else { 0 })
}

/// The counts of the lines exported.
#[derive(Default)]
struct Counts {
    lines: u64,
    errors: u64,
    uncertain: u64,
}

impl Decoding<'_> {
    /// Each unit's lines to its file, units shared out among threads (as
    /// many as the cores; each unit's segments also decode on rayon's
    /// pool). The files written, relative to `out_dir`.
    fn export_units(&self, units: &[Unit], out_dir: &Path, symbols: &Symbolizer) -> Result<(Counts, Vec<PathBuf>)> {
        let next = AtomicUsize::new(0);
        let total = Mutex::new((Counts::default(), Vec::new()));
        let failed: Mutex<Vec<String>> = Mutex::new(Vec::new());
        let workers = std::thread::available_parallelism().map_or(1, usize::from).min(units.len()).max(1);
        std::thread::scope(|s| -> Result<()> {
            let mut handles = Vec::new();
            for _ in 0..workers {
                let (symbols, next, total, failed) = (symbols.clone(), &next, &total, &failed);
                handles.push(s.spawn(move || -> Result<()> {
                    while let Some(u) = units.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let rel = branches_file(u, &self.aux[u.queue]);
                        match self.export_unit(u, &out_dir.join(&rel), &symbols) {
                            Ok(c) => {
                                let mut t = total.lock().unwrap_or_else(|e| e.into_inner());
                                t.0.lines += c.lines;
                                t.0.errors += c.errors;
                                t.0.uncertain += c.uncertain;
                                t.1.push(rel);
                            }
                            Err(e) => failed.lock().unwrap_or_else(|e| e.into_inner()).push(format!("segment {}: {e:#}", u.id)),
                        }
                    }
                    Ok(())
                }));
            }
            for h in handles {
                h.join().map_err(|_| anyhow::anyhow!("an export thread panicked"))??;
            }
            Ok(())
        })?;
        let failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some(first) = failed.first() {
            bail!("{} of {} units not written ({first})", failed.len(), units.len());
        }
        Ok(total.into_inner().unwrap_or_else(|e| e.into_inner()))
    }

    /// One unit's lines to `path` (renamed into place when complete).
    fn export_unit(&self, u: &Unit, path: &Path, symbols: &Symbolizer) -> Result<Counts> {
        let mut writer = BranchWriter::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut counts = Counts::default();
        let mut kind = String::new();
        let mut emit = |l: &Out| -> Result<()> {
            counts.lines += 1;
            let who = self.threads.at(&self.aux[l.queue], l.cpu, l.time);
            let sym = |addr: u64| symbols.lookup_at(addr, l.time).map(|(name, _)| name);
            let mut row = BranchRow { time: l.time, cpu: l.cpu as i32, pid: who.map(|w| w.0), tid: who.map(|w| w.1), ..BranchRow::default() };
            match &l.kind {
                Kind::Branch { from, to, flags, insns, .. } => {
                    kind.clear();
                    for word in flags.split(' ').filter(|w| !w.is_empty()) {
                        if !kind.is_empty() {
                            kind.push(' ');
                        }
                        kind.push_str(word);
                    }
                    row =
                        BranchRow { ip: Some(*from), addr: Some(*to), kind: &kind, sym: sym(*from), addr_sym: sym(*to), insns: Some(*insns), ..row };
                }
                Kind::Insn { ip, uncertain, .. } => {
                    counts.uncertain += u64::from(*uncertain);
                    row = BranchRow { ip: Some(*ip), kind: "insn", sym: sym(*ip), uncertain: *uncertain, ..row };
                }
                Kind::Error { ip, reason, .. } => {
                    counts.errors += 1;
                    row = BranchRow { ip: *ip, kind: "error", error: Some(reason), ..row };
                }
            }
            writer.push(&row).map_err(anyhow::Error::from)
        };
        let one = std::slice::from_ref(u);
        let (itrace, image, tl) = (&self.opts.itrace, self.opts.image, &self.tl);
        let code = self.bare.as_ref().unwrap_or(tl);
        match (&self.info, &self.setup) {
            (Trace::IntelPt(_), Some(setup)) => {
                tracedecode::pt::decode_units(Plan { setup, segments: true }, &self.aux, one, itrace, image, tl, code, &mut emit)?
            }
            (Trace::CoreSight(info), _) => tracedecode::cs::decode_units(info, self.time_conv.as_ref(), &self.aux, one, itrace, code, &mut emit)?,
            (Trace::IntelPt(_), None) => unreachable!("Intel PT input has its set-up"),
        }
        writer.finish()?;
        Ok(counts)
    }
}

/// Where a unit's file goes, relative to the output directory:
/// `branches/cpu=N/seg-ID.parquet`, or `tid=N` for a per-thread buffer.
pub fn branches_file(u: &Unit, q: &Queue) -> PathBuf {
    let part = if q.cpu == u32::MAX { format!("tid={}", q.thread.unwrap_or(-1)) } else { format!("cpu={}", q.cpu) };
    Path::new("branches").join(part).join(format!("seg-{}.parquet", u.id))
}

/// Removes the `seg-*.parquet` files under `dir`'s partitions that are not
/// `written` (relative to `dir`'s parent): those of an earlier export with
/// other units.
fn remove_stale(dir: &Path, written: &[PathBuf]) -> Result<()> {
    let Some(out) = dir.parent() else { return Ok(()) };
    let keep: HashSet<PathBuf> = written.iter().map(|p| out.join(p)).collect();
    let Ok(parts) = std::fs::read_dir(dir) else { return Ok(()) };
    for part in parts.flatten().filter(|p| p.path().is_dir()) {
        for f in std::fs::read_dir(part.path())?.flatten() {
            let (path, name) = (f.path(), f.file_name());
            let name = name.to_string_lossy();
            if name.starts_with("seg-") && name.ends_with(".parquet") && !keep.contains(&path) {
                std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            }
        }
    }
    Ok(())
}

/// A TEXT_POKE or KSYMBOL record, kept from the input's pass for the side tables.
enum SideRecord<'f> {
    Poke { time: Option<u64>, cpu: Option<u32>, poke: TextPoke<'f> },
    Ksymbol { time: Option<u64>, ksymbol: Ksymbol<'f> },
}

impl<'f> SideRecord<'f> {
    fn of(r: &Record<'f>) -> Option<SideRecord<'f>> {
        match &r.body {
            RecordBody::TextPoke(p) => Some(SideRecord::Poke { time: r.sample_id.time, cpu: r.sample_id.cpu, poke: *p }),
            RecordBody::Ksymbol(k) => Some(SideRecord::Ksymbol { time: r.sample_id.time, ksymbol: k.clone() }),
            _ => None,
        }
    }
}

/// The TEXT_POKE and KSYMBOL records (`side`, in time order) as tables; a
/// poke's site named as `poketrace pokes` names it (KSYMBOL names from their record on).
fn side_tables(file: &PerfFile, side: &[SideRecord<'_>], mut symbols: Symbolizer) -> Result<(RecordBatch, RecordBatch)> {
    let arch = match file.features().arch.as_deref() {
        Some("aarch64" | "arm64") => Arch::Aarch64,
        _ => Arch::X86_64,
    };
    let (mut p_time, mut p_cpu, mut p_addr, mut p_sym) = (UInt64Builder::new(), Int32Builder::new(), UInt64Builder::new(), StringBuilder::new());
    let (mut p_kind, mut p_old, mut p_new) = (StringDictionaryBuilder::<Int32Type>::new(), BinaryBuilder::new(), BinaryBuilder::new());
    let (mut k_time, mut k_addr, mut k_len, mut k_type) = (UInt64Builder::new(), UInt64Builder::new(), UInt32Builder::new(), UInt16Builder::new());
    let (mut k_unreg, mut k_name) = (BooleanBuilder::new(), StringBuilder::new());
    for r in side {
        match r {
            SideRecord::Poke { time, cpu, poke: p } => {
                p_time.append_option(*time);
                p_cpu.append_option(cpu.map(|c| c as i32));
                p_addr.append_value(p.addr);
                p_sym.append_option(Some(symbols.describe(p.addr)).filter(|s| !s.is_empty()));
                p_kind.append_value(isa::classify_poke(arch, p.addr, p.old, p.new, symbols.name(p.addr).as_deref()).name());
                p_old.append_value(p.old);
                p_new.append_value(p.new);
            }
            SideRecord::Ksymbol { time, ksymbol: k } => {
                symbols.apply(k);
                k_time.append_option(*time);
                k_addr.append_value(k.addr);
                k_len.append_value(k.len);
                k_type.append_value(k.ksym_type);
                k_unreg.append_value(k.flags & perfdata::abi::KSYMBOL_FLAG_UNREGISTER != 0);
                k_name.append_value(String::from_utf8_lossy(k.name));
            }
        }
    }
    let pokes: Vec<(&str, ArrayRef)> = vec![
        ("time", Arc::new(p_time.finish())),
        ("cpu", Arc::new(p_cpu.finish())),
        ("addr", Arc::new(p_addr.finish())),
        ("sym", Arc::new(p_sym.finish())),
        ("kind", Arc::new(p_kind.finish())),
        ("old", Arc::new(p_old.finish())),
        ("new", Arc::new(p_new.finish())),
    ];
    let ksymbols: Vec<(&str, ArrayRef)> = vec![
        ("time", Arc::new(k_time.finish())),
        ("addr", Arc::new(k_addr.finish())),
        ("len", Arc::new(k_len.finish())),
        ("ksym_type", Arc::new(k_type.finish())),
        ("unregister", Arc::new(k_unreg.finish())),
        ("name", Arc::new(k_name.finish())),
    ];
    Ok((RecordBatch::try_from_iter(pokes)?, RecordBatch::try_from_iter(ksymbols)?))
}

/// The units as a table, as `segments --json` lists them, with each one's file.
fn segments_table(units: &[Unit], aux: &[Queue]) -> Result<RecordBatch> {
    let mut id = StringBuilder::new();
    let (mut buffer, mut cpu, mut tid) = (UInt32Builder::new(), Int32Builder::new(), Int32Builder::new());
    let (mut start, mut end, mut bytes, mut syncs) = (UInt64Builder::new(), UInt64Builder::new(), UInt64Builder::new(), UInt64Builder::new());
    let (mut from, mut to, mut file) = (UInt64Builder::new(), UInt64Builder::new(), StringBuilder::new());
    for u in units {
        let q = &aux[u.queue];
        id.append_value(u.id.to_string());
        buffer.append_value(u.id.idx);
        cpu.append_option((q.cpu != u32::MAX).then_some(q.cpu as i32));
        tid.append_option(q.thread);
        start.append_value(u.id.start as u64);
        end.append_value(u.id.end as u64);
        bytes.append_value(u.bytes() as u64);
        syncs.append_value(u.syncs as u64);
        from.append_option(u.time.0);
        to.append_option(u.time.1);
        file.append_value(branches_file(u, q).to_string_lossy());
    }
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("id", Arc::new(id.finish())),
        ("buffer", Arc::new(buffer.finish())),
        ("cpu", Arc::new(cpu.finish())),
        ("tid", Arc::new(tid.finish())),
        ("start", Arc::new(start.finish())),
        ("end", Arc::new(end.finish())),
        ("bytes", Arc::new(bytes.finish())),
        ("syncs", Arc::new(syncs.finish())),
        ("time_from", Arc::new(from.finish())),
        ("time_to", Arc::new(to.finish())),
        ("file", Arc::new(file.finish())),
    ];
    Ok(RecordBatch::try_from_iter(columns)?)
}
