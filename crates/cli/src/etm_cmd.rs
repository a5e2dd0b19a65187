//! `poketrace etm`: an OpenCSD snapshot's ETMv4 trace, packet by packet
//! (`--packets`) or decoded into trace elements (instruction ranges,
//! exceptions, contexts, ...), the code read from the snapshot's memory dumps.

use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};
use codeimage::window::Static;
use etm::flow::{self, ElemKind, Element, FlowDecoder, InstrSubtype, InstrType, Item};
use etm::opencsd::{Listing, OpenCsdPrinter};
use etm::snapshot::Snapshot;
use etm::{ErrorRecovery, PacketReader, TracePacket};
use serde_json::{json, Value};

use crate::hex::{plain, spaced};

pub fn run(dir: &Path, packets: bool, format: &str, out: &mut impl Write) -> Result<i32> {
    if !matches!(format, "opencsd" | "text" | "json") {
        bail!("--format {format}: opencsd, text or json");
    }
    let snap = Snapshot::load(dir).with_context(|| format!("loading the snapshot {}", dir.display()))?;
    // trc_pkt_lister decodes the first buffer.
    let buffer = snap.buffers.first().context("the snapshot names no trace buffer")?;
    let setup = snap.buffer_setup(&buffer.name)?;
    for u in &setup.unsupported {
        eprintln!("poketrace etm: source {u:?} is not ETMv4: its bytes are skipped");
    }
    // Like trc_pkt_lister: skip what cannot be read, decode the rest, and say so.
    for d in &snap.skipped_devices {
        eprintln!("poketrace etm: {d}");
    }
    for m in &setup.missing {
        eprintln!("poketrace etm: trace source {m} has no device file: its bytes are skipped");
    }
    let data = snap.read_buffer(&setup.buffer)?;
    let configs: Vec<_> = setup.sources.iter().map(|s| s.1).collect();
    // OpenCSD keeps going byte by byte after a fault: the same here for a diffable listing.
    let recovery = if format == "opencsd" { ErrorRecovery::Continue } else { ErrorRecovery::Resync };
    let mut reader = PacketReader::with_container(&data, setup.container, setup.framing, &configs, recovery);
    let mut printer = OpenCsdPrinter::new(Listing::Decode);
    let mut text = Vec::with_capacity(1 << 17);
    let mut faults = snap.skipped_devices.len() + setup.missing.len();
    if packets {
        while let Some(item) = reader.next() {
            match item {
                Ok(p) => write_packet(&mut text, &mut printer, format, &p)?,
                Err(e) => {
                    faults += 1;
                    eprintln!("poketrace etm: {e}");
                }
            }
            if text.len() >= 1 << 16 {
                out.write_all(&text)?;
                text.clear();
            }
        }
        out.write_all(&text)?;
        return Ok(if faults > 0 { 1 } else { 0 });
    }

    // Missing or short memory dumps: the code image is incomplete.
    let (code, notes) = snap.code_image();
    faults += notes.len();
    for n in notes {
        eprintln!("poketrace etm: {n}");
    }
    let mut decoder = FlowDecoder::for_buffer(Static(&code), setup.framing, &configs);
    let mut result = Ok(());
    flow::run(&mut reader, &mut decoder, |item| {
        if result.is_err() {
            return;
        }
        match item {
            Item::Frame(e) => {
                faults += 1;
                eprintln!("poketrace etm: {e}");
            }
            Item::Element(Element { kind: ElemKind::Error(e), index, trace_id }) => {
                faults += 1;
                eprintln!("poketrace etm: trace ID {trace_id:#04x}, trace index {index:#x}: {e}");
            }
            _ => {}
        }
        result = (|| -> Result<()> {
            match format {
                "opencsd" => printer.write_item(&mut text, &item),
                "text" => {
                    if let Item::Element(e) = item {
                        writeln!(text, "{}", text_line(e))?;
                    }
                }
                _ => {
                    if let Item::Element(e) = item {
                        serde_json::to_writer(&mut text, &json_line(e))?;
                        text.push(b'\n');
                    }
                }
            }
            if text.len() >= 1 << 16 {
                out.write_all(&text)?;
                text.clear();
            }
            Ok(())
        })();
    });
    result?;
    out.write_all(&text)?;
    Ok(if faults > 0 { 1 } else { 0 })
}

fn write_packet(text: &mut Vec<u8>, printer: &mut OpenCsdPrinter, format: &str, p: &TracePacket<'_>) -> Result<()> {
    match format {
        "opencsd" => printer.write_packet(text, p),
        "text" => {
            let t = p.packet.packet_type();
            writeln!(text, "{:>8} {:>3x} {:<30} {:<18} {:?}", p.index, p.trace_id, spaced(p.raw), t.name(), p.packet)?
        }
        _ => {
            let v = json!({
                "idx": p.index,
                "id": p.trace_id,
                "bytes": plain(p.raw),
                "packet": p.packet.packet_type().name(),
                "fields": format!("{:?}", p.packet),
            });
            serde_json::to_writer(&mut *text, &v)?;
            text.push(b'\n');
        }
    }
    Ok(())
}

/// OpenCSD's element name without the `OCSD_GEN_TRC_ELEM_` prefix; `ERROR` for error elements.
fn elem_name(k: &ElemKind) -> &'static str {
    match k {
        ElemKind::NoSync(_) => "NO_SYNC",
        ElemKind::TraceOn(_) => "TRACE_ON",
        ElemKind::PeContext(_) => "PE_CONTEXT",
        ElemKind::InstrRange(_) => "INSTR_RANGE",
        ElemKind::AddrNacc(_) => "ADDR_NACC",
        ElemKind::Exception { .. } => "EXCEPTION",
        ElemKind::ExceptionReturn => "EXCEPTION_RET",
        ElemKind::Timestamp { .. } => "TIMESTAMP",
        ElemKind::CycleCount(_) => "CYCLE_COUNT",
        ElemKind::Event(_) => "EVENT",
        ElemKind::EoTrace(_) => "EO_TRACE",
        ElemKind::Error(_) => "ERROR",
    }
}

fn type_name(t: InstrType, s: InstrSubtype, cond: bool) -> String {
    let mut n = match t {
        InstrType::Other => "other",
        InstrType::Branch => "branch",
        InstrType::IndirectBranch => "indirect",
        InstrType::Isb => "isb",
        InstrType::WfiWfe => "wfi/wfe",
    }
    .to_string();
    match s {
        InstrSubtype::None => {}
        InstrSubtype::Link => n.push_str("+link"),
        InstrSubtype::Ret => n.push_str(" ret"),
        InstrSubtype::Eret => n.push_str(" eret"),
    }
    if cond {
        n.push_str(" cond");
    }
    n
}

/// One readable line per element: trace index, trace ID, element, fields.
fn text_line(e: &Element) -> String {
    let what = match e.kind {
        ElemKind::InstrRange(r) => format!(
            "{:#x}..{:#x} {} insns, last {} bytes {} {} {}{}",
            r.start,
            r.end,
            r.num_i,
            r.last_size,
            r.isa.name(),
            if r.executed { "E" } else { "N" },
            type_name(r.last_type, r.last_subtype, r.last_cond),
            if r.uncertain { " uncertain" } else { "" }
        ),
        ElemKind::AddrNacc(a) => format!("no code at {a:#x}"),
        ElemKind::Exception { number, ret_addr, ret_addr_is_target } => {
            format!("number {number:#x}, return to {ret_addr:#x}{}", if ret_addr_is_target { " (also the last branch's target)" } else { "" })
        }
        ElemKind::PeContext(c) => {
            let mut s =
                format!("{} EL{} {} {}-bit", c.isa.name(), c.el, if c.secure { "secure" } else { "non-secure" }, if c.aarch64 { 64 } else { 32 });
            if let Some(v) = c.vmid {
                s += &format!(" vmid {v:#x}");
            }
            if let Some(v) = c.context_id {
                s += &format!(" ctxtid {v:#x}");
            }
            s
        }
        ElemKind::NoSync(r) | ElemKind::EoTrace(r) => r.name().to_string(),
        ElemKind::TraceOn(r) => format!("{r:?}").to_lowercase(),
        ElemKind::Timestamp { value, cycles } => match cycles {
            Some(c) => format!("{value:#x} cycles {c}"),
            None => format!("{value:#x}"),
        },
        ElemKind::CycleCount(c) => c.to_string(),
        ElemKind::Event(n) => n.to_string(),
        ElemKind::ExceptionReturn => String::new(),
        ElemKind::Error(err) => err.to_string(),
    };
    format!("{:>8} {:>3x} {:<13} {what}", e.index, e.trace_id, elem_name(&e.kind))
}

/// A JSON object per element: `idx`, `id`, `elem`, and the element's fields
/// (ranges: `start`, `end`, `num_i`, `last_sz`, `isa`, `atom`, `last_type`).
fn json_line(e: &Element) -> Value {
    let mut v = json!({ "idx": e.index, "id": e.trace_id, "elem": elem_name(&e.kind) });
    let fields = match e.kind {
        ElemKind::InstrRange(r) => json!({
            "start": r.start,
            "end": r.end,
            "num_i": r.num_i,
            "last_sz": r.last_size,
            "isa": r.isa.name(),
            "atom": if r.executed { "E" } else { "N" },
            "last_type": type_name(r.last_type, r.last_subtype, r.last_cond),
            "uncertain": r.uncertain,
        }),
        ElemKind::AddrNacc(a) => json!({ "addr": a }),
        ElemKind::Exception { number, ret_addr, ret_addr_is_target } => {
            json!({ "number": number, "ret_addr": ret_addr, "ret_addr_is_target": ret_addr_is_target })
        }
        ElemKind::PeContext(c) => json!({
            "isa": c.isa.name(), "el": c.el, "secure": c.secure, "aarch64": c.aarch64,
            "vmid": c.vmid, "context_id": c.context_id,
        }),
        ElemKind::NoSync(r) | ElemKind::EoTrace(r) => json!({ "reason": r.name() }),
        ElemKind::TraceOn(r) => json!({ "reason": format!("{r:?}").to_lowercase() }),
        ElemKind::Timestamp { value, cycles } => json!({ "timestamp": value, "cycles": cycles }),
        ElemKind::CycleCount(c) => json!({ "cycles": c }),
        ElemKind::Event(n) => json!({ "event": n }),
        ElemKind::ExceptionReturn => json!({}),
        ElemKind::Error(err) => json!({ "error": err.to_string() }),
    };
    if let (Value::Object(m), Value::Object(f)) = (&mut v, fields) {
        m.extend(f);
    }
    v
}
