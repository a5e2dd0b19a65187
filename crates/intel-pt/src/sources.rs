//! Code sources over a [`CodeTimeline`] for the flow decoder: the three ways
//! of knowing the code that `poketrace check` compares.

use codeimage::{CodeTimeline, Read};

use crate::flow::{CodeSource, Fetch, Time};

/// The code as it was before any change: no poke awareness.
pub struct Static<'a>(pub &'a CodeTimeline);

/// One image, updated in timestamp order, read at the last timestamp seen:
/// what perf does.
pub struct PerfStyle<'a>(pub &'a CodeTimeline);

/// The code timeline asked for the whole interval the trace allows; every
/// content a change inside it allows is a candidate.
pub struct Interval<'a>(pub &'a CodeTimeline);

impl CodeSource for Static<'_> {
    fn fetch(&self, addr: u64, _lo: Time, _hi: Time, _which: usize, buf: &mut [u8; 16]) -> Fetch {
        exact(self.0.read_into(addr, buf, 0).mapped)
    }
}

impl CodeSource for PerfStyle<'_> {
    fn fetch(&self, addr: u64, lo: Time, _hi: Time, _which: usize, buf: &mut [u8; 16]) -> Fetch {
        exact(self.0.read_into(addr, buf, lo).mapped)
    }
}

impl CodeSource for Interval<'_> {
    fn fetch(&self, addr: u64, lo: Time, hi: Time, which: usize, buf: &mut [u8; 16]) -> Fetch {
        let info = self.0.read_into(addr, buf, lo);
        if info.mapped == 0 && info.valid.end > hi {
            return Fetch::Unmapped;
        }
        if !info.uncertain && info.valid.end > hi {
            return Fetch::Exact(info.mapped);
        }
        // A change lands inside [lo, hi]: every content the interval allows,
        // in the order they held. (Weighing them by how long each held was
        // tried: better for pairs, worse for coarse int3 timing; not kept.)
        let mut all: Vec<Vec<u8>> = Vec::new();
        for (_, r) in self.0.read_during(addr, 16, lo, hi) {
            match r {
                Read::Exact(b) => all.push(b),
                Read::Uncertain(c) => all.extend(c),
                Read::Unmapped { .. } => {}
            }
        }
        let mut distinct: Vec<Vec<u8>> = Vec::with_capacity(all.len());
        for b in all {
            if !distinct.contains(&b) {
                distinct.push(b);
            }
        }
        match distinct.get(which) {
            Some(b) => {
                buf[..b.len()].copy_from_slice(b);
                if distinct.len() == 1 {
                    Fetch::Exact(b.len())
                } else {
                    Fetch::Candidate { filled: b.len(), count: distinct.len() }
                }
            }
            None => Fetch::Unmapped,
        }
    }
}

fn exact(n: usize) -> Fetch {
    if n == 0 {
        Fetch::Unmapped
    } else {
        Fetch::Exact(n)
    }
}

