//! `walk_to_branch`, `classify_x86_64` and `classify_aarch64` on hand-made
//! code: blocks, the kernel idioms, where and why a walk stops, and no panic
//! on any input.

use isa::{classify_aarch64, classify_x86_64, walk_to_branch, Block, BranchClass, DecodeError, Insn, Isa, KernelIdioms, WalkError};

const ADDR: u64 = 0xffff_ffff_8100_0000;
const A64: u64 = 0xffff_8000_8001_0000;
const RETURN_THUNK: u64 = 0xffff_ffff_8200_0000;
const RAX_THUNK: u64 = 0xffff_ffff_8200_0100;

fn none() -> KernelIdioms {
    KernelIdioms::default()
}

fn kernel() -> KernelIdioms {
    KernelIdioms::from_symbols([
        ("_text", ADDR),
        ("__x86_return_thunk", RETURN_THUNK),
        ("__x86_indirect_thunk_rax", RAX_THUNK),
        ("__x86_indirect_thunk_array", RAX_THUNK),
    ])
}

/// `opcode rel32` at ADDR + `at` reaching `target`.
fn rel32(opcode: &[u8], at: u64, target: u64) -> Vec<u8> {
    let end = ADDR + at + opcode.len() as u64 + 4;
    let rel = target.wrapping_sub(end) as i64 as i32;
    [opcode, &rel.to_le_bytes()].concat()
}

fn x86_class(bytes: &[u8], idioms: &KernelIdioms) -> BranchClass {
    classify_x86_64(ADDR, bytes, idioms).unwrap().class
}

#[test]
fn x86_block_ends_at_the_first_branch() {
    // push rbp; mov rbp, rsp; nop5; xchg ax, ax; call; ret
    let mut code = vec![0x55, 0x48, 0x89, 0xe5, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x66, 0x90];
    code.extend(rel32(&[0xe8], 11, ADDR + 0x1000));
    code.push(0xc3);
    let block = walk_to_branch(Isa::X86_64, ADDR, &code, &none()).unwrap();
    assert_eq!(
        block,
        Block {
            start: ADDR,
            non_branch_insns: 4,
            branch_addr: ADDR + 11,
            branch: Insn { len: 5, class: BranchClass::DirectCall, target: Some(ADDR + 0x1000) },
        }
    );
    let next = walk_to_branch(Isa::X86_64, ADDR + 16, &code[16..], &none()).unwrap();
    assert_eq!((next.non_branch_insns, next.branch.class), (0, BranchClass::Return));
}

#[test]
fn x86_kernel_idioms() {
    let (plain, kernel) = (none(), kernel());
    let jmp_ret = rel32(&[0xe9], 0, RETURN_THUNK);
    let call_rax = rel32(&[0xe8], 0, RAX_THUNK);
    let jmp_rax = rel32(&[0xe9], 0, RAX_THUNK);
    let jne_rax = rel32(&[0x0f, 0x85], 0, RAX_THUNK);
    let call_ret = rel32(&[0xe8], 0, RETURN_THUNK);
    assert_eq!(x86_class(&jmp_ret, &plain), BranchClass::DirectJump);
    assert_eq!(x86_class(&jmp_ret, &kernel), BranchClass::Return);
    assert_eq!(x86_class(&call_rax, &kernel), BranchClass::IndirectCall);
    assert_eq!(x86_class(&jmp_rax, &kernel), BranchClass::IndirectJump);
    // A Jcc to a thunk stays conditional; nothing calls a return thunk.
    assert_eq!(x86_class(&jne_rax, &kernel), BranchClass::CondBranch);
    assert_eq!(x86_class(&call_ret, &kernel), BranchClass::DirectCall);
    // The target is still the thunk, where the CPU goes next.
    let insn = classify_x86_64(ADDR, &jmp_ret, &kernel).unwrap();
    assert_eq!(insn.target, Some(RETURN_THUNK));
    // Through 0x66-less prefixes and the rel8 form too.
    let short = [0x2e, 0xeb, 0x7f];
    let idioms = KernelIdioms::from_symbols([("srso_return_thunk", ADDR + 3 + 0x7f)]);
    assert_eq!(x86_class(&short, &idioms), BranchClass::Return);
}

#[test]
fn kernel_idioms_know_the_thunk_names() {
    let names = [
        "__x86_return_thunk",
        "retbleed_return_thunk",
        "srso_return_thunk",
        "srso_alias_return_thunk",
        "its_return_thunk",
        "call_depth_return_thunk",
        "__x86_indirect_thunk_r11",
        "__x86_indirect_call_thunk_rax",
        "__x86_indirect_jump_thunk_rdx",
        "__x86_indirect_its_thunk_rcx",
    ];
    let idioms = KernelIdioms::from_symbols(names.iter().enumerate().map(|(i, &n)| (n, 0x1000 * i as u64)));
    assert_eq!(idioms.len(), names.len());
    let others = KernelIdioms::from_symbols([("__x86_return_thunk_x", 1), ("x86_return_thunk", 2), ("ret", 3)]);
    assert!(others.is_empty());
    // Two names on one address count once.
    assert_eq!(kernel().len(), 2);
}

#[test]
fn x86_classes() {
    let cases: &[(&[u8], BranchClass)] = &[
        (&[0x90], BranchClass::Nop),
        (&[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0], BranchClass::Nop),
        (&[0x41, 0x90], BranchClass::None),             // xchg r8d, eax
        (&[0xf3, 0x90], BranchClass::None),             // pause
        (&[0xf3, 0x0f, 0x1e, 0xfa], BranchClass::None), // endbr64
        (&[0xc3], BranchClass::Return),
        (&[0xc2, 0x08, 0x00], BranchClass::Return),
        (&[0xf2, 0xc3], BranchClass::Return), // bnd ret
        (&[0xff, 0xd0], BranchClass::IndirectCall),
        (&[0x41, 0xff, 0x14, 0x24], BranchClass::IndirectCall), // call [r12]
        (&[0x3e, 0xff, 0xe0], BranchClass::IndirectJump),       // notrack jmp rax
        (&[0xff, 0x2c, 0x24], BranchClass::FarTransfer),        // jmp far [rsp]
        (&[0x0f, 0x05], BranchClass::FarTransfer),              // syscall
        (&[0x48, 0x0f, 0x07], BranchClass::FarTransfer),        // sysretq
        (&[0x48, 0xcf], BranchClass::FarTransfer),              // iretq
        (&[0xcd, 0x80], BranchClass::FarTransfer),
        (&[0x0f, 0x01, 0xc1], BranchClass::FarTransfer), // vmcall
        (&[0x0f, 0x01, 0xd9], BranchClass::FarTransfer), // vmmcall
        (&[0x48, 0xcb], BranchClass::FarTransfer),       // retfq
        (&[0xcc], BranchClass::Trap),
        (&[0xf1], BranchClass::Trap),
        (&[0x0f, 0x0b], BranchClass::Trap),
        (&[0xc7, 0xf8, 0, 0, 0, 0], BranchClass::None),       // xbegin
        (&[0xf0, 0x48, 0x0f, 0xb1, 0x17], BranchClass::None), // lock cmpxchg
        (&[0xf4], BranchClass::None),                         // hlt
    ];
    for &(bytes, class) in cases {
        let insn = classify_x86_64(ADDR, bytes, &none()).unwrap();
        assert_eq!((insn.class, usize::from(insn.len)), (class, bytes.len()), "{bytes:02x?}");
    }
    let jcc = classify_x86_64(ADDR, &[0x2e, 0x74, 0xfd], &none()).unwrap();
    assert_eq!((jcc.class, jcc.target), (BranchClass::CondBranch, Some(ADDR)));
    let bnd_jmp = classify_x86_64(ADDR, &[0xf2, 0xe9, 0, 0, 0, 0], &none()).unwrap();
    assert_eq!((bnd_jmp.class, bnd_jmp.target), (BranchClass::DirectJump, Some(ADDR + 6)));
    // APX JMPABS: REX2 (M0 and W clear), a1, the absolute target; Intel PT
    // sends a TIP for it, as for an indirect jump.
    let jmpabs = [0xd5, 0x70, 0xa1, 0x10, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf4];
    let insn = classify_x86_64(ADDR, &jmpabs, &none()).unwrap();
    assert_eq!((insn.class, insn.len, insn.target), (BranchClass::IndirectJump, 11, None));
    assert!(classify_x86_64(ADDR, &[0xd5, 0x08, 0xa1, 0, 0, 0, 0, 0, 0, 0, 0], &none()).is_err(), "REX2.W set: no JMPABS");
}

#[test]
fn x86_walk_stops_precisely() {
    let idioms = none();
    assert_eq!(walk_to_branch(Isa::X86_64, ADDR, &[], &idioms), Err(WalkError::EndOfBuffer { addr: ADDR, non_branch_insns: 0 }));
    // nop; nop; then the first two bytes of a JMP32.
    assert_eq!(
        walk_to_branch(Isa::X86_64, ADDR, &[0x90, 0x90, 0xe9, 0x00], &idioms),
        Err(WalkError::EndOfBuffer { addr: ADDR + 2, non_branch_insns: 2 })
    );
    // nop; then 0x06 (push es), invalid in 64-bit mode.
    assert_eq!(walk_to_branch(Isa::X86_64, ADDR, &[0x90, 0x06, 0xc3], &idioms), Err(WalkError::Undecodable { addr: ADDR + 1, non_branch_insns: 1 }));
    assert_eq!(classify_x86_64(ADDR, &[0x0f], &idioms), Err(DecodeError::Truncated));
    assert_eq!(classify_x86_64(ADDR, &[], &idioms), Err(DecodeError::Truncated));
    assert_eq!(classify_x86_64(ADDR, &[0x06, 0x90], &idioms), Err(DecodeError::Invalid));
    // 16 prefixes: longer than any instruction.
    assert_eq!(classify_x86_64(ADDR, &[0x66; 16], &idioms), Err(DecodeError::Invalid));
}

#[test]
fn int3_padding_after_ret_is_its_own_block() {
    let code = [0xc3, 0xcc, 0xcc, 0xcc, 0xcc];
    let ret = walk_to_branch(Isa::X86_64, ADDR, &code, &none()).unwrap();
    assert_eq!((ret.branch_addr, ret.branch.class), (ADDR, BranchClass::Return));
    let pad = walk_to_branch(Isa::X86_64, ADDR + 1, &code[1..], &none()).unwrap();
    assert_eq!((pad.branch_addr, pad.branch.class), (ADDR + 1, BranchClass::Trap));
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn aarch64_classes_and_targets() {
    let cases: &[(u32, BranchClass, Option<u64>)] = &[
        (0xd503_201f, BranchClass::Nop, None),  // nop
        (0xd503_245f, BranchClass::Nop, None),  // bti c
        (0xd503_233f, BranchClass::Nop, None),  // paciasp
        (0xd503_23bf, BranchClass::Nop, None),  // autiasp
        (0xa9bf_7bfd, BranchClass::None, None), // stp x29, x30, [sp, #-16]!
        (0x1400_0400, BranchClass::DirectJump, Some(A64 + 0x1000)),
        (0x17ff_ffff, BranchClass::DirectJump, Some(A64 - 4)),
        (0x97ff_fffe, BranchClass::DirectCall, Some(A64 - 8)),
        (0x5400_0040, BranchClass::CondBranch, Some(A64 + 8)),      // b.eq
        (0x5400_004e, BranchClass::CondBranch, Some(A64 + 8)),      // b.al
        (0x5400_0051, BranchClass::CondBranch, Some(A64 + 8)),      // bc.ne
        (0xb5ff_ffe0, BranchClass::CondBranch, Some(A64 - 4)),      // cbnz x0
        (0xb7f8_ffe0, BranchClass::CondBranch, Some(A64 + 0x1ffc)), // tbnz x0, #63
        (0x7400_8040, BranchClass::CondBranch, Some(A64 + 8)),      // cbbgt w0, w0
        (0xd61f_0200, BranchClass::IndirectJump, None),             // br x16
        (0xd61f_081f, BranchClass::IndirectJump, None),             // braaz x0
        (0xd71f_0801, BranchClass::IndirectJump, None),             // braa x0, x1
        (0xd63f_0100, BranchClass::IndirectCall, None),             // blr x8
        (0xd73f_0c01, BranchClass::IndirectCall, None),             // blrab x0, x1
        (0xd65f_03c0, BranchClass::Return, None),                   // ret
        (0xd65f_0bff, BranchClass::Return, None),                   // retaa
        (0xd65f_0fff, BranchClass::Return, None),                   // retab
        (0xd69f_03e0, BranchClass::FarTransfer, None),              // eret
        (0xd69f_0bff, BranchClass::FarTransfer, None),              // eretaa
        (0xd6bf_03e0, BranchClass::FarTransfer, None),              // drps
        (0xd400_0001, BranchClass::FarTransfer, None),              // svc #0
        (0xd400_0002, BranchClass::FarTransfer, None),              // hvc #0
        (0xd400_0003, BranchClass::FarTransfer, None),              // smc #0
        (0xd4a0_0001, BranchClass::FarTransfer, None),              // dcps1
        (0xd420_0080, BranchClass::Trap, None),                     // brk #0x4
        (0xd440_0000, BranchClass::Trap, None),                     // hlt #0
        (0x0000_0000, BranchClass::Trap, None),                     // udf #0
        (0xd460_0000, BranchClass::None, None),                     // tcancel #0
        (0xd65f_0800, BranchClass::None, None),                     // unallocated
        (0x5500_001f, BranchClass::None, None),                     // FEAT_PAuth_LR retaasppc
    ];
    for &(word, class, target) in cases {
        assert_eq!(classify_aarch64(A64, word), Insn { len: 4, class, target }, "{word:#010x}");
    }
    // Targets wrap around the address space.
    assert_eq!(classify_aarch64(0, 0x17ff_ffff).target, Some(u64::MAX - 3));
}

#[test]
fn aarch64_walk() {
    // stp; mov x29, sp; nop; bl
    let code = words(&[0xa9bf_7bfd, 0x9100_03fd, 0xd503_201f, 0x9400_0010, 0xd65f_03c0]);
    let block = walk_to_branch(Isa::A64, A64, &code, &none()).unwrap();
    assert_eq!(
        block,
        Block {
            start: A64,
            non_branch_insns: 3,
            branch_addr: A64 + 12,
            branch: Insn { len: 4, class: BranchClass::DirectCall, target: Some(A64 + 12 + 0x40) },
        }
    );
    assert_eq!(walk_to_branch(Isa::A64, A64, &code[..10], &none()), Err(WalkError::EndOfBuffer { addr: A64 + 8, non_branch_insns: 2 }));
    assert_eq!(walk_to_branch(Isa::A64, A64 + 2, &code, &none()), Err(WalkError::Undecodable { addr: A64 + 2, non_branch_insns: 0 }));
}

#[test]
fn aarch32_is_unsupported() {
    for isa in [Isa::A32, Isa::T32] {
        let err = walk_to_branch(isa, 0x8000, &[0; 8], &none()).unwrap_err();
        assert_eq!(err, WalkError::Unsupported(isa));
        assert_eq!(err.to_string(), format!("{isa:?} code is not supported"));
    }
    assert_eq!(Isa::from(isa::Arch::X86_64), Isa::X86_64);
    assert_eq!(Isa::from(isa::Arch::Aarch64), Isa::A64);
}

#[test]
fn errors_and_names_display() {
    let end = WalkError::EndOfBuffer { addr: 0x10, non_branch_insns: 3 };
    assert_eq!(end.to_string(), "code ends at 0x10 after 3 instructions without a branch");
    let bad = WalkError::Undecodable { addr: 0x11, non_branch_insns: 0 };
    assert_eq!(bad.to_string(), "undecodable instruction at 0x11 after 0 instructions");
    let all = [
        (BranchClass::None, "none", false),
        (BranchClass::Nop, "nop", false),
        (BranchClass::CondBranch, "cond-branch", true),
        (BranchClass::DirectJump, "direct-jump", true),
        (BranchClass::DirectCall, "direct-call", true),
        (BranchClass::IndirectJump, "indirect-jump", true),
        (BranchClass::IndirectCall, "indirect-call", true),
        (BranchClass::Return, "return", true),
        (BranchClass::FarTransfer, "far-transfer", true),
        (BranchClass::Trap, "trap", true),
    ];
    for (class, name, branch) in all {
        assert_eq!((class.name(), class.to_string(), class.is_branch()), (name, name.to_owned(), branch));
    }
}

#[test]
fn no_panic_on_any_input() {
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut code = [0u8; 64];
    let idioms = kernel();
    for round in 0..50_000 {
        for b in code.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        // Addresses near both ends of the address space, any length.
        let addr = if round % 2 == 0 { u64::MAX - (x >> 58) } else { x >> 59 };
        let len = (x >> 40) as usize % code.len();
        for isa in [Isa::X86_64, Isa::A64, Isa::A32] {
            let _ = walk_to_branch(isa, addr & !3, &code[..len], &idioms);
            let _ = walk_to_branch(isa, addr, &code[..len], &idioms);
        }
        let _ = classify_x86_64(addr, &code[..len], &idioms);
        let _ = classify_aarch64(addr, x as u32);
    }
}
