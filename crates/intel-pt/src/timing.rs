//! Trace time from timing packets: TSC, and MTC after a TSC + TMA pair.
//!
//! A TSC packet gives the time stamp counter. MTC packets carry 8 bits of the
//! crystal clock counter (CTC bits `mtc_freq + 7 ..= mtc_freq`) each time those
//! bits change; the TMA packet after a TSC says where CTC stood then (its low
//! 16 bits) and how many TSC ticks had passed since that CTC tick (the fast
//! counter), so an MTC's TSC is `tsc - fc + ctc_delta * n / d` with the
//! AUXTRACE_INFO ratio `tsc_ctc_ratio_n / tsc_ctc_ratio_d` (Intel SDM, "Intel
//! Processor Trace", MTC and TMA packets; the same arithmetic as perf).
//!
//! An MTC says that CTC reached a value, not when the code around it ran: the
//! code after it ran at or after that tick, the code before it before the
//! next tick. So each timing packet gives a window `[lo, hi]` in TSC ticks:
//! exact for TSC, one MTC period wide for MTC.

use crate::Packet;

/// How MTC packets count, from AUXTRACE_INFO and the event's config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtcConfig {
    /// The MTC packet carries CTC bits `freq + 7 ..= freq` (config bits 17:14).
    pub freq: u8,
    /// TSC ticks per CTC tick: `tsc_ctc_ratio_n / tsc_ctc_ratio_d`.
    pub ratio_n: u32,
    pub ratio_d: u32,
}

impl MtcConfig {
    /// TSC ticks in `ctc` CTC ticks, rounded down.
    fn tsc_ticks(&self, ctc: u64) -> u64 {
        (ctc as u128 * self.ratio_n as u128 / self.ratio_d.max(1) as u128) as u64
    }
}

/// The time state a decoder carries through a packet stream. Small and
/// `Copy`, so a look-ahead can take a copy to time the packets ahead.
#[derive(Clone, Copy, Debug, Default)]
pub struct Clock {
    mtc: Option<MtcConfig>,
    /// The last TSC packet's value.
    tsc: Option<u64>,
    /// TSC at the CTC tick the last TMA named, and that CTC (all its bits known so far).
    base: Option<(u64, u64)>,
    /// CTC at the last MTC (or TMA), for the next MTC's delta.
    ctc: u64,
}

impl Clock {
    /// A clock that times TSC packets, and MTC packets too when `mtc` is given.
    pub fn new(mtc: Option<MtcConfig>) -> Clock {
        Clock { mtc, ..Clock::default() }
    }

    /// Takes a packet; for a timing packet, the window `[lo, hi]` (TSC
    /// ticks) in which the code after it ran at the earliest and the code
    /// before it at the latest. None for other packets, and for an MTC
    /// before any TSC + TMA (or when MTC timing is off).
    #[inline]
    pub fn observe(&mut self, p: &Packet) -> Option<(u64, u64)> {
        match *p {
            Packet::Tsc(tsc) => {
                self.tsc = Some(tsc);
                // A TSC alone (no TMA after it) leaves MTC timing as it was.
                Some((tsc, tsc))
            }
            Packet::Tma { ctc, fast_counter } => {
                self.mtc?;
                let at_tick = self.tsc?.saturating_sub(fast_counter as u64);
                self.base = Some((at_tick, ctc as u64));
                self.ctc = ctc as u64;
                None
            }
            Packet::Mtc(value) => {
                let mtc = self.mtc?;
                let (base_tsc, base_ctc) = self.base?;
                let shift = mtc.freq as u32;
                // The 8 bits the MTC carries moved on from the last CTC's (mod 256).
                let last = (self.ctc >> shift) & 0xff;
                let step = (value as u64).wrapping_sub(last) & 0xff;
                let ctc = ((self.ctc >> shift) + step) << shift;
                self.ctc = ctc;
                let lo = base_tsc + mtc.tsc_ticks(ctc.saturating_sub(base_ctc));
                let hi = base_tsc + mtc.tsc_ticks((ctc + (1 << shift)).saturating_sub(base_ctc));
                Some((lo, hi))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: MtcConfig = MtcConfig { freq: 3, ratio_n: 25, ratio_d: 1 };

    #[test]
    fn tsc_is_exact_and_mtc_counts_from_the_tma() {
        let mut c = Clock::new(Some(CFG));
        assert_eq!(c.observe(&Packet::Mtc(1)), None, "no TSC + TMA yet");
        assert_eq!(c.observe(&Packet::Tsc(10_010)), Some((10_010, 10_010)));
        // CTC 400 (25 ns ticks: 10,000) ticked 10 TSC ticks before the TSC.
        assert_eq!(c.observe(&Packet::Tma { ctc: 400, fast_counter: 10 }), None);
        // CTC bits 10:3 of 400 are 50; the MTC for 51 is CTC 408: 10,000 + 8 * 25.
        assert_eq!(c.observe(&Packet::Mtc(51)), Some((10_200, 10_400)));
        // A skipped period: 53 is CTC 424.
        assert_eq!(c.observe(&Packet::Mtc(53)), Some((10_600, 10_800)));
    }

    #[test]
    fn mtc_wraps_at_eight_bits() {
        let mut c = Clock::new(Some(MtcConfig { freq: 0, ratio_n: 2, ratio_d: 1 }));
        c.observe(&Packet::Tsc(1_000));
        c.observe(&Packet::Tma { ctc: 0x1fe, fast_counter: 0 });
        assert_eq!(c.observe(&Packet::Mtc(0xff)), Some((1_002, 1_004)));
        // 0xff -> 0x01: CTC 0x201, three ticks after the TMA's.
        assert_eq!(c.observe(&Packet::Mtc(0x01)), Some((1_006, 1_008)));
    }

    #[test]
    fn without_mtc_config_only_tsc_times() {
        let mut c = Clock::new(None);
        assert_eq!(c.observe(&Packet::Tsc(5)), Some((5, 5)));
        assert_eq!(c.observe(&Packet::Tma { ctc: 1, fast_counter: 0 }), None);
        assert_eq!(c.observe(&Packet::Mtc(2)), None);
    }
}
