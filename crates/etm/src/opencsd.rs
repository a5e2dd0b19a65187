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

use std::fmt::{self, Write};

use crate::packet::*;
use crate::TracePacket;

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

    /// Writes `p`'s line with a trailing newline. In the packets-only
    /// listing, NOT_SYNC packets after the first of a run write nothing.
    pub fn write_packet(&mut self, out: &mut impl Write, p: &TracePacket<'_>) -> fmt::Result {
        let id = (p.trace_id & 0x7F) as usize;
        let not_sync = matches!(p.packet, Packet::NotSync { .. });
        let repeat = not_sync && self.in_not_sync[id];
        self.in_not_sync[id] = not_sync;
        if let Packet::TraceInfo(TraceInfo { cc_threshold: Some(t), .. }) = p.packet {
            self.cc_threshold[id] = t;
        }
        match self.listing {
            Listing::Decode => {
                write!(out, "Idx:{}; ID:{:x}; [", p.index, p.trace_id)?;
                for b in p.raw {
                    write!(out, "0x{b:02x} ")?;
                }
                out.write_str("];\t")?;
            }
            Listing::PacketsOnly if repeat => return Ok(()),
            Listing::PacketsOnly => write!(out, "Idx:{}; ID:{:x};\t", p.index, p.trace_id)?,
        }
        write_description(out, &p.packet, self.cc_threshold[id])?;
        out.write_char('\n')
    }
}

/// OpenCSD's text for a packet: `NAME : description` and its fields.
/// `cc_threshold` is printed for TRACE_INFO packets with cycle counting on.
pub fn write_description(out: &mut impl Write, packet: &Packet, cc_threshold: u32) -> fmt::Result {
    let t = packet.packet_type();
    write!(out, "{} : {}", t.name(), t.description())?;
    match *packet {
        Packet::BadSequence { during } | Packet::IncompleteEot { during } | Packet::ReservedConfig { would_be: during, .. } => {
            write!(out, "[{}]", during.name())
        }
        Packet::Address(a) => {
            out.write_str("; Addr=")?;
            match a.form {
                AddrForm::Short => write_val(out, &a, a.update_bits),
                AddrForm::Long32 | AddrForm::Long64 => {
                    let limit = if a.form == AddrForm::Long64 { 64 } else { 32 };
                    write_val(out, &a, if a.update_bits < limit { a.update_bits } else { 0 })?;
                    out.write_str("; ")
                }
            }
        }
        Packet::AddressContext(a, c) => {
            out.write_str("; Addr=")?;
            let limit = if a.form == AddrForm::Long64 { 64 } else { 32 };
            write_val(out, &a, if a.update_bits < limit { a.update_bits } else { 0 })?;
            out.write_str("; ")?;
            write_context(out, Some(&c))
        }
        Packet::Context(c) => {
            out.write_str("; ")?;
            write_context(out, c.as_ref())
        }
        Packet::ExactMatch { index, addr } => {
            write!(out, ", [{index}]; Addr=")?;
            write_val(out, &addr, 0)?;
            out.write_str("; ")
        }
        Packet::Atom { atoms, .. } => {
            out.write_str("; ")?;
            write_atoms(out, &atoms)
        }
        Packet::Exception(e) => {
            out.write_str("; ")?;
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
                out.write_str(", Mispredict")?;
            }
            Ok(())
        }
        Packet::Mispredict(a) => {
            out.write_str("; ")?;
            if a.count > 0 {
                out.write_str("Atom: ")?;
                write_atoms(out, &a)?;
                out.write_str(", ")?;
            }
            out.write_str("Mispredict")
        }
        Packet::CancelF2(a) => {
            out.write_str("; ")?;
            if a.count > 0 {
                out.write_str("Atom: ")?;
                write_atoms(out, &a)?;
                out.write_str(", ")?;
            }
            out.write_str("Cancel(1), Mispredict")
        }
        Packet::CancelF3 { e_atom, count } => {
            out.write_str("; ")?;
            if e_atom {
                out.write_str("Atom: E, ")?;
            }
            write!(out, "Cancel({count}), Mispredict")
        }
        Packet::Commit(n) => write!(out, "; Commit({n})"),
        Packet::Q(q) => {
            match q.count {
                Some(n) => write!(out, "; Count({n})")?,
                None => out.write_str("; Count(Unknown)")?,
            }
            // Q addresses show the bits their register was last updated by, 64 excepted.
            let (prefix, a) = match q.addr {
                QAddress::None => return Ok(()),
                QAddress::ExactMatch { index, addr } => {
                    write!(out, "; [{index}]")?;
                    ("; Addr=", addr)
                }
                QAddress::Address(a) => ("; Addr=", a),
            };
            out.write_str(prefix)?;
            write_val(out, &a, if a.update_bits < 64 { a.update_bits } else { 0 })
        }
        _ => Ok(()),
    }
}

fn write_atoms(out: &mut impl Write, a: &Atoms) -> fmt::Result {
    for e in a.iter() {
        out.write_char(if e { 'E' } else { 'N' })?;
    }
    Ok(())
}

/// OpenCSD's address text: `0x` and hex digits for the valid bits, `?` for
/// unknown digits with `(N:0)`, and ` ~[0x..]` for the bits the packet updated.
fn write_val(out: &mut impl Write, a: &Address, update_bits: u8) -> fmt::Result {
    let total = if a.is64 { 64 } else { 32 };
    let hex_chars = total / 4;
    let valid_chars = (a.valid_bits as usize).div_ceil(4);
    out.write_str("0x")?;
    for _ in valid_chars..hex_chars {
        out.write_char('?')?;
    }
    if a.valid_bits > 32 {
        write!(out, "{:0w$X}", a.value, w = valid_chars)?;
    } else {
        write!(out, "{:0w$X}", a.value as u32, w = valid_chars)?;
    }
    if (a.valid_bits as usize) < total {
        write!(out, " ({}:0)", a.valid_bits as i32 - 1)?;
    }
    if update_bits > 0 {
        let mask = u64::MAX >> (64 - update_bits as u32);
        write!(out, " ~[0x{:X}]", a.value & mask)?;
    }
    Ok(())
}

fn write_context(out: &mut impl Write, c: Option<&Context>) -> fmt::Result {
    let Some(c) = c else { return out.write_str("Ctxt: Same") };
    write!(
        out,
        "Ctxt: {}EL{}, {}",
        if c.aarch64 { "AArch64," } else { "AArch32, " },
        c.el,
        if c.non_secure { "NS; " } else { "S; " }
    )?;
    if let Some(cid) = c.context_id {
        write!(out, "CID=0x{cid:08x}; ")?;
    }
    if let Some(vmid) = c.vmid {
        write!(out, "VMID=0x{vmid:04x}; ")?;
    }
    Ok(())
}

const A_EXCEPTIONS: [&str; 16] = [
    "PE Reset", "Debug Halt", "Call", "Trap", "System Error", "Reserved", "Inst Debug", "Data Debug", "Reserved", "Reserved", "Alignment",
    "Inst Fault", "Data Fault", "Reserved", "IRQ", "FIQ",
];

const M_EXCEPTIONS: [&str; 32] = [
    "Reserved", "PE Reset", "NMI", "HardFault", "MemManage", "BusFault", "UsageFault", "Reserved", "Reserved", "Reserved", "Reserved",
    "SVC", "DebugMonitor", "Reserved", "PendSV", "SysTick", "IRQ0", "IRQ1", "IRQ2", "IRQ3", "IRQ4", "IRQ5", "IRQ6", "IRQ7", "DebugHalt",
    "LazyFP Push", "Lockup", "Reserved", "Reserved", "Reserved", "Reserved", "Reserved",
];

fn write_exception(out: &mut impl Write, e: &Exception) -> fmt::Result {
    let n = e.number as usize;
    if !e.m_profile {
        write!(out, " {};", A_EXCEPTIONS.get(n).unwrap_or(&"Reserved"))?;
    } else {
        match n {
            0..=0x1F => write!(out, " {};", M_EXCEPTIONS[n])?,
            0x208..=0x3EF => write!(out, " IRQ{};", n - 0x200)?,
            _ => out.write_str(" Reserved;")?,
        }
        if e.fault_pending {
            out.write_str(" Fault Pending;")?;
        }
    }
    match e.addr_interp {
        1 => out.write_str(" Ret Addr Follows;"),
        2 => out.write_str(" Ret Addr Follows, Match Prev;"),
        _ => Ok(()),
    }
}
