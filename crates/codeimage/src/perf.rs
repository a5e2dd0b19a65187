//! Building a timeline from a perf.data file or directory.

use std::collections::HashMap;
use std::sync::Arc;

use perfdata::abi::{ksymbol_type, misc};
use perfdata::mapped::MappedFile;
use perfdata::{Losses, PerfFile, RecordBody};

use crate::base::BaseImage;
use crate::error::Result;
use crate::timeline::{CodeTimeline, Poke, TimelineBuilder};
use crate::user::{user_mappings, UserCode, UserReport};

/// Pair begins waiting for their end: (addr, old, new) -> (time, cpu).
type OpenPairs = std::collections::HashMap<(u64, Vec<u8>, Vec<u8>), (u64, Option<u32>)>;

/// A timeline built from perf.data, with what was read and what was not.
pub struct PerfTimeline {
    pub timeline: CodeTimeline,
    /// TEXT_POKE records applied.
    pub pokes: usize,
    /// TEXT_POKE records whose cpumode is not KERNEL (perf ignores them; they are applied here and counted).
    pub non_kernel_pokes: usize,
    /// Records that could not be read (their errors).
    pub errors: Vec<String>,
    /// What the file says it lost: pokes may be missing in these windows.
    pub losses: Losses,
}

/// How the TEXT_POKE records of a file announce changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PokeEvents {
    /// One record per change, the new bytes holding from its time (Linux x86).
    Single,
    /// A begin/end pair per change: two records with the same address and
    /// bytes; the content is uncertain between them (the Arm PRE/POST proposal).
    Pairs,
}

/// Base code from the directory's `kcore_dir/kcore` (when there is one) plus
/// `extra` (vmlinux, modules, dumps), and every TEXT_POKE in time order.
/// KSYMBOL OOL and BPF ranges name the code they announce.
pub fn from_perf_data(file: &PerfFile, extra: BaseImage) -> Result<PerfTimeline> {
    from_perf_data_with(file, extra, PokeEvents::Single)
}

/// [`from_perf_data`] for a given way of announcing changes.
pub fn from_perf_data_with(file: &PerfFile, mut extra: BaseImage, events: PokeEvents) -> Result<PerfTimeline> {
    add_base(file, &mut extra)?;
    over_base(file, extra, events)
}

/// Every TEXT_POKE of `file` in time order over `base`, the code before any
/// change (as [`add_base`] makes it, for callers that need it on its own too),
/// with the ranges KSYMBOL records name.
pub fn over_base(file: &PerfFile, base: BaseImage, events: PokeEvents) -> Result<PerfTimeline> {
    let mut b = TimelineBuilder::new(base);
    let (mut pokes, mut non_kernel) = (0, 0);
    // Pairs: begins waiting for their end, by (addr, old, new).
    let mut open: OpenPairs = Default::default();
    let mut errors = Vec::new();
    let mut losses = Losses::default();
    for r in file.sorted_records() {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                errors.push(e.to_string());
                continue;
            }
        };
        losses.observe(&r);
        match r.body {
            RecordBody::TextPoke(p) => {
                pokes += 1;
                non_kernel += (r.cpumode() != misc::KERNEL) as usize;
                let time = r.time().unwrap_or(0);
                let (time, settled) = match events {
                    PokeEvents::Single => (time, None),
                    PokeEvents::Pairs => match open.remove(&(p.addr, p.old.to_vec(), p.new.to_vec())) {
                        Some((begin, _)) => (begin, Some(time)),
                        None => {
                            open.insert((p.addr, p.old.to_vec(), p.new.to_vec()), (time, r.sample_id.cpu));
                            continue;
                        }
                    },
                };
                b.poke(Poke { time, settled, addr: p.addr, old: p.old, new: p.new, cpu: r.sample_id.cpu });
            }
            RecordBody::Ksymbol(k) if k.flags & perfdata::abi::KSYMBOL_FLAG_UNREGISTER == 0 => {
                let kind = match k.ksym_type {
                    ksymbol_type::BPF => "BPF program",
                    ksymbol_type::OOL => "out-of-line code",
                    _ => "kernel symbol",
                };
                b.name_range(k.addr, k.len as u64, format!("{kind} {}", String::from_utf8_lossy(k.name)));
            }
            _ => {}
        }
    }
    // A begin without its end: uncertain from then on.
    for ((addr, old, new), (time, cpu)) in open {
        errors.push(format!("change at {addr:#x} from time {time} has no end record"));
        b.poke(Poke { time, settled: Some(u64::MAX), addr, old: &old, new: &new, cpu });
    }
    Ok(PerfTimeline { timeline: b.build(), pokes, non_kernel_pokes: non_kernel, errors, losses })
}

/// The code of a perf.data before any change: `kcore_dir/kcore` and the
/// executable file mappings of user programs (looked up as
/// [`UserCode::default`] does), added to `base`.
pub fn add_base(file: &PerfFile, base: &mut BaseImage) -> Result<()> {
    add_base_with(file, base, &UserCode::default()).map(drop)
}

/// [`add_base`] with user files looked up as `user` says; returns what
/// became of the user mappings.
pub fn add_base_with(file: &PerfFile, base: &mut BaseImage, user: &UserCode) -> Result<UserReport> {
    if let Some(dir) = file.kcore_dir() {
        let kcore = dir.join("kcore");
        if kcore.is_file() {
            base.add_elf(&kcore)?;
        }
    }
    Ok(add_user_mappings(file, base, user))
}

/// A user file as MMAP records name it: its path and recorded build-id.
type FileKey<'a> = (&'a [u8], Option<&'a [u8]>);

/// User code: every executable file mapping whose file passes
/// [`UserCode::open`] is added as the kernel mapped it, file bytes from
/// `pgoff` at `addr`. One address space for all processes: where mappings
/// of different processes overlap, the first one wins (and is listed in
/// [`BaseImage::overlaps`]).
fn add_user_mappings(file: &PerfFile, base: &mut BaseImage, user: &UserCode) -> UserReport {
    let mut report = UserReport::default();
    let mut opened: HashMap<FileKey<'_>, Option<Arc<MappedFile>>> = HashMap::new();
    for m in user_mappings(file) {
        let map = opened.entry((m.name, m.build_id)).or_insert_with(|| match user.open(m.name, m.build_id) {
            Ok(f) => Some(f.map),
            Err(why) => {
                report.refuse(m.name, why);
                None
            }
        });
        let Some(map) = map else { continue };
        let avail = (map.len() as u64).saturating_sub(m.pgoff);
        if avail > 0 {
            // A mapping whose file changed since recording: skip what does not fit.
            let name = String::from_utf8_lossy(m.name).rsplit('/').next().unwrap_or_default().to_string();
            base.add_mapped(map.clone(), m.pgoff as usize, m.len.min(avail) as usize, m.addr, name);
            report.added += 1;
        }
    }
    report
}
