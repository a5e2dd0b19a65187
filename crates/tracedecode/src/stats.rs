//! A decode's counts (`decode --stat`): instructions, taken branches by
//! kind, traps, errors, uncertain instructions, and the code changes the
//! trace ran across. Counted per buffer (or part of one) and added up.

use isa::BranchClass;
use serde::Serialize;

/// What a decode went through.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Trace buffers decoded.
    pub buffers: u64,
    pub instructions: u64,
    /// Instructions several code contents fitted (the decoder took one).
    pub uncertain: u64,
    /// Conditional branches taken, and not taken.
    pub cond_taken: u64,
    pub cond_not_taken: u64,
    /// Taken branches of the other kinds (direct and indirect jumps and
    /// calls, returns, far transfers such as SYSCALL and IRET).
    pub jumps: u64,
    pub calls: u64,
    pub indirect_jumps: u64,
    pub indirect_calls: u64,
    pub returns: u64,
    pub far: u64,
    /// Traps and interrupts: asynchronous ones (perf's `hw int`) and
    /// instructions that trap into a handler the trace follows (perf's `int`).
    pub traps: u64,
    /// Times tracing started, and stopped (TIP.PGE and TIP.PGD, or the end of a buffer).
    pub trace_starts: u64,
    pub trace_ends: u64,
    pub errors: u64,
    /// Code changes (TEXT_POKE) made between the first and the last time
    /// the trace tells, which the decode had to read across.
    pub pokes_crossed: u64,
    /// The first and last time the trace tells (perf time), if any.
    #[serde(skip)]
    pub span: Option<(u64, u64)>,
}

impl Stats {
    /// Adds the counts of another buffer or segment (its span too).
    pub fn add(&mut self, o: &Stats) {
        self.buffers += o.buffers;
        self.instructions += o.instructions;
        self.uncertain += o.uncertain;
        self.cond_taken += o.cond_taken;
        self.cond_not_taken += o.cond_not_taken;
        self.jumps += o.jumps;
        self.calls += o.calls;
        self.indirect_jumps += o.indirect_jumps;
        self.indirect_calls += o.indirect_calls;
        self.returns += o.returns;
        self.far += o.far;
        self.traps += o.traps;
        self.trace_starts += o.trace_starts;
        self.trace_ends += o.trace_ends;
        self.errors += o.errors;
        self.pokes_crossed += o.pokes_crossed;
        if let Some((lo, hi)) = o.span {
            self.saw_times(lo, hi);
        }
    }

    /// Taken branches of every kind (not traps, not where tracing starts or stops).
    pub fn taken_branches(&self) -> u64 {
        self.cond_taken + self.jumps + self.calls + self.indirect_jumps + self.indirect_calls + self.returns + self.far
    }

    /// A branch of `class` that went (`taken`) or fell through.
    #[inline]
    pub fn branch(&mut self, class: BranchClass, taken: bool) {
        let slot = match class {
            BranchClass::CondBranch if taken => &mut self.cond_taken,
            BranchClass::CondBranch => &mut self.cond_not_taken,
            _ if !taken => return,
            BranchClass::DirectJump => &mut self.jumps,
            BranchClass::DirectCall => &mut self.calls,
            BranchClass::IndirectJump => &mut self.indirect_jumps,
            BranchClass::IndirectCall => &mut self.indirect_calls,
            BranchClass::Return => &mut self.returns,
            BranchClass::FarTransfer => &mut self.far,
            BranchClass::Trap => &mut self.traps,
            BranchClass::None | BranchClass::Nop => return,
        };
        *slot += 1;
    }

    /// The trace told times from `lo` to `hi`.
    #[inline]
    pub fn saw_times(&mut self, lo: u64, hi: u64) {
        self.span = Some(match self.span {
            Some((a, b)) => (a.min(lo), b.max(hi)),
            None => (lo, hi),
        });
    }

    /// Counts the pokes, given by their times, made within [`Self::span`].
    pub fn count_pokes_crossed(&mut self, poke_times: impl Iterator<Item = u64>) {
        self.pokes_crossed = match self.span {
            Some((lo, hi)) => poke_times.filter(|t| (lo..=hi).contains(t)).count() as u64,
            None => 0,
        };
    }
}
