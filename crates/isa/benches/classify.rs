//! Classification speed on real code, against the decoders underneath in the
//! same run: raw iced-x86 decoding (x86-64) and disarm64 (AArch64).
//!
//! `cargo bench -p isa --bench classify` (docs/PERFORMANCE.md has numbers).
//! Inputs: the `.text` of /usr/bin/perf, the `.text` of the Debian vmlinux
//! that scripts/fetch-test-kernels.sh caches (run it first), and gcc's cc1
//! from the OpenCSD snapshot `bugfix-exact-match` (AArch64).
//!
//! Per input: `oracle` decodes every instruction once, linearly; `classify`
//! calls `classify_x86_64`/`classify_aarch64` per instruction; `walk` calls
//! `walk_to_branch` block after block. The items counted are instructions,
//! except for `walk`, which counts blocks; bytes are the whole input.

use std::path::Path;
use std::sync::OnceLock;

use divan::counter::{BytesCount, ItemsCount};
use divan::{black_box, Bencher};
use isa::{classify_aarch64, classify_x86_64, walk_to_branch, Isa, KernelIdioms, WalkError};
use object::{Object, ObjectSection};

fn main() {
    divan::main();
}

/// Code at an address, with its instruction and block counts.
struct Input {
    isa: Isa,
    base: u64,
    code: Vec<u8>,
    insns: usize,
    blocks: usize,
}

impl Input {
    fn new(isa: Isa, base: u64, code: Vec<u8>) -> Self {
        let mut input = Input { isa, base, code, insns: 0, blocks: 0 };
        input.blocks = walk_all(&input);
        input.insns = match isa {
            Isa::X86_64 => classify_all(&input),
            _ => input.code.len() / 4,
        };
        input
    }
}

fn elf_text(path: &Path) -> (u64, Vec<u8>) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = object::File::parse(&*data).expect("ELF");
    let text = file.section_by_name(".text").expect(".text");
    (text.address(), text.data().expect(".text data").to_vec())
}

fn perf() -> &'static Input {
    static INPUT: OnceLock<Input> = OnceLock::new();
    INPUT.get_or_init(|| {
        let (base, code) = elf_text(Path::new("/usr/bin/perf"));
        Input::new(Isa::X86_64, base, code)
    })
}

fn vmlinux() -> &'static Input {
    static INPUT: OnceLock<Input> = OnceLock::new();
    INPUT.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fetch-test-kernels.sh");
        let out = std::process::Command::new("bash").arg(script).output().expect("bash");
        assert!(out.status.success(), "fetch-test-kernels.sh failed");
        let dir = String::from_utf8(out.stdout).expect("UTF-8 path");
        let (base, code) = elf_text(&Path::new(dir.trim()).join("vmlinux-x86_64"));
        Input::new(Isa::X86_64, base, code)
    })
}

fn cc1() -> &'static Input {
    static INPUT: OnceLock<Input> = OnceLock::new();
    INPUT.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/opencsd-snapshots/bugfix-exact-match/cc1.text_dump.bin");
        let code = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Input::new(Isa::A64, 0x40_0200, code)
    })
}

/// Walks the whole input block after block; returns the number of blocks.
fn walk_all(input: &Input) -> usize {
    let idioms = KernelIdioms::default();
    let step = if input.isa == Isa::A64 { 4 } else { 1 };
    let (mut pos, mut blocks) = (0usize, 0usize);
    while pos < input.code.len() {
        let addr = input.base + pos as u64;
        match walk_to_branch(input.isa, addr, &input.code[pos..], &idioms) {
            Ok(block) => {
                blocks += 1;
                pos = (block.branch_addr - input.base) as usize + usize::from(block.branch.len);
            }
            Err(WalkError::Undecodable { addr, .. }) => pos = (addr - input.base) as usize + step,
            Err(_) => break,
        }
    }
    blocks
}

/// Classifies every x86 instruction; returns how many there were.
fn classify_all(input: &Input) -> usize {
    let idioms = KernelIdioms::default();
    let (mut pos, mut insns) = (0usize, 0usize);
    while pos < input.code.len() {
        let addr = input.base + pos as u64;
        match classify_x86_64(addr, &input.code[pos..], &idioms) {
            Ok(insn) => {
                insns += 1;
                pos += usize::from(insn.len);
            }
            Err(_) => pos += 1,
        }
    }
    insns
}

/// iced-x86 decoding every instruction with one decoder, nothing else.
fn iced_all(input: &Input) -> usize {
    use iced_x86::{Decoder, DecoderOptions, Instruction};
    let mut decoder = Decoder::with_ip(64, &input.code, input.base, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    let mut insns = 0usize;
    while decoder.can_decode() {
        decoder.decode_out(&mut insn);
        insns += usize::from(!insn.is_invalid());
        black_box(&insn);
    }
    insns
}

fn x86_bench(bencher: Bencher, input: &Input, what: &str) {
    let bencher = bencher.counter(BytesCount::new(input.code.len()));
    match what {
        "oracle" => bencher.counter(ItemsCount::new(input.insns)).bench(|| iced_all(black_box(input))),
        "classify" => bencher.counter(ItemsCount::new(input.insns)).bench(|| classify_all(black_box(input))),
        _ => bencher.counter(ItemsCount::new(input.blocks)).bench(|| walk_all(black_box(input))),
    };
}

#[divan::bench(args = ["oracle", "classify", "walk"], sample_count = 20)]
fn x86_perf_text(bencher: Bencher, what: &str) {
    x86_bench(bencher, perf(), what);
}

#[divan::bench(args = ["oracle", "classify", "walk"], sample_count = 10)]
fn x86_vmlinux_text(bencher: Bencher, what: &str) {
    x86_bench(bencher, vmlinux(), what);
}

#[divan::bench(args = ["oracle", "classify", "walk"], sample_count = 20)]
fn a64_cc1_text(bencher: Bencher, what: &str) {
    let input = cc1();
    let words = || input.code.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    let bencher = bencher.counter(BytesCount::new(input.code.len()));
    match what {
        "oracle" => {
            bencher.counter(ItemsCount::new(input.insns)).bench(|| words().filter(|&w| disarm64::decoder::decode(black_box(w)).is_some()).count())
        }
        "classify" => bencher.counter(ItemsCount::new(input.insns)).bench(|| {
            words()
                .enumerate()
                .filter(|&(i, w)| {
                    let addr = input.base + 4 * i as u64;
                    classify_aarch64(addr, black_box(w)).class.is_branch()
                })
                .count()
        }),
        _ => bencher.counter(ItemsCount::new(input.blocks)).bench(|| walk_all(black_box(input))),
    };
}
