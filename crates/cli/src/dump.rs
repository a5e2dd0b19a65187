//! `poketrace dump`: every record, in file order, as `perf report -D` prints
//! its record lines, or as JSON Lines.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::Result;
use perfdata::abi::{aux_flag, misc, record_type as rt, record_type_name, sample_type as st};
use perfdata::auxtrace::{CsEtmInfo, IntelPtInfo};
use perfdata::{PerfFile, Record, RecordBody, SampleId};
use serde_json::{json, Map, Value};

use crate::hex::{c_hex, plain, spaced, text};
use crate::symbols::Symbolizer;

pub fn run(input: &Path, json: bool, out: &mut impl Write) -> Result<i32> {
    let file = PerfFile::open(input)?;
    let mut symbols = Symbolizer::for_input(&file, None)?;
    let mut counts: BTreeMap<u32, u64> = BTreeMap::new();
    let mut errors = 0u64;
    let mut losses = perfdata::Losses::default();
    let mut records = file.records();
    loop {
        // The layout perf prints a record with is the one known before it
        // (pipe mode learns attrs from HEADER_ATTR records as they pass).
        let combined = records.attrs().iter().fold(0, |acc, a| acc | a.attr.sample_type);
        let sample_id_all = records.attrs().first().is_some_and(|a| a.attr.sample_id_all());
        let Some(item) = records.next() else { break };
        let r = match item {
            Ok(r) => r,
            Err(e) => {
                errors += 1;
                eprintln!("poketrace dump: {e}");
                continue;
            }
        };
        *counts.entry(r.record_type()).or_default() += 1;
        losses.observe(&r);
        if let RecordBody::Ksymbol(k) = &r.body {
            symbols.apply(k);
        }
        if json {
            serde_json::to_writer(&mut *out, &record_json(&r, &symbols))?;
            writeln!(out)?;
        } else {
            write_text(out, &r, combined, sample_id_all, &symbols)?;
        }
    }
    for e in &file.features().errors {
        errors += 1;
        eprintln!("poketrace dump: {e}");
    }
    if !json {
        write_stats(out, &counts)?;
    }
    // The listing is complete; the recording it lists is not.
    for line in losses.report(10) {
        eprintln!("poketrace dump: the recording is incomplete: {line}");
    }
    Ok(if errors > 0 { 1 } else { 0 })
}

/// perf's "Aggregated stats" block.
fn write_stats(out: &mut impl Write, counts: &BTreeMap<u32, u64>) -> Result<()> {
    let total: u64 = counts.values().sum();
    writeln!(out, "\nAggregated stats:")?;
    writeln!(out, "{:>16} events: {total:>10}", "TOTAL")?;
    for (&ty, &n) in counts {
        let pct = if total > 0 { n as f64 * 100.0 / total as f64 } else { 0.0 };
        writeln!(out, "{:>16} events: {n:>10}  ({pct:4.1}%)", type_name(ty))?;
    }
    Ok(())
}

fn type_name(ty: u32) -> String {
    record_type_name(ty).map(str::to_string).unwrap_or_else(|| format!("TYPE_{ty}"))
}

/// `[cpu ][time ]` as perf's `evlist__print_tstamp`.
fn tstamp(r: &Record<'_>, combined: u64, sample_id_all: bool) -> String {
    let ty = r.record_type();
    if ty != rt::SAMPLE && !sample_id_all {
        return "-1 -1 ".into();
    }
    let user = ty >= rt::USER_TYPE_START;
    let mut s = String::new();
    if combined & st::CPU != 0 {
        s += &format!("{} ", if user { 0 } else { r.sample_id.cpu.unwrap_or(0) });
    }
    if combined & st::TIME != 0 {
        s += &format!("{} ", if user { 0 } else { r.sample_id.time.unwrap_or(0) });
    }
    s
}

fn write_text(out: &mut impl Write, r: &Record<'_>, combined: u64, sample_id_all: bool, symbols: &Symbolizer) -> Result<()> {
    let ty = r.record_type();
    write!(out, "{}{:#x} [{:#x}]: PERF_RECORD_{}", tstamp(r, combined, sample_id_all), r.offset, r.size, type_name(ty))?;
    let mut extra: Vec<String> = Vec::new();
    match &r.body {
        RecordBody::Mmap(m) => write!(
            out,
            " {}/{}: [{}({}) @ {}]: {} {}",
            m.pid as i32,
            m.tid as i32,
            c_hex(m.addr),
            c_hex(m.len),
            c_hex(m.pgoff),
            if r.misc & misc::MMAP_DATA != 0 { 'r' } else { 'x' },
            text(m.filename)
        )?,
        RecordBody::Mmap2(m) => {
            let id = match m.file_id {
                perfdata::Mmap2FileId::Inode { maj, min, ino, ino_generation } => {
                    format!("{maj:02x}:{min:02x} {ino} {ino_generation}")
                }
                perfdata::Mmap2FileId::BuildId(b) => format!("<{}>", plain(b)),
            };
            let p = |bit: u32, c: char| if m.prot & bit != 0 { c } else { '-' };
            write!(
                out,
                " {}/{}: [{}({}) @ {} {id}]: {}{}{}{} {}",
                m.pid as i32,
                m.tid as i32,
                c_hex(m.addr),
                c_hex(m.len),
                c_hex(m.pgoff),
                p(1, 'r'),
                p(2, 'w'),
                p(4, 'x'),
                if m.flags & 1 != 0 { 's' } else { 'p' },
                text(m.filename)
            )?
        }
        RecordBody::Comm(c) => {
            write!(out, "{}: {}:{}/{}", if r.misc & misc::COMM_EXEC != 0 { " exec" } else { "" }, text(c.comm), c.pid as i32, c.tid as i32)?
        }
        RecordBody::Fork(f) | RecordBody::Exit(f) => {
            write!(out, "({}:{}):({}:{})", f.pid as i32, f.tid as i32, f.ppid as i32, f.ptid as i32)?;
            extra.push(format!("time {}", f.time));
        }
        RecordBody::Sample(s) => {
            write!(
                out,
                "(IP, {}): {}/{}: {} period: {} addr: {}",
                c_hex(r.misc as u64),
                s.pid.unwrap_or(0) as i32,
                s.tid.unwrap_or(0) as i32,
                c_hex(s.ip.unwrap_or(0)),
                s.period.unwrap_or(0),
                c_hex(s.addr.unwrap_or(0))
            )?;
            if let Some(cc) = s.callchain {
                extra.push(format!("callchain: {}", s.callchain_ips().map(|ip| format!("{ip:#x}")).collect::<Vec<_>>().join(" ")));
                debug_assert!(cc.len() % 8 == 0);
            }
        }
        RecordBody::Lost(l) => write!(out, ": id:{}: lost:{}", l.id, l.lost)?,
        RecordBody::LostSamples(l) => write!(out, ": id:{}: lost samples :{}", r.sample_id.attr_id().unwrap_or(u64::MAX), l.lost)?,
        RecordBody::Throttle(t) | RecordBody::Unthrottle(t) => write!(out, ": time {} id {} stream_id {}", t.time, t.id, t.stream_id)?,
        RecordBody::Aux(a) => {
            let f = |bit, c| if a.flags & bit != 0 { c } else { "" };
            write!(
                out,
                " offset: {} size: {} flags: {} [{}{}{}]",
                c_hex(a.aux_offset),
                c_hex(a.aux_size),
                c_hex(a.flags),
                f(aux_flag::TRUNCATED, "T"),
                f(aux_flag::OVERWRITE, "O"),
                f(aux_flag::PARTIAL, "P")
            )?
        }
        RecordBody::ItraceStart(i) => write!(out, " pid: {} tid: {}", i.pid as i32, i.tid as i32)?,
        RecordBody::Switch => write!(out, " {:<11}", switch_dir(r.misc))?,
        RecordBody::SwitchCpuWide(s) => write!(
            out,
            " {:<11}  {} pid/tid: {:>5}/{:<5}",
            switch_dir(r.misc),
            if r.misc & misc::SWITCH_OUT != 0 { "next" } else { "prev" },
            s.next_prev_pid as i32,
            s.next_prev_tid as i32
        )?,
        RecordBody::Ksymbol(k) => write!(out, " addr {:x} len {} type {} flags {:#x} name {}", k.addr, k.len, k.ksym_type, k.flags, text(k.name))?,
        RecordBody::BpfEvent(b) => {
            write!(out, " type {}, flags {}, id {}", b.event_type, b.flags, b.id)?;
            extra.push(format!("tag {}", plain(&b.tag)));
        }
        RecordBody::TextPoke(p) => {
            write!(out, " {:x} {} old len {} new len {}", p.addr, symbols.describe(p.addr), p.old.len(), p.new.len())?;
            extra.extend(byte_lines("Old bytes:", p.old));
            extra.extend(byte_lines("New bytes:", p.new));
        }
        RecordBody::HeaderAttr(h) => {
            let a = h.to_attr_with_ids();
            extra.push(format!("attr type {} config {:#x} sample_type {:#x} ids {:?}", a.attr.type_, a.attr.config, a.attr.sample_type, a.ids))
        }
        RecordBody::FinishedRound | RecordBody::FinishedInit => {}
        RecordBody::IdIndex(ix) => {
            write!(out, " nr: {}", ix.entries.len())?;
            for e in &ix.entries {
                extra.push(format!("id: {}  idx: {}  cpu: {}  tid: {}", e.id, e.idx, e.cpu as i64, e.tid as i64));
            }
        }
        RecordBody::AuxtraceInfo(i) => {
            write!(out, " type: {}", i.auxtrace_type)?;
            extra.extend(auxtrace_info_lines(i));
        }
        RecordBody::Auxtrace(a) => write!(
            out,
            " size: {}  offset: {}  ref: {}  idx: {}  tid: {}  cpu: {}",
            c_hex(a.data.len() as u64),
            c_hex(a.offset),
            c_hex(a.reference),
            a.idx,
            a.tid as i32,
            a.cpu as i32
        )?,
        RecordBody::TimeConv(t) => {
            extra.push(format!("Time Shift      {}", t.time_shift));
            extra.push(format!("Time Muliplier  {}", t.time_mult));
            extra.push(format!("Time Zero       {}", t.time_zero));
            if let Some(x) = t.extended {
                extra.push(format!("Time Cycles     {}", x.time_cycles));
                extra.push(format!("Time Mask       {:#x}", x.time_mask));
                extra.push(format!("Cap Time Zero   {}", x.cap_user_time_zero as u8));
                extra.push(format!("Cap Time Short  {}", x.cap_user_time_short as u8));
            }
        }
        RecordBody::Compressed(c) => write!(out, " compressed size: {}", c.data.len())?,
        RecordBody::Other { data, .. } => extra.push(format!("{} bytes: {}", data.len(), plain(&data[..data.len().min(64)]))),
    }
    writeln!(out)?;
    if let Some(inner) = r.inner_offset {
        extra.push(format!("in COMPRESSED data at +{inner:#x}"));
    }
    let s = &r.sample_id;
    let hidden = [
        ("pid", s.pid.map(|v| (v as i32).to_string())),
        ("tid", s.tid.map(|v| (v as i32).to_string())),
        ("id", s.id.map(|v| v.to_string())),
        ("stream_id", s.stream_id.map(|v| v.to_string())),
        ("identifier", s.identifier.map(|v| v.to_string())),
    ];
    let trailer: Vec<String> = hidden.iter().filter_map(|(k, v)| v.as_ref().map(|v| format!("{k} {v}"))).collect();
    if ty != rt::SAMPLE && !trailer.is_empty() {
        extra.push(format!("sample_id: {}", trailer.join(" ")));
    }
    for line in extra {
        writeln!(out, " ... {line}")?;
    }
    Ok(())
}

fn switch_dir(m: u16) -> &'static str {
    if m & misc::SWITCH_OUT == 0 {
        "IN"
    } else if m & misc::SWITCH_OUT_PREEMPT != 0 {
        "OUT preempt"
    } else {
        "OUT"
    }
}

/// perf's byte lines: 16 bytes each, label repeated, none for an empty slice.
pub fn byte_lines(label: &str, bytes: &[u8]) -> Vec<String> {
    bytes.chunks(16).map(|c| format!("{label} {}", spaced(c))).collect()
}

fn auxtrace_info_lines(i: &perfdata::AuxtraceInfo<'_>) -> Vec<String> {
    match i.auxtrace_type {
        perfdata::abi::auxtrace_type::INTEL_PT => match IntelPtInfo::parse(i) {
            Ok(p) => vec![
                format!("PMU Type            {}", p.pmu_type),
                format!("Time Shift          {}", p.time_shift),
                format!("Time Muliplier      {}", p.time_mult),
                format!("Time Zero           {}", p.time_zero),
                format!("Cap Time Zero       {}", p.cap_user_time_zero),
                format!("TSC bit             {:#x}", p.tsc_bit),
                format!("NoRETComp bit       {:#x}", p.noretcomp_bit),
                format!("Have sched_switch   {}", p.have_sched_switch),
                format!("Snapshot mode       {}", p.snapshot_mode),
                format!("Per-cpu maps        {}", p.per_cpu_mmaps),
                format!("MTC bit             {:#x}", p.mtc_bit),
                format!("MTC freq bits       {:#x}", p.mtc_freq_bits),
                format!("TSC:CTC numerator   {}", p.tsc_ctc_ratio_n),
                format!("TSC:CTC denominator {}", p.tsc_ctc_ratio_d),
                format!("CYC bit             {:#x}", p.cyc_bit),
                format!("Max non-turbo ratio {}", p.max_nonturbo_ratio),
                format!("Filter string len.  {}", p.filter_str_len),
            ],
            Err(e) => vec![format!("Intel PT info: {e}")],
        },
        perfdata::abi::auxtrace_type::CS_ETM => match CsEtmInfo::parse(i) {
            Ok(c) => {
                let mut v = vec![format!("Header version {} PMU type {} CPUs {} snapshot {}", c.version, c.pmu_type, c.cpus.len(), c.snapshot)];
                for cpu in &c.cpus {
                    v.push(format!(
                        "CPU {} magic {:#x} params {}",
                        cpu.cpu,
                        cpu.magic,
                        cpu.params.iter().map(|p| format!("{p:#x}")).collect::<Vec<_>>().join(" ")
                    ));
                }
                v
            }
            Err(e) => vec![format!("CoreSight info: {e}")],
        },
        _ => vec![format!("private data: {} bytes", i.priv_data.len())],
    }
}

/// The record as one JSON object, fields named as in the kernel's uapi.
pub fn record_json(r: &Record<'_>, symbols: &Symbolizer) -> Value {
    let ty = r.record_type();
    let mut m = Map::new();
    m.insert("type".into(), json!(ty));
    m.insert("record".into(), json!(type_name(ty)));
    m.insert("offset".into(), json!(r.offset));
    if let Some(i) = r.inner_offset {
        m.insert("inner_offset".into(), json!(i));
    }
    m.insert("size".into(), json!(r.size));
    m.insert("misc".into(), json!(r.misc));
    sample_id_json(&mut m, &r.sample_id);
    let mut put = |k: &str, v: Value| {
        m.insert(k.into(), v);
    };
    match &r.body {
        RecordBody::Mmap(x) => {
            put("pid", json!(x.pid as i32));
            put("tid", json!(x.tid as i32));
            put("addr", json!(x.addr));
            put("len", json!(x.len));
            put("pgoff", json!(x.pgoff));
            put("filename", json!(text(x.filename)));
        }
        RecordBody::Mmap2(x) => {
            put("pid", json!(x.pid as i32));
            put("tid", json!(x.tid as i32));
            put("addr", json!(x.addr));
            put("len", json!(x.len));
            put("pgoff", json!(x.pgoff));
            match x.file_id {
                perfdata::Mmap2FileId::Inode { maj, min, ino, ino_generation } => {
                    put("maj", json!(maj));
                    put("min", json!(min));
                    put("ino", json!(ino));
                    put("ino_generation", json!(ino_generation));
                }
                perfdata::Mmap2FileId::BuildId(b) => put("build_id", json!(plain(b))),
            }
            put("prot", json!(x.prot));
            put("flags", json!(x.flags));
            put("filename", json!(text(x.filename)));
        }
        RecordBody::Comm(x) => {
            put("pid", json!(x.pid as i32));
            put("tid", json!(x.tid as i32));
            put("comm", json!(text(x.comm)));
        }
        RecordBody::Fork(x) | RecordBody::Exit(x) => {
            put("pid", json!(x.pid as i32));
            put("ppid", json!(x.ppid as i32));
            put("tid", json!(x.tid as i32));
            put("ptid", json!(x.ptid as i32));
            put("time", json!(x.time));
        }
        RecordBody::Sample(s) => {
            for (k, v) in [
                ("ip", s.ip),
                ("addr", s.addr),
                ("period", s.period),
                ("weight", s.weight),
                ("data_src", s.data_src),
                ("transaction", s.transaction),
                ("phys_addr", s.phys_addr),
                ("cgroup", s.cgroup),
                ("data_page_size", s.data_page_size),
                ("code_page_size", s.code_page_size),
            ] {
                if let Some(v) = v {
                    put(k, json!(v));
                }
            }
            if s.callchain.is_some() {
                put("callchain", json!(s.callchain_ips().collect::<Vec<_>>()));
            }
            for (k, v) in [
                ("read", s.read),
                ("raw", s.raw),
                ("branch_stack", s.branch_stack),
                ("regs_user", s.regs_user),
                ("stack_user", s.stack_user),
                ("regs_intr", s.regs_intr),
                ("aux", s.aux),
            ] {
                if let Some(v) = v {
                    put(k, json!(plain(v)));
                }
            }
        }
        RecordBody::Lost(x) => {
            put("id", json!(x.id));
            put("lost", json!(x.lost));
        }
        RecordBody::LostSamples(x) => put("lost", json!(x.lost)),
        RecordBody::Throttle(x) | RecordBody::Unthrottle(x) => {
            put("time", json!(x.time));
            put("id", json!(x.id));
            put("stream_id", json!(x.stream_id));
        }
        RecordBody::Aux(x) => {
            put("aux_offset", json!(x.aux_offset));
            put("aux_size", json!(x.aux_size));
            put("flags", json!(x.flags));
        }
        RecordBody::ItraceStart(x) => {
            put("pid", json!(x.pid as i32));
            put("tid", json!(x.tid as i32));
        }
        RecordBody::Switch => put("out", json!(r.misc & misc::SWITCH_OUT != 0)),
        RecordBody::SwitchCpuWide(x) => {
            put("out", json!(r.misc & misc::SWITCH_OUT != 0));
            put("next_prev_pid", json!(x.next_prev_pid as i32));
            put("next_prev_tid", json!(x.next_prev_tid as i32));
        }
        RecordBody::Ksymbol(k) => {
            put("addr", json!(k.addr));
            put("len", json!(k.len));
            put("ksym_type", json!(k.ksym_type));
            put("flags", json!(k.flags));
            put("name", json!(text(k.name)));
        }
        RecordBody::BpfEvent(b) => {
            put("event_type", json!(b.event_type));
            put("flags", json!(b.flags));
            put("id", json!(b.id));
            put("tag", json!(plain(&b.tag)));
        }
        RecordBody::TextPoke(p) => {
            put("addr", json!(p.addr));
            put("sym", json!(symbols.describe(p.addr)));
            put("old_len", json!(p.old.len()));
            put("new_len", json!(p.new.len()));
            put("old", json!(plain(p.old)));
            put("new", json!(plain(p.new)));
        }
        RecordBody::HeaderAttr(h) => {
            let a = h.to_attr_with_ids();
            put("attr_type", json!(a.attr.type_));
            put("config", json!(a.attr.config));
            put("sample_type", json!(a.attr.sample_type));
            put("ids", json!(a.ids));
        }
        RecordBody::FinishedRound | RecordBody::FinishedInit => {}
        RecordBody::IdIndex(ix) => put(
            "entries",
            Value::Array(ix.entries.iter().map(|e| json!({"id": e.id, "idx": e.idx, "cpu": e.cpu as i64, "tid": e.tid as i64})).collect()),
        ),
        RecordBody::AuxtraceInfo(i) => {
            put("auxtrace_type", json!(i.auxtrace_type));
            put("priv", json!(i.priv_data.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect::<Vec<_>>()));
        }
        RecordBody::Auxtrace(a) => {
            put("size", json!(a.data.len()));
            put("offset", json!(a.offset));
            put("reference", json!(a.reference));
            put("idx", json!(a.idx));
            put("tid", json!(a.tid as i32));
            put("cpu", json!(a.cpu as i32));
        }
        RecordBody::TimeConv(t) => {
            put("time_shift", json!(t.time_shift));
            put("time_mult", json!(t.time_mult));
            put("time_zero", json!(t.time_zero));
            if let Some(x) = t.extended {
                put("time_cycles", json!(x.time_cycles));
                put("time_mask", json!(x.time_mask));
                put("cap_user_time_zero", json!(x.cap_user_time_zero));
                put("cap_user_time_short", json!(x.cap_user_time_short));
            }
        }
        RecordBody::Compressed(c) => put("compressed_size", json!(c.data.len())),
        RecordBody::Other { data, .. } => put("data", json!(plain(data))),
    }
    Value::Object(m)
}

/// `time`, `cpu`, `pid`, `tid`, `id`, `stream_id`, `identifier` where present.
pub fn sample_id_json(m: &mut Map<String, Value>, s: &SampleId) {
    if let Some(t) = s.time {
        m.insert("time".into(), json!(t));
    }
    if let Some(c) = s.cpu {
        m.insert("cpu".into(), json!(c as i32));
    }
    if let Some(p) = s.pid {
        m.insert("pid".into(), json!(p as i32));
    }
    if let Some(t) = s.tid {
        m.insert("tid".into(), json!(t as i32));
    }
    for (k, v) in [("id", s.id), ("stream_id", s.stream_id), ("identifier", s.identifier)] {
        if let Some(v) = v {
            m.insert(k.into(), json!(v));
        }
    }
}
