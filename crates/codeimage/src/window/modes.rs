//! The three code sources over a [`CodeTimeline`]: the ways of knowing the
//! code that `poketrace check` compares.

use std::ops::Range;

use super::source::{CodeSource, Content, Fetch};
use crate::timeline::{CodeTimeline, Read, Time};

/// The code as it was before any change: no poke awareness.
#[derive(Clone, Copy)]
pub struct Static<'a>(pub &'a CodeTimeline);

/// One image, updated in timestamp order, read at the last timestamp seen:
/// perf's model. As in perf, the time moves to a timing packet's when the
/// walk takes the flow packet after it (the walk's `lo`).
#[derive(Clone, Copy)]
pub struct PerfStyle<'a>(pub &'a CodeTimeline);

/// The code timeline asked for the whole interval the trace allows; every
/// content a change inside it allows is a candidate, with the times it
/// holds within the interval (so that the one taken raises the time).
#[derive(Clone, Copy)]
pub struct Interval<'a>(pub &'a CodeTimeline);

impl CodeSource for Static<'_> {
    fn fetch(&self, addr: u64, _lo: Time, _hi: Time, _which: usize, buf: &mut [u8; 16]) -> Fetch {
        exact(self.0.read_into(addr, buf, 0).mapped)
    }

    /// Always the code at time 0: any window.
    fn fetch_window(&self, addr: u64, _lo: Time, _hi: Time, buf: &mut [u8; 16]) -> Option<(usize, Range<Time>)> {
        let n = self.0.read_into(addr, buf, 0).mapped;
        (n > 0).then_some((n, 0..Time::MAX))
    }

    fn code_run(&self, addr: u64, _lo: Time, _hi: Time) -> Option<(&[u8], Range<Time>)> {
        unchanging(self.0, addr)
    }

    fn admits(&self, _window: &Range<Time>, _lo: Time, _hi: Time) -> bool {
        true
    }

    fn reads_hi(&self) -> bool {
        false
    }

    fn code_bytes(&self) -> u64 {
        code_bytes(self.0)
    }
}

impl CodeSource for PerfStyle<'_> {
    fn fetch(&self, addr: u64, lo: Time, _hi: Time, _which: usize, buf: &mut [u8; 16]) -> Fetch {
        exact(self.0.read_into(addr, buf, lo).mapped)
    }

    /// Read at `lo`: the bytes hold while `lo` is in their validity window.
    fn fetch_window(&self, addr: u64, lo: Time, _hi: Time, buf: &mut [u8; 16]) -> Option<(usize, Range<Time>)> {
        let info = self.0.read_into(addr, buf, lo);
        (info.mapped > 0).then_some((info.mapped, info.valid))
    }

    fn code_run(&self, addr: u64, _lo: Time, _hi: Time) -> Option<(&[u8], Range<Time>)> {
        unchanging(self.0, addr)
    }

    fn admits(&self, window: &Range<Time>, lo: Time, _hi: Time) -> bool {
        window.contains(&lo)
    }

    fn reads_hi(&self) -> bool {
        false
    }

    fn code_bytes(&self) -> u64 {
        code_bytes(self.0)
    }
}

impl CodeSource for Interval<'_> {
    /// Exact when the bytes read at `lo` hold, with no uncertain span, past
    /// `hi`, or forever (`hi` unbounded: `fetch` then finds one content over
    /// the whole read, which is this one when all 16 bytes are mapped; a
    /// shorter read's window is cut short of forever).
    fn fetch_window(&self, addr: u64, lo: Time, hi: Time, buf: &mut [u8; 16]) -> Option<(usize, Range<Time>)> {
        let info = self.0.read_into(addr, buf, lo);
        let mut w = info.valid;
        if w.end == Time::MAX && info.mapped < buf.len() {
            w.end = Time::MAX - 1;
        }
        (info.mapped > 0 && !info.uncertain && (w.end > hi || w.end == Time::MAX)).then_some((info.mapped, w))
    }

    fn code_run(&self, addr: u64, _lo: Time, _hi: Time) -> Option<(&[u8], Range<Time>)> {
        unchanging(self.0, addr)
    }

    fn admits(&self, window: &Range<Time>, lo: Time, hi: Time) -> bool {
        window.start <= lo && lo < window.end && (hi < window.end || window.end == Time::MAX)
    }

    fn fetch(&self, addr: u64, lo: Time, hi: Time, which: usize, buf: &mut [u8; 16]) -> Fetch {
        match self.read(addr, lo, hi, buf) {
            Contents::Unmapped => Fetch::Unmapped,
            Contents::Exact(n) => Fetch::Exact(n),
            Contents::Several(distinct) => match distinct.get(which) {
                Some(c) => {
                    buf[..c.len].copy_from_slice(&c.bytes[..c.len]);
                    if distinct.len() == 1 {
                        Fetch::Exact(c.len)
                    } else {
                        Fetch::Candidate { filled: c.len, count: distinct.len() }
                    }
                }
                None => Fetch::Unmapped,
            },
        }
    }

    /// All candidates from one look at the timeline (`fetch` for each
    /// `which` would look again each time), each with when it holds.
    fn candidates(&self, addr: u64, lo: Time, hi: Time, count: usize, out: &mut Vec<Content>) {
        let mut bytes = [0u8; 16];
        match self.read(addr, lo, hi, &mut bytes) {
            Contents::Unmapped => {}
            Contents::Exact(len) => out.extend(std::iter::repeat_n(Content { bytes, len, from: lo, to: hi }, count)),
            Contents::Several(distinct) => out.extend(distinct.into_iter().take(count)),
        }
    }

    fn code_bytes(&self) -> u64 {
        code_bytes(self.0)
    }
}

/// What `Interval` finds at an address for an interval.
enum Contents {
    Unmapped,
    /// In the buffer, this many bytes, the same over the whole interval.
    Exact(usize),
    /// A change lands inside: every distinct content, in the order they
    /// first held, each from the first to the last time it holds.
    Several(Vec<Content>),
}

impl Interval<'_> {
    fn read(&self, addr: u64, lo: Time, hi: Time, buf: &mut [u8; 16]) -> Contents {
        let info = self.0.read_into(addr, buf, lo);
        if info.mapped == 0 && info.valid.end > hi {
            return Contents::Unmapped;
        }
        if !info.uncertain && info.valid.end > hi {
            return Contents::Exact(info.mapped);
        }
        // A change lands inside [lo, hi]: every content the interval allows,
        // in the order they held. (Weighing them by how long each held was
        // tried: better for pairs, worse for coarse int3 timing; not kept.)
        let mut distinct: Vec<Content> = Vec::new();
        for (span, r) in self.0.segments_during(addr, 16, lo, hi) {
            let found = match r {
                Read::Exact(b) => vec![b],
                Read::Uncertain(c) => c,
                Read::Unmapped { .. } => Vec::new(),
            };
            let to = span.end.saturating_sub(1).min(hi);
            for b in found {
                match distinct.iter_mut().find(|c| c.bytes[..c.len] == b[..]) {
                    Some(c) => c.to = to,
                    None => {
                        let mut bytes = [0u8; 16];
                        let len = b.len().min(16);
                        bytes[..len].copy_from_slice(&b[..len]);
                        distinct.push(Content { bytes, len, from: span.start, to });
                    }
                }
            }
        }
        Contents::Several(distinct)
    }
}

/// The bytes of all the image's regions.
fn code_bytes(code: &CodeTimeline) -> u64 {
    code.base().regions().iter().map(|r| r.len()).sum()
}

/// Code no change touches, from `addr` to the end of its region or the
/// first change: the same at every time (for `hi` unbounded too, as
/// `Interval::fetch` then finds one content). Long, so that a decoder
/// builds most of its blocks from the last such run it was given.
fn unchanging(code: &CodeTimeline, addr: u64) -> Option<(&[u8], Range<Time>)> {
    code.unchanging(addr, usize::MAX).map(|r| (r, 0..Time::MAX))
}

fn exact(n: usize) -> Fetch {
    if n == 0 {
        Fetch::Unmapped
    } else {
        Fetch::Exact(n)
    }
}
