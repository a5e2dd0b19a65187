//! The ETMv4 instruction-trace packet decoder for one trace source.
//!
//! Bytes arrive in blocks of any size (a frame's worth for one trace ID, or a
//! whole raw buffer); a packet split across blocks is kept in a small buffer
//! and finished when the next block comes. Packets wholly inside a block are
//! decoded in place. Nothing is allocated.
//!
//! Until the first A-sync the decoder is unsynchronised and reports the bytes
//! it skips as [`Packet::NotSync`], in the pieces OpenCSD reports them
//! (8 bytes, or cut before a 0x00 that may begin an A-sync), so that
//! listings line up.

use crate::config::{EtmV4Config, Profile};
use crate::packet::*;
use crate::TracePacket;

/// Longest packet accepted; anything longer is reported as a bad sequence.
/// Valid ETMv4 packets are at most 23 bytes, but continuation fields have no
/// length limit in OpenCSD, so garbage can make long packets; within this
/// limit we split garbage into packets exactly as it does.
pub const MAX_PACKET_LEN: usize = 256;

/// Unsynchronised bytes are reported in pieces of at most 13 bytes.
const MAX_DUMP: usize = 16;

/// What the decoder does after a packet error (bad sequence, reserved header).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ErrorRecovery {
    /// Drop out of sync and skip bytes (as NOT_SYNC packets) up to the next
    /// A-sync: after an error nothing says where the next packet starts.
    #[default]
    Resync,
    /// Take the next byte as a packet header, as OpenCSD's packet processor
    /// does, so that listings can be compared with `trc_pkt_lister`.
    Continue,
}

/// How a header byte is treated under the source's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Valid(PacketType),
    Reserved,
    ReservedCfg(PacketType),
}

/// Configuration values the decoder and encoder need per packet.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    pub commit_opt1: bool,
    pub vmid_bytes: u8,
    pub cid_bytes: u8,
    pub cc_mask: u32,
    pub max_spec_depth: u32,
    pub m_profile: bool,
}

impl Params {
    pub fn new(c: &EtmV4Config) -> Params {
        Params {
            commit_opt1: c.commit_opt1(),
            vmid_bytes: c.vmid_bytes(),
            cid_bytes: c.context_id_bytes(),
            cc_mask: ((1u64 << c.cc_size()) - 1) as u32,
            max_spec_depth: c.max_spec_depth(),
            m_profile: c.profile == Profile::M,
        }
    }
}

/// The address history, timestamp and context state that compressed packets
/// are expanded against. Shared with the encoder, which must compress
/// against exactly what a decoder will hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProtoState {
    /// The current address register.
    pub cur: Address,
    /// The last three addresses, most recent first (exact-match targets).
    pub stack: [Address; 3],
    pub ts: u64,
    pub ctx_valid: bool,
    pub ctx_aarch64: bool,
    pub cc_threshold: Option<u32>,
}

const RESET_ADDR: Address = Address { value: 0, is: 0, form: AddrForm::Long64, update_bits: 0, valid_bits: 64, is64: true };

impl ProtoState {
    pub fn new() -> ProtoState {
        ProtoState {
            cur: Address { valid_bits: 0, is64: false, ..RESET_ADDR },
            stack: [RESET_ADDR; 3],
            ts: 0,
            ctx_valid: false,
            ctx_aarch64: false,
            cc_threshold: None,
        }
    }

    #[inline]
    fn push(&mut self) -> Address {
        self.stack = [self.cur, self.stack[0], self.stack[1]];
        self.cur
    }

    #[inline]
    pub fn set_long64(&mut self, value: u64, is: u8) -> Address {
        self.cur = Address { value, is, form: AddrForm::Long64, update_bits: 64, valid_bits: 64, is64: true };
        self.push()
    }

    /// 32-bit address: in AArch64 the upper half is kept from the current address.
    #[inline]
    pub fn set_long32(&mut self, value: u32, is: u8) -> Address {
        let c = &mut self.cur;
        if self.ctx_valid && self.ctx_aarch64 {
            c.is64 = true;
            c.value = (c.value & !0xFFFF_FFFF) | value as u64;
        } else {
            c.is64 = false;
            c.value = value as u64;
        }
        c.update_bits = 32;
        c.valid_bits = c.valid_bits.max(32);
        c.is = is;
        c.form = AddrForm::Long32;
        self.push()
    }

    #[inline]
    pub fn set_short(&mut self, value: u64, is: u8, bits: u8) -> Address {
        let mask = (1u64 << bits) - 1;
        let c = &mut self.cur;
        c.value = (c.value & !mask) | (value & mask);
        c.update_bits = bits;
        c.valid_bits = c.valid_bits.max(bits);
        c.is = is;
        c.form = AddrForm::Short;
        self.push()
    }

    #[inline]
    pub fn exact_match(&mut self, index: u8) -> Address {
        self.cur = self.stack[index as usize % 3];
        self.push()
    }

    /// TRACE_INFO: the address history and the timestamp start again from 0.
    pub fn trace_info(&mut self, cc_threshold: Option<u32>) {
        self.ts = 0;
        self.stack = [RESET_ADDR; 3];
        self.cur = RESET_ADDR;
        self.cc_threshold = cc_threshold;
    }

    /// Merges a timestamp field of `nbytes` bytes (7 bits each, 64 for all
    /// nine); returns (value, bits updated).
    pub fn timestamp(&mut self, field: u64, nbytes: usize) -> (u64, u8) {
        let bits = if nbytes < 9 { nbytes as u8 * 7 } else { 64 };
        let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
        self.ts = (self.ts & !mask) | (field & mask);
        (self.ts, bits)
    }

    pub fn context(&mut self, c: &Context) {
        self.ctx_valid = true;
        self.ctx_aarch64 = c.aarch64;
    }

    pub fn threshold(&self) -> u32 {
        self.cc_threshold.unwrap_or(0)
    }
}

/// Where a packet's raw bytes are, so that the caller can borrow them after
/// the decoder's state has been updated.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RawLoc {
    Input { start: usize, len: usize },
    Buf { len: usize },
    Dump { len: usize },
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Emit {
    pub index: u64,
    pub packet: Packet,
    pub raw: RawLoc,
}

/// Unsynchronised scanning phase: looking for the 11 zero bytes and 0x80 of an A-sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scan {
    Hunt,
    /// One 0x00 seen (it may start an A-sync).
    Zero,
    /// Two or more 0x00 seen.
    Zeros,
}

enum Measure {
    Need,
    Done(usize),
    Bad(usize, PacketType),
}

/// Decodes the packets of one ETMv4 trace source. Clone it to fork the
/// decoding state (cheap: a few hundred bytes, no heap).
#[derive(Clone)]
pub struct PacketDecoder {
    trace_id: u8,
    table: [Slot; 256],
    p: Params,
    recovery: ErrorRecovery,
    synced: bool,
    scan: Scan,
    /// The next byte starts a packet (and sets `start`).
    new_packet: bool,
    /// Trace index of the packet being assembled (OpenCSD's packet index).
    start: u64,
    buf: [u8; MAX_PACKET_LEN],
    len: usize,
    dump: [u8; MAX_DUMP],
    /// A NOT_SYNC piece whose last byte ended a block: OpenCSD reports it
    /// only when the source's next block arrives, so we do too.
    deferred: Option<Emit>,
    st: ProtoState,
}

impl std::fmt::Debug for PacketDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketDecoder").field("trace_id", &self.trace_id).field("synced", &self.synced).finish_non_exhaustive()
    }
}

impl PacketDecoder {
    pub fn new(config: &EtmV4Config) -> PacketDecoder {
        PacketDecoder {
            trace_id: config.trace_id(),
            table: header_table(config),
            p: Params::new(config),
            recovery: ErrorRecovery::default(),
            synced: false,
            scan: Scan::Hunt,
            new_packet: true,
            start: 0,
            buf: [0; MAX_PACKET_LEN],
            len: 0,
            dump: [0; MAX_DUMP],
            deferred: None,
            st: ProtoState::new(),
        }
    }

    pub fn with_recovery(mut self, recovery: ErrorRecovery) -> PacketDecoder {
        self.recovery = recovery;
        self
    }

    pub fn trace_id(&self) -> u8 {
        self.trace_id
    }

    /// Whether an A-sync has been seen (and no error has undone it).
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Forgets everything (a discontinuity in the trace): unsynchronised,
    /// address and timestamp history cleared, a partial packet dropped.
    pub fn reset(&mut self) {
        *self = PacketDecoder::new_like(self);
    }

    fn new_like(d: &PacketDecoder) -> PacketDecoder {
        PacketDecoder {
            trace_id: d.trace_id,
            table: d.table,
            p: d.p,
            recovery: d.recovery,
            synced: false,
            scan: Scan::Hunt,
            new_packet: true,
            start: 0,
            buf: [0; MAX_PACKET_LEN],
            len: 0,
            dump: [0; MAX_DUMP],
            deferred: None,
            st: ProtoState::new(),
        }
    }

    /// Decodes the next packet from `data[*pos..]`, where `data[0]` has trace
    /// index `base`. Returns None when the data is used up; a packet cut off
    /// at the end is kept and completed by the next call's data.
    pub fn decode<'a>(&'a mut self, data: &'a [u8], base: u64, pos: &mut usize) -> Option<TracePacket<'a>> {
        let e = self.step(data, base, pos)?;
        Some(self.resolve(e, data))
    }

    /// End of the trace: the packet cut off by it, if any, as [`Packet::IncompleteEot`].
    pub fn finish(&mut self) -> Option<TracePacket<'_>> {
        let e = self.finish_emit()?;
        Some(self.resolve(e, &[]))
    }

    #[inline]
    pub(crate) fn resolve<'a>(&'a self, e: Emit, data: &'a [u8]) -> TracePacket<'a> {
        let raw = match e.raw {
            RawLoc::Input { start, len } => &data[start..start + len],
            RawLoc::Buf { len } => &self.buf[..len],
            RawLoc::Dump { len } => &self.dump[..len],
        };
        TracePacket { trace_id: self.trace_id, index: e.index, packet: e.packet, raw }
    }

    pub(crate) fn finish_emit(&mut self) -> Option<Emit> {
        if let Some(d) = self.deferred.take() {
            // The undelivered piece goes out with the rest, as one incomplete packet.
            let RawLoc::Dump { len: n } = d.raw else {
                return None;
            };
            let mut all = [0u8; 2 * MAX_PACKET_LEN];
            all[..n].copy_from_slice(&self.dump[..n]);
            all[n..n + self.len].copy_from_slice(&self.buf[..self.len]);
            let total = (n + self.len).min(MAX_PACKET_LEN);
            self.buf[..total].copy_from_slice(&all[..total]);
            self.len = total;
            self.start = d.index;
        }
        if self.len == 0 {
            return None;
        }
        let during = if !self.synced {
            if self.scan == Scan::Zeros {
                PacketType::Async
            } else {
                PacketType::NotSync
            }
        } else if self.buf[0] == 0 && self.len >= 2 && self.buf[1] == 0 {
            PacketType::Async
        } else {
            match self.table[self.buf[0] as usize] {
                Slot::Valid(t) | Slot::ReservedCfg(t) => t,
                Slot::Reserved => PacketType::Reserved,
            }
        };
        let len = self.len;
        self.len = 0;
        self.new_packet = true;
        Some(Emit { index: self.start, packet: Packet::IncompleteEot { during }, raw: RawLoc::Buf { len } })
    }

    #[inline]
    pub(crate) fn step(&mut self, data: &[u8], base: u64, pos: &mut usize) -> Option<Emit> {
        if self.deferred.is_some() && *pos < data.len() {
            return self.deferred.take();
        }
        while *pos < data.len() {
            if !self.synced {
                let b = data[*pos];
                *pos += 1;
                if let Some(e) = self.unsynced_byte(b, base + *pos as u64 - 1) {
                    if *pos == data.len() && matches!(e.packet, Packet::NotSync { .. }) {
                        self.deferred = Some(e);
                        return None;
                    }
                    return Some(e);
                }
                continue;
            }
            if self.len == 0 {
                let start = *pos;
                // Headers 0xC0..=0xFF are one-byte atom packets under every
                // configuration, and most of a trace.
                let h = data[start];
                if h >= 0xC0 {
                    *pos += 1;
                    return Some(Emit { index: base + start as u64, packet: atom_packet(h), raw: RawLoc::Input { start, len: 1 } });
                }
                let s = &data[start..data.len().min(start + MAX_PACKET_LEN)];
                return match measure_capped(&self.table, &self.p, s) {
                    Measure::Done(n) => {
                        *pos += n;
                        let packet = decode_packet(&self.table, &self.p, &mut self.st, &s[..n]);
                        Some(self.emitted(packet, base + start as u64, RawLoc::Input { start, len: n }))
                    }
                    Measure::Bad(n, during) => {
                        *pos += n;
                        Some(self.emitted(Packet::BadSequence { during }, base + start as u64, RawLoc::Input { start, len: n }))
                    }
                    Measure::Need => {
                        self.buf[..s.len()].copy_from_slice(s);
                        self.len = s.len();
                        self.start = base + start as u64;
                        *pos = data.len();
                        None
                    }
                };
            }
            // The rest of a packet begun in an earlier block.
            let old = self.len;
            let take = (MAX_PACKET_LEN - old).min(data.len() - *pos);
            self.buf[old..old + take].copy_from_slice(&data[*pos..*pos + take]);
            return match measure_capped(&self.table, &self.p, &self.buf[..old + take]) {
                Measure::Done(n) => {
                    *pos += n - old;
                    self.len = 0;
                    let packet = decode_packet(&self.table, &self.p, &mut self.st, &self.buf[..n]);
                    Some(self.emitted(packet, self.start, RawLoc::Buf { len: n }))
                }
                Measure::Bad(n, during) => {
                    *pos += n - old;
                    self.len = 0;
                    Some(self.emitted(Packet::BadSequence { during }, self.start, RawLoc::Buf { len: n }))
                }
                Measure::Need => {
                    self.len = old + take;
                    *pos += take;
                    None
                }
            };
        }
        None
    }

    #[inline]
    fn emitted(&mut self, packet: Packet, index: u64, raw: RawLoc) -> Emit {
        if packet.is_error() && self.recovery == ErrorRecovery::Resync {
            self.synced = false;
            self.new_packet = true;
        }
        Emit { index, packet, raw }
    }

    /// One byte while unsynchronised, following OpenCSD's NOT_SYNC pieces
    /// and index bookkeeping exactly.
    fn unsynced_byte(&mut self, b: u8, index: u64) -> Option<Emit> {
        if self.new_packet {
            self.new_packet = false;
            self.start = index;
            self.scan = Scan::Hunt;
        }
        if self.len == MAX_DUMP {
            return Some(self.dump(self.len)); // cannot happen: pieces are cut at 8 or 12
        }
        self.buf[self.len] = b;
        self.len += 1;
        match self.scan {
            Scan::Hunt => {
                if b == 0 {
                    self.scan = Scan::Zero;
                    if self.len > 1 {
                        let e = self.dump(self.len - 1);
                        self.start = index;
                        return Some(e);
                    }
                    self.start = index;
                } else if self.len >= 8 {
                    let e = self.dump(self.len);
                    self.start = index + 1;
                    return Some(e);
                }
            }
            Scan::Zero => self.scan = if b == 0 { Scan::Zeros } else { Scan::Hunt },
            Scan::Zeros => {
                if b != 0 {
                    if self.len != 12 {
                        self.scan = Scan::Hunt;
                    } else {
                        let packet = if b == 0x80 {
                            self.synced = true;
                            Packet::Async
                        } else {
                            Packet::BadSequence { during: PacketType::Async }
                        };
                        self.len = 0;
                        self.new_packet = true;
                        return Some(Emit { index: self.start, packet, raw: RawLoc::Buf { len: 12 } });
                    }
                } else if self.len == 12 {
                    // A 12th zero: the first cannot belong to the A-sync.
                    return Some(self.dump(1));
                }
            }
        }
        None
    }

    /// Reports the first `n` buffered bytes as NOT_SYNC and drops them.
    fn dump(&mut self, n: usize) -> Emit {
        self.dump[..n].copy_from_slice(&self.buf[..n]);
        self.buf.copy_within(n..self.len, 0);
        self.len -= n;
        Emit { index: self.start, packet: Packet::NotSync { in_async: self.scan == Scan::Zeros }, raw: RawLoc::Dump { len: n } }
    }
}

/// Which packet each header byte starts under `c` (OpenCSD's table: headers
/// for features the configuration lacks are reserved).
fn header_table(c: &EtmV4Config) -> [Slot; 256] {
    use PacketType::*;
    let mut t = [Slot::Reserved; 256];
    let mut set = |range: std::ops::RangeInclusive<usize>, slot: Slot| {
        for h in range {
            t[h] = slot;
        }
    };
    let v = Slot::Valid;
    let cfg = |ok: bool, ty: PacketType| {
        if ok {
            Slot::Valid(ty)
        } else {
            Slot::ReservedCfg(ty)
        }
    };
    set(0x00..=0x00, v(Extension));
    set(0x01..=0x01, v(TraceInfo));
    set(0x02..=0x03, v(Timestamp));
    set(0x04..=0x04, v(TraceOn));
    if c.profile == Profile::M && c.version() >= 0x42 {
        set(0x05..=0x05, v(FuncRet));
    }
    set(0x06..=0x06, v(Exception));
    set(0x07..=0x07, v(ExceptionReturn));
    set(0x0C..=0x0D, v(CcntF2));
    set(0x0E..=0x0F, v(CcntF1));
    set(0x10..=0x1F, v(CcntF3));
    let data = c.data_trace_enabled();
    set(0x20..=0x27, cfg(data, NumDsMkr));
    set(0x28..=0x2C, cfg(data, UnnumDsMkr));
    set(0x2D..=0x2D, v(Commit));
    set(0x2E..=0x2E, v(CancelF1));
    set(0x2F..=0x2F, v(CancelF1Mispred));
    set(0x30..=0x33, v(Mispredict));
    set(0x34..=0x37, v(CancelF2));
    set(0x38..=0x3F, v(CancelF3));
    let cond = c.cond_trace_enabled();
    set(0x40..=0x42, cfg(cond, CondIF2));
    set(0x43..=0x43, cfg(cond, CondFlush));
    set(0x44..=0x46, cfg(cond, CondResF4));
    set(0x48..=0x4A, cfg(cond, CondResF2));
    set(0x4C..=0x4E, cfg(cond, CondResF2));
    set(0x50..=0x5F, cfg(cond, CondResF3));
    set(0x68..=0x6B, cfg(cond, CondResF1));
    set(0x6C..=0x6C, cfg(cond, CondIF1));
    set(0x6D..=0x6D, cfg(cond, CondIF3));
    set(0x6E..=0x6F, cfg(cond, CondResF1));
    if c.version() >= 0x43 {
        set(0x70..=0x70, v(Ignore));
    }
    set(0x71..=0x7F, v(Event));
    set(0x80..=0x81, v(Context));
    t[0x82] = v(AddrCtxtL32Is0);
    t[0x83] = v(AddrCtxtL32Is1);
    t[0x85] = v(AddrCtxtL64Is0);
    t[0x86] = v(AddrCtxtL64Is1);
    t[0x90..=0x92].fill(v(AddrMatch));
    t[0x95] = v(AddrSIs0);
    t[0x96] = v(AddrSIs1);
    t[0x9A] = v(AddrL32Is0);
    t[0x9B] = v(AddrL32Is1);
    t[0x9D] = v(AddrL64Is0);
    t[0x9E] = v(AddrL64Is1);
    if c.has_q_elements() {
        for q in [0x0, 0x1, 0x2, 0x5, 0x6, 0xA, 0xB, 0xC, 0xF] {
            t[0xA0 + q] = v(Q);
        }
    }
    for h in (0xC0..=0xD4).chain(0xE0..=0xF4) {
        t[h] = v(AtomF6);
    }
    for h in [0xD5, 0xD6, 0xD7, 0xF5] {
        t[h] = v(AtomF5);
    }
    t[0xD8..=0xDB].fill(v(AtomF2));
    t[0xDC..=0xDF].fill(v(AtomF4));
    t[0xF6] = v(AtomF1);
    t[0xF7] = v(AtomF1);
    t[0xF8..=0xFF].fill(v(AtomF3));
    t
}

/// End of a continuation field (7 bits a byte, bit 7 set when more follow)
/// starting at `i`. Like OpenCSD, no length limit (the packet has one).
fn field_end(s: &[u8], i: usize) -> Result<usize, Measure> {
    match s.get(i..).and_then(|t| t.iter().position(|b| b & 0x80 == 0)) {
        Some(k) => Ok(i + k + 1),
        None => Err(Measure::Need),
    }
}

fn fixed(s: &[u8], len: usize) -> Measure {
    if s.len() < len {
        Measure::Need
    } else {
        Measure::Done(len)
    }
}

/// Bytes of VMID and context ID an info byte announces.
fn ctx_payload(p: &Params, info: u8) -> usize {
    (if info & 0x40 != 0 { p.vmid_bytes } else { 0 }) as usize + (if info & 0x80 != 0 { p.cid_bytes } else { 0 }) as usize
}

/// `measure`, with packets longer than MAX_PACKET_LEN cut there as bad sequences.
#[inline]
fn measure_capped(table: &[Slot; 256], p: &Params, s: &[u8]) -> Measure {
    match measure(table, p, s) {
        Measure::Need if s.len() >= MAX_PACKET_LEN => {
            let during = match table[s[0] as usize] {
                Slot::Valid(t) => t,
                _ => PacketType::Reserved,
            };
            Measure::Bad(MAX_PACKET_LEN, during)
        }
        m => m,
    }
}

/// The length of the packet starting at `s[0]`, or that more bytes are
/// needed, or where it turns out to be invalid.
#[inline]
fn measure(table: &[Slot; 256], p: &Params, s: &[u8]) -> Measure {
    use PacketType::*;
    let h = s[0];
    let ty = match table[h as usize] {
        Slot::Valid(t) => t,
        _ => return Measure::Done(1),
    };
    let r = (|| -> Result<usize, Measure> {
        Ok(match ty {
            Extension => {
                let b1 = *s.get(1).ok_or(Measure::Need)?;
                match b1 {
                    0x03 | 0x05 => 2,
                    0x00 => {
                        for i in 2..12 {
                            let b = *s.get(i).ok_or(Measure::Need)?;
                            if b != 0 {
                                return if i == 11 && b == 0x80 { Ok(12) } else { Err(Measure::Bad(i + 1, Async)) };
                            }
                        }
                        return Err(Measure::Bad(12, Async));
                    }
                    _ => return Err(Measure::Bad(2, Extension)),
                }
            }
            TraceInfo => {
                let mut i = field_end(s, 1)?;
                let present = s[1] & 0x1F;
                for bit in 0..5 {
                    if present & (1 << bit) != 0 {
                        i = field_end(s, i)?;
                    }
                }
                i
            }
            Timestamp => {
                let mut i = 1;
                for k in 0..9 {
                    let b = *s.get(i).ok_or(Measure::Need)?;
                    i += 1;
                    if b & 0x80 == 0 || k == 8 {
                        break;
                    }
                }
                if h & 1 == 1 {
                    i = field_end(s, i)?;
                }
                i
            }
            Exception => {
                let b1 = *s.get(1).ok_or(Measure::Need)?;
                let len = if b1 & 0x80 != 0 { 3 } else { 2 };
                return as_result(fixed(s, len));
            }
            CcntF1 => {
                let mut i = 1;
                if !p.commit_opt1 {
                    i = field_end(s, i)?;
                }
                if h & 1 == 0 {
                    i = field_end(s, i)?;
                }
                i
            }
            CcntF2 | CondIF3 | CondResF3 => return as_result(fixed(s, 2)),
            Commit | CancelF1 | CancelF1Mispred | CondIF1 => field_end(s, 1)?,
            CondResF1 => {
                let mut i = field_end(s, 1)?;
                if h & 0xFC != 0x6C {
                    i = field_end(s, i)?;
                }
                i
            }
            Context => {
                if h & 1 == 0 {
                    1
                } else {
                    let info = *s.get(1).ok_or(Measure::Need)?;
                    if info & 0xC0 == 0 {
                        2
                    } else {
                        // OpenCSD takes one byte more when the announced IDs have size 0.
                        return as_result(fixed(s, 2 + ctx_payload(p, info).max(1)));
                    }
                }
            }
            AddrCtxtL32Is0 | AddrCtxtL32Is1 | AddrCtxtL64Is0 | AddrCtxtL64Is1 => {
                let a = if matches!(ty, AddrCtxtL32Is0 | AddrCtxtL32Is1) { 4 } else { 8 };
                let info = *s.get(1 + a).ok_or(Measure::Need)?;
                return as_result(fixed(s, 2 + a + ctx_payload(p, info)));
            }
            AddrSIs0 | AddrSIs1 => {
                let b1 = *s.get(1).ok_or(Measure::Need)?;
                return as_result(fixed(s, if b1 & 0x80 != 0 { 3 } else { 2 }));
            }
            AddrL32Is0 | AddrL32Is1 => return as_result(fixed(s, 5)),
            AddrL64Is0 | AddrL64Is1 => return as_result(fixed(s, 9)),
            Q => {
                let i = match h & 0xF {
                    0xF => return Ok(1),
                    0x5 | 0x6 => {
                        let b1 = *s.get(1).ok_or(Measure::Need)?;
                        if b1 & 0x80 != 0 {
                            3
                        } else {
                            2
                        }
                    }
                    0xA | 0xB => 5,
                    _ => 1,
                };
                field_end(s, i)?
            }
            _ => 1,
        })
    })();
    match r {
        Ok(n) => Measure::Done(n),
        Err(m) => m,
    }
}

fn as_result(m: Measure) -> Result<usize, Measure> {
    match m {
        Measure::Done(n) => Ok(n),
        m => Err(m),
    }
}

/// Reads at most `limit` bytes of a continuation field at `*i` (stopping
/// after a byte with bit 7 clear), advancing past them, as OpenCSD reads
/// fields. None if the packet ends first.
fn cont(s: &[u8], i: &mut usize, limit: usize) -> Option<u64> {
    let mut v = 0u64;
    for k in 0..limit {
        let b = *s.get(*i)?;
        *i += 1;
        v |= ((b & 0x7F) as u64) << (7 * k);
        if b & 0x80 == 0 {
            break;
        }
    }
    Some(v)
}

fn read_le(s: &[u8], i: &mut usize, n: u8) -> u32 {
    let mut v = 0u32;
    for k in 0..n as usize {
        v |= (s[*i + k] as u32) << (8 * k);
    }
    *i += n as usize;
    v
}

/// Address bits of a long address packet body (`s` starts after the header).
#[inline]
fn long_addr(s: &[u8], is: u8, bytes: usize) -> u64 {
    let mut v =
        if is == 0 { (((s[0] & 0x7F) as u64) << 2) | (((s[1] & 0x7F) as u64) << 9) } else { (((s[0] & 0x7F) as u64) << 1) | ((s[1] as u64) << 8) };
    for (k, &b) in s[2..bytes].iter().enumerate() {
        v |= (b as u64) << (16 + 8 * k);
    }
    v
}

/// Address bits and bit count of a short address body; advances `i`.
#[inline]
fn short_addr(s: &[u8], i: &mut usize, is: u8) -> (u64, u8) {
    let shift = if is == 0 { 2 } else { 1 };
    let b1 = s[*i];
    *i += 1;
    let mut v = ((b1 & 0x7F) as u64) << shift;
    let mut bits = 7 + shift;
    if b1 & 0x80 != 0 {
        v |= (s[*i] as u64) << (7 + shift);
        *i += 1;
        bits += 8;
    }
    (v, bits as u8)
}

fn context_at(p: &Params, st: &mut ProtoState, s: &[u8], mut i: usize) -> Context {
    let info = s[i];
    i += 1;
    let vmid = (info & 0x40 != 0 && p.vmid_bytes > 0).then(|| read_le(s, &mut i, p.vmid_bytes));
    let context_id = (info & 0x80 != 0 && p.cid_bytes > 0).then(|| read_le(s, &mut i, p.cid_bytes));
    let c = Context { el: info & 3, aarch64: info & 0x10 != 0, non_secure: info & 0x20 != 0, vmid, context_id };
    st.context(&c);
    c
}

fn atoms_f6(h: u8) -> Atoms {
    let e = (h & 0x1F) as u32 + 3;
    let mut bits = (1u32 << e) - 1;
    if h & 0x20 == 0 {
        bits |= 1 << e;
    }
    Atoms::new(bits, e as u8 + 1)
}

fn atoms_f5(h: u8) -> Atoms {
    let bits = match ((h & 0x20) >> 3) | (h & 0x3) {
        5 => 0x1E,
        1 => 0x00,
        2 => 0x0A,
        _ => 0x15,
    };
    Atoms::new(bits, 5)
}

/// The atom packet of header `h` (0xC0..=0xFF).
#[inline]
fn atom_packet(h: u8) -> Packet {
    match h {
        0xF6 | 0xF7 => Packet::Atom { format: 1, atoms: Atoms::new((h & 1) as u32, 1) },
        0xD8..=0xDB => Packet::Atom { format: 2, atoms: Atoms::new((h & 3) as u32, 2) },
        0xF8..=0xFF => Packet::Atom { format: 3, atoms: Atoms::new((h & 7) as u32, 3) },
        0xDC..=0xDF => Packet::Atom { format: 4, atoms: Atoms::new([0xE, 0x0, 0xA, 0x5][(h & 3) as usize], 4) },
        0xD5..=0xD7 | 0xF5 => Packet::Atom { format: 5, atoms: atoms_f5(h) },
        _ => Packet::Atom { format: 6, atoms: atoms_f6(h) },
    }
}

/// The two-bit atom field of mispredict and cancel format 2 packets.
fn atoms_mispredict(code: u8) -> Atoms {
    match code & 3 {
        1 => Atoms::new(1, 1),
        2 => Atoms::new(3, 2),
        3 => Atoms::new(0, 1),
        _ => Atoms::default(),
    }
}

#[inline]
fn decode_packet(table: &[Slot; 256], p: &Params, st: &mut ProtoState, s: &[u8]) -> Packet {
    use PacketType as T;
    let h = s[0];
    let ty = match table[h as usize] {
        Slot::Valid(t) => t,
        Slot::Reserved => return Packet::Reserved { header: h },
        Slot::ReservedCfg(t) => return Packet::ReservedConfig { header: h, would_be: t },
    };
    let mut i = 1;
    match ty {
        T::Extension => match s[1] {
            0x03 => Packet::Discard,
            0x05 => Packet::Overflow,
            _ => Packet::Async,
        },
        T::TraceInfo => {
            while s[i] & 0x80 != 0 {
                i += 1;
            }
            i += 1;
            let present = s[1] & 0x1F;
            st.trace_info(None);
            let mut ti = TraceInfo::default();
            for bit in 0..5 {
                if present & (1 << bit) == 0 || i >= s.len() {
                    continue;
                }
                // A field running past the packet (possible in garbage, where
                // fields longer than 5 bytes throw the reading off) is a bad sequence.
                let Some(v) = cont(s, &mut i, 5) else {
                    return Packet::BadSequence { during: ty };
                };
                let v = v as u32;
                match bit {
                    0 => ti.info = v,
                    1 => ti.p0_key = Some(v),
                    2 => ti.spec_depth = v,
                    3 => {
                        ti.cc_threshold = Some(v);
                        st.cc_threshold = Some(v);
                    }
                    _ => ti.window = Some(v),
                }
            }
            Packet::TraceInfo(ti)
        }
        T::Timestamp => {
            let mut field = 0u64;
            let mut n = 0;
            loop {
                let b = s[i];
                i += 1;
                field |= ((b & 0x7F) as u64) << (7 * n);
                n += 1;
                if b & 0x80 == 0 || n == 9 {
                    break;
                }
            }
            let (value, updated_bits) = st.timestamp(field, n);
            let cycle_count = (h & 1 == 1).then(|| cont(s, &mut i, 3).unwrap_or(0) as u32 & p.cc_mask);
            Packet::Timestamp(Timestamp { value, updated_bits, cycle_count })
        }
        T::TraceOn => Packet::TraceOn,
        T::FuncRet => Packet::FunctionReturn,
        T::Exception => {
            let b1 = s[1];
            let mut number = ((b1 >> 1) & 0x1F) as u16;
            let addr_interp = ((b1 & 0x40) >> 5) | (b1 & 1);
            let mut fault_pending = false;
            if b1 & 0x80 != 0 {
                number |= ((s[2] & 0x1F) as u16) << 5;
                fault_pending = s[2] & 0x20 != 0;
            }
            Packet::Exception(Exception { number, addr_interp, fault_pending, m_profile: p.m_profile })
        }
        T::ExceptionReturn => Packet::ExceptionReturn,
        T::CcntF1 => {
            let commit = (!p.commit_opt1).then(|| cont(s, &mut i, 5).unwrap_or(0) as u32);
            let count = (h & 1 == 0).then(|| (cont(s, &mut i, 3).unwrap_or(0) as u32).wrapping_add(st.threshold()));
            Packet::CycleCount(CycleCount { format: 1, count, commit })
        }
        T::CcntF2 => {
            let b1 = s[1];
            let offset = if h & 1 == 1 { p.max_spec_depth.wrapping_sub(15) } else { 1 };
            let commit = Some(((b1 >> 4) as u32).wrapping_add(offset));
            Packet::CycleCount(CycleCount { format: 2, count: Some(st.threshold().wrapping_add((b1 & 0xF) as u32)), commit })
        }
        T::CcntF3 => {
            let commit = (!p.commit_opt1).then_some(((h >> 2) & 3) as u32 + 1);
            Packet::CycleCount(CycleCount { format: 3, count: Some(st.threshold().wrapping_add((h & 3) as u32)), commit })
        }
        T::NumDsMkr => Packet::DataSync { numbered: true, value: h & 7 },
        T::UnnumDsMkr => Packet::DataSync { numbered: false, value: h & 7 },
        T::Commit => Packet::Commit(cont(s, &mut i, 5).unwrap_or(0) as u32),
        T::CancelF1 | T::CancelF1Mispred => Packet::CancelF1 { count: cont(s, &mut i, 5).unwrap_or(0) as u32, mispredict: h & 1 == 1 },
        T::Mispredict => Packet::Mispredict(atoms_mispredict(h)),
        T::CancelF2 => Packet::CancelF2(atoms_mispredict(h)),
        T::CancelF3 => Packet::CancelF3 { e_atom: h & 1 == 1, count: ((h >> 1) & 3) + 2 },
        T::CondIF1 => Packet::CondInstr(CondInstr::F1 { key: cont(s, &mut i, 5).unwrap_or(0) as u32 }),
        T::CondIF2 => Packet::CondInstr(CondInstr::F2 { code: h & 3 }),
        T::CondIF3 => Packet::CondInstr(CondInstr::F3 { count: ((s[1] >> 1) & 0x3F) + (s[1] & 1), final_elem: s[1] & 1 == 1 }),
        T::CondFlush => Packet::CondFlush,
        T::CondResF1 => {
            let two = h & 0xFC != 0x6C;
            let mut results = [None; 2];
            for r in results.iter_mut().take(if two { 2 } else { 1 }) {
                let result = s.get(i).map_or(0, |b| b & 0xF);
                let key = (cont(s, &mut i, 6).unwrap_or(0) >> 4) as u32;
                *r = Some((key, result));
            }
            Packet::CondResult(CondResult::F1 { results, ci: [h & 1 == 1, two && h & 2 != 0] })
        }
        T::CondResF2 => Packet::CondResult(CondResult::F2 { key_incr: if h & 4 != 0 { 2 } else { 1 }, token: h & 3 }),
        T::CondResF3 => Packet::CondResult(CondResult::F3 { tokens: s[1] as u16 | ((h as u16 & 0xF) << 8) }),
        T::CondResF4 => Packet::CondResult(CondResult::F4 { token: h & 3 }),
        T::Ignore => Packet::Ignore,
        T::Event => Packet::Event(h & 0xF),
        T::Context => Packet::Context((h & 1 == 1).then(|| context_at(p, st, s, 1))),
        T::AddrCtxtL32Is0 | T::AddrCtxtL32Is1 => {
            let is = (ty == T::AddrCtxtL32Is1) as u8;
            let addr = st.set_long32(long_addr(&s[1..], is, 4) as u32, is);
            Packet::AddressContext(addr, context_at(p, st, s, 5))
        }
        T::AddrCtxtL64Is0 | T::AddrCtxtL64Is1 => {
            let is = (ty == T::AddrCtxtL64Is1) as u8;
            let addr = st.set_long64(long_addr(&s[1..], is, 8), is);
            Packet::AddressContext(addr, context_at(p, st, s, 9))
        }
        T::AddrMatch => {
            let index = h & 3;
            Packet::ExactMatch { index, addr: st.exact_match(index) }
        }
        T::AddrSIs0 | T::AddrSIs1 => {
            let is = (ty == T::AddrSIs1) as u8;
            let (v, bits) = short_addr(s, &mut i, is);
            Packet::Address(st.set_short(v, is, bits))
        }
        T::AddrL32Is0 | T::AddrL32Is1 => {
            let is = (ty == T::AddrL32Is1) as u8;
            Packet::Address(st.set_long32(long_addr(&s[1..], is, 4) as u32, is))
        }
        T::AddrL64Is0 | T::AddrL64Is1 => {
            let is = (ty == T::AddrL64Is1) as u8;
            Packet::Address(st.set_long64(long_addr(&s[1..], is, 8), is))
        }
        T::Q => {
            let qtype = h & 0xF;
            let addr = match qtype {
                0..=2 => QAddress::ExactMatch { index: qtype, addr: st.exact_match(qtype) },
                5 | 6 => {
                    let is = qtype - 5;
                    let (v, bits) = short_addr(s, &mut i, is);
                    QAddress::Address(st.set_short(v, is, bits))
                }
                0xA | 0xB => {
                    let is = qtype - 0xA;
                    i += 4;
                    QAddress::Address(st.set_long32(long_addr(&s[1..], is, 4) as u32, is))
                }
                _ => QAddress::None,
            };
            let count = (qtype != 0xF).then(|| cont(s, &mut i, 5).unwrap_or(0) as u32);
            Packet::Q(QPacket { qtype, count, addr })
        }
        T::AtomF1 | T::AtomF2 | T::AtomF3 | T::AtomF4 | T::AtomF5 | T::AtomF6 => atom_packet(h),
        // Never in the table as valid headers.
        T::NotSync | T::IncompleteEot | T::BadSequence | T::Reserved | T::ReservedCfg | T::Async | T::Discard | T::Overflow => {
            Packet::Reserved { header: h }
        }
    }
}
