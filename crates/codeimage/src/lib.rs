//! A time-versioned kernel code image.
//!
//! A decoder asks: which bytes were at `[addr, addr+len)` at perf time `t`?
//! [`CodeTimeline`] answers for any moment, forwards or backwards, from base
//! code ([`BaseImage`]: vmlinux, kcore, raw dumps, OpenCSD snapshots) plus the
//! history of changes ([`Poke`], from `PERF_RECORD_TEXT_POKE`), and says so
//! when the truth is uncertain (a begin/end pair's window, or records that
//! contradict each other) or when nothing is mapped.
//!
//! Semantics (see the project's TEXT-POKE notes): a poke's new bytes hold
//! from its timestamp inclusive, as perf applies them; a pair's content is
//! uncertain between its begin and end; old bytes that disagree with the
//! image are reported as [`Anomaly`] and the record is followed.

mod base;
mod error;
mod perf;
mod timeline;

pub use base::{BaseImage, Region};
pub use error::{Error, Result};
pub use perf::{add_base, from_perf_data, from_perf_data_with, PerfTimeline, PokeEvents};
pub use timeline::{Anomaly, AnomalyKind, CodeTimeline, HistoryEntry, Nearby, Poke, PokeInfo, Read, ReadInfo, Time, TimelineBuilder};
