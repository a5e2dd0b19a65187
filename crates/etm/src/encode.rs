//! ETMv4 packet encoder: the inverse of the decoder, for tests and the
//! simulator. It keeps the same address and timestamp state a decoder of its
//! output will keep, so [`Encoder::address`] can choose the shortest form
//! that decodes back to the wanted address.

use crate::config::EtmV4Config;
use crate::decode::{Params, ProtoState};
use crate::packet::*;

/// A packet that has no encoding (an error report) or a field out of range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode {packet}: {reason}")]
pub struct EncodeError {
    pub packet: &'static str,
    pub reason: &'static str,
}

fn err<T>(t: PacketType, reason: &'static str) -> Result<T, EncodeError> {
    Err(EncodeError { packet: t.name(), reason })
}

/// Encodes packets for one ETMv4 source configuration.
#[derive(Clone, Debug)]
pub struct Encoder {
    p: Params,
    st: ProtoState,
}

fn put_cont(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7F) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A continuation field of at most `max` bytes.
fn put_cont_max(out: &mut Vec<u8>, v: u64, max: u32, t: PacketType) -> Result<(), EncodeError> {
    if max < 10 && v >> (7 * max) != 0 {
        return err(t, "field too large");
    }
    put_cont(out, v);
    Ok(())
}

fn put_le(out: &mut Vec<u8>, v: u32, n: u8) {
    out.extend_from_slice(&v.to_le_bytes()[..n as usize]);
}

/// The two-bit atom code of mispredict and cancel format 2 packets.
fn mispredict_code(a: &Atoms, t: PacketType) -> Result<u8, EncodeError> {
    match (a.count, a.bits & 3) {
        (0, _) => Ok(0),
        (1, 1) => Ok(1),
        (2, 3) => Ok(2),
        (1, 0) => Ok(3),
        _ => err(t, "atoms must be none, E, EE or N"),
    }
}

impl Encoder {
    pub fn new(config: &EtmV4Config) -> Encoder {
        Encoder { p: Params::new(config), st: ProtoState::new() }
    }

    /// Appends `packet`'s bytes to `out`. Addresses are written in the form
    /// the packet names (short forms keep only their low bits).
    pub fn encode(&mut self, packet: &Packet, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let t = packet.packet_type();
        let start = out.len();
        let r = self.encode_inner(packet, t, out);
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    fn encode_inner(&mut self, packet: &Packet, t: PacketType, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match *packet {
            Packet::NotSync { .. } | Packet::BadSequence { .. } | Packet::IncompleteEot { .. } => return err(t, "an error report, not a packet"),
            Packet::Reserved { header } | Packet::ReservedConfig { header, .. } => out.push(header),
            Packet::Async => {
                out.extend_from_slice(&[0; 11]);
                out.push(0x80);
            }
            Packet::Discard => out.extend_from_slice(&[0, 3]),
            Packet::Overflow => out.extend_from_slice(&[0, 5]),
            Packet::TraceOn => out.push(0x04),
            Packet::FunctionReturn => out.push(0x05),
            Packet::ExceptionReturn => out.push(0x07),
            Packet::CondFlush => out.push(0x43),
            Packet::Ignore => out.push(0x70),
            Packet::TraceInfo(ti) => {
                let present = (ti.info != 0) as u8
                    | (ti.p0_key.is_some() as u8) << 1
                    | ((ti.spec_depth != 0) as u8) << 2
                    | (ti.cc_threshold.is_some() as u8) << 3
                    | (ti.window.is_some() as u8) << 4;
                out.extend_from_slice(&[0x01, present]);
                if ti.info != 0 {
                    put_cont(out, ti.info as u64);
                }
                if let Some(k) = ti.p0_key {
                    put_cont(out, k as u64);
                }
                if ti.spec_depth != 0 {
                    put_cont(out, ti.spec_depth as u64);
                }
                if let Some(c) = ti.cc_threshold {
                    put_cont(out, c as u64);
                }
                if let Some(w) = ti.window {
                    put_cont(out, w as u64);
                }
                self.st.trace_info(ti.cc_threshold);
            }
            Packet::Timestamp(ts) => self.timestamp(&ts, out)?,
            Packet::Exception(e) => {
                let ext = e.number > 0x1F || e.fault_pending;
                let b1 = ((e.number as u8 & 0x1F) << 1) | (e.addr_interp & 1) | ((e.addr_interp >> 1) & 1) << 6 | (ext as u8) << 7;
                out.extend_from_slice(&[0x06, b1]);
                if ext {
                    if e.number >> 10 != 0 {
                        return err(t, "exception number over 10 bits");
                    }
                    out.push(((e.number >> 5) as u8 & 0x1F) | (e.fault_pending as u8) << 5);
                }
            }
            Packet::CycleCount(c) => self.cycle_count(&c, t, out)?,
            Packet::DataSync { numbered, value } => {
                if value > if numbered { 7 } else { 4 } {
                    return err(t, "marker value out of range");
                }
                out.push(if numbered { 0x20 } else { 0x28 } | value);
            }
            Packet::Commit(n) => {
                out.push(0x2D);
                put_cont_max(out, n as u64, 5, t)?;
            }
            Packet::CancelF1 { count, mispredict } => {
                out.push(0x2E | mispredict as u8);
                put_cont_max(out, count as u64, 5, t)?;
            }
            Packet::Mispredict(a) => out.push(0x30 | mispredict_code(&a, t)?),
            Packet::CancelF2(a) => out.push(0x34 | mispredict_code(&a, t)?),
            Packet::CancelF3 { e_atom, count } => {
                if !(2..=5).contains(&count) {
                    return err(t, "count must be 2..=5");
                }
                out.push(0x38 | (count - 2) << 1 | e_atom as u8);
            }
            Packet::CondInstr(CondInstr::F1 { key }) => {
                out.push(0x6C);
                put_cont_max(out, key as u64, 5, t)?;
            }
            Packet::CondInstr(CondInstr::F2 { code }) => {
                if code > 2 {
                    return err(t, "code must be 0..=2");
                }
                out.push(0x40 | code);
            }
            Packet::CondInstr(CondInstr::F3 { count, final_elem }) => {
                let n = count.wrapping_sub(final_elem as u8);
                if n > 0x3F {
                    return err(t, "count out of range");
                }
                out.extend_from_slice(&[0x6D, n << 1 | final_elem as u8]);
            }
            Packet::CondResult(CondResult::F1 { results, ci }) => {
                if results[0].is_none() {
                    return err(t, "needs a first result");
                }
                match results[1] {
                    Some(_) => out.push(0x68 | ci[0] as u8 | (ci[1] as u8) << 1),
                    None => out.push(0x6E | ci[0] as u8),
                }
                for (key, result) in results.iter().flatten() {
                    if *result > 0xF {
                        return err(t, "result is 4 bits");
                    }
                    let v = (*key as u64) << 4 | *result as u64;
                    put_cont_max(out, v, 6, t)?;
                }
            }
            Packet::CondResult(CondResult::F2 { key_incr, token }) => {
                if !(1..=2).contains(&key_incr) || token > 2 {
                    return err(t, "key increment 1..=2, token 0..=2");
                }
                out.push(0x48 | (key_incr - 1) << 2 | token);
            }
            Packet::CondResult(CondResult::F3 { tokens }) => {
                if tokens > 0xFFF {
                    return err(t, "tokens are 12 bits");
                }
                out.extend_from_slice(&[0x50 | (tokens >> 8) as u8, tokens as u8]);
            }
            Packet::CondResult(CondResult::F4 { token }) => {
                if token > 2 {
                    return err(t, "token 0..=2");
                }
                out.push(0x44 | token);
            }
            Packet::Event(e) => {
                if !(1..=15).contains(&e) {
                    return err(t, "event bits must be 1..=15");
                }
                out.push(0x70 | e);
            }
            Packet::Context(None) => out.push(0x80),
            Packet::Context(Some(c)) => {
                out.push(0x81);
                self.context(&c, t, out)?;
            }
            Packet::Address(a) => self.address_packet(&a, t, out)?,
            Packet::AddressContext(a, c) => {
                let (h, bytes) = match (a.form, a.is) {
                    (AddrForm::Long32, 0) => (0x82, 4),
                    (AddrForm::Long32, _) => (0x83, 4),
                    (AddrForm::Long64, 0) => (0x85, 8),
                    (AddrForm::Long64, _) => (0x86, 8),
                    (AddrForm::Short, _) => return err(t, "address with context is long"),
                };
                out.push(h);
                self.long_address(&a, bytes, out);
                self.context(&c, t, out)?;
            }
            Packet::ExactMatch { index, .. } => {
                if index > 2 {
                    return err(t, "index must be 0..=2");
                }
                out.push(0x90 | index);
                self.st.exact_match(index);
            }
            Packet::Q(q) => self.q(&q, t, out)?,
            Packet::Atom { format, atoms } => {
                out.push(atom_header(format, &atoms).ok_or(EncodeError { packet: t.name(), reason: "pattern not in this format" })?)
            }
        }
        Ok(())
    }

    fn timestamp(&mut self, ts: &Timestamp, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let t = PacketType::Timestamp;
        let n = if ts.updated_bits < 64 {
            if ts.updated_bits == 0 || !ts.updated_bits.is_multiple_of(7) {
                return err(t, "updated bits must be 7..=56 in steps of 7, or 64");
            }
            (ts.updated_bits / 7) as usize
        } else if ts.value >> 63 != 0 {
            return err(t, "bit 63 does not survive OpenCSD's reading of the field");
        } else {
            9
        };
        out.push(0x02 | ts.cycle_count.is_some() as u8);
        for k in 0..n {
            let b = ((ts.value >> (7 * k)) & 0x7F) as u8;
            out.push(if k + 1 < n { b | 0x80 } else { b });
        }
        if let Some(cc) = ts.cycle_count {
            if cc & !self.p.cc_mask != 0 {
                return err(t, "cycle count wider than the counter");
            }
            put_cont_max(out, cc as u64, 3, t)?;
        }
        let field = if n < 9 { ts.value & ((1u64 << (7 * n)) - 1) } else { ts.value };
        self.st.timestamp(field, n);
        Ok(())
    }

    fn cycle_count(&mut self, c: &CycleCount, t: PacketType, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let thr = self.st.threshold();
        let over = |count: Option<u32>| count.map(|n| n.wrapping_sub(thr));
        match c.format {
            1 => {
                out.push(0x0E | c.count.is_none() as u8);
                if !self.p.commit_opt1 {
                    let Some(commit) = c.commit else {
                        return err(t, "this configuration needs a commit count");
                    };
                    put_cont_max(out, commit as u64, 5, t)?;
                } else if c.commit.is_some() {
                    return err(t, "TRCIDR0.COMMOPT: no commit field");
                }
                if let Some(n) = over(c.count) {
                    put_cont_max(out, n as u64, 3, t)?;
                }
            }
            2 => {
                let Some(n) = over(c.count).filter(|n| *n < 16) else {
                    return err(t, "count must be threshold + 0..=15");
                };
                let commit = c.commit.unwrap_or(1);
                let (f, a) =
                    if (1..=16).contains(&commit) { (0, commit - 1) } else { (1, commit.wrapping_sub(self.p.max_spec_depth.wrapping_sub(15))) };
                if a > 15 {
                    return err(t, "commit count out of range");
                }
                out.extend_from_slice(&[0x0C | f, (a as u8) << 4 | n as u8]);
            }
            3 => {
                let Some(n) = over(c.count).filter(|n| *n < 4) else {
                    return err(t, "count must be threshold + 0..=3");
                };
                let a = match (self.p.commit_opt1, c.commit) {
                    (false, Some(k @ 1..=4)) => k - 1,
                    (true, None) => 0,
                    _ => return err(t, "commit must be 1..=4 (none with TRCIDR0.COMMOPT)"),
                };
                out.push(0x10 | (a as u8) << 2 | n as u8);
            }
            _ => return err(t, "format must be 1..=3"),
        }
        Ok(())
    }

    fn context(&mut self, c: &Context, t: PacketType, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if c.el > 3 || (c.vmid.is_some() && self.p.vmid_bytes == 0) || (c.context_id.is_some() && self.p.cid_bytes == 0) {
            return err(t, "EL over 3, or an ID the configuration does not trace");
        }
        let vmid_fits = c.vmid.is_none_or(|v| self.p.vmid_bytes >= 4 || v >> (8 * self.p.vmid_bytes) == 0);
        if !vmid_fits {
            return err(t, "VMID wider than TRCIDR2.VMIDSIZE");
        }
        out.push(c.el | (c.aarch64 as u8) << 4 | (c.non_secure as u8) << 5 | (c.vmid.is_some() as u8) << 6 | (c.context_id.is_some() as u8) << 7);
        if let Some(v) = c.vmid {
            put_le(out, v, self.p.vmid_bytes);
        }
        if let Some(v) = c.context_id {
            put_le(out, v, self.p.cid_bytes);
        }
        self.st.context(c);
        Ok(())
    }

    fn long_address(&mut self, a: &Address, bytes: usize, out: &mut Vec<u8>) {
        let v = a.value;
        if a.is == 0 {
            out.extend_from_slice(&[((v >> 2) & 0x7F) as u8, ((v >> 9) & 0x7F) as u8]);
        } else {
            out.extend_from_slice(&[((v >> 1) & 0x7F) as u8, (v >> 8) as u8]);
        }
        for k in 2..bytes {
            out.push((v >> (8 * k)) as u8);
        }
        if bytes == 8 {
            self.st.set_long64(v & !(if a.is == 0 { 3 } else { 1 }), a.is);
        } else {
            self.st.set_long32((v as u32) & !(if a.is == 0 { 3 } else { 1 }), a.is);
        }
    }

    fn short_address(&mut self, a: &Address, t: PacketType, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let shift = if a.is == 0 { 2 } else { 1 };
        let long = match a.update_bits.checked_sub(shift) {
            Some(7) => false,
            Some(15) => true,
            _ => return err(t, "a short address updates 9 or 17 bits (IS0), 8 or 16 (IS1)"),
        };
        let v = a.value;
        out.push(((v >> shift) & 0x7F) as u8 | (long as u8) << 7);
        if long {
            out.push((v >> (7 + shift)) as u8);
        }
        self.st.set_short(v & !((1 << shift) - 1), a.is, a.update_bits);
        Ok(())
    }

    fn address_packet(&mut self, a: &Address, t: PacketType, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let is = (a.is != 0) as u8;
        match a.form {
            AddrForm::Short => {
                out.push(0x95 + is);
                self.short_address(a, t, out)?;
            }
            AddrForm::Long32 => {
                out.push(0x9A + is);
                self.long_address(a, 4, out);
            }
            AddrForm::Long64 => {
                out.push(0x9D + is);
                self.long_address(a, 8, out);
            }
        }
        Ok(())
    }

    fn q(&mut self, q: &QPacket, t: PacketType, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let ok = match (q.qtype, &q.addr) {
            (0..=2, QAddress::ExactMatch { index, .. }) => *index == q.qtype,
            (5 | 6, QAddress::Address(a)) => a.form == AddrForm::Short && a.is == q.qtype - 5,
            (0xA | 0xB, QAddress::Address(a)) => a.form == AddrForm::Long32 && a.is == q.qtype - 0xA,
            (0xC | 0xF, QAddress::None) => true,
            _ => false,
        };
        if !ok || (q.qtype == 0xF) != q.count.is_none() {
            return err(t, "Q type, address and count disagree");
        }
        out.push(0xA0 | q.qtype);
        match q.addr {
            QAddress::ExactMatch { index, .. } => {
                self.st.exact_match(index);
            }
            QAddress::Address(a) if a.form == AddrForm::Short => self.short_address(&a, t, out)?,
            QAddress::Address(a) => self.long_address(&a, 4, out),
            QAddress::None => {}
        }
        if let Some(n) = q.count {
            put_cont_max(out, n as u64, 5, t)?;
        }
        Ok(())
    }

    /// Writes the shortest packet that makes a decoder's address `value`
    /// (instruction set `is`): an exact match, a short or a long address.
    /// Returns the packet written.
    pub fn address(&mut self, value: u64, is: u8, out: &mut Vec<u8>) -> Result<Packet, EncodeError> {
        let t = PacketType::AddrL64Is0;
        let is = (is != 0) as u8;
        let align = if is == 0 { 3 } else { 1 };
        if value & align != 0 {
            return err(t, "address not aligned for its instruction set");
        }
        let st = &self.st;
        if let Some(i) = st.stack.iter().position(|a| a.value == value && a.is == is) {
            let p = Packet::ExactMatch { index: i as u8, addr: st.stack[i] };
            self.encode(&p, out)?;
            return Ok(p);
        }
        let same_above = |bits: u8| (st.cur.value ^ value) >> bits == 0;
        let short_bits = [7 + 2 - is, 15 + 2 - is].into_iter().find(|&b| same_above(b));
        let base = Address { value, is, form: AddrForm::Long64, update_bits: 64, valid_bits: 64, is64: true };
        let addr = if let Some(bits) = short_bits {
            Address { form: AddrForm::Short, update_bits: bits, is64: st.cur.is64, ..base }
        } else if (st.ctx_valid && st.ctx_aarch64 && same_above(32)) || (!(st.ctx_valid && st.ctx_aarch64) && value >> 32 == 0) {
            Address { form: AddrForm::Long32, update_bits: 32, is64: st.ctx_valid && st.ctx_aarch64, ..base }
        } else {
            base
        };
        let p = Packet::Address(addr);
        self.encode(&p, out)?;
        Ok(p)
    }

    /// Writes atoms (true = E, oldest first) in as few atom packets as a
    /// greedy choice of formats gives.
    pub fn atoms(&mut self, atoms: &[bool], out: &mut Vec<u8>) {
        let mut i = 0;
        while i < atoms.len() {
            let rest = &atoms[i..];
            let e_run = rest.iter().take_while(|&&a| a).count();
            let (n, bits) = if e_run >= 3 && e_run < rest.len() && e_run <= 23 {
                (e_run + 1, (1u32 << e_run) - 1)
            } else if e_run >= 4 {
                let n = e_run.min(24);
                (n, (1u32 << n) - 1)
            } else {
                let pack = |n: usize| rest[..n].iter().enumerate().fold(0u32, |b, (k, &a)| b | (a as u32) << k);
                let n = rest.len().min(5);
                if n == 5 && [0x1E, 0x00, 0x0A, 0x15].contains(&pack(5)) {
                    (5, pack(5))
                } else if n >= 4 && [0xE, 0x0, 0xA, 0x5].contains(&pack(4)) {
                    (4, pack(4))
                } else {
                    let n = rest.len().min(3);
                    (n, pack(n))
                }
            };
            let format = match n {
                1 => 1,
                2 => 2,
                3 => 3,
                4 if e_run < 3 => 4,
                5 if e_run < 3 => 5,
                _ => 6,
            };
            out.push(atom_header(format, &Atoms::new(bits, n as u8)).unwrap_or(0xF7));
            i += n;
        }
    }
}

/// The header byte of an atom packet, if the pattern exists in that format.
fn atom_header(format: u8, a: &Atoms) -> Option<u8> {
    let n = a.count as u32;
    let bits = a.bits & ((1u64 << n) - 1) as u32;
    match (format, n) {
        (1, 1) => Some(0xF6 | bits as u8),
        (2, 2) => Some(0xD8 | bits as u8),
        (3, 3) => Some(0xF8 | bits as u8),
        (4, 4) => [0xE, 0x0, 0xA, 0x5].iter().position(|&p| p == bits).map(|i| 0xDC | i as u8),
        (5, 5) => match bits {
            0x1E => Some(0xF5),
            0x00 => Some(0xD5),
            0x0A => Some(0xD6),
            0x15 => Some(0xD7),
            _ => None,
        },
        (6, 4..=24) => {
            let e = n - 1;
            if bits & ((1 << e) - 1) != (1 << e) - 1 {
                return None;
            }
            let last_e = bits >> e & 1 == 1;
            Some(if last_e { 0xC0 } else { 0xE0 } | (n - 4) as u8)
        }
        _ => None,
    }
}
