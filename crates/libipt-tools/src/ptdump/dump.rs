//! The dump itself: each packet printed with what ptdump tracks beside it
//! (the last IP, the execution mode, CR3 and VMCS, time through
//! [`Clock`]), errors printed as `[offset: what: why]` lines, and a resync
//! to the next PSB after a bad packet.

use std::fmt::Write as _;
use std::io::{self, Write};

use intel_pt::{Ip, IpCompression, Packet};

use super::clock::Clock;
use super::error::{diag, Fault};
use super::line::Line;
use super::options::Options;
use super::reader::{Decoded, Item, Reader};
use super::text;
use super::time::TimingConfig;

/// The last IP as ptdump tracks it: built from every IP packet's payload,
/// never reset by a PSB (only by a resync).
#[derive(Clone, Copy, Debug, Default)]
struct LastIp {
    ip: Option<u64>,
    suppressed: bool,
}

impl LastIp {
    fn update(&mut self, ip: Ip) {
        match ip.compression {
            IpCompression::Suppressed => self.suppressed = true,
            c => {
                self.ip = c.apply(ip.payload, self.ip.unwrap_or(0));
                self.suppressed = false;
            }
        }
    }

    /// The last IP; none yet, or suppressed by the last IP packet.
    fn get(&self) -> Result<u64, Fault> {
        match (self.ip, self.suppressed) {
            (None, _) => Err(Fault::NoIp),
            (Some(_), true) => Err(Fault::IpSuppressed),
            (Some(ip), false) => Ok(ip),
        }
    }
}

/// Prints the packets of a trace as ptdump does.
pub struct Dumper<'o, W: Write> {
    options: Options,
    out: &'o mut W,
    line: Line,
    /// Tracked across packets, reset after a resync.
    last_ip: LastIp,
    clock: Clock,
}

impl<'o, W: Write> Dumper<'o, W> {
    pub fn new(options: Options, timing: TimingConfig, out: &'o mut W) -> Self {
        Dumper { options, out, line: Line::default(), last_ip: LastIp::default(), clock: Clock::new(options, timing) }
    }

    /// Dumps the whole buffer: from the first PSB (or its start with
    /// `--no-sync`), resyncing after each bad packet.
    pub fn dump(&mut self, reader: &mut Reader) -> io::Result<()> {
        if self.options.no_sync {
            reader.sync_at(0);
        } else if !reader.sync_forward() {
            return Ok(());
        }
        loop {
            match reader.next() {
                Ok(Some(d)) => self.packet(reader, d)?,
                Ok(None) => return Ok(()),
                Err((offset, fault)) => {
                    diag(self.out, offset, "error decoding packet", Some(fault))?;
                    if !reader.sync_forward() {
                        return Ok(());
                    }
                    self.last_ip = LastIp::default();
                    self.clock.reset();
                }
            }
        }
    }

    fn packet(&mut self, reader: &Reader, d: Decoded) -> io::Result<()> {
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        if self.options.show_raw {
            line.set_raw(reader.bytes(d.offset, d.size));
        }
        text::describe(&d.item, &mut line);
        if let Item::Packet(packet) = d.item {
            self.track(d.offset, &packet, &mut line)?;
        }
        let shown = !(line.skip || self.options.quiet);
        let result = if shown { line.print(self.options.show_offset.then_some(d.offset), self.out) } else { Ok(()) };
        self.line = line;
        result
    }

    /// Updates what is tracked for `packet` and fills the tracking column.
    fn track(&mut self, offset: usize, packet: &Packet, line: &mut Line) -> io::Result<()> {
        let o = self.options;
        let timed = o.track_time;
        match *packet {
            Packet::Psb if timed => self.clock.psb(),
            Packet::PsbEnd => self.clock.psbend(),
            Packet::Pad => line.skip = o.no_pad,
            Packet::Ovf if timed => self.clock.ovf(),
            Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) if o.show_last_ip => {
                self.last_ip.update(ip);
                line.track_id = "ip";
                match self.last_ip.get() {
                    Ok(ip) => {
                        let _ = write!(line.track, "{ip:016x}");
                    }
                    Err(Fault::IpSuppressed) => line.track.push_str("<suppressed>"),
                    Err(f) => {
                        line.track.push_str("<unavailable>");
                        diag(self.out, offset, "error tracking last-ip", Some(f))?;
                    }
                }
            }
            Packet::ModeExec { csl, csd, .. } if o.show_exec_mode => {
                line.track_id = "em";
                line.track.push_str(match (csl, csd) {
                    (true, false) => "64-bit",
                    (false, true) => "32-bit",
                    (false, false) => "16-bit",
                    (true, true) => "unknown",
                });
            }
            Packet::Pip { cr3, .. } => {
                line.track_id = "cr3";
                let _ = write!(line.track, "{cr3:016x}");
            }
            Packet::Vmcs(base) => {
                line.track_id = "vmcs";
                let _ = write!(line.track, "{base:016x}");
            }
            Packet::Tsc(tsc) if timed => self.clock.tsc(self.out, offset, tsc, line)?,
            Packet::Cbr(ratio) if timed => self.clock.cbr(self.out, offset, ratio, line)?,
            Packet::Tma { ctc, fast_counter } if timed => self.clock.tma(self.out, offset, ctc, fast_counter, line)?,
            Packet::Mtc(ctc) if timed => self.clock.mtc(self.out, offset, ctc, line)?,
            Packet::Cyc(cycles) if timed && !o.no_cyc => self.clock.cyc(self.out, offset, cycles, line)?,
            _ => {}
        }
        // Hidden timing packets are still tracked.
        match packet {
            Packet::Tsc(_) | Packet::Cbr(_) | Packet::Tma { .. } | Packet::Mtc(_) => line.skip |= o.no_timing,
            Packet::Cyc(_) => line.skip |= o.no_timing || o.no_cyc,
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptdump::cpu::Errata;

    /// Random bytes with PSBs, IP packets and timing packets among them.
    fn noise(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut out = Vec::with_capacity(len + 16);
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 6 {
                0 => out.extend_from_slice(&intel_pt::PSB),
                1 => out.extend_from_slice(&[0x02, 0x73, x as u8, (x >> 8) as u8, 0, (x >> 16) as u8, (x >> 24) as u8 & 1]),
                2 => out.extend_from_slice(&[[0x19, 0x59, 0x99, 0xd9, 0x0d, 0x03][(x >> 32) as usize % 6], (x >> 40) as u8]),
                _ => out.push((x >> 48) as u8),
            }
        }
        out
    }

    /// Every option that changes what is tracked, over garbage, with odd
    /// timing setups: no panic, and every line ends.
    #[test]
    fn garbage_with_every_option_does_not_panic() {
        let errata = Errata { skd007: true, skl168: true, skz84: true };
        for seed in 0..60 {
            let trace = noise(seed, 3000);
            for (i, &(mtc_freq, eax)) in [(0u8, 1u32), (3, 2), (9, 0), (31, 1), (255, 7)].iter().enumerate() {
                let options = Options {
                    show_offset: i % 2 == 0,
                    show_raw: true,
                    show_last_ip: true,
                    show_exec_mode: true,
                    track_time: true,
                    show_time: i % 2 == 0,
                    show_tcal: i % 2 == 1,
                    time_delta: i % 3 == 0,
                    keep_tcal_on_ovf: i % 2 == 0,
                    no_sync: i == 4,
                    no_tcal: i == 3,
                    no_wall_clock: i == 2,
                    ..Options::default()
                };
                let timing = TimingConfig { mtc_freq, nom_freq: i as u8, cpuid_15_eax: eax, cpuid_15_ebx: 3, skl168: true };
                let mut out = Vec::new();
                Dumper::new(options, timing, &mut out).dump(&mut Reader::new(&trace, errata)).unwrap();
                assert!(out.is_empty() || out.ends_with(b"\n"));
            }
        }
    }
}
