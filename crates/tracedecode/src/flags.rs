//! perf's flag words for branches.

use isa::BranchClass;

/// perf's flags for a branch of this class that a TIP.PGD ended tracing at.
pub fn end_flags(class: BranchClass) -> &'static str {
    match class {
        BranchClass::CondBranch => "tr end  jcc",
        // A jump's flags are the branch alone: perf prints them as "tr end".
        BranchClass::DirectJump | BranchClass::IndirectJump => "tr end",
        BranchClass::DirectCall | BranchClass::IndirectCall => "tr end  call",
        BranchClass::Return => "tr end  return",
        BranchClass::FarTransfer => "tr end  far",
        _ => "tr end",
    }
}

/// perf's flag words for a branch from an instruction of this class,
/// decoded from `bytes` (which tell a far transfer's kind).
pub fn branch_flags(class: BranchClass, bytes: &[u8]) -> &'static str {
    match class {
        BranchClass::CondBranch => "jcc",
        BranchClass::DirectJump | BranchClass::IndirectJump => "jmp",
        BranchClass::DirectCall | BranchClass::IndirectCall => "call",
        BranchClass::Return => "return",
        BranchClass::FarTransfer => {
            let mut b = [0u8; 3];
            let n = bytes.len().min(3);
            b[..n].copy_from_slice(&bytes[..n]);
            match b {
                [0xcf, ..] | [0x48, 0xcf, _] => "iret",
                [0x0f, 0x05, _] => "syscall",
                [0x0f, 0x07, _] | [0x48, 0x0f, 0x07] => "sysret",
                _ => "far",
            }
        }
        BranchClass::Trap => "int",
        BranchClass::None | BranchClass::Nop => "",
    }
}
