//! The AArch64 oracle: disarm64's decode, mapped to isa's classes by mnemonic,
//! with direct targets read from disarm64's own disassembly text.

use disarm64::decoder;
use disarm64::format_insn::format_insn_pc;
use disarm64::InsnOpcode;
use isa::BranchClass;

/// Class and direct target of `word` at `addr` according to disarm64. Words
/// disarm64 does not decode (unallocated) are `None`, as for isa.
pub fn classify(addr: u64, word: u32) -> (BranchClass, Option<u64>) {
    let Some(opcode) = decoder::decode(word) else {
        return (BranchClass::None, None);
    };
    let def = opcode.definition();
    let class = match def.mnemonic {
        "b" => BranchClass::DirectJump,
        "bl" => BranchClass::DirectCall,
        "b.c" | "bc.c" | "cbz" | "cbnz" | "tbz" | "tbnz" => BranchClass::CondBranch,
        // FEAT_CMPBR: cbgt, cbbeq, cbhne, ... (class COMPBRANCH like cbz).
        m if m.starts_with("cb") && format!("{:?}", def.class) == "COMPBRANCH" => BranchClass::CondBranch,
        "br" | "braa" | "braaz" | "brab" | "brabz" => BranchClass::IndirectJump,
        "blr" | "blraa" | "blraaz" | "blrab" | "blrabz" => BranchClass::IndirectCall,
        "ret" | "retaa" | "retab" => BranchClass::Return,
        "eret" | "eretaa" | "eretab" | "drps" | "svc" | "hvc" | "smc" | "dcps1" | "dcps2" | "dcps3" => BranchClass::FarTransfer,
        "brk" | "hlt" | "udf" => BranchClass::Trap,
        // The HINT space: NOP, YIELD, BTI, PACIASP, ... and CHKFEAT (hint #0x28).
        "hint" | "chkfeat" => BranchClass::Nop,
        _ => BranchClass::None,
    };
    let target = match class {
        BranchClass::DirectJump | BranchClass::DirectCall | BranchClass::CondBranch => {
            let mut text = String::new();
            format_insn_pc(addr, &mut text, &opcode).expect("formatting into a String");
            let last = text.rsplit([' ', '\t', ',']).next().unwrap_or_default();
            let hex = last.strip_prefix("0x").unwrap_or_else(|| panic!("{word:#010x}: target in {text:?}"));
            Some(u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("{word:#010x}: {text:?}: {e}")))
        }
        _ => None,
    };
    (class, target)
}
