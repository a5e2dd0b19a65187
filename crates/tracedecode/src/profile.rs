//! A branch profile: taken branches (source, target) and fall-through
//! ranges (from a branch target, or where tracing started, to the next
//! branch source), counted by address pair, as profile-guided optimizers
//! read them (BOLT's pre-aggregated data, llvm-profgen's ranges). What ran
//! in an instruction the decoder was not sure of is counted apart.

use isa::BranchClass;

pub use crate::pairs::PairCounts;

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
    /// Adds `other`'s counts: the smaller of each two tables is counted
    /// into the larger, so adding to an empty profile moves the tables.
    pub fn add(&mut self, other: Profile) {
        self.branches.merge(other.branches);
        self.ranges.merge(other.ranges);
        self.uncertain_branches.merge(other.uncertain_branches);
        self.uncertain_ranges.merge(other.uncertain_ranges);
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

/// Certain pairs kept in arrival order before they are counted, at most
/// this many of a kind: counted together, the table's slots are asked for
/// ahead, and a segment's pairs go to the whole buffer's table directly.
const PENDING: usize = 1 << 13;

/// Certain taken branches and ranges not yet counted, in arrival order;
/// emptied, its buffers serve another counter.
#[derive(Default)]
pub struct Pending {
    branches: Log,
    ranges: Log,
}

impl Pending {
    /// Counts them into `p`, emptied.
    fn count_into(&mut self, p: &mut Profile) {
        self.branches.count_into(&mut p.branches);
        self.ranges.count_into(&mut p.ranges);
    }

    fn clear(&mut self) {
        self.branches.len = 0;
        self.ranges.len = 0;
    }
}

/// Pairs of one kind not yet counted: a buffer of [`PENDING`], made when
/// the first comes.
#[derive(Default)]
struct Log {
    pairs: Box<[(u64, u64)]>,
    len: usize,
}

impl Log {
    /// Keeps `pair`; when the buffer is full, counts what it holds into `table` first.
    #[inline(always)]
    fn push(&mut self, pair: (u64, u64), table: &mut PairCounts) {
        if self.len == self.pairs.len() {
            self.make_room(table);
        }
        self.pairs[self.len] = pair;
        self.len += 1;
    }

    #[cold]
    #[inline(never)]
    fn make_room(&mut self, table: &mut PairCounts) {
        if self.pairs.is_empty() {
            self.pairs = vec![(0, 0); PENDING].into_boxed_slice();
        } else {
            self.count_into(table);
        }
    }

    fn count_into(&mut self, table: &mut PairCounts) {
        table.count_each(&self.pairs[..self.len]);
        self.len = 0;
    }
}

/// One CPU's counting state: where the current fall-through range
/// started, whether it holds an uncertain instruction, and the certain
/// pairs not yet counted.
#[derive(Default)]
pub struct RangeCounter {
    profile: Profile,
    pending: Pending,
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
    /// A counter that keeps its pending pairs in `pending`'s buffers.
    pub fn with_buffers(mut pending: Pending) -> Self {
        pending.clear();
        RangeCounter { pending, ..RangeCounter::default() }
    }

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
            if self.uncertain {
                self.profile.uncertain_ranges.add(start, end, 1);
            } else {
                self.pending.ranges.push((start, end), &mut self.profile.ranges);
            }
        }
        self.uncertain = false;
    }

    /// A taken branch from `from` to `to`, of an uncertain source or not.
    #[inline(always)]
    pub fn branch(&mut self, from: u64, to: u64, uncertain: bool) {
        if uncertain {
            self.profile.uncertain_branches.add(from, to, 1);
        } else {
            self.pending.branches.push((from, to), &mut self.profile.branches);
        }
    }

    /// A transfer that is no branch of a function (a trap, a far transfer).
    pub fn not_branch(&mut self) {
        self.profile.not_branches += 1;
    }

    /// A decode error (the range it cuts: [`RangeCounter::cut`]).
    pub fn error(&mut self) {
        self.profile.errors += 1;
    }

    /// Forgets what was counted (the state stays).
    pub fn forget_counts(&mut self) {
        self.profile = Profile::default();
        self.pending.clear();
    }

    /// Adds `other`'s counts (not its state); its buffers, emptied, are
    /// for [`RangeCounter::with_buffers`].
    pub fn add(&mut self, mut other: RangeCounter) -> Pending {
        other.pending.count_into(&mut self.profile);
        self.profile.add(other.profile);
        other.pending
    }

    /// Everything counted.
    pub fn finish(mut self) -> Profile {
        self.pending.count_into(&mut self.profile);
        self.profile
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

    /// More pairs than are kept pending, some repeated: all counted, kept
    /// ones and counted ones together, when the counter finishes.
    #[test]
    fn pending_pairs_are_all_counted() {
        let mut c = RangeCounter::default();
        let mut want = std::collections::HashMap::new();
        for i in 0..3 * PENDING as u64 + 5 {
            let (from, to) = (0x1000 + i % 1000 * 4, 0x8000 + i % 7);
            c.start(Some(to));
            c.close(from);
            c.branch(from, to, false);
            *want.entry((from, to)).or_insert(0u64) += 1;
        }
        let p = c.finish();
        let want: PairCounts = want.into_iter().collect();
        assert_eq!(p.branches, want);
        assert_eq!(p.ranges.iter().map(|e| e.1).sum::<u64>(), 3 * PENDING as u64 + 5);
    }
}
