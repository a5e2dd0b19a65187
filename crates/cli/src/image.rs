//! `poketrace image`: the code at an address at a moment, or its whole history.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use codeimage::{BaseImage, CodeTimeline, Read, Time};
use isa::Arch;
use perfdata::PerfFile;
use serde_json::{json, Value};

use crate::hex::{plain, spaced};
use crate::symbols::Symbolizer;

pub struct Args {
    pub input: PathBuf,
    pub at: Option<String>,
    pub history: Option<String>,
    pub addr: Option<String>,
    pub len: usize,
    pub vmlinux: Vec<PathBuf>,
    /// Where the files of user mappings are looked up.
    pub user: codeimage::UserCode,
    pub json: bool,
}

pub fn run(a: &Args, out: &mut impl Write) -> Result<i32> {
    let file = PerfFile::open(&a.input)?;
    let mut extra = BaseImage::new();
    for v in &a.vmlinux {
        extra.add_elf(v)?;
    }
    if let Some(refused) = codeimage::add_base_with(&file, &mut extra, &a.user)?.summary() {
        eprintln!("poketrace image: {refused}");
    }
    let built = codeimage::over_base(&file, extra, codeimage::PokeEvents::Single)?;
    for e in &built.errors {
        eprintln!("poketrace image: {e}");
    }
    let base = built.timeline.base();
    if let Some(overlaps) = base.overlap_summary() {
        eprintln!("poketrace image: {overlaps}");
    }
    for (start, bytes, name) in &base.clipped {
        eprintln!("poketrace image: {name} at {start:#x}: {bytes} bytes past the top of the address space dropped");
    }
    let symbols = Symbolizer::for_input(&file, None)?;
    let arch = match file.features().arch.as_deref() {
        Some("aarch64" | "arm64") => Arch::Aarch64,
        _ => Arch::X86_64,
    };
    let tl = &built.timeline;
    let view = View { tl, arch, symbols: &symbols };
    let before = match (&a.at, &a.history, &a.addr) {
        (Some(t), None, Some(addr)) => {
            let t = parse_time(t)?;
            view.at(out, t, parse_addr(addr, &file)?, a.len, a.json)?;
            t
        }
        (None, Some(addr), None) => {
            view.history(out, parse_addr(addr, &file)?, a.json)?;
            Time::MAX
        }
        _ => bail!("give either --at TIME ADDR [LEN] or --history ADDR"),
    };
    let lost = report_losses(&built.losses, before);
    Ok(if built.errors.is_empty() && lost == 0 { 0 } else { 1 })
}

/// Loss windows that may hide pokes from before `before`, told on stderr
/// (the first ten); returns how many there are.
fn report_losses(losses: &perfdata::Losses, before: Time) -> usize {
    let windows: Vec<_> = losses.windows().iter().filter(|w| w.may_precede(before)).collect();
    for w in windows.iter().take(10) {
        eprintln!("poketrace image: {}: pokes may be missing there, so the answer may be wrong", w.describe());
    }
    if windows.len() > 10 {
        eprintln!("poketrace image: ... and {} more loss windows", windows.len() - 10);
    }
    windows.len()
}

/// Most bytes `--at` reads: its output is a few lines per instruction.
pub const MAX_LEN: usize = 1 << 20;

/// LEN for `--at`: a decimal byte count from 0 to [`MAX_LEN`].
pub fn parse_len(s: &str) -> std::result::Result<usize, String> {
    let len: u64 = s.parse().map_err(|e| format!("{e}: give a byte count from 0 to {MAX_LEN}"))?;
    match usize::try_from(len) {
        Ok(n) if n <= MAX_LEN => Ok(n),
        _ => Err(format!("{len} bytes is more than the limit of {MAX_LEN} (1 MiB)")),
    }
}

/// Nanoseconds, or `seconds.nanoseconds` (perf script's `--ns` form).
fn parse_time(s: &str) -> Result<Time> {
    match s.split_once('.') {
        Some((sec, frac)) => {
            let sec: u64 = sec.parse().with_context(|| format!("bad time {s}"))?;
            if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                bail!("bad time {s}: at most 9 digits after the point");
            }
            let ns: u64 = format!("{frac:0<9}").parse()?;
            Ok(sec * 1_000_000_000 + ns)
        }
        None => s.parse().with_context(|| format!("bad time {s}")),
    }
}

/// Hex (`0x` optional) or `symbol[+offset]` from the input's kcore_dir/kallsyms.
fn parse_addr(s: &str, file: &PerfFile) -> Result<u64> {
    let hex = s.strip_prefix("0x").unwrap_or(s);
    if let Ok(v) = u64::from_str_radix(hex, 16) {
        return Ok(v);
    }
    let (name, off) = match s.split_once('+') {
        Some((n, o)) => (n, u64::from_str_radix(o.trim_start_matches("0x"), 16).with_context(|| format!("bad offset in {s}"))?),
        None => (s, 0),
    };
    let path = file.kcore_dir().map(|d| d.join("kallsyms")).context("symbol given but the input has no kcore_dir/kallsyms")?;
    let (ks, _) = perfdata::kcore::Kallsyms::load(&path)?;
    Ok(ks.address_of(name).with_context(|| format!("no symbol {name} in {}", path.display()))? + off)
}

fn seconds(t: Time) -> String {
    format!("{}.{:09}", t / 1_000_000_000, t % 1_000_000_000)
}

struct View<'a> {
    tl: &'a CodeTimeline,
    arch: Arch,
    symbols: &'a Symbolizer,
}

impl View<'_> {
    fn insns(&self, addr: u64, bytes: &[u8]) -> Vec<String> {
        match self.arch {
            Arch::X86_64 => isa::disassemble_x86_64(addr, bytes).into_iter().map(|l| format!("{:x}: {}", l.addr, l.text)).collect(),
            Arch::Aarch64 => vec![isa::disassemble_aarch64_text(addr, bytes)],
        }
    }

    /// JSON fields for one read: state, bytes or candidates, insn.
    fn read_json(&self, addr: u64, r: &Read) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        match r {
            Read::Exact(b) => {
                m.insert("state".into(), json!("exact"));
                m.insert("bytes".into(), json!(plain(b)));
                m.insert("insn".into(), json!(self.insns(addr, b)));
            }
            Read::Uncertain(c) => {
                m.insert("state".into(), json!("uncertain"));
                m.insert("candidates".into(), json!(c.iter().map(|b| plain(b)).collect::<Vec<_>>()));
                m.insert("insn".into(), json!(c.iter().map(|b| self.insns(addr, b)).collect::<Vec<_>>()));
            }
            Read::Unmapped { nearest } => {
                m.insert("state".into(), json!("unmapped"));
                if let Some(n) = nearest {
                    m.insert("nearest".into(), json!({"name": n.name, "start": n.start, "end": n.end}));
                }
            }
        }
        m
    }

    fn read_text(&self, out: &mut impl Write, addr: u64, r: &Read) -> Result<()> {
        match r {
            Read::Exact(b) => {
                writeln!(out, "  {}", spaced(b))?;
                for l in self.insns(addr, b) {
                    writeln!(out, "  {l}")?;
                }
            }
            Read::Uncertain(c) => {
                writeln!(out, "  uncertain: {} possible contents", c.len())?;
                for (i, b) in c.iter().enumerate() {
                    writeln!(out, "  candidate {i}: {}", spaced(b))?;
                    for l in self.insns(addr, b) {
                        writeln!(out, "    {l}")?;
                    }
                }
            }
            Read::Unmapped { nearest } => match nearest {
                Some(n) => writeln!(out, "  unmapped; nearest: {} {:#x}..{:#x}", n.name, n.start, n.end)?,
                None => writeln!(out, "  unmapped; no code loaded at all")?,
            },
        }
        Ok(())
    }

    fn at(&self, out: &mut impl Write, t: Time, addr: u64, len: usize, json: bool) -> Result<()> {
        let r = self.tl.read(addr, len, t);
        let mut buf = vec![0u8; len];
        let valid = self.tl.read_into(addr, &mut buf, t).valid;
        if json {
            let mut m = serde_json::Map::new();
            m.insert("addr".into(), json!(addr));
            m.insert("sym".into(), json!(self.symbols.describe(addr)));
            m.insert("time".into(), json!(t));
            m.extend(self.read_json(addr, &r));
            m.insert("valid_from".into(), json!(valid.start));
            m.insert("valid_until".into(), if valid.end == Time::MAX { Value::Null } else { json!(valid.end) });
            serde_json::to_writer(&mut *out, &m)?;
            writeln!(out)?;
            return Ok(());
        }
        let until = if valid.end == Time::MAX { "on".to_string() } else { seconds(valid.end) };
        let state = match &r {
            Read::Exact(_) => "exact",
            Read::Uncertain(_) => "uncertain",
            Read::Unmapped { .. } => "unmapped",
        };
        writeln!(out, "{addr:#x} {} at {}: {state}, unchanged from {} to {until}", self.symbols.describe(addr), seconds(t), seconds(valid.start))?;
        self.read_text(out, addr, &r)?;
        self.anomalies_near(out, addr, len)
    }

    fn history(&self, out: &mut impl Write, addr: u64, json: bool) -> Result<()> {
        let h = self.tl.history(addr);
        if h.is_empty() && !json {
            writeln!(out, "{addr:#x} {}: no recorded change", self.symbols.describe(addr))?;
        } else if !json {
            writeln!(out, "{addr:#x} {}: {} versions", self.symbols.describe(addr), h.len())?;
        }
        for e in &h {
            let site = e.poke.map_or(addr, |p| p.addr);
            let kind = e.poke.map(|p| {
                let (old, new) = (self.tl.old_bytes(p), self.tl.new_bytes(p));
                isa::classify_poke(self.arch, p.addr, old, new, self.symbols.name(p.addr).as_deref()).name()
            });
            if json {
                let mut m = serde_json::Map::new();
                m.insert("addr".into(), json!(site));
                m.insert("time".into(), json!(e.from));
                m.insert("until".into(), json!(e.until));
                m.insert("kind".into(), json!(kind.unwrap_or("initial")));
                if let Some(p) = e.poke {
                    m.insert("cpu".into(), json!(p.cpu));
                    m.insert("old".into(), json!(plain(self.tl.old_bytes(p))));
                    m.insert("new".into(), json!(plain(self.tl.new_bytes(p))));
                }
                m.extend(self.read_json(site, &e.content));
                serde_json::to_writer(&mut *out, &m)?;
                writeln!(out)?;
            } else {
                let until = e.until.map_or("on".to_string(), seconds);
                let who = e.poke.map_or(String::new(), |p| p.cpu.map_or(String::new(), |c| format!(" (cpu {c})")));
                writeln!(out, "[{} .. {until}) {}{who} at {site:#x}", seconds(e.from), kind.unwrap_or("initial"))?;
                self.read_text(out, site, &e.content)?;
            }
        }
        if !json {
            self.anomalies_near(out, addr, 1)?;
        }
        Ok(())
    }

    fn anomalies_near(&self, out: &mut impl Write, addr: u64, len: usize) -> Result<()> {
        for a in self.tl.anomalies().iter().filter(|a| a.addr < addr + len as u64 && addr < a.addr + a.found.len().max(1) as u64) {
            writeln!(
                out,
                "  note: at {} the poke's old bytes at {:#x} were {} but the image held {} ({:?}; the record is followed)",
                seconds(a.time),
                a.addr,
                spaced(&a.found),
                spaced(&a.expected),
                a.kind
            )?;
        }
        Ok(())
    }
}
