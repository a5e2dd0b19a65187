//! What to record ([`Options`]) and what was recorded ([`Summary`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// What [`crate::record`] does.
#[derive(Clone, Debug)]
pub struct Options {
    /// The perf.data directory to write (`DIR/data`, `DIR/kcore_dir/`, `DIR/bpf/`).
    /// Created 0700 and marked as poketrace's; an earlier recording there (a
    /// marked directory or a perf.data file) is renamed to `DIR.old`.
    pub output: PathBuf,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Run this command (program and arguments) and stop when it exits.
    pub command: Vec<OsString>,
    /// Kernel code from this ELF file when /proc/kcore cannot be read.
    pub vmlinux: Option<PathBuf>,
    /// Data pages per CPU ring buffer (a power of two).
    pub mmap_pages: usize,
    /// Show progress on stderr when it is a terminal.
    pub progress: bool,
}

impl Options {
    /// Defaults: `perf.data`, no time limit, no command, 256 pages (1 MiB) per CPU.
    pub fn new(output: impl Into<PathBuf>) -> Options {
        Options { output: output.into(), duration: None, command: Vec::new(), vmlinux: None, mmap_pages: 256, progress: false }
    }
}

/// How a recording went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub output: PathBuf,
    /// From the events' enabling to their disabling.
    pub elapsed: Duration,
    pub cpus: usize,
    /// Records drained from the ring buffers, by record type.
    pub records: BTreeMap<u32, u64>,
    /// Records written at the start (kernel maps, thread names, BPF programs already loaded).
    pub synthesized: u64,
    /// Records the kernel dropped because a ring was full (the sum of the LOST records).
    pub lost: u64,
    /// Records dropped that no LOST record reported: the kernel reports them
    /// with the next record that fits, and there was none before the end
    /// (from read_format LOST, Linux 6.0 and later).
    pub lost_unreported: u64,
    /// Bytes of ring data skipped after a header that made no sense (never expected).
    pub skipped_bytes: u64,
    /// KSYMBOL, BPF_EVENT and TEXT_POKE records whose header.size the kernel
    /// had grown past what it wrote (another tool's side-band event on the
    /// same CPU), written at their true size.
    pub resized: u64,
    /// Size of `DIR/data`.
    pub bytes: u64,
    pub bpf: BpfStats,
    pub kernel_code: KernelCode,
    /// Things that limit what the recording holds, each with its fix.
    pub warnings: Vec<String>,
    /// The command's exit code (128 + signal number when a signal ended it).
    pub exit_code: Option<i32>,
}

impl Summary {
    /// All records drained from the rings.
    pub fn total_records(&self) -> u64 {
        self.records.values().sum()
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        let total = self.total_records();
        writeln!(
            f,
            "recorded {} ({} CPUs, {:.2} s): {} records from the rings ({:.0}/s), {} synthesized, {} bytes",
            self.output.display(),
            self.cpus,
            secs,
            total,
            total as f64 / secs.max(1e-9),
            self.synthesized,
            self.bytes
        )?;
        for (ty, n) in &self.records {
            let name = perfdata::abi::record_type_name(*ty).map_or_else(|| format!("type {ty}"), str::to_string);
            writeln!(f, "  {name:<16} {n:>10}")?;
        }
        writeln!(f, "  lost             {:>10}", self.lost)?;
        if self.lost_unreported > 0 {
            writeln!(f, "  lost at the end  {:>10} (dropped, and not yet reported by a LOST record when recording stopped)", self.lost_unreported)?;
        }
        if self.resized > 0 {
            writeln!(f, "  resized          {:>10} (header.size grown by the kernel: another side-band reader was running)", self.resized)?;
        }
        if self.skipped_bytes > 0 {
            writeln!(f, "  skipped bytes    {:>10} (ring data after a bad header)", self.skipped_bytes)?;
        }
        let b = &self.bpf;
        writeln!(
            f,
            "BPF JIT images: {} ({} loaded before, {} during); {} unloaded before capture, {} failed",
            b.before + b.during,
            b.before,
            b.during,
            b.gone,
            b.failed
        )?;
        for r in &b.reasons {
            writeln!(f, "  {r}")?;
        }
        match &self.kernel_code {
            KernelCode::Kcore { segments, bytes } => writeln!(f, "kernel code: {bytes} bytes in {segments} segments from /proc/kcore")?,
            KernelCode::Vmlinux { path, bytes } => writeln!(f, "kernel code: {bytes} bytes from {}", path.display())?,
            KernelCode::None { reason } => writeln!(f, "kernel code: none ({reason})")?,
        }
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        if let Some(code) = self.exit_code {
            writeln!(f, "command exited with {code}")?;
        }
        Ok(())
    }
}

/// Where the kernel code in `kcore_dir/kcore` came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelCode {
    /// Copied from /proc/kcore when the recording started.
    Kcore { segments: usize, bytes: u64 },
    /// The executable segments of this ELF file, moved to the running kernel's
    /// addresses. Boot-time patching (alternatives, jump labels set at boot)
    /// is not in it.
    Vmlinux { path: PathBuf, bytes: u64 },
    /// No code was saved, for this reason; kallsyms and modules were.
    None { reason: String },
}

/// How the BPF capture went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BpfStats {
    /// Programs whose image was saved, loaded before the recording started.
    pub before: u64,
    /// Programs whose image was saved, loaded while recording.
    pub during: u64,
    /// Programs unloaded before their image could be read.
    pub gone: u64,
    /// Programs whose image could not be read for another reason.
    pub failed: u64,
    /// The first few reasons, for the summary.
    pub reasons: Vec<String>,
}
