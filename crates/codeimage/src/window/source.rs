//! The code-window API: what a source gives for an address and a window of time.

use std::ops::Range;

use crate::timeline::Time;

/// What a code source found at an address for a window of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// These bytes (count filled), the same over the whole window.
    Exact(usize),
    /// Several contents are possible; this is candidate `which` of `count`.
    Candidate { filled: usize, count: usize },
    /// Nothing mapped there (or no candidate `which`).
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

/// Code bytes at an address for a window of time `[lo, hi]` (inclusive).
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

    /// For caches of decoded code: what [`CodeSource::fetch`] gives as
    /// `Exact` at `addr` for `[lo, hi]` (bytes filled), and a window of time
    /// such that `fetch` gives the same bytes, exactly, for every `[lo', hi']`
    /// that [`CodeSource::admits`] with it. `None` (the default) when the code
    /// there is not exact, or the source does not say: nothing is cached.
    fn fetch_window(&self, _addr: u64, _lo: Time, _hi: Time, _buf: &mut [u8; 16]) -> Option<(usize, Range<Time>)> {
        None
    }

    /// For caches of decoded code, without a fetch per instruction: bytes
    /// at `addr` such that `fetch` of any 16 of them gives those 16 for
    /// every `[lo', hi']` [`CodeSource::admits`] with the window. `None`
    /// (the default): [`CodeSource::fetch_window`] instruction by instruction.
    fn code_run(&self, _addr: u64, _lo: Time, _hi: Time) -> Option<(&[u8], Range<Time>)> {
        None
    }

    /// Whether bytes read with `window` (from [`CodeSource::fetch_window`]
    /// or [`CodeSource::code_run`], or the intersection of several such) are
    /// what `fetch` gives for `[lo, hi]`.
    fn admits(&self, _window: &Range<Time>, _lo: Time, _hi: Time) -> bool {
        false
    }

    /// Whether what the source gives depends on `hi`, so the decoder must
    /// work it out (true, the default, unless the source says otherwise).
    fn reads_hi(&self) -> bool {
        true
    }

    /// Bytes of code there are to walk, at most (0, the default: not
    /// known): a cache of decoded code sizes its first table for them
    /// instead of growing to it.
    fn code_bytes(&self) -> u64 {
        0
    }
}

/// A source borrowed is the source.
impl<T: CodeSource + ?Sized> CodeSource for &T {
    #[inline]
    fn fetch(&self, addr: u64, lo: Time, hi: Time, which: usize, buf: &mut [u8; 16]) -> Fetch {
        (**self).fetch(addr, lo, hi, which, buf)
    }
    fn candidates(&self, addr: u64, lo: Time, hi: Time, count: usize, out: &mut Vec<Content>) {
        (**self).candidates(addr, lo, hi, count, out)
    }
    #[inline]
    fn fetch_window(&self, addr: u64, lo: Time, hi: Time, buf: &mut [u8; 16]) -> Option<(usize, Range<Time>)> {
        (**self).fetch_window(addr, lo, hi, buf)
    }
    #[inline]
    fn code_run(&self, addr: u64, lo: Time, hi: Time) -> Option<(&[u8], Range<Time>)> {
        (**self).code_run(addr, lo, hi)
    }
    #[inline]
    fn admits(&self, window: &Range<Time>, lo: Time, hi: Time) -> bool {
        (**self).admits(window, lo, hi)
    }
    #[inline]
    fn reads_hi(&self) -> bool {
        (**self).reads_hi()
    }
    fn code_bytes(&self) -> u64 {
        (**self).code_bytes()
    }
}
