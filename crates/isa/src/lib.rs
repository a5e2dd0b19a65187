//! Instruction-level knowledge for trace decoders and about kernel text pokes.
//!
//! **Branch classification**, the question a trace decoder asks of every
//! instruction it steps over: [`walk_to_branch`] goes from an address to the
//! next control-flow instruction without allocating and returns a [`Block`]
//! (how many instructions before it, where it is, its [`BranchClass`] and
//! direct target). [`classify_x86_64`] (a table-driven length decoder for
//! the common integer instructions, iced-x86 for the rest, with the kernel's
//! return-thunk and retpoline [`KernelIdioms`]) and [`classify_aarch64`] (a
//! bit-mask classifier) answer for one instruction. A32 and T32 code is
//! reported as [`WalkError::Unsupported`]. Tests hold both against
//! independent decoders (iced-x86's own decode, disarm64) over encoding
//! sweeps and real code.
//!
//! The Linux kernel rewrites its own code at run time and reports each change
//! as a `PERF_RECORD_TEXT_POKE` (address, old bytes, new bytes). This crate
//! gives the rest of poketrace two things about such a change:
//!
//! * a short **disassembly** of the old and new bytes for display: x86-64 via
//!   iced-x86 in Intel syntax (lowercase, `0x` hex, branch targets as absolute
//!   addresses), AArch64 via a hand-written decode of the few encodings pokes
//!   write (NOP, HINT, B, BL, BRK, RET);
//! * the **kind** of poke ([`PokeKind`]: jump label, ftrace, static call,
//!   kprobe, ...), recognised from the byte patterns the kernel writes, so a
//!   user can tell which kernel mechanism changed the code a trace ran through.
//!
//! Nothing here panics on malformed input: undecodable bytes become `.byte`
//! lines and unrecognised changes become [`PokeKind::Other`].
//!
//! [`Arch`] names the two instruction sets everywhere in poketrace; the `clap`
//! and `serde` features make it a command-line value and a serialized field
//! (`x86_64`, `aarch64`).

mod a64_class;
mod aarch64;
mod branch;
mod x86;
mod x86_class;

use std::fmt;

pub use a64_class::classify_aarch64;
pub use aarch64::disassemble_aarch64_text;
pub use branch::{walk_to_branch, Block, BranchClass, DecodeError, Insn, Isa, WalkError};
pub use x86::{disassemble_x86_64, disassemble_x86_64_text, DisasmLine};
pub use x86_class::{classify_x86_64, KernelIdioms};

/// Instruction set of the poked code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Arch {
    #[cfg_attr(feature = "clap", value(name = "x86_64"))]
    #[cfg_attr(feature = "serde", serde(rename = "x86_64"))]
    X86_64,
    #[cfg_attr(feature = "clap", value(name = "aarch64"))]
    #[cfg_attr(feature = "serde", serde(rename = "aarch64"))]
    Aarch64,
}

/// Which kernel mechanism a text poke most likely comes from.
///
/// Every rule is symmetric (old and new may be swapped): the kernel records
/// both directions of each mechanism, and a decoder may walk events backwards.
/// Rules are tried in the order of the variants below, except the second
/// Optprobe rule, which is tried last; the first match wins.
/// Pokes that change nothing the rules know about are [`PokeKind::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PokeKind {
    /// Code appeared (`old_len == 0`): an ftrace/kprobe/optprobe trampoline or
    /// instruction slot was written.
    TrampolineCreated,
    /// Code disappeared (`new_len == 0`): such out-of-line code was freed.
    TrampolineRemoved,
    /// x86: one side is exactly `e9 rel32` and the other starts with INT3.
    /// The kernel only optimizes an armed kprobe, so optimizing records
    /// `cc` + original tail -> `e9 rel32`, and unoptimizing the reverse.
    /// Second rule (tried last): one side is exactly `e9 rel32` and the other
    /// is ordinary code (several instructions, or one that is not
    /// NOP/JMP/CALL/RET/Jcc32): a JMP32 laid over the probed instructions.
    Optprobe,
    /// Exactly one side starts with a breakpoint: x86 INT3 (`cc`, the kernel
    /// writes it as a one-byte poke) or AArch64 BRK (any immediate; kprobes use
    /// `brk #0x4`).
    Kprobe,
    /// x86: one side's instruction is a near Jcc (`0f 8x rel32`), as written
    /// by static calls at conditional tail-call sites.
    JccRel32,
    /// The poke is on a `__SCT__*` symbol (a static-call trampoline: JMP/RET
    /// retargets, any arch), or x86 `e9 rel32` <-> RET (`c3`, optionally
    /// followed by INT3 padding as in `c3 cc cc cc cc`), or x86 `e8 rel32` <->
    /// `2e 2e 2e 31 c0` (`xor eax, eax`, inlined `__static_call_return0`).
    StaticCall,
    /// NOP <-> JMP: x86 any single NOP <-> `eb rel8` / `e9 rel32`; AArch64
    /// NOP <-> B.
    JumpLabel,
    /// NOP <-> CALL or CALL <-> CALL: x86 any single NOP / `e8 rel32`; AArch64
    /// NOP / BL. Static-call sites also go CALL <-> NOP/CALL and cannot be
    /// told apart from ftrace by bytes alone; they are reported as ftrace.
    Ftrace,
    /// None of the above, including both sides empty, undecodable bytes, and
    /// AArch64 pokes that are not exactly one 4-byte instruction per side.
    Other,
}

impl PokeKind {
    /// Stable lowercase kebab-case name, for CLI output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            PokeKind::TrampolineCreated => "trampoline-created",
            PokeKind::TrampolineRemoved => "trampoline-removed",
            PokeKind::Optprobe => "optprobe",
            PokeKind::Kprobe => "kprobe",
            PokeKind::JccRel32 => "jcc-rel32",
            PokeKind::StaticCall => "static-call",
            PokeKind::JumpLabel => "jump-label",
            PokeKind::Ftrace => "ftrace",
            PokeKind::Other => "other",
        }
    }
}

impl fmt::Display for PokeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Classifies the change of `old` into `new` at `addr`; `sym` is the name of
/// the symbol containing `addr`, if known (only `__SCT__*` matters).
pub fn classify_poke(arch: Arch, addr: u64, old: &[u8], new: &[u8], sym: Option<&str>) -> PokeKind {
    match (old.is_empty(), new.is_empty()) {
        (true, true) => return PokeKind::Other,
        (true, false) => return PokeKind::TrampolineCreated,
        (false, true) => return PokeKind::TrampolineRemoved,
        (false, false) => {}
    }
    let static_call_sym = sym.is_some_and(|s| s.starts_with("__SCT__"));
    match arch {
        Arch::X86_64 => x86::classify(addr, old, new, static_call_sym),
        Arch::Aarch64 => aarch64::classify(addr, old, new, static_call_sym),
    }
}

/// One-line description such as `jump-label: nop5 -> jmp 0xffffffff81234567`
/// (kind, then old and new code; x86 NOPs shown as `nopN` with N the length).
/// Trampolines are summarised by their size instead of disassembled.
pub fn describe_poke(arch: Arch, addr: u64, old: &[u8], new: &[u8], sym: Option<&str>) -> String {
    let kind = classify_poke(arch, addr, old, new, sym);
    match kind {
        PokeKind::TrampolineCreated => format!("{kind}: {} bytes", new.len()),
        PokeKind::TrampolineRemoved => format!("{kind}: {} bytes", old.len()),
        _ => format!("{kind}: {} -> {}", brief(arch, addr, old), brief(arch, addr, new)),
    }
}

/// Compact one-line rendering of one side of a poke for [`describe_poke`].
fn brief(arch: Arch, addr: u64, bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "(none)".to_owned();
    }
    match arch {
        Arch::X86_64 => x86::brief(addr, bytes),
        Arch::Aarch64 => disassemble_aarch64_text(addr, bytes),
    }
}

/// `.byte 0x0f, 0x1f`: how bytes that are not an instruction are displayed.
fn byte_directive(bytes: &[u8]) -> String {
    let list: Vec<String> = bytes.iter().map(|b| format!("{b:#04x}")).collect();
    format!(".byte {}", list.join(", "))
}
