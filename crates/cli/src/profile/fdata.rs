//! BOLT's `.fdata`, as perf2bolt writes it from branch records: each
//! taken branch, and each fall-through range as the edges it runs along
//! between the basic blocks of its function, as
//! `1 FUNC OFFSET 1 FUNC OFFSET MISPREDICTED COUNT` (hex offsets from the
//! functions' symbols).

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use anyhow::Result;
use isa::{BranchClass, KernelIdioms};

use super::space::{Binary, Function};
use super::write::Mapped;

/// A function's instruction starts and basic-block starts, decoded from
/// its first byte on.
struct Blocks {
    insns: Vec<u64>,
    leaders: Vec<u64>,
}

impl Blocks {
    /// A block starts at the function's entry, at each target of a direct
    /// jump inside it, and after each instruction that does not fall
    /// through to the next (calls do).
    fn of(binary: &Binary, f: &Function) -> Blocks {
        let (mut insns, mut leaders) = (Vec::new(), vec![f.start]);
        let idioms = KernelIdioms::default();
        let mut at = f.start;
        while at < f.end {
            let bytes = binary.bytes_at(at);
            let bytes = &bytes[..bytes.len().min((f.end - at) as usize).min(16)];
            let Ok(insn) = isa::classify_x86_64(at, bytes, &idioms) else { break };
            insns.push(at);
            let next = at + u64::from(insn.len);
            match insn.class {
                BranchClass::CondBranch | BranchClass::DirectJump => {
                    leaders.extend(insn.target.filter(|t| (f.start..f.end).contains(t)));
                    leaders.push(next);
                }
                BranchClass::IndirectJump | BranchClass::Return | BranchClass::FarTransfer | BranchClass::Trap => leaders.push(next),
                _ => {}
            }
            at = next;
        }
        leaders.retain(|&l| l < f.end);
        leaders.sort_unstable();
        leaders.dedup();
        Blocks { insns, leaders }
    }

    /// The fall-through edges a straight run from `start` to `end` takes:
    /// (last instruction of a block, start of the next).
    fn edges(&self, start: u64, end: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let from = self.leaders.partition_point(|&l| l <= start);
        let to = self.leaders.partition_point(|&l| l <= end);
        self.leaders[from..to.max(from)].iter().filter_map(move |&l| {
            let i = self.insns.partition_point(|&a| a < l).checked_sub(1)?;
            Some((self.insns[i], l))
        })
    }
}

/// `m`'s branches and ranges inside `binary`'s functions as fdata lines,
/// sorted; counts of the same edge added up.
pub fn write(w: &mut dyn Write, binary: &Binary, m: &Mapped) -> Result<()> {
    let mut blocks: HashMap<u64, Blocks> = HashMap::new();
    let mut edges: BTreeMap<(&str, u64, &str, u64), u64> = BTreeMap::new();
    let idioms = KernelIdioms::default();
    for &((from, to), n) in &m.branches {
        // perf2bolt leaves returns out: it knows where they go from the calls.
        let bytes = binary.bytes_at(from);
        if isa::classify_x86_64(from, &bytes[..bytes.len().min(16)], &idioms).is_ok_and(|i| i.class == BranchClass::Return) {
            continue;
        }
        if let (Some(f), Some(g)) = (binary.function(from), binary.function(to)) {
            *edges.entry((&f.name, from - f.start, &g.name, to - g.start)).or_default() += n;
        }
    }
    for &((start, end), n) in &m.ranges {
        let Some(f) = binary.function(start) else { continue };
        if end < start || end >= f.end {
            continue;
        }
        let b = blocks.entry(f.start).or_insert_with(|| Blocks::of(binary, f));
        for (a, l) in b.edges(start, end) {
            *edges.entry((&f.name, a - f.start, &f.name, l - f.start)).or_default() += n;
        }
    }
    for ((f, a, g, b), n) in edges {
        writeln!(w, "1 {f} {a:x} 1 {g} {b:x} 0 {n}")?;
    }
    Ok(())
}
