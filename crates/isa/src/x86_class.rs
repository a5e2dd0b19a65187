//! x86-64 branch classification: a table-driven length decoder for the
//! common integer instructions, iced-x86 for everything else, and the Linux
//! kernel's return-thunk and retpoline idioms on top.

use iced_x86::{Code, Decoder, DecoderError, DecoderOptions, FlowControl, Instruction, Mnemonic};

use crate::{Block, BranchClass, DecodeError, Insn, WalkError};

/// The longest valid x86 instruction.
const MAX_INSN_LEN: usize = 15;

/// Names of the kernel's return thunks: a `jmp` to one of them is a return.
/// `__x86_return_thunk` is what the compiler emits (`-mfunction-return=
/// thunk-extern`); the others are what boot-time patching retargets those
/// jumps to, depending on the CPU's mitigation (retbleed, SRSO, ITS, call
/// depth tracking).
const RETURN_THUNKS: [&str; 6] =
    ["__x86_return_thunk", "retbleed_return_thunk", "srso_return_thunk", "srso_alias_return_thunk", "its_return_thunk", "call_depth_return_thunk"];

/// Name prefixes of the kernel's indirect-branch thunks, one per register:
/// a `call` to one is an indirect call, a `jmp` an indirect jump. The first
/// are the retpolines the compiler emits (`-mindirect-branch=thunk-extern`),
/// the others what boot-time patching retargets them to (call depth tracking,
/// ITS).
const INDIRECT_THUNK_PREFIXES: [&str; 4] =
    ["__x86_indirect_thunk_", "__x86_indirect_call_thunk_", "__x86_indirect_jump_thunk_", "__x86_indirect_its_thunk_"];

/// What a branch to a kernel thunk means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Thunk {
    Return,
    Indirect,
}

/// Addresses of the x86 kernel's compiler thunks, so that branches to them are
/// classified by what they mean: a JMP to a return thunk is a
/// [`BranchClass::Return`], a CALL or JMP to a retpoline (indirect) thunk is a
/// [`BranchClass::IndirectCall`] or [`BranchClass::IndirectJump`]. A Jcc to
/// a thunk (a conditional tail call or return) stays a
/// [`BranchClass::CondBranch`]: its taken path walks into the thunk.
///
/// The default knows no thunks: right for user-space code, and for a kernel
/// without symbols (its thunk branches then stay direct jumps and calls whose
/// targets lead into the thunk code, still a correct path to walk).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelIdioms {
    /// Sorted by address, one entry per address.
    thunks: Vec<(u64, Thunk)>,
}

impl KernelIdioms {
    /// Picks the thunks out of `(name, address)` pairs, such as the lines of
    /// `/proc/kallsyms` or a `kcore_dir/kallsyms`; other symbols are ignored.
    pub fn from_symbols<'a>(symbols: impl IntoIterator<Item = (&'a str, u64)>) -> Self {
        let mut thunks: Vec<(u64, Thunk)> = symbols
            .into_iter()
            .filter_map(|(name, addr)| {
                if RETURN_THUNKS.contains(&name) {
                    Some((addr, Thunk::Return))
                } else if INDIRECT_THUNK_PREFIXES.iter().any(|p| name.starts_with(p)) {
                    Some((addr, Thunk::Indirect))
                } else {
                    None
                }
            })
            .collect();
        thunks.sort_by_key(|&(addr, _)| addr);
        thunks.dedup_by_key(|&mut (addr, _)| addr);
        KernelIdioms { thunks }
    }

    /// Number of thunk addresses known.
    pub fn len(&self) -> usize {
        self.thunks.len()
    }

    /// True when no thunk is known.
    pub fn is_empty(&self) -> bool {
        self.thunks.is_empty()
    }

    fn thunk_at(&self, target: u64) -> Option<Thunk> {
        let (first, last) = (self.thunks.first()?, self.thunks.last()?);
        // The thunks sit together: the bounds reject almost every target.
        if target < first.0 || target > last.0 {
            return None;
        }
        let i = self.thunks.binary_search_by_key(&target, |&(a, _)| a).ok()?;
        Some(self.thunks[i].1)
    }
}

/// The class of a valid decoded instruction, from iced's flow control, before
/// idioms. iced's `Call` flow control also covers SYSCALL, SYSENTER, VMCALL
/// and the other VM entries, and `Return` covers IRET, SYSRET and far RET:
/// those are far transfers here. Only near forms are direct or indirect
/// branches. XBEGIN falls through: a transaction abort reaches a trace decoder
/// as an asynchronous event, like an interrupt.
fn base_class(insn: &Instruction) -> BranchClass {
    match insn.flow_control() {
        FlowControl::Next | FlowControl::XbeginXabortXend => {
            if insn.mnemonic() == Mnemonic::Nop {
                BranchClass::Nop
            } else {
                BranchClass::None
            }
        }
        FlowControl::ConditionalBranch => BranchClass::CondBranch,
        FlowControl::UnconditionalBranch => BranchClass::DirectJump,
        FlowControl::IndirectBranch if insn.is_jmp_near_indirect() => BranchClass::IndirectJump,
        FlowControl::IndirectCall if insn.is_call_near_indirect() => BranchClass::IndirectCall,
        FlowControl::Call if insn.is_call_near() => BranchClass::DirectCall,
        FlowControl::Return if insn.mnemonic() == Mnemonic::Ret => BranchClass::Return,
        FlowControl::Interrupt if matches!(insn.code(), Code::Int3 | Code::Int1) => BranchClass::Trap,
        FlowControl::Exception => BranchClass::Trap,
        FlowControl::IndirectBranch | FlowControl::IndirectCall | FlowControl::Call | FlowControl::Return | FlowControl::Interrupt => {
            BranchClass::FarTransfer
        }
    }
}

/// Reclassifies a direct JMP or CALL to a kernel thunk by what it means.
fn apply_idioms(class: BranchClass, target: u64, idioms: &KernelIdioms) -> BranchClass {
    match (class, idioms.thunk_at(target)) {
        (BranchClass::DirectJump, Some(Thunk::Return)) => BranchClass::Return,
        (BranchClass::DirectJump, Some(Thunk::Indirect)) => BranchClass::IndirectJump,
        (BranchClass::DirectCall, Some(Thunk::Indirect)) => BranchClass::IndirectCall,
        _ => class,
    }
}

/// Classifies an instruction iced decoded as valid, kernel idioms applied.
fn classify_decoded(insn: &Instruction, idioms: &KernelIdioms) -> Insn {
    let mut class = base_class(insn);
    let target = match class {
        BranchClass::CondBranch | BranchClass::DirectJump | BranchClass::DirectCall => Some(insn.near_branch_target()),
        _ => None,
    };
    if let Some(t) = target {
        class = apply_idioms(class, t, idioms);
    }
    Insn {
        // A valid instruction is at most 15 bytes.
        len: insn.len() as u8,
        class,
        target,
    }
}

// The fast path's opcode descriptors: one u16 per one-byte opcode (index
// 0-255) and per 0x0f opcode (256-511); 0 sends the opcode to iced.
/// The opcode is decoded by the fast path.
const FAST: u16 = 1 << 15;
/// The descriptor of the segment and 0x66 prefixes the fast path takes.
const PREFIX: u16 = 1;
/// A ModRM operand follows the opcode.
const MODRM: u16 = 1 << 14;
/// ModRM.reg or REX changes validity, class or immediate: see [`group`].
const GROUP: u16 = 1 << 13;
/// The immediate after the opcode and ModRM (bits 8-10).
const IMM_SHIFT: u32 = 8;
const IMM_NONE: u16 = 0;
const IMM_8: u16 = 1;
const IMM_16: u16 = 2;
/// 16 bits with 0x66 (and no REX.W), else 32.
const IMM_Z: u16 = 3;
/// MOV r, imm: 64 bits with REX.W, else as IMM_Z.
const IMM_V: u16 = 4;
const REL_8: u16 = 5;
const REL_32: u16 = 6;
// The class is in bits 0-3, as its index in `BranchClass::ALL`.

const fn op(imm: u16, class: BranchClass) -> u16 {
    FAST | imm << IMM_SHIFT | class as u16
}

const fn op_modrm(imm: u16) -> u16 {
    FAST | MODRM | imm << IMM_SHIFT
}

/// One-byte opcodes of the fast path: the integer instructions compilers
/// emit most, leaving out what is invalid in 64-bit mode and the opcodes
/// whose meaning depends on more than ModRM.reg, ModRM.mod and REX.B.
const fn one_byte(o: u8) -> u16 {
    use BranchClass as C;
    match o {
        // ALU ops: r/m,r and r,r/m (x0-x3), AL/eAX with imm (x4, x5). The
        // x6/x7 columns are prefixes, the 0x0f escape or invalid in 64-bit mode.
        0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 => PREFIX,
        0x00..=0x3f => match o & 7 {
            0..=3 => op_modrm(IMM_NONE),
            4 => op(IMM_8, C::None),
            5 => op(IMM_Z, C::None),
            _ => 0,
        },
        0x50..=0x5f | 0x91..=0x99 | 0xc9 => op(IMM_NONE, C::None), // push, pop, xchg, cbw, cwd, leave
        0x63 | 0x84..=0x8b | 0xd0..=0xd3 => op_modrm(IMM_NONE),
        0x68 | 0xa9 => op(IMM_Z, C::None),
        0x69 | 0x81 => op_modrm(IMM_Z),
        0x6a | 0xa8 | 0xb0..=0xb7 => op(IMM_8, C::None),
        0xb8..=0xbf => op(IMM_V, C::None),
        0x6b | 0x80 | 0x83 | 0xc0 | 0xc1 => op_modrm(IMM_8),
        0x70..=0x7f => op(REL_8, C::CondBranch),
        0xc2 => op(IMM_16, C::Return),
        0xc3 => op(IMM_NONE, C::Return),
        0xcc => op(IMM_NONE, C::Trap),
        0xe8 => op(REL_32, C::DirectCall),
        0xe9 => op(REL_32, C::DirectJump),
        0xeb => op(REL_8, C::DirectJump),
        0x90 => op(IMM_NONE, C::Nop) | GROUP,
        // lea, mov r/m imm, test/not/neg/mul/div, inc/dec, the FF group.
        0x8d | 0xf6 | 0xf7 | 0xfe | 0xff => op_modrm(IMM_NONE) | GROUP,
        0xc6 => op_modrm(IMM_8) | GROUP,
        0xc7 => op_modrm(IMM_Z) | GROUP,
        _ => 0,
    }
}

/// Two-byte (0x0f) opcodes of the fast path, as [`one_byte`]: no SSE (whose
/// meaning depends on 0x66), no 0x0f 0x01 system group.
const fn two_byte(o: u8) -> u16 {
    use BranchClass as C;
    match o {
        0x05 => op(IMM_NONE, C::FarTransfer), // syscall
        0x0b => op(IMM_NONE, C::Trap),        // ud2
        0x31 | 0xa2 => op(IMM_NONE, C::None), // rdtsc, cpuid
        0x1f => op_modrm(IMM_NONE) | GROUP,   // nop r/m
        0xba => op_modrm(IMM_8) | GROUP,      // bt/bts/btr/btc r/m, imm8
        // cmovcc, setcc, bt, bts, btr, btc, shld/shrd cl, imm, cmpxchg,
        // movzx, movsx, bsf, bsr, xadd
        0x40..=0x4f | 0x90..=0x9f | 0xa3 | 0xa5 | 0xab | 0xad | 0xaf | 0xb0 | 0xb1 | 0xb3 | 0xb6 | 0xb7 | 0xbb..=0xbf | 0xc0 | 0xc1 => {
            op_modrm(IMM_NONE)
        }
        0xa4 | 0xac => op_modrm(IMM_8), // shld/shrd imm8
        0x80..=0x8f => op(REL_32, C::CondBranch),
        _ => 0,
    }
}

const OPCODES: [u16; 512] = {
    let mut table = [0u16; 512];
    let mut o = 0;
    while o < 256 {
        table[o] = one_byte(o as u8);
        table[256 + o] = two_byte(o as u8);
        o += 1;
    }
    table
};

/// Bytes of a ModRM operand without the SIB's own displacement: ModRM, SIB,
/// displacement.
const MODRM_LEN: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut m = 0;
    while m < 256 {
        let (md, rm) = (m >> 6, m & 7);
        let sib = (md != 3 && rm == 4) as u8;
        let disp = match md {
            0 if rm == 5 => 4, // RIP-relative
            1 => 1,
            2 => 4,
            _ => 0,
        };
        table[m] = 1 + sib + disp;
        m += 1;
    }
    table
};

/// The rules of the GROUP opcodes (`index` into `OPCODES`): their class and
/// the extra immediate bytes, or `None` for iced.
fn group(index: usize, modrm: u8, rex: u8, iz: usize) -> Option<(BranchClass, usize)> {
    let (md, reg) = (modrm >> 6, modrm >> 3 & 7);
    Some(match (index, reg) {
        (0x90, _) if rex & 1 != 0 => (BranchClass::None, 0), // 41 90 is xchg r8d, eax
        (0x90, _) => (BranchClass::Nop, 0),
        (0x8d, _) if md == 3 => return None,  // lea needs memory
        (0xc6 | 0xc7, 1..) => return None,    // only mov /0 (c6/c7 f8: xabort/xbegin)
        (0xf6, 0) => (BranchClass::None, 1),  // test r/m8, imm8
        (0xf7, 0) => (BranchClass::None, iz), // test r/m, imm
        (0xf6 | 0xf7, 1) => return None,      // the undocumented test alias
        (0xfe, 2..) => return None,           // only inc/dec
        (0xff, 2) => (BranchClass::IndirectCall, 0),
        (0xff, 4) => (BranchClass::IndirectJump, 0),
        (0xff, 3 | 5 | 7) => return None, // far call/jmp, invalid
        (0x11f, 1..) => return None,      // 0f 1f /1-7: reserved NOPs, not NOP
        (0x11f, 0) => (BranchClass::Nop, 0),
        (0x1ba, 0..=3) => return None, // 0f ba /0-3 do not exist
        _ => (BranchClass::None, 0),
    })
}

/// The fast path: a table-driven length decoder (the idea of libipt's
/// instruction length decoder) for the common integer instructions with
/// segment, 0x66 and REX prefixes. `None` means "ask iced": unknown or rare
/// opcodes, other prefixes, a 0x66 on a branch, truncated or over-long bytes.
/// Agrees with iced on every instruction it accepts (tests/x86_forms.rs).
#[inline]
fn fast(addr: u64, bytes: &[u8], idioms: &KernelIdioms) -> Option<Insn> {
    let mut i = 0usize;
    let mut opsize16 = false;
    let mut b = *bytes.first()?;
    while OPCODES[usize::from(b)] == PREFIX {
        opsize16 |= b == 0x66;
        i += 1;
        b = *bytes.get(i)?;
    }
    let mut rex = 0u8;
    if b & 0xf0 == 0x40 {
        rex = b;
        i += 1;
        b = *bytes.get(i)?;
    }
    let mut index = usize::from(b);
    i += 1;
    if b == 0x0f {
        index = 256 + usize::from(*bytes.get(i)?);
        i += 1;
    }
    let desc = OPCODES[index];
    if desc & FAST == 0 {
        return None; // also a prefix after REX, which cancels it
    }
    let mut class = BranchClass::ALL[usize::from(desc & 0xf)];
    let rex_w = rex & 8 != 0;
    let iz = if opsize16 && !rex_w { 2 } else { 4 };
    let mut extra = 0;
    if desc & MODRM != 0 {
        let modrm = *bytes.get(i)?;
        if modrm & 0xc7 == 0x04 {
            // SIB without base: a disp32 follows.
            extra = if bytes.get(i + 1)? & 7 == 5 { 4 } else { 0 };
        }
        i += usize::from(MODRM_LEN[usize::from(modrm)]);
        if desc & GROUP != 0 {
            let (c, imm) = group(index, modrm, rex, iz)?;
            class = c;
            extra += imm;
        }
    } else if desc & GROUP != 0 {
        class = group(index, 0, rex, iz)?.0;
    }
    if opsize16 && class != BranchClass::None && class != BranchClass::Nop {
        return None; // 66 on a branch: iced knows what it does
    }
    let imm_kind = desc >> IMM_SHIFT & 7;
    let imm = match imm_kind {
        IMM_NONE => 0,
        IMM_8 | REL_8 => 1,
        IMM_16 => 2,
        IMM_V if rex_w => 8,
        IMM_Z | IMM_V => iz,
        _ => 4, // REL_32
    };
    let end = i + extra + imm;
    if end > bytes.len() || end > MAX_INSN_LEN {
        return None;
    }
    if imm_kind < REL_8 {
        return Some(Insn { len: end as u8, class, target: None });
    }
    let rel = if imm_kind == REL_8 {
        i64::from(bytes[i] as i8)
    } else {
        i64::from(i32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]))
    };
    let target = addr.wrapping_add(end as u64).wrapping_add_signed(rel);
    Some(Insn { len: end as u8, class: apply_idioms(class, target, idioms), target: Some(target) })
}

fn decode_error(decoder: &Decoder<'_>) -> DecodeError {
    match decoder.last_error() {
        DecoderError::NoMoreBytes => DecodeError::Truncated,
        _ => DecodeError::Invalid,
    }
}

/// Classifies the x86-64 instruction at the start of `bytes`, located at
/// `addr`: its length, class and direct target, with the kernel `idioms`
/// applied. Bytes after the first instruction are ignored.
///
/// Common integer instructions go through a table-driven length decoder;
/// everything else through iced-x86, whose decode is the reference: the
/// result is what iced's flow control says, mapped as [`BranchClass`]
/// documents (Intel behaviour: a 0x66 prefix does not shorten near branches).
pub fn classify_x86_64(addr: u64, bytes: &[u8], idioms: &KernelIdioms) -> Result<Insn, DecodeError> {
    match fast(addr, bytes, idioms) {
        Some(insn) => Ok(insn),
        None => classify_with_iced(addr, bytes, idioms),
    }
}

/// The slow path of [`classify_x86_64`], kept out of line so that the fast
/// path does not pay for the decoder's stack frame.
#[cold]
#[inline(never)]
fn classify_with_iced(addr: u64, bytes: &[u8], idioms: &KernelIdioms) -> Result<Insn, DecodeError> {
    let mut decoder = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    decoder.decode_out(&mut insn);
    if insn.is_invalid() {
        return jmpabs(bytes).ok_or_else(|| decode_error(&decoder));
    }
    Ok(classify_decoded(&insn, idioms))
}

/// APX's JMPABS, which iced does not know: a REX2 prefix (`d5`) with M0 and
/// W clear (its R, X and B bits are ignored), opcode `a1`, and a 64-bit
/// absolute target, 11 bytes. An indirect jump here: the APX spec has Intel
/// PT send a TIP for every JMPABS (its target may be patched at run time,
/// as in a PLT), and the walk follows that TIP, not the bytes.
fn jmpabs(bytes: &[u8]) -> Option<Insn> {
    let [0xd5, payload, 0xa1, ..] = *bytes.get(..11)? else { return None };
    (payload & 0x88 == 0).then_some(Insn { len: 11, class: BranchClass::IndirectJump, target: None })
}

/// [`crate::walk_to_branch`] for x86-64: [`classify_x86_64`] instruction
/// after instruction.
pub(crate) fn walk(addr: u64, code: &[u8], idioms: &KernelIdioms) -> Result<Block, WalkError> {
    let mut pos = 0usize;
    let mut non_branch_insns = 0u32;
    loop {
        let here = addr.wrapping_add(pos as u64);
        if pos == code.len() || non_branch_insns == u32::MAX {
            return Err(WalkError::EndOfBuffer { addr: here, non_branch_insns });
        }
        match classify_x86_64(here, &code[pos..], idioms) {
            Ok(branch) if branch.class.is_branch() => return Ok(Block { start: addr, non_branch_insns, branch_addr: here, branch }),
            Ok(insn) => {
                non_branch_insns += 1;
                pos += usize::from(insn.len);
            }
            Err(DecodeError::Truncated) => return Err(WalkError::EndOfBuffer { addr: here, non_branch_insns }),
            Err(DecodeError::Invalid) => return Err(WalkError::Undecodable { addr: here, non_branch_insns }),
        }
    }
}
