//! What a decode went through and what it could not do: the counts of
//! `decode --stat` (instructions, taken branches by kind, traps, trace starts
//! and ends, the code changes the trace ran across), and those of the summary
//! line on stderr (lines printed, errors, records not read or lost, damaged
//! AUX data) that say whether the output is complete (its exit status).
//! Counted per buffer (or part of one) and added up.

use std::fmt;

use isa::BranchClass;
use serde::Serialize;

use crate::line::{Kind, Out};

/// A decode's counts. `--stat` writes those serialized (the others are
/// skipped); the summary line ([`fmt::Display`]) shows the damage and errors.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// AUX buffers (queues) decoded.
    pub buffers: u64,
    pub instructions: u64,
    /// Instructions several code contents fitted (the decoder took one);
    /// when lines are made, the instruction lines marked uncertain.
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
    /// Decode errors, printed or not (`--itrace` without `e`).
    pub errors: u64,
    /// Code changes (TEXT_POKE) made between the first and the last time
    /// the trace tells, which the decode had to read across.
    pub pokes_crossed: u64,
    /// The first and last time the trace tells (perf time), if any.
    #[serde(skip)]
    pub span: Option<(u64, u64)>,
    /// Lines printed.
    #[serde(skip)]
    pub lines: u64,
    /// Records that could not be read or used (skipped), as codeimage and
    /// [`crate::Input`] name them.
    #[serde(skip)]
    pub bad_records: u64,
    /// Records the kernel says it lost (LOST records).
    #[serde(skip)]
    pub lost: u64,
    /// AUX records flagged TRUNCATED, PARTIAL or COLLISION.
    #[serde(skip)]
    pub truncated: u64,
    /// AUXTRACE records not following on from the one before (gaps and overlaps).
    #[serde(skip)]
    pub gaps: u64,
}

impl Summary {
    /// Counts a line the decoders made; `printed`: it was written out.
    pub fn observe(&mut self, l: &Out, printed: bool) {
        self.lines += printed as u64;
        match l.kind {
            Kind::Error { .. } => self.errors += 1,
            Kind::Insn { uncertain: true, .. } => self.uncertain += printed as u64,
            _ => {}
        }
    }

    /// Whether the output is known to lack something that ran: a decode
    /// error, a record not read, lost records, damaged AUX data or a gap.
    /// (Uncertain instructions are printed, and marked.)
    pub fn incomplete(&self) -> bool {
        self.errors + self.bad_records + self.lost + self.truncated + self.gaps > 0
    }

    /// Adds the counts of another buffer or segment (its span too).
    pub fn add(&mut self, o: &Summary) {
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
        self.lines += o.lines;
        self.bad_records += o.bad_records;
        self.lost += o.lost;
        self.truncated += o.truncated;
        self.gaps += o.gaps;
        if let Some((lo, hi)) = o.span {
            self.saw_times(lo, hi);
        }
    }

    /// Taken branches of every kind (not traps, not where tracing starts or stops).
    pub fn taken_branches(&self) -> u64 {
        self.cond_taken + self.jumps + self.calls + self.indirect_jumps + self.indirect_calls + self.returns + self.far
    }

    /// `n` branches of `class` that went (`taken`) or fell through.
    pub fn add_branches(&mut self, class: BranchClass, taken: bool, n: u64) {
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
        *slot += n;
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

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} trace buffers, {} lines, {} decode errors, {} bad records, {} records lost, {} AUX records truncated, {} AUX gaps, {} uncertain",
            self.buffers, self.lines, self.errors, self.bad_records, self.lost, self.truncated, self.gaps, self.uncertain
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(kind: Kind) -> Out {
        Out { time: 0, queue: 0, cpu: 0, kind }
    }

    #[test]
    fn errors_count_printed_or_not_and_make_the_output_incomplete() {
        let mut s = Summary::default();
        s.observe(&line(Kind::Branch { from: 1, to: 2, flags: "jmp", from_len: None, from_bytes: Default::default(), insns: 0 }), true);
        assert!(!s.incomplete());
        s.observe(
            &line(Kind::Insn { ip: 1, len: 1, class: isa::BranchClass::None, to: None, uncertain: true, ends: false, bytes: Default::default() }),
            true,
        );
        assert_eq!((s.lines, s.uncertain), (2, 1));
        assert!(!s.incomplete(), "uncertain lines are printed as such");
        s.observe(&line(Kind::Error { offset: 3, ip: None, code: 6, reason: "x".into() }), false);
        assert_eq!((s.lines, s.errors), (2, 1));
        assert!(s.incomplete());
        for field in
            [|s: &mut Summary| s.bad_records = 1, |s: &mut Summary| s.lost = 1, |s: &mut Summary| s.truncated = 1, |s: &mut Summary| s.gaps = 1]
        {
            let mut s = Summary::default();
            field(&mut s);
            assert!(s.incomplete(), "{s}");
        }
    }
}
