//! The `kcore_dir/` of a perf.data directory: kernel code (`kcore`, an ELF core
//! file of PT_LOAD segments), `kallsyms` and `modules`, as `perf record --kcore`
//! leaves them and as perf reads them for decoding.

use std::path::Path;

use object::elf;
use object::write::elf::{FileHeader as ElfFileHeader, ProgramHeader, Writer as ElfWriter};

use crate::error::{Error, Result};

/// The machine the kernel code is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Machine {
    X86_64,
    Aarch64,
}

/// A block of kernel memory at a virtual address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub bytes: Vec<u8>,
}

/// Serialises segments as an ELF64 core file with one PT_LOAD each.
pub fn kcore_elf(machine: Machine, segments: &[Segment]) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut w = ElfWriter::new(object::Endianness::Little, true, &mut buf);
    w.reserve_file_header();
    w.reserve_program_headers(segments.len() as u32);
    let offsets: Vec<usize> = segments.iter().map(|s| w.reserve(s.bytes.len(), 4096)).collect();
    let e_machine = match machine {
        Machine::X86_64 => elf::EM_X86_64,
        Machine::Aarch64 => elf::EM_AARCH64,
    };
    let header = ElfFileHeader { os_abi: elf::ELFOSABI_NONE, abi_version: 0, e_type: elf::ET_CORE, e_machine, e_entry: 0, e_flags: 0 };
    w.write_file_header(&header).map_err(|e| Error::Unwritable { what: "kcore", reason: e.to_string() })?;
    w.write_align_program_headers();
    for (s, &off) in segments.iter().zip(&offsets) {
        w.write_program_header(&ProgramHeader {
            p_type: elf::PT_LOAD,
            p_flags: elf::PF_R | elf::PF_W | elf::PF_X,
            p_offset: off as u64,
            p_vaddr: s.vaddr,
            p_paddr: 0,
            p_filesz: s.bytes.len() as u64,
            p_memsz: s.bytes.len() as u64,
            p_align: 4096,
        });
    }
    for s in segments {
        w.write_align(4096);
        w.write(&s.bytes);
    }
    Ok(buf)
}

/// Reads the PT_LOAD segments of a kcore (or any ELF core) file.
pub fn read_kcore_segments(data: &[u8]) -> Result<Vec<(u64, std::ops::Range<usize>)>> {
    use object::read::elf::{FileHeader, ProgramHeader as _};
    let bad = |e: object::read::Error| Error::invalid("kcore ELF", 0, e.to_string());
    let header = elf::FileHeader64::<object::Endianness>::parse(data).map_err(bad)?;
    let endian = header.endian().map_err(bad)?;
    let mut out = Vec::new();
    for ph in header.program_headers(endian, data).map_err(bad)? {
        if ph.p_type(endian) != elf::PT_LOAD {
            continue;
        }
        let (off, size) = (ph.p_offset(endian), ph.p_filesz(endian));
        let end = off
            .checked_add(size)
            .filter(|&e| e <= data.len() as u64)
            .ok_or_else(|| Error::invalid("kcore PT_LOAD", off, format!("segment of {size} bytes runs past the file's end")))?;
        out.push((ph.p_vaddr(endian), off as usize..end as usize));
    }
    Ok(out)
}

/// Writes `dir/kcore`, `dir/kallsyms` and `dir/modules` (the directory made 0700 and
/// the files 0600 when created, as perf makes kcore_dir: they hold kernel addresses).
/// `modules` may be empty but perf needs the file to exist. Without segments
/// there is no `kcore`: perf then reads `kallsyms` alone, which an empty
/// kcore would hide.
pub fn write_kcore_dir(dir: &Path, machine: Machine, segments: &[Segment], kallsyms: &str, modules: &str) -> Result<()> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::Io { path: p, source }
    };
    crate::write::create_private_dir(dir).map_err(io(dir))?;
    let kcore_bytes = if segments.is_empty() { None } else { Some(kcore_elf(machine, segments)?) };
    let files = [("kcore", kcore_bytes.as_deref()), ("kallsyms", Some(kallsyms.as_bytes())), ("modules", Some(modules.as_bytes()))];
    for (name, bytes) in files.into_iter().filter_map(|(name, bytes)| Some((name, bytes?))) {
        let path = dir.join(name);
        crate::write::create_private(&path).and_then(|mut f| std::io::Write::write_all(&mut f, bytes)).map_err(io(&path))?;
    }
    Ok(())
}

/// One line of `/proc/kallsyms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub addr: u64,
    pub kind: char,
    pub name: String,
    pub module: Option<String>,
}

/// `/proc/kallsyms`, sorted by address, for address -> symbol+offset.
#[derive(Clone, Debug, Default)]
pub struct Kallsyms {
    symbols: Vec<Symbol>,
}

impl Kallsyms {
    /// Parses kallsyms text. Malformed lines are counted, not fatal.
    pub fn parse(text: &str) -> (Kallsyms, usize) {
        let mut symbols = Vec::new();
        let mut bad = 0;
        for line in text.lines() {
            let mut parts = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
                bad += !line.trim().is_empty() as usize;
                continue;
            };
            let (Ok(addr), Some(kind)) = (u64::from_str_radix(addr, 16), kind.chars().next()) else {
                bad += 1;
                continue;
            };
            let module = parts.next().map(|m| m.trim_matches(|c| c == '[' || c == ']').to_string());
            symbols.push(Symbol { addr, kind, name: name.to_string(), module });
        }
        symbols.sort_by_key(|s| s.addr);
        (Kallsyms { symbols }, bad)
    }

    pub fn load(path: &Path) -> Result<(Kallsyms, usize)> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
        Ok(Kallsyms::parse(&text))
    }

    /// From symbols in any order.
    pub fn from_symbols(mut symbols: Vec<Symbol>) -> Kallsyms {
        symbols.sort_by_key(|s| s.addr);
        Kallsyms { symbols }
    }

    pub fn symbols(&self) -> &[Symbol] {
        &self.symbols
    }

    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    /// The symbol covering `addr` (the last one at or below it) and the offset into it.
    pub fn lookup(&self, addr: u64) -> Option<(&Symbol, u64)> {
        let (i, _) = self.covering(addr)?;
        let s = &self.symbols[i];
        Some((s, addr - s.addr))
    }

    /// The index of the symbol [`Self::lookup`] gives for `addr`, and every
    /// address it gives it for (up to the next symbol's), so that a caller
    /// can keep it for the addresses that follow.
    pub fn covering(&self, addr: u64) -> Option<(usize, std::ops::Range<u64>)> {
        let i = self.symbols.partition_point(|s| s.addr <= addr).checked_sub(1)?;
        let end = self.symbols.get(i + 1).map_or(u64::MAX, |s| s.addr);
        Some((i, self.symbols[i].addr..end))
    }

    /// Address of a symbol by name (first match).
    pub fn address_of(&self, name: &str) -> Option<u64> {
        self.symbols.iter().find(|s| s.name == name).map(|s| s.addr)
    }
}
