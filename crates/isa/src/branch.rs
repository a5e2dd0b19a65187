//! Branch classification and "walk to the next branch": the questions a trace
//! decoder asks of every instruction it steps over.

use std::fmt;

use crate::{a64_class, x86_class, KernelIdioms};

/// Instruction set of the code being walked. Unlike [`crate::Arch`] (a
/// machine), this is the execution state a trace reports per address range:
/// an Arm core may run AArch64 and AArch32 (A32/T32) code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    X86_64,
    A64,
    /// AArch32 Arm state. Not classified yet: [`WalkError::Unsupported`].
    A32,
    /// AArch32 Thumb state. Not classified yet: [`WalkError::Unsupported`].
    T32,
}

impl From<crate::Arch> for Isa {
    fn from(arch: crate::Arch) -> Self {
        match arch {
            crate::Arch::X86_64 => Isa::X86_64,
            crate::Arch::Aarch64 => Isa::A64,
        }
    }
}

/// What an instruction does to the flow of control.
///
/// Everything except [`BranchClass::None`] and [`BranchClass::Nop`] ends a
/// [`Block`]: the next instruction executed may not be the next in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BranchClass {
    /// Falls through to the next instruction.
    None,
    /// A no-op that falls through: x86 NOPs of any length and prefix (`90`,
    /// `66 90`, `0f 1f /0`), AArch64 NOP and the rest of the HINT space (BTI,
    /// PACIASP, YIELD, ...). Jump labels and ftrace patch these into branches.
    Nop,
    /// Taken or not by a condition: x86 Jcc, JRCXZ, LOOP/LOOPcc; AArch64
    /// B.cond (also with the always-true conditions AL/NV), BC.cond,
    /// CBZ/CBNZ, TBZ/TBNZ, `CB<cc>`. Has a target.
    CondBranch,
    /// x86 JMP rel8/rel32, AArch64 B. Has a target.
    DirectJump,
    /// x86 CALL rel32, AArch64 BL. Has a target.
    DirectCall,
    /// x86 JMP r/m (also with `notrack`), a JMP to a retpoline thunk;
    /// AArch64 BR, BRAA, BRAAZ, BRAB, BRABZ.
    IndirectJump,
    /// x86 CALL r/m, a CALL to a retpoline thunk; AArch64 BLR, BLRAA,
    /// BLRAAZ, BLRAB, BLRABZ.
    IndirectCall,
    /// x86 RET, RET imm16, a JMP to a return thunk; AArch64 RET, RETAA, RETAB.
    Return,
    /// Changes privilege level or context: x86 SYSCALL, SYSRET, SYSENTER,
    /// SYSEXIT, IRET, INT n, far JMP/CALL/RET, VMCALL, VMMCALL, VMLAUNCH,
    /// VMRESUME, VMRUN, RSM, ...; AArch64 SVC, HVC, SMC, ERET, ERETAA, ERETAB,
    /// DCPS1-3, DRPS.
    FarTransfer,
    /// Raises a debug or undefined-instruction exception: x86 INT3 (kprobes,
    /// and the padding after RET and JMP and between functions), INT1, UD0,
    /// UD1, UD2; AArch64 BRK, HLT, UDF.
    Trap,
}

// `BranchClass::ALL[c as usize] == c`, which tables indexed by class use.
const _: () = {
    let mut i = 0;
    while i < BranchClass::ALL.len() {
        assert!(BranchClass::ALL[i] as usize == i);
        i += 1;
    }
};

impl BranchClass {
    /// Every class, each at the index of its discriminant.
    pub const ALL: [BranchClass; 10] = [
        BranchClass::None,
        BranchClass::Nop,
        BranchClass::CondBranch,
        BranchClass::DirectJump,
        BranchClass::DirectCall,
        BranchClass::IndirectJump,
        BranchClass::IndirectCall,
        BranchClass::Return,
        BranchClass::FarTransfer,
        BranchClass::Trap,
    ];

    /// True for classes that end a [`Block`] (all but `None` and `Nop`).
    pub fn is_branch(self) -> bool {
        !matches!(self, BranchClass::None | BranchClass::Nop)
    }

    /// Stable lowercase kebab-case name, for CLI output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            BranchClass::None => "none",
            BranchClass::Nop => "nop",
            BranchClass::CondBranch => "cond-branch",
            BranchClass::DirectJump => "direct-jump",
            BranchClass::DirectCall => "direct-call",
            BranchClass::IndirectJump => "indirect-jump",
            BranchClass::IndirectCall => "indirect-call",
            BranchClass::Return => "return",
            BranchClass::FarTransfer => "far-transfer",
            BranchClass::Trap => "trap",
        }
    }
}

impl fmt::Display for BranchClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One classified instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Insn {
    /// Length in bytes (AArch64: always 4).
    pub len: u8,
    pub class: BranchClass,
    /// The destination encoded in a direct (PC-relative) branch, wrapped to 64
    /// bits. Also set when an idiom reclassifies a direct branch (a JMP to the
    /// return thunk is a [`BranchClass::Return`] whose target is the thunk,
    /// where the CPU goes next); `None` for all other instructions.
    pub target: Option<u64>,
}

/// Why an x86 instruction could not be classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecodeError {
    /// The bytes are not a valid x86-64 instruction (as iced-x86 decodes
    /// them: Intel behaviour, every instruction set extension enabled).
    Invalid,
    /// The bytes end inside an instruction: more bytes are needed.
    Truncated,
}

/// A run of non-branch instructions and the branch that ends it: what a trace
/// decoder steps over between two trace decisions. Depends only on the code
/// bytes from `start` to the end of the branch, so a cache keyed by code
/// version can keep it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Block {
    pub start: u64,
    /// Instructions before the branch (classes `None` and `Nop`).
    pub non_branch_insns: u32,
    /// Address of the branch; it ends at `branch_addr + branch.len`.
    pub branch_addr: u64,
    pub branch: Insn,
}

/// Why [`walk_to_branch`] stopped without a branch. The `non_branch_insns`
/// before `addr` were walked; a caller that finds more bytes at `addr` can
/// continue from there and add the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WalkError {
    /// The buffer ended at `addr`, or inside the instruction starting there;
    /// also returned after `u32::MAX` instructions, so the count never wraps.
    EndOfBuffer { addr: u64, non_branch_insns: u32 },
    /// The instruction at `addr` is not valid (x86), or `addr` is not
    /// 4-byte aligned (AArch64).
    Undecodable { addr: u64, non_branch_insns: u32 },
    /// Code of this instruction set is not classified (A32, T32).
    Unsupported(Isa),
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WalkError::EndOfBuffer { addr, non_branch_insns } => {
                write!(f, "code ends at {addr:#x} after {non_branch_insns} instructions without a branch")
            }
            WalkError::Undecodable { addr, non_branch_insns } => {
                write!(f, "undecodable instruction at {addr:#x} after {non_branch_insns} instructions")
            }
            WalkError::Unsupported(isa) => write!(f, "{isa:?} code is not supported"),
        }
    }
}

impl std::error::Error for WalkError {}

/// Walks `code`, located at `addr`, to the first instruction whose class
/// [`BranchClass::is_branch`]. Never allocates. `idioms` applies to x86-64
/// only; pass [`KernelIdioms::default`] for user-space code or AArch64.
pub fn walk_to_branch(isa: Isa, addr: u64, code: &[u8], idioms: &KernelIdioms) -> Result<Block, WalkError> {
    match isa {
        Isa::X86_64 => x86_class::walk(addr, code, idioms),
        Isa::A64 => a64_class::walk(addr, code),
        Isa::A32 | Isa::T32 => Err(WalkError::Unsupported(isa)),
    }
}
