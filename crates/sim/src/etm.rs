//! Turns one CPU's control flow into an ETMv4 instruction trace stream, in
//! CoreSight frames under the CPU's trace ID, as an ETR sink stores it.
//!
//! Configuration (TRCCONFIGR = 0x801): timestamps on; no return stack, so
//! every return carries its target address; no cycle counting, no branch
//! broadcast, no conditional-instruction or data trace. So, as ETMv4 traces
//! P0 elements: a direct branch (B, BL, B.cond, CBZ/CBNZ, TBZ/TBNZ) is an E
//! or N atom; an indirect branch (BR, BLR, RET, ERET) is an E atom followed
//! by an address packet with its target; a BRK trap is an exception packet,
//! its preferred return address (the BRK itself, which does not complete)
//! and the handler's address.
//!
//! Synchronisation: A-sync, TRACE_INFO, a full TIMESTAMP and the address of
//! the next instruction with its context (EL1, AArch64, non-secure), at the
//! start (with TRACE_ON) and after every `sync_period` bytes, at a branch.
//! Timing: a TIMESTAMP with the time of the branch just traced, once
//! `ts_period` ns have passed since the last one, after the pending atoms:
//! every instruction decoded before TIMESTAMP(t) ran at or before t, every
//! one after it at or after t.
//!
//! A new AUXTRACE buffer begins at a synchronisation once the current one
//! holds [`AUX_CHUNK`] bytes; the frames end there (padded with the null
//! ID), because perf resets its decoder at every buffer.

use etm::{packet::*, Encoder, EtmV4Config, FrameWriter, Packet, Profile};

use crate::machine::Flow;
use crate::spool::Pending;

/// Target size of one AUXTRACE buffer of ETM frames.
pub const AUX_CHUNK: u64 = 1 << 16;

/// TRCCONFIGR: bit 0 (RES1) and TS (bit 11).
pub const TRCCONFIGR: u32 = 0x801;
/// TRCAUTHSTATUS as a Cortex-A53 reports it (perf's metadata carries it).
pub const TRCAUTHSTATUS: u32 = 0xcc;
/// ETMv4 exception type 6, instruction debug: breakpoint instructions.
pub const EXCEPTION_BRK: u16 = 6;
/// Pending atoms are written out once there are this many.
const MAX_ATOMS: usize = 24;

/// The trace unit registers of CPU `cpu`: a Cortex-A53's ETMv4.0 ID
/// registers (64-bit timestamps, no return stack in use), trace ID 0x10 + cpu.
pub fn config(cpu: u32) -> EtmV4Config {
    EtmV4Config { configr: TRCCONFIGR, traceidr: 0x10 + cpu, profile: Profile::A, ..EtmV4Config::default() }
}

pub struct EtmEmitter {
    pub out: Pending,
    enc: Encoder,
    frames: FrameWriter,
    trace_id: u8,
    /// The packet being built, before framing.
    pkt: Vec<u8>,
    atoms: Vec<bool>,
    started: bool,
    /// Raw (unframed) bytes so far, and at the last synchronisation.
    raw: u64,
    last_sync: u64,
    last_ts_time: u64,
    last_ts_value: u64,
    last_time: u64,
    ts_period: u64,
    sync_period: u64,
    chunk_start: u64,
}

impl EtmEmitter {
    pub fn new(cpu: u32, ts_period: u64, sync_period: usize) -> EtmEmitter {
        let cfg = config(cpu);
        EtmEmitter {
            out: Pending::default(),
            enc: Encoder::new(&cfg),
            frames: FrameWriter::new(),
            trace_id: cfg.trace_id(),
            pkt: Vec::with_capacity(64),
            atoms: Vec::with_capacity(MAX_ATOMS),
            started: false,
            raw: 0,
            last_sync: 0,
            last_ts_time: 0,
            last_ts_value: 0,
            last_time: 0,
            ts_period: ts_period.max(1),
            sync_period: sync_period.max(64) as u64,
            chunk_start: 0,
        }
    }

    /// Frames the packet bytes built so far.
    fn emit(&mut self) {
        self.raw += self.pkt.len() as u64;
        self.frames.write(self.trace_id, &self.pkt, &mut self.out.bytes);
        self.pkt.clear();
    }

    fn put(&mut self, p: Packet) {
        self.enc.encode(&p, &mut self.pkt).expect("the emitter builds only valid packets");
        self.emit();
    }

    fn address(&mut self, addr: u64) {
        self.enc.address(addr, 0, &mut self.pkt).expect("A64 addresses are 4-byte aligned");
        self.emit();
    }

    fn flush_atoms(&mut self) {
        if !self.atoms.is_empty() {
            self.enc.atoms(&self.atoms, &mut self.pkt);
            self.atoms.clear();
            self.emit();
        }
    }

    /// A timestamp packet updating only the low bits that changed.
    fn timestamp(&mut self, time: u64, full: bool) {
        let bytes = if full { 9 } else { (1..=8).find(|&n| time >> (7 * n) == self.last_ts_value >> (7 * n)).unwrap_or(9) };
        let updated_bits = if bytes == 9 { 64 } else { 7 * bytes as u8 };
        self.put(Packet::Timestamp(Timestamp { value: time, updated_bits, cycle_count: None }));
        self.last_ts_value = time;
        self.last_ts_time = time;
    }

    /// A-sync, TRACE_INFO, (TRACE_ON,) TIMESTAMP, address and context of `next`.
    fn sync(&mut self, time: u64, next: u64, first: bool) {
        if !first && self.out.pos() - self.chunk_start >= AUX_CHUNK {
            self.frames.flush(&mut self.out.bytes);
            self.chunk_start = self.out.pos();
            self.out.cuts.push(self.chunk_start);
        }
        self.last_sync = self.raw;
        self.put(Packet::Async);
        self.put(Packet::TraceInfo(TraceInfo::default()));
        if first {
            self.put(Packet::TraceOn);
        }
        self.timestamp(time, true);
        let addr = Address { value: next, is: 0, form: AddrForm::Long64, update_bits: 64, valid_bits: 64, is64: true };
        let ctx = Context { el: 1, aarch64: true, non_secure: true, vmid: None, context_id: None };
        self.put(Packet::AddressContext(addr, ctx));
    }

    /// One executed instruction at `addr` and time `time`; `next` is where it went.
    pub fn instruction(&mut self, time: u64, addr: u64, flow: Flow, next: u64) {
        self.last_time = self.last_time.max(time);
        if !self.started {
            self.started = true;
            self.sync(time, addr, true);
        }
        match flow {
            Flow::Quiet => return,
            Flow::Direct => self.atoms.push(true),
            Flow::Cond { taken } => self.atoms.push(taken),
            Flow::Indirect { to } | Flow::Return { to } | Flow::FarReturn { to } => {
                self.atoms.push(true);
                self.flush_atoms();
                self.address(to);
            }
            Flow::Trap { from, to } => {
                self.flush_atoms();
                self.put(Packet::Exception(Exception { number: EXCEPTION_BRK, addr_interp: 1, fault_pending: false, m_profile: false }));
                self.address(from);
                self.address(to);
            }
        }
        if self.raw - self.last_sync >= self.sync_period {
            self.flush_atoms();
            self.sync(time, next, false);
        } else if time >= self.last_ts_time + self.ts_period {
            self.flush_atoms();
            self.timestamp(time, false);
        } else if self.atoms.len() >= MAX_ATOMS {
            self.flush_atoms();
        }
    }

    /// The time of the last instruction traced (0 before the first).
    pub fn last_time(&self) -> u64 {
        self.last_time
    }

    /// Tracing stops: the pending atoms, a last TIMESTAMP (perf emits the
    /// elements after the last timestamp only when another one comes), then
    /// the last frame, padded.
    pub fn finish(&mut self) {
        if self.started {
            self.flush_atoms();
            self.timestamp(self.last_time, false);
        }
        self.frames.flush(&mut self.out.bytes);
    }
}
