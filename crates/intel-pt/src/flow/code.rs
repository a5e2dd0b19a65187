//! The code-source API: what the code at an address is over an interval
//! of time, as the flow decoder asks it (one content, or several
//! candidates, with when each holds).

use std::ops::Range;

pub use codeimage::Time;

/// What the code source found at an address for a time interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// These bytes (count filled), the same over the whole interval.
    Exact(usize),
    /// Several contents are possible; this is candidate `which` of `count`.
    Candidate { filled: usize, count: usize },
    /// Nothing mapped there.
    Unmapped,
}

/// One content a code source finds possible at an address for `[lo, hi]`:
/// its bytes (`len` filled) and the first and last times within `[lo, hi]`
/// it holds, so that an instruction read from it ran within `from..=to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Content {
    pub bytes: [u8; 16],
    pub len: usize,
    pub from: Time,
    pub to: Time,
}

/// Code bytes at an address for a time interval (a time-versioned image).
pub trait CodeSource {
    /// Fills `buf` with candidate `which` of the code at `addr` for `[lo, hi]`.
    fn fetch(&self, addr: u64, lo: Time, hi: Time, which: usize, buf: &mut [u8; 16]) -> Fetch;

    /// What [`CodeSource::fetch`] gives for `which` in `0..count`, into
    /// `out` (those it finds unmapped left out), with when each holds. The
    /// default calls `fetch` for each and says each may hold over all of
    /// `[lo, hi]`; a source that works out all its candidates at once gives
    /// them in one go, with their times. (The times steer the choice, so a
    /// source that wraps another forwards this too.)
    fn candidates(&self, addr: u64, lo: Time, hi: Time, count: usize, out: &mut Vec<Content>) {
        for which in 0..count {
            let mut bytes = [0u8; 16];
            match self.fetch(addr, lo, hi, which, &mut bytes) {
                Fetch::Exact(len) | Fetch::Candidate { filled: len, .. } => out.push(Content { bytes, len, from: lo, to: hi }),
                Fetch::Unmapped => {}
            }
        }
    }

    /// For the decoded-block cache: what [`CodeSource::fetch`] gives as
    /// `Exact` at `addr` for `[lo, hi]` (bytes filled), and a window of time
    /// such that `fetch` gives the same bytes, exactly, for every `[lo', hi']`
    /// that [`CodeSource::admits`] with it. `None` (the default) when the code
    /// there is not exact, or the source does not say: no block is cached.
    fn fetch_window(&self, _addr: u64, _lo: Time, _hi: Time, _buf: &mut [u8; 16]) -> Option<(usize, Range<Time>)> {
        None
    }

    /// For building cached blocks without a fetch per instruction: bytes at
    /// `addr` such that `fetch` of any 16 of them gives those 16 for every
    /// `[lo', hi']` [`CodeSource::admits`] with the window. `None` (the
    /// default): [`CodeSource::fetch_window`] instruction by instruction.
    fn code_run(&self, _addr: u64, _lo: Time, _hi: Time) -> Option<(&[u8], Range<Time>)> {
        None
    }

    /// Whether bytes read with `window` (from [`CodeSource::fetch_window`])
    /// are what `fetch` gives for `[lo, hi]`.
    fn admits(&self, _window: &Range<Time>, _lo: Time, _hi: Time) -> bool {
        false
    }

    /// Whether what the source gives depends on `hi`, so the decoder must
    /// work it out (true, the default, unless the source says otherwise).
    fn reads_hi(&self) -> bool {
        true
    }

    /// Bytes of code there are to walk, at most (0, the default: not
    /// known): the decoded-block cache makes its first table big enough for
    /// their blocks instead of growing to it.
    fn code_bytes(&self) -> u64 {
        0
    }
}
