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
    /// A taken branch; `from_len` is the branching instruction's length
    /// when known, and then `from_bytes` the bytes it was decoded from;
    /// `insns` the instructions that ran since the buffer's branch line
    /// before (this one's source included; none after an error or a trace end).
    Branch { from: u64, to: u64, flags: &'static str, from_len: Option<u8>, from_bytes: InsnBytes, insns: u64 },
    /// An instruction, and the bytes it was decoded from; `class` and, once
    /// the next one is known, where a taken branch went (perf's `flags` and
    /// `addr` of instruction samples); `ends` when tracing stopped at its
    /// branch (a direct branch out of the address filter: perf's flags gain
    /// `tr end`).
    Insn { ip: u64, len: u8, class: BranchClass, to: Option<u64>, uncertain: bool, ends: bool, bytes: InsnBytes },
    /// A decode error: perf's error `code` and our reason.
    Error { offset: usize, ip: Option<u64>, code: u32, reason: String },
}

/// The bytes an instruction was decoded from (up to 15, the longest
/// instruction); none for an instruction that was not decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InsnBytes {
    bytes: [u8; 15],
    len: u8,
}

impl InsnBytes {
    /// The first `len` of `bytes` (at most 15).
    pub fn new(bytes: &[u8], len: usize) -> InsnBytes {
        let len = len.min(15).min(bytes.len());
        let mut b = [0u8; 15];
        b[..len].copy_from_slice(&bytes[..len]);
        InsnBytes { bytes: b, len: len as u8 }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// Counts instructions between a buffer's branch lines: of the `lines` one
/// step of a decode made, the first branch line gets `ran` (the
/// instructions since the branch line before), the others none; returns the
/// count that runs on, `step` (the instructions the step ran after its
/// lines) added, and whether there was a branch line.
#[inline]
pub(crate) fn count_insns(lines: &mut [Out], ran: u64, step: u64) -> (u64, bool) {
    let mut ran = Some(ran);
    for l in lines {
        if let Kind::Branch { insns, .. } = &mut l.kind {
            *insns = ran.take().unwrap_or(0);
        }
    }
    (ran.unwrap_or(0) + step, ran.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn branch() -> Out {
        Out {
            time: 0,
            queue: 0,
            cpu: 0,
            kind: Kind::Branch { from: 1, to: 2, flags: "jmp", from_len: None, from_bytes: InsnBytes::default(), insns: 99 },
        }
    }

    /// The first branch line of a step takes the count so far, the others
    /// none; the count goes on from the step's own instructions.
    #[test]
    fn branch_lines_take_the_instructions_since_the_one_before() {
        let insn = Out {
            time: 0,
            queue: 0,
            cpu: 0,
            kind: Kind::Insn { ip: 1, len: 1, class: BranchClass::None, to: None, uncertain: false, ends: false, bytes: InsnBytes::default() },
        };
        let mut lines = [branch(), insn, branch()];
        assert_eq!(count_insns(&mut lines, 5, 2), (2, true));
        let counts: Vec<Option<u64>> = lines.iter().map(|l| if let Kind::Branch { insns, .. } = l.kind { Some(insns) } else { None }).collect();
        assert_eq!(counts, [Some(5), None, Some(0)]);
        assert_eq!(count_insns(&mut [], 5, 2), (7, false), "no branch line: the count goes on");
    }
}
