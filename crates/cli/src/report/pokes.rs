//! The side-band of a report: every TEXT_POKE by site, kind and time (what
//! `pokes --json` lists), and the LOST and damaged-AUX records per CPU.

use std::collections::{BTreeMap, HashMap};

use isa::Arch;
use perfdata::abi::aux_flag;
use perfdata::{PerfFile, Record, RecordBody};

use crate::hex::plain;
use crate::pokes::disasm;
use crate::symbols::Symbolizer;

/// One code site and what happened to it.
pub struct Site {
    pub addr: u64,
    pub sym: String,
    pub pokes: u64,
    pub kinds: BTreeMap<&'static str, u64>,
    pub first: u64,
    pub last: u64,
}

/// One TEXT_POKE, by index into the tables of [`Pokes`].
pub struct Poke {
    pub site: u32,
    pub time: u64,
    pub kind: &'static str,
    pub cpu: Option<u32>,
    /// Index of "old → new" (bytes and instructions) in `Pokes::changes`.
    pub change: u32,
}

/// A loss: LOST records between two times, or an AUX record flagged damaged at one.
pub struct Loss {
    pub cpu: Option<u32>,
    pub from: u64,
    pub at: u64,
}

#[derive(Default)]
pub struct Pokes {
    pub sites: Vec<Site>,
    pub pokes: Vec<Poke>,
    pub kinds: BTreeMap<&'static str, u64>,
    /// Distinct changes, each stored once.
    pub changes: Vec<String>,
    pub losses: Vec<Loss>,
    pub bad_records: u64,
    /// First and last times of the session's events (trace starts, AUX
    /// data, pokes, ksymbols, losses, switches; not the synthesized records at time 0).
    pub span: Option<(u64, u64)>,
}

/// Builds [`Pokes`] from `file`'s records, given in time order.
pub struct PokesReader<'s> {
    arch: Arch,
    symbols: &'s mut Symbolizer,
    p: Pokes,
    site_of: HashMap<u64, u32>,
    change_of: HashMap<String, u32>,
    last_time: HashMap<Option<u32>, u64>,
}

impl<'s> PokesReader<'s> {
    pub fn new(file: &PerfFile, symbols: &'s mut Symbolizer) -> Self {
        let arch = match file.features().arch.as_deref() {
            Some("aarch64" | "arm64") => Arch::Aarch64,
            _ => Arch::X86_64,
        };
        PokesReader { arch, symbols, p: Pokes::default(), site_of: HashMap::new(), change_of: HashMap::new(), last_time: HashMap::new() }
    }

    /// Takes the next record that could be read, in time order.
    pub fn observe(&mut self, r: &Record<'_>) {
        let (arch, p) = (self.arch, &mut self.p);
        let (cpu, time) = (r.sample_id.cpu, r.sample_id.time);
        if let (true, Some(t)) = (crate::lines::in_session(r), time) {
            p.span = Some(p.span.map_or((t, t), |(a, b)| (a.min(t), b.max(t))));
        }
        let t = time.unwrap_or(0);
        match &r.body {
            RecordBody::TextPoke(k) => {
                let sym = self.symbols.describe(k.addr);
                let kind = isa::classify_poke(arch, k.addr, k.old, k.new, self.symbols.name(k.addr).as_deref()).name();
                *p.kinds.entry(kind).or_default() += 1;
                let site = *self.site_of.entry(k.addr).or_insert_with(|| {
                    p.sites.push(Site { addr: k.addr, sym: sym.clone(), pokes: 0, kinds: BTreeMap::new(), first: t, last: t });
                    (p.sites.len() - 1) as u32
                });
                let s = &mut p.sites[site as usize];
                s.sym = sym;
                s.pokes += 1;
                *s.kinds.entry(kind).or_default() += 1;
                s.last = t;
                let change = format!("{} ({}) → {} ({})", plain(k.old), disasm(arch, k.addr, k.old), plain(k.new), disasm(arch, k.addr, k.new));
                let next = p.changes.len() as u32;
                let change = *self.change_of.entry(change.clone()).or_insert_with(|| {
                    p.changes.push(change);
                    next
                });
                p.pokes.push(Poke { site, time: t, kind, cpu, change });
            }
            RecordBody::Ksymbol(k) => self.symbols.apply(k),
            RecordBody::Lost(_) => p.losses.push(Loss { cpu, from: self.last_time.get(&cpu).copied().unwrap_or(t), at: t }),
            RecordBody::Aux(a) if a.flags & (aux_flag::TRUNCATED | aux_flag::PARTIAL | aux_flag::COLLISION) != 0 => {
                p.losses.push(Loss { cpu, from: t, at: t })
            }
            _ => {}
        }
        if let Some(t) = time {
            self.last_time.insert(cpu, t);
        }
    }

    /// The side-band, with the count of records that could not be read.
    pub fn finish(self, bad_records: u64) -> Pokes {
        Pokes { bad_records, ..self.p }
    }
}
