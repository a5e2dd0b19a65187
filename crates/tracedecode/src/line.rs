//! The lines a decode makes, whichever the decoder.

use isa::BranchClass;

/// One line of output, from one queue and CPU.
pub struct Out {
    pub time: u64,
    pub queue: usize,
    pub cpu: u32,
    pub kind: Kind,
}

pub enum Kind {
    /// A taken branch; `from_len` is the branching instruction's length when known.
    Branch { from: u64, to: u64, flags: &'static str, from_len: Option<u8> },
    /// An instruction; `class` and, once the next one is known, where a
    /// taken branch went (perf's `flags` and `addr` of instruction samples);
    /// `ends` when tracing stopped at its branch (a direct branch out of the
    /// address filter: perf's flags gain `tr end`).
    Insn { ip: u64, len: u8, class: BranchClass, to: Option<u64>, uncertain: bool, ends: bool },
    /// A decode error: perf's error `code` and our reason.
    Error { offset: usize, ip: Option<u64>, code: u32, reason: String },
}
