//! `poketrace decode`: Intel PT or CoreSight ETMv4 in a perf.data
//! directory, decoded over the code timeline, printed like `perf script --itrace`.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use codeimage::{BaseImage, CodeTimeline};
use isa::KernelIdioms;
use perfdata::PerfFile;
use tracedecode::flags::branch_flags;
use tracedecode::setup::{self, PtSetup};
use tracedecode::{ImageMode, Input, Itrace, Kind, Out, Trace};

use crate::symbols::Symbolizer;
use crate::text::Text;

/// perf script's `-F` fields that `decode` prints, always in perf's own
/// order (comm, pid/tid, cpu, time, flags, ip, sym, dso, addr, insn), with
/// perf's column layout, so the output diffs against `perf script -F`.
#[derive(Clone, Copy, Default)]
pub struct Fields {
    comm: bool,
    pid: bool,
    tid: bool,
    cpu: bool,
    time: bool,
    flags: bool,
    ip: bool,
    sym: bool,
    symoff: bool,
    dso: bool,
    addr: bool,
    insn: bool,
    insnlen: bool,
    /// Nanosecond times (`--ns`); perf's default is microseconds.
    ns: bool,
}

impl Fields {
    pub fn parse(s: &str, ns: bool) -> Result<Fields> {
        let mut f = Fields { ns, ..Fields::default() };
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let field = match name {
                "comm" => &mut f.comm,
                "pid" => &mut f.pid,
                "tid" => &mut f.tid,
                "cpu" => &mut f.cpu,
                "time" => &mut f.time,
                "flags" => &mut f.flags,
                "ip" => &mut f.ip,
                "sym" => &mut f.sym,
                "symoff" => &mut f.symoff,
                "dso" => &mut f.dso,
                "addr" => &mut f.addr,
                "insn" => &mut f.insn,
                "insnlen" => &mut f.insnlen,
                _ => bail!("-F {name}: not a field poketrace prints (comm, pid, tid, cpu, time, flags, ip, sym, symoff, dso, addr, insn, insnlen)"),
            };
            *field = true;
        }
        Ok(f)
    }
}

/// What `decode` prints and from which code image.
pub struct Options {
    pub itrace: Itrace,
    pub image: ImageMode,
    pub json: bool,
    /// perf script's layout with these fields, instead of poketrace's own.
    pub fields: Option<Fields>,
}

pub fn run(input: &Path, opts: &Options, out: &mut impl Write) -> Result<i32> {
    let (itrace, image, json) = (&opts.itrace, opts.image, opts.json);
    let file = PerfFile::open(input)?;
    let Input { trace, time_conv, queues: aux, threads } = Input::read(&file)?;
    let info = trace.context("no Intel PT or CoreSight AUXTRACE_INFO in the input")?;
    if matches!(info, Trace::CoreSight(_)) && image == ImageMode::PerfStyle {
        bail!("--image perf on CoreSight ETMv4 input: perf's model is decoded for Intel PT only; use --image timeline or --image static");
    }
    let mut symbols = Symbolizer::for_input(&file, None)?;
    symbols.add_user_mappings(&file);
    let built = codeimage::from_perf_data(&file, BaseImage::new())?;
    for e in &built.errors {
        eprintln!("poketrace decode: {e}");
    }
    let tl: &CodeTimeline = &built.timeline;
    let bare = if image == ImageMode::Static {
        let mut base = BaseImage::new();
        codeimage::add_base(&file, &mut base)?;
        Some(codeimage::TimelineBuilder::new(base).build())
    } else {
        None
    };
    let code = bare.as_ref().unwrap_or(tl);
    let (mut lines, mut errors) = (0usize, 0usize);
    let mut text = Text::with_capacity(2 * TEXT_FLUSH);
    let mut emit = |l: &Out| -> Result<()> {
        lines += 1;
        if matches!(l.kind, Kind::Error { .. }) {
            errors += 1;
        }
        let who = threads.at(&aux[l.queue], l.cpu, l.time);
        if let Some(fields) = &opts.fields {
            write_perf_line(&mut text, fields, l, l.cpu, who, &symbols, tl);
        } else if json {
            write_json_line(&mut text, l, l.cpu, who, &symbols, tl);
        } else {
            write_line(&mut text, l, l.cpu, who, &symbols);
        }
        if text.as_bytes().len() >= TEXT_FLUSH {
            out.write_all(text.as_bytes())?;
            text.clear();
        }
        Ok(())
    };
    // All buffers in time order, as perf merges its queues.
    match &info {
        Trace::IntelPt(info) => {
            let setup = PtSetup::new(&file, info, setup::kernel_idioms(&file)?);
            tracedecode::pt::decode(&setup, &aux, itrace, image, tl, code, &mut emit)?
        }
        Trace::CoreSight(info) => {
            let mut all: Vec<Out> = tracedecode::cs::lines(info, time_conv.as_ref(), &aux, itrace, code)?.into_iter().flatten().collect();
            all.sort_by_key(|l| (l.time, l.queue));
            all.iter().try_for_each(&mut emit)?;
        }
    }
    out.write_all(text.as_bytes())?;
    eprintln!("poketrace decode: {} trace buffers, {lines} lines, {errors} decode errors, image {}", aux.len(), image_name(image));
    Ok(0)
}

/// The `--image` name of a mode.
fn image_name(image: ImageMode) -> String {
    image.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
}

/// Bytes of lines kept before they are written out.
const TEXT_FLUSH: usize = 1 << 16;

/// `seconds.nanoseconds`, as perf prints a time with `--ns`.
fn put_seconds(t: &mut Text, time: u64) {
    t.dec(time / 1_000_000_000).byte(b'.').zeros(time % 1_000_000_000, 9);
}

/// `[CPU]`, three digits at least (`-01` for a per-thread buffer's).
fn put_cpu(t: &mut Text, cpu: u32) {
    t.byte(b'[').int_zeros(i64::from(cpu as i32), 3).byte(b']');
}

/// `name+0xoff` of the symbol covering `addr` (nothing when none does), in
/// a column of `width`.
fn put_symbol(t: &mut Text, symbols: &Symbolizer, addr: u64, width: usize) {
    let from = t.mark();
    if let Some((name, off)) = symbols.lookup(addr) {
        t.str(name).byte(b'+').hex_0x(off);
    }
    t.left(from, width);
}

/// One line in poketrace's own layout.
fn write_line(t: &mut Text, l: &Out, cpu: u32, who: Option<(i32, i32, &str)>, symbols: &Symbolizer) {
    if let Some((_, tid, comm)) = who {
        let from = t.mark();
        t.str(comm).right(from, 16).byte(b' ');
        let from = t.mark();
        t.int(i64::from(tid)).right(from, 6).byte(b' ');
    }
    put_cpu(t, cpu);
    t.byte(b' ');
    let from = t.mark();
    put_seconds(t, l.time);
    t.right(from, 20).str(":   ");
    match &l.kind {
        Kind::Branch { from, to, flags, .. } => {
            t.str_left(flags, 8).byte(b' ').hex_right(*from, 16).byte(b' ');
            put_symbol(t, symbols, *from, 32);
            t.str(" => ").hex_right(*to, 16).byte(b' ');
            put_symbol(t, symbols, *to, 0);
        }
        Kind::Insn { ip, len, uncertain, .. } => {
            t.hex_right(*ip, 16).byte(b' ');
            put_symbol(t, symbols, *ip, 32);
            t.str(" len ").dec(u64::from(*len));
            if *uncertain {
                t.str("  (uncertain: several code versions fit)");
            }
        }
        Kind::Error { offset, ip, reason, .. } => {
            t.str("instruction trace error at offset ").hex_0x(*offset as u64);
            if let Some(ip) = ip {
                t.str(" ip ").hex_0x(*ip);
            }
            t.str(": ").str(reason);
        }
    }
    t.byte(b'\n');
}

/// perf's message for its decode error code (its intel-pt decoder's numbering).
pub(crate) fn perf_error_message(code: u32) -> &'static str {
    match code {
        3 => "Bad packet",
        4 => "No more data",
        5 => "Failed to get instruction",
        6 => "Trace doesn't match instruction",
        7 => "Overflow packet",
        8 => "Lost trace data",
        10 => "Never-ending loop",
        _ => "Unknown error!",
    }
}

/// One line in `perf script -F`'s layout (the fields in perf's order and widths).
fn write_perf_line(t: &mut Text, f: &Fields, l: &Out, cpu: u32, who: Option<(i32, i32, &str)>, symbols: &Symbolizer, tl: &CodeTimeline) {
    let (pid, tid, comm) = who.unwrap_or((-1, -1, ":-1"));
    if let Kind::Error { ip, code, .. } = &l.kind {
        t.str(" instruction trace error type 1 time ");
        put_seconds(t, l.time);
        t.str(" cpu ").int(i64::from(cpu as i32)).str(" pid ").int(pid.into()).str(" tid ").int(tid.into());
        t.str(" ip ").hex_0x(ip.unwrap_or(0)).str(" code ").dec(u64::from(*code)).str(": ").str(perf_error_message(*code)).byte(b'\n');
        return;
    }
    if f.comm {
        let from = t.mark();
        t.str(comm).right(from, 16).byte(b' ');
    }
    let number = |t: &mut Text, v: i32, width: usize, right: bool| {
        let from = t.mark();
        t.int(v.into());
        if right {
            t.right(from, width);
        } else {
            t.left(from, width);
        }
    };
    match (f.pid, f.tid) {
        (true, true) => {
            number(t, pid, 5, true);
            t.byte(b'/');
            number(t, tid, 5, false);
            t.byte(b' ');
        }
        (true, false) => {
            number(t, pid, 5, true);
            t.byte(b' ');
        }
        (false, true) => {
            number(t, tid, 5, true);
            t.byte(b' ');
        }
        (false, false) => {}
    }
    if f.cpu {
        put_cpu(t, cpu);
        t.byte(b' ');
    }
    if f.time {
        let from = t.mark();
        t.dec(l.time / 1_000_000_000).right(from, 5).byte(b'.');
        match f.ns {
            true => t.zeros(l.time % 1_000_000_000, 9),
            false => t.zeros(l.time % 1_000_000_000 / 1000, 6),
        };
        t.str(": ");
    }
    let sym = |t: &mut Text, addr: u64| {
        if f.sym {
            match symbols.lookup(addr) {
                Some((name, off)) if f.symoff => t.byte(b' ').str(name).byte(b'+').hex_0x(off),
                Some((name, _)) => t.byte(b' ').str(name),
                None => t.str(" [unknown]"),
            };
        }
        if f.dso {
            t.str(" (").str(if addr == 0 { "[unknown]" } else { symbols.dso(addr) }).byte(b')');
        }
    };
    let (ip, len, flags, addr, branch) = match &l.kind {
        Kind::Branch { from, to, flags, from_len } => (*from, *from_len, *flags, *to, true),
        Kind::Insn { ip, len, class, to, .. } => (*ip, Some(*len), branch_flags(*class, *ip, l.time, tl), to.unwrap_or(0), false),
        Kind::Error { .. } => unreachable!("written above"),
    };
    if f.flags {
        t.str("  ").str_left(flags, 21).byte(b' ');
    }
    // perf prints an instruction sample's addr before its ip, a branch's after.
    if f.addr && !branch {
        t.hex_right(addr, 16);
    }
    if f.ip {
        t.byte(b' ').hex_right(ip, 16);
        sym(t, ip);
    }
    if f.addr && branch {
        t.str(" => ").hex_right(addr, 16);
        sym(t, addr);
    }
    if f.insnlen || f.insn {
        // A branch sample's instruction is the branch itself.
        let len = match len {
            Some(n) => n as usize,
            None => insn_len(tl, ip, l.time),
        };
        let mut bytes = [0u8; 16];
        let bytes = &mut bytes[..len];
        tl.read_into(ip, bytes, l.time);
        if f.insnlen {
            t.str(" ilen: ").dec(len as u64);
        }
        if f.insn && !bytes.is_empty() {
            t.str(" insn:");
            for &b in bytes.iter() {
                t.byte(b' ').hex_byte(b);
            }
        }
    }
    t.byte(b'\n');
}

/// Length of the instruction at `ip` at time `t` (0 when there is none).
fn insn_len(tl: &CodeTimeline, ip: u64, t: u64) -> usize {
    if ip == 0 {
        return 0;
    }
    let mut b = [0u8; 16];
    tl.read_into(ip, &mut b, t);
    isa::classify_x86_64(ip, &b, &KernelIdioms::default()).map_or(0, |i| i.len as usize)
}

/// One line as a JSON object, its keys in sorted order (as `serde_json`
/// writes a map): `addr`, `addr_sym`, `code`, `comm`, `cpu`, `error`,
/// `flags`, `insn`, `ip`, `offset`, `pid`, `sym`, `tid`, `time`, `uncertain`,
/// those the line has.
fn write_json_line(t: &mut Text, l: &Out, cpu: u32, who: Option<(i32, i32, &str)>, symbols: &Symbolizer, tl: &CodeTimeline) {
    let cpu = i64::from(cpu as i32);
    let sym = |t: &mut Text, addr: u64| {
        t.byte(b'"');
        if let Some((name, off)) = symbols.lookup(addr) {
            t.json_chars(name).byte(b'+').hex_0x(off);
        }
        t.byte(b'"');
    };
    let (pid, tid, comm) = match who {
        Some((pid, tid, comm)) => (Some(pid), Some(tid), Some(comm)),
        None => (None, None, None),
    };
    let task = |t: &mut Text, from_pid: bool| {
        if from_pid {
            if let Some(pid) = pid {
                t.str(",\"pid\":").int(pid.into());
            }
        } else if let Some(tid) = tid {
            t.str(",\"tid\":").int(tid.into());
        }
    };
    let put_comm = |t: &mut Text| {
        if let Some(c) = comm {
            t.str(",\"comm\":\"").json_chars(c).byte(b'"');
        }
    };
    match &l.kind {
        Kind::Branch { from, to, flags, .. } => {
            t.str("{\"addr\":").dec(*to).str(",\"addr_sym\":");
            sym(t, *to);
            put_comm(t);
            t.str(",\"cpu\":").int(cpu).str(",\"flags\":[");
            for (i, f) in flags.split(' ').filter(|f| !f.is_empty()).enumerate() {
                if i > 0 {
                    t.byte(b',');
                }
                t.byte(b'"').json_chars(f).byte(b'"');
            }
            t.str("],\"ip\":").dec(*from);
            task(t, true);
            t.str(",\"sym\":");
            sym(t, *from);
        }
        Kind::Insn { ip, len, .. } => {
            t.byte(b'{');
            let mut bytes = [0u8; 16];
            let bytes = &mut bytes[..usize::from(*len).min(16)];
            tl.read_into(*ip, bytes, l.time);
            if let Some(c) = comm {
                t.str("\"comm\":\"").json_chars(c).str("\",");
            }
            t.str("\"cpu\":").int(cpu).str(",\"insn\":\"");
            for &b in bytes.iter() {
                t.hex_byte(b);
            }
            t.str("\",\"ip\":").dec(*ip);
            task(t, true);
            t.str(",\"sym\":");
            sym(t, *ip);
        }
        Kind::Error { offset, ip, code, reason } => {
            t.str("{\"code\":").dec(u64::from(*code));
            put_comm(t);
            t.str(",\"cpu\":").int(cpu).str(",\"error\":\"").json_chars(reason).str("\",\"ip\":");
            match ip {
                Some(ip) => t.dec(*ip),
                None => t.str("null"),
            };
            t.str(",\"offset\":").dec(*offset as u64);
            task(t, true);
        }
    }
    task(t, false);
    t.str(",\"time\":").dec(l.time);
    if let Kind::Insn { uncertain, .. } = &l.kind {
        t.str(",\"uncertain\":").str(if *uncertain { "true" } else { "false" });
    }
    t.str("}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use isa::BranchClass;

    /// JSON lines hold what `serde_json` writes for the same values (its
    /// maps sorted by key), with and without the task, for each kind of line.
    #[test]
    fn json_lines_are_what_serde_json_writes() {
        use serde_json::json;
        let tl = codeimage::TimelineBuilder::new(BaseImage::new()).build();
        let symbols = Symbolizer::default();
        let line = |time, kind| Out { time, queue: 0, cpu: 3, kind };
        let lines = [
            line(1_000_000_123, Kind::Branch { from: u64::MAX, to: 0x1234, flags: "tr end  call", from_len: Some(5) }),
            line(7, Kind::Insn { ip: 0xffff_ffff_8100_0000, len: 3, class: BranchClass::None, to: None, uncertain: true }),
            line(0, Kind::Error { offset: 99, ip: None, code: 6, reason: "no \"TIP\"\there".into() }),
            line(u64::MAX, Kind::Error { offset: 0, ip: Some(1), code: 3, reason: String::new() }),
        ];
        for l in &lines {
            for who in [None, Some((-1, 42, "perf\\exec\u{1}")), Some((7, 8, "naïve"))] {
                let mut v = match &l.kind {
                    Kind::Branch { from, to, flags, .. } => json!({
                        "time": l.time, "cpu": 3, "ip": from, "addr": to, "sym": "", "addr_sym": "",
                        "flags": flags.split(' ').filter(|f| !f.is_empty()).collect::<Vec<_>>(),
                    }),
                    Kind::Insn { ip, uncertain, .. } => {
                        json!({"time": l.time, "cpu": 3, "ip": ip, "sym": "", "insn": "000000", "uncertain": uncertain})
                    }
                    Kind::Error { offset, ip, code, reason } => {
                        json!({"time": l.time, "cpu": 3, "ip": ip, "offset": offset, "error": reason, "code": code})
                    }
                };
                if let (Some((pid, tid, comm)), Some(m)) = (who, v.as_object_mut()) {
                    m.insert("pid".into(), json!(pid));
                    m.insert("tid".into(), json!(tid));
                    m.insert("comm".into(), json!(comm));
                }
                let mut t = Text::default();
                write_json_line(&mut t, l, 3, who, &symbols, &tl);
                assert_eq!(std::str::from_utf8(t.as_bytes()).unwrap(), format!("{v}\n"));
            }
        }
    }
}
