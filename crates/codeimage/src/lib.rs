//! A time-versioned kernel code image, and what a trace decoder asks of it.
//!
//! Kernel text is patched while it runs (static keys, alternatives, ftrace,
//! kprobes: `PERF_RECORD_TEXT_POKE`), so "which bytes were at this address"
//! needs a time. This crate answers it in three layers:
//!
//! - [`BaseImage`]: the code before any recorded change, from ELF files
//!   (vmlinux, kcore, modules) and raw dumps, memory-mapped; user code from
//!   the files MMAP records name, only ELF executables and shared objects
//!   with the recorded build-id ([`UserCode`], rooted like perf's `--symfs`).
//! - [`CodeTimeline`]: the base plus the history of changes ([`Poke`]),
//!   read at any moment, forwards or backwards; it says when the truth is
//!   uncertain (a begin/end pair's window, or records that contradict each
//!   other) or when nothing is mapped, and reports records whose old bytes
//!   disagree with the image as [`Anomaly`]. [`from_perf_data`] builds one
//!   from a perf.data file or directory.
//! - [`window`]: the code over a window of time, as a trace decoder knows
//!   its time only within bounds: the [`window::CodeSource`] trait (the
//!   bytes if they hold over the window, else each content a change inside
//!   allows, and until when an answer holds, for caches of decoded code)
//!   and its three implementations over a timeline ([`window::Static`],
//!   [`window::PerfStyle`], [`window::Interval`]). Both flow decoders
//!   (`intel-pt`, `etm`) read code through it.
//!
//! One [`Time`] keys everything: perf time in nanoseconds for a timeline
//! built from perf.data. A poke's new bytes hold from its timestamp
//! inclusive, as perf applies them; a pair's content is uncertain between
//! its begin and end (see the project's TEXT-POKE notes).

mod base;
mod elf;
mod error;
mod perf;
mod sideband;
mod timeline;
mod user;
pub mod window;

pub use base::{BaseImage, Region, OVERLAPS_LISTED};
pub use elf::{exec_segments, ExecSegment};
pub use error::{Error, Result};
pub use perf::{add_base, add_base_mapped, add_base_with, from_perf_data, from_perf_data_with, over_base};
pub use sideband::{PerfTimeline, PokeEvents, Sideband, SidebandReader};
pub use timeline::{Anomaly, AnomalyKind, CodeTimeline, HistoryEntry, Nearby, Poke, PokeInfo, Read, ReadInfo, Time, TimelineBuilder};
pub use user::{user_mappings, Refused, UserCode, UserFile, UserMapping, UserReport, REFUSED_LISTED};
