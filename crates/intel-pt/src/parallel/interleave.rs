//! Several PSB segments walked at once on one thread, taking turns, so that
//! walks over code too large for the caches near the core wait for memory
//! together rather than one at a time.

use std::collections::VecDeque;

use super::segments::segments;
use crate::flow::state::State;
use crate::flow::{CodeSource, FlowDecoder, FlowSink};

impl<'a, C: CodeSource> FlowDecoder<'a, C> {
    /// Decodes `buf` cut at its PSBs ([`segments`]) on this
    /// thread, up to `lanes` segments at once: a walk goes on while its
    /// next block was looked up lately (among the last few thousand), and
    /// at one that was not it asks for the block's entry and gives the next
    /// walk its turn, so that a walk over code too large for the caches
    /// near the core waits for memory while the others run, not alone, and
    /// a walk over code that fits them runs as if alone. Each segment's
    /// events go to a sink of its own from `make` (the same
    /// events as [`super::ParallelFlow::run_segments`]), handed
    /// to `done` in trace order. The block cache is this decoder's, kept.
    pub fn run_interleaved<S: FlowSink>(&mut self, buf: &'a [u8], lanes: usize, make: impl FnMut() -> S, done: impl FnMut(S)) {
        self.cache.refresh();
        self.interleave(buf, 0, &segments(buf), lanes, make, done);
    }

    /// [`Self::run_interleaved`] over the segments of `buf` that `cuts`
    /// gives (from one PSB to the next, or the end; in order; offsets from
    /// `base`), over the shared block table this decoder took last
    /// (`BlockCache::refresh`).
    pub(super) fn interleave<S: FlowSink>(
        &mut self,
        buf: &'a [u8],
        base: usize,
        cuts: &[(usize, usize)],
        lanes: usize,
        mut make: impl FnMut() -> S,
        mut done: impl FnMut(S),
    ) {
        let lanes = lanes.clamp(1, cuts.len().max(1));
        // Segments from the next to hand out on, finished or not: started
        // only this far ahead of it, so that a long segment holds back a
        // bounded number of finished ones.
        let window = lanes * 4;
        let mut cache = std::mem::take(&mut self.cache);
        let mut walks: Vec<(State<'a>, usize, usize, S)> = Vec::with_capacity(lanes);
        let mut finished: VecDeque<Option<S>> = VecDeque::with_capacity(window);
        let (mut started, mut handed) = (0, 0);
        let mut recent = Recent::new();
        loop {
            while walks.len() < lanes && started < cuts.len() && started < handed + window {
                let (start, end) = cuts[started];
                let mut st = State::new(&buf[start..], if end >= buf.len() { usize::MAX } else { end - start });
                self.walker.start(&mut st, &buf[start..]);
                walks.push((st, base + start, started, make()));
                finished.push_back(None);
                started += 1;
            }
            if walks.is_empty() {
                break;
            }
            let mut i = 0;
            while i < walks.len() {
                let (st, base, _, sink) = &mut walks[i];
                let mut going = true;
                for _ in 0..MAX_RUN {
                    going = self.walker.turn::<false>(st, &mut cache, *base, sink);
                    if !going {
                        break;
                    }
                    if let Some(ip) = st.ip.filter(|&ip| !recent.check(ip)) {
                        cache.prefetch(ip);
                        break;
                    }
                }
                if going {
                    i += 1;
                    continue;
                }
                let (_, _, index, sink) = walks.swap_remove(i);
                finished[index - handed] = Some(sink);
                while let Some(Some(_)) = finished.front() {
                    done(finished.pop_front().flatten().expect("finished"));
                    handed += 1;
                }
                if started < cuts.len() && walks.len() < lanes {
                    break;
                }
            }
        }
        self.cache = cache;
    }
}

/// Turns one walk of [`FlowDecoder::run_interleaved`] takes in a row at most
/// while its blocks were looked up recently.
const MAX_RUN: usize = 64;

/// The blocks [`FlowDecoder::run_interleaved`]'s walks looked up lately (a
/// tag per slot, the newest block in it), to tell which entries are likely
/// still near the core: a walk goes on to such a block at once, and waits
/// its turn (its entry asked for) only for the others.
struct Recent {
    tags: Box<[u16; RECENT]>,
}

/// Slots of [`Recent`]: 8 KB of tags, far fewer blocks than L2 holds
/// the entries of (1K to 64K slots measured the same on vmlinux).
const RECENT: usize = 1 << 12;

impl Recent {
    fn new() -> Self {
        Recent { tags: Box::new([0; RECENT]) }
    }

    /// Whether `ip` was looked up lately; it is noted as looked up now.
    #[inline(always)]
    fn check(&mut self, ip: u64) -> bool {
        let (slot, tag) = Self::place(ip);
        std::mem::replace(&mut self.tags[slot], tag) == tag
    }

    /// `ip`'s slot, and its tag there (never 0, the empty slot's).
    #[inline(always)]
    fn place(ip: u64) -> (usize, u16) {
        let h = ip.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((h >> (64 - RECENT.trailing_zeros())) as usize, (h >> 32) as u16 | 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_blocks_are_the_ones_looked_up_last_in_their_slot() {
        let mut recent = Recent::new();
        assert!(!recent.check(0xffff_ffff_8100_0000), "never looked up");
        assert!(recent.check(0xffff_ffff_8100_0000), "looked up just now");
        // Another block in the same slot takes it over.
        let slot = |ip: u64| Recent::place(ip).0;
        let rival = (0xffff_ffff_8100_0001..).find(|&ip| slot(ip) == slot(0xffff_ffff_8100_0000)).unwrap();
        assert!(!recent.check(rival));
        assert!(!recent.check(0xffff_ffff_8100_0000), "its slot went to another block");
        // Blocks in other slots stay.
        let other = (0xffff_ffff_8100_0001..).find(|&ip| slot(ip) != slot(rival)).unwrap();
        assert!(!recent.check(other));
        assert!(recent.check(0xffff_ffff_8100_0000) && recent.check(other));
    }
}
