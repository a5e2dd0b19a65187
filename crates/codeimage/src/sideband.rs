//! What a perf.data's side-band says about code, read in one pass in perf's
//! delivery order: the TEXT_POKE changes and KSYMBOL ranges (for the
//! timeline), the executable user mappings (for the base code and symbols),
//! and what the recording lost.

use std::ops::Range;

use perfdata::abi::{ksymbol_type, misc};
use perfdata::{Ksymbol, Losses, PerfFile, RecordBody};

use crate::base::BaseImage;
use crate::timeline::{CodeTimeline, Poke, TimelineBuilder};
use crate::user::{mapping_of, BuildIds, UserMapping};

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

/// The side-band of a perf.data, read once: the changes wait for the base
/// code ([`Sideband::timeline`]), which the mappings help to make.
pub struct Sideband<'a> {
    /// Every executable file mapping, in file order (see [`crate::user_mappings`]).
    pub mappings: Vec<UserMapping<'a>>,
    /// The range of every KSYMBOL record, registered or not.
    pub ksymbols: Vec<Range<u64>>,
    /// Every KSYMBOL record and its time (0 when it has none), in time order.
    pub ksymbol_records: Vec<(u64, Ksymbol<'a>)>,
    /// The changes and named ranges, over no base yet.
    changes: TimelineBuilder,
    pokes: usize,
    non_kernel_pokes: usize,
    errors: Vec<String>,
    losses: Losses,
}

impl<'a> Sideband<'a> {
    /// Reads every record of `file` once, in time order as perf delivers
    /// them; `events` says how its TEXT_POKE records announce changes.
    pub fn read(file: &'a PerfFile, events: PokeEvents) -> Sideband<'a> {
        let build_ids = BuildIds::of(file);
        let mut changes = TimelineBuilder::default();
        let (mut pokes, mut non_kernel_pokes) = (0, 0);
        // Pairs: begins waiting for their end, by (addr, old, new).
        let mut open: OpenPairs = Default::default();
        let (mut errors, mut losses) = (Vec::new(), Losses::default());
        // Mappings by their place in the file: they are listed in file order.
        let mut mappings = Vec::new();
        let mut ksymbols = Vec::new();
        let mut ksymbol_records = Vec::new();
        for r in file.sorted_records() {
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    errors.push(e.to_string());
                    continue;
                }
            };
            losses.observe(&r);
            if let Some(m) = mapping_of(&r, &build_ids) {
                mappings.push(((r.offset, r.inner_offset), m));
            }
            let time = r.time().unwrap_or(0);
            match r.body {
                RecordBody::TextPoke(p) => {
                    pokes += 1;
                    non_kernel_pokes += (r.cpumode() != misc::KERNEL) as usize;
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
                    changes.poke(Poke { time, settled, addr: p.addr, old: p.old, new: p.new, cpu: r.sample_id.cpu });
                }
                RecordBody::Ksymbol(k) => {
                    ksymbols.push(k.addr..k.addr.saturating_add(k.len as u64));
                    ksymbol_records.push((time, k.clone()));
                    if k.flags & perfdata::abi::KSYMBOL_FLAG_UNREGISTER == 0 {
                        let kind = match k.ksym_type {
                            ksymbol_type::BPF => "BPF program",
                            ksymbol_type::OOL => "out-of-line code",
                            _ => "kernel symbol",
                        };
                        changes.name_range(k.addr, k.len as u64, format!("{kind} {}", String::from_utf8_lossy(k.name)));
                    }
                }
                _ => {}
            }
        }
        // A begin without its end: uncertain from then on.
        for ((addr, old, new), (time, cpu)) in open {
            errors.push(format!("change at {addr:#x} from time {time} has no end record"));
            changes.poke(Poke { time, settled: Some(u64::MAX), addr, old: &old, new: &new, cpu });
        }
        mappings.sort_by_key(|(at, _)| *at);
        let mappings = mappings.into_iter().map(|(_, m)| m).collect();
        Sideband { mappings, ksymbols, ksymbol_records, changes, pokes, non_kernel_pokes, errors, losses }
    }

    /// The changes over `base`, the code before any change.
    pub fn timeline(self, base: BaseImage) -> PerfTimeline {
        let Sideband { changes, pokes, non_kernel_pokes, errors, losses, .. } = self;
        PerfTimeline { timeline: changes.over(base).build(), pokes, non_kernel_pokes, errors, losses }
    }
}
