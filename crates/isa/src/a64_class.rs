//! AArch64 branch classification by bit masks (Arm ARM C4.1, "Branches,
//! Exception Generating and System instructions"), for decoders' hot loops.
//! Tested against the disarm64 disassembler over every branch encoding space.

use crate::{Block, BranchClass, Insn, WalkError};

/// Sign-extends the `bits`-wide field at bit `lsb` of `word` and scales it
/// from instructions to bytes.
fn offset(word: u32, lsb: u32, bits: u32) -> i64 {
    let field = ((word << (32 - lsb - bits)) as i32) >> (32 - bits);
    i64::from(field) * 4
}

/// Unconditional branch (register), top byte 0xd6 or 0xd7: the exact
/// encodings of BR/BLR/RET, their pointer-authentication forms, ERET and DRPS.
fn branch_register(word: u32) -> BranchClass {
    // Rn-only forms (bits 9:5 free): BR, BLR, RET, BRAAZ, BRABZ, BLRAAZ, BLRABZ.
    match word & 0xffff_fc1f {
        0xd61f_0000 | 0xd61f_081f | 0xd61f_0c1f => return BranchClass::IndirectJump,
        0xd63f_0000 | 0xd63f_081f | 0xd63f_0c1f => return BranchClass::IndirectCall,
        0xd65f_0000 => return BranchClass::Return,
        _ => {}
    }
    // Rn and Rm forms (bits 9:0 free): BRAA, BRAB, BLRAA, BLRAB.
    match word & 0xffff_fc00 {
        0xd71f_0800 | 0xd71f_0c00 => return BranchClass::IndirectJump,
        0xd73f_0800 | 0xd73f_0c00 => return BranchClass::IndirectCall,
        _ => {}
    }
    match word {
        0xd65f_0bff | 0xd65f_0fff => BranchClass::Return, // RETAA, RETAB
        // ERET, ERETAA, ERETAB, DRPS
        0xd69f_03e0 | 0xd69f_0bff | 0xd69f_0fff | 0xd6bf_03e0 => BranchClass::FarTransfer,
        _ => BranchClass::None,
    }
}

/// Exception generation, top byte 0xd4: opc (bits 23:21) and LL (bits 1:0)
/// with op2 (bits 4:2) zero; imm16 free.
fn exception(word: u32) -> BranchClass {
    match word & 0xffe0_001f {
        // SVC, HVC, SMC, DCPS1, DCPS2, DCPS3
        0xd400_0001 | 0xd400_0002 | 0xd400_0003 | 0xd4a0_0001 | 0xd4a0_0002 | 0xd4a0_0003 => BranchClass::FarTransfer,
        0xd420_0000 | 0xd440_0000 => BranchClass::Trap, // BRK, HLT
        // TCANCEL (0xd4600000) falls through like x86 XABORT: a transaction
        // failure reaches a trace decoder as an event of its own.
        _ => BranchClass::None,
    }
}

/// Compare and branch, FEAT_CMPBR (top byte 0x74/0x75 with sf in bit 31):
/// CB<cc> register forms (word, byte and halfword) and immediate forms. The
/// condition field (bits 23:21) has no encoding 100 or 101.
fn is_compare_branch(word: u32) -> bool {
    let cc = (word >> 21) & 7;
    if cc == 0b100 || cc == 0b101 {
        return false;
    }
    let sf = word >> 31;
    if word & 0x0100_0000 == 0 {
        // Register forms: bits 15:14 are 00 (W/X), 10 (byte) or 11 (halfword,
        // the last two only with sf = 0).
        match (word >> 14) & 3 {
            0b00 => true,
            0b10 | 0b11 => sf == 0,
            _ => false,
        }
    } else {
        // Immediate forms: bit 14 is zero.
        word & 0x4000 == 0
    }
}

/// Classifies the AArch64 instruction `word` at `addr`. Only the branch,
/// exception-generating and hint spaces are looked at: every other word,
/// unallocated ones included, is [`BranchClass::None`], so this is no
/// validity check. FEAT_PAuth_LR returns (RETAASPPC and friends) are not
/// recognised yet.
pub fn classify_aarch64(addr: u64, word: u32) -> Insn {
    let direct = |class, target_offset| Insn { len: 4, class, target: Some(addr.wrapping_add_signed(target_offset)) };
    let other = |class| Insn { len: 4, class, target: None };
    match word >> 24 {
        0x14..=0x17 => direct(BranchClass::DirectJump, offset(word, 0, 26)), // B
        0x94..=0x97 => direct(BranchClass::DirectCall, offset(word, 0, 26)), // BL
        // B.cond, BC.cond (bit 4); CBZ, CBNZ (bit 24)
        0x54 | 0x34 | 0x35 | 0xb4 | 0xb5 => direct(BranchClass::CondBranch, offset(word, 5, 19)),
        // TBZ, TBNZ (bit 24); bit 31 is the top bit of the bit number.
        0x36 | 0x37 | 0xb6 | 0xb7 => direct(BranchClass::CondBranch, offset(word, 5, 14)),
        0x74 | 0x75 | 0xf4 | 0xf5 if is_compare_branch(word) => direct(BranchClass::CondBranch, offset(word, 5, 9)),
        0xd4 => other(exception(word)),
        0xd5 if word & 0xffff_f01f == 0xd503_201f => other(BranchClass::Nop), // HINT #imm7
        0xd6 | 0xd7 => other(branch_register(word)),
        0x00 if word >> 16 == 0 => other(BranchClass::Trap), // UDF #imm16
        _ => other(BranchClass::None),
    }
}

/// [`crate::walk_to_branch`] for AArch64: little-endian words from `addr`,
/// which must be 4-byte aligned.
pub(crate) fn walk(addr: u64, code: &[u8]) -> Result<Block, WalkError> {
    if addr & 3 != 0 {
        return Err(WalkError::Undecodable { addr, non_branch_insns: 0 });
    }
    let mut non_branch_insns = 0u32;
    let mut here = addr;
    for chunk in code.chunks_exact(4) {
        if non_branch_insns == u32::MAX {
            break;
        }
        let word = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        let branch = classify_aarch64(here, word);
        if branch.class.is_branch() {
            return Ok(Block { start: addr, non_branch_insns, branch_addr: here, branch });
        }
        non_branch_insns += 1;
        here = here.wrapping_add(4);
    }
    Err(WalkError::EndOfBuffer { addr: here, non_branch_insns })
}
