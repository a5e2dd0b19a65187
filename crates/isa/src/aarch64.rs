//! AArch64: a hand-written decode of the few encodings kernel text pokes
//! write (Arm ARM C6.2), enough to display and classify them.

use crate::{byte_directive, PokeKind};

/// A decoded 32-bit instruction word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Insn {
    /// `0xd503201f`.
    Nop,
    /// HINT #imm7 other than NOP (BTI, PACIASP, YIELD, ...): `0xd503201f | imm7 << 5`.
    Hint(u8),
    /// B, with its absolute target: `0x14000000 | imm26`.
    B(u64),
    /// BL, with its absolute target: `0x94000000 | imm26`.
    Bl(u64),
    /// BRK #imm16: `0xd4200000 | imm16 << 5`.
    Brk(u16),
    /// RET Xn: `0xd65f0000 | n << 5` (plain `ret` is n = 30, `0xd65f03c0`).
    Ret(u8),
    /// Anything else.
    Other(u32),
}

const NOP: u32 = 0xd503_201f;

fn decode(addr: u64, word: u32) -> Insn {
    if word == NOP {
        Insn::Nop
    } else if word & 0xffff_f01f == NOP {
        Insn::Hint((word >> 5) as u8 & 0x7f)
    } else if word & 0x7c00_0000 == 0x1400_0000 {
        // imm26 is a signed word offset: shift it to the top, then arithmetic-shift back.
        let offset = i64::from((word << 6) as i32 >> 6) * 4;
        let target = addr.wrapping_add_signed(offset);
        if word >> 31 == 1 {
            Insn::Bl(target)
        } else {
            Insn::B(target)
        }
    } else if word & 0xffe0_001f == 0xd420_0000 {
        Insn::Brk((word >> 5) as u16)
    } else if word & 0xffff_fc1f == 0xd65f_0000 {
        Insn::Ret((word >> 5) as u8 & 0x1f)
    } else {
        Insn::Other(word)
    }
}

fn text(insn: Insn) -> String {
    match insn {
        Insn::Nop => "nop".to_owned(),
        Insn::Hint(imm) => format!("hint #{imm:#x}"),
        Insn::B(target) => format!("b {target:#x}"),
        Insn::Bl(target) => format!("bl {target:#x}"),
        Insn::Brk(imm) => format!("brk #{imm:#x}"),
        Insn::Ret(30) => "ret".to_owned(),
        Insn::Ret(n) => format!("ret x{n}"),
        Insn::Other(word) => format!(".inst {word:#010x}"),
    }
}

/// Disassembles little-endian instruction words at `addr` on one line,
/// separated by `"; "`, in objdump style (`b 0x...`, `brk #0x4`, `.inst
/// 0x........` for encodings not decoded here). A trailing partial word
/// becomes a `.byte` list.
pub fn disassemble_aarch64_text(addr: u64, bytes: &[u8]) -> String {
    let chunks = bytes.chunks_exact(4);
    let tail = chunks.remainder();
    let mut parts: Vec<String> = chunks
        .enumerate()
        .map(|(i, chunk)| {
            let word = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            text(decode(addr.wrapping_add(4 * i as u64), word))
        })
        .collect();
    if !tail.is_empty() {
        parts.push(byte_directive(tail));
    }
    parts.join("; ")
}

/// Decodes `bytes` if it is exactly one instruction word.
fn single(addr: u64, bytes: &[u8]) -> Option<Insn> {
    let word: [u8; 4] = bytes.try_into().ok()?;
    Some(decode(addr, u32::from_le_bytes(word)))
}

/// The AArch64 rules of [`PokeKind`]; `old` and `new` are non-empty.
pub(crate) fn classify(addr: u64, old: &[u8], new: &[u8], static_call_sym: bool) -> PokeKind {
    let (Some(o), Some(n)) = (single(addr, old), single(addr, new)) else {
        return PokeKind::Other;
    };
    let is_brk = |insn| matches!(insn, Insn::Brk(_));
    match (o, n) {
        _ if is_brk(o) != is_brk(n) => PokeKind::Kprobe,
        _ if static_call_sym => PokeKind::StaticCall,
        (Insn::Nop, Insn::B(_)) | (Insn::B(_), Insn::Nop) => PokeKind::JumpLabel,
        (Insn::Nop, Insn::Bl(_)) | (Insn::Bl(_), Insn::Nop) | (Insn::Bl(_), Insn::Bl(_)) => PokeKind::Ftrace,
        _ => PokeKind::Other,
    }
}
