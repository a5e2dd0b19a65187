//! What a perf.data's side-band says about code, read in one pass in perf's
//! delivery order: the TEXT_POKE changes and KSYMBOL ranges (for the
//! timeline), the executable user mappings (for the base code and symbols),
//! and what the recording lost.

use std::ops::Range;

use perfdata::abi::{ksymbol_type, misc};
use perfdata::{Ksymbol, Losses, PerfFile, Record, RecordBody};

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

/// A [`Sideband`] being read, one record at a time in perf's delivery
/// order: for a caller that walks the records for more than the side-band.
pub struct SidebandReader<'a> {
    events: PokeEvents,
    build_ids: BuildIds<'a>,
    /// Pairs: begins waiting for their end, by (addr, old, new).
    open: OpenPairs,
    /// Mappings by their place in the file: they are listed in file order.
    mappings: Vec<((u64, Option<u64>), UserMapping<'a>)>,
    ksymbols: Vec<Range<u64>>,
    ksymbol_records: Vec<(u64, Ksymbol<'a>)>,
    changes: TimelineBuilder,
    pokes: usize,
    non_kernel_pokes: usize,
    losses: Losses,
}

impl<'a> SidebandReader<'a> {
    /// `events` says how the TEXT_POKE records of `file` announce changes.
    pub fn new(file: &'a PerfFile, events: PokeEvents) -> SidebandReader<'a> {
        SidebandReader {
            events,
            build_ids: BuildIds::of(file),
            open: Default::default(),
            mappings: Vec::new(),
            ksymbols: Vec::new(),
            ksymbol_records: Vec::new(),
            changes: TimelineBuilder::default(),
            pokes: 0,
            non_kernel_pokes: 0,
            losses: Losses::default(),
        }
    }

    /// Takes the next record in perf's delivery order (time order).
    pub fn observe(&mut self, r: &Record<'a>) {
        self.losses.observe(r);
        if let Some(m) = mapping_of(r, &self.build_ids) {
            self.mappings.push(((r.offset, r.inner_offset), m));
        }
        let time = r.time().unwrap_or(0);
        match &r.body {
            RecordBody::TextPoke(p) => {
                self.pokes += 1;
                self.non_kernel_pokes += (r.cpumode() != misc::KERNEL) as usize;
                let (time, settled) = match self.events {
                    PokeEvents::Single => (time, None),
                    PokeEvents::Pairs => match self.open.remove(&(p.addr, p.old.to_vec(), p.new.to_vec())) {
                        Some((begin, _)) => (begin, Some(time)),
                        None => {
                            self.open.insert((p.addr, p.old.to_vec(), p.new.to_vec()), (time, r.sample_id.cpu));
                            return;
                        }
                    },
                };
                self.changes.poke(Poke { time, settled, addr: p.addr, old: p.old, new: p.new, cpu: r.sample_id.cpu });
            }
            RecordBody::Ksymbol(k) => {
                self.ksymbols.push(k.addr..k.addr.saturating_add(k.len as u64));
                self.ksymbol_records.push((time, k.clone()));
                if k.flags & perfdata::abi::KSYMBOL_FLAG_UNREGISTER == 0 {
                    let kind = match k.ksym_type {
                        ksymbol_type::BPF => "BPF program",
                        ksymbol_type::OOL => "out-of-line code",
                        _ => "kernel symbol",
                    };
                    self.changes.name_range(k.addr, k.len as u64, format!("{kind} {}", String::from_utf8_lossy(k.name)));
                }
            }
            _ => {}
        }
    }

    /// The side-band of every record observed; `unreadable` are the errors
    /// of the records that could not be read, in file order.
    pub fn finish(self, unreadable: Vec<String>) -> Sideband<'a> {
        let SidebandReader { open, mut mappings, ksymbols, ksymbol_records, mut changes, pokes, non_kernel_pokes, losses, .. } = self;
        let mut errors = unreadable;
        // A begin without its end: uncertain from then on.
        for ((addr, old, new), (time, cpu)) in open {
            errors.push(format!("change at {addr:#x} from time {time} has no end record"));
            changes.poke(Poke { time, settled: Some(u64::MAX), addr, old: &old, new: &new, cpu });
        }
        mappings.sort_by_key(|(at, _)| *at);
        let mappings = mappings.into_iter().map(|(_, m)| m).collect();
        Sideband { mappings, ksymbols, ksymbol_records, changes, pokes, non_kernel_pokes, errors, losses }
    }
}

impl<'a> Sideband<'a> {
    /// Reads every record of `file` once, in time order as perf delivers
    /// them; `events` says how its TEXT_POKE records announce changes.
    pub fn read(file: &'a PerfFile, events: PokeEvents) -> Sideband<'a> {
        let mut reader = SidebandReader::new(file, events);
        let mut unreadable = Vec::new();
        for r in file.sorted_records() {
            match r {
                Ok(r) => reader.observe(&r),
                Err(e) => unreadable.push(e.to_string()),
            }
        }
        reader.finish(unreadable)
    }

    /// The changes over `base`, the code before any change.
    pub fn timeline(self, base: BaseImage) -> PerfTimeline {
        let Sideband { changes, pokes, non_kernel_pokes, errors, losses, .. } = self;
        PerfTimeline { timeline: changes.over(base).build(), pokes, non_kernel_pokes, errors, losses }
    }
}
