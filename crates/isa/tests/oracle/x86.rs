//! The x86-64 oracle: iced-x86's decode of one instruction, mapped to isa's
//! classes by mnemonic and operand kind, kernel thunks from a plain map. Any
//! instruction with a flow control other than `Next` that the table below
//! does not name fails the test that meets it, so every branch iced knows is
//! accounted for.

use std::collections::HashMap;

use iced_x86::{Decoder, DecoderError, DecoderOptions, FlowControl, MemorySize, Mnemonic, OpKind};
use isa::{BranchClass, DecodeError, Insn};

/// What a kernel thunk address stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thunk {
    Return,
    Indirect,
}

/// Decodes the instruction at the start of `bytes` with a fresh decoder.
pub fn classify(addr: u64, bytes: &[u8], thunks: &HashMap<u64, Thunk>) -> Result<Insn, DecodeError> {
    let mut decoder = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() {
        return Err(match decoder.last_error() {
            DecoderError::NoMoreBytes => DecodeError::Truncated,
            _ => DecodeError::Invalid,
        });
    }
    let far_memory = matches!(insn.memory_size(), MemorySize::SegPtr16 | MemorySize::SegPtr32 | MemorySize::SegPtr64);
    use Mnemonic::*;
    let mut class = match insn.mnemonic() {
        Jo | Jno | Jb | Jae | Je | Jne | Jbe | Ja | Js | Jns | Jp | Jnp | Jl | Jge | Jle | Jg | Jrcxz | Jecxz | Jcxz | Loop | Loope | Loopne => {
            BranchClass::CondBranch
        }
        Jmp | Call if far_memory => BranchClass::FarTransfer,
        Jmp if insn.op0_kind() == OpKind::NearBranch64 => BranchClass::DirectJump,
        Call if insn.op0_kind() == OpKind::NearBranch64 => BranchClass::DirectCall,
        Jmp => BranchClass::IndirectJump,
        Call => BranchClass::IndirectCall,
        Ret => BranchClass::Return,
        Retf | Iret | Iretd | Iretq | Syscall | Sysret | Sysretq | Sysenter | Sysexit | Sysexitq | Int | Into | Vmcall | Vmmcall | Vmlaunch
        | Vmresume | Vmrun | Vmgexit | Rsm | Skinit | Tdcall | Seamcall | Seamret | Uiret | Eretu | Erets => BranchClass::FarTransfer,
        Int3 | Int1 | Ud0 | Ud1 | Ud2 => BranchClass::Trap,
        Nop => BranchClass::Nop,
        Xbegin => BranchClass::None,
        mnemonic => {
            assert_eq!(insn.flow_control(), FlowControl::Next, "{mnemonic:?} ({:?}) at {addr:#x} is a branch the oracle does not know", insn.code());
            BranchClass::None
        }
    };
    let target = matches!(class, BranchClass::CondBranch | BranchClass::DirectJump | BranchClass::DirectCall).then(|| insn.near_branch_target());
    match (class, target.and_then(|t| thunks.get(&t))) {
        (BranchClass::DirectJump, Some(Thunk::Return)) => class = BranchClass::Return,
        (BranchClass::DirectJump, Some(Thunk::Indirect)) => class = BranchClass::IndirectJump,
        (BranchClass::DirectCall, Some(Thunk::Indirect)) => class = BranchClass::IndirectCall,
        _ => {}
    }
    Ok(Insn { len: insn.len() as u8, class, target })
}
