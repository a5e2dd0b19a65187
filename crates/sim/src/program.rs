//! A generated kernel-like program, whatever its instruction set: its code,
//! symbols, patch sites and the facts the machine needs to run it.

/// What a patch site is and the byte sequences it moves between.
#[derive(Clone, Debug)]
pub struct Site {
    pub addr: u64,
    pub kind: SiteKind,
    /// The contents the site takes; `states[0]` is the initial one.
    pub states: Vec<Vec<u8>>,
    /// For ftrace sites: the call to the run-time trampoline (at the
    /// program's `ool_base`), a state the site may take while it exists.
    pub tramp_call: Option<Vec<u8>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiteKind {
    /// x86 NOP5 <-> JMP rel32, AArch64 NOP <-> B: to an out-of-line block.
    JumpLabel,
    /// x86 NOP2 <-> JMP rel8 over the next instruction.
    JumpLabelShort,
    /// NOP <-> CALL/BL ftrace_caller (or a trampoline created at run time).
    Ftrace,
    /// A static call: x86 a trampoline's JMP rel32, AArch64 a call site's
    /// BL, retargeted from one function to another.
    StaticCall,
    /// An instruction <-> INT3 on its first byte (x86), BRK (AArch64).
    Kprobe,
}

/// The generated program.
pub struct Program {
    pub arch: isa::Arch,
    /// Where `text` starts.
    pub text_base: u64,
    /// Where out-of-line code (the ftrace trampoline) is created at run time.
    pub ool_base: u64,
    pub text: Vec<u8>,
    /// (address, name) of every function, for kallsyms.
    pub symbols: Vec<(u64, String)>,
    pub sites: Vec<Site>,
    /// Indirect calls and jumps and the targets they may take.
    pub indirect: Vec<(u64, Vec<u64>)>,
    /// Start of the dispatcher loop (where every CPU begins).
    pub entry: u64,
    /// Where traps (INT3, BRK) go.
    pub int3_handler: u64,
    /// The code of a trampoline that replaces ftrace_caller at run time.
    pub trampoline_code: Vec<u8>,
}
