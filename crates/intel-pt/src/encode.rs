//! The packet encoder, the decoder's mirror image: for tests, fuzzing and the
//! simulator. Every field is range-checked; nothing is silently truncated.

use crate::decode::ends_block;
use crate::packet::{compress_ip, Ip, IpCompression, Packet, PacketKind, PayloadSize, Tnt};
use crate::PSB;

/// A packet that cannot be encoded, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode {packet}: {reason}")]
pub struct EncodeError {
    pub packet: PacketKind,
    pub reason: &'static str,
}

/// Appends the bytes of `packet` to `out` and returns how many. An IP packet
/// is written from its compression and payload; its `ip` is not consulted
/// (see [`Encoder`] for that). On error nothing is written.
pub fn encode(packet: &Packet, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
    validate(packet)?;
    Ok(write(packet, out))
}

/// Encodes a packet stream, keeping the state the decoder will keep: the
/// last IP, and whether a PEBS block is open. It checks what the stateless
/// [`encode`] cannot: that an IP packet's `ip` is what the decoder will
/// rebuild, and that BIPs and short TNTs read back as themselves.
///
/// ```
/// use intel_pt::{Encoder, Packet, PacketDecoder};
/// let mut enc = Encoder::new();
/// let mut trace = Vec::new();
/// enc.encode(&Packet::Psb, &mut trace)?;
/// let ip = enc.compress(0xffff_ffff_8100_1234);
/// enc.encode(&Packet::TipPge(ip), &mut trace)?;
/// let ip = enc.compress(0xffff_ffff_8100_5678); // shares bits 63:16
/// assert_eq!(ip.compression.ipbytes(), 1);
/// enc.encode(&Packet::Tip(ip), &mut trace)?;
/// let mut dec = PacketDecoder::new(&trace);
/// dec.next_packet().unwrap();
/// dec.next_packet().unwrap();
/// assert_eq!(dec.next_packet().unwrap(), Some((23, Packet::Tip(ip))));
/// # Ok::<(), intel_pt::EncodeError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Encoder {
    last_ip: u64,
    block: Option<PayloadSize>,
}

impl Encoder {
    /// An encoder in the decoder's initial state: last IP 0, no open block.
    pub fn new() -> Self {
        Self::default()
    }

    /// The last IP, as the decoder will have it after what was encoded.
    pub fn last_ip(&self) -> u64 {
        self.last_ip
    }

    /// `ip` in its shortest form after the last IP (see [`compress_ip`]).
    pub fn compress(&self, ip: u64) -> Ip {
        compress_ip(ip, self.last_ip)
    }

    /// Appends `packet` to `out` and updates the state; on error nothing is
    /// written and the state is unchanged.
    pub fn encode(&mut self, packet: &Packet, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
        validate(packet)?;
        let fail = |reason| Err(EncodeError { packet: packet.kind(), reason });
        match *packet {
            Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip)
                if ip.ip != ip.compression.apply(ip.payload, self.last_ip) =>
            {
                return fail("ip is not what payload and the last IP rebuild")
            }
            Packet::Bip { size, .. } if self.block != Some(size) => return fail("BIP outside a block of its payload size"),
            Packet::TntShort(Tnt { bits, count }) if self.block.is_some() && short_tnt_byte(bits, count) & 7 == 4 => {
                return fail("this short TNT reads as a BIP inside a block")
            }
            _ => {}
        }
        let n = write(packet, out);
        match *packet {
            Packet::Psb => {
                self.last_ip = 0;
                self.block = None;
            }
            Packet::Bbp { size, .. } => self.block = Some(size),
            Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => {
                if let Some(ip) = ip.ip {
                    self.last_ip = ip;
                }
            }
            _ => {}
        }
        if self.block.is_some() && ends_block(packet) {
            self.block = None;
        }
        Ok(n)
    }
}

/// Checks every field against the width it has in the packet.
fn validate(packet: &Packet) -> Result<(), EncodeError> {
    let fits = |v: u64, bits: u32| v >> bits == 0;
    let ok = match *packet {
        Packet::Pad | Packet::Psb | Packet::PsbEnd | Packet::Ovf | Packet::Stop => Ok(()),
        Packet::TntShort(t) => tnt_ok(t, 6),
        Packet::TntLong(t) => tnt_ok(t, 47),
        Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => {
            if ip.compression == IpCompression::Full || fits(ip.payload, 8 * ip.compression.payload_len() as u32) {
                Ok(())
            } else {
                Err("payload wider than its compression")
            }
        }
        Packet::ModeExec { .. } | Packet::ModeTsx { .. } => Ok(()),
        Packet::Pip { cr3, .. } => {
            if cr3 & 0x1f == 0 && fits(cr3, 52) {
                Ok(())
            } else {
                Err("cr3 must be bits 51:5")
            }
        }
        Packet::Tsc(tsc) => fits(tsc, 56).then_some(()).ok_or("TSC wider than 56 bits"),
        Packet::Mtc(_) | Packet::Cbr(_) | Packet::Mnt(_) | Packet::Exstop { .. } | Packet::Bep { .. } => Ok(()),
        Packet::Cyc(v) => fits(v, 61).then_some(()).ok_or("cycle count wider than 61 bits"),
        Packet::Tma { fast_counter, .. } => fits(fast_counter.into(), 9).then_some(()).ok_or("fast counter wider than 9 bits"),
        Packet::Vmcs(vmcs) => {
            if vmcs & 0xfff == 0 && fits(vmcs, 52) {
                Ok(())
            } else {
                Err("VMCS pointer must be bits 51:12")
            }
        }
        Packet::Ptw { payload, size, .. } | Packet::Bip { payload, size, .. } if !fits_size(payload, size) => Err("payload wider than its size"),
        Packet::Ptw { .. } => Ok(()),
        Packet::Bip { id, .. } => fits(id.into(), 5).then_some(()).ok_or("ID wider than 5 bits"),
        Packet::Mwait { ext, .. } => fits(ext.into(), 2).then_some(()).ok_or("extensions wider than 2 bits"),
        Packet::Pwre { cstate, sub_cstate, .. } => (fits(cstate.into(), 4) && fits(sub_cstate.into(), 4)).then_some(()).ok_or("C-states are 4 bits"),
        Packet::Pwrx { last_cstate, deepest_cstate, wake_reason } => {
            (fits(last_cstate.into(), 4) && fits(deepest_cstate.into(), 4) && fits(wake_reason.into(), 4))
                .then_some(())
                .ok_or("C-states and wake reason are 4 bits")
        }
        Packet::Bbp { block_type, .. } => fits(block_type.into(), 5).then_some(()).ok_or("type wider than 5 bits"),
        Packet::Cfe { event_type, .. } => fits(event_type.into(), 5).then_some(()).ok_or("type wider than 5 bits"),
        Packet::Evd { event_type, .. } => fits(event_type.into(), 6).then_some(()).ok_or("type wider than 6 bits"),
        Packet::Trig { .. } => Ok(()),
    };
    ok.map_err(|reason| EncodeError { packet: packet.kind(), reason })
}

fn tnt_ok(t: Tnt, max: u8) -> Result<(), &'static str> {
    if t.count == 0 || t.count > max {
        Err(if max == 6 { "a short TNT holds 1 to 6 outcomes" } else { "a long TNT holds 1 to 47 outcomes" })
    } else if t.bits >> t.count != 0 {
        Err("outcome bits beyond count")
    } else {
        Ok(())
    }
}

fn fits_size(payload: u64, size: PayloadSize) -> bool {
    size == PayloadSize::Eight || payload >> 32 == 0
}

fn short_tnt_byte(bits: u64, count: u8) -> u8 {
    ((1 << count | bits) << 1) as u8
}

/// Writes a validated packet.
fn write(packet: &Packet, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    let le = |out: &mut Vec<u8>, v: u64, n: usize| out.extend_from_slice(&v.to_le_bytes()[..n]);
    match *packet {
        Packet::Pad => out.push(0x00),
        Packet::Psb => out.extend_from_slice(&PSB),
        Packet::PsbEnd => out.extend_from_slice(&[0x02, 0x23]),
        Packet::Ovf => out.extend_from_slice(&[0x02, 0xf3]),
        Packet::Stop => out.extend_from_slice(&[0x02, 0x83]),
        Packet::TntShort(Tnt { bits, count }) => out.push(short_tnt_byte(bits, count)),
        Packet::TntLong(Tnt { bits, count }) => {
            out.extend_from_slice(&[0x02, 0xa3]);
            le(out, 1 << count | bits, 6);
        }
        Packet::Tip(ip) => write_ip(out, 0x0d, ip),
        Packet::TipPge(ip) => write_ip(out, 0x11, ip),
        Packet::TipPgd(ip) => write_ip(out, 0x01, ip),
        Packet::Fup(ip) => write_ip(out, 0x1d, ip),
        Packet::ModeExec { csl, csd, if_flag } => out.extend_from_slice(&[0x99, u8::from(csl) | u8::from(csd) << 1 | u8::from(if_flag) << 2]),
        Packet::ModeTsx { intx, abort } => out.extend_from_slice(&[0x99, 0x20 | u8::from(intx) | u8::from(abort) << 1]),
        Packet::Pip { cr3, nr } => {
            out.extend_from_slice(&[0x02, 0x43]);
            le(out, cr3 >> 5 << 1 | u64::from(nr), 6);
        }
        Packet::Tsc(tsc) => {
            out.push(0x19);
            le(out, tsc, 7);
        }
        Packet::Mtc(ctc) => out.extend_from_slice(&[0x59, ctc]),
        Packet::Cyc(v) => {
            let mut rest = v >> 5;
            out.push(((v & 0x1f) as u8) << 3 | u8::from(rest != 0) << 2 | 3);
            while rest != 0 {
                let b = (rest & 0x7f) as u8;
                rest >>= 7;
                out.push(b << 1 | u8::from(rest != 0));
            }
        }
        Packet::Tma { ctc, fast_counter } => {
            let [c0, c1] = ctc.to_le_bytes();
            let [f0, f1] = fast_counter.to_le_bytes();
            out.extend_from_slice(&[0x02, 0x73, c0, c1, 0, f0, f1]);
        }
        Packet::Cbr(ratio) => out.extend_from_slice(&[0x02, 0x03, ratio, 0]),
        Packet::Vmcs(vmcs) => {
            out.extend_from_slice(&[0x02, 0xc8]);
            le(out, vmcs >> 12, 5);
        }
        Packet::Mnt(payload) => {
            out.extend_from_slice(&[0x02, 0xc3, 0x88]);
            le(out, payload, 8);
        }
        Packet::Ptw { payload, size, ip } => {
            let sz = match size {
                PayloadSize::Four => 0,
                PayloadSize::Eight => 1,
            };
            out.extend_from_slice(&[0x02, u8::from(ip) << 7 | sz << 5 | 0x12]);
            le(out, payload, size.bytes());
        }
        Packet::Exstop { ip } => out.extend_from_slice(&[0x02, u8::from(ip) << 7 | 0x62]),
        Packet::Mwait { hints, ext } => out.extend_from_slice(&[0x02, 0xc2, hints, 0, 0, 0, ext, 0, 0, 0]),
        Packet::Pwre { hw, cstate, sub_cstate } => out.extend_from_slice(&[0x02, 0x22, u8::from(hw) << 7, cstate << 4 | sub_cstate]),
        Packet::Pwrx { last_cstate, deepest_cstate, wake_reason } => {
            out.extend_from_slice(&[0x02, 0xa2, last_cstate << 4 | deepest_cstate, wake_reason, 0, 0, 0])
        }
        Packet::Bbp { block_type, size } => out.extend_from_slice(&[0x02, 0x63, u8::from(size == PayloadSize::Four) << 7 | block_type]),
        Packet::Bip { id, payload, size } => {
            out.push(id << 3 | 4);
            le(out, payload, size.bytes());
        }
        Packet::Bep { ip } => out.extend_from_slice(&[0x02, u8::from(ip) << 7 | 0x33]),
        Packet::Cfe { ip, event_type, vector } => out.extend_from_slice(&[0x02, 0x13, u8::from(ip) << 7 | event_type, vector]),
        Packet::Evd { event_type, payload } => {
            out.extend_from_slice(&[0x02, 0x53, event_type]);
            le(out, payload, 8);
        }
        Packet::Trig { trbv, ip, mult, icnt } => {
            out.extend_from_slice(&[0xd9, u8::from(ip) << 7 | u8::from(icnt.is_some()) << 6 | u8::from(mult) << 5, trbv]);
            if let Some(icnt) = icnt {
                out.extend_from_slice(&icnt.to_le_bytes());
            }
        }
    }
    out.len() - start
}

fn write_ip(out: &mut Vec<u8>, opcode: u8, ip: Ip) {
    out.push(ip.compression.ipbytes() << 5 | opcode);
    out.extend_from_slice(&ip.payload.to_le_bytes()[..ip.compression.payload_len()]);
}
