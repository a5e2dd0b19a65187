//! `poketrace`, the command line over the workspace's crates: `dump` and
//! `pokes` print perf.data records and the history of code changes, `image`
//! the code at an address at a moment, `decode` Intel PT or CoreSight ETMv4
//! over the code timeline (perf script's layouts, or JSON), `record` captures
//! side-band data live, `simulate`/`check`/`demo` run and score the
//! simulator, `etm` decodes OpenCSD snapshots, `ptdump` lists a raw Intel PT
//! file's packets as libipt's ptdump does. It parses flags, wires the crates
//! together and prints; the work is in the crates.

mod decode;
mod dump;
mod etm_cmd;
mod export;
mod hex;
mod image;
mod ksymbol_names;
mod lines;
mod pokes;
mod prepare;
mod print;
mod profile;
mod progress;
mod record;
mod report;
mod segments;
mod symbols;
mod text;
mod timeline;

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use libipt_tools::{ptdump, ptxed};
use sim::Protocol;

#[derive(Parser)]
#[command(name = "poketrace", version, about = "See kernel code as it was when it executed: perf.data, text pokes, trace decode")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `export`'s output formats.
#[derive(Clone, Copy, clap::ValueEnum)]
enum ExportFormat {
    Parquet,
}

/// The CPU, thread and time filters of `timeline` and `profile`.
#[derive(clap::Args)]
struct Only {
    /// Only these CPUs (perf's list: 0-2,5).
    #[arg(long)]
    cpu: Option<String>,
    /// Only these threads (comma-separated ids).
    #[arg(long)]
    tid: Option<String>,
    /// Only START,END (perf's syntax: seconds, either end may be empty).
    #[arg(long)]
    time: Option<String>,
}

impl Only {
    /// Whether no filter was given.
    fn is_whole(&self) -> bool {
        self.cpu.is_none() && self.tid.is_none() && self.time.is_none()
    }

    fn filter(&self, kernel_only: bool) -> anyhow::Result<timeline::Filter> {
        timeline::Filter::parse(self.cpu.as_deref(), self.tid.as_deref(), self.time.as_deref(), kernel_only)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Print every record of a perf.data file or directory, one line each (like `perf report -D`).
    Dump {
        /// perf.data file, or perf.data directory (DIR/data).
        input: PathBuf,
        /// JSON Lines instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The history of TEXT_POKE and KSYMBOL records: bytes, instructions, kind of change.
    Pokes {
        /// perf.data file, or perf.data directory (DIR/data, DIR/kcore_dir/kallsyms).
        input: PathBuf,
        /// Symbols, when the input has no kcore_dir/kallsyms.
        #[arg(long)]
        kallsyms: Option<PathBuf>,
        /// JSON Lines instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Kernel code at a moment, or the history of one address, from base code plus the pokes.
    Image {
        /// perf.data directory (its kcore_dir gives the base code) or file.
        input: PathBuf,
        /// perf time: nanoseconds, or seconds.nanoseconds as perf script prints it.
        #[arg(long, value_name = "TIME", conflicts_with = "history", requires = "addr")]
        at: Option<String>,
        /// Every version of the code at this address, with its time range and kind of change.
        #[arg(long, value_name = "ADDR")]
        history: Option<String>,
        /// Address (hex, or symbol[+offset] from kcore_dir/kallsyms).
        addr: Option<String>,
        /// Bytes to read, at most 1 MiB (1048576).
        #[arg(default_value_t = 16, value_parser = image::parse_len)]
        len: usize,
        /// More base code: ELF files (vmlinux) loaded at their addresses.
        #[arg(long, value_name = "ELF")]
        vmlinux: Vec<PathBuf>,
        /// Look up the files of user mappings under this directory (as perf's --symfs).
        #[arg(long, value_name = "DIR")]
        symfs: Option<PathBuf>,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Decode Intel PT in a perf.data directory over the code timeline (like `perf script --itrace`).
    ///
    /// Ends with a summary on stderr: trace buffers, lines printed, decode
    /// errors (counted also when `e` is not asked for), records that could
    /// not be read (skipped), records lost, AUX records truncated, gaps or
    /// overlaps in the AUX data (decoding restarts at the next PSB after
    /// each), and instructions printed as uncertain. Exit status: 0 when the
    /// output is complete; 1 when it is known to be incomplete (any of those
    /// but uncertain instructions, which are marked in the output); 2 when
    /// nothing could be decoded.
    Decode {
        /// perf.data directory (kcore_dir gives the base code) or file.
        input: PathBuf,
        /// b: branches, i: instructions, e: decode errors; a period in
        /// instructions as perf takes it (i1000i: every 1000th instruction;
        /// i alone, i1i or i0ns: each one).
        #[arg(long, default_value = "be")]
        itrace: String,
        /// timeline (poketrace), perf (one image updated in time order) or static (no pokes).
        #[arg(long, value_enum, default_value = "timeline", hide_possible_values = true)]
        image: tracedecode::ImageMode,
        #[arg(long)]
        json: bool,
        /// perf script's fields, printed in its layout: comm, pid, tid, cpu, time, flags, ip, sym, symoff, dso, addr, insn, insnlen.
        #[arg(short = 'F', long)]
        fields: Option<String>,
        /// Times in nanoseconds with -F (perf's default is microseconds).
        #[arg(long)]
        ns: bool,
        /// Look up the files of user mappings under this directory (as perf's --symfs).
        #[arg(long, value_name = "DIR")]
        symfs: Option<PathBuf>,
        /// Instead of lines, counts: instructions, taken branches by kind,
        /// traps, trace starts and ends, errors, uncertain instructions, pokes
        /// crossed (Intel PT; as JSON with --json).
        #[arg(long, conflicts_with_all = ["itrace", "fields"])]
        stat: bool,
        /// Threads to decode a buffer's PSB segments on (default: the
        /// cores; 1: each buffer on one thread), for --itrace=e and --stat.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        threads: Option<u32>,
        /// Only this unit of `poketrace segments` (repeatable): the lines
        /// of units decoded one after the other are, in order, the lines of
        /// the whole decode (instructions: each one, no period).
        #[arg(long = "segment", value_name = "ID", conflicts_with = "stat")]
        segments: Vec<tracedecode::units::UnitId>,
    },
    /// List the independent units of a perf.data directory's trace: runs of
    /// a buffer from a sync point (Intel PT: a PSB), never across a gap,
    /// grouped to about --target-bytes, each decodable alone with
    /// `decode --segment ID`.
    ///
    /// Columns: the ID (BUFFER.START-END), the CPU (tTID for a per-thread
    /// buffer), the byte range in the buffer's AUX data, its bytes, the sync
    /// points it starts at (0: CoreSight, one unit per run for now), and the
    /// perf times of its first sync point and of the one after it.
    Segments {
        /// perf.data directory or file.
        input: PathBuf,
        /// One JSON object a unit, a line each.
        #[arg(long)]
        json: bool,
        /// Bytes of trace a unit holds about: consecutive PSB segments
        /// while they fit (at least one a unit).
        #[arg(long, value_name = "N", default_value_t = segments::DEFAULT_TARGET)]
        target_bytes: usize,
    },
    /// Write the decoded lines of each unit of `poketrace segments` as a
    /// Parquet file, Hive-style (OUT/branches/cpu=N/seg-ID.parquet; tid=N
    /// for a per-thread buffer), with pokes.parquet, ksymbols.parquet and
    /// segments.parquet beside them (columns: the export crate's doc).
    ///
    /// Each file is written under a temporary name and renamed when
    /// complete: a rerun replaces, never duplicates. Ends with decode's
    /// summary on stderr; exit status as decode's.
    Export {
        /// perf.data directory or file.
        input: PathBuf,
        /// The output format.
        #[arg(long, value_enum, default_value = "parquet")]
        format: ExportFormat,
        /// The output directory.
        #[arg(short, long, value_name = "OUT")]
        output: PathBuf,
        /// Only this unit of `poketrace segments` (repeatable); all when none.
        #[arg(long = "segment", value_name = "ID")]
        segments: Vec<tracedecode::units::UnitId>,
        /// b: a row per taken branch; i: a row per instruction (both: as
        /// decode interleaves them). Error rows come always.
        #[arg(long, default_value = "b")]
        itrace: String,
        /// timeline (poketrace), perf (one image updated in time order) or static (no pokes).
        #[arg(long, value_enum, default_value = "timeline", hide_possible_values = true)]
        image: tracedecode::ImageMode,
        /// Bytes of trace a unit holds about, as `segments --target-bytes`.
        #[arg(long, value_name = "N", default_value_t = segments::DEFAULT_TARGET)]
        target_bytes: usize,
        /// The tables to write (default: all; only branches with --segment).
        #[arg(long, value_enum, value_delimiter = ',')]
        tables: Option<Vec<export::Table>>,
        /// Look up the files of user mappings under this directory (as perf's --symfs).
        #[arg(long, value_name = "DIR")]
        symfs: Option<PathBuf>,
    },
    /// A call-stack timeline of an Intel PT or CoreSight trace in the Trace Event Format (Perfetto, speedscope), with code changes and decode problems.
    Timeline {
        /// perf.data directory (kcore_dir gives the base code and symbols) or file.
        input: PathBuf,
        /// The file to write: Trace Event Format JSON, or Perfetto's protobuf when it ends in .pftrace; gzipped when it ends in .gz.
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        only: Only,
        /// Only kernel code: user code is shown as a gap.
        #[arg(long)]
        kernel_only: bool,
    },
    /// Count a trace into a profile for BOLT or AutoFDO: taken branches and
    /// fall-through ranges, each branch as the code that ran then.
    ///
    /// Branches from, and ranges holding, uncertain instructions go to
    /// FILE.uncertain, apart. A trace known to be incomplete gives an error
    /// and no profile; the file is written whole or not at all.
    Profile {
        /// perf.data directory (kcore_dir gives the kernel's base code) or file.
        input: PathBuf,
        /// bolt (llvm-bolt -pa -p), fdata (perf2bolt's), autofdo (llvm-profgen --unsymbolized-profile), perf-inject.
        #[arg(long, value_enum, hide_possible_values = true)]
        format: profile::Format,
        /// The profile to write.
        #[arg(short, long)]
        output: PathBuf,
        /// The program profiled: addresses as its file has them, and its symbols (fdata).
        #[arg(long, value_name = "PATH", conflicts_with = "kernel")]
        binary: Option<PathBuf>,
        /// Profile kernel code, at the addresses it ran at.
        #[arg(long)]
        kernel: bool,
        #[command(flatten)]
        only: Only,
        /// timeline (poketrace), perf (one image updated in time order) or static (no pokes).
        #[arg(long, value_enum, default_value = "timeline", hide_possible_values = true)]
        image: tracedecode::ImageMode,
        /// Threads to count a buffer's PSB segments on (default: the cores; 1: each buffer on one thread; Intel PT).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        threads: Option<u32>,
        /// perf-inject: a sample every N instructions (perf's own default,
        /// 100 us of trace, is a time: a count is taken here).
        #[arg(long, value_name = "N", default_value_t = profile::inject::DEFAULT_PERIOD, value_parser = clap::value_parser!(u64).range(1..))]
        period: u64,
    },
    /// One self-contained HTML page: poke history per site and trace coverage per CPU on a time axis, summary tables.
    Report {
        /// perf.data directory (or file); with a simulation's ground truth, `check`'s table too.
        input: PathBuf,
        /// The HTML file to write.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Simulate CPUs running kernel code while it is patched: a perf.data
    /// directory with Intel PT (x86_64) or ETMv4 (aarch64, also an OpenCSD
    /// snapshot in DIR/snapshot) per CPU, and the ground truth beside it.
    Simulate {
        #[arg(long, value_enum, default_value = "x86_64")]
        arch: isa::Arch,
        #[arg(long, default_value_t = 4)]
        cpus: u32,
        /// int3, prepost, single-after or none.
        #[arg(long, value_enum, default_value = "int3", hide_possible_values = true)]
        protocol: sim::Protocol,
        /// Code changes to make.
        #[arg(long, default_value_t = 200)]
        pokes: u64,
        /// Instructions per CPU.
        #[arg(long, default_value_t = 100_000)]
        instructions: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// ns between timing packets (TSC; ETMv4 TIMESTAMP).
        #[arg(long, default_value_t = 200)]
        tsc_period: u64,
        /// Intel PT timing by MTC every 2^N crystal clock ticks of 25 ns (TSC and TMA only in PSB+), instead of --tsc-period.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=15))]
        mtc_freq: Option<u8>,
        /// Intel PT cycle-accurate mode: CYC packets (core cycles, 2 a ns; CBR in each PSB+) before flow packets.
        #[arg(long)]
        cyc: bool,
        /// With --cyc: at most one CYC per 2^(N-1) cycles (perf's cyc_thresh; 0: before every flow packet).
        #[arg(long, value_name = "N", requires = "cyc", value_parser = clap::value_parser!(u8).range(0..=15))]
        cyc_thresh: Option<u8>,
        /// x86_64: the code also calls and jumps directly into code kcore does not hold and the trace's
        /// address filter leaves out (TIP.PGD, then TIP.PGE where it comes back), and runs UD2 and invalid
        /// opcodes that trap (FUP + TIP).
        #[arg(long)]
        exits: bool,
        /// x86_64: indirect jumps' and calls' TIPs deferred behind the TNT of the branches after them, as
        /// processors may send them (not with --cyc).
        #[arg(long, conflicts_with = "cyc")]
        deferred_tips: bool,
        /// Instead of the generated kernel: random walks through this ELF
        /// file's real code, as a user program (no code changes).
        #[arg(long, value_name = "ELF", conflicts_with_all = ["protocol", "pokes", "exits"])]
        elf: Option<PathBuf>,
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Decode a simulated run with three images of the code and score each against the ground truth.
    Check {
        /// A directory written by `poketrace simulate`.
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Record text pokes, ksymbols, BPF programs (with their JIT code) and kernel code into a perf.data directory.
    Record(record::RecordArgs),
    /// An OpenCSD snapshot's ETMv4 trace decoded into elements, or its packets (`--format opencsd` diffs against trc_pkt_lister -decode).
    Etm {
        /// Snapshot directory (snapshot.ini, device and trace ini files, buffers).
        snapshot: PathBuf,
        /// List packets only, not the decoded elements.
        #[arg(long)]
        packets: bool,
        /// How to write packets and elements.
        #[arg(long, value_enum, default_value_t = etm_cmd::EtmFormat::Opencsd)]
        format: etm_cmd::EtmFormat,
    },
    /// List the packets of a raw Intel PT file, a drop-in for libipt's ptdump (`poketrace ptdump --help`).
    #[command(disable_help_flag = true)]
    Ptdump {
        /// ptdump's own options and the trace file, parsed as ptdump parses them.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Decode a raw Intel PT file over raw code, a drop-in for libipt's ptxed (`poketrace ptxed --help`).
    #[command(disable_help_flag = true)]
    Ptxed {
        /// ptxed's own options, parsed as ptxed parses them.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Run the main job on built-in data.
    Demo,
}

fn main() {
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = match cli.command {
        Command::Dump { input, json } => dump::run(&input, json, &mut out),
        Command::Pokes { input, kallsyms, json } => pokes::run(&input, kallsyms.as_deref(), json, &mut out),
        Command::Image { input, at, history, addr, len, vmlinux, symfs, json } => {
            image::run(&image::Args { input, at, history, addr, len, vmlinux, user: symbols::user_code(symfs), json }, &mut out)
        }
        Command::Simulate {
            arch,
            cpus,
            protocol,
            pokes,
            instructions,
            seed,
            tsc_period,
            mtc_freq,
            cyc,
            cyc_thresh,
            exits,
            deferred_tips,
            elf,
            output,
        } => {
            let cyc_thresh = cyc.then(|| cyc_thresh.unwrap_or(0));
            let cfg = sim::SimConfig {
                arch,
                cpus,
                protocol,
                pokes,
                instructions,
                seed,
                tsc_period,
                mtc_freq,
                cyc_thresh,
                exits,
                deferred_tips,
                ..sim::SimConfig::default()
            };
            simulate(&cfg, elf.as_deref(), &output, &mut out)
        }
        Command::Check { dir, json } => check(&dir, json, &mut out),
        Command::Decode { input, itrace, image, json, fields, ns, symfs, stat, threads, segments } => (|| {
            let mut itrace = tracedecode::Itrace::parse(&itrace)?;
            // -F takes precedence over --json.
            let layout = match (fields, json) {
                (Some(f), _) => print::Layout::Perf(print::perf::Fields::parse(&f, ns)?),
                (None, true) => print::Layout::Json,
                (None, false) => print::Layout::Text,
            };
            itrace.insn_bytes = layout.shows_insn_bytes();
            let opts = decode::Options { itrace, image, layout, user: symbols::user_code(symfs), stat, threads, segments };
            decode::run(&input, &opts, &mut out)
        })(),
        Command::Segments { input, json, target_bytes } => segments::run(&input, target_bytes, json, &mut out),
        Command::Export { input, format: ExportFormat::Parquet, output, segments, itrace, image, target_bytes, tables, symfs } => (|| {
            let itrace = tracedecode::Itrace { errors: true, ..tracedecode::Itrace::parse(&itrace)? };
            let opts = export::Options { itrace, image, user: symbols::user_code(symfs), segments, target: target_bytes, tables };
            export::run(&input, &output, &opts)
        })(),
        Command::Timeline { input, output, only, kernel_only } => only.filter(kernel_only).and_then(|f| timeline::run(&input, &output, &f)),
        Command::Profile { input, format, output, binary, kernel, only, image, threads, period } => {
            let whole = only.is_whole();
            only.filter(false)
                .and_then(|filter| profile::run(&profile::Args { input, format, output, binary, kernel, filter, whole, image, threads, period }))
        }
        Command::Report { input, output } => report::run(&input, &output, None),
        Command::Record(args) => record::run(&args, &mut out),
        Command::Etm { snapshot, packets, format } => etm_cmd::run(&snapshot, packets, format, &mut out),
        Command::Ptdump { args } => ptdump::run(&args, &mut out),
        Command::Ptxed { args } => ptxed::run(&args, &mut out),
        Command::Demo => demo(&mut out),
    };
    let result = result.and_then(|code| {
        out.flush()?;
        Ok(code)
    });
    // Files cut short while mapped read as zeros past the cut (perfdata::mapped).
    let cut = perfdata::mapped::cut_short_files();
    for path in &cut {
        eprintln!("poketrace: {} was cut short while it was read: its bytes past the cut read as zeros, so the output may be wrong", path.display());
    }
    let result = result.map(|code| if cut.is_empty() { code } else { code.max(1) });
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // A reader that stops early (`| head`) is not an error.
            let broken_pipe = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
                    || c.downcast_ref::<serde_json::Error>().is_some_and(|j| j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
            });
            if broken_pipe {
                std::process::exit(0);
            }
            eprintln!("poketrace: {e:#}");
            std::process::exit(2);
        }
    }
}

fn simulate(cfg: &sim::SimConfig, elf: Option<&std::path::Path>, dir: &std::path::Path, out: &mut impl Write) -> Result<i32> {
    let mut bar = progress::Progress::counting("simulate", cfg.instructions.saturating_mul(u64::from(cfg.cpus)));
    let mut progress = |n: u64| bar.at(n);
    let s = match elf {
        Some(elf) => {
            sim::simulate_elf_reporting(&sim::SimConfig { pokes: 0, protocol: sim::Protocol::None, ..cfg.clone() }, elf, dir, &mut progress)?
        }
        None => sim::simulate_reporting(cfg, dir, &mut progress)?,
    };
    bar.finish();
    writeln!(
        out,
        "{}: {} CPUs, protocol {}, {} instructions, {} pokes, {} ksymbols, {} bytes of {}",
        dir.display(),
        cfg.cpus,
        cfg.protocol,
        s.instructions.iter().sum::<u64>(),
        s.pokes,
        s.ksymbols,
        s.trace_bytes.iter().sum::<usize>(),
        if cfg.arch == isa::Arch::Aarch64 { "ETMv4 (CoreSight frames)" } else { "Intel PT" }
    )?;
    Ok(0)
}

fn check(dir: &std::path::Path, json: bool, out: &mut impl Write) -> Result<i32> {
    let reports = sim::check::check(dir)?;
    if json {
        for r in &reports {
            serde_json::to_writer(&mut *out, r)?;
            writeln!(out)?;
        }
        return Ok(0);
    }
    print_table(&reports, out)?;
    Ok(0)
}

fn print_table(reports: &[sim::check::ModeReport], out: &mut impl Write) -> Result<()> {
    writeln!(
        out,
        "{:<11} {:>12} {:>12} {:>10} {:>10} {:>7} {:>10} {:>12}",
        "mode", "instructions", "correct", "wrong", "missing", "errors", "uncertain", "silent wrong"
    )?;
    for r in reports {
        let t = &r.total;
        writeln!(
            out,
            "{:<11} {:>12} {:>12} {:>10} {:>10} {:>7} {:>10} {:>12}",
            r.mode.name(),
            t.instructions,
            t.correct,
            t.wrong,
            t.missing,
            t.errors,
            t.uncertain,
            t.silent_wrong
        )?;
    }
    for r in reports {
        if let Some(d) = &r.total.first_divergence {
            writeln!(
                out,
                "  {}: first divergence on cpu {} at {}.{:09}: expected {:#x}, decoded {:#x}",
                r.mode.name(),
                d.cpu,
                d.time / 1_000_000_000,
                d.time % 1_000_000_000,
                d.expected,
                d.decoded
            )?;
        }
    }
    Ok(())
}

/// A new directory `PREFIX-N` in the temporary directory, N random, created
/// exclusively with mode 0700: nothing planted there beforehand is used.
fn private_temp_dir(prefix: &str) -> Result<PathBuf> {
    use std::hash::{BuildHasher, Hasher};
    use std::os::unix::fs::DirBuilderExt;
    for attempt in 0..100u64 {
        let mut h = std::hash::RandomState::new().build_hasher();
        h.write_u64(attempt);
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", h.finish()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(anyhow::Error::new(e).context(format!("creating {}", dir.display()))),
        }
    }
    anyhow::bail!("no free name for a {prefix} directory in {}", std::env::temp_dir().display())
}

fn demo(out: &mut impl Write) -> Result<i32> {
    let root = private_temp_dir("poketrace-demo")?;
    writeln!(
        out,
        "poketrace demo: 4 simulated CPUs run kernel-like x86-64 or AArch64 code while it is\n\
         patched (jump labels, ftrace, static calls, kprobes, a trampoline created and removed).\n\
         Each run is traced as Intel PT or ETMv4 into a perf.data directory, then decoded\n\
         with three images of the code and compared with what really ran.\n"
    )?;
    let runs = [
        (Protocol::Int3, 20, "x86 text_poke_bp, fine timing (a TSC every 20 ns)"),
        (Protocol::Int3, 400, "the same, coarse timing (a TSC every 400 ns): changes land between timing packets"),
        (Protocol::PrePost, 20, "the Arm PRE/POST proposal: a window where either code may run"),
        (Protocol::None, 20, "no events at all"),
    ];
    let arm = [
        (Protocol::Int3, 20, "AArch64, ETMv4: the arm64 kernel's single-instruction writes, an event at each"),
        (Protocol::PrePost, 20, "AArch64, ETMv4: the PRE/POST proposal"),
    ];
    let runs = runs.iter().map(|r| (isa::Arch::X86_64, "x86_64", r)).chain(arm.iter().map(|r| (isa::Arch::Aarch64, "aarch64", r)));
    for (arch, arch_name, &(protocol, tsc_period, what)) in runs {
        let dir = root.join(format!("{arch_name}-{protocol}-{tsc_period}ns"));
        let cfg = sim::SimConfig { arch, protocol, instructions: 200_000, pokes: 400, tsc_period, ..sim::SimConfig::default() };
        sim::simulate(&cfg, &dir)?;
        writeln!(out, "== {what}\n   {}", dir.display())?;
        let reports = sim::check::check(&dir)?;
        print_table(&reports, out)?;
        let page = dir.join("report.html");
        report::run(&dir, &page, Some(&reports))?;
        writeln!(out, "   report: {}\n", page.display())?;
    }
    writeln!(
        out,
        "static: no poke awareness; perf-style: one image updated in timestamp order (what perf does);\n\
         timeline: poketrace's code timeline, asked for the interval between timing packets;\n\
         where the code changes inside it the trace decides, and what it cannot is uncertain.\n\
         The files stay in {} (perf.data directories: try `poketrace pokes DIR`).",
        root.display()
    )?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn demo_directories_are_private_and_unpredictable() {
        let a = super::private_temp_dir("poketrace-test-private").unwrap();
        let b = super::private_temp_dir("poketrace-test-private").unwrap();
        assert_ne!(a, b);
        for d in [&a, &b] {
            assert_eq!(std::fs::metadata(d).unwrap().permissions().mode() & 0o777, 0o700);
            assert!(!d.to_string_lossy().ends_with(&format!("-{}", std::process::id())));
            std::fs::remove_dir(d).unwrap();
        }
    }
}
