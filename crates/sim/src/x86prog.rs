//! A kernel-like x86-64 program: a dispatcher calling functions that loop,
//! branch, call directly, indirectly and through static calls, and carry
//! patch sites of every kind the kernel pokes.

use crate::program::{Outside, Program, Site, SiteKind};
use crate::rng::Rng;

pub const TEXT_BASE: u64 = 0xffff_ffff_8100_0000;
/// Where out-of-line code (ftrace trampolines) is created at run time.
pub const OOL_BASE: u64 = 0xffff_ffff_a000_0000;
/// Where code outside the traced text lives (module space), with `exits`.
pub const OUTSIDE_BASE: u64 = 0xffff_ffff_c000_0000;
/// UD2, which the kernel's BUG() and WARN() plant; and a byte that is no
/// instruction in 64-bit mode (PUSH ES in 32-bit code).
pub const UD2: [u8; 2] = [0x0f, 0x0b];
pub const INVALID: u8 = 0x06;

pub const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
pub const NOP2: [u8; 2] = [0x66, 0x90];
pub const INT3: u8 = 0xcc;

/// Straight-line instructions that change no control flow.
const FILLERS: &[&[u8]] = &[
    &[0x48, 0x89, 0xc3],             // mov rbx, rax
    &[0x48, 0x83, 0xc0, 0x08],       // add rax, 8
    &[0x48, 0x8d, 0x40, 0x10],       // lea rax, [rax+0x10]
    &[0x31, 0xd2],                   // xor edx, edx
    &[0x48, 0x8b, 0x4f, 0x08],       // mov rcx, [rdi+8]
    &[0x89, 0xc6],                   // mov esi, eax
    &[0x48, 0x85, 0xc0],             // test rax, rax
    &[0x90],                         // nop
    &[0x48, 0xc7, 0xc0, 1, 0, 0, 0], // mov rax, 1
];

struct Asm {
    code: Vec<u8>,
}

impl Asm {
    fn here(&self) -> u64 {
        TEXT_BASE + self.code.len() as u64
    }
    fn bytes(&mut self, b: &[u8]) -> u64 {
        let at = self.here();
        self.code.extend_from_slice(b);
        at
    }
    /// `min` plus up to `spread - 1` straight-line instructions.
    fn filler(&mut self, rng: &mut Rng, min: usize, spread: u64) {
        let n = min + rng.below(spread) as usize;
        for _ in 0..n {
            let f = FILLERS[rng.below(FILLERS.len() as u64) as usize];
            self.bytes(f);
        }
    }
    fn align(&mut self, to: usize) {
        while !self.code.len().is_multiple_of(to) {
            self.code.push(INT3);
        }
    }
    /// rel32 from the end of a 5-byte instruction at `at` to `target`.
    fn rel32(at: u64, target: u64) -> [u8; 4] {
        (target.wrapping_sub(at + 5) as i64 as i32).to_le_bytes()
    }
    fn patch(&mut self, at: u64, b: &[u8]) {
        let o = (at - TEXT_BASE) as usize;
        self.code[o..o + b.len()].copy_from_slice(b);
    }
}

pub fn jmp32(at: u64, target: u64) -> Vec<u8> {
    let mut v = vec![0xe9];
    v.extend_from_slice(&Asm::rel32(at, target));
    v
}

pub fn call32(at: u64, target: u64) -> Vec<u8> {
    let mut v = vec![0xe8];
    v.extend_from_slice(&Asm::rel32(at, target));
    v
}

/// Code outside the traced text, built beside it.
struct OutsideAsm {
    code: Vec<u8>,
}

impl OutsideAsm {
    fn here(&self) -> u64 {
        OUTSIDE_BASE + self.code.len() as u64
    }
    /// A function there: a little work, then RET.
    fn function(&mut self) -> u64 {
        let at = self.here();
        self.code.extend_from_slice(&[0x48, 0x89, 0xc3, 0x90, 0xc3]);
        at
    }
    /// A block there that does a little work and jumps back to `back`.
    fn block_back_to(&mut self, back: u64) -> u64 {
        let at = self.here();
        self.code.extend_from_slice(&[0x48, 0x83, 0xc0, 0x08]);
        let jmp = self.here();
        self.code.extend_from_slice(&jmp32(jmp, back));
        at
    }
}

/// Builds `functions` functions (at least 4) and the dispatcher; with
/// `exits`, functions also call and jump into code outside the text (and
/// come back) and run undefined instructions, each in one of four kinds,
/// and some indirect calls may go outside too.
pub fn generate(rng: &mut Rng, functions: usize, exits: bool) -> Program {
    let n = functions.max(4);
    let mut a = Asm { code: Vec::new() };
    let mut outside = OutsideAsm { code: Vec::new() };
    let mut symbols = Vec::new();
    let mut sites = Vec::new();
    let mut indirect: Vec<(u64, Vec<u64>)> = Vec::new();
    // Indirect calls (index into `indirect`) that may also go outside the text, and where.
    let mut indirect_out: Vec<(usize, u64)> = Vec::new();

    // The INT3 handler: a few instructions, then IRETQ back to the emulated target.
    a.align(16);
    let int3_handler = a.here();
    symbols.push((int3_handler, "asm_exc_int3".to_string()));
    a.bytes(&[0x50]); // push rax
    a.bytes(&[0x58]); // pop rax
    a.bytes(&[0x48, 0xcf]); // iretq

    // The #UD handler: skips the undefined instruction (its IRET frame says where to).
    let ud_handler = exits.then(|| {
        a.align(16);
        let at = a.here();
        symbols.push((at, "asm_exc_invalid_op".to_string()));
        a.bytes(&[0x50, 0x58, 0x48, 0xcf]); // push rax; pop rax; iretq
        at
    });

    // ftrace_caller: what an enabled ftrace site calls.
    a.align(16);
    let ftrace_caller = a.here();
    symbols.push((ftrace_caller, "ftrace_caller".to_string()));
    a.filler(rng, 3, 1);
    a.bytes(&[0xc3]);

    // Leaf functions: static call targets.
    let leaves = 4;
    let mut leaf_addrs = Vec::new();
    for i in 0..leaves {
        a.align(16);
        let at = a.here();
        symbols.push((at, format!("leaf_{i}")));
        leaf_addrs.push(at);
        a.filler(rng, 2, 5);
        a.bytes(&[0xc3]);
    }
    // Static call trampolines, each a JMP to a leaf, retargeted at run time.
    let mut tramps = Vec::new();
    for i in 0..2 {
        a.align(16);
        let at = a.here();
        symbols.push((at, format!("__SCT__hook_{i}")));
        let first = jmp32(at, leaf_addrs[i]);
        let second = jmp32(at, leaf_addrs[i + 2]);
        a.bytes(&first);
        a.bytes(&[INT3; 3]);
        sites.push(Site { addr: at, kind: SiteKind::StaticCall, states: vec![first, second], tramp_call: None });
        tramps.push(at);
    }

    // Functions are laid out first, their call targets filled in afterwards:
    // function i only calls functions j > i, so the call depth is bounded.
    let mut entries = vec![0u64; n];
    let mut calls: Vec<(u64, usize)> = Vec::new(); // (call insn addr, callee index)
    for (i, entry) in entries.iter_mut().enumerate() {
        a.align(16);
        let f = a.here();
        *entry = f;
        symbols.push((f, format!("func_{i}")));
        // ftrace site at entry.
        let at = a.bytes(&NOP5);
        sites.push(Site {
            addr: at,
            kind: SiteKind::Ftrace,
            states: vec![NOP5.to_vec(), call32(at, ftrace_caller)],
            tramp_call: Some(call32(at, OOL_BASE)),
        });
        // A kprobe-able first instruction.
        let probe = a.here();
        a.bytes(&[0x48, 0x89, 0xc3]);
        sites.push(Site { addr: probe, kind: SiteKind::Kprobe, states: vec![vec![0x48], vec![INT3]], tramp_call: None });
        a.filler(rng, 1, 3);
        // A loop: body, then JNZ back (taken or not, decided at run time).
        let top = a.here();
        a.filler(rng, 1, 4);
        let jcc = a.here();
        let rel = (top as i64 - (jcc as i64 + 2)) as i8;
        a.bytes(&[0x75, rel as u8]);
        // Jump label (5 bytes): NOP5 or JMP to an out-of-line block that jumps back.
        let jl = a.bytes(&NOP5);
        let back = a.here();
        a.filler(rng, 1, 3);
        // Forward conditional skip.
        let skip_at = a.here();
        a.bytes(&[0x74, 0]);
        let skip_from = a.here();
        a.filler(rng, 1, 2);
        if exits {
            // Skipped or not at run time: an exit of one of four kinds.
            match i % 4 {
                0 => {
                    let at = a.here();
                    a.bytes(&call32(at, outside.function()));
                }
                1 => {
                    let at = a.here();
                    a.bytes(&jmp32(at, outside.block_back_to(at + 5)));
                }
                2 => {
                    a.bytes(&UD2);
                }
                _ => {
                    a.bytes(&[INVALID]);
                }
            }
        }
        let skip_len = (a.here() - skip_from) as u8;
        a.patch(skip_at, &[0x74, skip_len]);
        // Calls: direct to a later function, through a static call, or indirect.
        if i + 1 < n {
            let at = a.bytes(&[0xe8, 0, 0, 0, 0]);
            calls.push((at, i + 1 + rng.below((n - i - 1).min(3) as u64) as usize));
        }
        let sc = tramps[rng.below(tramps.len() as u64) as usize];
        let at = a.here();
        a.bytes(&call32(at, sc));
        if i + 2 < n {
            let at = a.bytes(&[0xff, 0xd0]); // call rax
            indirect.push((at, ((i + 1)..n).take(3).collect::<Vec<usize>>().iter().map(|&j| j as u64).collect()));
            if exits && i % 4 == 3 {
                indirect_out.push((indirect.len() - 1, outside.function()));
            }
        }
        // Jump label (2 bytes) over a 2-byte filler.
        let jl2 = a.bytes(&NOP2);
        a.bytes(&[0x31, 0xd2]);
        sites.push(Site { addr: jl2, kind: SiteKind::JumpLabelShort, states: vec![NOP2.to_vec(), vec![0xeb, 0x02]], tramp_call: None });
        a.filler(rng, 0, 3);
        a.bytes(&[0xc3]);
        // The out-of-line block of the 5-byte jump label.
        let ool = a.here();
        a.filler(rng, 1, 2);
        let at = a.here();
        a.bytes(&jmp32(at, back));
        sites.push(Site { addr: jl, kind: SiteKind::JumpLabel, states: vec![NOP5.to_vec(), jmp32(jl, ool)], tramp_call: None });
    }
    for (at, callee) in calls {
        let b = call32(at, entries[callee]);
        a.patch(at, &b);
    }
    // Indirect targets were function indices: make them addresses.
    for (_, targets) in &mut indirect {
        for t in targets.iter_mut() {
            *t = entries[*t as usize];
        }
    }
    for (k, out) in indirect_out {
        indirect[k].1.push(out);
    }
    // The dispatcher: call a random function through RAX, forever.
    a.align(16);
    let entry = a.here();
    symbols.push((entry, "dispatch".to_string()));
    let call_at = a.bytes(&[0xff, 0xd0]);
    indirect.push((call_at, entries.clone()));
    let at = a.here();
    a.bytes(&jmp32(at, entry));
    a.align(16);
    symbols.push((a.here(), "_etext".to_string()));
    symbols.sort();
    symbols.insert(0, (TEXT_BASE, "_text".to_string()));

    // A run-time ftrace trampoline: some work, then return.
    let mut trampoline_code = vec![0x48, 0x89, 0xc3, 0x48, 0x83, 0xc0, 0x08, 0x90];
    trampoline_code.push(0xc3);
    Program {
        arch: isa::Arch::X86_64,
        text_base: TEXT_BASE,
        ool_base: OOL_BASE,
        text: a.code,
        symbols,
        sites,
        indirect,
        entry,
        int3_handler,
        trampoline_code,
        outside: exits.then_some(Outside { base: OUTSIDE_BASE, code: outside.code }),
        ud_handler,
    }
}
