//! What the flow decoder reports: its events, the sinks they go to, and
//! the runs of instructions the decoded-block cache hands over whole.

use isa::{BranchClass, Insn};

use crate::blocks::{Block, CALL, CLASSES, JUMP};
use codeimage::window::Time;

use crate::Packet;

/// What the decoder reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowEvent {
    /// An executed instruction, run within `[lo, hi]`; `uncertain` when
    /// several code contents fit the trace; `code`, the bytes it was decoded from.
    Insn { ip: u64, len: u8, class: BranchClass, lo: Time, hi: Time, uncertain: bool, code: InsnCode },
    /// The instruction at `from` trapped (INT3, a kprobe or a site being
    /// poked) or was interrupted, into the handler at `to`. The trapping
    /// instruction is reported here, not as an [`FlowEvent::Insn`]; `insn`,
    /// that instruction as the walk decoded it (none after an error).
    Trap { from: u64, to: u64, time: Time, insn: Option<EventInsn> },
    /// Tracing stopped before the instruction at `at` (when known): by a
    /// TIP.PGD when `disabled` (`to` is its IP, when the packet carries one),
    /// else because the trace data ended; `insn`, the instruction at `at`
    /// when the walk decoded it.
    End { time: Time, at: Option<u64>, disabled: bool, to: Option<u64>, insn: Option<EventInsn> },
    /// The trace and the code disagree; decoding resumes at the next TIP's
    /// target (after a bad packet, at the next PSB; after an overflow, at
    /// the FUP that follows it; after a PSB+ whose FUP the walk does not
    /// reach, at that FUP).
    Error { offset: usize, time: Time, ip: Option<u64>, kind: FlowErrorKind },
    /// Tracing started at `ip` (a TIP.PGE); `resumed` when where it last
    /// stopped (libipt's "resumed"). Only with [`super::FlowDecoder::with_state_events`].
    Enabled { time: Time, ip: u64, resumed: bool },
    /// A packet that tells the processor's state rather than where execution
    /// went (MODE.Exec, MODE.TSX, PIP, VMCS, CBR, MNT, PTWRITE, EXSTOP,
    /// MWAIT, PWRE, PWRX, TraceStop, TRIG, and the event trace's CFE and EVD), in the order of the instructions: at
    /// `ip`, the IP of the FUP it is bound to, when it has one; `restated`
    /// when a PSB+ repeats the state. Only with
    /// [`super::FlowDecoder::with_state_events`]; the timing packets too
    /// with [`super::FlowDecoder::with_timing_events`].
    State { time: Time, ip: Option<u64>, packet: Packet, restated: bool },
}

/// The instruction at an event's IP, as the walk decoded it before the
/// event stopped it: its length and the bytes it was decoded from, where
/// [`InsnCode::Exact`] is the code source's content at the event's `time`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventInsn {
    pub len: u8,
    pub code: InsnCode,
}

/// The bytes an instruction was decoded from, or where the decoder's code
/// source gives them again: read when a line shows them, not per instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsnCode {
    /// What the code source's `fetch` gives at the instruction's IP for
    /// the event's `[lo, hi]`: the one content there over that window.
    /// (Read at `lo`, [`codeimage::window::PerfStyle`] read an instruction
    /// that takes a flow packet at the walk's time before the timing
    /// packets that precede the packet, where the event's `lo` is theirs.)
    Exact,
    /// These bytes (the instruction's length of them): the content the
    /// trace chose among several the code had over the window.
    Chosen([u8; 15]),
}

impl InsnCode {
    /// The chosen content `bytes` (its first 15: the longest instruction).
    pub(crate) fn chosen(bytes: &[u8; 16]) -> InsnCode {
        let mut b = [0u8; 15];
        b.copy_from_slice(&bytes[..15]);
        InsnCode::Chosen(b)
    }
}

/// Where a decoder's events go. A closure taking [`FlowEvent`]s is one. A
/// sink that takes cached runs of instructions whole ([`FlowSink::block`])
/// spares the decoder an event per instruction, as libipt's block decoder
/// spares its users; instructions then come both ways, in order.
pub trait FlowSink {
    fn event(&mut self, event: FlowEvent);

    /// Instructions that ran one after the other without needing the trace,
    /// none uncertain. By default each is passed on as a [`FlowEvent::Insn`].
    #[inline(always)]
    fn block(&mut self, block: InsnBlock<'_>) {
        block.for_each_insn(|e| self.event(e));
    }

    /// With timing events on ([`super::FlowDecoder::with_timing_events`]):
    /// the events of every packet read up to the flow packet the walk last
    /// took have been reported; those of the packets after it are to come.
    #[inline(always)]
    fn caught_up(&mut self) {}
}

impl<F: FnMut(FlowEvent)> FlowSink for F {
    #[inline(always)]
    fn event(&mut self, event: FlowEvent) {
        self(event)
    }
}

/// A run of instructions from the decoded-block cache: the first falls
/// through, jumps or calls directly to the next, and so on up to the last,
/// which may branch; all ran within `[lo, hi]`, the last within
/// `[last_lo, hi]`. Borrowed from the cache for the call to
/// [`FlowSink::block`].
#[derive(Clone, Copy, Debug)]
pub struct InsnBlock<'c> {
    /// The first instruction's IP.
    pub ip: u64,
    /// The last instruction's IP.
    pub last_ip: u64,
    pub lo: Time,
    /// When the last instruction takes the next flow packet, the time of
    /// the timing packets before it (the others may have run before them);
    /// else `lo`.
    pub last_lo: Time,
    pub hi: Time,
    /// Each instruction before the last: its length in bits 0-3, what it
    /// is above (the encoding of `crate::blocks`).
    lens: &'c [u8],
    /// The targets of the jumps and calls among them, in order.
    targets: &'c [u64],
    last: Insn,
    /// The cache entry it comes from, which a recording copies.
    entry: &'c Block,
}

impl<'c> InsnBlock<'c> {
    /// Block `entry` run within `[lo, hi]` (its last within `[last_lo,
    /// hi]`), its instructions before the last and their targets as `lens`
    /// and `targets` (from the arenas of the cache or recording that holds it).
    #[inline(always)]
    pub(crate) fn new(entry: &'c Block, (lo, last_lo, hi): (Time, Time, Time), (lens, targets): (&'c [u8], &'c [u64])) -> Self {
        InsnBlock { ip: entry.start, last_ip: entry.last_ip(), lo, last_lo, hi, lens, targets, last: entry.last(), entry }
    }

    /// The cache entry, and the instruction bytes and targets it refers to.
    #[inline(always)]
    pub(crate) fn parts(&self) -> (&'c Block, &'c [u8], &'c [u64]) {
        (self.entry, self.lens, self.targets)
    }

    /// How many instructions (from the entry: no arena read).
    #[inline(always)]
    pub fn len(&self) -> usize {
        usize::from(self.entry.count)
    }

    /// Where the last instruction falls through to (its IP plus its length).
    #[inline(always)]
    pub fn fall(&self) -> u64 {
        self.entry.fall
    }

    /// Never: a block has at least its last instruction.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The last instruction (its length, class and direct target).
    pub fn last(&self) -> Insn {
        self.last
    }

    /// Whether an instruction before the last is a direct jump or call (so
    /// the block is not one straight run of addresses).
    pub fn has_inner_branches(&self) -> bool {
        !self.targets.is_empty()
    }

    /// How many instructions before the last are direct jumps, and how
    /// many direct calls (each taken: the block goes on at its target).
    /// (Counted when the block was cached: this reads its entry alone.)
    #[inline(always)]
    pub fn inner_jumps_and_calls(&self) -> (usize, usize) {
        self.entry.inner_jumps_and_calls()
    }

    /// Each jump and call before the last instruction, in order, as
    /// `f(ip, target)` (the block goes on at the target): what
    /// [`Self::for_each_insn`] gives of them, without an event for each
    /// instruction.
    #[inline(always)]
    pub fn for_each_inner_branch(&self, mut f: impl FnMut(u64, u64)) {
        let (mut at, mut targets) = (self.ip, self.targets.iter());
        for &l in self.lens {
            at = match l & !15 {
                JUMP | CALL => {
                    let to = *targets.next().expect("a target per jump or call");
                    f(at, to);
                    to
                }
                _ => at.wrapping_add((l & 15) as u64),
            };
        }
    }

    /// Each instruction in order, as the [`FlowEvent::Insn`] stepping
    /// would give.
    #[inline(always)]
    pub fn for_each_insn(&self, mut f: impl FnMut(FlowEvent)) {
        let (lo, hi) = (self.lo, self.hi);
        let code = InsnCode::Exact;
        let mut at = self.ip;
        if self.targets.is_empty() {
            // One straight run: no jump or call before the last instruction.
            for &l in self.lens {
                let len = l & 15;
                f(FlowEvent::Insn { ip: at, len, class: CLASSES[(l >> 4) as usize & 1], lo, hi, uncertain: false, code });
                at = at.wrapping_add(len as u64);
            }
        } else {
            let mut targets = self.targets.iter();
            for &l in self.lens {
                let len = l & 15;
                f(FlowEvent::Insn { ip: at, len, class: CLASSES[(l >> 4) as usize & 3], lo, hi, uncertain: false, code });
                at = match l & !15 {
                    JUMP | CALL => *targets.next().expect("a target per jump or call"),
                    _ => at.wrapping_add(len as u64),
                };
            }
        }
        f(FlowEvent::Insn { ip: self.last_ip, len: self.last.len, class: self.last.class, lo: self.last_lo, hi, uncertain: false, code });
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowErrorKind {
    Packet(crate::PacketErrorKind),
    /// A conditional branch, but the next flow packet is not a TNT.
    NoTnt,
    /// An indirect branch or far transfer, but the next flow packet is not a TIP.
    NoTip,
    /// A trap without its FUP and TIP.
    NoTrapPackets,
    /// No code at the IP.
    Unmapped,
    /// Bytes that are not an instruction.
    BadInsn,
    /// A never-ending loop: the walk came back where it was without using
    /// a packet, or walked `max_walk` instructions without one (perf's
    /// "Never-ending loop").
    NoProgress,
    /// The trace ended while the decoder needed more.
    EndOfTrace,
    /// An overflow packet: the processor lost trace.
    Overflow,
    /// A packet where the packets before it do not allow it (event data
    /// for a control flow event of another kind).
    BadContext,
    /// A PSB+ met while walking says execution is at `fup` (`None`: tracing
    /// off), which the walk does not reach before it needs a packet.
    PsbMismatch {
        fup: Option<u64>,
    },
    /// A PSB+ met while walking restates another execution mode than the
    /// trace gave before (its MODE.Exec), at `fup`: packets were lost, or
    /// the trace is damaged.
    ModeMismatch {
        fup: Option<u64>,
    },
}

impl FlowErrorKind {
    pub fn describe(&self) -> String {
        match self {
            FlowErrorKind::Packet(k) => format!("bad packet: {k}"),
            FlowErrorKind::NoTnt => "conditional branch but no TNT".into(),
            FlowErrorKind::NoTip => "indirect branch but no TIP".into(),
            FlowErrorKind::NoTrapPackets => "trap without FUP/TIP".into(),
            FlowErrorKind::Unmapped => "no code at this address".into(),
            FlowErrorKind::BadInsn => "invalid instruction".into(),
            FlowErrorKind::NoProgress => "never-ending loop: the walk needs no packet to go on".into(),
            FlowErrorKind::EndOfTrace => "trace ended".into(),
            FlowErrorKind::Overflow => "overflow: trace lost".into(),
            FlowErrorKind::BadContext => "packet out of context".into(),
            FlowErrorKind::PsbMismatch { fup: Some(ip) } => format!("PSB+ says execution is at {ip:#x}, off the walk's path"),
            FlowErrorKind::PsbMismatch { fup: None } => "PSB+ says tracing is off, but the walk is tracing".into(),
            FlowErrorKind::ModeMismatch { .. } => "PSB+ restates another execution mode than the trace gave".into(),
        }
    }
}
