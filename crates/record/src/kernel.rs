//! The running kernel's symbols, modules and code, saved as `DIR/kcore_dir/`
//! the way `perf record --kcore` saves them: a copy of the kernel text and of
//! the module text from /proc/kcore (not the whole of memory), kallsyms and
//! modules. Without a readable /proc/kcore the symbols and modules are kept,
//! and the code comes from `--vmlinux FILE` when given.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use object::{Object, ObjectSegment, ObjectSymbol, SegmentFlags};
use perfdata::kcore::{write_kcore_dir, Kallsyms, Machine, Segment};

use crate::error::{Error, Result};
use crate::summary::KernelCode;

/// A loaded module, from /proc/modules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Module {
    pub name: String,
    pub addr: u64,
    pub size: u64,
}

/// What was learnt about the running kernel and saved.
pub(crate) struct KernelSnapshot {
    /// `_text` and `_etext` from kallsyms, when addresses are visible.
    pub text: Option<(u64, u64)>,
    pub modules: Vec<Module>,
    pub code: KernelCode,
}

/// Reads kallsyms and modules, copies the kernel code, and writes them all
/// into `kcore_dir`. Problems that leave a usable recording become warnings.
pub(crate) fn snapshot(kcore_dir: &Path, vmlinux: Option<&Path>, warnings: &mut Vec<String>) -> Result<KernelSnapshot> {
    let kallsyms_text = std::fs::read_to_string("/proc/kallsyms").map_err(Error::io("/proc/kallsyms"))?;
    let modules_text = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    let (kallsyms, _) = Kallsyms::parse(&kallsyms_text);
    let text = match (kallsyms.address_of("_text"), kallsyms.address_of("_etext")) {
        (Some(start), Some(end)) if start != 0 && end > start => Some((start, end)),
        _ => None,
    };
    let modules: Vec<Module> = parse_modules(&modules_text);
    let machine = if cfg!(target_arch = "aarch64") { Machine::Aarch64 } else { Machine::X86_64 };
    let (segments, code) = match text {
        None => {
            let restrict = crate::sys::sysctl("/proc/sys/kernel/kptr_restrict").unwrap_or(-1);
            let reason = format!(
                "kallsyms shows no addresses (kernel.kptr_restrict={restrict}; run as root, or with CAP_SYSLOG and \
                 kptr_restrict <= 1)"
            );
            (Vec::new(), KernelCode::None { reason })
        }
        Some(text) => match copy_kcore(text, &modules) {
            Ok(segments) => {
                let bytes = segments.iter().map(|s| s.bytes.len() as u64).sum();
                let n = segments.len();
                (segments, KernelCode::Kcore { segments: n, bytes })
            }
            Err(reason) => match vmlinux {
                Some(path) => {
                    let segments = vmlinux_segments(path, text.0, warnings)?;
                    let bytes = segments.iter().map(|s| s.bytes.len() as u64).sum();
                    warnings.push(format!("kernel code not copied: {reason}; using {} instead", path.display()));
                    (segments, KernelCode::Vmlinux { path: path.to_path_buf(), bytes })
                }
                None => (Vec::new(), KernelCode::None { reason }),
            },
        },
    };
    if let KernelCode::None { reason } = &code {
        warnings.push(format!(
            "kernel code not saved: {reason}; kcore_dir keeps kallsyms and modules; pass --vmlinux FILE to save code from \
             the kernel's ELF image"
        ));
    }
    write_kcore_dir(kcore_dir, machine, &segments, &kallsyms_text, &modules_text)?;
    Ok(KernelSnapshot { text, modules, code })
}

/// `/proc/modules` lines: `name size refcount deps state addr [taint]`.
fn parse_modules(text: &str) -> Vec<Module> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let addr = u64::from_str_radix(f.get(5)?.trim_start_matches("0x"), 16).ok()?;
            Some(Module { name: f[0].to_string(), size: f[1].parse().ok()?, addr })
        })
        .collect()
}

/// The kernel text `[_text, _etext)` and each module's range, read from
/// /proc/kcore. The error says why not, and what to do.
fn copy_kcore(text: (u64, u64), modules: &[Module]) -> std::result::Result<Vec<Segment>, String> {
    let path = "/proc/kcore";
    let file = File::open(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => "no /proc/kcore (the kernel is built without CONFIG_PROC_KCORE)".to_string(),
        Some(libc::EPERM | libc::EACCES) => match crate::sys::lockdown() {
            Some(mode) => format!("/proc/kcore: {e}: the kernel is locked down ({mode}), which forbids it"),
            None => format!("/proc/kcore: {e}: reading it needs root (CAP_SYS_RAWIO)"),
        },
        _ => format!("/proc/kcore: {e}"),
    })?;
    let loads = kcore_loads(&file).map_err(|e| format!("/proc/kcore: {e}"))?;
    let page = 4096u64;
    let mut ranges = vec![(text.0 & !(page - 1), (text.1 + page - 1) & !(page - 1))];
    ranges.extend(modules.iter().filter(|m| m.addr != 0 && m.size != 0).map(|m| (m.addr & !(page - 1), (m.addr + m.size + page - 1) & !(page - 1))));
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (s, e) in ranges {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    let mut segments = Vec::new();
    for (start, end) in merged {
        let mut at = start;
        while at < end {
            let Some(&(vaddr, offset, size)) = loads.iter().find(|&&(v, _, s)| at >= v && at < v + s) else {
                // not covered by kcore: skip to the next segment that is
                match loads.iter().map(|&(v, _, _)| v).filter(|&v| v > at && v < end).min() {
                    Some(next) => {
                        at = next;
                        continue;
                    }
                    None => break,
                }
            };
            let stop = end.min(vaddr + size);
            let mut bytes = vec![0u8; (stop - at) as usize];
            file.read_exact_at(&mut bytes, offset + (at - vaddr)).map_err(|e| format!("/proc/kcore: reading {:#x}..{stop:#x}: {e}", at))?;
            segments.push(Segment { vaddr: at, bytes });
            at = stop;
        }
    }
    if !segments.iter().any(|s| s.vaddr <= text.0 && text.0 < s.vaddr + s.bytes.len() as u64) {
        return Err(format!("/proc/kcore has no segment holding _text at {:#x}", text.0));
    }
    Ok(segments)
}

/// The PT_LOAD segments of /proc/kcore: (vaddr, file offset, size).
fn kcore_loads(file: &File) -> std::io::Result<Vec<(u64, u64, u64)>> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut eh = [0u8; 64];
    file.read_exact_at(&mut eh, 0)?;
    if &eh[..4] != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return Err(bad("not a little-endian ELF64 core file"));
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
    let (phoff, phentsize, phnum) = (u64_at(&eh, 32), u16_at(&eh, 54) as usize, u16_at(&eh, 56) as usize);
    if phentsize < 56 || phnum == 0xffff {
        return Err(bad("unexpected program header table"));
    }
    let mut ph = vec![0u8; phentsize * phnum];
    file.read_exact_at(&mut ph, phoff)?;
    Ok(ph
        .chunks_exact(phentsize)
        .filter(|p| u32::from_le_bytes([p[0], p[1], p[2], p[3]]) == 1)
        .map(|p| (u64_at(p, 16), u64_at(p, 8), u64_at(p, 32)))
        .filter(|&(_, _, size)| size > 0)
        .collect())
}

/// The executable PT_LOAD segments of a vmlinux, moved by the KASLR offset:
/// the running `_text` minus the ELF's `_text` symbol, or its first
/// executable segment when it has no symbols (Debian's vmlinuz).
fn vmlinux_segments(path: &Path, running_text: u64, warnings: &mut Vec<String>) -> Result<Vec<Segment>> {
    let data = std::fs::read(path).map_err(Error::io(path))?;
    let bad = |e: object::read::Error| Error::Environment(format!("{}: not an ELF file the kernel runs: {e}", path.display()));
    let elf = object::File::parse(&*data).map_err(bad)?;
    let exec: Vec<_> = elf.segments().filter(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0)).collect();
    let link_text = elf
        .symbols()
        .find(|s| s.name() == Ok("_text"))
        .map(|s| s.address())
        .or_else(|| exec.iter().map(|s| s.address()).min())
        .ok_or_else(|| Error::Environment(format!("{}: no executable segment", path.display())))?;
    if let (Ok(Some(file_id)), Some(running_id)) = (elf.build_id(), running_build_id()) {
        if file_id != running_id.as_slice() {
            warnings.push(format!("{} is not the running kernel: its build id differs", path.display()));
        }
    }
    let slide = running_text.wrapping_sub(link_text);
    let mut segments = Vec::new();
    for s in exec {
        let bytes = s.data().map_err(bad)?;
        if !bytes.is_empty() {
            segments.push(Segment { vaddr: s.address().wrapping_add(slide), bytes: bytes.to_vec() });
        }
    }
    Ok(segments)
}

/// The running kernel's GNU build id, from the ELF notes in /sys/kernel/notes.
fn running_build_id() -> Option<Vec<u8>> {
    let notes = std::fs::read("/sys/kernel/notes").ok()?;
    let mut at = 0;
    while at + 12 <= notes.len() {
        let word = |i: usize| u32::from_le_bytes(notes[i..i + 4].try_into().unwrap_or_default()) as usize;
        let (namesz, descsz, kind) = (word(at), word(at + 4), word(at + 8));
        let name_at = at + 12;
        let desc_at = name_at + namesz.div_ceil(4) * 4;
        let next = desc_at + descsz.div_ceil(4) * 4;
        if next > notes.len() {
            return None;
        }
        if kind == 3 && notes[name_at..name_at + namesz].starts_with(b"GNU") {
            return Some(notes[desc_at..desc_at + descsz].to_vec());
        }
        at = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_lines() {
        let text = "virtio_blk 24576 0 - Live 0xffffffffc0210000\nvirtio 16384 2 virtio_blk,virtio_pci, Live 0xffffffffc01f0000 (E)\nbad line\n";
        assert_eq!(
            parse_modules(text),
            vec![
                Module { name: "virtio_blk".into(), addr: 0xffff_ffff_c021_0000, size: 24576 },
                Module { name: "virtio".into(), addr: 0xffff_ffff_c01f_0000, size: 16384 },
            ]
        );
    }
}
