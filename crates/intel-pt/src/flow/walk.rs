//! The walk: from the last known IP through the code, an instruction at a
//! time, each branch taking the packet it needs (a TNT bit, a TIP), and
//! the driver of a run's steps ([`Walker::turn`]).

use std::cell::Cell;

use isa::{BranchClass, Insn};

use super::clock::Timing;
use super::config::{AddrFilter, Errata, FlowConfig, Recovery};
use super::event::{EventInsn, FlowErrorKind, FlowEvent, FlowSink, InsnCode};
use super::state::{Failure, Flow, State, DISABLED_AT_BRANCH};
use crate::blocks::BlockCache;
use crate::Packet;
use codeimage::window::{CodeSource, Fetch, Time};

/// What a walk reads and how: the code, the trace's configuration and the
/// decoder's settings. It changes nothing but `last_run` (a hint); what a
/// walk changes is in its [`State`].
pub(crate) struct Walker<'a, C: CodeSource> {
    pub(super) code: &'a C,
    pub(super) cfg: FlowConfig,
    pub(super) timing: Timing,
    pub(super) recovery: Recovery,
    /// Whether to find each instruction's `hi`, unless told otherwise.
    pub(super) upper_bounds: bool,
    /// Whether to report state packets and TIP.PGEs (`FlowEvent::State`, `FlowEvent::Enabled`).
    pub(super) state_events: bool,
    /// Whether to report timing packets too (`FlowEvent::State`), with state events.
    pub(super) timing_events: bool,
    /// Whether a TNT where a TIP is needed may come before that TIP.
    pub(super) deferred_tips: bool,
    /// The trace's address filter, when known.
    pub(super) filter: Option<AddrFilter>,
    pub(super) errata: Errata,
    /// Instructions walked without a packet before the walk checks for a
    /// never-ending loop at each one (`loops`).
    pub(super) loop_from: u64,
    /// The last run of code [`CodeSource::code_run`] gave (its start, bytes
    /// and window), which the next block built reads from if it can.
    pub(super) last_run: Cell<(u64, &'a [u8], Time, Time)>,
}

/// Instructions walked without a packet before the walk looks for a
/// never-ending loop (`loops.rs`): above any block (`MAX_BLOCK_INSNS`), so
/// that cached blocks run whole in code that consumes packets.
const LOOP_CHECK_FROM: u64 = 1024;

impl<'a, C: CodeSource> Walker<'a, C> {
    /// Over `code`, with the trace's configuration, timing by TSC alone,
    /// [`Recovery::NextTip`] and upper bounds on.
    pub(super) fn new(code: &'a C, cfg: FlowConfig) -> Self {
        let timing = Timing { time: cfg.time, mtc: None, cyc: None };
        let loop_from = cfg.max_walk.min(LOOP_CHECK_FROM);
        Walker {
            code,
            cfg,
            timing,
            recovery: Recovery::default(),
            upper_bounds: true,
            state_events: false,
            timing_events: false,
            deferred_tips: false,
            filter: None,
            errata: Errata::default(),
            loop_from,
            last_run: Cell::new((0, &[], 0, 0)),
        }
    }

    /// Another walker with the same code and settings.
    pub(crate) fn same(&self) -> Self {
        Walker { cfg: self.cfg.clone(), last_run: Cell::new((0, &[], 0, 0)), ..*self }
    }

    /// Readies `st` over `buf` for its first turn: past any bytes before the
    /// first PSB, and without the scan for the next TSC when nothing reads it.
    pub(crate) fn start(&self, st: &mut State<'a>, buf: &[u8]) {
        if let Some(at) = crate::find_psb(buf) {
            if at > 0 {
                st.packets.sync_forward();
            }
        }
        if !self.upper_bounds && self.timing.mtc.is_none() && self.timing.cyc.is_none() && !self.code.reads_hi() {
            st.clock.unbounded();
        }
    }

    /// Runs the walk `state` over `buf` (at `base` in the whole trace) to
    /// its end, over `cache`. The hot loop is here, with the state and cache
    /// as its locals, so that it is compiled in one codegen unit with the
    /// functions it calls out of line (this module's, and those marked
    /// `#[inline]`, which are copied into it): called across units, the
    /// same walk takes some 5% more instructions (see the flow bench).
    pub(crate) fn run_to_end(&self, state: &mut State<'a>, cache: &mut BlockCache, buf: &[u8], base: usize, sink: &mut impl FlowSink) {
        let mut st = state.clone();
        self.start(&mut st, buf);
        let mut blocks = std::mem::take(cache);
        while self.turn::<true>(&mut st, &mut blocks, base, sink) {}
        if st.pending {
            self.flush(&mut st, sink, true);
        }
        *state = st;
        *cache = blocks;
    }

    /// One step of the walk (with `CHAIN`, the blocks its TNT bits chain
    /// too), an error reported and recovered from; whether the run goes on.
    /// `base` is the offset of `st`'s packets in the whole trace.
    #[inline(always)]
    pub(crate) fn turn<const CHAIN: bool>(&self, st: &mut State<'a>, cache: &mut BlockCache, base: usize, sink: &mut impl FlowSink) -> bool {
        if st.pending {
            return self.turn_pending(st, cache, base, sink);
        }
        match self.step_cached::<CHAIN>(st, cache, sink) {
            Ok(going) => going,
            Err(f) => self.recover(st, f, base, sink),
        }
    }

    /// [`Self::turn`] with state events to hand out: those that may go
    /// now first; while some wait for an instruction, a step at a time.
    #[cold]
    #[inline(never)]
    fn turn_pending(&self, st: &mut State<'a>, cache: &mut BlockCache, base: usize, sink: &mut impl FlowSink) -> bool {
        self.flush(st, sink, false);
        let r = if st.held.is_empty() && st.counted.is_empty() { self.step_cached::<false>(st, cache, sink) } else { self.step(st, sink, false) };
        match r {
            Ok(going) => going,
            Err(f) => self.recover(st, f, base, sink),
        }
    }

    #[inline(always)]
    pub(super) fn take(&self, st: &mut State<'a>) -> Result<(usize, Flow), Failure> {
        // Mostly peeked already (at the start of a block).
        if !st.clock.cyc_pending() {
            if let Some(p) = st.take_peeked() {
                return Ok(p);
            }
        }
        self.take_next(st)
    }

    #[inline]
    pub(super) fn take_next(&self, st: &mut State<'a>) -> Result<(usize, Flow), Failure> {
        let p = self.peek_flow(st)?;
        st.take_peeked();
        if st.clock.cyc_pending() {
            st.clock.cyc_taken(&st.packets);
        }
        p.ok_or_else(|| Failure { offset: st.packets.offset(), kind: FlowErrorKind::EndOfTrace })
    }

    #[inline]
    pub(super) fn take_tnt(&self, st: &mut State<'a>) -> Result<bool, Failure> {
        if st.tnt_count == 0 {
            match self.take(st)? {
                (_, Flow::Tnt { bits, count }) => {
                    st.tnt_bits = bits;
                    st.tnt_count = count;
                }
                (_, Flow::Pgd(ip)) => {
                    st.pgd_ip = ip;
                    return Err(Failure { offset: DISABLED_AT_BRANCH, kind: FlowErrorKind::NoTnt });
                }
                (offset, flow) => return Err(mismatch(st, offset, flow, FlowErrorKind::NoTnt)),
            }
        }
        st.tnt_count -= 1;
        st.walked = 0;
        Ok(st.tnt_bits >> st.tnt_count & 1 == 1)
    }

    /// The target of an indirect transfer; `None` when tracing stops there.
    /// `DEFERRABLE`: an indirect jump or call or a far transfer, whose TIP
    /// the processor may defer behind the TNT of the conditional branches
    /// after it (SDM, deferred TIPs; with [`super::FlowDecoder::with_deferred_tips`]);
    /// not a near RET (an uncompressed one has no TNT in progress, says
    /// the SDM) nor an asynchronous event (its FUP forces the TNT out).
    #[inline(always)]
    pub(super) fn take_tip<const DEFERRABLE: bool>(&self, st: &mut State<'a>) -> Result<Option<u64>, Failure> {
        if st.tnt_count != 0 {
            if DEFERRABLE && self.deferred_tips {
                return self.tip_after_tnt(st);
            }
            return Err(Failure { offset: st.packets.offset(), kind: FlowErrorKind::NoTip });
        }
        st.walked = 0;
        match self.take(st)? {
            (_, Flow::Tip(Some(ip))) => Ok(Some(ip)),
            (_, Flow::Pgd(ip)) => {
                st.pgd_ip = ip;
                Ok(None)
            }
            (_, Flow::Tnt { bits, count }) if DEFERRABLE && self.deferred_tips => self.take_deferred_tip(st, bits, count),
            (offset, flow) => Err(mismatch(st, offset, flow, FlowErrorKind::NoTip)),
        }
    }

    /// A deferred TIP while TNT bits are left: those of the TNT that held
    /// the branches before this transfer and goes on with those after it;
    /// its TIP is the next flow packet (perf and libipt take it so).
    #[cold]
    #[inline(never)]
    fn tip_after_tnt(&self, st: &mut State<'a>) -> Result<Option<u64>, Failure> {
        st.walked = 0;
        match self.take(st)? {
            (_, Flow::Tip(Some(ip))) => Ok(Some(ip)),
            (offset, flow) => Err(mismatch(st, offset, flow, FlowErrorKind::NoTip)),
        }
    }

    /// A deferred TIP ([`super::FlowDecoder::with_deferred_tips`]): the TNT
    /// of conditional branches after this indirect transfer came before its
    /// TIP. Its bits wait for those branches; the TIP follows it.
    #[cold]
    #[inline(never)]
    fn take_deferred_tip(&self, st: &mut State<'a>, bits: u64, count: u8) -> Result<Option<u64>, Failure> {
        st.tnt_bits = bits;
        st.tnt_count = count;
        match self.take(st)? {
            (_, Flow::Tip(Some(ip))) => Ok(Some(ip)),
            (_, Flow::Pgd(ip)) => {
                st.pgd_ip = ip;
                Ok(None)
            }
            (offset, flow) => Err(mismatch(st, offset, flow, FlowErrorKind::NoTip)),
        }
    }

    /// One instruction (or one event). `Ok(false)` at the end of the trace.
    /// In a trial nothing is emitted and candidates are not tried again.
    #[inline]
    pub(super) fn step(&self, st: &mut State<'a>, sink: &mut impl FlowSink, trial: bool) -> Result<bool, Failure> {
        // The code is read for the time up to the next flow packet: the
        // timing packets before it are read first (they raise `hi`, not
        // `lo`). A TIP.PGE among them moves the walk to its IP.
        if st.ip.is_some() && st.tnt_count == 0 {
            let peeked = self.peek_before_fetch(st)?;
            if let Some(ip) = st.ip {
                if let Some(going) = self.ends_before_fetch(st, ip, peeked, sink, trial) {
                    return Ok(going);
                }
            }
        }
        let Some(ip) = st.ip else {
            // Not tracing: wait for TIP.PGE or a PSB+ with an IP (after an
            // overflow, the FUP that follows it; after an error, a TIP). A
            // flow packet seen before that has no IP to apply to: drop it.
            return match self.peek_flow(st)? {
                _ if st.ip.is_some() => {
                    st.after_ovf = false;
                    st.after_error = false;
                    Ok(true)
                }
                Some((_, Flow::Tip(Some(at)))) if st.after_error => {
                    st.take_peeked();
                    st.after_error = false;
                    st.resumed_at = Some(at);
                    st.ip = Some(at);
                    Ok(true)
                }
                Some((_, Flow::Bind { ip: Some(at), .. })) if st.after_error => {
                    // The FUP of state packets says where execution is.
                    st.take_peeked();
                    if !trial {
                        self.flush_bound(st, at, sink);
                    }
                    st.after_error = false;
                    st.resumed_at = Some(at);
                    st.ip = Some(at);
                    Ok(true)
                }
                Some((_, Flow::Pgd(to))) if st.after_error && self.state_events => {
                    // Waiting for a TIP after an error, tracing counts as
                    // on (as libipt resyncs): it stops here.
                    st.take_peeked();
                    if !trial {
                        self.flush(st, sink, false);
                        sink.event(FlowEvent::End { time: st.clock.lo, at: None, disabled: true, to, insn: None });
                    }
                    st.after_error = false;
                    Ok(true)
                }
                Some((_, Flow::Fup(Some(from)))) if st.after_error => {
                    st.take_peeked();
                    self.resume_at_event(st, from, sink, trial)
                }
                Some((_, Flow::Fup(Some(at)) | Flow::Bind { ip: Some(at), .. })) if st.after_ovf => {
                    st.take_peeked();
                    if self.errata.apl12 && self.tracing_stays_off(st) {
                        // APL12: tracing was off; the FUP after the
                        // overflow is not where it resumed.
                        return Ok(true);
                    }
                    st.after_ovf = false;
                    st.ip = Some(at);
                    Ok(true)
                }
                // SKD010: the FUP after an overflow may be dropped; the TIP
                // that follows says where tracing resumed.
                Some((_, Flow::Tip(Some(at)))) if st.after_ovf && self.errata.skd010 => {
                    st.take_peeked();
                    st.after_ovf = false;
                    st.ip = Some(at);
                    Ok(true)
                }
                Some((_, Flow::Bind { ip: Some(at), .. })) => {
                    // State packets bound to a FUP while tracing is off.
                    st.take_peeked();
                    if !trial {
                        self.flush_bound(st, at, sink);
                    }
                    Ok(true)
                }
                Some(_) => {
                    st.take_peeked();
                    Ok(true)
                }
                None => Ok(false),
            };
        };
        st.walked += 1;
        if st.walked > self.loop_from {
            self.check_loop(st, ip)?;
        }
        let mut buf = [0u8; 16];
        let exact = InsnCode::Exact;
        let (insn, uncertain, code) = match self.code.fetch(ip, st.clock.lo, st.clock.hi, 0, &mut buf) {
            Fetch::Unmapped => return Err(Failure { offset: st.error_offset(), kind: FlowErrorKind::Unmapped }),
            Fetch::Exact(n) => match self.classify(ip, &buf[..n], st) {
                Ok(insn) => (insn, false, exact),
                Err(f) => return self.undecodable(st, ip, f, sink, trial),
            },
            Fetch::Candidate { count, .. } => {
                // Contents may differ beyond this instruction (a read covers
                // 16 bytes): only distinct instructions make a choice.
                let options = match self.options(st, ip, count) {
                    Ok(o) => o,
                    Err(f) if matches!(f.kind, FlowErrorKind::BadInsn) => return self.undecodable(st, ip, f, sink, trial),
                    Err(f) => return Err(f),
                };
                let ((insn, from, bytes), uncertain) = match options.as_slice() {
                    [only] => (*only, false),
                    [first, ..] if trial => (*first, true),
                    _ => self.choose(st, ip, &options)?,
                };
                // Time has reached the start of the content that ran (when
                // the trace says which did).
                if !uncertain {
                    st.clock.lo = st.clock.lo.max(from);
                    st.clock.now = st.clock.now.max(st.clock.lo);
                }
                (insn, uncertain, InsnCode::chosen(&bytes))
            }
        };
        self.run_insn(st, ip, Decoded { insn, uncertain, code }, sink, trial)
    }

    /// Runs `insn` at `ip`: first an asynchronous event or the end of tracing
    /// at this IP, if the trace has one here, else the instruction itself.
    pub(super) fn run_insn(&self, st: &mut State<'a>, ip: u64, d: Decoded, sink: &mut impl FlowSink, trial: bool) -> Result<bool, Failure> {
        let Decoded { insn, uncertain, code } = d;
        // An event at this instruction (FUP at this IP, then the handler's
        // TIP): a trap it raises (INT3) or an interrupt before it; or the end
        // of tracing here (TIP.PGD at this IP, maybe after a FUP). Reported
        // as [`FlowEvent::Trap`] or [`FlowEvent::End`], not as an instruction.
        let mut bound_after = false;
        if st.tnt_count == 0 {
            let mut peeked = self.peek_flow(st)?;
            let mut shared_fup = false;
            if let Some((_, Flow::Bind { ip: Some(f), shared, after })) = peeked {
                if f == ip {
                    // State packets bound to this IP: reported before the
                    // instruction (after it when they are its own). Their
                    // FUP may be an asynchronous event's too, when a TIP or
                    // TIP.PGD follows it, unless a MODE.Exec of its own
                    // comes before that (then the TIP is this instruction's).
                    st.take_peeked();
                    let queued = st.events.len();
                    peeked = self.peek_flow(st)?;
                    let own_mode = st
                        .events
                        .get(queued..)
                        .is_some_and(|new| new.iter().any(|e| matches!(e, FlowEvent::State { packet: Packet::ModeExec { .. }, .. })));
                    if !trial && !st.events.is_empty() {
                        if after {
                            bound_after = true;
                        } else {
                            self.flush_bound(st, ip, sink);
                        }
                    }
                    shared_fup = shared && !own_mode && matches!(peeked, Some((_, Flow::Tip(Some(_)) | Flow::Pgd(_))));
                }
            }
            if st.pending && !trial && st.counted.first().is_some_and(|c| c.0 == 0) {
                // TRIGs at this instruction, before it or its event.
                self.release_counted(st, sink);
            }
            match peeked {
                _ if shared_fup => return self.async_event(st, ip, d, sink, trial),
                Some((_, Flow::Fup(Some(f)))) if f == ip => {
                    st.take_peeked();
                    return self.async_event(st, ip, d, sink, trial);
                }
                Some((_, Flow::Pgd(None))) if self.leaves_filter(&insn) || self.is_cr3_write(st, ip, &insn) => {
                    // A direct branch out of the filter's ranges (the
                    // TIP.PGD's IP suppressed, SKL014), or a MOV to CR3:
                    // tracing stopped at it.
                    if !trial {
                        sink.event(FlowEvent::Insn { ip, len: insn.len, class: insn.class, lo: st.clock.lo, hi: st.clock.hi, uncertain, code });
                    }
                    st.take_peeked();
                    st.pgd_ip = None;
                    if !trial {
                        self.flush(st, sink, false);
                        sink.event(FlowEvent::End { time: st.clock.lo, at: None, disabled: true, to: None, insn: None });
                    }
                    st.last_disable = insn.target;
                    st.walked = 0;
                    st.ip = None;
                    return Ok(true);
                }
                Some((_, Flow::Pgd(Some(f)))) if f == ip => {
                    self.disabled_at(st, ip, sink, trial);
                    return Ok(true);
                }
                // (State packets waiting for an instruction keep the walk going.)
                None if st.held.is_empty() => {
                    if !trial {
                        sink.event(FlowEvent::End {
                            time: st.clock.lo,
                            at: Some(ip),
                            disabled: false,
                            to: None,
                            insn: Some(EventInsn { len: insn.len, code }),
                        });
                    }
                    return Ok(false);
                }
                _ => {}
            }
        }
        if !trial {
            sink.event(FlowEvent::Insn { ip, len: insn.len, class: insn.class, lo: st.packet_lo(insn.class), hi: st.clock.hi, uncertain, code });
            if bound_after {
                self.flush_bound(st, ip, sink);
            }
            if !st.held.is_empty() {
                self.release_held(st, Some((ip, &insn)), sink);
            }
        }
        // An error taking its packets is reported at this instruction, also
        // when a packet read on the way moved the IP (a TIP.PGE while
        // tracing), as a cached block's last instruction reports it.
        st.ip = Some(ip);
        self.execute(st, ip, insn)?;
        if st.pending && !st.counted.is_empty() {
            self.count_insn(st, sink, trial);
        }
        // An indirect branch whose TIP was a TIP.PGD: tracing stopped there.
        if st.ip.is_none() {
            st.last_disable = resume_after(ip, &insn);
            if !trial {
                if !st.events.is_empty() {
                    self.flush(st, sink, false);
                }
                sink.event(FlowEvent::End { time: st.clock.lo, at: None, disabled: true, to: st.pgd_ip, insn: None });
            }
        }
        Ok(true)
    }

    /// The code at `ip` is no instruction: when the trace's next flow
    /// packet is a FUP at `ip`, an event there (a #UD on an invalid opcode:
    /// FUP, then the handler's TIP) ran instead, as libipt and perf take
    /// it; else the decode error `f`.
    #[cold]
    fn undecodable(&self, st: &mut State<'a>, ip: u64, f: Failure, sink: &mut impl FlowSink, trial: bool) -> Result<bool, Failure> {
        if st.tnt_count != 0 || !matches!(self.peek_flow(st)?, Some((_, Flow::Fup(Some(at)))) if at == ip) {
            return Err(f);
        }
        st.take_peeked();
        st.dead_end = None;
        let unknown = Insn { len: 0, class: BranchClass::None, target: None };
        let code = InsnCode::Exact;
        self.async_event(st, ip, Decoded { insn: unknown, uncertain: false, code }, sink, trial)
    }

    pub(super) fn classify(&self, ip: u64, bytes: &[u8], st: &State<'a>) -> Result<Insn, Failure> {
        isa::classify_x86_64(ip, bytes, &self.cfg.idioms).map_err(|_| Failure { offset: st.error_offset(), kind: FlowErrorKind::BadInsn })
    }

    /// Moves past `insn` at `ip`, consuming the packets it needs.
    #[inline]
    pub(super) fn execute(&self, st: &mut State<'a>, ip: u64, insn: Insn) -> Result<(), Failure> {
        let next = ip.wrapping_add(insn.len as u64);
        st.ip = match insn.class {
            BranchClass::None | BranchClass::Nop => Some(next),
            BranchClass::CondBranch => {
                if self.take_tnt(st)? {
                    insn.target
                } else {
                    Some(next)
                }
            }
            BranchClass::DirectJump => insn.target,
            BranchClass::DirectCall => {
                // A zero-length CALL (to the next IP) is not pushed (SDM).
                if insn.target != Some(next) {
                    st.stack.push(next);
                }
                insn.target
            }
            BranchClass::IndirectJump | BranchClass::FarTransfer => self.take_tip::<true>(st)?,
            BranchClass::IndirectCall => {
                st.stack.push(next);
                self.take_tip::<true>(st)?
            }
            BranchClass::Return => {
                let compressed = !self.cfg.noretcomp && !st.stack.is_empty() && {
                    if st.tnt_count == 0 {
                        matches!(self.peek_flow(st)?, Some((_, Flow::Tnt { .. })))
                    } else {
                        true
                    }
                };
                if compressed {
                    // A compressed RET is a taken bit; a not-taken one is no
                    // outcome a RET has (libipt: bad return compression).
                    if !self.take_tnt(st)? {
                        return Err(Failure { offset: st.packets.offset(), kind: FlowErrorKind::NoTip });
                    }
                    st.stack.pop()
                } else {
                    st.stack.pop();
                    self.take_tip::<false>(st)?
                }
            }
            // A trap is handled before it runs, when its FUP is next (run_insn).
            BranchClass::Trap => return Err(Failure { offset: st.packets.offset(), kind: FlowErrorKind::NoTrapPackets }),
        };
        Ok(())
    }
}

/// The walk needed a TNT or TIP (`kind`) and the trace has `flow`, at
/// `offset`, instead. A FUP is read ahead as an event (libipt's error is
/// after it) and stays, to say where execution went after the error.
#[cold]
fn mismatch(st: &mut State<'_>, offset: usize, flow: Flow, kind: FlowErrorKind) -> Failure {
    if let Flow::Fup(Some(_)) = flow {
        st.peeked = Some((offset, flow));
        return Failure { offset: st.packets.offset(), kind };
    }
    Failure { offset, kind }
}

/// An instruction the walk read: its class, whether other contents fit
/// the trace too, and the bytes it was read from.
#[derive(Clone, Copy)]
pub(super) struct Decoded {
    pub insn: Insn,
    pub uncertain: bool,
    pub code: InsnCode,
}

/// Where tracing that stopped at `insn` at `ip` (a TIP.PGD as its TIP) would
/// resume, were it resumed where it stopped: after a call, its return address.
pub(super) fn resume_after(ip: u64, insn: &Insn) -> Option<u64> {
    match insn.class {
        BranchClass::IndirectCall | BranchClass::FarTransfer => Some(ip.wrapping_add(insn.len as u64)),
        BranchClass::DirectJump | BranchClass::DirectCall => insn.target,
        _ => None,
    }
}

/// Where `insn` at `ip` goes when it needs no packet (`None` when it does).
pub(super) fn next_without_packet(ip: u64, insn: &Insn) -> Option<u64> {
    match insn.class {
        BranchClass::None | BranchClass::Nop => Some(ip.wrapping_add(insn.len as u64)),
        BranchClass::DirectJump | BranchClass::DirectCall => insn.target,
        _ => None,
    }
}
