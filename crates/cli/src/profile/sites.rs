//! For a kernel profile, the code the trace saw patched that profile
//! consumers rewrite from the kernel's own tables (jump labels, static
//! calls): each site, its kind, how often it changed, and how often it ran
//! as a taken branch and as straight-line code.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;
use codeimage::CodeTimeline;
use isa::PokeKind;

use super::write::Mapped;
use crate::symbols::Symbolizer;

/// A patched site: its kind and how many changes it had.
struct Site {
    kind: PokeKind,
    changes: u64,
}

/// The jump-label and static-call sites among `tl`'s changes.
fn patched(tl: &CodeTimeline, arch: isa::Arch, symbols: &Symbolizer) -> BTreeMap<u64, Site> {
    let mut sites: BTreeMap<u64, Site> = BTreeMap::new();
    for p in tl.pokes() {
        let kind = isa::classify_poke(arch, p.addr, tl.old_bytes(p), tl.new_bytes(p), symbols.name(p.addr).as_deref());
        if matches!(kind, PokeKind::JumpLabel | PokeKind::StaticCall | PokeKind::JccRel32 | PokeKind::Ftrace) {
            sites.entry(p.addr).or_insert(Site { kind, changes: 0 }).changes += 1;
        }
    }
    sites
}

/// Writes the site list: a comment header, then `ADDRESS SYMBOL KIND
/// CHANGES TAKEN STRAIGHT` a line (taken: branches from the site; straight:
/// fall-through ranges over it); returns how many sites.
pub fn write(w: &mut dyn Write, tl: &CodeTimeline, arch: isa::Arch, symbols: &Symbolizer, m: &Mapped) -> Result<usize> {
    let sites = patched(tl, arch, symbols);
    let addrs: Vec<u64> = sites.keys().copied().collect();
    let mut taken = vec![0u64; addrs.len()];
    let mut straight = vec![0u64; addrs.len()];
    for &((from, _), n) in &m.branches {
        if let Ok(i) = addrs.binary_search(&from) {
            taken[i] += n;
        }
    }
    for &((start, end), n) in &m.ranges {
        let (first, past) = (addrs.partition_point(|&a| a < start), addrs.partition_point(|&a| a < end));
        straight[first..past.max(first)].iter_mut().for_each(|c| *c += n);
    }
    writeln!(w, "# Kernel code patched while the trace ran, at sites a profile consumer rewrites itself")?;
    writeln!(w, "# (jump labels, static calls; ftrace: NOP/CALL sites, static calls among them). Counted as it ran:")?;
    writeln!(w, "# taken = runs as a taken branch, straight = runs inside a fall-through range.")?;
    writeln!(w, "# address symbol kind changes taken straight")?;
    for (i, (addr, s)) in sites.iter().enumerate() {
        writeln!(w, "{addr:x} {} {} {} {} {}", symbols.describe(*addr).replace(' ', "_"), s.kind.name(), s.changes, taken[i], straight[i])?;
    }
    Ok(sites.len())
}
