//! `walk_to_branch` over real code against a naive walk that decodes one
//! instruction at a time with the oracles (a fresh iced-x86 decoder per
//! instruction, disarm64 per word): the same blocks, classes and targets
//! over every byte of
//!
//! * the `.text` of /usr/bin/perf (x86-64 user space, no idioms);
//! * the `.text` of a real Debian vmlinux (scripts/fetch-test-kernels.sh),
//!   with the return-thunk and retpoline idioms taken from the kernel's own
//!   `.return_sites` and `.retpoline_sites` tables, every one of whose sites
//!   must classify as a return or an indirect branch;
//! * the AArch64 code dumps of the OpenCSD snapshots (a Juno Linux kernel,
//!   gcc's cc1, uname and its vDSO).
//!
//! Blocks are walked back to back from the start of the code; after an
//! undecodable instruction both walks resume at the next byte (x86) or word.
//! Where CI is set, missing inputs fail the tests instead of skipping them.

#[path = "oracle/a64.rs"]
mod a64_oracle;
#[path = "oracle/x86.rs"]
mod x86_oracle;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use iced_x86::{Decoder, DecoderOptions, Mnemonic, OpKind, Register};
use isa::{walk_to_branch, Block, BranchClass, DecodeError, Isa, KernelIdioms, WalkError};
use object::{Object, ObjectSection};
use x86_oracle::Thunk;

fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// Skips (outside CI) or fails (in CI) a test whose input is missing.
fn missing(what: &str) {
    assert!(!in_ci(), "CI is set but {what}");
    eprintln!("SKIPPED: {what}");
}

/// An ELF file's sections by name: (address, bytes).
fn sections(path: &Path, names: &[&str]) -> HashMap<String, (u64, Vec<u8>)> {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = object::File::parse(&*data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    names
        .iter()
        .filter_map(|&name| {
            let section = file.section_by_name(name)?;
            let bytes = section.data().expect("section data").to_vec();
            Some((name.to_owned(), (section.address(), bytes)))
        })
        .collect()
}

/// The naive walk: one oracle decode per instruction, each from scratch.
fn naive_x86(addr: u64, code: &[u8], thunks: &HashMap<u64, Thunk>) -> Result<Block, WalkError> {
    let mut pos = 0usize;
    let mut non_branch_insns = 0u32;
    loop {
        let here = addr + pos as u64;
        match x86_oracle::classify(here, &code[pos..], thunks) {
            Err(DecodeError::Truncated) => return Err(WalkError::EndOfBuffer { addr: here, non_branch_insns }),
            Err(DecodeError::Invalid) => return Err(WalkError::Undecodable { addr: here, non_branch_insns }),
            Ok(insn) if insn.class.is_branch() => return Ok(Block { start: addr, non_branch_insns, branch_addr: here, branch: insn }),
            Ok(insn) => {
                non_branch_insns += 1;
                pos += usize::from(insn.len);
            }
        }
    }
}

fn naive_a64(addr: u64, code: &[u8]) -> Result<Block, WalkError> {
    let mut non_branch_insns = 0u32;
    for (i, w) in code.chunks_exact(4).enumerate() {
        let here = addr + 4 * i as u64;
        let (class, target) = a64_oracle::classify(here, u32::from_le_bytes(w.try_into().unwrap()));
        if class.is_branch() {
            let branch = isa::Insn { len: 4, class, target };
            return Ok(Block { start: addr, non_branch_insns, branch_addr: here, branch });
        }
        non_branch_insns += 1;
    }
    Err(WalkError::EndOfBuffer { addr: addr + (code.len() / 4 * 4) as u64, non_branch_insns })
}

/// What a back-to-back walk over some code found.
#[derive(Debug, Default)]
struct Walked {
    blocks: u64,
    insns: u64,
    undecodable: u64,
    classes: BTreeMap<&'static str, u64>,
}

/// Walks `code` at `base` block after block with `walk_to_branch` and with
/// `naive`, asserting the same result at every step.
fn compare(what: &str, isa: Isa, base: u64, code: &[u8], idioms: &KernelIdioms, naive: impl Fn(u64, &[u8]) -> Result<Block, WalkError>) -> Walked {
    let mut walked = Walked::default();
    let mut bad = Vec::new();
    let mut pos = 0usize;
    while pos < code.len() {
        let addr = base + pos as u64;
        let ours = walk_to_branch(isa, addr, &code[pos..], idioms);
        let theirs = naive(addr, &code[pos..]);
        if ours != theirs && bad.len() < 20 {
            bad.push(format!("{addr:#x}: walk {ours:x?}\n    naive {theirs:x?}"));
        }
        match ours {
            Ok(block) => {
                walked.blocks += 1;
                walked.insns += u64::from(block.non_branch_insns) + 1;
                *walked.classes.entry(block.branch.class.name()).or_insert(0) += 1;
                pos = (block.branch_addr - base) as usize + usize::from(block.branch.len);
            }
            Err(WalkError::Undecodable { addr, non_branch_insns }) => {
                walked.undecodable += 1;
                walked.insns += u64::from(non_branch_insns);
                let step = if isa == Isa::A64 { 4 } else { 1 };
                pos = (addr - base) as usize + step;
            }
            Err(WalkError::EndOfBuffer { non_branch_insns, .. }) => {
                walked.insns += u64::from(non_branch_insns);
                break;
            }
            Err(e @ WalkError::Unsupported(_)) => panic!("{e}"),
        }
    }
    assert!(bad.is_empty(), "{what}: walk and naive walk disagree:\n{}", bad.join("\n"));
    eprintln!("{what}: {} bytes, {walked:?}", code.len());
    walked
}

#[test]
fn perf_text_x86_64() {
    let perf = Path::new("/usr/bin/perf");
    if !perf.exists() {
        return missing("/usr/bin/perf does not exist (scripts/setup.sh --tests installs linux-perf)");
    }
    let secs = sections(perf, &[".text"]);
    let (base, text) = &secs[".text"];
    let walked = compare("perf .text", Isa::X86_64, *base, text, &KernelIdioms::default(), |a, c| naive_x86(a, c, &HashMap::new()));
    assert!(walked.blocks > 100_000, "{walked:?}");
}

/// scripts/fetch-test-kernels.sh: the cached or freshly fetched vmlinux.
fn fetch_vmlinux() -> Option<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fetch-test-kernels.sh");
    let out = Command::new("bash").arg(&script).output();
    match out {
        Ok(out) if out.status.success() => {
            let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            Some(Path::new(&dir).join("vmlinux-x86_64"))
        }
        Ok(out) => {
            missing(&format!("{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr)));
            None
        }
        Err(e) => {
            missing(&format!("{} did not run: {e}", script.display()));
            None
        }
    }
}

/// The sites listed in a kernel table of `s32` offsets relative to each entry
/// (`.return_sites`, `.retpoline_sites`).
fn sites((addr, table): &(u64, Vec<u8>)) -> Vec<u64> {
    table
        .chunks_exact(4)
        .enumerate()
        .map(|(i, rel)| {
            let rel = i32::from_le_bytes(rel.try_into().unwrap());
            (addr + 4 * i as u64).wrapping_add_signed(i64::from(rel))
        })
        .collect()
}

/// The bytes at `addr` in whichever of the code sections holds it.
fn code_at<'a>(code: &[&'a (u64, Vec<u8>)], addr: u64) -> &'a [u8] {
    code.iter()
        .find_map(|(base, bytes)| {
            let off = addr.checked_sub(*base)? as usize;
            bytes.get(off..)
        })
        .unwrap_or_else(|| panic!("{addr:#x} is in no code section"))
}

fn decode(addr: u64, bytes: &[u8]) -> iced_x86::Instruction {
    Decoder::with_ip(64, &bytes[..bytes.len().min(15)], addr, DecoderOptions::NONE).decode()
}

/// The register a retpoline thunk branches through: the `mov [rsp], reg` of
/// its body (the thunk's code before boot-time patching).
fn thunk_register(addr: u64, bytes: &[u8]) -> Register {
    let mut decoder = Decoder::with_ip(64, &bytes[..32], addr, DecoderOptions::NONE);
    decoder
        .iter()
        .find(|i| i.mnemonic() == Mnemonic::Mov && i.op0_kind() == OpKind::Memory && i.memory_base() == Register::RSP)
        .map(|i| i.op1_register())
        .unwrap_or_else(|| panic!("no mov [rsp], reg in the thunk at {addr:#x}"))
}

#[test]
fn vmlinux_text_x86_64_with_kernel_idioms() {
    let Some(vmlinux) = fetch_vmlinux() else {
        return;
    };
    let names = [".text", ".init.text", ".altinstr_aux", ".exit.text", ".return_sites", ".retpoline_sites"];
    let secs = sections(&vmlinux, &names);
    let code: Vec<&(u64, Vec<u8>)> = [".text", ".init.text", ".altinstr_aux", ".exit.text"].iter().filter_map(|n| secs.get(*n)).collect();
    let return_sites = sites(&secs[".return_sites"]);
    let retpoline_sites = sites(&secs[".retpoline_sites"]);

    // The thunks, found as the targets of the sites.
    let return_thunks: BTreeSet<u64> = return_sites.iter().map(|&s| decode(s, code_at(&code, s)).near_branch_target()).collect();
    assert_eq!(return_thunks.len(), 1, "return thunks {return_thunks:x?}");
    let indirect_thunks: BTreeSet<u64> = retpoline_sites.iter().map(|&s| decode(s, code_at(&code, s)).near_branch_target()).collect();
    let mut symbols: Vec<(String, u64)> = vec![("__x86_return_thunk".into(), *return_thunks.first().unwrap())];
    for &thunk in &indirect_thunks {
        let reg = format!("{:?}", thunk_register(thunk, code_at(&code, thunk))).to_lowercase();
        symbols.push((format!("__x86_indirect_thunk_{reg}"), thunk));
    }
    assert!(indirect_thunks.len() >= 10, "{symbols:x?}");
    eprintln!("thunks from the site tables: {symbols:x?}");
    let idioms = KernelIdioms::from_symbols(symbols.iter().map(|(n, a)| (n.as_str(), *a)));
    assert_eq!(idioms.len(), symbols.len());
    let mut thunks: HashMap<u64, Thunk> = indirect_thunks.iter().map(|&t| (t, Thunk::Indirect)).collect();
    thunks.extend(return_thunks.iter().map(|&t| (t, Thunk::Return)));

    // Every site is the idiom: a JMP to the return thunk is a return, a CALL
    // or JMP to a retpoline an indirect call or jump (a Jcc stays conditional).
    let mut site_classes: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for (table, list) in [("return", &return_sites), ("retpoline", &retpoline_sites)] {
        for &site in list {
            let insn = isa::classify_x86_64(site, code_at(&code, site), &idioms).expect("site decodes");
            let expected: &[BranchClass] = match table {
                "return" => &[BranchClass::Return, BranchClass::CondBranch],
                _ => &[BranchClass::IndirectCall, BranchClass::IndirectJump, BranchClass::CondBranch],
            };
            assert!(expected.contains(&insn.class), "{table} site {site:#x}: {insn:x?}");
            *site_classes.entry((table, insn.class.name())).or_insert(0) += 1;
        }
    }
    eprintln!("sites: {site_classes:?}");
    assert!(site_classes[&("return", "return")] > 10_000, "{site_classes:?}");
    assert!(site_classes[&("retpoline", "indirect-call")] > 1_000, "{site_classes:?}");

    let (base, text) = &secs[".text"];
    let walked = compare("vmlinux .text", Isa::X86_64, *base, text, &idioms, |a, c| naive_x86(a, c, &thunks));
    assert!(walked.blocks > 1_000_000, "{walked:?}");
    assert!(walked.classes["return"] > 10_000, "{walked:?}");
}

#[test]
fn opencsd_dumps_aarch64() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/opencsd-snapshots");
    // (file, load address), from each snapshot's device .ini.
    let dumps = [
        ("juno_r1_1/kernel_dump.bin", 0xffff_ffc0_0008_1000u64),
        ("bugfix-exact-match/cc1.text_dump.bin", 0x40_0200),
        ("juno-uname-001/uname.bin", 0x40_0000),
        ("juno-uname-001/vdso.bin", 0x7f_9d88_7000),
        ("a57_single_step/mem_Cortex-A57_0.bin", 0xfffe_b448),
    ];
    let mut total = Walked::default();
    for (file, base) in dumps {
        let path = root.join(file);
        let Ok(code) = std::fs::read(&path) else {
            return missing(&format!("{} is missing", path.display()));
        };
        let walked = compare(file, Isa::A64, base, &code, &KernelIdioms::default(), naive_a64);
        total.blocks += walked.blocks;
        for (class, n) in walked.classes {
            *total.classes.entry(class).or_insert(0) += n;
        }
    }
    assert!(total.blocks > 100_000, "{total:?}");
    for class in ["cond-branch", "direct-jump", "direct-call", "indirect-call", "return", "far-transfer", "trap"] {
        assert!(total.classes.contains_key(class), "no {class}: {total:?}");
    }
}
