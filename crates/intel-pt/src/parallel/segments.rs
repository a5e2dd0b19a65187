//! Where a trace buffer is cut for parallel decoding: at its PSBs.

use crate::{find_psb, PSB};

/// The PSB segments of `buf`: from each PSB to the next (the last to the
/// end). Bytes before the first PSB are skipped, as [`crate::flow::FlowDecoder::run`]
/// skips them; a buffer without a PSB is one segment.
pub fn segments(buf: &[u8]) -> Vec<(usize, usize)> {
    if find_psb(buf).is_none() {
        return vec![(0, buf.len())];
    }
    let mut starts = Vec::new();
    let mut at = 0;
    while let Some(p) = find_psb(&buf[at..]) {
        starts.push(at + p);
        at += p + PSB.len();
    }
    starts.iter().enumerate().map(|(i, &s)| (s, starts.get(i + 1).copied().unwrap_or(buf.len()))).collect()
}
