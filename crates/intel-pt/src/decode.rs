//! The packet decoder: one packet per call, zero-copy over the trace bytes,
//! tracking what the SDM says later packets depend on (the last IP, and
//! whether a PEBS block is open), with PSB resynchronisation after an error.

use crate::packet::{IpCompression, Packet, PacketKind, PayloadSize, Tnt};
use crate::{Ip, PSB};

pub(crate) mod visit;

/// The packets [`PacketDecoder::next_quick`] decodes, as the flow walk uses
/// them (IPs resolved against the last IP; `None`: suppressed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Quick {
    Pad,
    Tnt { bits: u64, count: u8 },
    Tip(Option<u64>),
    TipPge(Option<u64>),
    TipPgd(Option<u64>),
    Fup(Option<u64>),
    Tsc(u64),
    Mtc(u8),
    Cyc(u64),
}

impl Quick {
    /// `packet` as a [`Quick`] when it is one of those kinds (a long TNT
    /// too), for the packets [`PacketDecoder::next_quick`] leaves to
    /// [`PacketDecoder::next_packet`].
    #[inline]
    pub(crate) fn of(packet: &Packet) -> Option<Quick> {
        Some(match *packet {
            Packet::Pad => Quick::Pad,
            Packet::TntShort(t) | Packet::TntLong(t) => Quick::Tnt { bits: t.bits, count: t.count },
            Packet::Tip(ip) => Quick::Tip(ip.ip),
            Packet::TipPge(ip) => Quick::TipPge(ip.ip),
            Packet::TipPgd(ip) => Quick::TipPgd(ip.ip),
            Packet::Fup(ip) => Quick::Fup(ip.ip),
            Packet::Tsc(tsc) => Quick::Tsc(tsc),
            Packet::Mtc(payload) => Quick::Mtc(payload),
            Packet::Cyc(cycles) => Quick::Cyc(cycles),
            _ => return None,
        })
    }
}

/// A packet that could not be decoded, at `offset` in the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Intel PT packet at offset {offset:#x}: {kind}")]
pub struct PacketError {
    pub offset: usize,
    pub kind: PacketErrorKind,
}

/// What was wrong with the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PacketErrorKind {
    /// The buffer ends inside the packet. `packet` is `None` when the
    /// buffer ends before the byte that names it (`02`, `02 C3` or `99`
    /// last).
    #[error("{} needs {needed} bytes, {available} left", packet.map_or("packet", PacketKind::name))]
    Truncated { packet: Option<PacketKind>, needed: usize, available: usize },
    /// No packet starts with this byte.
    #[error("unknown opcode {0:#04x}")]
    BadOpcode(u8),
    /// No packet starts with `02` and this byte.
    #[error("unknown extended opcode 02 {0:02x}")]
    BadExtOpcode(u8),
    /// No packet starts with `02 C3` and this byte.
    #[error("unknown extended opcode 02 c3 {0:02x}")]
    BadExt2Opcode(u8),
    /// `02 82` not followed by the rest of a PSB.
    #[error("02 82 is not followed by the rest of a PSB")]
    BadPsb,
    /// A TIP, TIP.PGE, TIP.PGD or FUP with reserved IPBytes (5 or 7).
    #[error("{packet} with reserved IPBytes {ipbytes}")]
    BadIpBytes { packet: PacketKind, ipbytes: u8 },
    /// A MODE packet with a leaf other than Exec (0) or TSX (1).
    #[error("MODE with unknown leaf {0}")]
    BadModeLeaf(u8),
    /// A long TNT without a single outcome bit below its stop bit.
    #[error("long TNT without outcomes")]
    EmptyTnt,
    /// A PTWRITE with reserved PayloadBytes (2 or 3).
    #[error("PTWRITE with reserved PayloadBytes {0}")]
    BadPtwSize(u8),
    /// A CYC with more than 8 extension bytes (61 value bits), which no
    /// 64-bit cycle counter needs; libipt rejects it too.
    #[error("CYC longer than 9 bytes")]
    CycTooLong,
}

/// The bytes [`PacketDecoder::sync_forward`] skipped: `start..end`, and
/// whether a PSB starts at `end` (else `end` is the end of the buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resync {
    pub start: usize,
    pub end: usize,
    pub psb_found: bool,
}

/// Where the full decoder hands a packet it decoded, from inside that
/// packet's own branch: [`Keep`] returns it, a visitor's emitter calls the
/// visitor there, so that the visitor's match on the packet folds away.
trait Emit {
    type Out;
    fn emit(self, packet: Packet) -> Self::Out;
}

/// The packet itself, for [`PacketDecoder::next_packet`].
struct Keep;

impl Emit for Keep {
    type Out = Packet;
    #[inline(always)]
    fn emit(self, packet: Packet) -> Packet {
        packet
    }
}

/// Decodes Intel PT packets from a byte buffer, in order.
///
/// ```
/// use intel_pt::{Packet, PacketDecoder};
/// let trace = [0x02, 0x82].repeat(8).into_iter().chain([0x02, 0x23, 0x2d, 0x34, 0x12]).collect::<Vec<u8>>();
/// let mut decoder = PacketDecoder::new(&trace);
/// let mut kinds = Vec::new();
/// while let Some((offset, packet)) = decoder.next_packet()? {
///     kinds.push((offset, packet.kind().name()));
///     if let Packet::Tip(ip) = packet {
///         assert_eq!(ip.ip, Some(0x1234)); // the last IP is 0 after a PSB
///     }
/// }
/// assert_eq!(kinds, [(0, "PSB"), (16, "PSBEND"), (18, "TIP")]);
/// # Ok::<(), intel_pt::PacketError>(())
/// ```
///
/// After an error the decoder stays where the bad packet starts;
/// [`sync_forward`](Self::sync_forward) moves it to the next PSB.
#[derive(Clone, Debug)]
pub struct PacketDecoder<'a> {
    buf: &'a [u8],
    pos: usize,
    last_ip: u64,
    /// The BIP payload size while a PEBS block (BBP ... BEP) is open.
    block: Option<PayloadSize>,
}

impl<'a> PacketDecoder<'a> {
    /// A decoder at the start of `buf`, with last IP 0 and no open block, as
    /// after a PSB. Trace that does not start at a PSB should be synced
    /// first with [`sync_forward`](Self::sync_forward).
    pub fn new(buf: &'a [u8]) -> Self {
        PacketDecoder { buf, pos: 0, last_ip: 0, block: None }
    }

    /// Where the next packet starts.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// The SKD007 erratum at the 2-byte CYC packet at `at`, just read: an
    /// overflow landed inside it, so that its second byte and the byte after
    /// it are an OVF (`02 f3`). If so, goes back to read that OVF next (the
    /// CYC's first byte then counts as padding) and says so.
    pub(crate) fn skd007_cut(&mut self, at: usize) -> bool {
        let cut = self.pos == at + 2 && self.buf.get(at + 1..at + 3) == Some(&[0x02, 0xf3]);
        if cut {
            self.pos = at + 1;
        }
        cut
    }

    /// The next packet and its offset, or `None` at the end of the buffer.
    /// On error the position does not move.
    #[inline(always)]
    pub fn next_packet(&mut self) -> Result<Option<(usize, Packet)>, PacketError> {
        // The common packets, when 9 bytes remain and no PEBS block is open:
        // a few tests on the first byte and one 8-byte load for what follows
        // it; everything else, and anything that could fail, out of line.
        let offset = self.pos;
        let (Some(w), None) = (self.buf.get(offset..offset + 9), self.block) else {
            return self.next_slow_copy();
        };
        let b0 = w[0];
        let after = u64::from_le_bytes(w[1..9].try_into().unwrap());
        // Each arm returns its own packet: a common tail would merge the
        // variants' fields into one value in memory.
        macro_rules! done {
            ($len:expr, $packet:expr) => {{
                self.pos = offset + $len;
                return Ok(Some((offset, $packet)));
            }};
        }
        // Tests on the first byte, the most common packets first, rather
        // than a jump: the caller's match on the result is one already.
        if b0 & 1 == 0 {
            if b0 > 2 {
                done!(1, Packet::TntShort(tnt8(b0)));
            }
            if b0 == 0 {
                done!(1, Packet::Pad);
            }
            return self.next_slow_copy();
        }
        let kind = b0 & 0x1f;
        if carries_ip(b0) && IP_LEN[usize::from(b0 >> 5)] != 0 {
            let (n, ip) = self.fast_ip(b0, after);
            match kind {
                0x0d => done!(n, Packet::Tip(ip)),
                0x1d => done!(n, Packet::Fup(ip)),
                0x11 => done!(n, Packet::TipPge(ip)),
                _ => done!(n, Packet::TipPgd(ip)),
            }
        }
        if b0 & 3 == 3 {
            if let Some((n, v)) = cyc_fast(b0, after) {
                done!(n, Packet::Cyc(v));
            }
        } else if b0 == 0x19 {
            done!(8, Packet::Tsc(after & 0x00ff_ffff_ffff_ffff));
        } else if b0 == 0x59 {
            done!(2, Packet::Mtc(after as u8));
        }
        self.next_slow_copy()
    }

    /// [`next_slow`](Self::next_slow) on a copy of the decoder, written
    /// back: the caller's decoder does not escape into the call, so that it
    /// can live in registers in the caller's loop.
    #[inline(always)]
    fn next_slow_copy(&mut self) -> Result<Option<(usize, Packet)>, PacketError> {
        let mut copy = self.clone();
        let r = copy.next_slow();
        *self = copy;
        r
    }

    /// [`next_packet`](Self::next_packet) for what its fast path leaves:
    /// the full decoder.
    #[inline(never)]
    fn next_slow(&mut self) -> Result<Option<(usize, Packet)>, PacketError> {
        self.next_full()
    }

    /// The full decoder, inlined into its two out-of-line callers.
    #[inline(always)]
    fn next_full(&mut self) -> Result<Option<(usize, Packet)>, PacketError> {
        let offset = self.pos;
        let rest = &self.buf[offset..];
        let Some(&b0) = rest.first() else {
            return Ok(None);
        };
        match self.decode(rest, b0, Keep) {
            Ok((len, packet)) => {
                self.pos = offset + len;
                Ok(Some((offset, packet)))
            }
            Err(kind) => Err(PacketError { offset, kind }),
        }
    }

    /// A TIP, TIP.PGE, TIP.PGD or FUP with valid IPBytes whose payload is
    /// in `after` (the 8 bytes after the header): its length and IP, the
    /// last IP updated.
    #[inline(always)]
    fn fast_ip(&mut self, b0: u8, after: u64) -> (usize, Ip) {
        let ipbytes = b0 >> 5;
        let row = IP_ROWS[usize::from(ipbytes)];
        let payload = after & row.payload_mask;
        let ip = if ipbytes == 0 {
            None
        } else {
            let shift = row.sext_shift;
            let ip = ((((self.last_ip & row.keep_mask) | payload) << shift) as i64 >> shift) as u64;
            self.last_ip = ip;
            Some(ip)
        };
        // The length from a table in a register, not in memory: the next
        // packet's position waits for a shift instead of a load.
        let len = (u64::from_le_bytes(IP_LEN) >> (8 * ipbytes)) as u8;
        (usize::from(len), Ip { compression: row.compression, payload, ip })
    }

    /// The next packet if it is one of the [`Quick`] kinds and no check
    /// but truncation could fail on it (moving past it, the last IP kept),
    /// else `None` without moving: [`next_packet`](Self::next_packet) takes
    /// it. The flow walk's fast path: no [`Packet`] is built.
    #[inline(always)]
    pub(crate) fn next_quick(&mut self) -> Option<(usize, Quick)> {
        let offset = self.pos;
        let (Some(w), None) = (self.buf.get(offset..offset + 9), self.block) else {
            return None;
        };
        let b0 = w[0];
        let after = u64::from_le_bytes(w[1..9].try_into().unwrap());
        // Tests on the first byte, the most common packets first, rather
        // than a jump: the caller's match on the result is one already.
        let (len, quick) = if b0 & 1 == 0 {
            if b0 > 2 {
                let t = tnt8(b0);
                (1, Quick::Tnt { bits: t.bits, count: t.count })
            } else if b0 == 0 {
                (1, Quick::Pad)
            } else {
                return None;
            }
        } else {
            let ipbytes = usize::from(b0 >> 5);
            let kind = b0 & 0x1f;
            if carries_ip(b0) && IP_LEN[ipbytes] != 0 {
                let (n, ip) = self.fast_ip(b0, after);
                let ip = ip.ip;
                (
                    n,
                    match kind {
                        0x0d => Quick::Tip(ip),
                        0x1d => Quick::Fup(ip),
                        0x11 => Quick::TipPge(ip),
                        _ => Quick::TipPgd(ip),
                    },
                )
            } else if b0 == 0x19 {
                (8, Quick::Tsc(after & 0x00ff_ffff_ffff_ffff))
            } else if b0 == 0x59 {
                (2, Quick::Mtc(after as u8))
            } else if b0 & 3 == 3 {
                let (n, cycles) = cyc_fast(b0, after)?;
                (n, Quick::Cyc(cycles))
            } else {
                return None;
            }
        };
        self.pos = offset + len;
        Some((offset, quick))
    }

    /// Moves past packets as [`skip_packet`](Self::skip_packet) would, in
    /// one tight loop, up to the first that starts with one of `stop`'s
    /// bytes, starts past `limit`, or is not one the length table alone
    /// fixes (each left for `skip_packet`). For scans ahead.
    #[inline(always)]
    pub(crate) fn skip_until(&mut self, stop: [u8; 2], limit: usize) {
        if self.block.is_some() {
            return;
        }
        let buf = self.buf;
        let mut pos = self.pos;
        while let Some(&b0) = buf.get(pos) {
            let n = usize::from(SKIP[usize::from(b0)]);
            if n == 0 || b0 == stop[0] || b0 == stop[1] || pos > limit || n > buf.len() - pos {
                break;
            }
            pos += n;
        }
        self.pos = pos;
    }

    /// Moves past packets up to the first that starts at or past `limit`,
    /// or that the length table alone does not fix (left for the caller),
    /// giving each TIP's target to `tip`, the last IP kept up to date. For
    /// scans ahead that need only where indirect branches go.
    #[inline(always)]
    pub(crate) fn scan_tips(&mut self, limit: usize, mut tip: impl FnMut(u64)) {
        if self.block.is_some() {
            return;
        }
        let buf = self.buf;
        let mut pos = self.pos;
        while pos < limit {
            let Some(w) = buf.get(pos..pos + 9) else { break };
            let b0 = w[0];
            let n = usize::from(SKIP[usize::from(b0)]);
            if n == 0 {
                break;
            }
            if carries_ip(b0) {
                let (_, ip) = self.fast_ip(b0, u64::from_le_bytes(w[1..9].try_into().unwrap()));
                if let (0x0d, Some(ip)) = (b0 & 0x1f, ip.ip) {
                    tip(ip);
                }
            }
            pos += n;
        }
        self.pos = pos;
    }

    /// Moves past the next packet as [`next_packet`](Self::next_packet)
    /// would, giving its offset and bytes without building it (for scans
    /// ahead: the common packets take one table look-up; the last IP is not
    /// kept up to date).
    #[inline(always)]
    pub(crate) fn skip_packet(&mut self) -> Result<Option<(usize, &'a [u8])>, PacketError> {
        let offset = self.pos;
        let Some(&b0) = self.buf.get(offset) else {
            return Ok(None);
        };
        let n = usize::from(SKIP[usize::from(b0)]);
        if n != 0 && self.block.is_none() && n <= self.buf.len() - offset {
            self.pos = offset + n;
            return Ok(Some((offset, &self.buf[offset..offset + n])));
        }
        self.skip_decoded()
    }

    /// [`skip_packet`](Self::skip_packet) through the full decoder
    /// (straight to it: `next_packet`'s fast path would test again what
    /// the table already said).
    #[inline(never)]
    fn skip_decoded(&mut self) -> Result<Option<(usize, &'a [u8])>, PacketError> {
        Ok(self.next_full()?.map(|(offset, _)| (offset, &self.buf[offset..self.pos])))
    }

    /// Moves to the first PSB at or after the current position, resetting
    /// the last IP and the block state, and reports the bytes skipped;
    /// without a PSB it moves to the end of the buffer. A decode error never
    /// stands on a PSB, so after one this always moves forward.
    pub fn sync_forward(&mut self) -> Resync {
        let start = self.pos;
        let found = find_psb(&self.buf[start..]).map(|at| start + at);
        self.pos = found.unwrap_or(self.buf.len());
        self.last_ip = 0;
        self.block = None;
        Resync { start, end: self.pos, psb_found: found.is_some() }
    }

    /// The packet at the start of `rest` (whose first byte is `b0`), handed
    /// to `e` from inside its own branch, and its length; the decoder's
    /// state updated. On error nothing has changed.
    #[inline(always)]
    fn decode<E: Emit>(&mut self, rest: &[u8], b0: u8, e: E) -> Result<(usize, E::Out), PacketErrorKind> {
        if let Some(size) = self.block {
            if b0 & 7 == 4 {
                let n = 1 + size.bytes();
                let p = need(rest, n, PacketKind::Bip)?;
                return Ok((n, e.emit(Packet::Bip { id: b0 >> 3, payload: le(&p[1..]), size })));
            }
        }
        match LEAD[usize::from(b0)] {
            Lead::Pad => self.emit(e, 1, Packet::Pad),
            Lead::Ext => self.decode_ext(rest, e),
            Lead::Tnt => self.emit(e, 1, Packet::TntShort(tnt8(b0))),
            Lead::Cyc => {
                let (n, p) = decode_cyc(rest, b0)?;
                self.emit(e, n, p)
            }
            Lead::Tsc => self.emit(e, 8, Packet::Tsc(le(&need(rest, 8, PacketKind::Tsc)?[1..]))),
            Lead::Mtc => self.emit(e, 2, Packet::Mtc(need(rest, 2, PacketKind::Mtc)?[1])),
            Lead::Mode => {
                // The leaf, and so the packet's name, is in the byte that may be missing.
                let Some(&mode) = rest.get(1) else {
                    return Err(PacketErrorKind::Truncated { packet: None, needed: 2, available: rest.len() });
                };
                let bit = |n: u8| mode & (1 << n) != 0;
                match mode >> 5 {
                    0 => self.emit(e, 2, Packet::ModeExec { csl: bit(0), csd: bit(1), if_flag: bit(2) }),
                    1 => self.emit(e, 2, Packet::ModeTsx { intx: bit(0), abort: bit(1) }),
                    leaf => Err(PacketErrorKind::BadModeLeaf(leaf)),
                }
            }
            Lead::Tip => self.emit_ip(rest, b0, PacketKind::Tip, e),
            Lead::TipPge => self.emit_ip(rest, b0, PacketKind::TipPge, e),
            Lead::TipPgd => self.emit_ip(rest, b0, PacketKind::TipPgd, e),
            Lead::Fup => self.emit_ip(rest, b0, PacketKind::Fup, e),
            Lead::Trig => {
                // Flags (IP 0x80, ICNT valid 0x40, MULT 0x20), the trigger
                // bits, then the 16-bit count when valid.
                let flags = need(rest, 3, PacketKind::Trig)?[1];
                let (n, icnt) = if flags & 0x40 != 0 {
                    let p = need(rest, 5, PacketKind::Trig)?;
                    (5, Some(u16::from_le_bytes([p[3], p[4]])))
                } else {
                    (3, None)
                };
                self.emit(e, n, Packet::Trig { trbv: rest[2], ip: flags & 0x80 != 0, mult: flags & 0x20 != 0, icnt })
            }
            Lead::Bad => Err(PacketErrorKind::BadOpcode(b0)),
        }
    }

    /// A decoded packet of `len` bytes to `e`, closing an open PEBS block
    /// first if the packet ends it.
    #[inline(always)]
    fn emit<E: Emit>(&mut self, e: E, len: usize, packet: Packet) -> Result<(usize, E::Out), PacketErrorKind> {
        if self.block.is_some() && ends_block(&packet) {
            self.block = None;
        }
        Ok((len, e.emit(packet)))
    }

    /// [`decode_ip`](Self::decode_ip), emitted.
    #[inline(always)]
    fn emit_ip<E: Emit>(&mut self, rest: &[u8], b0: u8, kind: PacketKind, e: E) -> Result<(usize, E::Out), PacketErrorKind> {
        let (n, p) = self.decode_ip(rest, b0, kind)?;
        self.emit(e, n, p)
    }

    /// TIP, TIP.PGE, TIP.PGD, FUP: IPBytes over the opcode, then the payload.
    #[inline(always)]
    fn decode_ip(&mut self, rest: &[u8], b0: u8, kind: PacketKind) -> Result<(usize, Packet), PacketErrorKind> {
        let ipbytes = b0 >> 5;
        let compression = IpCompression::from_ipbytes(ipbytes).ok_or(PacketErrorKind::BadIpBytes { packet: kind, ipbytes })?;
        let n = 1 + compression.payload_len();
        // With 8 bytes after the header, one load and a mask instead of a copy.
        let payload = match rest.get(1..9) {
            Some(eight) => u64::from_le_bytes(eight.try_into().unwrap()) & IP_PAYLOAD_MASK[usize::from(ipbytes)],
            None => le(&need(rest, n, kind)?[1..]),
        };
        let ip = compression.apply(payload, self.last_ip);
        if let Some(ip) = ip {
            self.last_ip = ip;
        }
        let ip = Ip { compression, payload, ip };
        let packet = match kind {
            PacketKind::Tip => Packet::Tip(ip),
            PacketKind::TipPge => Packet::TipPge(ip),
            PacketKind::TipPgd => Packet::TipPgd(ip),
            _ => Packet::Fup(ip),
        };
        Ok((n, packet))
    }

    /// The packets that start with `02`, emitted as [`decode`](Self::decode) does.
    #[inline(always)]
    fn decode_ext<E: Emit>(&mut self, rest: &[u8], e: E) -> Result<(usize, E::Out), PacketErrorKind> {
        let Some(&b1) = rest.get(1) else {
            return Err(PacketErrorKind::Truncated { packet: None, needed: 2, available: rest.len() });
        };
        match b1 {
            0x82 => {
                let p = need(rest, PSB.len(), PacketKind::Psb)?;
                if p[..PSB.len()] != PSB {
                    return Err(PacketErrorKind::BadPsb);
                }
                self.last_ip = 0;
                self.block = None;
                self.emit(e, PSB.len(), Packet::Psb)
            }
            0x23 => self.emit(e, 2, Packet::PsbEnd),
            0xf3 => self.emit(e, 2, Packet::Ovf),
            0x83 => self.emit(e, 2, Packet::Stop),
            0xa3 => {
                let payload = le(&need(rest, 8, PacketKind::TntLong)?[2..]);
                if payload <= 1 {
                    return Err(PacketErrorKind::EmptyTnt);
                }
                let count = 63 - payload.leading_zeros() as u8;
                self.emit(e, 8, Packet::TntLong(Tnt { bits: payload & !(1 << count), count }))
            }
            0x43 => {
                let payload = le(&need(rest, 8, PacketKind::Pip)?[2..]);
                self.emit(e, 8, Packet::Pip { cr3: payload >> 1 << 5, nr: payload & 1 != 0 })
            }
            0x03 => self.emit(e, 4, Packet::Cbr(need(rest, 4, PacketKind::Cbr)?[2])),
            0x73 => {
                let p = need(rest, 7, PacketKind::Tma)?;
                let ctc = u16::from_le_bytes([p[2], p[3]]);
                let fast_counter = u16::from_le_bytes([p[5], p[6] & 1]);
                self.emit(e, 7, Packet::Tma { ctc, fast_counter })
            }
            0xc8 => self.emit(e, 7, Packet::Vmcs(le(&need(rest, 7, PacketKind::Vmcs)?[2..]) << 12)),
            0xc3 => {
                let Some(&b2) = rest.get(2) else {
                    return Err(PacketErrorKind::Truncated { packet: None, needed: 3, available: rest.len() });
                };
                if b2 != 0x88 {
                    return Err(PacketErrorKind::BadExt2Opcode(b2));
                }
                self.emit(e, 11, Packet::Mnt(le(&need(rest, 11, PacketKind::Mnt)?[3..])))
            }
            0x62 | 0xe2 => self.emit(e, 2, Packet::Exstop { ip: b1 & 0x80 != 0 }),
            0xc2 => {
                let p = need(rest, 10, PacketKind::Mwait)?;
                self.emit(e, 10, Packet::Mwait { hints: p[2], ext: p[6] & 3 })
            }
            0x22 => {
                let p = need(rest, 4, PacketKind::Pwre)?;
                self.emit(e, 4, Packet::Pwre { hw: p[2] & 0x80 != 0, cstate: p[3] >> 4, sub_cstate: p[3] & 0xf })
            }
            0xa2 => {
                let p = need(rest, 7, PacketKind::Pwrx)?;
                self.emit(e, 7, Packet::Pwrx { last_cstate: p[2] >> 4, deepest_cstate: p[2] & 0xf, wake_reason: p[3] & 0xf })
            }
            0x13 => {
                let p = need(rest, 4, PacketKind::Cfe)?;
                self.emit(e, 4, Packet::Cfe { ip: p[2] & 0x80 != 0, event_type: p[2] & 0x1f, vector: p[3] })
            }
            0x53 => {
                let p = need(rest, 11, PacketKind::Evd)?;
                self.emit(e, 11, Packet::Evd { event_type: p[2] & 0x3f, payload: le(&p[3..]) })
            }
            0x63 => {
                let b2 = need(rest, 3, PacketKind::Bbp)?[2];
                let size = if b2 & 0x80 != 0 { PayloadSize::Four } else { PayloadSize::Eight };
                self.block = Some(size);
                self.emit(e, 3, Packet::Bbp { block_type: b2 & 0x1f, size })
            }
            0x33 | 0xb3 => self.emit(e, 2, Packet::Bep { ip: b1 & 0x80 != 0 }),
            _ if b1 & 0x1f == 0x12 => {
                let size = match (b1 >> 5) & 3 {
                    0 => PayloadSize::Four,
                    1 => PayloadSize::Eight,
                    n => return Err(PacketErrorKind::BadPtwSize(n)),
                };
                let n = 2 + size.bytes();
                self.emit(e, n, Packet::Ptw { payload: le(&need(rest, n, PacketKind::Ptw)?[2..]), size, ip: b1 & 0x80 != 0 })
            }
            _ => Err(PacketErrorKind::BadExtOpcode(b1)),
        }
    }
}

/// CYC: 5 value bits in the header, then 7 per extension byte while bit 0
/// (bit 2 in the header) says another follows.
#[inline(always)]
fn decode_cyc(rest: &[u8], b0: u8) -> Result<(usize, Packet), PacketErrorKind> {
    let mut value = u64::from(b0 >> 3);
    let mut more = b0 & 4 != 0;
    let mut len = 1;
    while more {
        let Some(&b) = rest.get(len) else {
            return Err(PacketErrorKind::Truncated { packet: Some(PacketKind::Cyc), needed: len + 1, available: rest.len() });
        };
        if len == 9 {
            return Err(PacketErrorKind::CycTooLong);
        }
        value |= u64::from(b >> 1) << (5 + 7 * (len - 1));
        more = b & 1 != 0;
        len += 1;
    }
    Ok((len, Packet::Cyc(value)))
}

/// Which packets close a PEBS block, as Linux perf decides: all but PAD,
/// timing, FUP, CBR, MNT, EXSTOP, PWRE, PWRX and BIP.
pub(crate) fn ends_block(packet: &Packet) -> bool {
    !matches!(
        packet,
        Packet::Pad
            | Packet::Tsc(_)
            | Packet::Tma { .. }
            | Packet::Mtc(_)
            | Packet::Cyc(_)
            | Packet::Fup(_)
            | Packet::Cbr(_)
            | Packet::Mnt(_)
            | Packet::Exstop { .. }
            | Packet::Pwre { .. }
            | Packet::Pwrx { .. }
            | Packet::Bbp { .. }
            | Packet::Bip { .. }
    )
}

/// What a packet's first byte says it is (outside a PEBS block).
#[derive(Clone, Copy)]
enum Lead {
    Pad,
    Ext,
    Tnt,
    Cyc,
    Tsc,
    Mtc,
    Mode,
    Tip,
    TipPge,
    TipPgd,
    Fup,
    Trig,
    Bad,
}

/// [`Lead`] of every first byte: one indexed load and one jump instead of a
/// chain of tests.
static LEAD: [Lead; 256] = {
    let mut t = [Lead::Bad; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = match b as u8 {
            0x00 => Lead::Pad,
            0x02 => Lead::Ext,
            x if x & 1 == 0 => Lead::Tnt,
            x if x & 3 == 3 => Lead::Cyc,
            0x19 => Lead::Tsc,
            0x59 => Lead::Mtc,
            0x99 => Lead::Mode,
            0xd9 => Lead::Trig,
            x if x & 0x1f == 0x0d => Lead::Tip,
            x if x & 0x1f == 0x11 => Lead::TipPge,
            x if x & 0x1f == 0x01 => Lead::TipPgd,
            x if x & 0x1f == 0x1d => Lead::Fup,
            _ => Lead::Bad,
        };
        b += 1;
    }
    t
};

/// Whether a packet's first byte is a TIP's, FUP's, TIP.PGE's or
/// TIP.PGD's (its low 5 bits; the IPBytes above them are not checked).
#[inline(always)]
fn carries_ip(b0: u8) -> bool {
    matches!(b0 & 0x1f, 0x0d | 0x1d | 0x11 | 0x01)
}

/// A short TNT: the stop bit is the highest set bit; the outcomes sit
/// between it and bit 0.
#[inline(always)]
fn tnt8(b0: u8) -> Tnt {
    let count = 6 - b0.leading_zeros() as u8;
    Tnt { bits: u64::from(b0 >> 1) & ((1 << count) - 1), count }
}

/// A CYC whose extension bytes, if any, all lie in `after` (the 8 bytes
/// after the header): its length and value; `None` when the 8th extension
/// byte says another follows (too long, or truncated: the full decoder
/// says which).
#[inline(always)]
fn cyc_fast(b0: u8, after: u64) -> Option<(usize, u64)> {
    let value = u64::from(b0 >> 3);
    if b0 & 4 == 0 {
        return Some((1, value));
    }
    // Bit 0 of each extension byte says another follows: the first byte
    // without it is the last.
    let more = !after & 0x0101_0101_0101_0101;
    if more == 0 {
        return None;
    }
    let ext = (more.trailing_zeros() >> 3) as usize + 1;
    let mut v = value;
    let mut bytes = after;
    let mut shift = 5;
    for _ in 0..ext {
        v |= (bytes & 0xfe) >> 1 << shift;
        bytes >>= 8;
        shift += 7;
    }
    Some((1 + ext, v))
}

/// The bits of the last IP each IPBytes value keeps (0, suppressed, is
/// handled apart).
const IP_KEEP_MASK: [u64; 8] = [0, !0xffff, !0xffff_ffff, 0, !0xffff_ffff_ffff, 0, 0, 0];

/// The shift that sign-extends each IPBytes value's IP (IPBytes 3: from bit 47).
const IP_SEXT_SHIFT: [u32; 8] = [0, 0, 0, 16, 0, 0, 0, 0];

/// Each IPBytes value's packet length (0: reserved).
const IP_LEN: [u8; 8] = [1, 3, 5, 7, 7, 0, 9, 0];

/// Each IPBytes value's compression (the reserved 5 and 7 are never looked up).
const IP_COMPRESSION: [IpCompression; 8] = [
    IpCompression::Suppressed,
    IpCompression::Update16,
    IpCompression::Update32,
    IpCompression::Sext48,
    IpCompression::Update48,
    IpCompression::Suppressed,
    IpCompression::Full,
    IpCompression::Suppressed,
];

/// An IPBytes value's [`IP_PAYLOAD_MASK`], [`IP_KEEP_MASK`],
/// [`IP_SEXT_SHIFT`] and [`IP_COMPRESSION`] side by side, for
/// [`PacketDecoder::fast_ip`]: one look-up finds them all.
#[derive(Clone, Copy)]
struct IpRow {
    payload_mask: u64,
    keep_mask: u64,
    sext_shift: u32,
    compression: IpCompression,
}

/// [`IpRow`] of each IPBytes value.
static IP_ROWS: [IpRow; 8] = {
    let mut t = [IpRow { payload_mask: 0, keep_mask: 0, sext_shift: 0, compression: IpCompression::Suppressed }; 8];
    let mut i = 0;
    while i < 8 {
        t[i] = IpRow { payload_mask: IP_PAYLOAD_MASK[i], keep_mask: IP_KEEP_MASK[i], sext_shift: IP_SEXT_SHIFT[i], compression: IP_COMPRESSION[i] };
        i += 1;
    }
    t
};

/// The length of each packet its first byte alone fixes, outside a PEBS
/// block and when no check can fail but truncation (0: any other, which
/// [`PacketDecoder::skip_packet`] leaves to the full decoder): PAD, short TNT,
/// TSC, MTC, CYC without extension bytes, and TIP, TIP.PGE, TIP.PGD and FUP
/// with valid IPBytes.
static SKIP: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let x = b as u8;
        t[b] = match LEAD[b] {
            Lead::Pad | Lead::Tnt => 1,
            Lead::Cyc if x & 4 == 0 => 1,
            Lead::Tsc => 8,
            Lead::Mtc => 2,
            Lead::Tip | Lead::TipPge | Lead::TipPgd | Lead::Fup => IP_LEN[b >> 5],
            _ => 0,
        };
        b += 1;
    }
    t
};

/// The payload bits of each IPBytes value (5 and 7 are rejected before use).
const IP_PAYLOAD_MASK: [u64; 8] = [0, 0xffff, 0xffff_ffff, 0xffff_ffff_ffff, 0xffff_ffff_ffff, 0, u64::MAX, 0];

/// The first `n` bytes of `rest`, or a truncation error for `packet`.
#[inline(always)]
fn need(rest: &[u8], n: usize, packet: PacketKind) -> Result<&[u8], PacketErrorKind> {
    rest.get(..n).ok_or(PacketErrorKind::Truncated { packet: Some(packet), needed: n, available: rest.len() })
}

/// Up to 8 bytes as a little-endian number.
#[inline(always)]
pub(crate) fn le(bytes: &[u8]) -> u64 {
    let mut v = [0u8; 8];
    v[..bytes.len()].copy_from_slice(bytes);
    u64::from_le_bytes(v)
}

/// Offset of the first PSB in `buf`: a vectorised search for the 16-byte
/// pattern, for syncing and for cutting a buffer into independently
/// decodable segments.
pub fn find_psb(buf: &[u8]) -> Option<usize> {
    static FINDER: std::sync::OnceLock<memchr::memmem::Finder<'static>> = std::sync::OnceLock::new();
    FINDER.get_or_init(|| memchr::memmem::Finder::new(&PSB)).find(buf)
}

/// Not part of the API: whole-buffer loops over the crate-internal paths,
/// for `benches/packets.rs` (which cannot reach them otherwise). Each stops
/// at the first error.
#[doc(hidden)]
#[cfg(feature = "bench-internals")]
pub mod scan {
    use super::{PacketDecoder, PacketError, Quick};
    use crate::Packet;

    /// Packets and a fold of their main fields, decoded as the flow walk
    /// does: `PacketDecoder::next_quick`, else `next_packet`.
    #[inline(never)]
    pub fn quick(buf: &[u8]) -> Result<(usize, u64), PacketError> {
        let mut dec = PacketDecoder::new(buf);
        let (mut n, mut acc) = (0, 0u64);
        loop {
            let v = if let Some((_, q)) = dec.next_quick() {
                match q {
                    Quick::Tnt { bits, count } => bits ^ u64::from(count),
                    Quick::Tip(ip) | Quick::TipPge(ip) | Quick::TipPgd(ip) | Quick::Fup(ip) => ip.unwrap_or(1),
                    Quick::Tsc(v) | Quick::Cyc(v) => v,
                    Quick::Mtc(v) => u64::from(v),
                    Quick::Pad => 1,
                }
            } else {
                match dec.next_packet()? {
                    None => break,
                    Some((_, p)) => match p {
                        Packet::TntShort(t) | Packet::TntLong(t) => t.bits ^ u64::from(t.count),
                        Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => ip.ip.unwrap_or(1),
                        Packet::Tsc(v) | Packet::Cyc(v) | Packet::Mnt(v) | Packet::Vmcs(v) => v,
                        Packet::Mtc(v) | Packet::Cbr(v) => u64::from(v),
                        _ => 1,
                    },
                }
            };
            acc = acc.wrapping_add(v);
            n += 1;
        }
        Ok((n, acc))
    }

    /// Packet boundaries only (`PacketDecoder::skip_packet`, as the flow
    /// walk's look-ahead for the next TSC uses it): packets, and a fold of
    /// their first bytes.
    #[inline(never)]
    pub fn skip(buf: &[u8]) -> Result<(usize, u64), PacketError> {
        let mut dec = PacketDecoder::new(buf);
        let (mut n, mut acc) = (0, 0u64);
        while let Some((_, bytes)) = dec.skip_packet()? {
            acc = acc.wrapping_add(u64::from(bytes[0]));
            n += 1;
        }
        Ok((n, acc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PacketVisitor;

    /// Bytes that are often packet starts (PSB, PEBS blocks, IP packets with
    /// every IPBytes, TSC, MTC, CYC, long TNT), among random ones.
    fn random_trace(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out = Vec::with_capacity(len + 16);
        while out.len() < len {
            let r = next();
            match r % 8 {
                0 => out.extend_from_slice(&PSB),
                1 => out.extend_from_slice(&[0x02, [0x63, 0xe3, 0x33, 0xa3, 0x23, 0x73][(r >> 8) as usize % 6]]),
                2 => out.push([0x0d, 0x11, 0x01, 0x1d][(r >> 8) as usize % 4] | ((r >> 16) as u8 & 0xe0)),
                3 => out.push([0x19, 0x59, 0x99, 0x03, 0x07, 0x00][(r >> 8) as usize % 6]),
                _ => out.push((r >> 8) as u8),
            }
        }
        out
    }

    /// CYCs with 0 to 10 extension bytes (9 and more are too long), cut at
    /// every length, between random packets.
    fn cyc_traces() -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for ext in 0..=10usize {
            let mut cyc = vec![if ext == 0 { 0xfb } else { 0xff }];
            for i in 0..ext {
                cyc.push(if i + 1 < ext { 0xab | 1 } else { 0x54 });
            }
            for cut in 0..=cyc.len() {
                let mut t = random_trace(ext as u64 * 31 + cut as u64, 40);
                t.extend_from_slice(&cyc[..cut]);
                out.push(t.clone());
                t.extend_from_slice(&[0x0d, 0x34, 0x12, 0x07, 0x03, 0x02, 0x00]);
                out.push(t);
            }
        }
        out
    }

    /// `skip_until` then `skip_packet`, as a scan ahead uses them, stop at
    /// the packet `next_packet` would stop at: the first TSC (or MTC), the
    /// first past the limit, or the first bad one; from every packet.
    #[test]
    fn skip_until_stops_where_next_packet_would() {
        #[derive(Debug, PartialEq)]
        enum Stop {
            Found(usize),
            Past(usize),
            Bad(usize),
            End,
        }
        let mut stops = [0usize; 3];
        for (n, trace) in (0..300).map(|seed| random_trace(seed, 600)).chain(cyc_traces()).enumerate() {
            for (mtc, limit) in [(false, usize::MAX), (true, usize::MAX), (false, trace.len() / 2), (true, trace.len() / 3)] {
                let mut from = PacketDecoder::new(&trace);
                loop {
                    match from.clone().next_packet() {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(_) => {
                            // On past a bad packet, as a decode goes on.
                            if !from.sync_forward().psb_found {
                                break;
                            }
                            continue;
                        }
                    }
                    let mut want_dec = from.clone();
                    let want = loop {
                        match want_dec.next_packet() {
                            Ok(Some((off, Packet::Tsc(_)))) => break Stop::Found(off),
                            Ok(Some((off, Packet::Mtc(_)))) if mtc => break Stop::Found(off),
                            Ok(Some((off, _))) if off > limit => break Stop::Past(off),
                            Ok(Some(_)) => {}
                            Ok(None) => break Stop::End,
                            Err(e) => break Stop::Bad(e.offset),
                        }
                    };
                    let mut dec = from.clone();
                    let got = loop {
                        dec.skip_until([0x19, if mtc { 0x59 } else { 0x19 }], limit);
                        match dec.skip_packet() {
                            Ok(Some((off, bytes))) if bytes[0] == 0x19 || (mtc && bytes[0] == 0x59) => break Stop::Found(off),
                            Ok(Some((off, _))) if off > limit => break Stop::Past(off),
                            Ok(Some(_)) => {}
                            Ok(None) => break Stop::End,
                            Err(e) => break Stop::Bad(e.offset),
                        }
                    };
                    assert_eq!(got, want, "trace {n}, mtc {mtc}, limit {limit}, from {}", from.pos);
                    stops[match want {
                        Stop::Found(_) => 0,
                        Stop::Past(_) => 1,
                        _ => 2,
                    }] += 1;
                    from.next_packet().unwrap();
                }
            }
        }
        assert!(stops.iter().all(|&k| k > 100), "each kind of stop met: {stops:?}");
    }

    /// The fast path of `next_packet` (9 bytes left, no block) decodes
    /// what the full decoder decodes, errors, offsets and last IP included.
    #[test]
    fn next_packet_fast_path_agrees_with_full_decoder() {
        let traces = (0..400).map(|seed| random_trace(seed, 600)).chain(cyc_traces());
        let mut steps = 0;
        for (n, trace) in traces.enumerate() {
            let mut dec = PacketDecoder::new(&trace);
            loop {
                let mut full = dec.clone();
                let want = full.next_slow();
                let got = dec.next_packet();
                assert_eq!(got, want, "trace {n} at {}", full.pos);
                assert_eq!((dec.pos, dec.last_ip, dec.block), (full.pos, full.last_ip, full.block), "trace {n}");
                steps += 1;
                match got {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => {
                        dec.sync_forward();
                    }
                }
            }
        }
        assert!(steps > 25_000, "{steps}");
    }

    /// `visit`, stopped after every packet, leaves the decoder where
    /// `next_packet` does (position, last IP, open block), errors included.
    #[test]
    fn visit_steps_like_next_packet() {
        use std::ops::ControlFlow;
        struct One(Option<(usize, Packet)>);
        impl PacketVisitor for One {
            fn packet(&mut self, offset: usize, packet: Packet) -> ControlFlow<()> {
                self.0 = Some((offset, packet));
                ControlFlow::Break(())
            }
        }
        let mut steps = 0;
        let traces = (0..400).map(|seed| random_trace(seed, 600)).chain(cyc_traces());
        for (n, trace) in traces.enumerate() {
            let mut dec = PacketDecoder::new(&trace);
            loop {
                let mut by_next = dec.clone();
                let want = by_next.next_packet();
                let mut one = One(None);
                let got = dec.visit(&mut one);
                assert_eq!((dec.pos, dec.last_ip, dec.block), (by_next.pos, by_next.last_ip, by_next.block), "trace {n}");
                steps += 1;
                match (want, got) {
                    (Ok(Some(p)), Ok(ControlFlow::Break(()))) => assert_eq!(one.0, Some(p), "trace {n}"),
                    (Ok(None), Ok(ControlFlow::Continue(()))) => {
                        assert_eq!(one.0, None);
                        break;
                    }
                    (Err(a), Err(b)) => {
                        assert_eq!((a, one.0), (b, None), "trace {n}");
                        dec.sync_forward();
                    }
                    (a, b) => panic!("trace {n} at {}: {a:?} against {b:?}", by_next.pos),
                }
            }
        }
        assert!(steps > 25_000, "{steps}");
    }

    /// `skip_packet` finds the packets `next_packet` decodes, and its errors.
    #[test]
    fn skip_packet_follows_next_packet() {
        for (seed, trace) in (0..400).map(|seed| random_trace(seed, 600)).chain(cyc_traces()).enumerate() {
            let (mut full, mut skip) = (PacketDecoder::new(&trace), PacketDecoder::new(&trace));
            loop {
                let want = full.next_packet();
                let got = skip.skip_packet();
                match (want, got) {
                    (Ok(Some((off, _))), Ok(Some((at, bytes)))) => {
                        assert_eq!((at, at + bytes.len()), (off, full.offset()), "seed {seed}");
                    }
                    (Ok(None), Ok(None)) => break,
                    (Err(a), Err(b)) => {
                        assert_eq!(a, b, "seed {seed}");
                        full.sync_forward();
                        skip.sync_forward();
                    }
                    (a, b) => panic!("seed {seed}: {a:?} against {:?}", b.map(|p| p.map(|(o, _)| o))),
                }
            }
        }
    }

    /// One packet through `next_packet` (past an error, to the next PSB),
    /// its target kept if it is a TIP with one; false at the end.
    fn next_tip(dec: &mut PacketDecoder, tips: &mut Vec<u64>) -> bool {
        match dec.next_packet() {
            Ok(Some((_, Packet::Tip(ip)))) => tips.extend(ip.ip),
            Ok(Some(_)) => {}
            Ok(None) => return false,
            Err(_) => {
                dec.sync_forward();
            }
        }
        true
    }

    /// `scan_tips`, with `next_packet` for what it leaves, gives the TIP
    /// targets `next_packet` decodes, in order, and stops at its limit.
    #[test]
    fn scan_tips_gives_next_packets_tip_targets() {
        let mut seen = 0;
        for (seed, trace) in (0..400).map(|seed| random_trace(seed, 600)).chain(cyc_traces()).enumerate() {
            let mut want = Vec::new();
            let mut full = PacketDecoder::new(&trace);
            while next_tip(&mut full, &mut want) {}
            let (mut got, mut scan, mut limit) = (Vec::new(), PacketDecoder::new(&trace), 0);
            loop {
                limit += 1 + seed % 40;
                let before = scan.offset();
                scan.scan_tips(limit, |ip| got.push(ip));
                // No packet taken starts at or past the limit (9 bytes at most).
                assert!(scan.offset() == before || scan.offset() < limit + 9, "seed {seed}: {} past {limit}", scan.offset());
                if scan.offset() < limit && !next_tip(&mut scan, &mut got) {
                    break;
                }
            }
            seen += want.len();
            assert_eq!(got, want, "seed {seed}");
        }
        assert!(seen > 400, "{seen}");
    }

    /// `next_quick` decodes what `next_packet` decodes, last IP included, or
    /// leaves the packet to it; `Quick::of` turns that packet into the same.
    #[test]
    fn next_quick_agrees_with_next_packet() {
        let ip = |p: crate::Ip| p.ip;
        let mut quick_seen = 0;
        for (seed, trace) in (0..400).map(|seed| random_trace(seed, 600)).chain(cyc_traces()).enumerate() {
            let mut dec = PacketDecoder::new(&trace);
            loop {
                let mut full = dec.clone();
                let want = full.next_packet();
                let Some((at, q)) = dec.next_quick() else {
                    match want {
                        Ok(Some(_)) => dec = full,
                        Ok(None) => break,
                        Err(_) => {
                            dec.sync_forward();
                        }
                    }
                    continue;
                };
                quick_seen += 1;
                let (off, p) = want.expect("a quick packet decodes").expect("a packet");
                assert_eq!((at, dec.offset(), dec.last_ip), (off, full.offset(), full.last_ip), "seed {seed}");
                let same = match (q, p) {
                    (Quick::Pad, Packet::Pad) => true,
                    (Quick::Tnt { bits, count }, Packet::TntShort(t)) => (bits, count) == (t.bits, t.count),
                    (Quick::Tip(a), Packet::Tip(b)) | (Quick::TipPge(a), Packet::TipPge(b)) => a == ip(b),
                    (Quick::TipPgd(a), Packet::TipPgd(b)) | (Quick::Fup(a), Packet::Fup(b)) => a == ip(b),
                    (Quick::Tsc(a), Packet::Tsc(b)) => a == b,
                    (Quick::Mtc(a), Packet::Mtc(b)) => a == b,
                    (Quick::Cyc(a), Packet::Cyc(b)) => a == b,
                    _ => false,
                };
                assert!(same, "seed {seed} at {at}: {q:?} against {p:?}");
                assert_eq!(Quick::of(&p), Some(q), "seed {seed} at {at}: the slow path's conversion");
            }
        }
        assert!(quick_seen > 5_000, "{quick_seen}");
    }
}
