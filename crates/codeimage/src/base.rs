//! Base code: what the kernel's text held before any recorded change, from
//! ELF files (vmlinux, kcore) and raw dumps (an OpenCSD snapshot's memory
//! dumps are raw dumps: `etm::snapshot` loads them).
//! Files are memory-mapped, not copied.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use object::read::elf::{FileHeader as _, ProgramHeader as _};
use object::{elf, Endianness, Object, ObjectSection, SectionFlags};
use perfdata::mapped::MappedFile;

use crate::error::{io, Error, Result};

/// Bytes of a region: a slice of a shared memory map, or owned.
#[derive(Clone)]
enum Backing {
    Map { map: Arc<MappedFile>, offset: usize, len: usize },
    Owned(Arc<[u8]>),
}

/// One contiguous block of code at a virtual address.
#[derive(Clone)]
pub struct Region {
    pub start: u64,
    /// Where it came from, for messages ("kcore PT_LOAD 0", "kernel_dump.bin").
    pub name: String,
    backing: Backing,
}

impl Region {
    pub fn bytes(&self) -> &[u8] {
        match &self.backing {
            Backing::Map { map, offset, len } => &map[*offset..*offset + *len],
            Backing::Owned(b) => b,
        }
    }
    pub fn len(&self) -> u64 {
        self.bytes().len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn end(&self) -> u64 {
        self.start + self.len()
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Region({} {:#x}..{:#x})", self.name, self.start, self.end())
    }
}

/// Overlapping ranges listed one by one in [`BaseImage::overlaps`]; the rest are counted.
pub const OVERLAPS_LISTED: usize = 16;

/// Non-overlapping regions sorted by address. Where an added region overlaps
/// earlier ones, the earlier bytes win and the overlap is counted (and the
/// first [`OVERLAPS_LISTED`] listed). Adding a region takes O(log n) amortized:
/// covered ranges are kept merged, so a region overlapping many others costs
/// no more than one overlapping one.
#[derive(Clone, Debug, Default)]
pub struct BaseImage {
    by_start: BTreeMap<u64, Region>,
    /// Covered address ranges, merged: start -> end.
    covered: BTreeMap<u64, u64>,
    /// `by_start` as a slice, made on first read after a change.
    sorted: OnceLock<Vec<Region>>,
    /// The first overlapping ranges that were dropped: (start, end, name of the dropped part).
    pub overlaps: Vec<(u64, u64, String)>,
    /// Every overlapping range that was dropped, and their bytes.
    pub overlap_count: u64,
    pub overlap_bytes: u64,
    /// Bytes dropped because they ran past the top of the address space
    /// (an address range ends below 2^64): (start of the region, bytes dropped, name).
    pub clipped: Vec<(u64, u64, String)>,
}

impl BaseImage {
    pub fn new() -> BaseImage {
        BaseImage::default()
    }

    pub fn regions(&self) -> &[Region] {
        self.sorted.get_or_init(|| self.by_start.values().cloned().collect())
    }

    /// One line on what overlapped, with the first few ranges; None when nothing did.
    pub fn overlap_summary(&self) -> Option<String> {
        if self.overlap_count == 0 {
            return None;
        }
        let first: Vec<String> = self.overlaps.iter().take(3).map(|(s, e, name)| format!("{s:#x}..{e:#x} of {name}")).collect();
        let more = if self.overlap_count > first.len() as u64 { ", ..." } else { "" };
        Some(format!(
            "{} overlapping ranges ({} bytes) of base code dropped, the code loaded first kept: {}{more}",
            self.overlap_count,
            self.overlap_bytes,
            first.join(", ")
        ))
    }

    /// Adds owned bytes at `start`.
    pub fn add_bytes(&mut self, start: u64, bytes: Vec<u8>, name: impl Into<String>) {
        let len = bytes.len();
        self.insert(Region { start, name: name.into(), backing: Backing::Owned(bytes.into()) }, len);
    }

    /// Adds `len` bytes of `path` from `file_offset` at address `start` (a raw dump).
    /// `len` None: to the end of the file.
    pub fn add_raw_file(&mut self, path: &Path, file_offset: u64, len: Option<u64>, start: u64) -> Result<()> {
        let map = map_file(path)?;
        let avail = (map.len() as u64).saturating_sub(file_offset);
        let len = len.unwrap_or(avail);
        if file_offset > map.len() as u64 || len > avail {
            return Err(Error::Region {
                path: path.to_path_buf(),
                start,
                len,
                reason: format!("needs file bytes {file_offset:#x}+{len:#x}, the file has {:#x}", map.len()),
            });
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        self.add_mapped(map, file_offset as usize, len as usize, start, name);
        Ok(())
    }

    /// Adds the PT_LOAD segments of an ELF file (vmlinux, kcore) at their
    /// virtual addresses; an ELF without loadable segments (a relocatable
    /// object) contributes its executable sections at their addresses.
    pub fn add_elf(&mut self, path: &Path) -> Result<()> {
        let map = map_file(path)?;
        let bad = |e: object::read::Error| Error::Elf { path: path.to_path_buf(), reason: e.to_string() };
        let data: &[u8] = &map;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let mut added = 0;
        if let Ok(header) = elf::FileHeader64::<Endianness>::parse(data) {
            let endian = header.endian().map_err(bad)?;
            for (i, ph) in header.program_headers(endian, data).map_err(bad)?.iter().enumerate() {
                if ph.p_type(endian) != elf::PT_LOAD || ph.p_filesz(endian) == 0 {
                    continue;
                }
                let (off, size, vaddr) = (ph.p_offset(endian), ph.p_filesz(endian), ph.p_vaddr(endian));
                within(path, data.len(), off, size, vaddr, || format!("PT_LOAD {i}"))?;
                self.add_mapped(map.clone(), off as usize, size as usize, vaddr, format!("{name} PT_LOAD {i}"));
                added += 1;
            }
        }
        if added == 0 {
            let file = object::File::parse(data).map_err(bad)?;
            for s in file.sections() {
                let exec = match s.flags() {
                    SectionFlags::Elf { sh_flags } => sh_flags & elf::SHF_EXECINSTR as u64 != 0,
                    _ => false,
                };
                if !exec || s.address() == 0 {
                    continue;
                }
                if let Some((off, size)) = s.file_range() {
                    let sname = s.name().unwrap_or("?").to_string();
                    within(path, data.len(), off, size, s.address(), || format!("section {sname}"))?;
                    self.add_mapped(map.clone(), off as usize, size as usize, s.address(), format!("{name} {sname}"));
                }
            }
        }
        Ok(())
    }

    /// Adds sections of an ELF file at the addresses given (a kernel module:
    /// `/sys/module/NAME/sections/.text` says where each section was loaded).
    /// The bytes are the file's, without the loader's relocations: code that
    /// calls out of the module has unrelocated targets, so kcore is better
    /// when there is one.
    pub fn add_elf_sections(&mut self, path: &Path, placements: &[(&str, u64)]) -> Result<()> {
        let map = map_file(path)?;
        let file = object::File::parse(&map[..]).map_err(|e| Error::Elf { path: path.to_path_buf(), reason: e.to_string() })?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        for &(section, addr) in placements {
            let s = file.section_by_name(section).ok_or_else(|| Error::Elf { path: path.to_path_buf(), reason: format!("no section {section}") })?;
            if let Some((off, size)) = s.file_range() {
                within(path, map.len(), off, size, addr, || format!("section {section}"))?;
                self.add_mapped(map.clone(), off as usize, size as usize, addr, format!("{name} {section}"));
            }
        }
        Ok(())
    }

    pub(crate) fn add_mapped(&mut self, map: Arc<MappedFile>, offset: usize, len: usize, start: u64, name: String) {
        self.insert(Region { start, name, backing: Backing::Map { map, offset, len } }, len);
    }

    /// Inserts the parts of `r` (its first `len` bytes) that no existing region covers.
    fn insert(&mut self, r: Region, len: usize) {
        let room = u64::MAX - r.start;
        let mut len = len as u64;
        if len > room {
            self.clipped.push((r.start, len - room, r.name.clone()));
            len = room;
        }
        if len == 0 {
            return;
        }
        let (start, end) = (r.start, r.start + len);
        // Covered ranges that overlap or touch [start, end): all merge into one.
        let mut touching: Vec<(u64, u64)> = Vec::new();
        if let Some((&s, &e)) = self.covered.range(..start).next_back() {
            if e >= start {
                touching.push((s, e));
            }
        }
        touching.extend(self.covered.range(start..=end).map(|(&s, &e)| (s, e)));
        let mut p = start;
        for &(s, e) in &touching {
            let (os, oe) = (s.max(start), e.min(end));
            if os < oe {
                self.overlap_count += 1;
                self.overlap_bytes += oe - os;
                if self.overlaps.len() < OVERLAPS_LISTED {
                    self.overlaps.push((os, oe, r.name.clone()));
                }
            }
            if s > p {
                self.add_piece(&r, p, s);
            }
            p = p.max(e);
        }
        if p < end {
            self.add_piece(&r, p, end);
        }
        let merged_start = touching.first().map_or(start, |&(s, _)| s.min(start));
        let merged_end = touching.last().map_or(end, |&(_, e)| e.max(end));
        for (s, _) in touching {
            self.covered.remove(&s);
        }
        self.covered.insert(merged_start, merged_end);
        self.sorted = OnceLock::new();
    }

    /// Adds addresses `from..to` of `r` as a region of its own.
    fn add_piece(&mut self, r: &Region, from: u64, to: u64) {
        let (lo, hi) = ((from - r.start) as usize, (to - r.start) as usize);
        let backing = match &r.backing {
            Backing::Map { map, offset, .. } => Backing::Map { map: map.clone(), offset: offset + lo, len: hi - lo },
            Backing::Owned(b) => Backing::Owned(b[lo..hi].into()),
        };
        self.by_start.insert(from, Region { start: from, name: r.name.clone(), backing });
    }

    /// The region holding `addr` and the offset into it.
    pub fn find(&self, addr: u64) -> Option<(&Region, usize)> {
        let regions = self.regions();
        let i = regions.partition_point(|x| x.end() <= addr);
        let r = regions.get(i).filter(|r| r.start <= addr)?;
        Some((r, (addr - r.start) as usize))
    }

    /// The region nearest to `addr` (for "unmapped" messages).
    pub fn nearest(&self, addr: u64) -> Option<&Region> {
        let regions = self.regions();
        let i = regions.partition_point(|x| x.end() <= addr);
        let after = regions.get(i);
        let before = i.checked_sub(1).and_then(|j| regions.get(j));
        match (before, after) {
            (Some(b), Some(a)) => Some(if addr - b.end() < a.start.saturating_sub(addr) { b } else { a }),
            (b, a) => b.or(a),
        }
    }
}

fn map_file(path: &Path) -> Result<Arc<MappedFile>> {
    let f = std::fs::File::open(path).map_err(io(path))?;
    Ok(Arc::new(MappedFile::map(&f, path).map_err(io(path))?))
}

/// An error unless `size` bytes at `off` lie inside a file of `file_len` bytes.
fn within(path: &Path, file_len: usize, off: u64, size: u64, start: u64, what: impl FnOnce() -> String) -> Result<()> {
    if off.checked_add(size).is_some_and(|end| end <= file_len as u64) {
        return Ok(());
    }
    Err(Error::Region { path: path.to_path_buf(), start, len: size, reason: format!("{} runs past the end of the file", what()) })
}
