//! What a decode printed, lost or could not be sure of: the counts of its
//! summary line and whether its output is complete (its exit status).

use std::fmt;

use crate::line::{Kind, Out};

/// The counts a decode ends with on stderr, as perf's summary has them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// AUX buffers (queues) decoded.
    pub buffers: usize,
    /// Lines printed.
    pub lines: u64,
    /// Decode errors, printed or not (`--itrace` without `e`).
    pub errors: u64,
    /// Records that could not be read or used (skipped), as codeimage and
    /// [`crate::Input`] name them.
    pub bad_records: u64,
    /// Records the kernel says it lost (LOST records).
    pub lost: u64,
    /// AUX records flagged TRUNCATED, PARTIAL or COLLISION.
    pub truncated: u64,
    /// AUXTRACE records not following on from the one before (gaps and overlaps).
    pub gaps: u64,
    /// Instruction lines marked uncertain (the content that ran is not known).
    pub uncertain: u64,
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
