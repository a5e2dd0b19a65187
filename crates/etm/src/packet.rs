//! ETMv4 instruction-trace packets as plain values.
//!
//! A [`Packet`] carries what its bytes say, with compressed fields already
//! expanded the way the protocol defines: addresses are full values (short
//! and exact-match forms resolved against the address history), timestamps
//! are the full value after merging the updated low bits, cycle counts include
//! the TRACE_INFO threshold. Errors found in the byte stream are packets too
//! ([`Packet::BadSequence`], [`Packet::Reserved`], ...), so that they keep
//! their place and byte offset in the stream.

/// Every packet kind, named as OpenCSD names them (`I_ATOM_F1`, ...), with no
/// payload: what a header byte announces, and what an error packet was
/// decoding when it went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketType {
    NotSync,
    IncompleteEot,
    BadSequence,
    Reserved,
    ReservedCfg,
    Extension,
    Async,
    Discard,
    Overflow,
    TraceInfo,
    Timestamp,
    TraceOn,
    FuncRet,
    Exception,
    ExceptionReturn,
    CcntF1,
    CcntF2,
    CcntF3,
    NumDsMkr,
    UnnumDsMkr,
    Commit,
    CancelF1,
    CancelF1Mispred,
    Mispredict,
    CancelF2,
    CancelF3,
    CondIF1,
    CondIF2,
    CondIF3,
    CondFlush,
    CondResF1,
    CondResF2,
    CondResF3,
    CondResF4,
    Ignore,
    Event,
    Context,
    AddrCtxtL32Is0,
    AddrCtxtL32Is1,
    AddrCtxtL64Is0,
    AddrCtxtL64Is1,
    AddrMatch,
    AddrSIs0,
    AddrSIs1,
    AddrL32Is0,
    AddrL32Is1,
    AddrL64Is0,
    AddrL64Is1,
    Q,
    AtomF1,
    AtomF2,
    AtomF3,
    AtomF4,
    AtomF5,
    AtomF6,
}

impl PacketType {
    /// OpenCSD's name (`trc_pkt_lister` prints it), e.g. `I_ADDR_L_64IS0`.
    pub fn name(self) -> &'static str {
        self.strings().0
    }

    /// OpenCSD's one-line description, e.g. `Address, Long, 64 bit, IS0.`.
    pub fn description(self) -> &'static str {
        self.strings().1
    }

    fn strings(self) -> (&'static str, &'static str) {
        use PacketType::*;
        match self {
            NotSync => ("I_NOT_SYNC", "I Stream not synchronised"),
            IncompleteEot => ("I_INCOMPLETE_EOT", "Incomplete packet at end of trace."),
            BadSequence => ("I_BAD_SEQUENCE", "Invalid Sequence in packet."),
            Reserved => ("I_RESERVED", "Reserved Packet Header"),
            ReservedCfg => ("I_RESERVED_CFG", "Reserved header for current configuration."),
            Extension => ("I_EXTENSION", "Extension packet header."),
            Async => ("I_ASYNC", "Alignment Synchronisation."),
            Discard => ("I_DISCARD", "Discard."),
            Overflow => ("I_OVERFLOW", "Overflow."),
            TraceInfo => ("I_TRACE_INFO", "Trace Info."),
            Timestamp => ("I_TIMESTAMP", "Timestamp."),
            TraceOn => ("I_TRACE_ON", "Trace On."),
            FuncRet => ("I_FUNC_RET", "V8M - function return."),
            Exception => ("I_EXCEPT", "Exception."),
            ExceptionReturn => ("I_EXCEPT_RTN", "Exception Return."),
            CcntF1 => ("I_CCNT_F1", "Cycle Count format 1."),
            CcntF2 => ("I_CCNT_F2", "Cycle Count format 2."),
            CcntF3 => ("I_CCNT_F3", "Cycle Count format 3."),
            NumDsMkr => ("I_NUM_DS_MKR", "Data Synchronisation Marker - Numbered."),
            UnnumDsMkr => ("I_UNNUM_DS_MKR", "Data Synchronisation Marker - Unnumbered."),
            Commit => ("I_COMMIT", "Commit"),
            CancelF1 => ("I_CANCEL_F1", "Cancel Format 1."),
            CancelF1Mispred => ("I_CANCEL_F1_MISPRED", "Cancel Format 1 + Mispredict."),
            Mispredict => ("I_MISPREDICT", "Mispredict."),
            CancelF2 => ("I_CANCEL_F2", "Cancel Format 2."),
            CancelF3 => ("I_CANCEL_F3", "Cancel Format 3."),
            CondIF1 => ("I_COND_I_F1", "Conditional Instruction, format 1."),
            CondIF2 => ("I_COND_I_F2", "Conditional Instruction, format 2."),
            CondIF3 => ("I_COND_I_F3", "Conditional Instruction, format 3."),
            CondFlush => ("I_COND_FLUSH", "Conditional Flush."),
            CondResF1 => ("I_COND_RES_F1", "Conditional Result, format 1."),
            CondResF2 => ("I_COND_RES_F2", "Conditional Result, format 2."),
            CondResF3 => ("I_COND_RES_F3", "Conditional Result, format 3."),
            CondResF4 => ("I_COND_RES_F4", "Conditional Result, format 4."),
            Ignore => ("I_IGNORE", "Ignore."),
            Event => ("I_EVENT", "Trace Event."),
            Context => ("I_CTXT", "Context Packet."),
            // OpenCSD's text says IS0 for the IS1 form too; kept so lines diff cleanly.
            AddrCtxtL32Is0 | AddrCtxtL32Is1 => {
                (if self == AddrCtxtL32Is0 { "I_ADDR_CTXT_L_32IS0" } else { "I_ADDR_CTXT_L_32IS1" }, "Address & Context, Long, 32 bit, IS0.")
            }
            AddrCtxtL64Is0 => ("I_ADDR_CTXT_L_64IS0", "Address & Context, Long, 64 bit, IS0."),
            AddrCtxtL64Is1 => ("I_ADDR_CTXT_L_64IS1", "Address & Context, Long, 64 bit, IS1."),
            AddrMatch => ("I_ADDR_MATCH", "Exact Address Match."),
            AddrSIs0 => ("I_ADDR_S_IS0", "Address, Short, IS0."),
            AddrSIs1 => ("I_ADDR_S_IS1", "Address, Short, IS1."),
            AddrL32Is0 => ("I_ADDR_L_32IS0", "Address, Long, 32 bit, IS0."),
            AddrL32Is1 => ("I_ADDR_L_32IS1", "Address, Long, 32 bit, IS1."),
            AddrL64Is0 => ("I_ADDR_L_64IS0", "Address, Long, 64 bit, IS0."),
            AddrL64Is1 => ("I_ADDR_L_64IS1", "Address, Long, 64 bit, IS1."),
            Q => ("I_Q", "Q Packet."),
            AtomF1 => ("I_ATOM_F1", "Atom format 1."),
            AtomF2 => ("I_ATOM_F2", "Atom format 2."),
            AtomF3 => ("I_ATOM_F3", "Atom format 3."),
            AtomF4 => ("I_ATOM_F4", "Atom format 4."),
            AtomF5 => ("I_ATOM_F5", "Atom format 5."),
            AtomF6 => ("I_ATOM_F6", "Atom format 6."),
        }
    }
}

/// A run of atoms, oldest first: bit `i` of `bits` is atom `i`, 1 = E
/// (executed / taken), 0 = N (not executed / not taken).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Atoms {
    pub bits: u32,
    pub count: u8,
}

impl Atoms {
    pub fn new(bits: u32, count: u8) -> Atoms {
        Atoms { bits, count }
    }

    /// Atom `i` (0 = oldest): true for E.
    pub fn get(&self, i: u8) -> bool {
        i < self.count && (self.bits >> i) & 1 == 1
    }

    /// The atoms oldest first, true for E.
    pub fn iter(&self) -> impl Iterator<Item = bool> + '_ {
        (0..self.count).map(move |i| self.get(i))
    }
}

/// How an address packet encodes its address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddrForm {
    /// Low 9 or 17 bits (IS0) / 8 or 16 bits (IS1), the rest from the last address.
    Short,
    /// Low 32 bits; the upper half from the last address when the PE is in AArch64.
    Long32,
    Long64,
}

/// An address register value after an address packet (or, for exact
/// matches, the history entry the packet names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Address {
    /// The full address.
    pub value: u64,
    /// Instruction set: 0 = A64/A32 (4-byte aligned), 1 = T32 (2-byte aligned).
    pub is: u8,
    pub form: AddrForm,
    /// Low bits this packet carried (9/17, 8/16, 32 or 64).
    pub update_bits: u8,
    /// Low bits of `value` known since the last synchronisation.
    pub valid_bits: u8,
    /// Whether the address is a 64-bit one (AArch64 context or a 64-bit packet).
    pub is64: bool,
}

/// PE context carried by context and address-with-context packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Context {
    /// Exception level 0..=3.
    pub el: u8,
    /// AArch64 (SF bit).
    pub aarch64: bool,
    /// Non-secure state (NS bit).
    pub non_secure: bool,
    pub vmid: Option<u32>,
    pub context_id: Option<u32>,
}

/// TRACE_INFO: the trace configuration in force from here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TraceInfo {
    /// The INFO field (0 when absent): bit 0 cycle counting, bits 3:1
    /// conditional tracing, bit 4 load P0 elements, bit 5 store P0 elements.
    pub info: u32,
    pub p0_key: Option<u32>,
    /// Current speculation depth (0 when absent).
    pub spec_depth: u32,
    /// Cycle count threshold, when the packet has one.
    pub cc_threshold: Option<u32>,
    /// The fifth section (PLCTL bit 4, ETE's speculation window): ETMv4
    /// sources leave it out, but OpenCSD reads it, so its length counts.
    pub window: Option<u32>,
}

impl TraceInfo {
    pub fn cycle_counting(&self) -> bool {
        self.info & 1 == 1
    }
}

/// TIMESTAMP, optionally with the cycle count since the last one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Timestamp {
    /// The full timestamp after merging this packet's low bits.
    pub value: u64,
    /// Low bits this packet updated (7 per byte; 64 for a 9-byte field).
    pub updated_bits: u8,
    pub cycle_count: Option<u32>,
}

/// EXCEPTION: the exception taken; its preferred return address follows in an address packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Exception {
    /// Exception type number (A/R profile: 0..=31; M profile: up to 10 bits).
    pub number: u16,
    /// Address interpretation E1:E0: 1 = return address follows, 2 = follows and matches the previous.
    pub addr_interp: u8,
    /// M profile: fault pending bit.
    pub fault_pending: bool,
    /// Whether the source is an M-profile PE (changes the type names).
    pub m_profile: bool,
}

/// Cycle count packets, formats 1 to 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CycleCount {
    pub format: u8,
    /// Cycles (threshold included); None when format 1 says the count is unknown.
    pub count: Option<u32>,
    /// P0 elements committed; None when TRCIDR0.COMMOPT makes the packet carry none.
    pub commit: Option<u32>,
}

/// Q packet: instructions executed without individual tracing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QPacket {
    /// The header's low nibble (0-2 exact match, 5/6 short, A/B long, C count only, F neither).
    pub qtype: u8,
    pub count: Option<u32>,
    pub addr: QAddress,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QAddress {
    None,
    ExactMatch { index: u8, addr: Address },
    Address(Address),
}

/// Conditional instruction packets (recognised; no flow decoder uses them yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CondInstr {
    F1 { key: u32 },
    F2 { code: u8 },
    F3 { count: u8, final_elem: bool },
}

/// Conditional result packets (recognised; no flow decoder uses them yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CondResult {
    /// One or two (key, result) pairs.
    F1 {
        results: [Option<(u32, u8)>; 2],
        ci: [bool; 2],
    },
    F2 {
        key_incr: u8,
        token: u8,
    },
    F3 {
        tokens: u16,
    },
    F4 {
        token: u8,
    },
}

/// One decoded packet. See the module documentation for what is resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Packet {
    /// Bytes skipped while looking for an A-sync (raw bytes are the skipped
    /// ones). `in_async`: a zero byte dropped from the front of a run of
    /// zeros longer than an A-sync; OpenCSD names such a piece I_ASYNC.
    NotSync {
        in_async: bool,
    },
    Async,
    Discard,
    Overflow,
    TraceInfo(TraceInfo),
    Timestamp(Timestamp),
    TraceOn,
    /// v8-M function return.
    FunctionReturn,
    Exception(Exception),
    ExceptionReturn,
    CycleCount(CycleCount),
    /// Data synchronisation marker (numbered or unnumbered) and its 3-bit value.
    DataSync {
        numbered: bool,
        value: u8,
    },
    Commit(u32),
    /// Cancel format 1: `count` P0 elements cancelled, optionally with a mispredict.
    CancelF1 {
        count: u32,
        mispredict: bool,
    },
    /// Mispredict with 0 to 2 atoms.
    Mispredict(Atoms),
    /// Cancel 1 element, mispredict, then 0 to 2 atoms.
    CancelF2(Atoms),
    /// Cancel `count` (2..=5) elements, mispredict, then optionally one E atom.
    CancelF3 {
        e_atom: bool,
        count: u8,
    },
    CondInstr(CondInstr),
    CondFlush,
    CondResult(CondResult),
    Ignore,
    Event(u8),
    /// Context; None for the one-byte form (context unchanged).
    Context(Option<Context>),
    Address(Address),
    AddressContext(Address, Context),
    /// Exact match: the address is history entry `index` (0 = most recent).
    ExactMatch {
        index: u8,
        addr: Address,
    },
    Q(QPacket),
    /// Atom packet of `format` 1..=6.
    Atom {
        format: u8,
        atoms: Atoms,
    },
    /// A header byte with no meaning in ETMv4.
    Reserved {
        header: u8,
    },
    /// A header this source's configuration does not produce (e.g. data trace markers when data trace is off).
    ReservedConfig {
        header: u8,
        would_be: PacketType,
    },
    /// Bytes that break the packet they began; `during` is the packet being decoded.
    BadSequence {
        during: PacketType,
    },
    /// The trace ended inside a packet.
    IncompleteEot {
        during: PacketType,
    },
}

impl Packet {
    /// The packet's kind (and so its OpenCSD name).
    pub fn packet_type(&self) -> PacketType {
        use PacketType as T;
        match *self {
            Packet::NotSync { in_async: false } => T::NotSync,
            Packet::NotSync { in_async: true } => T::Async,
            Packet::Async => T::Async,
            Packet::Discard => T::Discard,
            Packet::Overflow => T::Overflow,
            Packet::TraceInfo(_) => T::TraceInfo,
            Packet::Timestamp(_) => T::Timestamp,
            Packet::TraceOn => T::TraceOn,
            Packet::FunctionReturn => T::FuncRet,
            Packet::Exception(_) => T::Exception,
            Packet::ExceptionReturn => T::ExceptionReturn,
            Packet::CycleCount(c) => match c.format {
                1 => T::CcntF1,
                2 => T::CcntF2,
                _ => T::CcntF3,
            },
            Packet::DataSync { numbered: true, .. } => T::NumDsMkr,
            Packet::DataSync { numbered: false, .. } => T::UnnumDsMkr,
            Packet::Commit(_) => T::Commit,
            Packet::CancelF1 { mispredict: false, .. } => T::CancelF1,
            Packet::CancelF1 { mispredict: true, .. } => T::CancelF1Mispred,
            Packet::Mispredict(_) => T::Mispredict,
            Packet::CancelF2(_) => T::CancelF2,
            Packet::CancelF3 { .. } => T::CancelF3,
            Packet::CondInstr(CondInstr::F1 { .. }) => T::CondIF1,
            Packet::CondInstr(CondInstr::F2 { .. }) => T::CondIF2,
            Packet::CondInstr(CondInstr::F3 { .. }) => T::CondIF3,
            Packet::CondFlush => T::CondFlush,
            Packet::CondResult(CondResult::F1 { .. }) => T::CondResF1,
            Packet::CondResult(CondResult::F2 { .. }) => T::CondResF2,
            Packet::CondResult(CondResult::F3 { .. }) => T::CondResF3,
            Packet::CondResult(CondResult::F4 { .. }) => T::CondResF4,
            Packet::Ignore => T::Ignore,
            Packet::Event(_) => T::Event,
            Packet::Context(_) => T::Context,
            Packet::Address(a) => match (a.form, a.is) {
                (AddrForm::Short, 0) => T::AddrSIs0,
                (AddrForm::Short, _) => T::AddrSIs1,
                (AddrForm::Long32, 0) => T::AddrL32Is0,
                (AddrForm::Long32, _) => T::AddrL32Is1,
                (AddrForm::Long64, 0) => T::AddrL64Is0,
                (AddrForm::Long64, _) => T::AddrL64Is1,
            },
            Packet::AddressContext(a, _) => match (a.form, a.is) {
                (AddrForm::Long64, 0) => T::AddrCtxtL64Is0,
                (AddrForm::Long64, _) => T::AddrCtxtL64Is1,
                (_, 0) => T::AddrCtxtL32Is0,
                (_, _) => T::AddrCtxtL32Is1,
            },
            Packet::ExactMatch { .. } => T::AddrMatch,
            Packet::Q(_) => T::Q,
            Packet::Atom { format, .. } => match format {
                1 => T::AtomF1,
                2 => T::AtomF2,
                3 => T::AtomF3,
                4 => T::AtomF4,
                5 => T::AtomF5,
                _ => T::AtomF6,
            },
            Packet::Reserved { .. } => T::Reserved,
            Packet::ReservedConfig { .. } => T::ReservedCfg,
            Packet::BadSequence { .. } => T::BadSequence,
            Packet::IncompleteEot { .. } => T::IncompleteEot,
        }
    }

    /// Whether the packet reports bad or missing trace rather than trace.
    pub fn is_error(&self) -> bool {
        matches!(self, Packet::Reserved { .. } | Packet::ReservedConfig { .. } | Packet::BadSequence { .. } | Packet::IncompleteEot { .. })
    }
}
