//! `classify_x86_64` against iced-x86's own decode (through the oracle's
//! mnemonic table and thunk map): every branch form, NOPs and traps, with
//! prefix combinations (REX, 0x66, 0x67, segments, notrack 0x3e, bnd 0xf2,
//! rep 0xf3, lock 0xf0), direct targets that hit the kernel thunks, truncated
//! encodings, and random bytes.

#[path = "oracle/x86.rs"]
mod oracle;

use std::collections::{BTreeMap, HashMap};

use isa::{classify_x86_64, BranchClass, DecodeError, KernelIdioms};
use oracle::Thunk;

const ADDR: u64 = 0xffff_ffff_8100_0000;
const RETURN_THUNK: u64 = 0xffff_ffff_8200_0000;
const INDIRECT_THUNK: u64 = 0xffff_ffff_8200_0040;

/// isa and the oracle, each with its own view of the same two thunks, and
/// what the comparisons found.
struct Compare {
    idioms: KernelIdioms,
    thunks: HashMap<u64, Thunk>,
    seen: BTreeMap<String, u64>,
    bad: Vec<String>,
}

impl Compare {
    fn new() -> Self {
        Compare {
            idioms: KernelIdioms::from_symbols([
                ("__x86_return_thunk", RETURN_THUNK),
                ("__x86_indirect_thunk_rax", INDIRECT_THUNK),
                ("schedule", ADDR),
            ]),
            thunks: HashMap::from([(RETURN_THUNK, Thunk::Return), (INDIRECT_THUNK, Thunk::Indirect)]),
            seen: BTreeMap::new(),
            bad: Vec::new(),
        }
    }

    /// Compares isa with the oracle on `bytes` at `addr`; counts outcomes.
    fn check(&mut self, addr: u64, bytes: &[u8]) {
        let ours = classify_x86_64(addr, bytes, &self.idioms);
        let theirs = oracle::classify(addr, bytes, &self.thunks);
        let key = match ours {
            Ok(insn) => insn.class.name().to_owned(),
            Err(e) => format!("{e:?}"),
        };
        *self.seen.entry(key).or_insert(0) += 1;
        if ours != theirs && self.bad.len() < 20 {
            self.bad.push(format!("{addr:#x} {bytes:02x?}: isa {ours:x?}, oracle {theirs:x?}"));
        }
    }

    /// Panics listing the disagreements, if any; returns the outcome counts.
    fn finish(self) -> BTreeMap<String, u64> {
        assert!(self.bad.is_empty(), "disagreements:\n{}", self.bad.join("\n"));
        eprintln!("{:?}", self.seen);
        self.seen
    }
}

/// Branch, NOP and trap forms without ModRM and without prefixes: opcode
/// bytes and their immediate or displacement, before any rel32 retargeting.
fn branch_forms() -> Vec<Vec<u8>> {
    let mut forms: Vec<Vec<u8>> = Vec::new();
    for disp8 in [0x00, 0x10, 0x80, 0xfe] {
        for op in (0x70..=0x7f).chain([0xe0, 0xe1, 0xe2, 0xe3, 0xeb]) {
            forms.push(vec![op, disp8]);
        }
    }
    for op in 0x80..=0x8f {
        forms.push(vec![0x0f, op, 0x10, 0, 0, 0]);
    }
    forms.push(vec![0xe8, 0x10, 0, 0, 0]);
    forms.push(vec![0xe9, 0xfb, 0xff, 0xff, 0xff]);
    // Returns, far transfers, traps.
    let fixed: &[&[u8]] = &[
        &[0xc3],
        &[0xc2, 0x08, 0x00],
        &[0xcb],
        &[0xca, 0x08, 0x00],
        &[0xcf],
        &[0xcc],
        &[0xcd, 0x80],
        &[0xf1],
        &[0xce],
        &[0x9a, 1, 2, 3, 4, 5, 6],
        &[0xea, 1, 2, 3, 4, 5, 6],
        &[0x0f, 0x05],
        &[0x0f, 0x07],
        &[0x0f, 0x34],
        &[0x0f, 0x35],
        &[0x0f, 0x0b],
        &[0x0f, 0xaa],
        &[0x0f, 0x01, 0xc1],
        &[0x0f, 0x01, 0xc2],
        &[0x0f, 0x01, 0xc3],
        &[0x0f, 0x01, 0xd8],
        &[0x0f, 0x01, 0xd9],
        &[0x0f, 0x01, 0xde],
        &[0x0f, 0x01, 0xd5],
        &[0xc7, 0xf8, 0x10, 0, 0, 0],
        &[0xc6, 0xf8, 0x01],
        &[0x90],
        &[0x0f, 0xff],
        &[0x2e, 0x2e, 0x2e, 0x31, 0xc0],
    ];
    forms.extend(fixed.iter().map(|f| f.to_vec()));
    forms
}

/// ModRM forms with every ModRM byte: FF (inc, dec, call, call far, jmp, jmp
/// far, push), UD0, UD1, and the 0F 18-1F NOP and hint space (0F 1E FA with
/// F3 is ENDBR64). A SIB byte and a 32-bit displacement follow, used or not.
fn modrm_forms() -> Vec<Vec<u8>> {
    let mut forms = Vec::new();
    for modrm in 0..=255u8 {
        for sib in [0x24, 0x25] {
            for opcode in [&[0xff][..], &[0x0f, 0xff], &[0x0f, 0xb9], &[0x0f, 0x1f], &[0x0f, 0x18], &[0x0f, 0x1e]] {
                let mut f = opcode.to_vec();
                f.extend([modrm, sib, 0x10, 0x20, 0x30, 0x40]);
                forms.push(f);
            }
        }
    }
    forms
}

/// Prefix sequences: every sequence of up to `max` legacy prefixes, each
/// followed by nothing or one REX byte.
fn prefixes(max: usize) -> Vec<Vec<u8>> {
    const LEGACY: [u8; 11] = [0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65, 0x66, 0x67, 0xf0, 0xf2, 0xf3];
    const REX: [Option<u8>; 6] = [None, Some(0x40), Some(0x41), Some(0x44), Some(0x48), Some(0x4f)];
    let mut legacy: Vec<Vec<u8>> = vec![vec![]];
    let mut last: Vec<Vec<u8>> = vec![vec![]];
    for _ in 0..max {
        last = last.iter().flat_map(|p| LEGACY.iter().map(move |&b| [p.as_slice(), &[b]].concat())).collect();
        legacy.extend(last.iter().cloned());
    }
    legacy.iter().flat_map(|p| REX.iter().map(move |r| [p.as_slice(), r.as_slice()].concat())).collect()
}

/// If `bytes` (prefixes + form) is a rel32 branch, variants whose target is
/// each thunk; the iced decode of the original tells the layout.
fn thunk_variants(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut decoder = iced_x86::Decoder::with_ip(64, bytes, ADDR, iced_x86::DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() || !insn.is_jcc_near() && !matches!(insn.code(), iced_x86::Code::Jmp_rel32_64 | iced_x86::Code::Call_rel32_64) {
        return Vec::new();
    }
    let end = ADDR + insn.len() as u64;
    [RETURN_THUNK, INDIRECT_THUNK]
        .iter()
        .map(|&thunk| {
            let mut v = bytes.to_vec();
            let rel = (thunk.wrapping_sub(end) as i64 as i32).to_le_bytes();
            v[insn.len() - 4..insn.len()].copy_from_slice(&rel);
            v
        })
        .collect()
}

fn run(max_prefixes: usize, forms: &[Vec<u8>]) -> BTreeMap<String, u64> {
    let mut compare = Compare::new();
    for prefix in prefixes(max_prefixes) {
        for form in forms {
            let bytes = [prefix.as_slice(), form].concat();
            compare.check(ADDR, &bytes);
            for variant in thunk_variants(&bytes) {
                compare.check(ADDR, &variant);
            }
        }
    }
    compare.finish()
}

#[test]
fn all_forms_with_up_to_one_prefix() {
    let forms = [branch_forms(), modrm_forms()].concat();
    let seen = run(1, &forms);
    for class in BranchClass::ALL {
        assert!(seen.contains_key(class.name()), "no {class:?}: {seen:?}");
    }
    assert!(seen.contains_key("Invalid"), "{seen:?}");
}

#[test]
fn branch_forms_with_up_to_three_prefixes() {
    run(3, &branch_forms());
}

#[test]
fn modrm_branch_forms_with_up_to_two_prefixes() {
    // call/jmp near and far through FF /2../5, every ModRM.
    let forms: Vec<Vec<u8>> = modrm_forms().into_iter().filter(|f| f[0] == 0xff && (2..=5).contains(&(f[1] >> 3 & 7))).collect();
    run(2, &forms);
}

#[test]
fn truncated_encodings_need_more_bytes() {
    let mut compare = Compare::new();
    for prefix in prefixes(1) {
        for form in branch_forms().into_iter().chain(modrm_forms().into_iter().step_by(7)) {
            let bytes = [prefix.as_slice(), &form].concat();
            let Ok(full) = classify_x86_64(ADDR, &bytes, &compare.idioms) else {
                continue;
            };
            for cut in 0..full.len as usize {
                let ours = classify_x86_64(ADDR, &bytes[..cut], &compare.idioms);
                assert_eq!(ours, Err(DecodeError::Truncated), "{:02x?}", &bytes[..cut]);
                compare.check(ADDR, &bytes[..cut]);
            }
        }
    }
    compare.finish();
}

#[test]
fn targets_wrap_around_the_address_space() {
    let mut compare = Compare::new();
    for addr in [u64::MAX - 1, 0, 0x7fff_ffff_ffff_fff0] {
        for form in &branch_forms() {
            compare.check(addr, form);
        }
    }
    compare.finish();
    let back = classify_x86_64(0, &[0xeb, 0xfe - 4], &KernelIdioms::default()).unwrap();
    assert_eq!(back.target, Some(u64::MAX - 3));
}

#[test]
fn random_bytes_agree() {
    let mut compare = Compare::new();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut bytes = [0u8; 16];
    for _ in 0..300_000 {
        for b in bytes.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let len = 1 + (x >> 60) as usize;
        compare.check(ADDR, &bytes[..len]);
    }
    compare.finish();
}

/// Every one-byte and 0x0f opcode with every ModRM byte (and, where a SIB
/// byte follows, each of `sibs`) after each of `prefix_sets`: covers the
/// length decoder of the fast path and its hand-over to iced.
fn opcode_maps(prefix_sets: &[Vec<u8>], sibs: &[u8]) -> BTreeMap<String, u64> {
    const TAIL: [u8; 10] = [0x80, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09];
    let mut compare = Compare::new();
    let opcodes = (0..=255u8).map(|op| vec![op]).chain((0..=255u8).map(|op| vec![0x0f, op]));
    for opcode in opcodes {
        for modrm in 0..=255u8 {
            let needs_sib = modrm >> 6 != 3 && modrm & 7 == 4;
            for &sib in if needs_sib { sibs } else { &sibs[..1] } {
                for prefix in prefix_sets {
                    let bytes = [prefix.as_slice(), &opcode, &[modrm, sib], &TAIL].concat();
                    compare.check(ADDR, &bytes);
                }
            }
        }
    }
    compare.finish()
}

#[test]
fn opcode_maps_with_common_prefixes() {
    let prefix_sets: Vec<Vec<u8>> =
        [&[][..], &[0x66], &[0x48], &[0x41], &[0x4c], &[0x65], &[0x66, 0x2e], &[0x3e, 0x48]].iter().map(|p| p.to_vec()).collect();
    let seen = opcode_maps(&prefix_sets, &[0x25, 0x24]);
    assert!(seen.values().sum::<u64>() > 1_000_000, "{seen:?}");
}

#[test]
#[ignore = "minutes: run with --release -- --ignored"]
fn opcode_maps_with_up_to_two_prefixes() {
    opcode_maps(&prefixes(2), &[0x25, 0x24, 0x05, 0xe5, 0x00]);
}
