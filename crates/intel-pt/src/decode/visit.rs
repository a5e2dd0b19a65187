//! [`PacketDecoder::visit`]: the decoder calling a visitor from inside each
//! packet's branch, instead of returning a [`Packet`] that the caller
//! matches again.

use std::ops::ControlFlow;

use super::{cyc_fast, tnt8, Emit, Lead, PacketDecoder, PacketError, IP_LEN, LEAD};
use crate::packet::{Ip, Packet, Tnt};

/// The methods of the kinds that have their own, each passing its packet on
/// to `packet` unless overridden.
macro_rules! own_methods {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*) => $packet:expr;)*) => {$(
        $(#[$doc])*
        #[inline(always)]
        fn $name(&mut self, offset: usize, $($arg: $ty),*) -> ControlFlow<()> {
            self.packet(offset, $packet)
        }
    )*};
}

/// What [`PacketDecoder::visit`] calls for each packet, with its offset.
///
/// Every packet reaches one method: its own, for the kinds that have one,
/// else [`packet`](Self::packet); the own methods pass the packet on to
/// `packet` unless overridden. Mark the methods you write `#[inline]` (or
/// `#[inline(always)]`): inlined, `packet`'s match on the kind folds into
/// the decoder's branch for it. Return `ControlFlow::Break(())` to stop.
///
/// ```
/// use intel_pt::{Ip, Packet, PacketDecoder, PacketVisitor};
/// use std::ops::ControlFlow;
///
/// /// Counts packets, and TIPs apart.
/// struct Count {
///     packets: usize,
///     tips: usize,
/// }
///
/// impl PacketVisitor for Count {
///     #[inline]
///     fn packet(&mut self, _offset: usize, _packet: Packet) -> ControlFlow<()> {
///         self.packets += 1;
///         ControlFlow::Continue(())
///     }
///     #[inline]
///     fn tip(&mut self, _offset: usize, _ip: Ip) -> ControlFlow<()> {
///         self.tips += 1;
///         self.packets += 1;
///         ControlFlow::Continue(())
///     }
/// }
///
/// let trace = [0x02, 0x82].repeat(8).into_iter().chain([0x02, 0x23, 0x2d, 0x34, 0x12]).collect::<Vec<u8>>();
/// let mut count = Count { packets: 0, tips: 0 };
/// assert!(PacketDecoder::new(&trace).visit(&mut count)?.is_continue());
/// assert_eq!((count.packets, count.tips), (3, 1));
/// # Ok::<(), intel_pt::PacketError>(())
/// ```
pub trait PacketVisitor {
    /// Any packet without a method of its own here, or whose method is not
    /// overridden. IPs are rebuilt from the last IP, as by
    /// [`PacketDecoder::next_packet`].
    fn packet(&mut self, offset: usize, packet: Packet) -> ControlFlow<()>;

    own_methods! {
        /// PAD.
        pad() => Packet::Pad;
        /// A short TNT (a long one goes to [`packet`](Self::packet)).
        tnt_short(tnt: Tnt) => Packet::TntShort(tnt);
        /// TIP.
        tip(ip: Ip) => Packet::Tip(ip);
        /// TIP.PGE.
        tip_pge(ip: Ip) => Packet::TipPge(ip);
        /// TIP.PGD.
        tip_pgd(ip: Ip) => Packet::TipPgd(ip);
        /// FUP.
        fup(ip: Ip) => Packet::Fup(ip);
        /// TSC: its low 56 bits.
        tsc(tsc: u64) => Packet::Tsc(tsc);
        /// MTC: its CTC byte.
        mtc(ctc: u8) => Packet::Mtc(ctc);
        /// CYC: its cycle count.
        cyc(cycles: u64) => Packet::Cyc(cycles);
    }
}

/// `packet` to the visitor method for its kind.
#[inline(always)]
fn dispatch<V: PacketVisitor + ?Sized>(v: &mut V, offset: usize, packet: Packet) -> ControlFlow<()> {
    match packet {
        Packet::Pad => v.pad(offset),
        Packet::TntShort(t) => v.tnt_short(offset, t),
        Packet::Tip(ip) => v.tip(offset, ip),
        Packet::TipPge(ip) => v.tip_pge(offset, ip),
        Packet::TipPgd(ip) => v.tip_pgd(offset, ip),
        Packet::Fup(ip) => v.fup(offset, ip),
        Packet::Tsc(t) => v.tsc(offset, t),
        Packet::Mtc(c) => v.mtc(offset, c),
        Packet::Cyc(c) => v.cyc(offset, c),
        p => v.packet(offset, p),
    }
}

/// The first bytes of TIP, TIP.PGE, TIP.PGD and FUP with valid IPBytes, as
/// their [`Lead`]; `Bad` for every other: one look-up where the tests on
/// the opcode bits and IPBytes would take a dozen instructions.
static IP_KIND: [Lead; 256] = {
    let mut t = [Lead::Bad; 256];
    let mut b = 0;
    while b < 256 {
        if matches!(LEAD[b], Lead::Tip | Lead::TipPge | Lead::TipPgd | Lead::Fup) && IP_LEN[b >> 5] != 0 {
            t[b] = LEAD[b];
        }
        b += 1;
    }
    t
};

/// The full decoder's emitter for a visitor: the packet at `offset` to it.
struct ToVisitor<'v, V: ?Sized> {
    v: &'v mut V,
    offset: usize,
}

impl<V: PacketVisitor + ?Sized> Emit for ToVisitor<'_, V> {
    type Out = ControlFlow<()>;
    #[inline(always)]
    fn emit(self, packet: Packet) -> ControlFlow<()> {
        dispatch(self.v, self.offset, packet)
    }
}

impl PacketDecoder<'_> {
    /// Decodes packets from the current position to the end of the buffer,
    /// handing each with its offset to `v`: the same packets, offsets, IPs
    /// and errors as repeated [`next_packet`](Self::next_packet), in one loop
    /// with the visitor's methods inlined into it.
    ///
    /// Returns `Continue` at the end of the buffer, `Break` when the visitor
    /// stopped (the decoder then stands after that packet). On error the
    /// decoder stands at the bad packet, as after `next_packet`, so that
    /// [`sync_forward`](Self::sync_forward) and another `visit` go on.
    pub fn visit<V: PacketVisitor + ?Sized>(&mut self, v: &mut V) -> Result<ControlFlow<()>, PacketError> {
        // On a copy that no call sees, so that its state lives in registers.
        let mut dec = self.clone();
        let r = dec.visit_all(v);
        *self = dec;
        r
    }

    /// [`visit`](Self::visit)'s loop, inlined into it.
    #[inline(always)]
    fn visit_all<V: PacketVisitor + ?Sized>(&mut self, v: &mut V) -> Result<ControlFlow<()>, PacketError> {
        let buf = self.buf;
        loop {
            let offset = self.pos;
            let rest = &buf[offset..];
            let step = 'step: {
                // With 9 bytes left and no PEBS block open: the common
                // packets from one 8-byte load after tests on the first
                // byte, most common first (branches that predict better than
                // one jump on it), and the `02` packets straight to their own
                // decoder.
                'full: {
                    let (Some(w), None) = (rest.get(..9), self.block) else {
                        break 'full;
                    };
                    let b0 = w[0];
                    let after = u64::from_le_bytes(w[1..9].try_into().unwrap());
                    let (len, flow) = if b0 & 1 == 0 {
                        match b0 {
                            0 => (1, v.pad(offset)),
                            2 => break 'step self.decode_ext(rest, ToVisitor { v: &mut *v, offset }),
                            _ => (1, v.tnt_short(offset, tnt8(b0))),
                        }
                    } else {
                        let ip_kind = IP_KIND[usize::from(b0)];
                        if !matches!(ip_kind, Lead::Bad) {
                            let (n, ip) = self.fast_ip(b0, after);
                            let flow = match ip_kind {
                                Lead::Tip => v.tip(offset, ip),
                                Lead::Fup => v.fup(offset, ip),
                                Lead::TipPge => v.tip_pge(offset, ip),
                                _ => v.tip_pgd(offset, ip),
                            };
                            (n, flow)
                        } else if b0 & 3 == 3 {
                            let Some((n, cycles)) = cyc_fast(b0, after) else {
                                break 'full;
                            };
                            (n, v.cyc(offset, cycles))
                        } else if b0 == 0x19 {
                            (8, v.tsc(offset, after & 0x00ff_ffff_ffff_ffff))
                        } else if b0 == 0x59 {
                            (2, v.mtc(offset, after as u8))
                        } else {
                            // MODE, bad opcodes, reserved IPBytes.
                            break 'full;
                        }
                    };
                    break 'step Ok((len, flow));
                }
                // Near the end of the buffer, in a PEBS block, and the rest:
                // the full decoder.
                let Some(&b0) = rest.first() else {
                    return Ok(ControlFlow::Continue(()));
                };
                self.decode(rest, b0, ToVisitor { v: &mut *v, offset })
            };
            match step {
                Ok((len, flow)) => {
                    self.pos = offset + len;
                    if flow.is_break() {
                        return Ok(flow);
                    }
                }
                Err(kind) => return Err(PacketError { offset, kind }),
            }
        }
    }
}
