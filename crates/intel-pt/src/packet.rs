//! The packets of the Intel SDM's Intel Processor Trace chapter, as plain
//! values: every field is the value the packet carries, already shifted into
//! place (a PIP's CR3, a VMCS pointer), never a byte slice.

/// One Intel PT packet.
///
/// Reserved bits are ignored by the decoder and written as zero by the
/// encoder, so `decode(encode(p)) == p` for every packet the encoder accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Packet {
    /// `00`: padding, one byte.
    Pad,
    /// Packet Stream Boundary: `02 82` eight times. Resets the last IP.
    Psb,
    /// `02 23`: end of the status packets that follow a PSB.
    PsbEnd,
    /// `02 F3`: the processor dropped packets.
    Ovf,
    /// `02 83`: tracing stopped (TraceStop, e.g. by an address range).
    Stop,
    /// Short TNT, one byte: 1 to 6 conditional branch outcomes.
    TntShort(Tnt),
    /// Long TNT, `02 A3` + 6 bytes: 1 to 47 outcomes.
    TntLong(Tnt),
    /// Target of an indirect branch, far transfer or return.
    Tip(Ip),
    /// Packet generation enabled, at this IP.
    TipPge(Ip),
    /// Packet generation disabled; the IP, when not suppressed, is where.
    TipPgd(Ip),
    /// Flow update: the source IP of an asynchronous event or far transfer.
    Fup(Ip),
    /// MODE.Exec: the code segment's L and D bits (address size), and, on
    /// processors with event trace, RFLAGS.IF.
    ModeExec { csl: bool, csd: bool, if_flag: bool },
    /// MODE.TSX: transaction state.
    ModeTsx { intx: bool, abort: bool },
    /// Paging information: CR3 (bits 51:5) and whether in VMX non-root.
    Pip { cr3: u64, nr: bool },
    /// Time stamp counter, low 56 bits.
    Tsc(u64),
    /// Mini time counter: bits of the crystal clock counter (CTC).
    Mtc(u8),
    /// Cycle count since the previous CYC, variable length.
    Cyc(u64),
    /// TSC/MTC alignment: CTC bits 15:0 and the 9-bit fast counter.
    Tma { ctc: u16, fast_counter: u16 },
    /// Core:bus ratio.
    Cbr(u8),
    /// VMCS pointer (bits 51:12) of the guest being entered.
    Vmcs(u64),
    /// Maintenance packet, model-specific 64-bit payload.
    Mnt(u64),
    /// PTWRITE payload; `ip` says a FUP with the PTWRITE's IP follows.
    Ptw { payload: u64, size: PayloadSize, ip: bool },
    /// Execution stopped (C-state entry, ...); `ip` says a FUP follows.
    Exstop { ip: bool },
    /// MWAIT hints (EAX bits 7:0) and extensions (ECX bits 1:0).
    Mwait { hints: u8, ext: u8 },
    /// Power entry: resolved thread C-state and sub C-state; `hw` when
    /// entered by hardware autonomously.
    Pwre { hw: bool, cstate: u8, sub_cstate: u8 },
    /// Power exit: last and deepest core C-states (4 bits each) and the wake
    /// reason bits (4 bits).
    Pwrx { last_cstate: u8, deepest_cstate: u8, wake_reason: u8 },
    /// Block begin (PEBS via PT): the block's type (5 bits) and the payload
    /// size of the BIPs that follow.
    Bbp { block_type: u8, size: PayloadSize },
    /// Block item: a 5-bit item ID and its value. Only decoded inside a block
    /// (after a BBP), where its header byte would otherwise read as a TNT.
    Bip { id: u8, payload: u64, size: PayloadSize },
    /// Block end; `ip` says a FUP follows.
    Bep { ip: bool },
    /// Control flow event (event trace): type (5 bits) and vector; `ip` says
    /// a FUP follows.
    Cfe { ip: bool, event_type: u8, vector: u8 },
    /// Event data (event trace): type (6 bits) and a 64-bit payload.
    Evd { event_type: u8, payload: u64 },
    /// `D9`: trigger (TRIG): the trigger bits `trbv`; `ip` says a FUP with
    /// the IP it happened at follows; `mult` that more triggers fired than
    /// it reports; `icnt`, when valid, the instructions retired since the
    /// last packet that tells where execution is (or the last TRIG).
    Trig { trbv: u8, ip: bool, mult: bool, icnt: Option<u16> },
}

/// Taken/not-taken outcomes, `count` of them, oldest in the highest bit:
/// outcome `i` (0 = oldest) is bit `count - 1 - i` of `bits`. The stop bit
/// of the encoding is not part of `bits`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tnt {
    pub bits: u64,
    pub count: u8,
}

impl Tnt {
    /// Whether the `i`-th oldest conditional branch was taken.
    pub fn taken(self, i: u8) -> bool {
        debug_assert!(i < self.count);
        self.bits >> (self.count - 1 - i) & 1 == 1
    }
}

/// The IP of a TIP, TIP.PGE, TIP.PGD or FUP: the compressed form as it was
/// in the packet, and the full IP rebuilt from it and the last IP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ip {
    pub compression: IpCompression,
    /// The payload bytes as a little-endian number (0 when suppressed).
    pub payload: u64,
    /// The reconstructed IP; `None` when suppressed.
    pub ip: Option<u64>,
}

/// How an IP packet's payload rebuilds the IP (the header's IPBytes field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpCompression {
    /// IPBytes 0: no IP (out of context); the last IP is unchanged.
    Suppressed,
    /// IPBytes 1: bits 15:0 replace the last IP's.
    Update16,
    /// IPBytes 2: bits 31:0 replace the last IP's.
    Update32,
    /// IPBytes 3: bits 47:0, sign-extended from bit 47.
    Sext48,
    /// IPBytes 4: bits 47:0 replace the last IP's; 63:48 are kept.
    Update48,
    /// IPBytes 6: the full 64-bit IP.
    Full,
}

impl IpCompression {
    /// The IPBytes field value (bits 7:5 of the header).
    pub fn ipbytes(self) -> u8 {
        match self {
            IpCompression::Suppressed => 0,
            IpCompression::Update16 => 1,
            IpCompression::Update32 => 2,
            IpCompression::Sext48 => 3,
            IpCompression::Update48 => 4,
            IpCompression::Full => 6,
        }
    }

    /// The compression of an IPBytes value; `None` for the reserved 5 and 7.
    pub fn from_ipbytes(ipbytes: u8) -> Option<IpCompression> {
        Some(match ipbytes {
            0 => IpCompression::Suppressed,
            1 => IpCompression::Update16,
            2 => IpCompression::Update32,
            3 => IpCompression::Sext48,
            4 => IpCompression::Update48,
            6 => IpCompression::Full,
            _ => return None,
        })
    }

    /// Payload bytes that follow the header.
    pub fn payload_len(self) -> usize {
        match self {
            IpCompression::Suppressed => 0,
            IpCompression::Update16 => 2,
            IpCompression::Update32 => 4,
            IpCompression::Sext48 | IpCompression::Update48 => 6,
            IpCompression::Full => 8,
        }
    }

    /// The IP that `payload` stands for after `last_ip`, or `None` when
    /// suppressed. `payload` must fit in [`payload_len`](Self::payload_len)
    /// bytes.
    pub fn apply(self, payload: u64, last_ip: u64) -> Option<u64> {
        Some(match self {
            IpCompression::Suppressed => return None,
            IpCompression::Update16 => last_ip & !0xffff | payload,
            IpCompression::Update32 => last_ip & !0xffff_ffff | payload,
            IpCompression::Sext48 => sext48(payload),
            IpCompression::Update48 => last_ip & !LOW48 | payload,
            IpCompression::Full => payload,
        })
    }
}

const LOW48: u64 = (1 << 48) - 1;

fn sext48(v: u64) -> u64 {
    ((v << 16) as i64 >> 16) as u64
}

/// The shortest form of `ip` after `last_ip`: a 16- or 32-bit update when the
/// upper bits are shared, else the 48-bit sign extension when `ip` is
/// canonical (it does not depend on the last IP), else a 48-bit update, else
/// the full IP.
pub fn compress_ip(ip: u64, last_ip: u64) -> Ip {
    let compression = if ip >> 16 == last_ip >> 16 {
        IpCompression::Update16
    } else if ip >> 32 == last_ip >> 32 {
        IpCompression::Update32
    } else if sext48(ip) == ip {
        IpCompression::Sext48
    } else if ip >> 48 == last_ip >> 48 {
        IpCompression::Update48
    } else {
        IpCompression::Full
    };
    let payload = match compression.payload_len() {
        8 => ip,
        n => ip & ((1 << (8 * n)) - 1),
    };
    Ip { compression, payload, ip: Some(ip) }
}

/// Payload size of a PTWRITE, and of the BIPs of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PayloadSize {
    Four,
    Eight,
}

impl PayloadSize {
    /// Payload bytes: 4 or 8.
    pub fn bytes(self) -> usize {
        match self {
            PayloadSize::Four => 4,
            PayloadSize::Eight => 8,
        }
    }
}

/// The kind of a [`Packet`], without its fields: for errors, statistics and
/// comparing with other decoders.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PacketKind {
    Pad,
    Psb,
    PsbEnd,
    Ovf,
    Stop,
    TntShort,
    TntLong,
    Tip,
    TipPge,
    TipPgd,
    Fup,
    ModeExec,
    ModeTsx,
    Pip,
    Tsc,
    Mtc,
    Cyc,
    Tma,
    Cbr,
    Vmcs,
    Mnt,
    Ptw,
    Exstop,
    Mwait,
    Pwre,
    Pwrx,
    Bbp,
    Bip,
    Bep,
    Cfe,
    Evd,
    Trig,
}

impl PacketKind {
    /// Every kind, in declaration order.
    pub const ALL: [PacketKind; 32] = [
        PacketKind::Pad,
        PacketKind::Psb,
        PacketKind::PsbEnd,
        PacketKind::Ovf,
        PacketKind::Stop,
        PacketKind::TntShort,
        PacketKind::TntLong,
        PacketKind::Tip,
        PacketKind::TipPge,
        PacketKind::TipPgd,
        PacketKind::Fup,
        PacketKind::ModeExec,
        PacketKind::ModeTsx,
        PacketKind::Pip,
        PacketKind::Tsc,
        PacketKind::Mtc,
        PacketKind::Cyc,
        PacketKind::Tma,
        PacketKind::Cbr,
        PacketKind::Vmcs,
        PacketKind::Mnt,
        PacketKind::Ptw,
        PacketKind::Exstop,
        PacketKind::Mwait,
        PacketKind::Pwre,
        PacketKind::Pwrx,
        PacketKind::Bbp,
        PacketKind::Bip,
        PacketKind::Bep,
        PacketKind::Cfe,
        PacketKind::Evd,
        PacketKind::Trig,
    ];

    /// The SDM's name of the packet (the two TNT sizes as `TNT8`/`TNT64`).
    pub fn name(self) -> &'static str {
        match self {
            PacketKind::Pad => "PAD",
            PacketKind::Psb => "PSB",
            PacketKind::PsbEnd => "PSBEND",
            PacketKind::Ovf => "OVF",
            PacketKind::Stop => "TraceStop",
            PacketKind::TntShort => "TNT8",
            PacketKind::TntLong => "TNT64",
            PacketKind::Tip => "TIP",
            PacketKind::TipPge => "TIP.PGE",
            PacketKind::TipPgd => "TIP.PGD",
            PacketKind::Fup => "FUP",
            PacketKind::ModeExec => "MODE.Exec",
            PacketKind::ModeTsx => "MODE.TSX",
            PacketKind::Pip => "PIP",
            PacketKind::Tsc => "TSC",
            PacketKind::Mtc => "MTC",
            PacketKind::Cyc => "CYC",
            PacketKind::Tma => "TMA",
            PacketKind::Cbr => "CBR",
            PacketKind::Vmcs => "VMCS",
            PacketKind::Mnt => "MNT",
            PacketKind::Ptw => "PTWRITE",
            PacketKind::Exstop => "EXSTOP",
            PacketKind::Mwait => "MWAIT",
            PacketKind::Pwre => "PWRE",
            PacketKind::Pwrx => "PWRX",
            PacketKind::Bbp => "BBP",
            PacketKind::Bip => "BIP",
            PacketKind::Bep => "BEP",
            PacketKind::Cfe => "CFE",
            PacketKind::Evd => "EVD",
            PacketKind::Trig => "TRIG",
        }
    }
}

impl std::fmt::Display for PacketKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Packet {
    /// The packet's kind, without its fields.
    pub fn kind(&self) -> PacketKind {
        match self {
            Packet::Pad => PacketKind::Pad,
            Packet::Psb => PacketKind::Psb,
            Packet::PsbEnd => PacketKind::PsbEnd,
            Packet::Ovf => PacketKind::Ovf,
            Packet::Stop => PacketKind::Stop,
            Packet::TntShort(_) => PacketKind::TntShort,
            Packet::TntLong(_) => PacketKind::TntLong,
            Packet::Tip(_) => PacketKind::Tip,
            Packet::TipPge(_) => PacketKind::TipPge,
            Packet::TipPgd(_) => PacketKind::TipPgd,
            Packet::Fup(_) => PacketKind::Fup,
            Packet::ModeExec { .. } => PacketKind::ModeExec,
            Packet::ModeTsx { .. } => PacketKind::ModeTsx,
            Packet::Pip { .. } => PacketKind::Pip,
            Packet::Tsc(_) => PacketKind::Tsc,
            Packet::Mtc(_) => PacketKind::Mtc,
            Packet::Cyc(_) => PacketKind::Cyc,
            Packet::Tma { .. } => PacketKind::Tma,
            Packet::Cbr(_) => PacketKind::Cbr,
            Packet::Vmcs(_) => PacketKind::Vmcs,
            Packet::Mnt(_) => PacketKind::Mnt,
            Packet::Ptw { .. } => PacketKind::Ptw,
            Packet::Exstop { .. } => PacketKind::Exstop,
            Packet::Mwait { .. } => PacketKind::Mwait,
            Packet::Pwre { .. } => PacketKind::Pwre,
            Packet::Pwrx { .. } => PacketKind::Pwrx,
            Packet::Bbp { .. } => PacketKind::Bbp,
            Packet::Bip { .. } => PacketKind::Bip,
            Packet::Bep { .. } => PacketKind::Bep,
            Packet::Cfe { .. } => PacketKind::Cfe,
            Packet::Evd { .. } => PacketKind::Evd,
            Packet::Trig { .. } => PacketKind::Trig,
        }
    }
}
