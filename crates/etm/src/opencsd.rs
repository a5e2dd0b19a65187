//! Packet lines in the layout of OpenCSD's `trc_pkt_lister`, so that our
//! listing and theirs can be diffed line for line:
//!
//! ```text
//! Idx:1693; ID:10; [0x9d 0x30 0x25 0x59 0x00 0xc0 0xff 0xff 0xff ];<TAB>I_ADDR_L_64IS0 : Address, Long, 64 bit, IS0.; Addr=0xFFFFFFC000594AC0;
//! ```
//!
//! (`<TAB>` is a tab.) `Idx` is OpenCSD's trace index (for frame-formatted buffers, counted from
//! the start of the frame run the packet's bytes came in), `ID` the trace ID
//! in hex, then the packet's raw bytes, OpenCSD's packet name, description
//! and fields.

use std::io::Write;

use crate::flow::{ElemKind, Element, InstrSubtype, InstrType, Item, TraceOnReason};
use crate::packet::*;
use crate::TracePacket;

const HEX: [u8; 16] = *b"0123456789abcdef";

/// Which `trc_pkt_lister` listing to reproduce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Listing {
    /// `trc_pkt_lister -decode` (the packet lines): raw bytes on every line,
    /// and every piece of skipped unsynchronised data as its own NOT_SYNC line.
    #[default]
    Decode,
    /// `trc_pkt_lister` without `-decode`: no raw bytes, one NOT_SYNC line per run of unsynchronised data.
    PacketsOnly,
}

/// Formats packets as `trc_pkt_lister` lines. Keeps the little per-source
/// state OpenCSD's text depends on (the last cycle count threshold, whether
/// the previous packet was NOT_SYNC).
#[derive(Clone, Debug)]
pub struct OpenCsdPrinter {
    listing: Listing,
    cc_threshold: [u32; 128],
    in_not_sync: [bool; 128],
}

impl OpenCsdPrinter {
    pub fn new(listing: Listing) -> OpenCsdPrinter {
        OpenCsdPrinter { listing, cc_threshold: [0; 128], in_not_sync: [false; 128] }
    }

    /// Appends `p`'s line and a newline to `out` (ASCII text). In the
    /// packets-only listing, NOT_SYNC packets after the first of a run add
    /// nothing. Writes into bytes, not a `fmt::Write`: a listing of a
    /// million lines is mostly these few dozen bytes each.
    pub fn write_packet(&mut self, out: &mut Vec<u8>, p: &TracePacket<'_>) {
        let id = (p.trace_id & 0x7F) as usize;
        let not_sync = matches!(p.packet, Packet::NotSync { .. });
        let repeat = not_sync && self.in_not_sync[id];
        self.in_not_sync[id] = not_sync;
        if let Packet::TraceInfo(TraceInfo { cc_threshold: Some(t), .. }) = p.packet {
            self.cc_threshold[id] = t;
        }
        if self.listing == Listing::PacketsOnly && repeat {
            return;
        }
        out.extend_from_slice(b"Idx:");
        write_decimal(out, p.index);
        out.extend_from_slice(b"; ID:");
        if p.trace_id >= 16 {
            out.push(HEX[(p.trace_id >> 4) as usize]);
        }
        out.push(HEX[(p.trace_id & 0xF) as usize]);
        if self.listing == Listing::Decode {
            out.extend_from_slice(b"; [");
            for b in p.raw {
                out.extend_from_slice(&[b'0', b'x', HEX[(b >> 4) as usize], HEX[(b & 0xF) as usize], b' ']);
            }
            out.extend_from_slice(b"];\t");
        } else {
            out.extend_from_slice(b";\t");
        }
        write_description(out, &p.packet, self.cc_threshold[id]);
        out.push(b'\n');
    }
}

impl OpenCsdPrinter {
    /// Appends what `trc_pkt_lister -decode` prints for one item of a flow
    /// decode ([`crate::flow::run`]): a packet line, an element line, or
    /// `ID:10<TAB>END OF TRACE DATA` at a source's end. Frame errors and
    /// error elements print nothing (OpenCSD logs them elsewhere).
    pub fn write_item(&mut self, out: &mut Vec<u8>, item: &Item<'_>) {
        match *item {
            Item::Packet(p) => self.write_packet(out, p),
            Item::Element(e) => {
                write_element(out, e);
            }
            Item::End(id) => {
                out.extend_from_slice(b"ID:");
                if id >= 16 {
                    out.push(HEX[(id >> 4) as usize]);
                }
                out.push(HEX[(id & 0xF) as usize]);
                out.extend_from_slice(b"\tEND OF TRACE DATA\n");
            }
            Item::Frame(_) => {}
        }
    }
}

fn write_decimal(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends OpenCSD's text for a packet: `NAME : description` and its
/// fields. `cc_threshold` is printed for TRACE_INFO packets with cycle
/// counting on.
pub fn write_description(out: &mut Vec<u8>, packet: &Packet, cc_threshold: u32) {
    let t = packet.packet_type();
    out.extend_from_slice(t.name().as_bytes());
    out.extend_from_slice(b" : ");
    out.extend_from_slice(t.description().as_bytes());
    // Writing to a Vec cannot fail.
    let _ = fields(out, packet, cc_threshold);
}

fn fields(out: &mut Vec<u8>, packet: &Packet, cc_threshold: u32) -> std::io::Result<()> {
    match *packet {
        Packet::BadSequence { during } | Packet::IncompleteEot { during } | Packet::ReservedConfig { would_be: during, .. } => {
            write!(out, "[{}]", during.name())
        }
        Packet::Address(a) => {
            out.extend_from_slice(b"; Addr=");
            match a.form {
                AddrForm::Short => write_val(out, &a, a.update_bits),
                AddrForm::Long32 | AddrForm::Long64 => {
                    let limit = if a.form == AddrForm::Long64 { 64 } else { 32 };
                    write_val(out, &a, if a.update_bits < limit { a.update_bits } else { 0 });
                    out.extend_from_slice(b"; ");
                }
            }
            Ok(())
        }
        Packet::AddressContext(a, c) => {
            out.extend_from_slice(b"; Addr=");
            let limit = if a.form == AddrForm::Long64 { 64 } else { 32 };
            write_val(out, &a, if a.update_bits < limit { a.update_bits } else { 0 });
            out.extend_from_slice(b"; ");
            write_context(out, Some(&c))
        }
        Packet::Context(c) => {
            out.extend_from_slice(b"; ");
            write_context(out, c.as_ref())
        }
        Packet::ExactMatch { index, addr } => {
            write!(out, ", [{index}]; Addr=")?;
            write_val(out, &addr, 0);
            out.extend_from_slice(b"; ");
            Ok(())
        }
        Packet::Atom { atoms, .. } => {
            out.extend_from_slice(b"; ");
            write_atoms(out, &atoms);
            Ok(())
        }
        Packet::Exception(e) => {
            out.extend_from_slice(b"; ");
            write_exception(out, &e)
        }
        Packet::Timestamp(ts) => {
            write!(out, "; Updated val = 0x{:x}", ts.value)?;
            if let Some(cc) = ts.cycle_count {
                write!(out, "; CC=0x{cc:x}")?;
            }
            Ok(())
        }
        Packet::TraceInfo(ti) => {
            write!(out, "; INFO=0x{:x} {{ CC.{} }}", ti.info, ti.info & 1)?;
            if ti.cycle_counting() {
                write!(out, "; CC_THRESHOLD=0x{cc_threshold:x}")?;
            }
            Ok(())
        }
        Packet::CycleCount(c) => write!(out, "; Count=0x{:x}", c.count.unwrap_or(0)),
        Packet::CancelF1 { count, mispredict } => {
            write!(out, "; Cancel({count})")?;
            if mispredict {
                out.extend_from_slice(b", Mispredict");
            }
            Ok(())
        }
        Packet::Mispredict(a) => {
            out.extend_from_slice(b"; ");
            if a.count > 0 {
                out.extend_from_slice(b"Atom: ");
                write_atoms(out, &a);
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(b"Mispredict");
            Ok(())
        }
        Packet::CancelF2(a) => {
            out.extend_from_slice(b"; ");
            if a.count > 0 {
                out.extend_from_slice(b"Atom: ");
                write_atoms(out, &a);
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(b"Cancel(1), Mispredict");
            Ok(())
        }
        Packet::CancelF3 { e_atom, count } => {
            out.extend_from_slice(b"; ");
            if e_atom {
                out.extend_from_slice(b"Atom: E, ");
            }
            write!(out, "Cancel({count}), Mispredict")
        }
        Packet::Commit(n) => write!(out, "; Commit({n})"),
        Packet::Q(q) => {
            match q.count {
                Some(n) => write!(out, "; Count({n})")?,
                None => out.extend_from_slice(b"; Count(Unknown)"),
            }
            // Q addresses show the bits their register was last updated by, 64 excepted.
            let a = match q.addr {
                QAddress::None => return Ok(()),
                QAddress::ExactMatch { index, addr } => {
                    write!(out, "; [{index}]")?;
                    addr
                }
                QAddress::Address(a) => a,
            };
            out.extend_from_slice(b"; Addr=");
            write_val(out, &a, if a.update_bits < 64 { a.update_bits } else { 0 });
            Ok(())
        }
        _ => Ok(()),
    }
}

fn write_atoms(out: &mut Vec<u8>, a: &Atoms) {
    out.extend(a.iter().map(|e| if e { b'E' } else { b'N' }));
}

/// `v` in upper-case hex, at least `width` digits (zero-padded), like `%0*llX`.
fn write_hex(out: &mut Vec<u8>, v: u64, width: usize) {
    let digits = (64 - v.leading_zeros() as usize).div_ceil(4).max(1);
    out.extend(std::iter::repeat_n(b'0', width.saturating_sub(digits)));
    out.extend((0..digits).rev().map(|k| b"0123456789ABCDEF"[((v >> (4 * k)) & 0xF) as usize]));
}

/// OpenCSD's address text: `0x` and hex digits for the valid bits, `?` for
/// unknown digits with `(N:0)`, and ` ~[0x..]` for the bits the packet updated.
fn write_val(out: &mut Vec<u8>, a: &Address, update_bits: u8) {
    let total = if a.is64 { 64 } else { 32 };
    let valid_chars = (a.valid_bits as usize).div_ceil(4);
    out.extend_from_slice(b"0x");
    out.extend(std::iter::repeat_n(b'?', (total / 4usize).saturating_sub(valid_chars)));
    write_hex(out, if a.valid_bits > 32 { a.value } else { a.value as u32 as u64 }, valid_chars);
    if (a.valid_bits as usize) < total {
        let _ = write!(out, " ({}:0)", a.valid_bits as i32 - 1);
    }
    if update_bits > 0 {
        out.extend_from_slice(b" ~[0x");
        write_hex(out, a.value & (u64::MAX >> (64 - update_bits as u32)), 0);
        out.push(b']');
    }
}

fn write_context(out: &mut Vec<u8>, c: Option<&Context>) -> std::io::Result<()> {
    let Some(c) = c else {
        out.extend_from_slice(b"Ctxt: Same");
        return Ok(());
    };
    out.extend_from_slice(if c.aarch64 { b"Ctxt: AArch64,EL" } else { b"Ctxt: AArch32, EL" });
    write!(out, "{}, {}", c.el, if c.non_secure { "NS; " } else { "S; " })?;
    if let Some(cid) = c.context_id {
        write!(out, "CID=0x{cid:08x}; ")?;
    }
    if let Some(vmid) = c.vmid {
        write!(out, "VMID=0x{vmid:04x}; ")?;
    }
    Ok(())
}

const A_EXCEPTIONS: [&str; 16] = [
    "PE Reset",
    "Debug Halt",
    "Call",
    "Trap",
    "System Error",
    "Reserved",
    "Inst Debug",
    "Data Debug",
    "Reserved",
    "Reserved",
    "Alignment",
    "Inst Fault",
    "Data Fault",
    "Reserved",
    "IRQ",
    "FIQ",
];

const M_EXCEPTIONS: [&str; 32] = [
    "Reserved",
    "PE Reset",
    "NMI",
    "HardFault",
    "MemManage",
    "BusFault",
    "UsageFault",
    "Reserved",
    "Reserved",
    "Reserved",
    "Reserved",
    "SVC",
    "DebugMonitor",
    "Reserved",
    "PendSV",
    "SysTick",
    "IRQ0",
    "IRQ1",
    "IRQ2",
    "IRQ3",
    "IRQ4",
    "IRQ5",
    "IRQ6",
    "IRQ7",
    "DebugHalt",
    "LazyFP Push",
    "Lockup",
    "Reserved",
    "Reserved",
    "Reserved",
    "Reserved",
    "Reserved",
];

fn write_exception(out: &mut Vec<u8>, e: &Exception) -> std::io::Result<()> {
    let n = e.number as usize;
    if !e.m_profile {
        write!(out, " {};", A_EXCEPTIONS.get(n).unwrap_or(&"Reserved"))?;
    } else {
        match n {
            0..=0x1F => write!(out, " {};", M_EXCEPTIONS[n])?,
            0x208..=0x3EF => write!(out, " IRQ{};", n - 0x200)?,
            _ => out.extend_from_slice(b" Reserved;"),
        }
        if e.fault_pending {
            out.extend_from_slice(b" Fault Pending;");
        }
    }
    match e.addr_interp {
        1 => out.extend_from_slice(b" Ret Addr Follows;"),
        2 => out.extend_from_slice(b" Ret Addr Follows, Match Prev;"),
        _ => {}
    }
    Ok(())
}

/// Appends an element's line as `trc_pkt_lister -decode` prints it
/// (`Idx:..; ID:..; OCSD_GEN_TRC_ELEM_...(...)`) and returns true; error
/// elements have no such line (OpenCSD logs them elsewhere, then reports
/// the NO_SYNC that follows): nothing is written and it returns false.
pub fn write_element(out: &mut Vec<u8>, e: &Element) -> bool {
    if matches!(e.kind, ElemKind::Error(_)) {
        return false;
    }
    out.extend_from_slice(b"Idx:");
    write_decimal(out, e.index);
    out.extend_from_slice(b"; ID:");
    if e.trace_id >= 16 {
        out.push(HEX[(e.trace_id >> 4) as usize]);
    }
    out.push(HEX[(e.trace_id & 0xF) as usize]);
    out.extend_from_slice(b"; OCSD_GEN_TRC_ELEM_");
    write_element_body(out, &e.kind);
    out.push(b'\n');
    true
}

/// `0x` and lower-case hex digits, like `std::hex`.
fn write_hex_lower(out: &mut Vec<u8>, v: u64) {
    let digits = (64 - v.leading_zeros() as usize).div_ceil(4).max(1);
    out.extend_from_slice(b"0x");
    out.extend((0..digits).rev().map(|k| HEX[((v >> (4 * k)) & 0xF) as usize]));
}

/// OpenCSD's element text after `OCSD_GEN_TRC_ELEM_`: the type name and its fields in parentheses.
fn write_element_body(out: &mut Vec<u8>, k: &ElemKind) {
    match *k {
        ElemKind::InstrRange(r) => {
            out.extend_from_slice(b"INSTR_RANGE(exec range=");
            write_hex_lower(out, r.start);
            out.extend_from_slice(b":[");
            write_hex_lower(out, r.end);
            out.extend_from_slice(b"] num_i(");
            write_decimal(out, r.num_i as u64);
            out.extend_from_slice(b") last_sz(");
            write_decimal(out, r.last_size as u64);
            out.extend_from_slice(b") (ISA=");
            out.extend_from_slice(r.isa.name().as_bytes());
            out.extend_from_slice(if r.executed { b") E " } else { b") N " });
            out.extend_from_slice(match r.last_type {
                InstrType::Other => b"--- ",
                InstrType::Branch => b"BR  ",
                InstrType::IndirectBranch => b"iBR ",
                InstrType::Isb => b"ISB ",
                InstrType::WfiWfe => b"WFI.WFE",
            });
            out.extend_from_slice(match r.last_subtype {
                InstrSubtype::None => &b""[..],
                InstrSubtype::Link => b"b+link ",
                InstrSubtype::Ret => b"A64:ret ",
                InstrSubtype::Eret => b"A64:eret ",
            });
            if r.last_cond {
                out.extend_from_slice(b" <cond>");
            }
            out.push(b')');
        }
        ElemKind::AddrNacc(a) => {
            out.extend_from_slice(b"ADDR_NACC( ");
            write_hex_lower(out, a);
            out.extend_from_slice(b" )");
        }
        ElemKind::NoSync(r) => {
            let _ = write!(out, "NO_SYNC( [{}])", r.name());
        }
        ElemKind::EoTrace(r) => {
            let _ = write!(out, "EO_TRACE( [{}])", r.name());
        }
        ElemKind::TraceOn(r) => {
            let _ = write!(
                out,
                "TRACE_ON( [{}])",
                match r {
                    TraceOnReason::Normal => "begin or filter",
                    TraceOnReason::Overflow => "overflow",
                }
            );
        }
        ElemKind::PeContext(c) => {
            let _ = write!(
                out,
                "PE_CONTEXT((ISA={}) EL{}{}; {}-bit; ",
                c.isa.name(),
                c.el,
                if c.secure { "S" } else { "N" },
                if c.aarch64 { 64 } else { 32 }
            );
            if let Some(v) = c.vmid {
                let _ = write!(out, "VMID=0x{v:x}; ");
            }
            if let Some(v) = c.context_id {
                let _ = write!(out, "CTXTID=0x{v:x}; ");
            }
            out.push(b')');
        }
        ElemKind::Exception { number, ret_addr, ret_addr_is_target } => {
            let _ = write!(
                out,
                "EXCEPTION(pref ret addr:0x{ret_addr:x}{}; excep num (0x{number:02x}) )",
                if ret_addr_is_target { " [addr also prev br tgt]" } else { "" }
            );
        }
        ElemKind::ExceptionReturn => out.extend_from_slice(b"EXCEPTION_RET()"),
        ElemKind::Timestamp { value, cycles } => {
            let _ = write!(out, "TIMESTAMP( [ TS=0x{value:012x}]; ");
            if let Some(c) = cycles {
                let _ = write!(out, " [CC={c}]; ");
            }
            out.push(b')');
        }
        ElemKind::CycleCount(c) => {
            let _ = write!(out, "CYCLE_COUNT( [CC={c}]; )");
        }
        ElemKind::Event(n) => {
            let _ = write!(out, "EVENT( Numbered:{n}; )");
        }
        ElemKind::Error(e) => {
            let _ = write!(out, "ERROR({e})");
        }
    }
}
