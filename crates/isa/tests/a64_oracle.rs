//! `classify_aarch64` against the disarm64 disassembler: every branch,
//! exception-generating and hint encoding space, and random words. Class and
//! target must agree on every word.
//!
//! The default tests sweep each space with a stride and take 4M random words
//! (seconds in a debug build). The full sweep, every word of every
//! space and 100M random words, is ignored by default:
//! `cargo test --release -p isa --test a64_oracle -- --ignored`.

#[path = "oracle/a64.rs"]
mod oracle;

use std::collections::BTreeMap;

use isa::{classify_aarch64, BranchClass};

const ADDR: u64 = 0xffff_8000_8001_0000;

/// Top bytes of the spaces that hold branches, plus neighbours: B, BL,
/// B.cond/BC.cond (0x54) and the unallocated 0x55, CBZ/CBNZ, TBZ/TBNZ,
/// CB<cc> (FEAT_CMPBR), exception generation (0xd4), hints and system
/// (0xd5), branch register (0xd6, 0xd7), UDF (0x00).
const SPACES: [u32; 27] = [
    0x14, 0x15, 0x16, 0x17, 0x94, 0x95, 0x96, 0x97, 0x54, 0x55, 0x34, 0x35, 0xb4, 0xb5, 0x36, 0x37, 0xb6, 0xb7, 0x74, 0x75, 0xf4, 0xf5, 0xd4, 0xd5,
    0xd6, 0xd7, 0x00,
];

/// Compares one word; returns a description of the disagreement, if any.
fn disagreement(word: u32) -> Option<String> {
    let ours = classify_aarch64(ADDR, word);
    let theirs = oracle::classify(ADDR, word);
    (ours.len != 4 || (ours.class, ours.target) != theirs)
        .then(|| format!("{word:#010x}: isa {:?} {:x?}, disarm64 {:?} {:x?}", ours.class, ours.target, theirs.0, theirs.1))
}

/// Checks every word of `words`; panics listing the first disagreements.
/// Returns how many words of each class were checked.
fn check(what: &str, words: impl Iterator<Item = u32>) -> BTreeMap<&'static str, u64> {
    let mut classes = BTreeMap::new();
    let mut bad = Vec::new();
    for word in words {
        *classes.entry(classify_aarch64(ADDR, word).class.name()).or_insert(0) += 1;
        if let Some(d) = disagreement(word) {
            bad.push(d);
        }
    }
    let checked: u64 = classes.values().sum();
    assert!(bad.is_empty(), "{what}: {} disagreements in {checked} words, first:\n{}", bad.len(), bad[..bad.len().min(20)].join("\n"));
    eprintln!("{what}: {checked} words agree: {classes:?}");
    classes
}

/// Sweeps every space with `stride`; returns the words checked per class.
fn sweep_spaces(stride: usize) -> BTreeMap<&'static str, u64> {
    let words = SPACES.iter().flat_map(|&top| (0..1u32 << 24).step_by(stride).map(move |low| top << 24 | low));
    check(&format!("branch spaces, stride {stride}"), words)
}

/// Asserts that each of `classes` occurred, so the oracle is not vacuous.
fn assert_seen(seen: &BTreeMap<&'static str, u64>, classes: &[BranchClass]) {
    for class in classes {
        assert!(seen.contains_key(class.name()), "no {class:?} among {seen:?}");
    }
}

fn total(classes: &BTreeMap<&'static str, u64>) -> u64 {
    classes.values().sum()
}

/// xorshift32: deterministic words spread over the whole encoding space.
fn random_words(n: usize) -> impl Iterator<Item = u32> {
    let mut x = 0x9e37_79b9u32;
    (0..n).map(move |_| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    })
}

#[test]
fn branch_spaces_strided() {
    // An odd stride walks every bit pattern of the low bits over the sweep.
    let seen = sweep_spaces(251);
    assert!(total(&seen) > 1_700_000, "{seen:?}");
    use BranchClass::*;
    assert_seen(&seen, &[None, CondBranch, DirectJump, DirectCall, IndirectJump, IndirectCall, FarTransfer, Trap]);
}

#[test]
fn branch_register_space_fields() {
    // opc (24:21), op2 (20:16, near its only allocated value 11111), op3
    // (15:10) and op4 (4:0), with Rn (9:5) x0, x30 and the 11111 of ERET/RETAA.
    let words = (0..1u32 << 11).flat_map(|top| {
        let opc = top >> 7;
        let op2 = [0x1f, 0x1e, 0x0f, 0x00][(top >> 5) as usize & 3];
        let op4 = top & 0x1f;
        (0..64u32).flat_map(move |op3| [0u32, 30, 31].map(|rn| 0xd600_0000 | opc << 21 | op2 << 16 | op3 << 10 | rn << 5 | op4))
    });
    let seen = check("branch register", words);
    assert_eq!(total(&seen), (1 << 11) * 64 * 3);
    use BranchClass::*;
    assert_seen(&seen, &[None, IndirectJump, IndirectCall, Return, FarTransfer]);
}

#[test]
fn exception_and_hint_spaces_fields() {
    // Exception generation: opc (23:21), op2 (4:2), LL (1:0), a few imm16.
    let exceptions = (0..256u32).flat_map(|f| {
        let (opc, op2_ll) = (f >> 5, f & 0x1f);
        [0u32, 1, 0x8000, 0xffff].map(move |imm| 0xd400_0000 | opc << 21 | imm << 5 | op2_ll)
    });
    let seen = check("exception generation", exceptions);
    assert_seen(&seen, &[BranchClass::FarTransfer, BranchClass::Trap]);
    // The whole HINT space and its neighbours (CRn 0010..0011, any CRm, op2, Rt).
    let seen = check("hints", (0..0x2000u32).map(|low| 0xd503_2000 | low));
    assert_eq!(seen[BranchClass::Nop.name()], 128);
}

#[test]
fn random_words_agree() {
    assert_eq!(total(&check("random", random_words(4_000_000))), 4_000_000);
}

#[test]
#[ignore = "minutes: run with --release -- --ignored"]
fn full_sweep_and_100m_random_words() {
    let seen = sweep_spaces(1);
    assert_eq!(total(&seen), SPACES.len() as u64 * (1 << 24));
    check("random", random_words(100_000_000));
}
