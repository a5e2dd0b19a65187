//! A kernel-like AArch64 program in real A64 machine code: a dispatcher
//! calling functions (BLR) that loop (B.NE, CBNZ, TBNZ back), skip forward
//! (B.EQ, CBZ, TBZ), call directly (BL), through static-call-like BL sites
//! and indirectly, switch through a BR, and return (RET), with the patch
//! sites the arm64 kernel pokes: jump labels (NOP <-> B), ftrace (NOP <-> BL,
//! BL retarget to a run-time trampoline), static calls (BL retarget) and
//! kprobes (an instruction <-> BRK #4), and a BRK handler that ends in ERET.
//!
//! The out-of-line trampoline sits 64 MiB above the text (in BL range):
//! real arm64 modules sit below the kernel, but perf 6.1 tells kernel from
//! user addresses by the kernel map's start, so code below it would be
//! looked up as user code.

use crate::program::{Program, Site, SiteKind};
use crate::rng::Rng;

pub const TEXT_BASE: u64 = 0xffff_8000_0801_0000;
/// Where the ftrace trampoline is created at run time.
pub const OOL_BASE: u64 = TEXT_BASE + 0x0400_0000;

pub const NOP: u32 = 0xd503_201f;
/// BRK #0x004: the arm64 kprobes breakpoint (BRK64_OPCODE_KPROBES).
pub const BRK_KPROBE: u32 = 0xd420_0080;
pub const RET: u32 = 0xd65f_03c0;
pub const ERET: u32 = 0xd69f_03e0;
/// Padding between functions: UDF #0, never executed.
const PAD: u32 = 0;

/// Straight-line instructions that change no control flow and are no P0
/// elements of ETMv4 instruction trace (no ISB, WFI or WFE).
const FILLERS: &[u32] = &[
    0x9100_2000, // add x0, x0, #8
    0xaa00_03e1, // mov x1, x0
    0xf940_0402, // ldr x2, [x0, #8]
    0xf900_0be3, // str x3, [sp, #16]
    0xd100_04a5, // sub x5, x5, #1
    0xf100_001f, // cmp x0, #0
    0xd280_0026, // mov x6, #1
    0x8b02_0020, // add x0, x1, x2
];

/// The word offset from `at` to `target`, masked to `bits`.
fn rel(at: u64, target: u64, bits: u32) -> u32 {
    ((target.wrapping_sub(at) as i64 >> 2) as u32) & ((1 << bits) - 1)
}

pub fn b(at: u64, target: u64) -> u32 {
    0x1400_0000 | rel(at, target, 26)
}

pub fn bl(at: u64, target: u64) -> u32 {
    0x9400_0000 | rel(at, target, 26)
}

/// B.cond with condition code `cond` (0 EQ, 1 NE, ...).
pub fn b_cond(at: u64, target: u64, cond: u32) -> u32 {
    0x5400_0000 | rel(at, target, 19) << 5 | cond
}

/// CBZ (or CBNZ) on X`rt`.
pub fn cbz(at: u64, target: u64, rt: u32, nonzero: bool) -> u32 {
    0xb400_0000 | (nonzero as u32) << 24 | rel(at, target, 19) << 5 | rt
}

/// TBZ (or TBNZ) on bit `bit` of X`rt`.
pub fn tbz(at: u64, target: u64, rt: u32, bit: u32, nonzero: bool) -> u32 {
    0x3600_0000 | (bit >> 5) << 31 | (nonzero as u32) << 24 | (bit & 31) << 19 | rel(at, target, 14) << 5 | rt
}

pub fn br(rn: u32) -> u32 {
    0xd61f_0000 | rn << 5
}

pub fn blr(rn: u32) -> u32 {
    0xd63f_0000 | rn << 5
}

fn le(w: u32) -> Vec<u8> {
    w.to_le_bytes().to_vec()
}

struct Asm {
    words: Vec<u32>,
}

impl Asm {
    fn here(&self) -> u64 {
        TEXT_BASE + 4 * self.words.len() as u64
    }
    fn word(&mut self, w: u32) -> u64 {
        let at = self.here();
        self.words.push(w);
        at
    }
    /// `min` plus up to `spread - 1` straight-line instructions.
    fn filler(&mut self, rng: &mut Rng, min: usize, spread: u64) {
        let n = min + rng.below(spread) as usize;
        for _ in 0..n {
            let f = FILLERS[rng.below(FILLERS.len() as u64) as usize];
            self.word(f);
        }
    }
    fn align(&mut self, bytes: usize) {
        while !(4 * self.words.len()).is_multiple_of(bytes) {
            self.words.push(PAD);
        }
    }
    fn patch(&mut self, at: u64, w: u32) {
        self.words[((at - TEXT_BASE) / 4) as usize] = w;
    }
}

/// Builds `functions` functions (at least 4) and the dispatcher.
pub fn generate(rng: &mut Rng, functions: usize) -> Program {
    let n = functions.max(4);
    let mut a = Asm { words: Vec::new() };
    let mut symbols = Vec::new();
    let mut sites = Vec::new();
    let mut indirect: Vec<(u64, Vec<u64>)> = Vec::new();

    // The synchronous exception handler BRK goes to: a few instructions, then ERET.
    a.align(16);
    let brk_handler = a.here();
    symbols.push((brk_handler, "el1h_64_sync".to_string()));
    a.filler(rng, 3, 1);
    a.word(ERET);

    a.align(16);
    let ftrace_caller = a.here();
    symbols.push((ftrace_caller, "ftrace_caller".to_string()));
    a.filler(rng, 3, 1);
    a.word(RET);

    // Leaf functions: static call targets.
    let mut leaves = Vec::new();
    for i in 0..4 {
        a.align(16);
        let at = a.here();
        symbols.push((at, format!("leaf_{i}")));
        leaves.push(at);
        a.filler(rng, 2, 5);
        a.word(RET);
    }

    // Function i only calls functions j > i, so the call depth is bounded;
    // the BLs are filled in once every function has its address.
    let mut entries = vec![0u64; n];
    let mut calls: Vec<(u64, usize)> = Vec::new();
    for (i, entry) in entries.iter_mut().enumerate() {
        a.align(16);
        let f = a.here();
        *entry = f;
        symbols.push((f, format!("func_{i}")));
        let at = a.word(NOP);
        sites.push(Site {
            addr: at,
            kind: SiteKind::Ftrace,
            states: vec![le(NOP), le(bl(at, ftrace_caller))],
            tramp_call: Some(le(bl(at, OOL_BASE))),
        });
        let probe = a.word(0xaa00_03e1); // mov x1, x0
        sites.push(Site { addr: probe, kind: SiteKind::Kprobe, states: vec![le(0xaa00_03e1), le(BRK_KPROBE)], tramp_call: None });
        a.filler(rng, 1, 3);
        // A loop: body, then a conditional branch back.
        let top = a.here();
        a.filler(rng, 1, 4);
        let at = a.here();
        a.word(match rng.below(3) {
            0 => b_cond(at, top, 1),
            1 => cbz(at, top, 2, true),
            _ => tbz(at, top, 3, 7, true),
        });
        // Jump label: NOP or B to an out-of-line block that branches back.
        let jl = a.word(NOP);
        let back = a.here();
        a.filler(rng, 1, 3);
        // A forward conditional skip.
        let skip = a.word(0);
        a.filler(rng, 1, 2);
        let over = a.here();
        a.patch(
            skip,
            match rng.below(3) {
                0 => b_cond(skip, over, 0),
                1 => cbz(skip, over, 4, false),
                _ => tbz(skip, over, 5, 40, false),
            },
        );
        if i + 1 < n {
            let at = a.word(0);
            calls.push((at, i + 1 + rng.below((n - i - 1).min(3) as u64) as usize));
        }
        // A static-call-like site: BL to one leaf or another.
        let at = a.here();
        let k = rng.below(2) as usize;
        a.word(bl(at, leaves[k]));
        sites.push(Site { addr: at, kind: SiteKind::StaticCall, states: vec![le(bl(at, leaves[k])), le(bl(at, leaves[k + 2]))], tramp_call: None });
        if i + 2 < n {
            let at = a.word(blr(8));
            indirect.push((at, ((i + 1)..n).take(3).map(|j| j as u64).collect()));
        }
        // Every other function switches through BR to one of three cases.
        if i % 2 == 0 {
            let at = a.word(br(9));
            let mut cases = Vec::new();
            let mut joins = Vec::new();
            for _ in 0..3 {
                cases.push(a.here());
                a.filler(rng, 1, 2);
                joins.push(a.word(0));
            }
            let join = a.here();
            for j in joins {
                a.patch(j, b(j, join));
            }
            indirect.push((at, cases));
        }
        a.filler(rng, 0, 3);
        a.word(RET);
        let ool = a.here();
        a.filler(rng, 1, 2);
        let at = a.here();
        a.word(b(at, back));
        sites.push(Site { addr: jl, kind: SiteKind::JumpLabel, states: vec![le(NOP), le(b(jl, ool))], tramp_call: None });
    }
    for (at, callee) in calls {
        a.patch(at, bl(at, entries[callee]));
    }
    // Indirect call targets were function indices: make them addresses.
    for (at, targets) in &mut indirect {
        let word = a.words[((*at - TEXT_BASE) / 4) as usize];
        if word == blr(8) {
            for t in targets.iter_mut() {
                *t = entries[*t as usize];
            }
        }
    }
    // The dispatcher: BLR to a random function, forever.
    a.align(16);
    let entry = a.here();
    symbols.push((entry, "dispatch".to_string()));
    let call_at = a.word(blr(8));
    indirect.push((call_at, entries.clone()));
    let at = a.here();
    a.word(b(at, entry));
    a.align(16);
    symbols.push((a.here(), "_etext".to_string()));
    symbols.sort();
    symbols.insert(0, (TEXT_BASE, "_text".to_string()));

    let mut trampoline_code = Vec::new();
    for w in [0xaa00_03e1, 0x9100_2000, RET] {
        trampoline_code.extend_from_slice(&u32::to_le_bytes(w));
    }
    let text = a.words.iter().flat_map(|w| w.to_le_bytes()).collect();
    Program {
        arch: isa::Arch::Aarch64,
        text_base: TEXT_BASE,
        ool_base: OOL_BASE,
        text,
        symbols,
        sites,
        indirect,
        entry,
        int3_handler: brk_handler,
        trampoline_code,
        outside: None,
        ud_handler: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isa::{classify_aarch64, BranchClass as B};

    fn word(bytes: &[u8]) -> u32 {
        u32::from_le_bytes(bytes.try_into().unwrap())
    }

    fn class(at: u64, bytes: &[u8]) -> (B, Option<u64>) {
        let i = classify_aarch64(at, word(bytes));
        (i.class, i.target)
    }

    /// Every word is what it was meant to be: isa's class, disarm64's mnemonic,
    /// targets inside the text on real instructions.
    #[test]
    fn every_word_classifies_as_intended() {
        let p = generate(&mut Rng::new(7), 16);
        let end = TEXT_BASE + p.text.len() as u64;
        let sym = |name: &str| p.symbols.iter().find(|s| s.1 == name).unwrap().0;
        let mut mnemonics = std::collections::BTreeMap::new();
        for (k, w) in p.text.chunks_exact(4).enumerate() {
            let at = TEXT_BASE + 4 * k as u64;
            let w = word(w);
            if w == PAD {
                continue;
            }
            use disarm64::InsnOpcode;
            let op = disarm64::decoder::decode(w).unwrap_or_else(|| panic!("{at:#x}: {w:#010x} is no instruction"));
            *mnemonics.entry(op.definition().mnemonic).or_insert(0) += 1;
            let i = classify_aarch64(at, w);
            if let Some(t) = i.target {
                assert!((TEXT_BASE..end).contains(&t) && t % 4 == 0, "{at:#x}: target {t:#x} outside the text");
                let o = (t - TEXT_BASE) as usize;
                assert_ne!(word(&p.text[o..o + 4]), PAD, "{at:#x}: branches into padding");
            }
            assert!(!matches!(i.class, B::Trap), "{at:#x}: a trap in the base image");
        }
        for m in ["b", "bl", "b.c", "cbz", "cbnz", "tbz", "tbnz", "br", "blr", "ret", "eret", "hint"] {
            assert!(mnemonics.contains_key(m), "no {m} in {mnemonics:?}");
        }
        for s in &p.sites {
            let classes: Vec<_> = s.states.iter().map(|b| class(s.addr, b)).collect();
            let o = (s.addr - TEXT_BASE) as usize;
            assert_eq!(&p.text[o..o + 4], &s.states[0][..], "{:#x}: the text holds the first state", s.addr);
            match s.kind {
                SiteKind::JumpLabel => {
                    assert_eq!(classes[0], (B::Nop, None));
                    assert_eq!(classes[1].0, B::DirectJump);
                }
                SiteKind::Ftrace => {
                    assert_eq!(classes, vec![(B::Nop, None), (B::DirectCall, Some(sym("ftrace_caller")))]);
                    assert_eq!(class(s.addr, s.tramp_call.as_ref().unwrap()), (B::DirectCall, Some(OOL_BASE)));
                }
                SiteKind::StaticCall => {
                    for (c, t) in classes {
                        assert_eq!(c, B::DirectCall);
                        assert!(p.symbols.iter().any(|s| Some(s.0) == t && s.1.starts_with("leaf_")));
                    }
                }
                SiteKind::Kprobe => assert_eq!(classes, vec![(B::None, None), (B::Trap, None)]),
                SiteKind::JumpLabelShort => panic!("no short jump labels on AArch64"),
            }
        }
        for (at, targets) in &p.indirect {
            let o = (at - TEXT_BASE) as usize;
            assert!(matches!(class(*at, &p.text[o..o + 4]).0, B::IndirectCall | B::IndirectJump), "{at:#x}");
            assert!(targets.iter().all(|t| (TEXT_BASE..end).contains(t)));
        }
        let (c, _) = class(p.int3_handler, &p.text[(p.int3_handler - TEXT_BASE) as usize..][..4]);
        assert_eq!(c, B::None);
        for w in p.trampoline_code.chunks_exact(4) {
            assert!(disarm64::decoder::decode(word(w)).is_some());
        }
    }
}
