//! The code at an address over a window of time: what a trace decoder asks
//! a time-versioned image.
//!
//! A decoder knows when an instruction ran only within bounds: after one
//! timing packet `lo`, before the next `hi`. [`CodeSource`] answers for
//! such a window `[lo, hi]`: the bytes there if they hold over the whole
//! window ([`Fetch::Exact`]), else every content a change inside it allows
//! ([`Fetch::Candidate`], [`CodeSource::candidates`] with the times each
//! holds), or nothing mapped. For the caches of decoded code it also says
//! until when an answer holds ([`CodeSource::fetch_window`],
//! [`CodeSource::admits`]) and which runs of code never change
//! ([`CodeSource::code_run`]).
//!
//! Three ways of knowing the code, over a [`CodeTimeline`](crate::CodeTimeline)
//! (`poketrace check` compares them):
//! - [`Static`]: the code before any change (no poke awareness);
//! - [`PerfStyle`]: one image updated in timestamp order and read at `lo`,
//!   as perf does;
//! - [`Interval`]: the timeline asked for the whole window; every content a
//!   change inside it allows is a candidate.
//!
//! Times are [`Time`]: the key the image is versioned by, perf time for a
//! timeline built from perf.data. A trace whose own clock is another (ETMv4
//! timestamps) converts its times to the image's before asking.

mod modes;
mod source;

pub use crate::timeline::Time;
pub use modes::{Interval, PerfStyle, Static};
pub use source::{CodeSource, Content, Fetch};
