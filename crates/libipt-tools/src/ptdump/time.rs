//! Time from timing packets, as libipt estimates it: the TSC from TSC, TMA
//! and MTC packets, refined by CYC cycle counts converted with a
//! calibrated fast-counter-to-cycle ratio (FCR), which MTC periods, TSC
//! deltas or the nominal frequency over CBR give.
//!
//! The fast counter runs at the TSC rate: `fc = ctc * cpuid[0x15].ebx /
//! cpuid[0x15].eax` for a crystal clock (CTC) delta. The FCR is a fixed
//! point number with [`FCR_SHIFT`] fraction bits.

use super::error::Fault;

/// Fraction bits of the fast-counter-to-cycle ratio.
pub const FCR_SHIFT: u32 = 8;
/// CTC bits an MTC carries (above the MTC frequency).
const MTC_BITS: u32 = 8;
/// CTC bits a TMA carries.
const TMA_CTC_BITS: u32 = 16;
const TMA_CTC_MASK: u32 = 0xffff;
/// TSC packet bits.
const TSC_BITS: u32 = 56;

/// The timing setup the trace was recorded with.
#[derive(Clone, Copy, Debug, Default)]
pub struct TimingConfig {
    /// IA32_RTIT_CTL.MTCFreq: an MTC every 2^mtc_freq CTC ticks.
    pub mtc_freq: u8,
    /// MSR_PLATFORM_INFO's nominal (TSC) ratio; 0 when unknown.
    pub nom_freq: u8,
    pub cpuid_15_eax: u32,
    pub cpuid_15_ebx: u32,
    /// The SKL168 workaround: the first MTC after a PSB may not calibrate.
    pub skl168: bool,
}

/// `v << n` in 32 bits; 0 when every bit is shifted out.
fn shl32(v: u32, n: u32) -> u32 {
    v.checked_shl(n).unwrap_or(0)
}

impl TimingConfig {
    /// CTC ticks from `last` to `ctc`, over at most one wrap of the bits MTC
    /// packets give.
    fn ctc_delta(&self, ctc: u32, last: u32) -> Result<u32, Fault> {
        let mut ctc = ctc;
        if ctc < last {
            ctc = ctc.wrapping_add(shl32(1, u32::from(self.mtc_freq) + MTC_BITS));
            if ctc < last {
                return Err(Fault::BadPacket);
            }
        }
        Ok(ctc - last)
    }

    /// CTC ticks as fast counter (TSC) ticks.
    fn ctc_to_fc(&self, ctc: u64) -> Result<u64, Fault> {
        if self.cpuid_15_eax == 0 || self.cpuid_15_ebx == 0 {
            return Err(Fault::BadConfig);
        }
        Ok(ctc.wrapping_mul(u64::from(self.cpuid_15_ebx)) / u64::from(self.cpuid_15_eax))
    }
}

/// The estimated TSC and what it was built from.
#[derive(Clone, Copy, Debug, Default)]
pub struct Time {
    /// The current estimate.
    tsc: u64,
    /// The TSC at the last MTC (or TSC): `tsc = base + fc`.
    base: u64,
    /// Fast counter ticks since `base`.
    fc: u64,
    /// CTC of the last MTC or TMA.
    ctc: u32,
    /// CTC at the last point CYC counting restarted from.
    ctc_cyc: u32,
    lost_mtc: u32,
    lost_cyc: u32,
    have_tsc: bool,
    have_tma: bool,
    have_mtc: bool,
}

impl Time {
    /// The estimated TSC, and whether there is a wall-clock time (a TSC
    /// was seen); without one the value is relative to the trace start.
    pub fn tsc(&self) -> (u64, bool) {
        (self.tsc, self.have_tsc)
    }

    /// A TSC: the full time; what MTCs and CYCs built up starts over (the
    /// CTC CYC counting started from is kept until a TMA or MTC sets it).
    pub fn update_tsc(&mut self, tsc: u64) {
        *self = Time { tsc, base: tsc, have_tsc: true, ctc_cyc: self.ctc_cyc, ..Time::default() };
    }

    /// A CBR: only checked, the estimate does not use the ratio.
    pub fn update_cbr(&mut self, ratio: u8) -> Result<(), Fault> {
        if ratio == 0 {
            return Err(Fault::BadPacket);
        }
        Ok(())
    }

    pub fn update_tma(&mut self, cfg: &TimingConfig, ctc: u16, fc: u16) -> Result<(), Fault> {
        if !self.have_tsc || self.have_tma {
            return Err(Fault::BadContext);
        }
        if self.have_mtc {
            return Err(Fault::Internal);
        }
        let mtc_hi = u32::from(cfg.mtc_freq) + MTC_BITS;
        let ctc_mask = shl32(1, mtc_hi).wrapping_sub(1);
        self.have_tma = true;
        self.base = self.base.wrapping_sub(u64::from(fc));
        self.fc = self.fc.wrapping_add(u64::from(fc));
        // When the TMA holds every CTC bit MTCs give, it counts as an MTC;
        // else the next MTC completes its high bits.
        if mtc_hi <= TMA_CTC_BITS {
            self.have_mtc = true;
        }
        self.ctc = u32::from(ctc) & ctc_mask;
        self.ctc_cyc = self.ctc;
        Ok(())
    }

    pub fn update_mtc(&mut self, cfg: &TimingConfig, payload: u8) -> Result<(), Fault> {
        let (have_tsc, have_tma, have_mtc) = (self.have_tsc, self.have_tma, self.have_mtc);
        // MTCs between a TSC and its TMA would look like CTC overflows.
        if have_tsc && !have_tma {
            return Ok(());
        }
        let mut last_ctc = self.ctc;
        let ctc = shl32(u32::from(payload), cfg.mtc_freq.into());
        if self.fc != 0 || self.lost_cyc != 0 || !have_mtc {
            self.ctc_cyc = ctc;
        }
        self.have_mtc = true;
        self.fc = 0;
        self.ctc = ctc;
        self.lost_cyc = 0;
        if !have_mtc {
            // The first MTC: without a TMA there is nothing to measure from.
            if !have_tma {
                return Ok(());
            }
            if last_ctc & !TMA_CTC_MASK != 0 {
                return Err(Fault::Internal);
            }
            // The TMA's CTC lacks the high bits: take this MTC's, one period
            // earlier if its low bits are below the TMA's.
            let ctc_lo = ctc & TMA_CTC_MASK;
            let mut ctc_hi = ctc & !TMA_CTC_MASK;
            if ctc_lo < last_ctc {
                ctc_hi = ctc_hi.wrapping_sub(1 << TMA_CTC_BITS) & shl32(0xff, cfg.mtc_freq.into());
            }
            last_ctc |= ctc_hi;
        }
        let delta = cfg.ctc_delta(ctc, last_ctc).inspect_err(|_| self.lost_mtc += 1)?;
        let fc = cfg.ctc_to_fc(delta.into())?;
        self.base = self.base.wrapping_add(fc);
        self.tsc = self.base;
        Ok(())
    }

    /// A CYC's cycles converted with `fcr`; without a calibration (0) the
    /// CYC is counted as lost.
    pub fn update_cyc(&mut self, cfg: &TimingConfig, cycles: u64, fcr: u64) -> Result<(), Fault> {
        if fcr == 0 {
            self.lost_cyc += 1;
            return Ok(());
        }
        let mut cyc = cycles;
        if self.fc == 0 {
            cyc = self.cycles_this_period(cfg, cyc, fcr)?;
        }
        self.fc = self.fc.wrapping_add(cyc.wrapping_mul(fcr) >> FCR_SHIFT);
        self.tsc = self.base.wrapping_add(self.fc);
        Ok(())
    }

    /// Of a CYC counted since an earlier MTC period, the cycles that fall
    /// in the current one: the earlier periods' estimated share removed.
    fn cycles_this_period(&self, cfg: &TimingConfig, cyc: u64, fcr: u64) -> Result<u64, Fault> {
        if self.ctc == self.ctc_cyc {
            return Ok(cyc);
        }
        let delta = cfg.ctc_delta(self.ctc, self.ctc_cyc)?;
        let fc = cfg.ctc_to_fc(delta.into())?;
        let earlier = (fc << FCR_SHIFT) / fcr;
        Ok(cyc.max(earlier) - earlier)
    }
}

/// The calibration of the fast-counter-to-cycle ratio.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    fcr: u64,
    min_fcr: u64,
    max_fcr: u64,
    /// The last TSC, and the cycles counted since.
    tsc: u64,
    cyc_tsc: u64,
    /// Cycles since the last MTC, and its CTC.
    cyc_mtc: u64,
    ctc: u32,
    have_mtc: bool,
    check_skl168: bool,
}

impl Default for Calibration {
    fn default() -> Self {
        Calibration { fcr: 0, min_fcr: u64::MAX, max_fcr: 0, tsc: 0, cyc_tsc: 0, cyc_mtc: 0, ctc: 0, have_mtc: false, check_skl168: false }
    }
}

impl Calibration {
    /// The current ratio, if one was ever set.
    pub fn fcr(&self) -> Result<u64, Fault> {
        if self.min_fcr <= self.max_fcr {
            Ok(self.fcr)
        } else {
            Err(Fault::NoTime)
        }
    }

    fn set_fcr(&mut self, fcr: u64) {
        self.fcr = fcr;
        self.min_fcr = self.min_fcr.min(fcr);
        self.max_fcr = self.max_fcr.max(fcr);
    }

    pub fn update_psb(&mut self, cfg: &TimingConfig) {
        if cfg.skl168 {
            self.check_skl168 = true;
        }
    }

    /// A TSC outside PSB+ may follow lost time: it only starts a new
    /// measurement.
    pub fn update_tsc(&mut self, tsc: u64) {
        self.tsc = tsc;
        self.cyc_tsc = 0;
    }

    /// A TSC in PSB+: calibrates over the cycles since the previous TSC,
    /// unless MTCs do.
    pub fn header_tsc(&mut self, tsc: u64) -> Result<(), Fault> {
        let (last_tsc, cyc) = (self.tsc, self.cyc_tsc);
        self.update_tsc(tsc);
        if last_tsc == 0 || cyc == 0 || self.have_mtc {
            return Ok(());
        }
        let mut tsc = tsc;
        if tsc < last_tsc {
            tsc += 1 << TSC_BITS;
            if tsc < last_tsc {
                return Err(Fault::BadPacket);
            }
        }
        let delta = tsc - last_tsc;
        if delta & !(u64::MAX >> FCR_SHIFT) != 0 {
            return Err(Fault::Internal);
        }
        self.set_fcr((delta << FCR_SHIFT) / cyc);
        Ok(())
    }

    /// A CBR outside PSB+ changes the frequency: calibration starts over.
    pub fn update_cbr(&mut self, cfg: &TimingConfig, ratio: u8) -> Result<(), Fault> {
        *self = Calibration::default();
        self.header_cbr(cfg, ratio)
    }

    /// With the nominal frequency known, a CBR gives the ratio directly.
    pub fn header_cbr(&mut self, cfg: &TimingConfig, ratio: u8) -> Result<(), Fault> {
        if cfg.nom_freq == 0 {
            return Ok(());
        }
        if ratio == 0 {
            return Err(Fault::BadPacket);
        }
        self.set_fcr((u64::from(cfg.nom_freq) << FCR_SHIFT) / u64::from(ratio));
        Ok(())
    }

    /// An MTC: calibrates over the cycles counted since the previous one.
    pub fn update_mtc(&mut self, cfg: &TimingConfig, payload: u8) -> Result<(), Fault> {
        let (last_ctc, have_mtc, cyc, check_skl168) = (self.ctc, self.have_mtc, self.cyc_mtc, self.check_skl168);
        self.check_skl168 = false;
        let ctc = shl32(u32::from(payload), cfg.mtc_freq.into());
        if !have_mtc {
            self.cyc_mtc = 0;
            self.ctc = ctc;
            self.have_mtc = true;
            return Ok(());
        }
        // No cycles yet: try again over the longer period at the next MTC.
        if cyc == 0 {
            return Ok(());
        }
        self.cyc_mtc = 0;
        self.ctc = ctc;
        let delta = cfg.ctc_delta(ctc, last_ctc)?;
        let fc = cfg.ctc_to_fc(delta.into())?;
        if fc & !(u64::MAX >> FCR_SHIFT) != 0 {
            return Err(Fault::Internal);
        }
        let fcr = (fc << FCR_SHIFT) / cyc;
        if check_skl168 {
            // MTCs were lost since the PSB, or, at high MTC rates, fewer
            // cycles than a lost wrap CYC would leave: skip this MTC.
            if shl32(1, cfg.mtc_freq.into()) < delta {
                return Ok(());
            }
            if cfg.mtc_freq < 10 && self.fcr().is_ok() {
                let expected = self.fcr.wrapping_mul(cyc + 0xf00) >> FCR_SHIFT;
                if expected < fc {
                    return Ok(());
                }
            }
        }
        self.set_fcr(fcr);
        Ok(())
    }

    pub fn update_cyc(&mut self, cycles: u64) {
        self.cyc_mtc = self.cyc_mtc.wrapping_add(cycles);
        self.cyc_tsc = self.cyc_tsc.wrapping_add(cycles);
    }

    /// After an overflow, keeping the ratio (`--keep-tcal-on-ovf`): only
    /// the measurements in progress are dropped.
    pub fn update_ovf(&mut self) {
        *self =
            Calibration { fcr: self.fcr, min_fcr: self.min_fcr, max_fcr: self.max_fcr, check_skl168: self.check_skl168, ..Calibration::default() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: TimingConfig = TimingConfig { mtc_freq: 4, nom_freq: 0, cpuid_15_eax: 1, cpuid_15_ebx: 4, skl168: false };

    /// TSC, TMA, then MTCs: each MTC period is 2^4 CTC ticks, 64 TSC ticks.
    #[test]
    fn mtc_advances_by_ctc_periods_after_tma() {
        let mut t = Time::default();
        t.update_tsc(0x1000);
        t.update_tma(&CFG, 0x10, 0x40).unwrap();
        assert_eq!(t.tsc(), (0x1000, true));
        t.update_mtc(&CFG, 2).unwrap();
        assert_eq!(t.tsc().0, 0x1000 - 0x40 + 64);
        t.update_mtc(&CFG, 3).unwrap();
        assert_eq!(t.tsc().0, 0x1000 - 0x40 + 128);
    }

    #[test]
    fn mtc_calibrates_over_cycles() {
        let mut c = Calibration::default();
        assert_eq!(c.fcr(), Err(Fault::NoTime));
        c.update_mtc(&CFG, 1).unwrap();
        c.update_cyc(0x80);
        c.update_mtc(&CFG, 2).unwrap();
        // 64 TSC ticks over 128 cycles: 0.5.
        assert_eq!(c.fcr(), Ok(1 << (FCR_SHIFT - 1)));
    }

    #[test]
    fn bad_config_and_wraps_do_not_panic() {
        let cfg = TimingConfig { mtc_freq: 255, cpuid_15_eax: 0, ..CFG };
        let mut t = Time::default();
        t.update_tsc(u64::MAX);
        t.update_tma(&cfg, u16::MAX, u16::MAX).unwrap();
        for p in [0, 255, 1] {
            let _ = t.update_mtc(&cfg, p);
            let _ = t.update_cyc(&cfg, u64::MAX, u64::MAX);
        }
        // A TSC below the last one has wrapped at 56 bits.
        let mut c = Calibration::default();
        c.update_tsc((1 << 56) - 0x10);
        c.update_cyc(0x20);
        assert_eq!(c.header_tsc(0x10), Ok(()));
        assert_eq!(c.fcr(), Ok(1 << FCR_SHIFT));
    }
}
