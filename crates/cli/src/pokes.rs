//! `poketrace pokes`: the history of kernel code changes (TEXT_POKE) and of
//! out-of-image code (KSYMBOL), in time order, laid out like
//! `perf script --show-text-poke-events --ns`, plus what perf does not show:
//! old and new instructions, the kind of change, and a summary.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

use anyhow::Result;
use isa::{Arch, PokeKind};
use perfdata::{PerfFile, Record, RecordBody};
use serde_json::json;

use crate::dump::{byte_lines, sample_id_json};
use crate::hex::{plain, text};
use crate::symbols::Symbolizer;

/// Thread names over time, as perf's machine tracks them from COMM and FORK.
#[derive(Default)]
struct Threads {
    comm: HashMap<u32, String>,
}

impl Threads {
    fn observe(&mut self, r: &Record<'_>) {
        match &r.body {
            RecordBody::Comm(c) => {
                self.comm.insert(c.tid, text(c.comm));
            }
            RecordBody::Fork(f) => {
                if let Some(parent) = self.comm.get(&f.ptid).cloned() {
                    self.comm.entry(f.tid).or_insert(parent);
                }
            }
            _ => {}
        }
    }

    /// perf's name for a thread: its comm, `swapper` for the idle task, `:tid` when unknown.
    fn name(&self, tid: Option<u32>) -> String {
        match tid {
            Some(t) => self.comm.get(&t).cloned().unwrap_or_else(|| if t == 0 { "swapper".into() } else { format!(":{}", t as i32) }),
            None => ":-1".into(),
        }
    }
}

#[derive(Default)]
struct SiteSummary {
    sym: String,
    pokes: u64,
    kinds: BTreeMap<&'static str, u64>,
    first: Option<u64>,
    last: Option<u64>,
}

pub fn run(input: &Path, kallsyms: Option<&Path>, json: bool, out: &mut impl Write) -> Result<i32> {
    let file = PerfFile::open(input)?;
    let mut symbols = Symbolizer::for_input(&file, kallsyms)?;
    let arch = match file.features().arch.as_deref() {
        Some("aarch64" | "arm64") => Arch::Aarch64,
        _ => Arch::X86_64,
    };
    let mut threads = Threads::default();
    let mut sites: BTreeMap<u64, SiteSummary> = BTreeMap::new();
    let mut kinds: BTreeMap<&'static str, u64> = BTreeMap::new();
    let (mut n_pokes, mut n_ksyms, mut errors) = (0u64, 0u64, 0u64);
    let mut losses = perfdata::Losses::default();
    let mut sorted = file.sorted_records();
    for item in sorted.by_ref() {
        let r = match item {
            Ok(r) => r,
            Err(e) => {
                errors += 1;
                eprintln!("poketrace pokes: {e}");
                continue;
            }
        };
        threads.observe(&r);
        losses.observe(&r);
        let s = r.sample_id;
        match &r.body {
            RecordBody::TextPoke(p) => {
                n_pokes += 1;
                let sym = symbols.describe(p.addr);
                let kind = isa::classify_poke(arch, p.addr, p.old, p.new, symbols.name(p.addr).as_deref());
                *kinds.entry(kind.name()).or_default() += 1;
                let site = sites.entry(p.addr).or_default();
                site.sym.clone_from(&sym);
                site.pokes += 1;
                *site.kinds.entry(kind.name()).or_default() += 1;
                site.first = site.first.or(s.time);
                site.last = s.time.or(site.last);
                let old_insn = disasm(arch, p.addr, p.old);
                let new_insn = disasm(arch, p.addr, p.new);
                if json {
                    let fields = [
                        ("addr", json!(p.addr)),
                        ("sym", json!(sym)),
                        ("old_len", json!(p.old.len())),
                        ("new_len", json!(p.new.len())),
                        ("old", json!(plain(p.old))),
                        ("new", json!(plain(p.new))),
                        ("old_insn", json!(old_insn)),
                        ("new_insn", json!(new_insn)),
                        ("kind", json!(kind.name())),
                    ];
                    json_line(out, "TEXT_POKE", &r, &threads, fields)?;
                } else {
                    writeln!(
                        out,
                        "{}PERF_RECORD_TEXT_POKE {:x} {sym} old len {} new len {}",
                        line_prefix(&threads, &r),
                        p.addr,
                        p.old.len(),
                        p.new.len()
                    )?;
                    for l in byte_lines("Old bytes:", p.old).into_iter().chain(byte_lines("New bytes:", p.new)) {
                        writeln!(out, "            {l}")?;
                    }
                    if !p.old.is_empty() {
                        writeln!(out, "            Old insn:  {old_insn}")?;
                    }
                    if !p.new.is_empty() {
                        writeln!(out, "            New insn:  {new_insn}")?;
                    }
                    writeln!(out, "            Kind:      {}", describe_kind(kind, r.cpumode()))?;
                }
            }
            RecordBody::Ksymbol(k) => {
                n_ksyms += 1;
                symbols.apply(k);
                if json {
                    let fields = [
                        ("addr", json!(k.addr)),
                        ("len", json!(k.len)),
                        ("ksym_type", json!(k.ksym_type)),
                        ("flags", json!(k.flags)),
                        ("name", json!(text(k.name))),
                    ];
                    json_line(out, "KSYMBOL", &r, &threads, fields)?;
                } else {
                    writeln!(
                        out,
                        "{}PERF_RECORD_KSYMBOL addr {:x} len {} type {} flags {:#x} name {}",
                        line_prefix(&threads, &r),
                        k.addr,
                        k.len,
                        k.ksym_type,
                        k.flags,
                        text(k.name)
                    )?;
                }
            }
            _ => {}
        }
    }
    if losses.lost_records() > 0 {
        errors += 1;
        for line in losses.report(10) {
            eprintln!("poketrace pokes: {line}: text pokes may be missing");
        }
    }
    // Only an early flush is news: records below a round's flush were always delivered late.
    if sorted.early_flushes() > 0 && sorted.unordered_records() > 0 {
        errors += 1;
        eprintln!(
            "poketrace pokes: the time-order queue passed its limit of {} records {} times: {} records are listed after later ones",
            sorted.queue_limit(),
            sorted.early_flushes(),
            sorted.unordered_records()
        );
    }
    if !json {
        writeln!(out, "\n# {n_pokes} text pokes at {} sites, {n_ksyms} ksymbol records; symbols: {}", sites.len(), symbols.source)?;
        if !kinds.is_empty() {
            writeln!(out, "# by kind:")?;
            for (k, n) in &kinds {
                writeln!(out, "#   {k:<20} {n:>8}")?;
            }
            writeln!(out, "# by site:")?;
            for (addr, s) in &sites {
                let ks: Vec<String> = s.kinds.iter().map(|(k, n)| format!("{k} x{n}")).collect();
                writeln!(
                    out,
                    "#   {addr:016x} {:<40} {:>6} pokes  {}  time {}..{}",
                    s.sym,
                    s.pokes,
                    ks.join(", "),
                    time_text(s.first),
                    time_text(s.last)
                )?;
            }
        }
    }
    Ok(if errors > 0 { 1 } else { 0 })
}

/// One JSON Lines object: the record's name, who and when, then `fields`.
fn json_line<const N: usize>(
    out: &mut impl Write,
    record: &str,
    r: &Record<'_>,
    threads: &Threads,
    fields: [(&str, serde_json::Value); N],
) -> Result<()> {
    let mut m = serde_json::Map::new();
    m.insert("record".into(), json!(record));
    sample_id_json(&mut m, &r.sample_id);
    m.insert("comm".into(), json!(threads.name(r.sample_id.tid)));
    for (k, v) in fields {
        m.insert(k.into(), v);
    }
    serde_json::to_writer(&mut *out, &m)?;
    writeln!(out)?;
    Ok(())
}

/// perf script's `%16s %5d [%03d] %5lu.%09lu: `.
fn line_prefix(threads: &Threads, r: &Record<'_>) -> String {
    let s = &r.sample_id;
    let cpu = match s.cpu {
        Some(c) => format!("{:03}", c as i32),
        None => "-01".into(),
    };
    format!("{:>16} {:>5} [{cpu}] {:>15}: ", threads.name(s.tid), s.tid.map_or(-1, |t| t as i32), time_text(s.time))
}

fn time_text(t: Option<u64>) -> String {
    let t = t.unwrap_or(0);
    format!("{}.{:09}", t / 1_000_000_000, t % 1_000_000_000)
}

pub(crate) fn disasm(arch: Arch, addr: u64, bytes: &[u8]) -> String {
    match arch {
        Arch::X86_64 => isa::disassemble_x86_64_text(addr, bytes),
        Arch::Aarch64 => isa::disassemble_aarch64_text(addr, bytes),
    }
}

fn describe_kind(kind: PokeKind, cpumode: u16) -> String {
    let mut s = kind.name().to_string();
    if cpumode != perfdata::abi::misc::KERNEL {
        s.push_str(" (cpumode is not KERNEL: perf ignores this poke)");
    }
    s
}
