//! Turns one CPU's control flow into an Intel PT packet stream, as the
//! hardware would with TSC on and return compression off.
//!
//! Timing: a TSC packet follows a flow packet once `tsc_period` ns have
//! passed since the last one, after the pending TNT bits are flushed. So in
//! the stream, every instruction decoded before a TSC(t) ran at or before t,
//! and every one after it ran at or after t. With MTC timing instead, PSB+
//! holds TSC and TMA, and an MTC follows a flow packet once the crystal
//! clock (CTC, [`TSC_PER_CTC`] ns a tick) has passed a multiple of 2^freq
//! ticks: the MTC of the last such tick, so what comes before it ran before
//! the next tick, and what comes after at or after this one.
//!
//! Every PSB+ carries a CBR: the core runs at [`CBR`] times the bus clock,
//! the TSC at [`MAX_NON_TURBO_RATIO`] times it, so [`CYCLES_PER_TSC`] core
//! cycles a TSC tick. In cycle-accurate mode (`cyc_thresh`, perf's `cyc`
//! and `cyc_thresh`) a CYC precedes a flow packet with the core cycles since
//! the last CYC, as the SDM has it: the CYC before a TNT is at its first
//! branch, before a TIP or FUP at its instruction. With a threshold N > 0 a
//! CYC is sent only once 2^(N-1) cycles have passed since the last.
//!
//! With deferred TIPs (`with_deferred_tips`, the SDM's optional
//! optimisation) an indirect jump's or call's TIP waits while the TNT goes
//! on filling with the conditional branches after it: the TNT, then the
//! TIPs it held, go out when it is full or another packet is sent. Not in
//! cycle-accurate mode (its CYCs are placed at each flow packet).
//!
//! With an address filter, packet generation stops when execution leaves
//! the filter's ranges and resumes where it comes back: a direct branch out
//! gives a TIP.PGD, with the target's IP and without it by turns (both are
//! what processors send: SKL014), an indirect one a TIP.PGD in place of its
//! TIP; the first instruction back a TIP.PGE. No packet is sent meanwhile.
//!
//! The stream is cut into AUXTRACE buffers of at most [`AUX_CHUNK`] bytes,
//! each beginning at a PSB (longer only when no PSB falls in one).

use std::collections::VecDeque;

use intel_pt::{Encoder, Ip, IpCompression, Packet, Tnt};

use crate::filter::AddrFilter;
use crate::machine::Flow;
use crate::spool::Pending;

/// Target size of one AUXTRACE buffer of Intel PT data.
pub const AUX_CHUNK: u64 = 1 << 16;

/// TSC ticks (ns: the simulator's TSC is perf time) per crystal clock tick.
pub const TSC_PER_CTC: u64 = 25;

/// The TSC's frequency over the 100 MHz bus clock: a 1 GHz TSC (AUXTRACE_INFO
/// `max_non_turbo_ratio`).
pub const MAX_NON_TURBO_RATIO: u64 = 10;

/// The core's frequency over the bus clock (the CBR packet): 2 GHz.
pub const CBR: u8 = 20;

/// Core cycles per TSC tick (per ns): CBR / max non-turbo ratio.
pub const CYCLES_PER_TSC: u64 = CBR as u64 / MAX_NON_TURBO_RATIO;

/// Which timing packets the stream carries.
#[derive(Clone, Copy, Debug)]
pub enum Timing {
    /// A TSC every `period` ns.
    Tsc { period: u64 },
    /// An MTC every 2^freq CTC ticks; TSC + TMA in PSB+.
    Mtc { freq: u8 },
}

impl Timing {
    pub fn of(cfg: &crate::SimConfig) -> Timing {
        match cfg.mtc_freq {
            Some(freq) => Timing::Mtc { freq: freq.min(15) },
            None => Timing::Tsc { period: cfg.tsc_period.max(1) },
        }
    }
}

pub struct PtEmitter {
    pub out: Pending,
    enc: Encoder,
    tnt_bits: u64,
    tnt_count: u8,
    last_tsc: u64,
    last_time: u64,
    started: bool,
    last_psb_at: u64,
    timing: Timing,
    /// The CTC tick (>> freq) of the last MTC or TMA.
    last_mtc: u64,
    psb_period: u64,
    /// Where the current AUXTRACE buffer began, and the PSBs after it.
    chunk_start: u64,
    psbs: VecDeque<u64>,
    /// Where the CPU goes next: where tracing stops at the end.
    next_ip: u64,
    /// Cycle-accurate mode: the fewest cycles between CYCs (0: a CYC before
    /// every flow packet).
    cyc_min: Option<u64>,
    /// The core cycle count at the last CYC (or where tracing started).
    last_cyc: u64,
    /// The time of the first branch in the pending TNT bits.
    tnt_time: u64,
    /// Code outside it is not traced.
    filter: Option<AddrFilter>,
    /// Packets are generated (not in code the filter leaves out).
    tracing: bool,
    /// TIP.PGDs sent after a direct branch out of the filter's ranges.
    exits: u64,
    /// Indirect jumps' and calls' TIPs are deferred.
    defer_tips: bool,
    /// The targets of the TIPs deferred, in order.
    deferred: Vec<u64>,
}

impl PtEmitter {
    pub fn new(timing: Timing, psb_period: usize) -> PtEmitter {
        PtEmitter {
            out: Pending::default(),
            enc: Encoder::new(),
            tnt_bits: 0,
            tnt_count: 0,
            last_tsc: 0,
            last_time: 0,
            started: false,
            last_psb_at: 0,
            timing,
            last_mtc: 0,
            psb_period: psb_period.max(64) as u64,
            chunk_start: 0,
            psbs: VecDeque::new(),
            next_ip: 0,
            cyc_min: None,
            last_cyc: 0,
            tnt_time: 0,
            filter: None,
            tracing: false,
            exits: 0,
            defer_tips: false,
            deferred: Vec::new(),
        }
    }

    /// Defers indirect jumps' and calls' TIPs behind the TNT (not with CYC).
    pub fn with_deferred_tips(mut self, on: bool) -> PtEmitter {
        self.defer_tips = on;
        self
    }

    /// Traces only the code `filter` lets through (`None`: all of it).
    pub fn with_filter(mut self, filter: Option<AddrFilter>) -> PtEmitter {
        self.filter = filter;
        self
    }

    fn traces(&self, ip: u64) -> bool {
        self.filter.as_ref().is_none_or(|f| f.traces(ip))
    }

    /// A direct branch at `time` to `to`, outside the filter's ranges:
    /// TIP.PGD, with the target's IP or, every other time, without.
    fn leave_direct(&mut self, time: u64, to: u64) {
        self.flush_tnt();
        self.cyc(time);
        self.exits += 1;
        let ip = if self.exits % 2 == 1 { self.ip(to) } else { Ip { compression: IpCompression::Suppressed, payload: 0, ip: None } };
        self.put(Packet::TipPgd(ip));
        self.tracing = false;
    }

    /// Cycle-accurate mode with perf's `cyc_thresh` (`None`: off): a CYC
    /// before a flow packet once 2^(thresh-1) cycles have passed (thresh 0:
    /// before each).
    pub fn with_cyc(mut self, cyc_thresh: Option<u8>) -> PtEmitter {
        self.cyc_min = cyc_thresh.map(|t| if t == 0 { 0 } else { 1 << (t.min(15) - 1) });
        self
    }

    /// In cycle-accurate mode, the CYC for a packet of the instruction at
    /// `time`: the cycles since the last CYC, once there are enough (and at
    /// most one CYC a cycle).
    fn cyc(&mut self, time: u64) {
        let Some(min) = self.cyc_min else { return };
        let now = time * CYCLES_PER_TSC;
        let cycles = now.saturating_sub(self.last_cyc);
        if cycles > 0 && cycles >= min {
            self.put(Packet::Cyc(cycles));
            self.last_cyc = now;
        }
    }

    fn put(&mut self, p: Packet) {
        self.enc.encode(&p, &mut self.out.bytes).expect("the emitter builds only valid packets");
    }

    fn ip(&self, ip: u64) -> intel_pt::Ip {
        self.enc.compress(ip)
    }

    /// The pending TNT bits, then the TIPs deferred behind them.
    fn flush_tnt(&mut self) {
        if self.tnt_count > 0 {
            self.cyc(self.tnt_time);
            self.put(Packet::TntShort(Tnt { bits: self.tnt_bits, count: self.tnt_count }));
            self.tnt_bits = 0;
            self.tnt_count = 0;
        }
        for i in 0..self.deferred.len() {
            let ip = self.ip(self.deferred[i]);
            self.put(Packet::Tip(ip));
        }
        self.deferred.clear();
    }

    /// PSB+: sync point with the time and, while tracing, the IP of the next
    /// instruction (a PSB+ before tracing starts has no FUP: the TIP.PGE
    /// that follows gives the IP, as hardware does and libipt requires).
    fn psb(&mut self, time: u64, next_ip: Option<u64>) {
        let at = self.out.pos();
        if at > self.chunk_start {
            self.psbs.push_back(at);
        }
        self.choose_cuts();
        self.put(Packet::Psb);
        self.put(Packet::Tsc(time));
        if let Timing::Mtc { freq } = self.timing {
            // Where CTC stood, and the TSC ticks since its last tick.
            let ctc = time / TSC_PER_CTC;
            self.put(Packet::Tma { ctc: ctc as u16, fast_counter: (time - ctc * TSC_PER_CTC) as u16 });
            self.last_mtc = ctc >> freq;
        }
        self.put(Packet::Cbr(CBR));
        self.put(Packet::ModeExec { csl: true, csd: false, if_flag: false });
        if let Some(next_ip) = next_ip {
            let ip = self.ip(next_ip);
            self.put(Packet::Fup(ip));
        }
        self.put(Packet::PsbEnd);
        self.last_tsc = time;
        self.last_psb_at = self.out.pos();
    }

    /// Ends buffers once their PSBs are known: a buffer longer than
    /// AUX_CHUNK ends at its last PSB within AUX_CHUNK bytes, or, if it has
    /// none, at the first PSB after.
    fn choose_cuts(&mut self) {
        while self.out.pos() - self.chunk_start > AUX_CHUNK {
            let limit = self.chunk_start + AUX_CHUNK;
            let cut = match self.psbs.iter().rev().find(|&&p| p <= limit) {
                Some(&p) => p,
                None => match self.psbs.front() {
                    Some(&p) => p,
                    None => break,
                },
            };
            self.out.cuts.push(cut);
            self.chunk_start = cut;
            while self.psbs.front().is_some_and(|&p| p <= cut) {
                self.psbs.pop_front();
            }
        }
    }

    /// One executed instruction at `addr` and time `time`; `next` is where it went.
    pub fn instruction(&mut self, time: u64, addr: u64, flow: Flow, next: u64) {
        self.last_time = self.last_time.max(time);
        self.next_ip = next;
        if !self.started {
            self.started = true;
            self.psb(time, None);
            let ip = self.ip(addr);
            self.put(Packet::TipPge(ip));
            // The cycle counter starts with tracing.
            self.last_cyc = time * CYCLES_PER_TSC;
            self.tracing = true;
        }
        if !self.tracing {
            // Outside the filter's ranges: packets resume where execution comes back.
            if self.traces(next) {
                let ip = self.ip(next);
                self.put(Packet::TipPge(ip));
                self.tracing = true;
            }
            return;
        }
        match flow {
            Flow::Quiet => return,
            Flow::Direct if self.traces(next) => return,
            Flow::Direct => self.leave_direct(time, next),
            Flow::Cond { taken } => {
                if self.tnt_count == 0 {
                    self.tnt_time = time;
                }
                self.tnt_bits = self.tnt_bits << 1 | taken as u64;
                self.tnt_count += 1;
                if self.tnt_count == 6 {
                    self.flush_tnt();
                }
            }
            Flow::Indirect { to } if self.defer_tips && self.cyc_min.is_none() && self.traces(to) => self.deferred.push(to),
            Flow::Indirect { to } | Flow::Return { to } | Flow::FarReturn { to } => {
                self.flush_tnt();
                self.cyc(time);
                let ip = self.ip(to);
                if self.traces(to) {
                    self.put(Packet::Tip(ip));
                } else {
                    self.put(Packet::TipPgd(ip));
                    self.tracing = false;
                }
            }
            Flow::Trap { from, to } => {
                self.flush_tnt();
                self.cyc(time);
                let f = self.ip(from);
                self.put(Packet::Fup(f));
                let t = self.ip(to);
                self.put(Packet::Tip(t));
            }
        }
        if !self.tracing {
            return;
        }
        let due = match self.timing {
            Timing::Tsc { period } => time >= self.last_tsc + period,
            Timing::Mtc { freq } => (time / TSC_PER_CTC) >> freq > self.last_mtc,
        };
        if due {
            self.flush_tnt();
            if self.out.pos() - self.last_psb_at >= self.psb_period {
                self.psb(time, Some(next));
            } else if let Timing::Mtc { freq } = self.timing {
                let tick = (time / TSC_PER_CTC) >> freq;
                self.put(Packet::Mtc(tick as u8));
                self.last_mtc = tick;
            } else {
                self.put(Packet::Tsc(time));
                self.last_tsc = time;
            }
        }
    }

    /// The time of the last instruction traced (0 before the first).
    pub fn last_time(&self) -> u64 {
        self.last_time
    }

    /// Tracing stops before the next instruction.
    pub fn finish(&mut self) {
        if self.started && self.tracing {
            self.flush_tnt();
            // An asynchronous stop: FUP (where the CPU was) then TIP.PGD.
            // A TIP.PGD alone means "the next branch was indirect and
            // disabled tracing"; perf then walks to the next branch and, if
            // it is a Jcc, reports "Trace doesn't match instruction".
            self.cyc(self.last_time);
            let ip = self.ip(self.next_ip);
            self.put(Packet::Fup(ip));
            let ip = self.ip(self.next_ip);
            self.put(Packet::TipPgd(ip));
        }
        self.choose_cuts();
    }
}
