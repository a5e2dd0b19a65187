//! A real kernel's code as an ELF file the simulator's random walks accept
//! (`sim::simulate_elf`): Debian's vmlinux is stripped, so the walks need
//! function entries from elsewhere, and its retpoline thunks, as the file
//! has them, loop forever in a random walk (their RET returns into the
//! speculation trap). Included with `#[path]` by `benches/flow.rs`.
//!
//! The file written holds the vmlinux's code sections (`.text`, `.init.text`,
//! `.altinstr_aux`, ...) at their addresses, in one segment, with:
//! - every retpoline thunk (the targets of the `.retpoline_sites` calls)
//!   rewritten to `jmp *%reg`, what the kernel's boot-time alternatives make
//!   of them on CPUs that need no retpoline;
//! - every HLT an INT3 (see below);
//! - a function symbol at every `call __fentry__` (the ftrace call that
//!   starts each traceable function; `__fentry__` is the most frequent direct
//!   call target).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use iced_x86::{Decoder, DecoderOptions, FlowControl, Mnemonic, OpKind, Register};
use object::{Object, ObjectSection};
use testkit::elf;
use testkit::le::{put32, put64};

/// Writes the walkable copy of `vmlinux` to `out` (once; reused when present).
pub fn walkable_vmlinux(vmlinux: &Path, out: &Path) -> PathBuf {
    if out.is_file() {
        return out.to_path_buf();
    }
    let data = std::fs::read(vmlinux).expect("read vmlinux");
    let file = object::File::parse(&data[..]).expect("vmlinux is ELF");
    let section = |name: &str| {
        let s = file.section_by_name(name).unwrap_or_else(|| panic!("vmlinux has no {name}"));
        (s.address(), s.data().expect("section data").to_vec())
    };
    // All of the kernel's code (a path in .text jumps into .init.text and
    // .altinstr_aux): the sections are laid out in address order, gaps
    // filled with INT3, and written as one segment.
    let mut code: Vec<(u64, Vec<u8>)> = file
        .sections()
        .filter(|s| matches!(s.flags(), object::SectionFlags::Elf { sh_flags } if sh_flags & 6 == 6) && s.size() > 0)
        .map(|s| (s.address(), s.data().expect("section data").to_vec()))
        .collect();
    code.sort_unstable_by_key(|c| c.0);
    let base = code[0].0;
    let end = code.iter().map(|(a, b)| a + b.len() as u64).max().unwrap();
    assert!(end - base < 1 << 30, "code from {base:#x} to {end:#x}");
    let mut text = vec![0xcc; (end - base) as usize];
    for (a, b) in &code {
        text[(a - base) as usize..][..b.len()].copy_from_slice(b);
    }
    let (sites_at, sites) = section(".retpoline_sites");
    let len = text.len() as u64;
    let at = move |addr: u64| (addr.checked_sub(base).filter(|&o| o < len)).map(|o| o as usize);
    // The retpoline thunks: where the listed call sites go.
    let mut thunks: Vec<u64> = sites
        .chunks_exact(4)
        .enumerate()
        .filter_map(|(i, rel)| {
            let site = (sites_at + 4 * i as u64).wrapping_add(i32::from_le_bytes(rel.try_into().unwrap()) as i64 as u64);
            let o = at(site)?;
            let insn = Decoder::with_ip(64, &text[o..(o + 15).min(text.len())], site, DecoderOptions::NONE).decode();
            (insn.near_branch_target() != 0).then(|| insn.near_branch_target())
        })
        .collect();
    thunks.sort_unstable();
    thunks.dedup();
    assert!(thunks.len() >= 10, "retpoline thunks: {thunks:x?}");
    for &t in &thunks {
        let o = at(t).expect("thunk in .text");
        let reg = Decoder::with_ip(64, &text[o..o + 32], t, DecoderOptions::NONE)
            .iter()
            .find(|i| i.mnemonic() == Mnemonic::Mov && i.op0_kind() == OpKind::Memory && i.memory_base() == Register::RSP)
            .map(|i| i.op1_register())
            .unwrap_or_else(|| panic!("no mov [rsp], reg in the thunk at {t:#x}"));
        let n = reg.number() as u8 & 15;
        let jmp: &[u8] = if n < 8 { &[0xff, 0xe0 | n, 0xcc] } else { &[0x41, 0xff, 0xe0 | (n - 8), 0xcc] };
        text[o..o + jmp.len()].copy_from_slice(jmp);
    }

    // Spin loops (`1: pause; jmp 1b`, halt loops): a random walk that enters
    // one never leaves, and the rest of that CPU's trace would be empty. The
    // jump that closes such a loop becomes `ud2`, which ends the walk's path.
    // (One pass finds these jumps and the HLTs below; a jump rewritten
    // keeps its length, so the pass after it would find the same HLTs.)
    let (mut jumps, mut halts): (Vec<(u64, u64, usize)>, Vec<u64>) = (Vec::new(), Vec::new());
    for i in Decoder::with_ip(64, &text, base, DecoderOptions::NONE).iter() {
        if i.flow_control() == FlowControl::UnconditionalBranch && i.op0_kind() != OpKind::Memory && i.near_branch_target() != 0 {
            jumps.push((i.ip(), i.near_branch_target(), i.len()));
        } else if i.mnemonic() == Mnemonic::Hlt {
            halts.push(i.ip());
        }
    }
    let mut spins = 0;
    for (ip, target, len) in jumps {
        if spins_back(&text, base, target, ip) {
            let o = at(ip).expect("in .text");
            text[o..o + len].fill(0xcc);
            text[o..o + 2].copy_from_slice(&[0x0f, 0x0b]);
            spins += 1;
        }
    }
    assert!(spins < 1000, "{spins} spin loops");

    // HLT waits for an interrupt: each becomes INT3, which ends a walk's
    // path with an interrupt to a random function. As HLT (to the walk an
    // instruction like any other) the idle loop, whose every branch leads
    // back into it, kept three of four CPUs for the rest of their trace.
    // (After the jumps: a loop closed through a HLT is a spin loop too.)
    for ip in &halts {
        text[at(*ip).expect("in .text")] = 0xcc;
    }
    assert!(halts.len() < 1000, "{} HLTs", halts.len());

    // Function entries: the `call __fentry__` sites.
    let mut targets: HashMap<u64, Vec<u64>> = HashMap::new();
    for o in memchr::memchr_iter(0xe8, &text[..text.len() - 4]) {
        let rel = i32::from_le_bytes(text[o + 1..o + 5].try_into().unwrap()) as i64;
        let site = base + o as u64;
        targets.entry(site.wrapping_add(5).wrapping_add(rel as u64)).or_default().push(site);
    }
    let (_, functions) = targets.into_iter().filter(|(t, _)| at(*t).is_some()).max_by_key(|(_, s)| s.len()).expect("direct calls");
    assert!(functions.len() > 10_000, "{} functions", functions.len());

    write_elf(out, base, &text, &functions);
    out.to_path_buf()
}

/// Whether the straight-line path from `from` (non-branch instructions and
/// direct jumps only) comes back to the jump at `jump` within 64 instructions.
fn spins_back(text: &[u8], base: u64, from: u64, jump: u64) -> bool {
    let mut ip = from;
    for _ in 0..64 {
        if ip == jump {
            return true;
        }
        let Some(o) = ip.checked_sub(base).map(|o| o as usize).filter(|&o| o < text.len()) else { return false };
        let i = Decoder::with_ip(64, &text[o..(o + 15).min(text.len())], ip, DecoderOptions::NONE).decode();
        ip = match i.flow_control() {
            FlowControl::Next if !i.is_invalid() => i.next_ip(),
            FlowControl::UnconditionalBranch if i.op0_kind() != OpKind::Memory => i.near_branch_target(),
            _ => return false,
        };
    }
    false
}

/// A minimal ELF64 executable: `text` at `base` in one R+X PT_LOAD, and a
/// symbol table with one function symbol (named `f`, size 1) per entry.
fn write_elf(out: &Path, base: u64, text: &[u8], functions: &[u64]) {
    const TEXT_AT: usize = 0x1000;
    let mut f = vec![0u8; TEXT_AT];
    f.extend_from_slice(text);
    let symtab_at = f.len().next_multiple_of(8);
    f.resize(symtab_at + 24, 0); // the null symbol
    for &addr in functions {
        let mut sym = [0u8; 24];
        sym[0..4].copy_from_slice(&1u32.to_le_bytes()); // name "f"
        sym[4] = 0x12; // STB_GLOBAL, STT_FUNC
        sym[6..8].copy_from_slice(&1u16.to_le_bytes()); // .text
        sym[8..16].copy_from_slice(&addr.to_le_bytes());
        sym[16..24].copy_from_slice(&1u64.to_le_bytes());
        f.extend_from_slice(&sym);
    }
    let strtab_at = f.len();
    f.extend_from_slice(b"\0f\0");
    let shstrtab_at = f.len();
    f.extend_from_slice(b"\0.text\0.symtab\0.strtab\0.shstrtab\0");
    let sh_at = f.len().next_multiple_of(8);
    f.resize(sh_at, 0);
    // (name, type, flags, addr, offset, size, link, info, align, entsize)
    type Shdr = (u32, u32, u64, u64, usize, usize, u32, u32, u64, u64);
    let shdrs: [Shdr; 5] = [
        (0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        (1, 1, 6, base, TEXT_AT, text.len(), 0, 0, 16, 0),
        (7, 2, 0, 0, symtab_at, strtab_at - symtab_at, 3, 1, 8, 24),
        (15, 3, 0, 0, strtab_at, 3, 0, 0, 1, 0),
        (23, 3, 0, 0, shstrtab_at, sh_at - shstrtab_at, 0, 0, 1, 0),
    ];
    for (name, ty, flags, addr, off, size, link, info, align, entsize) in shdrs {
        put32(&mut f, name);
        put32(&mut f, ty);
        put64(&mut f, flags);
        put64(&mut f, addr);
        put64(&mut f, off as u64);
        put64(&mut f, size as u64);
        put32(&mut f, link);
        put32(&mut f, info);
        put64(&mut f, align);
        put64(&mut f, entsize);
    }
    // ELF header and the one program header.
    let mut h = Vec::with_capacity(120);
    let header = elf::Header { e_type: elf::ET_EXEC, entry: 0, phnum: 1, shoff: sh_at as u64, shentsize: 64, shnum: 5, shstrndx: 4 };
    elf::put_header(&mut h, &header);
    let (offset, size) = (TEXT_AT as u64, text.len() as u64);
    elf::put_phdr(&mut h, &elf::Phdr { p_type: elf::PT_LOAD, flags: 5, offset, vaddr: base, paddr: base, filesz: size, memsz: size, align: 0x1000 });
    f[..h.len()].copy_from_slice(&h);
    let tmp = out.with_extension("tmp");
    std::fs::write(&tmp, &f).expect("write the walkable vmlinux");
    std::fs::rename(&tmp, out).expect("rename the walkable vmlinux");
}
