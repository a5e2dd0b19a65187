//! Each packet's name and payload as ptdump prints them: IPs with the
//! bytes the packet does not carry as `?`, TNT outcomes as `!` (taken) and
//! `.`, hex values without leading zeros, flags by name.

use std::fmt::Write as _;

use intel_pt::{Ip, IpCompression, Packet};

use super::line::Line;
use super::reader::Item;

/// Fills the line's name and payload columns for `item`. The tracking
/// column is left to the caller.
pub fn describe(item: &Item, line: &mut Line) {
    // Writing to a String cannot fail.
    let _ = match *item {
        Item::Invalid => {
            line.opcode = "<invalid>";
            Ok(())
        }
        Item::Packet(packet) => {
            line.opcode = name(&packet);
            payload(&packet, line)
        }
    };
}

/// ptdump's name of a packet.
fn name(packet: &Packet) -> &'static str {
    match packet {
        Packet::Pad => "pad",
        Packet::Psb => "psb",
        Packet::PsbEnd => "psbend",
        Packet::Ovf => "ovf",
        Packet::Stop => "stop",
        Packet::TntShort(_) => "tnt.8",
        Packet::TntLong(_) => "tnt.64",
        Packet::Tip(_) => "tip",
        Packet::TipPge(_) => "tip.pge",
        Packet::TipPgd(_) => "tip.pgd",
        Packet::Fup(_) => "fup",
        Packet::ModeExec { .. } => "mode.exec",
        Packet::ModeTsx { .. } => "mode.tsx",
        Packet::Pip { .. } => "pip",
        Packet::Tsc(_) => "tsc",
        Packet::Mtc(_) => "mtc",
        Packet::Cyc(_) => "cyc",
        Packet::Tma { .. } => "tma",
        Packet::Cbr(_) => "cbr",
        Packet::Vmcs(_) => "vmcs",
        Packet::Mnt(_) => "mnt",
        Packet::Ptw { .. } => "ptw",
        Packet::Exstop { .. } => "exstop",
        Packet::Mwait { .. } => "mwait",
        Packet::Pwre { .. } => "pwre",
        Packet::Pwrx { .. } => "pwrx",
        Packet::Cfe { .. } => "cfe",
        Packet::Evd { .. } => "evd",
        Packet::Trig { .. } => "trig",
        // The reader turns these into errors, as libipt has no such packets.
        Packet::Bbp { .. } => "bbp",
        Packet::Bip { .. } => "bip",
        Packet::Bep { .. } => "bep",
    }
}

fn payload(packet: &Packet, line: &mut Line) -> std::fmt::Result {
    let p = &mut line.payload;
    match *packet {
        Packet::TntShort(t) | Packet::TntLong(t) => {
            line.wide_payload = true;
            for i in 0..t.count {
                p.push(if t.taken(i) { '!' } else { '.' });
            }
            Ok(())
        }
        Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => ip_payload(ip, p),
        Packet::ModeExec { csl, csd, if_flag } => flags(p, &[(csd, "cs.d"), (csl, "cs.l"), (if_flag, "if")]),
        Packet::ModeTsx { intx, abort } => flags(p, &[(intx, "intx"), (abort, "abrt")]),
        Packet::Pip { cr3, nr } => write!(p, "{cr3:x}{}", if nr { ", nr" } else { "" }),
        Packet::Tsc(v) | Packet::Cyc(v) | Packet::Mnt(v) | Packet::Vmcs(v) => write!(p, "{v:x}"),
        Packet::Mtc(v) | Packet::Cbr(v) => write!(p, "{v:x}"),
        Packet::Tma { ctc, fast_counter } => write!(p, "{ctc:x}, {fast_counter:x}"),
        Packet::Ptw { payload, size, ip } => {
            let plc = if size.bytes() == 8 { 1 } else { 0 };
            write!(p, "{plc:x}: {payload:x}{}", if ip { ", ip" } else { "" })
        }
        Packet::Exstop { ip } => flags(p, &[(ip, "ip")]),
        Packet::Mwait { hints, ext } => write!(p, "{hints:08x}, {ext:08x}"),
        Packet::Pwre { hw, cstate, sub_cstate } => {
            write!(p, "c{}.{}{}", (cstate + 1) & 0xf, (sub_cstate + 1) & 0xf, if hw { ", hw" } else { "" })
        }
        Packet::Pwrx { last_cstate, deepest_cstate, wake_reason } => {
            // One wake reason: interrupt (bit 0), store (bit 2), hardware (bit 3).
            let reason = match wake_reason & 0xd {
                0x1 => "int",
                0x4 => "st",
                0x8 => "hw",
                _ => "bad",
            };
            write!(p, "{reason}: c{}, c{}", (last_cstate + 1) & 0xf, (deepest_cstate + 1) & 0xf)
        }
        Packet::Cfe { ip, event_type, vector } => {
            write!(p, "{event_type}")?;
            match cfe_vector(event_type) {
                Some(VectorBase::Decimal) => write!(p, ": {vector}")?,
                Some(VectorBase::Hex) => write!(p, ": {vector:x}")?,
                None => {}
            }
            if ip {
                p.push_str(", ip");
            }
            line.track_id = "type";
            line.track.push_str(cfe_name(event_type));
            Ok(())
        }
        Packet::Evd { event_type, payload } => {
            line.track_id = "type";
            line.track.push_str(evd_name(event_type));
            write!(p, "{event_type}: {payload:x}")
        }
        Packet::Trig { trbv, ip, mult, icnt } => {
            write!(p, "{trbv:x}")?;
            flags_after(p, &[(ip, "ip"), (mult, "mult")]);
            match icnt {
                Some(icnt) => write!(p, ", icnt: {icnt}"),
                None => Ok(()),
            }
        }
        Packet::Pad | Packet::Psb | Packet::PsbEnd | Packet::Ovf | Packet::Stop => Ok(()),
        Packet::Bbp { .. } | Packet::Bip { .. } | Packet::Bep { .. } => Ok(()),
    }
}

/// The names of the set flags, comma separated.
fn flags(p: &mut String, flags: &[(bool, &str)]) -> std::fmt::Result {
    for (i, (_, name)) in flags.iter().filter(|(set, _)| *set).enumerate() {
        if i > 0 {
            p.push_str(", ");
        }
        p.push_str(name);
    }
    Ok(())
}

/// `IPBytes: payload`, the bytes the packet does not carry as `?`; a
/// sign-extended IP in full.
fn ip_payload(ip: Ip, p: &mut String) -> std::fmt::Result {
    let v = ip.payload;
    let n = ip.compression.ipbytes();
    match ip.compression {
        IpCompression::Suppressed => write!(p, "{n}: ????????????????"),
        IpCompression::Update16 => write!(p, "{n}: ????????????{v:04x}"),
        IpCompression::Update32 => write!(p, "{n}: ????????{v:08x}"),
        IpCompression::Update48 => write!(p, "{n}: ????{v:012x}"),
        IpCompression::Sext48 => write!(p, "{n}: {:016x}", IpCompression::Sext48.apply(v, 0).unwrap_or(v)),
        IpCompression::Full => write!(p, "{n}: {v:016x}"),
    }
}

/// `, name` for each set flag.
fn flags_after(p: &mut String, flags: &[(bool, &str)]) {
    for (_, name) in flags.iter().filter(|(set, _)| *set) {
        p.push_str(", ");
        p.push_str(name);
    }
}

/// How a control flow event's vector is shown, for the types that have one.
enum VectorBase {
    Decimal,
    Hex,
}

fn cfe_vector(event_type: u8) -> Option<VectorBase> {
    match event_type {
        // INTR, VMEXIT_INTR, UINTR, software interrupt: interrupt vectors.
        1 | 9 | 12 | 14 => Some(VectorBase::Decimal),
        // SIPI: the start-up page.
        5 => Some(VectorBase::Hex),
        _ => None,
    }
}

fn cfe_name(event_type: u8) -> &'static str {
    match event_type {
        1 => "intr",
        2 => "iret",
        3 => "smi",
        4 => "rsm",
        5 => "sipi",
        6 => "init",
        7 => "vmentry",
        8 => "vmexit",
        9 => "vmexit_intr",
        10 => "shutdown",
        12 => "uintr",
        13 => "uiret",
        14 => "swintr",
        15 => "syscall",
        _ => "unknown",
    }
}

fn evd_name(event_type: u8) -> &'static str {
    match event_type {
        0 => "cr2",
        1 => "vmxq",
        2 => "vmxr",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intel_pt::Tnt;

    fn payload_of(packet: Packet) -> (String, String) {
        let mut line = Line::default();
        describe(&Item::Packet(packet), &mut line);
        (format!("{} {}", line.opcode, line.payload), line.track)
    }

    #[test]
    fn payload_forms() {
        let ip = |compression, payload| Ip { compression, payload, ip: None };
        assert_eq!(payload_of(Packet::Tip(ip(IpCompression::Update16, 0x1002))).0, "tip 1: ????????????1002");
        assert_eq!(payload_of(Packet::Fup(ip(IpCompression::Sext48, 0xffff_ffff_4000))).0, "fup 3: ffffffffffff4000");
        assert_eq!(payload_of(Packet::TipPgd(ip(IpCompression::Suppressed, 0))).0, "tip.pgd 0: ????????????????");
        assert_eq!(payload_of(Packet::TntShort(Tnt { bits: 0b10001, count: 5 })).0, "tnt.8 !...!");
        assert_eq!(payload_of(Packet::ModeExec { csl: true, csd: false, if_flag: true }).0, "mode.exec cs.l, if");
        assert_eq!(payload_of(Packet::Pwrx { last_cstate: 0, deepest_cstate: 5, wake_reason: 4 }).0, "pwrx st: c1, c6");
        assert_eq!(payload_of(Packet::Cfe { ip: true, event_type: 14, vector: 0x80 }), ("cfe 14: 128, ip".into(), "swintr".into()));
        assert_eq!(payload_of(Packet::Cfe { ip: false, event_type: 5, vector: 0xce }), ("cfe 5: ce".into(), "sipi".into()));
        assert_eq!(payload_of(Packet::Trig { trbv: 0xa1, ip: true, mult: true, icnt: Some(23) }).0, "trig a1, ip, mult, icnt: 23");
    }
}
