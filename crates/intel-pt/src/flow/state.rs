//! Everything a walk changes as it goes, in one value that a trial copies.

use isa::{BranchClass, Insn};

use super::clock::Clock;
use super::event::{FlowErrorKind, FlowEvent};
use super::packets::Packets;
use super::stack::ReturnStack;
use crate::{PacketDecoder, PacketError};
use codeimage::window::Time;

/// Where a walk is, for the never-ending-loop check: the IP, the offset of
/// the next packet and the TNT bits left. Without a packet consumed the
/// walk from here is the same each time.
pub(super) type Position = (u64, usize, u8);

/// A flow packet, the next one the walk will consume.
#[derive(Clone, Copy, Debug)]
pub(super) enum Flow {
    Tnt {
        bits: u64,
        count: u8,
    },
    Tip(Option<u64>),
    Pgd(Option<u64>),
    Fup(Option<u64>),
    /// A FUP that gives state packets before it their IP (MODE.TSX, a
    /// PTWRITE or EXSTOP with an IP, ...): they are reported when the walk
    /// reaches it. `shared`: it may also be the FUP of an asynchronous
    /// branch or disable, when a TIP or TIP.PGD follows it. `after`: they
    /// are the instruction's there (an IRET, a VM entry), reported after it.
    Bind {
        ip: Option<u64>,
        shared: bool,
        after: bool,
    },
}

/// Everything the walk changes: cheap to copy for trials.
#[derive(Clone)]
pub(crate) struct State<'a> {
    pub(super) packets: Packets<'a>,
    /// A scan ahead of the walk (up to `AHEAD` bytes), which asks the
    /// block cache to bring in the entries of the TIPs' targets before the
    /// walk reaches them.
    pub(super) ahead: PacketDecoder<'a>,
    pub(crate) ip: Option<u64>,
    pub(super) tnt_bits: u64,
    pub(super) tnt_count: u8,
    pub(super) stack: ReturnStack,
    /// When what is walked ran, as the timing packets read so far say.
    pub(super) clock: Clock,
    pub(super) peeked: Option<(usize, Flow)>,
    /// Instructions walked since the last packet was consumed.
    pub(super) walked: u64,
    /// Where the walk was at the never-ending-loop check's mark, and `walked` then.
    pub(super) loop_mark: (Position, u64),
    /// The IP of the last TIP.PGD taken (None when it had none).
    pub(super) pgd_ip: Option<u64>,
    /// An overflow was met: the next FUP says where tracing resumed.
    pub(super) after_ovf: bool,
    /// A decode error left the packets whole: the next TIP's target says
    /// where execution is.
    pub(super) after_error: bool,
    /// The EVD types (bit per type) read since the last CFE, which they
    /// give data to.
    pub(super) evd_types: u8,
    /// Where the walk last resumed after an error (a TIP's target, a PSB+'s FUP).
    pub(super) resumed_at: Option<u64>,
    /// Where this decoder's segment ends (the next segment's PSB): reaching
    /// it ends the run, without an event. Trials look past it.
    pub(super) stop_at: usize,
    /// Where the next segment's walk starts (its PSB+'s FUP), ahead on this
    /// walk's path: the run walks up to it before it ends.
    pub(super) tail_to: Option<u64>,
    /// In a trial, while its first instruction runs: that instruction and
    /// its IP, the content the PSB+ check follows there.
    pub(super) tried: Option<(u64, Insn)>,
    /// With state events on: the events of the packets read ahead of the
    /// walk, reported once the flow packet after them is taken (or the walk
    /// reaches the FUP they are bound to); the first `ready` may go now.
    pub(super) events: Vec<FlowEvent>,
    pub(super) ready: usize,
    /// State packets that belong to an instruction the walk has yet to
    /// run (a PIP to a MOV to CR3, a PTWRITE without IP to a PTWRITE):
    /// reported after it, the walk stepping until then.
    pub(super) held: Vec<FlowEvent>,
    /// TRIGs placed by an instruction count, each after that many
    /// instructions from the one before it (the first: from where the walk
    /// was when it was read): reported when the count runs out.
    pub(super) counted: Vec<(u16, FlowEvent)>,
    /// With state events: an overflow's event, reported where tracing
    /// resumes (after the state packets read up to there that need no IP).
    pub(super) overflow: Option<FlowEvent>,
    /// `events`, `held` or `counted` is not empty (one test on the walk's path).
    pub(super) pending: bool,
    /// Some of `events` wait for the FUP that gives their IP; `shared`:
    /// that FUP may be an asynchronous event's too.
    pub(super) awaiting_fup: Option<bool>,
    /// Where tracing stopped last, for [`FlowEvent::Enabled`]'s `resumed`.
    pub(super) last_disable: Option<u64>,
    /// The execution mode the last MODE.Exec gave, since the walk last
    /// started afresh (an overflow, or a wait for the next PSB).
    pub(super) mode: Option<ExecMode>,
    /// A PSB+ read whose FUP the walk cannot reach: the code on its way
    /// runs out first (see `Walker::psb_plus`).
    pub(super) dead_end: Option<DeadEnd>,
}

/// The execution mode a MODE.Exec gives (its CS.L and CS.D bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ExecMode {
    Bits16,
    Bits32,
    Bits64,
}

impl ExecMode {
    pub(super) fn of(csl: bool, csd: bool) -> ExecMode {
        match (csl, csd) {
            (true, _) => ExecMode::Bits64,
            (false, true) => ExecMode::Bits32,
            (false, false) => ExecMode::Bits16,
        }
    }
}

/// Where the walk runs out of code (no code, or bytes that are no
/// instruction, at `at`) before it reaches the FUP of a PSB+ it has read:
/// the error is there, placed at that PSB+'s PSBEND (`psbend`), and the
/// walk goes on at the FUP, `fup`.
#[derive(Clone, Copy, Debug)]
pub(super) struct DeadEnd {
    pub at: u64,
    pub psbend: usize,
    pub fup: u64,
}

/// Why the walk stopped: an error at `offset`, or the end of its segment
/// ([`SEGMENT_END`]).
pub(crate) struct Failure {
    pub(super) offset: usize,
    pub(super) kind: FlowErrorKind,
}

/// A [`Failure`]'s offset when the walk reached the end of its segment.
pub(super) const SEGMENT_END: usize = usize::MAX;

/// A [`Failure`]'s offset when a TIP.PGD came where a conditional branch
/// needed a TNT: tracing stopped at that branch (no error).
pub(super) const DISABLED_AT_BRANCH: usize = usize::MAX - 1;

pub(super) fn packet_failure(e: PacketError) -> Failure {
    Failure { offset: e.offset, kind: FlowErrorKind::Packet(e.kind) }
}

impl<'a> State<'a> {
    /// A walk over `buf` from its start, not yet tracing; `stop_at`: where
    /// its segment ends (`usize::MAX`: at the end of `buf`).
    pub(crate) fn new(buf: &'a [u8], stop_at: usize) -> Self {
        State {
            packets: Packets { dec: PacketDecoder::new(buf) },
            ahead: PacketDecoder::new(buf),
            ip: None,
            tnt_bits: 0,
            tnt_count: 0,
            stack: ReturnStack::default(),
            clock: Clock::new(),
            peeked: None,
            walked: 0,
            loop_mark: ((0, 0, 0), 0),
            pgd_ip: None,
            after_ovf: false,
            after_error: false,
            evd_types: 0,
            resumed_at: None,
            stop_at,
            tail_to: None,
            tried: None,
            events: Vec::new(),
            ready: 0,
            held: Vec::new(),
            counted: Vec::new(),
            overflow: None,
            pending: false,
            awaiting_fup: None,
            last_disable: None,
            mode: None,
            dead_end: None,
        }
    }

    /// Whether any event waits to be reported.
    pub(super) fn any_pending(&self) -> bool {
        !self.events.is_empty() || !self.held.is_empty() || !self.counted.is_empty() || self.overflow.is_some()
    }

    /// Where an error of the walk is (as libipt places it): at the TIP or
    /// FUP of state packets it has yet to take; past a TNT, TIP.PGD or
    /// another FUP peeked (their bits and events are read ahead of the
    /// walk) and any other packet read; at the PSBEND of a PSB+ whose FUP
    /// the walk was on its way to (its status taken, nothing read after).
    #[cold]
    pub(super) fn error_offset(&self) -> usize {
        if let Some(d) = self.dead_end.filter(|d| self.ip == Some(d.at)) {
            return d.psbend;
        }
        match self.peeked {
            Some((at, Flow::Tip(_) | Flow::Bind { .. })) => at,
            _ => self.packets.offset(),
        }
    }

    /// Takes the peeked flow packet: what follows it ran after the timing
    /// packets before it.
    #[inline(always)]
    pub(super) fn take_peeked(&mut self) -> Option<(usize, Flow)> {
        let p = self.peeked.take();
        if p.is_some() {
            self.clock.lo = self.clock.now;
        }
        p
    }

    /// The earliest an instruction of `class` at the walk's position ran:
    /// with no TNT bit left, after the timing packets before the peeked
    /// flow packet when it takes that packet.
    #[inline(always)]
    pub(super) fn packet_lo(&self, class: BranchClass) -> Time {
        let takes = matches!(
            class,
            BranchClass::CondBranch | BranchClass::IndirectJump | BranchClass::IndirectCall | BranchClass::Return | BranchClass::FarTransfer
        );
        if takes && self.tnt_count == 0 && self.peeked.is_some() {
            self.clock.now
        } else {
            self.clock.lo
        }
    }
}
