//! `poketrace decode`: Intel PT in a perf.data directory, decoded over the
//! code timeline, printed like `perf script --itrace`.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};
use codeimage::{BaseImage, CodeTimeline};
use intel_pt::flow::{FlowConfig, FlowDecoder, FlowEvent, TimeConv};
use intel_pt::sources::{Interval, PerfStyle, Static};
use isa::{BranchClass, KernelIdioms};
use perfdata::auxtrace::IntelPtInfo;
use perfdata::{PerfFile, RecordBody};
use serde_json::json;

use crate::hex::plain;
use crate::symbols::Symbolizer;

/// What to print, from `--itrace` letters: b (branches), i (instructions), e (errors).
pub struct Itrace {
    branches: bool,
    instructions: bool,
    errors: bool,
}

impl Itrace {
    pub fn parse(s: &str) -> Result<Itrace> {
        let mut t = Itrace { branches: false, instructions: false, errors: false };
        for c in s.chars() {
            match c {
                'b' => t.branches = true,
                'i' => t.instructions = true,
                'e' => t.errors = true,
                '0'..='9' | 'n' | 'u' | 'm' | 's' => {}
                _ => bail!("--itrace: '{c}' is not supported (b, i, e)"),
            }
        }
        Ok(t)
    }
}

/// Which task ran on each CPU when: from ITRACE_START, context switches and
/// COMM records, as perf attributes samples.
#[derive(Default)]
struct Threads {
    /// Per CPU: (from time, pid, tid), in time order once finished.
    runs: std::collections::HashMap<u32, Vec<(u64, i32, i32)>>,
    comms: std::collections::HashMap<i32, String>,
}

impl Threads {
    fn observe(&mut self, r: &perfdata::Record<'_>) {
        use perfdata::abi::misc;
        let (Some(cpu), time) = (r.sample_id.cpu, r.sample_id.time.unwrap_or(0)) else {
            if let RecordBody::Comm(c) = &r.body {
                self.comms.insert(c.tid as i32, crate::hex::text(c.comm));
            }
            return;
        };
        let run = match &r.body {
            RecordBody::ItraceStart(i) => Some((i.pid as i32, i.tid as i32)),
            RecordBody::SwitchCpuWide(sw) if r.misc & misc::SWITCH_OUT != 0 => Some((sw.next_prev_pid as i32, sw.next_prev_tid as i32)),
            RecordBody::SwitchCpuWide(_) | RecordBody::Switch if r.misc & misc::SWITCH_OUT == 0 => {
                r.sample_id.pid.zip(r.sample_id.tid).map(|(p, t)| (p as i32, t as i32))
            }
            RecordBody::Comm(c) => {
                self.comms.insert(c.tid as i32, crate::hex::text(c.comm));
                None
            }
            _ => None,
        };
        if let Some((pid, tid)) = run {
            self.runs.entry(cpu).or_default().push((time, pid, tid));
        }
    }

    fn finish(&mut self) {
        for v in self.runs.values_mut() {
            v.sort_by_key(|r| r.0);
        }
    }

    /// (pid, tid, comm) running on `cpu` at `time`, if known.
    fn at(&self, cpu: u32, time: u64) -> Option<(i32, i32, &str)> {
        let v = self.runs.get(&cpu)?;
        let i = v.partition_point(|r| r.0 <= time).checked_sub(1)?;
        let (_, pid, tid) = v[i];
        let comm = self.comms.get(&tid).map_or(if tid == 0 { "swapper" } else { "" }, String::as_str);
        Some((pid, tid, comm))
    }
}

/// One line of output, from one CPU.
struct Out {
    time: u64,
    cpu: u32,
    kind: Kind,
}

enum Kind {
    Branch { from: u64, to: u64, flags: &'static str },
    Insn { ip: u64, len: u8, uncertain: bool },
    Error { offset: usize, ip: Option<u64>, reason: String },
}

pub fn run(input: &Path, itrace: &Itrace, image: &str, json: bool, out: &mut impl Write) -> Result<i32> {
    let file = PerfFile::open(input)?;
    let mut info = None;
    let mut aux: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut threads = Threads::default();
    for r in file.records() {
        let r = r?;
        threads.observe(&r);
        match r.body {
            RecordBody::AuxtraceInfo(i) if i.auxtrace_type == perfdata::abi::auxtrace_type::INTEL_PT => {
                info = Some(IntelPtInfo::parse(&i)?)
            }
            RecordBody::Auxtrace(a) => match aux.iter_mut().find(|(c, _)| *c == a.cpu) {
                Some((_, buf)) => buf.extend_from_slice(a.data),
                None => aux.push((a.cpu, a.data.to_vec())),
            },
            _ => {}
        }
    }
    let info = info.context("no Intel PT AUXTRACE_INFO in the input (CoreSight decode is `poketrace etm`)")?;
    let pt_attr = file.attrs().iter().find(|a| a.attr.type_ as u64 == info.pmu_type);
    let symbols = Symbolizer::for_input(&file, None)?;
    let idioms = match file.kcore_dir() {
        Some(d) if d.join("kallsyms").is_file() => {
            let (ks, _) = perfdata::kcore::Kallsyms::load(&d.join("kallsyms"))?;
            KernelIdioms::from_symbols(ks.symbols().iter().map(|s| (s.name.as_str(), s.addr)))
        }
        _ => KernelIdioms::default(),
    };
    let cfg = FlowConfig {
        time: TimeConv { shift: info.time_shift as u32, mult: info.time_mult, zero: info.time_zero },
        noretcomp: pt_attr.is_some_and(|a| a.attr.config & info.noretcomp_bit != 0),
        idioms,
        max_walk: 1 << 20,
        trial_insns: 256,
    };
    let built = codeimage::from_perf_data(&file, BaseImage::new())?;
    for e in &built.errors {
        eprintln!("poketrace decode: {e}");
    }
    let tl: &CodeTimeline = &built.timeline;
    let bare = if image == "static" {
        let mut base = BaseImage::new();
        codeimage::add_base(&file, &mut base)?;
        Some(codeimage::TimelineBuilder::new(base).build())
    } else {
        None
    };
    if !matches!(image, "timeline" | "perf" | "static") {
        bail!("--image {image}: timeline, perf or static");
    }
    aux.sort_by_key(|(c, _)| *c);
    // Each CPU's buffer decodes on its own core.
    use rayon::prelude::*;
    let per_cpu: Vec<Vec<Out>> = aux
        .par_iter()
        .map(|(cpu, trace)| {
            let mut lines = Vec::new();
            let mut emit = collector(*cpu, itrace, tl, &mut lines);
            match image {
                "timeline" => FlowDecoder::new(trace, &Interval(tl), cfg.clone()).run(&mut emit),
                "perf" => FlowDecoder::new(trace, &PerfStyle(tl), cfg.clone()).run(&mut emit),
                _ => FlowDecoder::new(trace, &Static(bare.as_ref().expect("built above")), cfg.clone()).run(&mut emit),
            }
            drop(emit);
            lines
        })
        .collect();
    let mut lines: Vec<Out> = per_cpu.into_iter().flatten().collect();
    // All CPUs in time order, as perf merges its queues.
    lines.sort_by_key(|l| (l.time, l.cpu));
    threads.finish();
    let mut errors = 0;
    for l in &lines {
        if matches!(l.kind, Kind::Error { .. }) {
            errors += 1;
        }
        let who = threads.at(l.cpu, l.time);
        if json {
            let mut v = line_json(l, &symbols, tl);
            if let (Some((pid, tid, comm)), Some(m)) = (who, v.as_object_mut()) {
                m.insert("pid".into(), json!(pid));
                m.insert("tid".into(), json!(tid));
                m.insert("comm".into(), json!(comm));
            }
            serde_json::to_writer(&mut *out, &v)?;
            writeln!(out)?;
        } else {
            write_line(out, l, who, &symbols)?;
        }
    }
    eprintln!("poketrace decode: {} CPUs, {} lines, {errors} decode errors, image {image}", aux.len(), lines.len());
    Ok(0)
}

/// Turns one CPU's flow events into output lines: taken branches (from the
/// instruction before to the one after), instructions, traps, errors.
fn collector<'a>(cpu: u32, itrace: &'a Itrace, tl: &'a CodeTimeline, lines: &'a mut Vec<Out>) -> impl FnMut(FlowEvent) + 'a {
    let mut prev: Option<(u64, u8, BranchClass, u64)> = None;
    let mut tracing = false;
    // The taken branch of the previous instruction, now that where it went (`to`) is known.
    let taken = move |prev: Option<(u64, u8, BranchClass, u64)>, to: u64| match prev {
        Some((from, len, class, t)) if class.is_branch() && (class != BranchClass::CondBranch || to != from + len as u64) => {
            Some(Out { time: t, cpu, kind: Kind::Branch { from, to, flags: flags_of(class, from, t, tl) } })
        }
        _ => None,
    };
    move |e| match e {
        FlowEvent::Insn { ip, len, class, lo, uncertain, .. } => {
            if itrace.branches {
                match taken(prev, ip) {
                    Some(b) => lines.push(b),
                    None if !tracing => lines.push(Out { time: lo, cpu, kind: Kind::Branch { from: 0, to: ip, flags: "tr strt" } }),
                    None => {}
                }
            }
            tracing = true;
            if itrace.instructions {
                lines.push(Out { time: lo, cpu, kind: Kind::Insn { ip, len, uncertain } });
            }
            prev = Some((ip, len, class, lo));
        }
        FlowEvent::Trap { from, to, time } => {
            if itrace.branches {
                lines.extend(taken(prev, from));
                lines.push(Out { time, cpu, kind: Kind::Branch { from, to, flags: "hw int" } });
            }
            prev = None;
        }
        FlowEvent::End { time, at } => {
            if itrace.branches && tracing {
                if let Some(at) = at {
                    lines.extend(taken(prev, at));
                }
                let from = prev.map_or(0, |p| p.0);
                lines.push(Out { time, cpu, kind: Kind::Branch { from, to: 0, flags: "tr end" } });
            }
            tracing = false;
            prev = None;
        }
        FlowEvent::Error { offset, time, ip, kind } => {
            if itrace.errors {
                lines.push(Out { time, cpu, kind: Kind::Error { offset, ip, reason: kind.describe() } });
            }
            tracing = false;
            prev = None;
        }
    }
}

/// perf's flag words for a branch from an instruction of this class at `ip`.
fn flags_of(class: BranchClass, ip: u64, t: u64, tl: &CodeTimeline) -> &'static str {
    match class {
        BranchClass::CondBranch => "jcc",
        BranchClass::DirectJump | BranchClass::IndirectJump => "jmp",
        BranchClass::DirectCall | BranchClass::IndirectCall => "call",
        BranchClass::Return => "return",
        BranchClass::FarTransfer => {
            let mut b = [0u8; 3];
            tl.read_into(ip, &mut b, t);
            match b {
                [0xcf, ..] | [0x48, 0xcf, _] => "iret",
                [0x0f, 0x05, _] => "syscall",
                [0x0f, 0x07, _] | [0x48, 0x0f, 0x07] => "sysret",
                _ => "far",
            }
        }
        BranchClass::Trap => "int",
        BranchClass::None | BranchClass::Nop => "",
    }
}

fn seconds(t: u64) -> String {
    format!("{}.{:09}", t / 1_000_000_000, t % 1_000_000_000)
}

fn write_line(out: &mut impl Write, l: &Out, who: Option<(i32, i32, &str)>, symbols: &Symbolizer) -> Result<()> {
    let task = match who {
        Some((_, tid, comm)) => format!("{comm:>16} {tid:>6} "),
        None => String::new(),
    };
    let head = format!("{task}[{:03}] {:>20}:", l.cpu, seconds(l.time));
    match &l.kind {
        Kind::Branch { from, to, flags } => writeln!(
            out,
            "{head}   {flags:<8} {from:>16x} {:<32} => {to:>16x} {}",
            symbols.describe(*from),
            symbols.describe(*to)
        )?,
        Kind::Insn { ip, len, uncertain } => {
            writeln!(out, "{head}   {ip:>16x} {:<32} len {len}{}", symbols.describe(*ip), if *uncertain { "  (uncertain: several code versions fit)" } else { "" })?
        }
        Kind::Error { offset, ip, reason } => writeln!(
            out,
            "{head}   instruction trace error at offset {offset:#x}{}: {reason}",
            ip.map_or(String::new(), |ip| format!(" ip {ip:#x}"))
        )?,
    }
    Ok(())
}

fn line_json(l: &Out, symbols: &Symbolizer, tl: &CodeTimeline) -> serde_json::Value {
    match &l.kind {
        Kind::Branch { from, to, flags } => json!({
            "time": l.time, "cpu": l.cpu, "ip": from, "addr": to,
            "sym": symbols.describe(*from), "addr_sym": symbols.describe(*to),
            "flags": flags.split(' ').filter(|f| !f.is_empty()).collect::<Vec<_>>(),
        }),
        Kind::Insn { ip, len, uncertain } => {
            let mut buf = vec![0u8; *len as usize];
            tl.read_into(*ip, &mut buf, l.time);
            json!({"time": l.time, "cpu": l.cpu, "ip": ip, "sym": symbols.describe(*ip), "insn": plain(&buf), "uncertain": uncertain})
        }
        Kind::Error { offset, ip, reason } => json!({"time": l.time, "cpu": l.cpu, "ip": ip, "offset": offset, "error": reason}),
    }
}
