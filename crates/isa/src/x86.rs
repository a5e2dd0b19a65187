//! x86-64: disassembly for display (iced-x86, Intel syntax) and the
//! instruction shapes the poke classifier looks for.

use iced_x86::{Code, Decoder, DecoderOptions, Formatter, Instruction, IntelFormatter, Mnemonic};

use crate::{byte_directive, PokeKind};

const INT3: u8 = 0xcc;
/// `cs cs cs xor eax, eax`: static_call's 5-byte inline `__static_call_return0`.
const XOR5RAX: [u8; 5] = [0x2e, 0x2e, 0x2e, 0x31, 0xc0];

/// One disassembled instruction, or one `.byte` line for the undecodable rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisasmLine {
    pub addr: u64,
    pub len: usize,
    pub text: String,
}

/// Disassembles `bytes` located at `addr` in Intel syntax, branch targets as
/// absolute `0x` addresses. The first byte that does not start a complete,
/// valid instruction turns the rest into one `.byte 0x.., 0x..` line.
pub fn disassemble_x86_64(addr: u64, bytes: &[u8]) -> Vec<DisasmLine> {
    let mut formatter = IntelFormatter::new();
    let options = formatter.options_mut();
    options.set_hex_prefix("0x");
    options.set_hex_suffix("");
    options.set_uppercase_hex(false);
    options.set_branch_leading_zeros(false);
    options.set_show_branch_size(false);
    options.set_space_after_operand_separator(true);

    let mut decoder = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    let mut lines = Vec::new();
    while decoder.can_decode() {
        let offset = decoder.position();
        decoder.decode_out(&mut insn);
        if insn.is_invalid() {
            let rest = &bytes[offset..];
            let line_addr = addr.wrapping_add(offset as u64);
            lines.push(DisasmLine { addr: line_addr, len: rest.len(), text: byte_directive(rest) });
            break;
        }
        let mut text = String::new();
        formatter.format(&insn, &mut text);
        lines.push(DisasmLine { addr: insn.ip(), len: insn.len(), text });
    }
    lines
}

/// [`disassemble_x86_64`] on one line, instructions separated by `"; "`.
pub fn disassemble_x86_64_text(addr: u64, bytes: &[u8]) -> String {
    let texts: Vec<String> = disassemble_x86_64(addr, bytes).into_iter().map(|l| l.text).collect();
    texts.join("; ")
}

/// What one side of a poke holds, as far as the classifier cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// One NOP of any length (`90`, `66 90`, `0f 1f /0`, prefixed forms).
    Nop,
    /// One `eb rel8` or `e9 rel32`.
    Jmp,
    /// One `e8 rel32`.
    Call,
    /// `c3`, optionally followed by INT3 padding.
    Ret,
    /// One near Jcc, `0f 8x rel32`.
    Jcc32,
    /// Anything else that starts with a valid instruction, or several instructions.
    Code,
    /// The first instruction is invalid or truncated.
    Bad,
}

fn shape(addr: u64, bytes: &[u8]) -> Shape {
    let insn = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE).decode();
    if insn.is_invalid() {
        return Shape::Bad;
    }
    let rest = &bytes[insn.len()..];
    if insn.code() == Code::Retnq && rest.iter().all(|&b| b == INT3) {
        return Shape::Ret;
    }
    if !rest.is_empty() {
        return Shape::Code;
    }
    match insn.code() {
        Code::Jmp_rel8_64 | Code::Jmp_rel32_64 => Shape::Jmp,
        Code::Call_rel32_64 => Shape::Call,
        code if code.is_jcc_near() => Shape::Jcc32,
        _ if insn.mnemonic() == Mnemonic::Nop => Shape::Nop,
        _ => Shape::Code,
    }
}

/// Exactly a 5-byte `e9 rel32`, the JMP32 that optprobes and static calls write.
fn is_jmp32(bytes: &[u8]) -> bool {
    matches!(bytes, [0xe9, _, _, _, _])
}

/// The x86-64 rules of [`PokeKind`]; `old` and `new` are non-empty.
pub(crate) fn classify(addr: u64, old: &[u8], new: &[u8], static_call_sym: bool) -> PokeKind {
    use Shape::*;
    let (o, n) = (shape(addr, old), shape(addr, new));
    let pair = |a: Shape, b: Shape| (o == a && n == b) || (o == b && n == a);
    let (old_jmp32, new_jmp32) = (is_jmp32(old), is_jmp32(new));
    let (old_int3, new_int3) = (old[0] == INT3, new[0] == INT3);

    if (old_jmp32 && new_int3) || (old_int3 && new_jmp32) {
        PokeKind::Optprobe
    } else if old_int3 != new_int3 {
        PokeKind::Kprobe
    } else if o == Jcc32 || n == Jcc32 {
        PokeKind::JccRel32
    } else if static_call_sym || (old_jmp32 && n == Ret) || (o == Ret && new_jmp32) || (o == Call && new == XOR5RAX) || (old == XOR5RAX && n == Call)
    {
        PokeKind::StaticCall
    } else if pair(Nop, Jmp) {
        PokeKind::JumpLabel
    } else if pair(Nop, Call) || pair(Call, Call) {
        PokeKind::Ftrace
    } else if (old_jmp32 && n == Code) || (o == Code && new_jmp32) {
        PokeKind::Optprobe
    } else {
        PokeKind::Other
    }
}

/// Like [`disassemble_x86_64_text`], but a single NOP is shown as `nopN`.
pub(crate) fn brief(addr: u64, bytes: &[u8]) -> String {
    if shape(addr, bytes) == Shape::Nop {
        format!("nop{}", bytes.len())
    } else {
        disassemble_x86_64_text(addr, bytes)
    }
}
