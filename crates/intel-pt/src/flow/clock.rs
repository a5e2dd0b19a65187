//! The walk's clock: what the timing packets (TSC, TMA, MTC, CBR, CYC) say
//! of when the instructions being walked ran, as an interval `[lo, hi]`.
//!
//! `lo` is the time known at the last flow packet taken; `hi` is the
//! earliest of the next TSC's time, the end of the period the next MTC
//! names, and (CYC timing) the next CYC's upper bound, found by scanning
//! the packets ahead ([`Clock::set_hi`] is the one place it is worked out).

use super::packets::{Packets, Scan};
use crate::Packet;
use codeimage::window::Time;

/// TSC to perf time, as perf converts it (AUXTRACE_INFO time_shift, time_mult, time_zero).
#[derive(Clone, Copy, Debug)]
pub struct TimeConv {
    pub shift: u32,
    pub mult: u64,
    pub zero: u64,
}

impl TimeConv {
    pub fn perf_time(&self, tsc: u64) -> Time {
        perfdata::counter_to_perf_time(tsc, self.shift as u64, self.mult, self.zero)
    }
}

/// The conversions the clock works with: TSC to perf time always, MTC and
/// CYC packets when the decoder times by them.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timing {
    pub time: TimeConv,
    pub mtc: Option<MtcConv>,
    pub cyc: Option<CycConv>,
}

/// MTC packets to time, from perf's AUXTRACE_INFO and the PT event's config:
/// an MTC carries CTC bits `shift + 7 .. shift` (`shift`: the `mtc_period`
/// field of the config), and a CTC tick is `ratio_n / ratio_d` TSC ticks
/// (`tsc_ctc_ratio_n`, `tsc_ctc_ratio_d`: CPUID leaf 0x15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtcConv {
    pub shift: u32,
    pub ratio_n: u32,
    pub ratio_d: u32,
}

impl MtcConv {
    /// From perf's AUXTRACE_INFO words (`mtc_bit`, `mtc_freq_bits`: masks
    /// of the PT event's config; `tsc_ctc_ratio_n`, `tsc_ctc_ratio_d`) and
    /// the event's config: `None` when MTC is off or the ratio unknown.
    pub fn from_perf(config: u64, mtc_bit: u64, mtc_freq_bits: u64, ratio_n: u64, ratio_d: u64) -> Option<MtcConv> {
        if config & mtc_bit == 0 || mtc_bit == 0 || mtc_freq_bits == 0 || ratio_n == 0 || ratio_d == 0 {
            return None;
        }
        let shift = ((config & mtc_freq_bits) >> mtc_freq_bits.trailing_zeros()) as u32;
        Some(MtcConv { shift, ratio_n: u32::try_from(ratio_n).ok()?, ratio_d: u32::try_from(ratio_d).ok()? }.clamped())
    }

    /// At most 15 (the SDM's largest MTC period), so that shifts stay in range.
    pub(super) fn clamped(self) -> MtcConv {
        MtcConv { shift: self.shift.min(15), ..self }
    }

    fn ctc_to_tsc(&self, ctc: u64) -> u64 {
        (u128::from(ctc) * u128::from(self.ratio_n) / u128::from(self.ratio_d.max(1))) as u64
    }
}

/// Where MTCs count from.
#[derive(Clone, Copy, Default)]
struct MtcState {
    /// The last TSC.
    tsc: u64,
    /// The TSC at CTC 0 of the last TMA's count (perf's `ctc_timestamp`).
    base: u64,
    /// CTC ticks since then, from MTCs.
    delta: u64,
    /// The last MTC's payload (or the TMA's CTC bits in its place).
    last: u8,
    /// A TMA has been seen: MTCs can be placed.
    based: bool,
}

/// CYC packets to time, from perf's AUXTRACE_INFO (`max_non_turbo_ratio`)
/// and the CBR packets of the trace: the TSC runs at the max non-turbo
/// ratio times the bus clock and the core at CBR times it, so a core cycle
/// is `max_non_turbo_ratio / CBR` TSC ticks (perf's conversion when it has
/// not calibrated against MTC or TSC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CycConv {
    pub max_non_turbo_ratio: u32,
}

impl CycConv {
    /// From the PT event's config, perf's `cyc_bit` (a mask of the config)
    /// and `max_non_turbo_ratio` (AUXTRACE_INFO words 14 and 15): `None`
    /// when CYC is off or the ratio unknown.
    pub fn from_perf(config: u64, cyc_bit: u64, max_non_turbo_ratio: u64) -> Option<CycConv> {
        if cyc_bit == 0 || config & cyc_bit == 0 {
            return None;
        }
        let max_non_turbo_ratio = u32::try_from(max_non_turbo_ratio).ok().filter(|&r| r != 0)?;
        Some(CycConv { max_non_turbo_ratio })
    }
}

/// What CYC packets have told of the time. The last CYC's time lies in
/// `[lo + lo_cycles * step_lo, hi + hi_cycles * step_hi]`: each bound is
/// the last one that was firmer, plus the cycles counted since (counted
/// from a base rather than added up, so that rounding does not build up).
#[derive(Clone, Copy, Default)]
struct CycState {
    /// perf time per core cycle in 32.32 fixed point, rounded down and up,
    /// from the last CBR; 0 before one (or for a CBR that cannot convert).
    /// Right after a change of ratio, the smaller and the larger of the old
    /// and the new: the next CYC counts cycles at both.
    step_lo: u64,
    step_hi: u64,
    /// The new ratio's steps, once the next CYC has been counted.
    next_steps: Option<(u64, u64)>,
    cbr: u8,
    lo: Time,
    lo_cycles: u64,
    /// `lo` holds: a CYC has been seen since the count was lost.
    lo_known: bool,
    hi: Time,
    hi_cycles: u64,
    /// `hi` holds: a CYC, TSC or MTC has bounded it since the count was lost.
    hi_known: bool,
    /// A CYC's lower bound, for what follows the flow packet after it: set
    /// when the CYC is read, taken into `lo` with that packet.
    pending: Option<Time>,
    /// An upper bound on what runs before the next flow packet is taken
    /// (its CYC's), or `Time::MAX`.
    bound: Time,
}

impl CycState {
    /// The count is lost (a PSB, an overflow, a CYC without a CBR): both
    /// bounds start again, keeping the ratio.
    fn lose(&mut self) {
        *self = CycState { step_lo: self.step_lo, step_hi: self.step_hi, next_steps: self.next_steps, cbr: self.cbr, ..CycState::default() };
        self.bound = Time::MAX;
    }

    /// Both bounds start again from where they stand (before the steps change).
    fn rebase(&mut self) {
        if let Some(t) = self.last_lo() {
            self.lo = t;
        }
        self.hi = self.last_hi(0);
        (self.lo_cycles, self.hi_cycles) = (0, 0);
    }

    fn last_lo(&self) -> Option<Time> {
        self.lo_known.then(|| self.lo.saturating_add(scale(self.lo_cycles, self.step_lo, false)))
    }

    fn last_hi(&self, more: u64) -> Time {
        if self.hi_known {
            self.hi.saturating_add(scale(self.hi_cycles.saturating_add(more), self.step_hi, true))
        } else {
            Time::MAX
        }
    }

    /// The last CYC ran no later than `t` (a TSC or MTC after it says so).
    fn cap_hi(&mut self, t: Time) {
        if t < self.last_hi(0) {
            self.hi = t;
            self.hi_cycles = 0;
            self.hi_known = true;
        }
    }
}

/// `cycles` times a 32.32 fixed-point step, rounded down or up, saturating.
fn scale(cycles: u64, step: u64, up: bool) -> Time {
    let p = u128::from(cycles) * u128::from(step);
    let p = if up { p + 0xffff_ffff } else { p };
    u64::try_from(p >> 32).unwrap_or(Time::MAX)
}

/// The time the timing packets give the walk.
#[derive(Clone)]
pub(super) struct Clock {
    /// The earliest the instructions from here ran: the time known at the
    /// last flow packet taken. What runs up to the next flow packet may
    /// have run before the timing packets ahead of it, so those raise this
    /// only once that packet is taken (to `now`).
    pub lo: Time,
    /// The time the packets read so far give (what the timing packets
    /// set): `lo` once the walk takes the peeked packet. Not below `lo`,
    /// nor above `hi`.
    pub now: Time,
    /// The latest the instructions from here ran: the next TSC's time, or
    /// sooner the end of the period the next MTC names.
    pub hi: Time,
    /// The next TSC's time, and its offset (re-scan when passed).
    tsc_hi: Time,
    hi_at: usize,
    /// The end of the next MTC's period (MTC timing), and its offset.
    mtc_hi: Time,
    mtc_hi_at: usize,
    /// MTC timing: the last TSC, and the CTC count it is converted from.
    mtc: MtcState,
    /// CYC timing.
    cyc: CycState,
}

impl Clock {
    #[inline]
    pub fn new() -> Self {
        Clock {
            lo: 0,
            now: 0,
            hi: Time::MAX,
            tsc_hi: Time::MAX,
            hi_at: 0,
            mtc_hi: Time::MAX,
            mtc_hi_at: usize::MAX,
            mtc: MtcState::default(),
            cyc: CycState { bound: Time::MAX, ..CycState::default() },
        }
    }

    /// `hi` from its parts: the one place the bound is worked out.
    #[inline(always)]
    fn set_hi(&mut self) {
        self.hi = self.tsc_hi.min(self.mtc_hi).min(self.cyc.bound).max(self.now);
    }

    /// No scan for the next TSC: `hi` stays unbounded (when nothing reads it).
    #[inline]
    pub fn unbounded(&mut self) {
        self.hi_at = usize::MAX;
    }

    /// A CYC was read whose lower bound waits for the next flow packet
    /// ([`Self::cyc_taken`]).
    #[inline(always)]
    pub fn cyc_pending(&self) -> bool {
        self.cyc.pending.is_some()
    }

    /// A TSC: the time of what follows, until the next timing packet.
    #[inline]
    pub fn tsc(&mut self, t: &Timing, packets: &Packets<'_>, offset: usize, tsc: u64) {
        self.now = t.time.perf_time(tsc);
        // (A TSC behind the walk's time, in a bad trace, takes it back too.)
        self.lo = self.lo.min(self.now);
        self.mtc.tsc = tsc;
        if t.cyc.is_some() {
            // The last CYC came before this TSC.
            self.cyc_before(self.now);
        }
        if offset >= self.hi_at {
            self.next_tsc(t, packets, offset);
        }
        self.next_mtc(t, packets, offset);
    }

    /// A TMA after a TSC: the CTC and fast counter at that TSC, the base
    /// MTCs count from (perf's conversion).
    #[inline]
    pub fn tma(&mut self, t: &Timing, packets: &Packets<'_>, offset: usize, ctc: u16, fast_counter: u16) {
        let Some(m) = t.mtc else { return };
        let ctc = u64::from(ctc);
        let rem = ctc & ((1u64 << m.shift) - 1);
        self.mtc.last = (ctc >> m.shift) as u8;
        self.mtc.delta = 0;
        self.mtc.base = self.mtc.tsc.wrapping_sub(u64::from(fast_counter)).wrapping_sub(m.ctc_to_tsc(rem));
        self.mtc.based = true;
        self.next_mtc(t, packets, offset);
    }

    /// The perf time of the CTC tick an MTC with `payload` names, after the
    /// last MTC's; `ahead` periods later (1: the end of that tick's period).
    #[inline]
    fn mtc_time(&self, time: &TimeConv, m: &MtcConv, payload: u8, ahead: u64) -> Time {
        let ticks = (u64::from(payload.wrapping_sub(self.mtc.last)) + ahead) << m.shift;
        time.perf_time(self.mtc.base.wrapping_add(m.ctc_to_tsc(self.mtc.delta.wrapping_add(ticks))))
    }

    /// An MTC: CTC bits `shift + 7 .. shift` now, so the time has moved on
    /// by the CTC ticks since the last one. The time never goes back, nor
    /// past the next TSC's.
    #[inline]
    pub fn mtc(&mut self, t: &Timing, packets: &Packets<'_>, offset: usize, payload: u8) {
        let Some(m) = t.mtc else { return };
        if !self.mtc.based {
            return;
        }
        let time = self.mtc_time(&t.time, &m, payload, 0);
        if t.cyc.is_some() {
            self.cyc_before_mtc(&t.time, &m, payload);
        }
        self.mtc.delta = self.mtc.delta.wrapping_add(u64::from(payload.wrapping_sub(self.mtc.last)) << m.shift);
        self.mtc.last = payload;
        self.now = self.now.max(time.min(self.tsc_hi));
        if offset >= self.mtc_hi_at {
            self.next_mtc(t, packets, offset);
        } else {
            self.set_hi();
        }
    }

    /// Finds the TSC after `from` to bound the time of what comes next.
    #[inline]
    fn next_tsc(&mut self, t: &Timing, packets: &Packets<'_>, from: usize) {
        self.tsc_hi = Time::MAX;
        self.hi_at = usize::MAX;
        // Too far, or a bad packet: unbounded for now, and scan again at the
        // first TSC past here (after a resync, say), so that one corrupt
        // packet does not leave the rest of the buffer unbounded.
        match packets.scan_to_tsc(from.saturating_add(1 << 20), false) {
            Scan::Tsc(off, tsc) => {
                self.tsc_hi = t.time.perf_time(tsc);
                self.hi_at = off;
            }
            Scan::Stop(off) => self.hi_at = off,
            Scan::Mtc(..) | Scan::End => {}
        }
        self.set_hi();
    }

    /// With MTC timing: finds the MTC after `from`, before the next TSC;
    /// what comes before it ran before the end of the CTC period it names
    /// (the MTC says the count has reached that tick, not yet the next).
    #[inline]
    fn next_mtc(&mut self, t: &Timing, packets: &Packets<'_>, from: usize) {
        self.mtc_hi = Time::MAX;
        self.mtc_hi_at = usize::MAX;
        if let Some(m) = t.mtc.filter(|_| self.mtc.based) {
            match packets.scan_to_tsc(from.saturating_add(1 << 20), true) {
                Scan::Mtc(off, payload) => {
                    self.mtc_hi = self.mtc_time(&t.time, &m, payload, 1);
                    self.mtc_hi_at = off;
                }
                Scan::Stop(off) => self.mtc_hi_at = off,
                Scan::Tsc(..) | Scan::End => {}
            }
        }
        self.set_hi();
    }

    /// A TSC or MTC says the last CYC ran no later than `t`. Apart (as all
    /// of CYC timing) so that the timing functions stay small without it.
    #[inline(never)]
    fn cyc_before(&mut self, t: Time) {
        self.cyc.cap_hi(t);
    }

    /// An MTC with `payload` says the last CYC ran before the end of the
    /// CTC period it names.
    #[inline(never)]
    fn cyc_before_mtc(&mut self, time: &TimeConv, m: &MtcConv, payload: u8) {
        let t = self.mtc_time(time, m, payload, 1);
        self.cyc.cap_hi(t);
    }

    /// A CBR: the core:bus ratio from here on, so the perf time a core
    /// cycle takes. A ratio of 0, or one that does not convert, stops CYC
    /// timing until the next CBR.
    #[inline(never)]
    pub fn cbr(&mut self, t: &Timing, ratio: u8) {
        let Some(c) = t.cyc else { return };
        if ratio == self.cyc.cbr && self.cyc.step_lo != 0 {
            return;
        }
        // A cycle is max_non_turbo_ratio / CBR TSC ticks, a TSC tick
        // mult / 2^shift ns.
        let num = u128::from(c.max_non_turbo_ratio) * u128::from(t.time.mult);
        let den = u128::from(ratio) << t.time.shift.min(63);
        let (lo, hi) = match num.checked_mul(1 << 32) {
            Some(n) if den != 0 => (n / den, n.div_ceil(den)),
            _ => (0, 0),
        };
        let (step_lo, step_hi) = match (u64::try_from(lo), u64::try_from(hi)) {
            (Ok(lo), Ok(hi)) if lo != 0 => (lo, hi),
            _ => (0, 0),
        };
        // Cycles counted so far convert at the old ratio; the next CYC
        // counts some at the old and some at the new (the change came
        // between the last CYC and it), so it converts at both, the slower
        // for the upper bound and the faster for the lower.
        let c = &mut self.cyc;
        c.rebase();
        c.cbr = ratio;
        // (After another change with no CYC since, the steps span both already.)
        let (old_lo, old_hi) = (c.step_lo, c.step_hi);
        c.next_steps = None;
        if old_lo != 0 && step_lo != 0 {
            (c.step_lo, c.step_hi) = (old_lo.min(step_lo), old_hi.max(step_hi));
            c.next_steps = Some((step_lo, step_hi));
        } else {
            (c.step_lo, c.step_hi) = (step_lo, step_hi);
        }
    }

    /// A CYC: `cycles` core cycles since the last CYC. Its time is at
    /// least the last one's plus those cycles (and what is known of the
    /// time already), and at most the last one's upper bound plus them (and
    /// the next TSC's or MTC's bound). What runs from here to the flow packet
    /// after it ran no later than that; what follows that packet no earlier
    /// than the lower bound, taken in then ([`Self::cyc_taken`]).
    #[inline(never)]
    pub fn cyc(&mut self, t: &Timing, cycles: u64) {
        if t.cyc.is_none() {
            return;
        }
        if self.cyc.step_lo == 0 {
            self.lose_cyc();
            return;
        }
        let c = &mut self.cyc;
        let next = self.tsc_hi.min(self.mtc_hi);
        c.lo_cycles = c.lo_cycles.saturating_add(cycles);
        let known = self.now.max(c.pending.unwrap_or(0));
        let lo = match c.last_lo() {
            Some(t) if t >= known => t,
            _ => {
                c.lo = known;
                c.lo_cycles = 0;
                c.lo_known = true;
                known
            }
        };
        c.hi_cycles = c.hi_cycles.saturating_add(cycles);
        if next < c.last_hi(0) {
            c.hi = next;
            c.hi_cycles = 0;
            c.hi_known = next != Time::MAX;
        }
        c.pending = Some(lo.min(next));
        c.bound = c.last_hi(0);
        if let Some((lo, hi)) = c.next_steps.take() {
            // Counted: the new ratio alone from here.
            c.rebase();
            (c.step_lo, c.step_hi) = (lo, hi);
        }
        self.set_hi();
    }

    /// The flow packet after a CYC is taken: what follows ran no earlier
    /// than that CYC, and no later than the next CYC's upper bound when the
    /// next packet is a CYC (else the next TSC's or MTC's, until one is
    /// read).
    #[inline(never)]
    pub fn cyc_taken(&mut self, packets: &Packets<'_>) {
        if let Some(t) = self.cyc.pending.take() {
            self.now = self.now.max(t);
            self.lo = self.lo.max(t);
        }
        self.cyc.bound = match packets.decoded_next() {
            Some(Packet::Cyc(cycles)) => self.cyc.last_hi(cycles),
            _ => Time::MAX,
        };
        self.set_hi();
    }

    /// The CYC count may be lost (a PSB, an overflow): with CYC timing,
    /// it starts again at the next CYC.
    #[inline(always)]
    pub fn cyc_lost(&mut self, t: &Timing) {
        if t.cyc.is_some() {
            self.lose_cyc();
        }
    }

    /// The CYC count is lost: CYC timing starts again at the next CYC.
    #[inline(never)]
    fn lose_cyc(&mut self) {
        self.cyc.lose();
        self.set_hi();
    }
}
