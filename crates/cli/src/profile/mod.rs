//! `poketrace profile`: an Intel PT or CoreSight trace counted into the
//! inputs of profile-guided optimizers (BOLT's pre-aggregated data and
//! `.fdata`, llvm-profgen's unsymbolized profile), each branch counted as
//! the code that ran then; what ran in uncertain instructions goes to a
//! side file.

mod cs;
mod fdata;
pub mod inject;
mod radix;
mod sites;
mod space;
mod staging;
mod symtab;
mod text;
mod write;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use codeimage::BaseImage;
use perfdata::PerfFile;
use tracedecode::profile::{PairCounts, Profile};
use tracedecode::pt::Plan;
use tracedecode::setup::{self, PtSetup};
use tracedecode::{ImageMode, Input, Queue, Trace};

use crate::timeline::Filter;
use space::Space;
use write::{Mapped, Sorted};

/// The profile formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// BOLT's pre-aggregated profile (`llvm-bolt -pa -p FILE`).
    Bolt,
    /// BOLT's `.fdata`, as perf2bolt writes it.
    Fdata,
    /// llvm-profgen's unsymbolized profile (`llvm-profgen --unsymbolized-profile FILE`).
    Autofdo,
    /// A perf.data of branch-stack samples (`perf inject --itrace=il64` style).
    PerfInject,
}

/// What `profile` counts and writes.
pub struct Args {
    pub input: PathBuf,
    pub format: Format,
    pub output: PathBuf,
    pub binary: Option<PathBuf>,
    pub kernel: bool,
    pub filter: Filter,
    /// No --cpu, --tid or --time was given.
    pub whole: bool,
    pub image: ImageMode,
    /// Threads for a buffer's PSB segments (`--threads`; default: the cores).
    pub threads: Option<u32>,
    /// perf-inject: a sample every this many instructions.
    pub period: u64,
}

/// Writes the profile; exit status 0.
pub fn run(a: &Args) -> Result<i32> {
    if a.format == Format::PerfInject {
        if !a.whole || a.binary.is_some() || a.kernel {
            bail!("--format perf-inject writes every CPU's samples: --cpu, --tid, --time, --binary and --kernel are for the other formats");
        }
        return inject::write(&a.input, &a.output, a.period);
    }
    let binary = match (&a.binary, a.kernel) {
        (Some(path), false) => Some(path),
        (None, true) => None,
        _ => bail!("give the code the profile is for: --binary PATH (a program's file) or --kernel"),
    };
    if a.format == Format::Fdata && binary.is_none() {
        bail!("--format fdata names functions from the symbol table of --binary PATH; for the kernel use --format bolt or autofdo");
    }
    let file = PerfFile::open(&a.input)?;
    let (Input { trace, time_conv, queues, threads, bad_records, breaks }, sideband) = crate::prepare::read_input(&file, |_| ())?;
    let space = match binary {
        Some(path) => Space::binary(path, &sideband.mappings)?,
        None => Space::Kernel,
    };
    let info = trace.context("no Intel PT or CoreSight AUXTRACE_INFO in the input")?;
    let user = crate::symbols::user_code(None);
    let mut base = BaseImage::new();
    if let Some(refused) = codeimage::add_base_mapped(&file, &sideband.mappings, &mut base, &user)?.summary() {
        eprintln!("poketrace profile: {refused}");
    }
    let bare = (a.image == ImageMode::Static).then(|| codeimage::TimelineBuilder::new(base.clone()).build());
    let built = sideband.timeline(base);
    // The side-band's errors start with the records that could not be read.
    incomplete_input(&a.input, bad_records.len(), built.errors.get(bad_records.len()..).unwrap_or_default(), &built.losses, breaks.len())?;
    let tl = &built.timeline;
    let code = bare.as_ref().unwrap_or(tl);
    let queues: Vec<Queue> = queues.into_iter().filter(|q| q.cpu == u32::MAX || a.filter.cpu(q.cpu)).collect();
    if queues.iter().all(|q| q.trace.is_empty()) {
        bail!("{}: no trace data (for the CPUs asked for)", a.input.display());
    }
    let f = &a.filter;
    let keep = |q: &Queue, time: u64| time >= f.start && time <= f.end && (f.tids.is_none() || f.tid(threads.at(q, q.cpu, time).map(|t| t.1)));
    let profile = match &info {
        Trace::IntelPt(info) => {
            let setup = PtSetup::new(&file, info, setup::kernel_idioms(&file)?);
            tracedecode::pt::profile(Plan { setup: &setup, segments: crate::decode::segment_threads(a.threads) }, &queues, a.image, tl, code, &keep)?
        }
        Trace::CoreSight(info) => cs::profile(info, time_conv.as_ref(), &queues, code, &keep)?,
    };
    let (mapped, outside) = map(&profile, &space);
    match a.format {
        Format::Bolt => write::atomically(&a.output, |w| write::bolt(w, &mapped.branches, &mapped.ranges))?,
        Format::Autofdo => {
            let base = space.binary_file().map_or(0, |b| b.preferred_base);
            write::atomically(&a.output, |w| write::autofdo(w, &mapped.branches, &mapped.ranges, base))?
        }
        Format::Fdata => {
            let binary = space.binary_file().context("fdata needs --binary")?;
            write::atomically(&a.output, |w| fdata::write(w, binary, &mapped))?
        }
        Format::PerfInject => unreachable!("written by inject::write above"),
    }
    let side = sibling(&a.output, "uncertain");
    if mapped.uncertain_branches.is_empty() && mapped.uncertain_ranges.is_empty() {
        // No stale side file of an earlier run beside the new profile.
        let _ = std::fs::remove_file(&side);
    } else {
        write::atomically(&side, |w| write::uncertain(w, &mapped))?;
    }
    report(a, &profile, &mapped, outside, &side);
    if matches!(space, Space::Kernel) {
        let arch = if matches!(info, Trace::CoreSight(_)) { isa::Arch::Aarch64 } else { isa::Arch::X86_64 };
        let symbols = crate::symbols::Symbolizer::for_input(&file, None)?;
        let path = sibling(&a.output, "pokes");
        let mut n = 0;
        write::atomically(&path, |w| {
            n = sites::write(w, tl, arch, &symbols, &mapped)?;
            Ok(())
        })?;
        eprintln!("poketrace profile: {n} jump-label and static-call sites patched during the trace, listed in {}", path.display());
    }
    Ok(0)
}

/// `FILE.EXT`, beside the profile.
fn sibling(output: &Path, ext: &str) -> PathBuf {
    let mut s = output.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// A profile of part of the data would count wrongly where nothing says
/// so: records that could not be read, lost or truncated trace.
fn incomplete_input(input: &Path, bad: usize, sideband_errors: &[String], losses: &perfdata::Losses, gaps: usize) -> Result<()> {
    let mut what = Vec::new();
    if bad > 0 {
        what.push(format!("{bad} records could not be read (the file may be truncated)"));
    }
    if let Some(first) = sideband_errors.first() {
        what.push(format!("{} side-band errors, the first: {first}", sideband_errors.len()));
    }
    if losses.aux_damaged() > 0 {
        what.push(format!("{} AUX records truncated or damaged", losses.aux_damaged()));
    }
    if losses.lost_records() > 0 {
        what.push(format!("{} records lost", losses.lost_records()));
    }
    if gaps > 0 {
        what.push(format!("{gaps} gaps or overlaps in the AUX data"));
    }
    if !what.is_empty() {
        bail!("{}: the trace is incomplete ({}); no profile written", input.display(), what.join("; "));
    }
    Ok(())
}

/// `counts` at the space's addresses, sorted; the count of those with an
/// end outside it.
fn map_pairs(counts: &PairCounts, space: &Space, outside: &mut u64) -> Sorted {
    let mut v: Vec<((u64, u64), u64)> = Vec::with_capacity(counts.len());
    for ((a, b), n) in counts.iter() {
        match (space.map(a), space.map(b)) {
            (Some(a), Some(b)) => v.push(((a, b), n)),
            _ => *outside += n,
        }
    }
    radix::sort_by_pair(&mut v);
    v.dedup_by(|later, first| {
        let same = later.0 == first.0;
        if same {
            first.1 += later.1;
        }
        same
    });
    v
}

/// The profile at the space's addresses, and how many counts fell outside.
fn map(p: &Profile, space: &Space) -> (Mapped, u64) {
    let mut outside = 0;
    let m = Mapped {
        branches: map_pairs(&p.branches, space, &mut outside),
        ranges: map_pairs(&p.ranges, space, &mut outside),
        uncertain_branches: map_pairs(&p.uncertain_branches, space, &mut outside),
        uncertain_ranges: map_pairs(&p.uncertain_ranges, space, &mut outside),
    };
    (m, outside)
}

/// What was counted, on stderr.
fn report(a: &Args, p: &Profile, m: &Mapped, outside: u64, side: &Path) {
    let sum = |s: &Sorted| s.iter().map(|e| e.1).sum::<u64>();
    eprintln!(
        "poketrace profile: {} taken branches at {} pairs, {} fall-through ranges at {} pairs written to {}",
        sum(&m.branches),
        m.branches.len(),
        sum(&m.ranges),
        m.ranges.len(),
        a.output.display()
    );
    if !m.uncertain_branches.is_empty() || !m.uncertain_ranges.is_empty() {
        eprintln!(
            "poketrace profile: {} branches and {} ranges in uncertain instructions, counted apart in {}",
            sum(&m.uncertain_branches),
            sum(&m.uncertain_ranges),
            side.display()
        );
    }
    eprintln!(
        "poketrace profile: {outside} counts outside the code profiled, {} traps and far transfers (no branch), {} decode errors ({} ranges cut)",
        p.not_branches, p.errors, p.cut_ranges
    );
}
