//! The profile files: BOLT's pre-aggregated data, llvm-profgen's
//! unsymbolized profile, each written whole or not at all (a temporary
//! file renamed over the output).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::text::Lines;

/// Counts by address pair, sorted by the pair.
pub type Sorted = Vec<((u64, u64), u64)>;

/// A profile at the consumer's addresses.
#[derive(Default)]
pub struct Mapped {
    pub branches: Sorted,
    pub ranges: Sorted,
    pub uncertain_branches: Sorted,
    pub uncertain_ranges: Sorted,
}

/// Writes `fill`'s bytes to `path` through `path.tmp`, renamed when complete.
pub fn atomically(path: &Path, fill: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let f = std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
        fill(&mut w)?;
        let f = w.into_inner().map_err(|e| e.into_error()).with_context(|| format!("writing {}", tmp.display()))?;
        f.sync_all().with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// BOLT's pre-aggregated branches and fall-throughs (`llvm-bolt -pa -p`):
/// `B from to count mispredicted`, `F start end count`, hex addresses
/// as BOLT takes them (the file's addresses: its offset from the load
/// address for a PIE).
pub fn bolt(w: &mut dyn Write, branches: &Sorted, ranges: &Sorted) -> Result<()> {
    let mut out = Lines::new(w);
    for &((from, to), n) in branches {
        out.text(b"B ").hex(from).text(b" ").hex(to).text(b" ").dec(n).text(b" 0").end()?;
    }
    for &((start, end), n) in ranges {
        out.text(b"F ").hex(start).text(b" ").hex(end).text(b" ").dec(n).end()?;
    }
    Ok(out.finish()?)
}

/// llvm-profgen's unsymbolized profile (`--unsymbolized-profile`): the
/// number of ranges, `start-end:count` lines, the number of branches,
/// `from->to:count` lines; hex offsets from `base` (llvm-profgen's
/// default `--use-offset`), decimal counts.
pub fn autofdo(w: &mut dyn Write, branches: &Sorted, ranges: &Sorted, base: u64) -> Result<()> {
    let mut out = Lines::new(w);
    out.dec(ranges.len() as u64).end()?;
    for &((start, end), n) in ranges {
        out.hex(start.wrapping_sub(base)).text(b"-").hex(end.wrapping_sub(base)).text(b":").dec(n).end()?;
    }
    out.dec(branches.len() as u64).end()?;
    for &((from, to), n) in branches {
        out.hex(from.wrapping_sub(base)).text(b"->").hex(to.wrapping_sub(base)).text(b":").dec(n).end()?;
    }
    Ok(out.finish()?)
}

/// The side file of what ran in uncertain instructions: a header of
/// comments (how many, why), then the branches and ranges in the
/// pre-aggregated format.
pub fn uncertain(w: &mut dyn Write, m: &Mapped) -> Result<()> {
    let sum = |s: &Sorted| s.iter().map(|e| e.1).sum::<u64>();
    writeln!(w, "# Counted apart from the profile: branches from, and ranges holding, instructions decoded")?;
    writeln!(w, "# where several code contents fit the trace (a code change inside a timing window).")?;
    writeln!(
        w,
        "# {} branches at {} pairs, {} ranges at {} pairs.",
        sum(&m.uncertain_branches),
        m.uncertain_branches.len(),
        sum(&m.uncertain_ranges),
        m.uncertain_ranges.len()
    )?;
    bolt(w, &m.uncertain_branches, &m.uncertain_ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write that fails part-way leaves the older file as it was and no
    /// temporary file; one that completes replaces it.
    #[test]
    fn a_profile_is_written_whole_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("poketrace-profile-write-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("p");
        std::fs::write(&out, "old").unwrap();
        let failed = atomically(&out, |w| {
            w.write_all(b"half")?;
            anyhow::bail!("disk full")
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "old");
        assert!(!dir.join("p.tmp").exists());
        atomically(&out, |w| Ok(w.write_all(b"new")?)).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "new");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
