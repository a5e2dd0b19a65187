//! `etm`'s own listings of packets and elements: a readable line each
//! (`--format text`) or a JSON object each, its keys in sorted order as
//! `serde_json` writes a map (`--format json`). Written straight into the
//! output buffer: a range line is most of a decode's output.

use etm::flow::{ElemKind, Element, InstrRange, InstrSubtype, InstrType};
use etm::TracePacket;

use crate::text::Text;

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

/// The last instruction's kind: `branch`, `indirect ret`, `branch+link cond`, ...
fn type_name(t: &mut Text, r: &InstrRange) {
    t.str(match r.last_type {
        InstrType::Other => "other",
        InstrType::Branch => "branch",
        InstrType::IndirectBranch => "indirect",
        InstrType::Isb => "isb",
        InstrType::WfiWfe => "wfi/wfe",
    });
    t.str(match r.last_subtype {
        InstrSubtype::None => "",
        InstrSubtype::Link => "+link",
        InstrSubtype::Ret => " ret",
        InstrSubtype::Eret => " eret",
    });
    if r.last_cond {
        t.str(" cond");
    }
}

fn atom(r: &InstrRange) -> &'static str {
    if r.executed {
        "E"
    } else {
        "N"
    }
}

/// One readable line: trace index, trace ID, element, its fields.
pub fn text_element(t: &mut Text, e: &Element) {
    let at = t.mark();
    t.dec(e.index).right(at, 8).byte(b' ').hex_right(u64::from(e.trace_id), 3).byte(b' ').str_left(elem_name(&e.kind), 13).byte(b' ');
    match e.kind {
        ElemKind::InstrRange(r) => {
            t.hex_0x(r.start).str("..").hex_0x(r.end).byte(b' ').dec(r.num_i.into()).str(" insns, last ").dec(r.last_size.into());
            t.str(" bytes ").str(r.isa.name()).byte(b' ').str(atom(&r)).byte(b' ');
            type_name(t, &r);
            if r.uncertain {
                t.str(" uncertain");
            }
        }
        ElemKind::AddrNacc(a) => {
            t.str("no code at ").hex_0x(a);
        }
        ElemKind::Exception { number, ret_addr, ret_addr_is_target } => {
            t.str("number ").hex_0x(number.into()).str(", return to ").hex_0x(ret_addr);
            if ret_addr_is_target {
                t.str(" (also the last branch's target)");
            }
        }
        ElemKind::PeContext(c) => {
            t.str(c.isa.name()).str(" EL").dec(c.el.into()).str(if c.secure { " secure" } else { " non-secure" });
            t.str(if c.aarch64 { " 64-bit" } else { " 32-bit" });
            if let Some(v) = c.vmid {
                t.str(" vmid ").hex_0x(v.into());
            }
            if let Some(v) = c.context_id {
                t.str(" ctxtid ").hex_0x(v.into());
            }
        }
        ElemKind::NoSync(r) | ElemKind::EoTrace(r) => {
            t.str(r.name());
        }
        ElemKind::TraceOn(r) => {
            t.str(&format!("{r:?}").to_lowercase());
        }
        ElemKind::Timestamp { value, cycles } => {
            t.hex_0x(value);
            if let Some(c) = cycles {
                t.str(" cycles ").dec(c.into());
            }
        }
        ElemKind::CycleCount(c) => {
            t.dec(c.into());
        }
        ElemKind::Event(n) => {
            t.dec(n.into());
        }
        ElemKind::ExceptionReturn => {}
        ElemKind::Error(err) => {
            t.str(&err.to_string());
        }
    }
    t.byte(b'\n');
}

/// A JSON string value.
fn string(t: &mut Text, s: &str) {
    t.byte(b'"').json_chars(s).byte(b'"');
}

/// One JSON object: `idx`, `id`, `elem`, and the element's fields (ranges:
/// `start`, `end`, `num_i`, `last_sz`, `isa`, `atom`, `last_type`, `uncertain`),
/// all in sorted key order.
pub fn json_element(t: &mut Text, e: &Element) {
    let elem = |t: &mut Text| {
        t.str("\"elem\":");
        string(t, elem_name(&e.kind));
    };
    let ids = |t: &mut Text| {
        t.str("\"id\":").dec(e.trace_id.into()).str(",\"idx\":").dec(e.index);
    };
    let head = |t: &mut Text| {
        elem(t);
        t.byte(b',');
        ids(t);
    };
    t.byte(b'{');
    match e.kind {
        ElemKind::InstrRange(r) => {
            t.str("\"atom\":\"").str(atom(&r)).str("\",");
            elem(t);
            t.str(",\"end\":").dec(r.end).byte(b',');
            ids(t);
            t.str(",\"isa\":\"").str(r.isa.name()).str("\",\"last_sz\":").dec(r.last_size.into()).str(",\"last_type\":\"");
            type_name(t, &r);
            t.str("\",\"num_i\":").dec(r.num_i.into()).str(",\"start\":").dec(r.start);
            t.str(",\"uncertain\":").str(bool_str(r.uncertain));
        }
        ElemKind::AddrNacc(a) => {
            t.str("\"addr\":").dec(a).byte(b',');
            head(t);
        }
        ElemKind::Exception { number, ret_addr, ret_addr_is_target } => {
            head(t);
            t.str(",\"number\":").dec(number.into()).str(",\"ret_addr\":").dec(ret_addr);
            t.str(",\"ret_addr_is_target\":").str(bool_str(ret_addr_is_target));
        }
        ElemKind::PeContext(c) => {
            t.str("\"aarch64\":").str(bool_str(c.aarch64)).str(",\"context_id\":");
            opt(t, c.context_id.map(u64::from));
            t.str(",\"el\":").dec(c.el.into()).byte(b',');
            head(t);
            t.str(",\"isa\":");
            string(t, c.isa.name());
            t.str(",\"secure\":").str(bool_str(c.secure)).str(",\"vmid\":");
            opt(t, c.vmid.map(u64::from));
        }
        ElemKind::NoSync(r) | ElemKind::EoTrace(r) => {
            head(t);
            t.str(",\"reason\":");
            string(t, r.name());
        }
        ElemKind::TraceOn(r) => {
            head(t);
            t.str(",\"reason\":");
            string(t, &format!("{r:?}").to_lowercase());
        }
        ElemKind::Timestamp { value, cycles } => {
            t.str("\"cycles\":");
            opt(t, cycles.map(u64::from));
            t.byte(b',');
            head(t);
            t.str(",\"timestamp\":").dec(value);
        }
        ElemKind::CycleCount(c) => {
            t.str("\"cycles\":").dec(c.into()).byte(b',');
            head(t);
        }
        ElemKind::Event(n) => {
            elem(t);
            t.str(",\"event\":").dec(n.into()).byte(b',');
            ids(t);
        }
        ElemKind::ExceptionReturn => head(t),
        ElemKind::Error(err) => {
            elem(t);
            t.str(",\"error\":");
            string(t, &err.to_string());
            t.byte(b',');
            ids(t);
        }
    }
    t.str("}\n");
}

fn bool_str(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

fn opt(t: &mut Text, v: Option<u64>) {
    match v {
        Some(v) => t.dec(v),
        None => t.str("null"),
    };
}

/// One readable line per packet: trace index, trace ID, raw bytes, packet type, fields.
pub fn text_packet(t: &mut Text, p: &TracePacket<'_>) {
    let at = t.mark();
    t.dec(p.index).right(at, 8).byte(b' ').hex_right(u64::from(p.trace_id), 3).byte(b' ');
    let at = t.mark();
    for (i, b) in p.raw.iter().enumerate() {
        if i > 0 {
            t.byte(b' ');
        }
        t.hex_byte(*b);
    }
    t.left(at, 30).byte(b' ').str_left(p.packet.packet_type().name(), 18).byte(b' ');
    t.str(&format!("{:?}", p.packet)).byte(b'\n');
}

/// One JSON object per packet: `bytes`, `fields` (the packet's fields as Rust
/// writes them), `id`, `idx`, `packet`.
pub fn json_packet(t: &mut Text, p: &TracePacket<'_>) {
    t.str("{\"bytes\":\"");
    for b in p.raw {
        t.hex_byte(*b);
    }
    t.str("\",\"fields\":");
    string(t, &format!("{:?}", p.packet));
    t.str(",\"id\":").dec(p.trace_id.into()).str(",\"idx\":").dec(p.index).str(",\"packet\":");
    string(t, p.packet.packet_type().name());
    t.str("}\n");
}

#[cfg(test)]
mod tests {
    use etm::flow::{FlowError, Isa, PeContext, TraceOnReason, UnsyncReason};

    use super::*;

    /// One element of every kind, with fields that need escaping or are absent.
    fn every_kind() -> Vec<ElemKind> {
        let range = InstrRange {
            start: 0x4000,
            end: 0x4010,
            num_i: 4,
            last_size: 4,
            isa: Isa::A64,
            executed: false,
            last_type: InstrType::IndirectBranch,
            last_subtype: InstrSubtype::Ret,
            last_cond: true,
            uncertain: true,
            picked: Default::default(),
        };
        let context = PeContext { isa: Isa::A64, el: 1, secure: true, aarch64: true, vmid: Some(7), context_id: None };
        vec![
            ElemKind::NoSync(UnsyncReason::InitDecoder),
            ElemKind::TraceOn(TraceOnReason::Overflow),
            ElemKind::PeContext(context),
            ElemKind::PeContext(PeContext { vmid: None, context_id: Some(u32::MAX), ..context }),
            ElemKind::InstrRange(range),
            ElemKind::InstrRange(InstrRange {
                executed: true,
                last_type: InstrType::Branch,
                last_subtype: InstrSubtype::Link,
                uncertain: false,
                ..range
            }),
            ElemKind::AddrNacc(u64::MAX),
            ElemKind::Exception { number: 0x1f, ret_addr: 0xffff_0000_0000_1234, ret_addr_is_target: true },
            ElemKind::ExceptionReturn,
            ElemKind::Timestamp { value: 1 << 40, cycles: Some(9) },
            ElemKind::Timestamp { value: 0, cycles: None },
            ElemKind::CycleCount(123),
            ElemKind::Event(3),
            ElemKind::EoTrace(UnsyncReason::EndOfTrace),
            ElemKind::Error(FlowError::CommitOverrun),
        ]
    }

    /// The direct writer gives exactly what serde_json gives for the same
    /// object: the keys sorted, the same numbers, escapes and nulls.
    #[test]
    fn json_element_is_serde_jsons_sorted_object() {
        for (i, kind) in every_kind().into_iter().enumerate() {
            let e = Element { trace_id: 0x10 + i as u8, index: 1000 * i as u64, kind };
            let mut t = Text::default();
            json_element(&mut t, &e);
            let line = std::str::from_utf8(t.as_bytes()).unwrap();
            let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|err| panic!("{line}: {err}"));
            assert_eq!(line, format!("{}\n", serde_json::to_string(&value).unwrap()), "{e:?}");
            assert_eq!(value["elem"], elem_name(&e.kind));
            assert_eq!(value["idx"], e.index);
        }
    }

    #[test]
    fn text_element_columns() {
        let e = Element { trace_id: 0x12, index: 384, kind: every_kind()[4] };
        let mut t = Text::default();
        text_element(&mut t, &e);
        assert_eq!(
            std::str::from_utf8(t.as_bytes()).unwrap(),
            "     384  12 INSTR_RANGE   0x4000..0x4010 4 insns, last 4 bytes A64 N indirect ret cond uncertain\n"
        );
    }
}
