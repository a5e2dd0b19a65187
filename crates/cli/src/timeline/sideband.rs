//! One pass over the side-band records, in time order, before the trace:
//! the "code changes" track (an instant per TEXT_POKE), the "lost data"
//! tracks (LOST windows, damaged AUX records), and the KSYMBOL records that
//! name code during the decode.

use std::collections::BTreeMap;

use anyhow::Result;
use isa::Arch;
use perfdata::abi::aux_flag;
use perfdata::{Ksymbol, PerfFile, RecordBody};
use serde_json::json;

use super::tef::TefWriter;
use super::tracks;
use crate::hex::plain;
use crate::pokes::disasm;
use crate::symbols::Symbolizer;

/// A KSYMBOL record, owned, applied when the decode reaches its time.
pub struct KsymbolAt {
    pub time: u64,
    addr: u64,
    len: u32,
    ksym_type: u16,
    flags: u16,
    name: Vec<u8>,
}

impl KsymbolAt {
    pub fn apply(&self, symbols: &mut Symbolizer) {
        symbols.apply(&Ksymbol { addr: self.addr, len: self.len, ksym_type: self.ksym_type, flags: self.flags, name: &self.name });
    }
}

/// What the pass found.
#[derive(Default)]
pub struct Sideband {
    pub pokes: u64,
    pub ksymbols: Vec<KsymbolAt>,
    pub lost_records: u64,
    pub aux_damaged: u64,
    /// Records that could not be read.
    pub bad_records: u64,
}

/// A loss on a CPU's "lost data" track: a window, or an instant (`from` None).
struct Loss {
    from: Option<u64>,
    at: u64,
    what: String,
}

/// Writes the code-changes track and the lost-data tracks; keeps the KSYMBOLs.
pub fn read(file: &PerfFile, symbols: &mut Symbolizer, w: &mut TefWriter) -> Result<Sideband> {
    let arch = match file.features().arch.as_deref() {
        Some("aarch64" | "arm64") => Arch::Aarch64,
        _ => Arch::X86_64,
    };
    let mut sb = Sideband::default();
    let mut losses: BTreeMap<Option<u32>, Vec<Loss>> = BTreeMap::new();
    let mut last_time: BTreeMap<Option<u32>, u64> = BTreeMap::new();
    w.name_track(tracks::CODE, Some("text pokes"), Some("code changes"), Some(-3))?;
    for r in file.sorted_records() {
        let Ok(r) = r else {
            sb.bad_records += 1;
            continue;
        };
        let (cpu, time) = (r.sample_id.cpu, r.sample_id.time.unwrap_or(0));
        match &r.body {
            RecordBody::TextPoke(p) => {
                sb.pokes += 1;
                let sym = symbols.describe(p.addr);
                let kind = isa::classify_poke(arch, p.addr, p.old, p.new, symbols.name(p.addr).as_deref());
                let (old_insn, new_insn) = (disasm(arch, p.addr, p.old), disasm(arch, p.addr, p.new));
                let args = json!({
                    "addr": format!("{:#x}", p.addr), "time": time, "sym": sym, "kind": kind.name(), "cpu": cpu, "tid": r.sample_id.tid,
                    "old": plain(p.old), "new": plain(p.new), "old_insn": old_insn, "new_insn": new_insn,
                });
                let site = if sym.is_empty() { format!("{:#x}", p.addr) } else { sym };
                w.instant(tracks::CODE, time, &format!("{} {site}", kind.name()), "text_poke", &args)?;
            }
            RecordBody::Ksymbol(k) => {
                symbols.apply(k);
                let (addr, len, ksym_type, flags, name) = (k.addr, k.len, k.ksym_type, k.flags, k.name.to_vec());
                sb.ksymbols.push(KsymbolAt { time, addr, len, ksym_type, flags, name });
            }
            RecordBody::Lost(l) => {
                sb.lost_records += l.lost;
                let from = last_time.get(&cpu).copied();
                losses.entry(cpu).or_default().push(Loss { from: Some(from.unwrap_or(time)), at: time, what: format!("{} records lost", l.lost) });
            }
            RecordBody::Aux(a) if a.flags & (aux_flag::TRUNCATED | aux_flag::PARTIAL | aux_flag::COLLISION) != 0 => {
                sb.aux_damaged += 1;
                let what = [(aux_flag::TRUNCATED, "truncated"), (aux_flag::PARTIAL, "partial"), (aux_flag::COLLISION, "collision")]
                    .iter()
                    .filter(|(f, _)| a.flags & f != 0)
                    .map(|(_, n)| *n)
                    .collect::<Vec<_>>()
                    .join(", ");
                losses.entry(cpu).or_default().push(Loss { from: None, at: time, what: format!("AUX data {what}") });
            }
            _ => {}
        }
        if r.sample_id.time.is_some() {
            last_time.insert(cpu, time);
        }
    }
    for (cpu, list) in losses {
        let track = tracks::lost(cpu);
        let name = cpu.map_or("lost data".to_string(), |c| format!("lost data cpu {c}"));
        w.name_track(track, Some(&name), Some("decode"), Some(-2))?;
        for l in list {
            match l.from {
                Some(from) => {
                    w.begin(track, from, &l.what, "lost")?;
                    w.end(track, l.at, &l.what)?;
                }
                None => w.instant(track, l.at, &l.what, "lost", &json!({}))?,
            }
        }
    }
    Ok(sb)
}
