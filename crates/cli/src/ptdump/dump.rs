//! The dump itself: each packet printed with what ptdump tracks beside it
//! (the last IP, the execution mode, the estimated time and calibration),
//! errors printed as `[offset: what: why]` lines, and a resync to the next
//! PSB after a bad packet.

use std::fmt::Write as _;
use std::io::{self, Write};

use intel_pt::{IpCompression, Packet};

use super::error::Fault;
use super::line::Line;
use super::options::Options;
use super::reader::{Decoded, Item, Reader};
use super::text;
use super::time::{Calibration, Time, TimingConfig, FCR_SHIFT};

/// The last IP as ptdump tracks it: built from every IP packet's payload,
/// never reset by a PSB (only by a resync).
#[derive(Clone, Copy, Debug, Default)]
struct LastIp {
    ip: Option<u64>,
    suppressed: bool,
}

/// What is tracked across packets; reset after a resync.
#[derive(Default)]
struct Tracking {
    last_ip: LastIp,
    tcal: Calibration,
    time: Time,
    /// The last time and calibration printed, for `--time-delta`.
    tsc: u64,
    fcr: u64,
    in_header: bool,
}

/// Prints the packets of a trace as ptdump does.
pub struct Dumper<'o, W: Write> {
    options: Options,
    timing: TimingConfig,
    out: &'o mut W,
    line: Line,
    track: Tracking,
}

impl<'o, W: Write> Dumper<'o, W> {
    pub fn new(options: Options, timing: TimingConfig, out: &'o mut W) -> Self {
        Dumper { options, timing, out, line: Line::default(), track: Tracking::default() }
    }

    /// An error line: `[offset: what]` or `[offset: what: why]`.
    pub fn diag(&mut self, offset: usize, what: &str, fault: Option<Fault>) -> io::Result<()> {
        match fault {
            Some(f) => writeln!(self.out, "[{offset:x}: {what}: {}]", f.message()),
            None => writeln!(self.out, "[{offset:x}: {what}]"),
        }
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
                    self.diag(offset, "error decoding packet", Some(fault))?;
                    if !reader.sync_forward() {
                        return Ok(());
                    }
                    self.track = Tracking::default();
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
            Packet::Psb => {
                if timed {
                    self.track.tcal.update_psb(&self.timing);
                }
                self.track.in_header = true;
            }
            Packet::PsbEnd => self.track.in_header = false,
            Packet::Pad => line.skip = o.no_pad,
            Packet::Ovf if timed => {
                if o.keep_tcal_on_ovf {
                    self.track.tcal.update_ovf();
                } else {
                    self.track.tcal = Calibration::default();
                }
            }
            Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) if o.show_last_ip => {
                let last = &mut self.track.last_ip;
                match ip.compression {
                    IpCompression::Suppressed => last.suppressed = true,
                    c => {
                        last.ip = c.apply(ip.payload, last.ip.unwrap_or(0));
                        last.suppressed = false;
                    }
                }
                line.track_id = "ip";
                match (last.ip, last.suppressed) {
                    (None, _) => {
                        line.track.push_str("<unavailable>");
                        self.diag(offset, "error tracking last-ip", Some(Fault::NoIp))?;
                    }
                    (Some(_), true) => line.track.push_str("<suppressed>"),
                    (Some(ip), false) => {
                        let _ = write!(line.track, "{ip:016x}");
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
            Packet::Tsc(tsc) => {
                if timed {
                    self.on_tsc(offset, tsc, line)?;
                }
                line.skip |= o.no_timing;
            }
            Packet::Cbr(ratio) => {
                if timed {
                    self.on_cbr(offset, ratio, line)?;
                }
                line.skip |= o.no_timing;
            }
            Packet::Tma { ctc, fast_counter } => {
                if timed {
                    let r = self.track.time.update_tma(&self.timing, ctc, fast_counter);
                    self.report(offset, "error updating time", r)?;
                    line.skip_tcal = true;
                    self.show_time(offset, line)?;
                }
                line.skip |= o.no_timing;
            }
            Packet::Mtc(ctc) => {
                if timed {
                    if !o.no_tcal {
                        let r = self.track.tcal.update_mtc(&self.timing, ctc);
                        self.report(offset, "error calibrating time", r)?;
                    }
                    let r = self.track.time.update_mtc(&self.timing, ctc);
                    self.report(offset, "error updating time", r)?;
                    self.show_time(offset, line)?;
                }
                line.skip |= o.no_timing;
            }
            Packet::Cyc(cycles) => {
                if timed && !o.no_cyc {
                    self.on_cyc(offset, cycles, line)?;
                }
                line.skip |= o.no_timing || o.no_cyc;
            }
            _ => {}
        }
        Ok(())
    }

    fn on_tsc(&mut self, offset: usize, tsc: u64, line: &mut Line) -> io::Result<()> {
        if !self.options.no_tcal {
            if self.track.in_header {
                let r = self.track.tcal.header_tsc(tsc);
                self.report(offset, "error calibrating time", r)?;
            } else {
                self.track.tcal.update_tsc(tsc);
            }
        }
        self.track.time.update_tsc(tsc);
        self.show_time(offset, line)
    }

    fn on_cbr(&mut self, offset: usize, ratio: u8, line: &mut Line) -> io::Result<()> {
        if !self.options.no_tcal {
            let tcal = &mut self.track.tcal;
            let r = if self.track.in_header { tcal.header_cbr(&self.timing, ratio) } else { tcal.update_cbr(&self.timing, ratio) };
            self.report(offset, "error calibrating time", r)?;
        }
        let r = self.track.time.update_cbr(ratio);
        self.report(offset, "error updating time", r)?;
        line.skip_time = true;
        self.show_time(offset, line)
    }

    fn on_cyc(&mut self, offset: usize, cycles: u64, line: &mut Line) -> io::Result<()> {
        let mut fcr = 0;
        if !self.options.no_tcal {
            match self.track.tcal.fcr() {
                Ok(v) => fcr = v,
                Err(f) => self.diag(offset, "calibration error", Some(f))?,
            }
            self.track.tcal.update_cyc(cycles);
        }
        match self.track.time.update_cyc(&self.timing, cycles, fcr) {
            Err(f) => self.diag(offset, "error updating time", Some(f))?,
            Ok(()) if fcr == 0 => self.diag(offset, "error updating time: no calibration", None)?,
            Ok(()) => {}
        }
        line.skip_tcal = true;
        self.show_time(offset, line)
    }

    fn report(&mut self, offset: usize, what: &str, r: Result<(), Fault>) -> io::Result<()> {
        match r {
            Ok(()) => Ok(()),
            Err(f) => self.diag(offset, what, Some(f)),
        }
    }

    /// The tracking column of a timing packet: the calibration (`--tcal`)
    /// or the estimated TSC (`--time`), as values or as deltas.
    fn show_time(&mut self, offset: usize, line: &mut Line) -> io::Result<()> {
        let o = self.options;
        if o.show_tcal && !line.skip_tcal {
            line.track_id = "fcr";
            match self.track.tcal.fcr() {
                Err(f) => {
                    line.track.push_str("<unavailable>");
                    self.diag(offset, "error printing time", Some(f))?;
                }
                Ok(fcr) => {
                    let scale = (1u64 << FCR_SHIFT) as f64;
                    let value = fcr as f64 / scale;
                    if o.time_delta {
                        let _ = write!(line.track, "{:+.3}", value - self.track.fcr as f64 / scale);
                        self.track.fcr = fcr;
                    } else {
                        let _ = write!(line.track, "{value:.3}");
                    }
                }
            }
        }
        if o.show_time && !line.skip_time {
            line.track_id = "tsc";
            let (tsc, wall_clock) = self.track.time.tsc();
            if !wall_clock && !o.no_wall_clock {
                self.diag(offset, "error printing time", Some(Fault::NoTime))?;
                line.track.push_str("<unavailable>");
            } else if o.time_delta {
                let last = self.track.tsc;
                let _ = if last <= tsc { write!(line.track, "+{:x}", tsc - last) } else { write!(line.track, "-{:x}", last - tsc) };
                self.track.tsc = tsc;
            } else {
                let _ = write!(line.track, "{tsc:016x}");
            }
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
