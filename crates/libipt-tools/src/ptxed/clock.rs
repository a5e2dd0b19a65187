//! The time of ptxed's events (`--event:time`, `--event:tick`): libipt's
//! estimate (ptdump's [`crate::ptdump::time`]), fed the timing packets in
//! the order the decoder reports them among the instructions.

use intel_pt::Packet;

use crate::ptdump::time::{Calibration, Time, TimingConfig};

/// The estimated TSC, from the timing packets reported so far.
pub struct EventClock {
    timing: TimingConfig,
    /// Keep the calibration over an overflow (`--insn:keep-tcal-on-ovf`).
    keep_tcal_on_ovf: bool,
    time: Time,
    tcal: Calibration,
}

impl EventClock {
    pub fn new(timing: TimingConfig, keep_tcal_on_ovf: bool) -> Self {
        EventClock { timing, keep_tcal_on_ovf, time: Time::default(), tcal: Calibration::default() }
    }

    /// The estimated TSC now (relative to the trace's start without a TSC).
    pub fn now(&self) -> u64 {
        self.time.tsc().0
    }

    /// Takes `packet` (`restated`: in a PSB+) if it is a timing packet, and
    /// says whether it was. A packet the estimate refuses changes nothing
    /// (ptxed reports no such errors).
    pub fn take(&mut self, packet: &Packet, restated: bool) -> bool {
        let cfg = &self.timing;
        match *packet {
            Packet::Psb => self.tcal.update_psb(cfg),
            Packet::Tsc(tsc) => {
                if restated {
                    let _ = self.tcal.header_tsc(tsc);
                } else {
                    self.tcal.update_tsc(tsc);
                }
                self.time.update_tsc(tsc);
            }
            Packet::Cbr(ratio) => {
                let _ = if restated { self.tcal.header_cbr(cfg, ratio) } else { self.tcal.update_cbr(cfg, ratio) };
                let _ = self.time.update_cbr(ratio);
            }
            Packet::Tma { ctc, fast_counter } => {
                let _ = self.time.update_tma(cfg, ctc, fast_counter);
            }
            Packet::Mtc(payload) => {
                let _ = self.tcal.update_mtc(cfg, payload);
                let _ = self.time.update_mtc(cfg, payload);
            }
            Packet::Cyc(cycles) => {
                // Converted with the calibration as it was before it.
                let fcr = self.tcal.fcr().unwrap_or(0);
                self.tcal.update_cyc(cycles);
                let _ = self.time.update_cyc(cfg, cycles, fcr);
            }
            _ => return false,
        }
        true
    }

    /// An overflow: the calibration starts over, or keeps its ratio.
    pub fn overflow(&mut self) {
        if self.keep_tcal_on_ovf {
            self.tcal.update_ovf();
        } else {
            self.tcal = Calibration::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_count_at_the_nominal_ratio_over_cbr() {
        let cfg = TimingConfig { nom_freq: 4, ..TimingConfig::default() };
        let mut c = EventClock::new(cfg, false);
        assert!(c.take(&Packet::Psb, true));
        assert!(c.take(&Packet::Tsc(0xa000), true));
        assert!(c.take(&Packet::Cbr(2), true));
        assert!(c.take(&Packet::Cyc(4), false));
        assert_eq!(c.now(), 0xa008);
        assert!(!c.take(&Packet::PsbEnd, true));
        // No ratio after an overflow: cycles no longer count.
        c.overflow();
        c.take(&Packet::Cyc(4), false);
        assert_eq!(c.now(), 0xa008);
    }
}
