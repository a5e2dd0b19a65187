//! A code source with two contents at one address, for the flow tests.

use codeimage::window::Static;
use codeimage::CodeTimeline;
use intel_pt::flow::{CodeSource, Fetch, Time};

/// Two contents at one address: the image's, and `alt` over its first bytes.
pub struct AltAt<'a> {
    pub code: &'a CodeTimeline,
    pub at: u64,
    pub alt: &'a [u8],
}

impl CodeSource for AltAt<'_> {
    fn fetch(&self, addr: u64, lo: Time, hi: Time, which: usize, buf: &mut [u8; 16]) -> Fetch {
        let n = match Static(self.code).fetch(addr, lo, hi, 0, buf) {
            Fetch::Exact(n) if addr == self.at => n,
            other => return other,
        };
        match which {
            0 => {}
            1 => buf[..self.alt.len()].copy_from_slice(self.alt),
            _ => return Fetch::Unmapped,
        }
        Fetch::Candidate { filled: n, count: 2 }
    }
}
