//! Poke kinds from real kernel byte patterns, in both directions.

use isa::{classify_poke, describe_poke, Arch, PokeKind};

const ADDR: u64 = 0xffff_ffff_8100_0000;
const A64: u64 = 0xffff_8000_8001_0000;

const NOP5: &[u8] = &[0x0f, 0x1f, 0x44, 0x00, 0x00]; // x86_nops[5], 64-bit
const NOP5_OLD: &[u8] = &[0x66, 0x66, 0x66, 0x66, 0x90]; // pre-4.x kernels
const NOP6: &[u8] = &[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00];
const NOP2: &[u8] = &[0x66, 0x90];
const JMP32: &[u8] = &[0xe9, 0x62, 0x45, 0x23, 0x00]; // jmp 0xffffffff81234567
const JMP32_B: &[u8] = &[0xe9, 0xfb, 0xff, 0x0f, 0x00]; // jmp 0xffffffff81100000
const JMP8: &[u8] = &[0xeb, 0x10];
const CALL: &[u8] = &[0xe8, 0xfb, 0xff, 0xdf, 0x00]; // call 0xffffffff81e00000
const CALL_B: &[u8] = &[0xe8, 0xfb, 0xef, 0xff, 0xff]; // call 0xffffffff80fff000
const RET_PAD: &[u8] = &[0xc3, 0xcc, 0xcc, 0xcc, 0xcc]; // static_call ARCH_RET
const XOR5RAX: &[u8] = &[0x2e, 0x2e, 0x2e, 0x31, 0xc0];
const JNE32: &[u8] = &[0x0f, 0x85, 0xfa, 0xff, 0x0f, 0x00];
const JE32: &[u8] = &[0x0f, 0x84, 0xfa, 0xff, 0x0f, 0x00];
const RET_JNE32: &[u8] = &[0x0f, 0x85, 0x00, 0x10, 0x00, 0x00];
/// push rbp; mov rbp, rsp; push r15 (first 5 bytes), and the same with a kprobe armed.
const PROLOGUE: &[u8] = &[0x55, 0x48, 0x89, 0xe5, 0x41];
const PROLOGUE_INT3: &[u8] = &[0xcc, 0x48, 0x89, 0xe5, 0x41];

fn x86(old: &[u8], new: &[u8], sym: Option<&str>) -> PokeKind {
    classify_poke(Arch::X86_64, ADDR, old, new, sym)
}

/// Asserts `kind` for old -> new and for new -> old.
#[track_caller]
fn both_ways(old: &[u8], new: &[u8], sym: Option<&str>, kind: PokeKind) {
    assert_eq!(x86(old, new, sym), kind, "{old:02x?} -> {new:02x?}");
    assert_eq!(x86(new, old, sym), kind, "{new:02x?} -> {old:02x?}");
}

#[test]
fn x86_jump_label() {
    both_ways(NOP5, JMP32, None, PokeKind::JumpLabel);
    both_ways(NOP2, JMP8, None, PokeKind::JumpLabel);
    both_ways(NOP5_OLD, JMP32, None, PokeKind::JumpLabel);
    both_ways(NOP6, JMP32, Some("schedule"), PokeKind::JumpLabel);
}

#[test]
fn x86_ftrace() {
    both_ways(NOP5, CALL, Some("vfs_read"), PokeKind::Ftrace);
    both_ways(CALL, CALL_B, None, PokeKind::Ftrace);
}

#[test]
fn x86_static_call() {
    let tramp = Some("__SCT__tp_func_sched_switch");
    both_ways(JMP32, JMP32_B, tramp, PokeKind::StaticCall);
    both_ways(JMP32, RET_PAD, tramp, PokeKind::StaticCall);
    both_ways(CALL, CALL_B, Some("__SCT__preempt_schedule"), PokeKind::StaticCall);
    // JMP <-> RET and the inline return0 are static calls without a symbol too.
    both_ways(JMP32, RET_PAD, None, PokeKind::StaticCall);
    both_ways(JMP32, &[0xc3], None, PokeKind::StaticCall);
    both_ways(CALL, XOR5RAX, None, PokeKind::StaticCall);
    // Without the trampoline symbol, JMP <-> JMP is nothing known.
    both_ways(JMP32, JMP32_B, None, PokeKind::Other);
}

#[test]
fn x86_kprobe() {
    both_ways(&[0x55], &[0xcc], Some("do_sys_open"), PokeKind::Kprobe);
    // Only the first byte of a longer instruction is replaced.
    both_ways(&[0x48], &[0xcc], None, PokeKind::Kprobe);
    both_ways(&[0x0f], &[0xcc], None, PokeKind::Kprobe);
    both_ways(&[0xe8], &[0xcc], None, PokeKind::Kprobe);
    // INT3 on both sides is not a kprobe transition.
    assert_eq!(x86(&[0xcc], &[0xcc], None), PokeKind::Other);
}

#[test]
fn x86_optprobe() {
    // What text_poke_bp records: INT3 of the armed kprobe + original tail <-> JMP32.
    both_ways(PROLOGUE_INT3, JMP32, None, PokeKind::Optprobe);
    // A JMP32 laid straight over several instructions, or over one long one.
    both_ways(PROLOGUE, JMP32, None, PokeKind::Optprobe);
    both_ways(&[0xb8, 0x01, 0x00, 0x00, 0x00], JMP32, None, PokeKind::Optprobe);
    // A NOP followed by more code is ordinary code, not a jump-label NOP.
    both_ways(&[0x90, 0x55, 0x48, 0x89, 0xe5], JMP32, None, PokeKind::Optprobe);
}

#[test]
fn x86_jcc_rel32() {
    both_ways(JNE32, JE32, None, PokeKind::JccRel32);
    // static_call at a conditional tail-call site: Jcc to a function <-> Jcc to the return stub.
    both_ways(JNE32, RET_JNE32, Some("sched_tick"), PokeKind::JccRel32);
}

#[test]
fn trampolines_created_and_removed() {
    let code = [0x55, 0x48, 0x89, 0xe5, 0xe8, 0x00, 0x00, 0x00, 0x00, 0x5d, 0xc3];
    for arch in [Arch::X86_64, Arch::Aarch64] {
        assert_eq!(classify_poke(arch, ADDR, &[], &code, None), PokeKind::TrampolineCreated);
        assert_eq!(classify_poke(arch, ADDR, &code, &[], None), PokeKind::TrampolineRemoved);
        assert_eq!(classify_poke(arch, ADDR, &[], &[], None), PokeKind::Other);
    }
}

#[test]
fn x86_truncated_and_garbage_are_other() {
    both_ways(&[0x0f, 0x1f, 0x44], &[0xe9, 0x00], None, PokeKind::Other);
    both_ways(&[0x06, 0x07], &[0x06, 0x06], None, PokeKind::Other);
    // A truncated JMP32 over undecodable bytes is no optprobe.
    both_ways(&[0x06, 0x00, 0x00, 0x00, 0x00], JMP32, None, PokeKind::Other);
    both_ways(&[0x90], &[0x90], None, PokeKind::Other);
    // `lea esi, [rsi]` is a NOP only in 32-bit mode.
    both_ways(&[0x3e, 0x8d, 0x74, 0x26, 0x00], CALL, None, PokeKind::Other);
}

fn word(w: u32) -> [u8; 4] {
    w.to_le_bytes()
}

#[track_caller]
fn a64_both_ways(old: u32, new: u32, sym: Option<&str>, kind: PokeKind) {
    assert_eq!(classify_poke(Arch::Aarch64, A64, &word(old), &word(new), sym), kind, "{old:#x} -> {new:#x}");
    assert_eq!(classify_poke(Arch::Aarch64, A64, &word(new), &word(old), sym), kind, "{new:#x} -> {old:#x}");
}

const A64_NOP: u32 = 0xd503_201f;
const A64_B: u32 = 0x1400_0400;
const A64_BL: u32 = 0x9400_1000;
const A64_BL_B: u32 = 0x97ff_fffe;
const A64_BRK_KPROBE: u32 = 0xd420_0080;
const A64_RET: u32 = 0xd65f_03c0;
const A64_STP: u32 = 0xa9bf_7bfd;

#[test]
fn aarch64_kinds() {
    a64_both_ways(A64_NOP, A64_B, None, PokeKind::JumpLabel);
    a64_both_ways(A64_NOP, A64_BL, None, PokeKind::Ftrace);
    a64_both_ways(A64_BL, A64_BL_B, None, PokeKind::Ftrace);
    a64_both_ways(A64_STP, A64_BRK_KPROBE, None, PokeKind::Kprobe);
    a64_both_ways(A64_NOP, A64_BRK_KPROBE, Some("__SCT__x"), PokeKind::Kprobe);
    a64_both_ways(A64_B, A64_RET, Some("__SCT__might_resched"), PokeKind::StaticCall);
    a64_both_ways(A64_B, A64_RET, None, PokeKind::Other);
    a64_both_ways(A64_B, 0x1400_0001, None, PokeKind::Other);
    a64_both_ways(A64_BRK_KPROBE, A64_BRK_KPROBE, None, PokeKind::Other);
}

#[test]
fn aarch64_needs_exactly_one_word_per_side() {
    let two_nops = [word(A64_NOP), word(A64_NOP)].concat();
    assert_eq!(classify_poke(Arch::Aarch64, A64, &two_nops, &word(A64_B), None), PokeKind::Other);
    assert_eq!(classify_poke(Arch::Aarch64, A64, &[0x1f, 0x20], &word(A64_B), None), PokeKind::Other);
}

#[test]
fn names_are_stable_kebab_case() {
    let all = [
        (PokeKind::TrampolineCreated, "trampoline-created"),
        (PokeKind::TrampolineRemoved, "trampoline-removed"),
        (PokeKind::Optprobe, "optprobe"),
        (PokeKind::Kprobe, "kprobe"),
        (PokeKind::JccRel32, "jcc-rel32"),
        (PokeKind::StaticCall, "static-call"),
        (PokeKind::JumpLabel, "jump-label"),
        (PokeKind::Ftrace, "ftrace"),
        (PokeKind::Other, "other"),
    ];
    for (kind, name) in all {
        assert_eq!(kind.name(), name);
        assert_eq!(kind.to_string(), name);
    }
}

#[test]
fn descriptions() {
    let d = |old: &[u8], new: &[u8]| describe_poke(Arch::X86_64, ADDR, old, new, None);
    assert_eq!(d(NOP5, JMP32), "jump-label: nop5 -> jmp 0xffffffff81234567");
    assert_eq!(d(CALL, NOP5), "ftrace: call 0xffffffff81e00000 -> nop5");
    assert_eq!(d(JMP32, RET_PAD), "static-call: jmp 0xffffffff81234567 -> ret; int3; int3; int3; int3");
    assert_eq!(d(&[0x55], &[0xcc]), "kprobe: push rbp -> int3");
    assert_eq!(d(&[], &[0x90; 64]), "trampoline-created: 64 bytes");
    assert_eq!(d(&[0xc3; 3], &[]), "trampoline-removed: 3 bytes");
    assert_eq!(d(&[], &[]), "other: (none) -> (none)");
    assert_eq!(describe_poke(Arch::Aarch64, A64, &word(A64_NOP), &word(A64_BRK_KPROBE), None), "kprobe: nop -> brk #0x4");
}

/// The pokes of a Debian 6.1 kernel listed in issue 7, in the direction the
/// kernel recorded them and the other way.
#[test]
fn debian_6_1_kernel_examples() {
    let cases: &[(&str, &[u8], &[u8], PokeKind)] = &[
        // sysctl_schedstats+0x41: a 5-byte jump label turned off.
        ("sysctl_schedstats", &[0xe9, 0xa8, 0x00, 0x00, 0x00], NOP5, PokeKind::JumpLabel),
        // do_sched_yield+0x59: a 2-byte jump label turned on.
        ("do_sched_yield", &[0x66, 0x90], &[0xeb, 0x42], PokeKind::JumpLabel),
        // A static call trampoline retargeted.
        ("__SCT__tp_func_sched_switch", &[0xe9, 0x53, 0x9b, 0x2c, 0xff], &[0xe9, 0x63, 0xc7, 0x2c, 0xff], PokeKind::StaticCall),
        // do_sys_openat2+0x5: a kprobe armed on `push r12` (41 54).
        ("do_sys_openat2", &[0x41], &[0xcc], PokeKind::Kprobe),
        // The same kprobe optimized: INT3 + original tail -> JMP32.
        ("do_sys_openat2", &[0xcc, 0x54, 0x49, 0x89, 0xf4], &[0xe9, 0xa6, 0x5c, 0xb4, 0x34], PokeKind::Optprobe),
    ];
    for &(sym, old, new, kind) in cases {
        both_ways(old, new, Some(sym), kind);
    }
    // Out-of-line code created under the KSYMBOLs that announce it.
    let slot = [0xcc; 16];
    for sym in ["kprobe_insn_page", "kprobe_optinsn_page", "ftrace_trampoline"] {
        assert_eq!(x86(&[], &slot, Some(sym)), PokeKind::TrampolineCreated, "{sym}");
        assert_eq!(x86(&slot, &[], Some(sym)), PokeKind::TrampolineRemoved, "{sym}");
    }
}
