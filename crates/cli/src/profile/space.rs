//! Which addresses a profile is for, and how the trace's addresses map to
//! them: a program's file (`--binary`: its link-time addresses, found from
//! the mappings the trace recorded) or the kernel (`--kernel`: as they ran).

use std::path::Path;

use anyhow::{bail, Context, Result};
use codeimage::UserMapping;
use object::Object;

use super::symtab;
pub use super::symtab::Function;

/// An ELF file's executable code at its link-time addresses.
pub struct Binary {
    /// Executable PT_LOAD segments: (vaddr, file offset, bytes).
    segments: Vec<(u64, u64, Vec<u8>)>,
    /// Function symbols with a size, sorted by start, one per start.
    pub functions: Vec<Function>,
    /// llvm-profgen's base of offsets: the first executable segment's
    /// address, down to its 4 KiB page.
    pub preferred_base: u64,
    build_id: Option<Vec<u8>>,
}

impl Binary {
    pub fn load(path: &Path) -> Result<Binary> {
        let data = std::fs::read(path).with_context(|| format!("--binary {}", path.display()))?;
        let file = object::File::parse(&data[..]).with_context(|| format!("--binary {}: not an ELF file", path.display()))?;
        let segments: Vec<(u64, u64, Vec<u8>)> =
            codeimage::exec_segments(&file, &data).into_iter().map(|s| (s.addr, s.file_offset, s.bytes.to_vec())).collect();
        let Some(first) = segments.iter().map(|s| s.0).min() else { bail!("--binary {}: no executable segment", path.display()) };
        let functions = symtab::functions(&file);
        let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        Ok(Binary { segments, functions, preferred_base: first & !0xfff, build_id })
    }

    /// The function holding `addr`.
    pub fn function(&self, addr: u64) -> Option<&Function> {
        let i = self.functions.partition_point(|f| f.start <= addr).checked_sub(1)?;
        let f = &self.functions[i];
        (addr < f.end).then_some(f)
    }

    /// The code bytes from `addr` to the end of its segment.
    pub fn bytes_at(&self, addr: u64) -> &[u8] {
        for (vaddr, _, bytes) in &self.segments {
            if addr >= *vaddr && addr - vaddr < bytes.len() as u64 {
                return &bytes[(addr - vaddr) as usize..];
            }
        }
        &[]
    }

    /// The link-time address of the file offset `off`, when an executable segment holds it.
    fn vaddr_of_offset(&self, off: u64) -> Option<u64> {
        self.segments.iter().find(|(_, o, b)| off >= *o && off - o < b.len() as u64).map(|(v, o, _)| v + (off - o))
    }
}

/// Where a profile's addresses come from.
pub enum Space {
    /// The program's file: a trace address in one of `maps` (runtime start,
    /// end, and what to subtract) becomes the file's address.
    Binary { binary: Binary, maps: Vec<(u64, u64, u64)> },
    /// Kernel code, at the addresses it ran at.
    Kernel,
}

impl Space {
    /// The binary at `path` as the trace mapped it (its executable file
    /// `mappings`, in file order): an error when none is that file (by
    /// build-id when both have one, else by file name).
    pub fn binary(path: &Path, mappings: &[UserMapping<'_>]) -> Result<Space> {
        let binary = Binary::load(path)?;
        let name = path.file_name().map(|n| n.as_encoded_bytes().to_vec()).unwrap_or_default();
        let mut maps = Vec::new();
        let mut seen = Vec::new();
        for m in mappings {
            let same = match (m.build_id, &binary.build_id) {
                (Some(a), Some(b)) => a.starts_with(b) || b.starts_with(a),
                _ => m.name.rsplit(|&c| c == b'/').next() == Some(&name[..]),
            };
            if !same {
                seen.push(String::from_utf8_lossy(m.name).into_owned());
                continue;
            }
            if let Some(vaddr) = binary.vaddr_of_offset(m.pgoff) {
                maps.push((m.addr, m.addr.saturating_add(m.len), m.addr.wrapping_sub(vaddr)));
            }
        }
        if maps.is_empty() {
            seen.sort();
            seen.dedup();
            let listed = if seen.is_empty() { "none".to_string() } else { seen.join(", ") };
            bail!("--binary {}: the trace maps no executable part of this file (its executable mappings: {listed})", path.display());
        }
        Ok(Space::Binary { binary, maps })
    }

    /// The profile's address for the trace address `addr`, None outside.
    #[inline]
    pub fn map(&self, addr: u64) -> Option<u64> {
        match self {
            Space::Binary { maps, .. } => maps.iter().find(|m| addr >= m.0 && addr < m.1).map(|m| addr.wrapping_sub(m.2)),
            Space::Kernel => (addr >> 63 == 1).then_some(addr),
        }
    }

    pub fn binary_file(&self) -> Option<&Binary> {
        match self {
            Space::Binary { binary, .. } => Some(binary),
            Space::Kernel => None,
        }
    }
}
