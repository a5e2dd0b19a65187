//! A branch profile: taken branches (source, target) and fall-through
//! ranges (from a branch target, or where tracing started, to the next
//! branch source), counted by address pair, as profile-guided optimizers
//! read them (BOLT's pre-aggregated data, llvm-profgen's ranges). What ran
//! in an instruction the decoder was not sure of is counted apart.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use isa::BranchClass;

/// Counts by address pair: `(source, target)` or `(start, end)`.
pub type PairCounts = HashMap<(u64, u64), u64, BuildHasherDefault<PairHasher>>;

/// A hasher for address pairs: a multiply and a rotate a word, as rustc's
/// FxHash does. Addresses are not chosen by an attacker, and SipHash cost
/// a third of the profile's time.
#[derive(Default)]
pub struct PairHasher(u64);

impl Hasher for PairHasher {
    #[inline(always)]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(b));
        }
    }

    #[inline(always)]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The counts of a trace, or of one CPU's part of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    /// Taken branches by (source, target), source instruction certain.
    pub branches: PairCounts,
    /// Fall-through ranges by (first, last) instruction, all certain.
    pub ranges: PairCounts,
    /// Taken branches whose source instruction was uncertain (several code
    /// contents fit the trace).
    pub uncertain_branches: PairCounts,
    /// Ranges holding an uncertain instruction.
    pub uncertain_ranges: PairCounts,
    /// Transfers that are no branch of a function: traps and interrupts
    /// (a kprobe's INT3), far transfers (system calls, IRET). They end a range.
    pub not_branches: u64,
    /// Ranges cut by a decode error, not counted.
    pub cut_ranges: u64,
    pub errors: u64,
}

impl Profile {
    /// Adds `other`'s counts: the smaller of each two maps is counted into
    /// the larger, so adding to an empty profile moves the maps.
    pub fn add(&mut self, mut other: Profile) {
        for (mine, theirs) in [
            (&mut self.branches, &mut other.branches),
            (&mut self.ranges, &mut other.ranges),
            (&mut self.uncertain_branches, &mut other.uncertain_branches),
            (&mut self.uncertain_ranges, &mut other.uncertain_ranges),
        ] {
            if mine.len() < theirs.len() {
                std::mem::swap(mine, theirs);
            }
            for (k, n) in theirs.drain() {
                *mine.entry(k).or_default() += n;
            }
        }
        self.not_branches += other.not_branches;
        self.cut_ranges += other.cut_ranges;
        self.errors += other.errors;
    }
}

/// Whether an instruction of `class` that went on elsewhere than the next
/// instruction is a branch of its function (a far transfer is not).
pub fn is_function_branch(class: BranchClass) -> bool {
    matches!(
        class,
        BranchClass::CondBranch
            | BranchClass::DirectJump
            | BranchClass::DirectCall
            | BranchClass::IndirectJump
            | BranchClass::IndirectCall
            | BranchClass::Return
    )
}

/// One CPU's counting state: where the current fall-through range
/// started, and whether it holds an uncertain instruction.
#[derive(Default)]
pub struct RangeCounter {
    pub profile: Profile,
    start: Option<u64>,
    uncertain: bool,
    /// A range ended (or was cut, or tracing stopped) since [`RangeCounter::take_closed`].
    closed: bool,
}

/// Where a range started and whether it holds an uncertain instruction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RangeState {
    start: Option<u64>,
    uncertain: bool,
}

impl RangeCounter {
    /// A range starts at `ip` (a branch target, a trap's handler, where
    /// tracing started), or none when `ip` is `None` (filtered out).
    #[inline(always)]
    pub fn start(&mut self, ip: Option<u64>) {
        (self.start, self.uncertain) = (ip, false);
    }

    /// The current range holds an uncertain instruction.
    #[inline(always)]
    pub fn saw_uncertain(&mut self) {
        self.uncertain = true;
    }

    /// Tracing stopped: no range is open.
    #[inline(always)]
    pub fn stop(&mut self) {
        (self.start, self.uncertain, self.closed) = (None, false, true);
    }

    /// Whether a range ended since the last call.
    #[inline(always)]
    pub fn take_closed(&mut self) -> bool {
        std::mem::take(&mut self.closed)
    }

    pub fn state(&self) -> RangeState {
        RangeState { start: self.start, uncertain: self.uncertain }
    }

    pub fn set_state(&mut self, s: RangeState) {
        (self.start, self.uncertain) = (s.start, s.uncertain);
    }

    /// The current range ends at the instruction at `end`; counted when it started.
    #[inline(always)]
    pub fn close(&mut self, end: u64) {
        self.closed = true;
        if let Some(start) = self.start.take() {
            let map = if self.uncertain { &mut self.profile.uncertain_ranges } else { &mut self.profile.ranges };
            *map.entry((start, end)).or_default() += 1;
        }
        self.uncertain = false;
    }

    /// A taken branch from `from` to `to`, of an uncertain source or not.
    #[inline(always)]
    pub fn branch(&mut self, from: u64, to: u64, uncertain: bool) {
        let map = if uncertain { &mut self.profile.uncertain_branches } else { &mut self.profile.branches };
        *map.entry((from, to)).or_default() += 1;
    }

    /// The current range is cut by a decode error: not counted.
    pub fn cut(&mut self) {
        self.closed = true;
        if self.start.take().is_some() {
            self.profile.cut_ranges += 1;
        }
        self.uncertain = false;
    }

    /// Whether a range is open.
    pub fn open(&self) -> bool {
        self.start.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(pairs: &[((u64, u64), u64)], errors: u64) -> Profile {
        let counts: PairCounts = pairs.iter().copied().collect();
        Profile { branches: counts.clone(), uncertain_ranges: counts, errors, ..Profile::default() }
    }

    /// Counts add up whichever side holds more pairs (the larger map is kept).
    #[test]
    fn adding_sums_counts_either_way() {
        let small = profile(&[((1, 2), 3)], 1);
        let large = profile(&[((1, 2), 4), ((5, 6), 7)], 2);
        let sum = profile(&[((1, 2), 7), ((5, 6), 7)], 3);
        for (a, b) in [(&small, &large), (&large, &small)] {
            let mut total = a.clone();
            total.add(b.clone());
            assert_eq!(total, sum);
        }
        let mut from_empty = Profile::default();
        from_empty.add(large.clone());
        assert_eq!(from_empty, large);
    }
}
