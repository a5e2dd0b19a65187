//! Address -> `sym+0xoff` and dso: kernel addresses from kallsyms plus the
//! KSYMBOL records seen so far, user addresses from the symbol tables of the
//! ELF files that MMAP/MMAP2 records mapped.

use std::cell::Cell;
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use codeimage::{UserCode, UserMapping};
use object::{Object, ObjectSegment, ObjectSymbol};
use perfdata::kcore::Kallsyms;
use perfdata::{Ksymbol, PerfFile};

use crate::ksymbol_names::KsymbolNames;

/// Where user files are looked up: under `symfs` when given, and first in
/// perf's build-id cache (`$HOME/.debug`) for a recorded build-id.
pub fn user_code(symfs: Option<PathBuf>) -> UserCode {
    let build_id_dir = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".debug")).filter(|d| d.is_dir());
    UserCode { symfs, build_id_dir }
}

/// A kallsyms file read for an input: its path, its symbols (all kinds),
/// and how many of its lines were malformed.
pub struct InputKallsyms {
    pub path: PathBuf,
    pub symbols: Kallsyms,
    pub malformed: usize,
}

impl InputKallsyms {
    /// The input's kcore_dir/kallsyms, else `fallback`; none without either.
    pub fn read(file: &PerfFile, fallback: Option<&Path>) -> Result<Option<InputKallsyms>> {
        let path = file.kcore_dir().map(|d| d.join("kallsyms")).filter(|p| p.is_file()).or(fallback.map(Path::to_path_buf));
        let Some(path) = path else { return Ok(None) };
        let (symbols, malformed) = Kallsyms::load(&path).with_context(|| format!("reading symbols from {}", path.display()))?;
        Ok(Some(InputKallsyms { path, symbols, malformed }))
    }
}

/// One executable file mapping and the symbols of its file.
#[derive(Clone)]
struct UserMap {
    start: u64,
    end: u64,
    pgoff: u64,
    /// Index into `Symbolizer::files`.
    file: usize,
}

/// An ELF file's function symbols by virtual address, and its loadable
/// segments to turn file offsets into those addresses.
#[derive(Clone)]
struct UserFile {
    path: String,
    /// (vaddr, end, name), sorted.
    symbols: Vec<(u64, u64, String)>,
    /// (file offset, size in file, vaddr) per PT_LOAD.
    segments: Vec<(u64, u64, u64)>,
}

impl UserFile {
    /// The symbols of the file `user` opens for `path` (an ELF executable
    /// or shared object, with the recorded build-id if there is one).
    fn load(user: &UserCode, path: &str, build_id: Option<&[u8]>) -> Option<UserFile> {
        let file = user.open(path.as_bytes(), build_id).ok()?;
        let elf = object::File::parse(&file.map[..]).ok()?;
        let mut symbols: Vec<(u64, u64, String)> = elf
            .symbols()
            .chain(elf.dynamic_symbols())
            .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0 && !s.is_undefined())
            .filter_map(|s| Some((s.address(), s.address() + s.size(), s.name().ok()?.to_string())))
            .collect();
        symbols.sort();
        symbols.dedup_by_key(|s| s.0);
        // A symbol without a size reaches to the next one, as perf reads them.
        for i in 0..symbols.len() {
            if symbols[i].1 == symbols[i].0 {
                symbols[i].1 = symbols.get(i + 1).map_or(u64::MAX, |n| n.0);
            }
        }
        let segments = elf
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (off, size, s.address())
            })
            .collect();
        Some(UserFile { path: path.to_string(), symbols, segments })
    }

    /// The symbol covering file offset `off`.
    fn lookup(&self, off: u64) -> Option<(&str, u64)> {
        let &(seg_off, _, vaddr) = self.segments.iter().find(|(o, n, _)| (*o..o + n).contains(&off))?;
        let va = vaddr + (off - seg_off);
        let i = self.symbols.partition_point(|s| s.0 <= va).checked_sub(1)?;
        let (start, end, name) = &self.symbols[i];
        (va < *end).then(|| (name.as_str(), va - start))
    }
}

/// Resolves kernel addresses the way perf prints them (one per thread:
/// its lookup cache is not shared).
#[derive(Default)]
pub struct Symbolizer {
    kallsyms: Kallsyms,
    /// Code announced by KSYMBOL (OOL trampolines, BPF programs), over time.
    dynamic: KsymbolNames,
    /// Executable user mappings (one address space for all processes: where
    /// mappings overlap, the later one wins), sorted by start.
    user: Vec<UserMap>,
    files: Vec<UserFile>,
    /// Where the symbols came from, for the report.
    pub source: String,
    /// The last kallsyms symbol looked up: the addresses it covers and its
    /// index (one line after another mostly falls in the same function).
    last_kernel: Cell<(Range<u64>, usize)>,
    /// The kernel code the input holds (kcore's segments) and the code its
    /// KSYMBOL records announce at any time, sorted and merged; empty when unknown.
    /// perf has no map for a kernel address outside them.
    kernel_code: Vec<Range<u64>>,
}

impl Clone for Symbolizer {
    /// The same symbols, with an empty lookup cache.
    fn clone(&self) -> Symbolizer {
        Symbolizer {
            kallsyms: self.kallsyms.clone(),
            dynamic: self.dynamic.clone(),
            user: self.user.clone(),
            files: self.files.clone(),
            source: self.source.clone(),
            last_kernel: Cell::default(),
            kernel_code: self.kernel_code.clone(),
        }
    }
}

impl Symbolizer {
    /// Symbols from the input's kcore_dir/kallsyms, else `fallback`; never the host's /proc/kallsyms.
    pub fn for_input(file: &PerfFile, fallback: Option<&Path>) -> Result<Symbolizer> {
        Ok(Symbolizer::of_kallsyms(InputKallsyms::read(file, fallback)?.as_ref()))
    }

    /// Symbols from `kallsyms` (none without).
    pub fn of_kallsyms(kallsyms: Option<&InputKallsyms>) -> Symbolizer {
        let Some(k) = kallsyms else {
            return Symbolizer { source: "none (no kcore_dir/kallsyms and no --kallsyms)".into(), ..Default::default() };
        };
        // perf keeps only text, weak, data and bss symbols (symbol_type__filter).
        let kallsyms = Kallsyms::from_symbols(
            k.symbols.symbols().iter().filter(|s| matches!(s.kind.to_ascii_uppercase(), 'T' | 'W' | 'D' | 'B')).cloned().collect(),
        );
        let mut source = k.path.display().to_string();
        if k.malformed > 0 {
            source.push_str(&format!(" ({} malformed lines skipped)", k.malformed));
        }
        Symbolizer { kallsyms, source, ..Default::default() }
    }

    /// Adds the symbols of every executable file the input mapped (MMAP2
    /// with PROT_EXEC, MMAP without MAP_DATA) whose file `user` finds and
    /// accepts (see [`UserCode::open`]).
    pub fn add_user_mappings(&mut self, mappings: &[UserMapping<'_>], user: &UserCode) {
        let mut refused = std::collections::HashSet::new();
        for m in mappings {
            let (start, len, pgoff) = (m.addr, m.len, m.pgoff);
            let Ok(path) = std::str::from_utf8(m.name) else { continue };
            if refused.contains(path) {
                continue;
            }
            let file = match self.files.iter().position(|f| f.path == path) {
                Some(i) => i,
                None => match UserFile::load(user, path, m.build_id) {
                    Some(f) => {
                        self.files.push(f);
                        self.files.len() - 1
                    }
                    None => {
                        refused.insert(path);
                        continue;
                    }
                },
            };
            self.user.retain(|m| m.end <= start || m.start >= start.saturating_add(len));
            self.user.push(UserMap { start, end: start.saturating_add(len), pgoff, file });
            self.user.sort_by_key(|m| m.start);
        }
    }

    /// The kernel code the input holds, `ranges` (as perf maps it from kcore),
    /// and what its KSYMBOL records announce at any time, `ksymbols`: a kernel
    /// address outside all of them has no symbol and dso `[unknown]`.
    pub fn set_kernel_code(&mut self, ranges: impl IntoIterator<Item = Range<u64>>, ksymbols: &[Range<u64>]) {
        self.kernel_code = ranges.into_iter().filter(|r| r.start >> 63 == 1).collect();
        if self.kernel_code.is_empty() {
            return;
        }
        self.kernel_code.extend_from_slice(ksymbols);
        // Merged, so that one binary search finds the range holding an address.
        self.kernel_code.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<u64>> = Vec::with_capacity(self.kernel_code.len());
        for r in self.kernel_code.drain(..) {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        self.kernel_code = merged;
    }

    /// A kernel address in no code the input holds at `time`, when that is known.
    fn outside_kernel_code(&self, addr: u64, time: u64) -> bool {
        if addr >> 63 == 0 || self.kernel_code.is_empty() {
            return false;
        }
        let in_code = self.kernel_code.partition_point(|r| r.start <= addr).checked_sub(1).is_some_and(|i| addr < self.kernel_code[i].end);
        !in_code && self.dynamic.lookup(addr, time).is_none()
    }

    fn user_map(&self, addr: u64) -> Option<&UserMap> {
        let i = self.user.partition_point(|m| m.start <= addr).checked_sub(1)?;
        Some(&self.user[i]).filter(|m| addr < m.end)
    }

    /// perf's dso name for `addr`: the mapped file, `[kernel.kallsyms]`, or `[unknown]`.
    pub fn dso(&self, addr: u64) -> &str {
        match self.user_map(addr) {
            Some(m) => &self.files[m.file].path,
            None if addr >> 63 == 1 && !self.outside_kernel_code(addr, u64::MAX) => "[kernel.kallsyms]",
            None => "[unknown]",
        }
    }

    /// Applies a KSYMBOL record after those applied so far: registers or
    /// unregisters its range for [`Symbolizer::lookup`].
    pub fn apply(&mut self, k: &Ksymbol<'_>) {
        self.dynamic.apply(k);
    }

    /// Applies a KSYMBOL record from `time` on, for [`Symbolizer::lookup_at`]
    /// (as perf does while it decodes a trace).
    pub fn apply_at(&mut self, k: &Ksymbol<'_>, time: u64) {
        self.dynamic.apply_at(k, time);
    }

    /// The symbol covering `addr` after every KSYMBOL record applied, and the offset into it.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        self.lookup_at(addr, u64::MAX)
    }

    /// Whether [`Self::lookup_at`] gives the same for `addr` at every time
    /// (no KSYMBOL record may name it).
    pub fn same_at_all_times(&self, addr: u64) -> bool {
        !self.dynamic.may_cover(addr)
    }

    /// The symbol covering `addr` at `time`, and the offset into it.
    pub fn lookup_at(&self, addr: u64, time: u64) -> Option<(&str, u64)> {
        if let Some(m) = self.user_map(addr) {
            return self.files[m.file].lookup(addr - m.start + m.pgoff);
        }
        if let Some(named) = self.dynamic.lookup(addr, time) {
            return Some(named);
        }
        if self.outside_kernel_code(addr, time) {
            return None;
        }
        self.kernel_symbol(addr)
    }

    /// What `Kallsyms::lookup` gives, from the symbol looked up last when
    /// it still covers `addr`.
    fn kernel_symbol(&self, addr: u64) -> Option<(&str, u64)> {
        let symbols = self.kallsyms.symbols();
        let (covered, last) = self.last_kernel.take();
        let i = if covered.contains(&addr) {
            self.last_kernel.set((covered, last));
            last
        } else {
            let (i, covered) = self.kallsyms.covering(addr)?;
            self.last_kernel.set((covered, i));
            i
        };
        Some((symbols[i].name.as_str(), addr - symbols[i].addr))
    }

    /// `name+0xoff`, or an empty string when nothing covers `addr`.
    pub fn describe(&self, addr: u64) -> String {
        self.lookup(addr).map_or_else(String::new, |(name, off)| format!("{name}+{off:#x}"))
    }

    /// The bare symbol name covering `addr`, for kind rules that look at names.
    pub fn name(&self, addr: u64) -> Option<String> {
        self.lookup(addr).map(|(n, _)| n.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfdata::kcore::Symbol;

    /// Kernel look-ups through the last symbol give what `Kallsyms::lookup`
    /// gives, in order and at random, aliases and both ends included.
    #[test]
    fn kernel_lookups_through_the_last_symbol_are_kallsyms_lookups() {
        let mut rng = testkit::Rng(0x5e1f);
        let mut symbols = Vec::new();
        let mut addr = 0xffff_ffff_8100_0000u64;
        for n in 0..300 {
            let name = format!("f{n}");
            symbols.push(Symbol { addr, kind: 't', name, module: None });
            if n % 17 == 0 {
                symbols.push(Symbol { addr, kind: 't', name: format!("alias{n}"), module: None });
            }
            addr += 1 + rng.below(200);
        }
        symbols.push(Symbol { addr: u64::MAX - 3, kind: 't', name: "last".into(), module: None });
        let kallsyms = Kallsyms::from_symbols(symbols);
        let s = Symbolizer { kallsyms: kallsyms.clone(), ..Default::default() };
        let (lo, hi) = (0xffff_ffff_8100_0000u64 - 50, addr + 50);
        let walk = (lo..hi).step_by(7);
        let jumps = (0..5000).map(|_| lo + rng.below(hi - lo));
        for a in walk.chain(jumps).chain([0, 1, u64::MAX - 4, u64::MAX - 3, u64::MAX, lo]) {
            let want = kallsyms.lookup(a).map(|(sym, off)| (sym.name.as_str(), off));
            assert_eq!(s.lookup(a), want, "{a:#x}");
        }
    }

    /// With the kernel code known (kcore's segments), a kernel address
    /// outside it has no symbol and dso `[unknown]`, as perf prints it,
    /// unless KSYMBOL code covers it; inside it, kallsyms answers as before.
    #[test]
    fn kernel_addresses_outside_the_code_held_are_unknown() {
        let text = 0xffff_ffff_8100_0000u64;
        let kallsyms = Kallsyms::from_symbols(vec![Symbol { addr: text, kind: 't', name: "_text".into(), module: None }]);
        let mut s = Symbolizer { kallsyms, ..Default::default() };
        let outside = text + 0x1000_0000;
        assert_eq!((s.lookup(outside), s.dso(outside)), (Some(("_text", 0x1000_0000)), "[kernel.kallsyms]"), "code not known");
        s.kernel_code.push(text..text + 0x4000);
        assert_eq!((s.lookup(text + 0x3fff), s.dso(text + 0x3fff)), (Some(("_text", 0x3fff)), "[kernel.kallsyms]"));
        for a in [text - 1, text + 0x4000, outside] {
            assert_eq!((s.lookup(a), s.dso(a)), (None, "[unknown]"), "{a:#x}");
        }
        s.apply(&Ksymbol { addr: outside, len: 0x100, ksym_type: 1, flags: 0, name: b"bpf_prog" });
        assert_eq!((s.lookup(outside + 1), s.dso(outside + 1)), (Some(("bpf_prog", 1)), "[kernel.kallsyms]"));
    }
}
