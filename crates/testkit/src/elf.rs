//! Minimal little-endian x86-64 ELF64 files written by hand: the file
//! header and program headers, for tests whose ELF the `object` writer does
//! not make (program headers only, odd or hostile layouts).

use crate::le::{put16, put32, put64};

pub const ET_EXEC: u16 = 2;
pub const ET_DYN: u16 = 3;
pub const ET_CORE: u16 = 4;
pub const PT_LOAD: u32 = 1;
pub const PT_NOTE: u32 = 4;
/// Size of the file header; program headers follow it here.
pub const EHSIZE: u64 = 64;
pub const PHENTSIZE: u64 = 56;

/// The file header's fields that vary: program headers at [`EHSIZE`],
/// section headers (64 bytes each) at `shoff`.
#[derive(Clone, Copy, Default)]
pub struct Header {
    pub e_type: u16,
    pub entry: u64,
    pub phnum: u16,
    pub shoff: u64,
    /// 64 for ELF64 section headers; 0 is allowed without sections.
    pub shentsize: u16,
    pub shnum: u16,
    pub shstrndx: u16,
}

/// Appends the 64-byte ELF64 file header.
pub fn put_header(b: &mut Vec<u8>, h: &Header) {
    b.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    put16(b, h.e_type);
    put16(b, 62); // EM_X86_64
    put32(b, 1);
    put64(b, h.entry);
    put64(b, EHSIZE); // phoff
    put64(b, h.shoff);
    put32(b, 0);
    for v in [EHSIZE as u16, PHENTSIZE as u16, h.phnum, h.shentsize, h.shnum, h.shstrndx] {
        put16(b, v);
    }
}

/// A program header.
#[derive(Clone, Copy, Default)]
pub struct Phdr {
    pub p_type: u32,
    /// PF_X 1, PF_W 2, PF_R 4.
    pub flags: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub paddr: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub align: u64,
}

/// Appends a 56-byte program header.
pub fn put_phdr(b: &mut Vec<u8>, p: &Phdr) {
    put32(b, p.p_type);
    put32(b, p.flags);
    for v in [p.offset, p.vaddr, p.paddr, p.filesz, p.memsz, p.align] {
        put64(b, v);
    }
}
