//! Time as ptdump shows it at timing packets (`--time`, `--tcal`,
//! `--time-delta`): each packet fed to the estimate and the calibration of
//! [`super::time`], failures printed as error lines, and the `tsc` or `fcr`
//! tracking column filled.

use std::fmt::Write as _;
use std::io::{self, Write};

use super::error::{diag, report, Fault};
use super::line::Line;
use super::options::Options;
use super::time::{Calibration, Time, TimingConfig, FCR_SHIFT};

/// The time tracked across packets; started afresh after a resync.
pub struct Clock {
    options: Options,
    timing: TimingConfig,
    tcal: Calibration,
    time: Time,
    /// The last TSC and calibration shown, for `--time-delta`.
    shown_tsc: u64,
    shown_fcr: u64,
    /// Inside PSB+, where TSC and CBR are status, not changes.
    in_header: bool,
}

impl Clock {
    pub fn new(options: Options, timing: TimingConfig) -> Self {
        Clock { options, timing, tcal: Calibration::default(), time: Time::default(), shown_tsc: 0, shown_fcr: 0, in_header: false }
    }

    /// The state after a resync: nothing known.
    pub fn reset(&mut self) {
        *self = Clock::new(self.options, self.timing);
    }

    pub fn psb(&mut self) {
        self.tcal.update_psb(&self.timing);
        self.in_header = true;
    }

    pub fn psbend(&mut self) {
        self.in_header = false;
    }

    /// An overflow: the calibration starts over, or with
    /// `--keep-tcal-on-ovf` only its measurements in progress.
    pub fn ovf(&mut self) {
        if self.options.keep_tcal_on_ovf {
            self.tcal.update_ovf();
        } else {
            self.tcal = Calibration::default();
        }
    }

    pub fn tsc(&mut self, out: &mut impl Write, offset: usize, tsc: u64, line: &mut Line) -> io::Result<()> {
        if !self.options.no_tcal {
            if self.in_header {
                report(out, offset, "error calibrating time", self.tcal.header_tsc(tsc))?;
            } else {
                self.tcal.update_tsc(tsc);
            }
        }
        self.time.update_tsc(tsc);
        self.show(out, offset, line)
    }

    pub fn cbr(&mut self, out: &mut impl Write, offset: usize, ratio: u8, line: &mut Line) -> io::Result<()> {
        if !self.options.no_tcal {
            let r = if self.in_header { self.tcal.header_cbr(&self.timing, ratio) } else { self.tcal.update_cbr(&self.timing, ratio) };
            report(out, offset, "error calibrating time", r)?;
        }
        report(out, offset, "error updating time", self.time.update_cbr(ratio))?;
        line.skip_time = true;
        self.show(out, offset, line)
    }

    pub fn tma(&mut self, out: &mut impl Write, offset: usize, ctc: u16, fc: u16, line: &mut Line) -> io::Result<()> {
        report(out, offset, "error updating time", self.time.update_tma(&self.timing, ctc, fc))?;
        line.skip_tcal = true;
        self.show(out, offset, line)
    }

    pub fn mtc(&mut self, out: &mut impl Write, offset: usize, ctc: u8, line: &mut Line) -> io::Result<()> {
        if !self.options.no_tcal {
            report(out, offset, "error calibrating time", self.tcal.update_mtc(&self.timing, ctc))?;
        }
        report(out, offset, "error updating time", self.time.update_mtc(&self.timing, ctc))?;
        self.show(out, offset, line)
    }

    /// A CYC, converted with the calibration as it was before it.
    pub fn cyc(&mut self, out: &mut impl Write, offset: usize, cycles: u64, line: &mut Line) -> io::Result<()> {
        let mut fcr = 0;
        if !self.options.no_tcal {
            match self.tcal.fcr() {
                Ok(v) => fcr = v,
                Err(f) => diag(out, offset, "calibration error", Some(f))?,
            }
            self.tcal.update_cyc(cycles);
        }
        match self.time.update_cyc(&self.timing, cycles, fcr) {
            Err(f) => diag(out, offset, "error updating time", Some(f))?,
            Ok(()) if fcr == 0 => diag(out, offset, "error updating time: no calibration", None)?,
            Ok(()) => {}
        }
        line.skip_tcal = true;
        self.show(out, offset, line)
    }

    /// The tracking column of a timing packet: the calibration (`--tcal`)
    /// or the estimated TSC (`--time`), as values or as deltas.
    fn show(&mut self, out: &mut impl Write, offset: usize, line: &mut Line) -> io::Result<()> {
        let o = self.options;
        if o.show_tcal && !line.skip_tcal {
            line.track_id = "fcr";
            match self.tcal.fcr() {
                Err(f) => {
                    line.track.push_str("<unavailable>");
                    diag(out, offset, "error printing time", Some(f))?;
                }
                Ok(fcr) => {
                    // Fixed point, shown as a decimal with 3 places.
                    let scale = (1u64 << FCR_SHIFT) as f64;
                    let value = fcr as f64 / scale;
                    if o.time_delta {
                        let _ = write!(line.track, "{:+.3}", value - self.shown_fcr as f64 / scale);
                        self.shown_fcr = fcr;
                    } else {
                        let _ = write!(line.track, "{value:.3}");
                    }
                }
            }
        }
        if o.show_time && !line.skip_time {
            line.track_id = "tsc";
            let (tsc, wall_clock) = self.time.tsc();
            if !wall_clock && !o.no_wall_clock {
                diag(out, offset, "error printing time", Some(Fault::NoTime))?;
                line.track.push_str("<unavailable>");
            } else if o.time_delta {
                let last = self.shown_tsc;
                let _ = if last <= tsc { write!(line.track, "+{:x}", tsc - last) } else { write!(line.track, "-{:x}", last - tsc) };
                self.shown_tsc = tsc;
            } else {
                let _ = write!(line.track, "{tsc:016x}");
            }
        }
        Ok(())
    }
}
