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
    /// Code the CPUs run that kcore does not hold and the trace's address
    /// filter leaves out (a module's, say): direct calls and jumps into it
    /// stop tracing, which resumes where it returns.
    pub outside: Option<Outside>,
    /// Where an undefined instruction (UD2, an invalid opcode) traps to; its
    /// handler skips it, as the kernel's BUG() and WARN() handling does.
    /// `None`: such bytes end the walk as any other code it cannot follow.
    pub ud_handler: Option<u64>,
}

/// Code at `base` that is not the traced kernel text.
#[derive(Clone, Debug)]
pub struct Outside {
    pub base: u64,
    pub code: Vec<u8>,
}

/// The size of the run-time trampoline's page (its KSYMBOL's length).
pub const OOL_PAGE: u64 = 0x1000;

impl Program {
    /// The ranges (start, size) a run with code [`Program::outside`] traces:
    /// the kernel text and the trampoline's page.
    pub fn traced_ranges(&self) -> Vec<(u64, u64)> {
        vec![(self.text_base, self.text.len() as u64), (self.ool_base, OOL_PAGE)]
    }
}
