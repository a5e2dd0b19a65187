//! Live side-band capture into a perf.data directory: what the kernel says
//! about its own code while it runs, and the code itself.
//!
//! [`record`] opens one dummy software event per online CPU that carries
//! TEXT_POKE and KSYMBOL records (code changes, out-of-line code, BPF
//! programs) and MMAP2, COMM, FORK/EXIT and context switches, and a second
//! one per CPU for BPF_EVENT, read by a thread that opens every new BPF
//! program at once so its JIT code cannot vanish before it is saved; all
//! records carry TID, TIME, CPU and IDENTIFIER. It drains the ring buffers
//! into `DIR/data` until the command exits, SIGINT or SIGTERM arrives, or the
//! time is up. Around that it saves what a decoder needs to walk kernel code
//! as it was:
//!
//! - `DIR/data`: the perf.data file (two attrs: `dummy:HG`, `dummy:bpf`);
//!   kernel records as the kernel wrote them (PERF_RECORD_LOST included;
//!   sizes the kernel grew are cut back, see `true_size`), one FINISHED_ROUND per pass
//!   over the rings, each round flushed to the file (the header, written
//!   first, says data size 0 until the end, as perf's does: a recording that
//!   is killed reads up to its last round), and at the start the records perf synthesizes (kernel
//!   and module maps, thread names, KSYMBOL and BPF_EVENT for BPF programs
//!   already loaded); header features hostname, osrelease, version, arch,
//!   nrcpus, cpudesc, cmdline and the event's name.
//! - `DIR/kcore_dir/`: `kcore` (the kernel text and module text copied from
//!   /proc/kcore before the events are enabled), `kallsyms`, `modules`; as
//!   `perf record --kcore` leaves them, so Linux perf and
//!   `codeimage::from_perf_data` apply the pokes to that code.
//! - `DIR/bpf/`: the JIT image of every BPF program loaded before or during
//!   the recording, which kcore does not hold: `<id>-<tag>.elf`, an ELF core
//!   file with one PT_LOAD per JIT function at its kernel address (load it
//!   like kcore, `codeimage::BaseImage::add_elf`), and `index.jsonl`, one
//!   line per program (`id`, `tag`, `name`, `prog_type`, `loaded` "before" or
//!   "during", `time` of its BPF_EVENT, `file`, `jited_len`, `funcs` with
//!   `addr`, `len`, `ksym`). Which program owned an address when is told by
//!   the KSYMBOL register and unregister records in `DIR/data`.
//!
//! Linux only; the ring buffer parsing ([`ring`]) is plain code, tested on
//! made-up ring contents.

#[cfg(target_os = "linux")]
mod bpf;
mod error;
#[cfg(target_os = "linux")]
mod kernel;
#[cfg(target_os = "linux")]
mod output;
pub mod ring;
#[cfg(target_os = "linux")]
mod session;
mod summary;
#[cfg(target_os = "linux")]
mod synth;
#[cfg(target_os = "linux")]
mod sys;
#[cfg(target_os = "linux")]
mod watch;

pub use error::{Error, Result};
#[cfg(target_os = "linux")]
pub use session::record;
pub use summary::{BpfStats, KernelCode, Options, Summary};

/// Recording needs Linux's perf_event_open.
#[cfg(not(target_os = "linux"))]
pub fn record(_: &Options) -> Result<Summary> {
    Err(Error::Environment("recording needs Linux (perf_event_open)".into()))
}
