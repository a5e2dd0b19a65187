//! `poketrace record`: live side-band capture (text pokes, ksymbols, BPF
//! programs and their JIT code, kernel code) into a perf.data directory.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

/// Flags of `poketrace record`.
#[derive(clap::Args)]
pub struct RecordArgs {
    /// The perf.data directory to write (DIR/data, DIR/kcore_dir/, DIR/bpf/); made 0700; an earlier one poketrace made becomes DIR.old.
    #[arg(short, long, value_name = "DIR", default_value = "perf.data")]
    pub output: PathBuf,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Kernel code from this ELF image when /proc/kcore cannot be read.
    #[arg(long, value_name = "FILE")]
    pub vmlinux: Option<PathBuf>,
    /// Data pages per CPU ring buffer (a power of two).
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub mmap_pages: usize,
    /// Run this command and stop when it exits (else record until SIGINT, SIGTERM or --duration).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Records, prints the summary, and returns the command's exit code (0 without a command).
pub fn run(args: &RecordArgs, out: &mut impl Write) -> Result<i32> {
    let duration = match args.duration {
        Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
        Some(s) => anyhow::bail!("--duration {s}: give a positive number of seconds"),
        None => None,
    };
    let opts = record::Options {
        output: args.output.clone(),
        duration,
        command: args.command.clone(),
        vmlinux: args.vmlinux.clone(),
        mmap_pages: args.mmap_pages,
        progress: true,
    };
    let summary = record::record(&opts)?;
    write!(out, "{summary}")?;
    Ok(summary.exit_code.unwrap_or(0))
}
