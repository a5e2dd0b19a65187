//! Where a trace buffer is cut for parallel decoding: at its PSBs.

use crate::{find_psb, PSB};

/// The PSB segments of `buf`: from each PSB to the next (the last to the
/// end). Bytes before the first PSB are skipped, as [`crate::flow::FlowDecoder::run`]
/// skips them; a buffer without a PSB is one segment.
pub fn segments(buf: &[u8]) -> Vec<(usize, usize)> {
    psb_segments(buf).collect()
}

/// [`segments`] one at a time, each found when asked for: the bytes of
/// `buf` past a segment's end are not read before the next is asked for.
pub fn psb_segments(buf: &[u8]) -> PsbSegments<'_> {
    psb_runs(buf, PSB.len())
}

/// Consecutive PSB segments of `buf` together, as [`psb_segments`] gives
/// them, each run of at least `at_least` bytes but the last: cut at the
/// first PSB that many bytes after the run's start (the bytes between are
/// not searched).
pub fn psb_runs(buf: &[u8], at_least: usize) -> PsbSegments<'_> {
    PsbSegments { buf, next: Some(find_psb(buf).unwrap_or(0)), at_least: at_least.max(PSB.len()) }
}

/// The iterator of [`psb_segments`] and [`psb_runs`].
pub struct PsbSegments<'b> {
    buf: &'b [u8],
    /// Where the next segment starts.
    next: Option<usize>,
    at_least: usize,
}

impl Iterator for PsbSegments<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        let start = self.next?;
        let after = start.saturating_add(self.at_least);
        self.next = self.buf.get(after..).and_then(find_psb).map(|p| after + p);
        Some((start, self.next.unwrap_or(self.buf.len())))
    }
}
