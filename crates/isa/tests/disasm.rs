//! Display of x86-64 and AArch64 bytes.

use isa::{disassemble_aarch64_text, disassemble_x86_64, disassemble_x86_64_text, DisasmLine};

const ADDR: u64 = 0xffff_ffff_8100_0000;
const A64: u64 = 0xffff_8000_8001_0000;

fn line(addr: u64, len: usize, text: &str) -> DisasmLine {
    DisasmLine { addr, len, text: text.to_owned() }
}

#[test]
fn x86_lines_have_addresses_lengths_and_absolute_targets() {
    let bytes = [0x0f, 0x1f, 0x44, 0x00, 0x00, 0xe9, 0x5d, 0x45, 0x23, 0x00, 0xe8, 0xf1, 0xff, 0xdf, 0x00, 0xc3];
    assert_eq!(
        disassemble_x86_64(ADDR, &bytes),
        vec![
            line(ADDR, 5, "nop [rax+rax]"),
            line(ADDR + 5, 5, "jmp 0xffffffff81234567"),
            line(ADDR + 10, 5, "call 0xffffffff81e00000"),
            line(ADDR + 15, 1, "ret"),
        ]
    );
}

#[test]
fn x86_text_joins_with_semicolons() {
    assert_eq!(disassemble_x86_64_text(ADDR, &[0xc3, 0xcc, 0xcc]), "ret; int3; int3");
    assert_eq!(disassemble_x86_64_text(ADDR, &[0xeb, 0x10]), "jmp 0xffffffff81000012");
    assert_eq!(disassemble_x86_64_text(ADDR, &[0x66, 0x90]), "xchg ax, ax");
    assert_eq!(disassemble_x86_64_text(ADDR, &[]), "");
}

#[test]
fn x86_truncated_instruction_becomes_byte_line() {
    assert_eq!(disassemble_x86_64(ADDR, &[0x90, 0xe9, 0x00, 0x00]), vec![line(ADDR, 1, "nop"), line(ADDR + 1, 3, ".byte 0xe9, 0x00, 0x00")]);
}

#[test]
fn x86_invalid_opcode_covers_the_rest() {
    // 0x06 (push es) does not exist in 64-bit mode.
    assert_eq!(disassemble_x86_64(ADDR, &[0x06, 0x90, 0xc3]), vec![line(ADDR, 3, ".byte 0x06, 0x90, 0xc3")]);
    assert!(disassemble_x86_64(ADDR, &[]).is_empty());
}

#[test]
fn x86_never_panics_on_any_short_input_or_wrapping_address() {
    for a in 0..=255u8 {
        for b in [0x00, 0x0f, 0x66, 0xcc, 0xff] {
            let lines = disassemble_x86_64(u64::MAX - 1, &[a, b, 0x44]);
            assert_eq!(lines.iter().map(|l| l.len).sum::<usize>(), 3);
        }
    }
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn aarch64_known_encodings() {
    let cases: &[(u32, &str)] = &[
        (0xd503_201f, "nop"),
        (0xd503_245f, "hint #0x22"),            // bti c: 0xd503201f | 0x22 << 5
        (0xd503_233f, "hint #0x19"),            // paciasp: 0xd503201f | 25 << 5
        (0x1400_0400, "b 0xffff800080011000"),  // imm26 = 0x400 words forward
        (0x17ff_ffff, "b 0xffff80008000fffc"),  // imm26 = -1
        (0x9400_0000, "bl 0xffff800080010000"), // imm26 = 0
        (0x97ff_fffe, "bl 0xffff80008000fff8"), // imm26 = -2
        (0xd420_0080, "brk #0x4"),              // kprobes: 0xd4200000 | 4 << 5
        (0xd421_0000, "brk #0x800"),            // BUG()
        (0xd65f_03c0, "ret"),                   // rn = x30
        (0xd65f_0020, "ret x1"),
        (0xa9bf_7bfd, ".inst 0xa9bf7bfd"), // stp x29, x30, [sp, #-16]!
        (0xd65f_0bff, ".inst 0xd65f0bff"), // retaa is not ret
    ];
    for &(word, expected) in cases {
        assert_eq!(disassemble_aarch64_text(A64, &word.to_le_bytes()), expected, "{word:#010x}");
    }
}

#[test]
fn aarch64_text_advances_address_and_keeps_partial_tail() {
    let mut bytes = words(&[0xd503_201f, 0x1400_0001]);
    bytes.extend([0x1f, 0x20]);
    assert_eq!(disassemble_aarch64_text(A64, &bytes), "nop; b 0xffff800080010008; .byte 0x1f, 0x20");
    assert_eq!(disassemble_aarch64_text(A64, &[]), "");
}
