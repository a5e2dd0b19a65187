//! One trace source's flow state machine: synchronisation, the speculation
//! stack, and committing its elements into generic trace elements.

use std::collections::VecDeque;

use codeimage::window::{CodeSource, Fetch};

use super::code::{walk_to_addr, ImageClock, Picker, RunCache, Walk, Window};
use super::{ElemKind, Element, FlowError, InstrRange, InstrSubtype, InstrType, Isa, PeContext, Picked, TraceOnReason, UnsyncReason};
use crate::config::EtmV4Config;
use crate::packet::{Context, Packet, PacketType};
use crate::TracePacket;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum State {
    /// Report NO_SYNC at the next packet, then wait for an A-sync.
    NoSync,
    WaitSync,
    WaitInfo,
    Decode,
}

/// An element of the speculation stack.
#[derive(Clone, Copy, Debug)]
enum Pending {
    TraceOn,
    Addr {
        addr: u64,
        is: u8,
    },
    /// A context; `updated` false for a context packet saying "same".
    Ctxt {
        ctx: Context,
        updated: bool,
        is: u8,
    },
    /// Atoms not yet committed, oldest in bit 0.
    Atoms {
        bits: u32,
        count: u8,
    },
    Exception {
        number: u16,
        ret_is_target: bool,
    },
    ExceptionReturn,
    /// v8-M function return: a P0 element with nothing to output.
    FunctionReturn,
    Timestamp {
        value: u64,
        cycles: Option<u32>,
    },
    CycleCount(u32),
    Event(u8),
}

#[derive(Clone, Copy, Debug)]
struct Stacked {
    index: u64,
    e: Pending,
}

/// The return stack of the trace unit (16 entries): returns that match it
/// are traced without a target address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct ReturnStack {
    enabled: bool,
    entries: [(u64, Isa); 16],
    head: usize,
    len: usize,
    pop_pending: bool,
}

impl ReturnStack {
    fn push(&mut self, addr: u64, isa: Isa) {
        if self.enabled {
            self.head = (self.head + 1) % 16;
            self.entries[self.head] = (addr, isa);
            self.len = (self.len + 1).min(16);
        }
    }

    fn pop(&mut self) -> Option<(u64, Isa)> {
        self.pop_pending = false;
        if self.len == 0 {
            return None;
        }
        let e = self.entries[self.head];
        self.head = (self.head + 15) % 16;
        self.len -= 1;
        Some(e)
    }

    fn flush(&mut self) {
        self.len = 0;
        self.pop_pending = false;
    }
}

/// The code source and the walk cache a source decodes with (the cache is
/// shared by the hypotheses of a source, see `FlowDecoder`).
pub(crate) struct Code<'a, C> {
    pub src: &'a C,
    pub cache: &'a mut RunCache,
    /// The image time of a timestamp.
    pub clock: &'a ImageClock,
}

pub(crate) struct Source {
    trace_id: u8,
    state: State,
    unsync: UnsyncReason,
    stack: VecDeque<Stacked>,
    /// Uncommitted P0 elements. Signed: cancelling an exception whose
    /// address has not come yet (so it was not counted) takes it below the
    /// elements on the stack, as OpenCSD counts.
    spec_depth: i64,
    max_spec: u32,
    commit: u32,
    discard: bool,
    need_ctxt: bool,
    need_addr: bool,
    /// An exception waits for its return address before it counts as P0.
    exception_pending_addr: bool,
    prev_overflow: bool,
    last_is: u8,
    /// The context the packets last described (context packets saying "same" repeat it).
    ctx: Context,
    is64: bool,
    addr: u64,
    isa: Isa,
    ret: ReturnStack,
    last_index: u64,
    /// The latest timestamp (trace time).
    time: u64,
    /// The next timestamp after `time` (`time` itself when not known).
    hi: u64,
    /// Code is read over `time..=hi` (the decoder was given the trace's
    /// timestamps), not at `time` alone.
    window: bool,
    /// The times code is read for: `time..=hi` (or `time`) on the image's
    /// clock, worked out when one of them changes rather than per walk.
    code_window: Window,
    /// Choices among candidate instructions where code changes inside the window.
    pub pick: Picker,
    /// The trace does not fit what this source walked (an unconditional
    /// branch not taken, an address where none was due, ...; error and
    /// ADDR_NACC elements say so too): read by the decoder when several
    /// candidates are tried, never reported alone.
    pub misfit: bool,
    /// An address packet is due: after a taken indirect branch or an exception.
    addr_due: bool,
    wfx_p0: bool,
    ts_with_cc: bool,
    /// An M-profile PE: FUNC_RET packets are P0 elements.
    m_profile: bool,
    /// Elements in the output before the packet being decoded.
    out_mark: usize,
}

/// Every field but the speculation stack and the picker is `Copy`:
/// `clone_from` reuses their allocations (the decoder keeps a copy of the
/// source from before each packet when it reads code over windows).
impl Clone for Source {
    fn clone(&self) -> Source {
        Source { stack: self.stack.clone(), pick: self.pick.clone(), ..*self }
    }

    fn clone_from(&mut self, o: &Source) {
        let mut stack = std::mem::take(&mut self.stack);
        stack.clone_from(&o.stack);
        let mut pick = std::mem::take(&mut self.pick);
        pick.clone_from(&o.pick);
        *self = Source { stack, pick, ..*o };
    }
}

/// What [`Source::check_isa`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Walkable {
    Yes,
    /// Not A64, and no code there either.
    NoCode,
    /// Not A64: reported.
    Unsupported,
}

/// The instruction set of an address packet's IS bit in a PE state:
/// AArch64 has only A64; in AArch32, IS 1 is T32.
fn calc_isa(is64: bool, is: u8) -> Isa {
    match (is64, is) {
        (true, _) => Isa::A64,
        (false, 0) => Isa::A32,
        _ => Isa::T32,
    }
}

impl Source {
    pub fn new(c: &EtmV4Config) -> Source {
        Source {
            trace_id: c.trace_id(),
            state: State::NoSync,
            unsync: UnsyncReason::InitDecoder,
            stack: VecDeque::with_capacity(64),
            spec_depth: 0,
            max_spec: c.max_spec_depth(),
            commit: 0,
            discard: false,
            need_ctxt: true,
            need_addr: true,
            exception_pending_addr: false,
            prev_overflow: false,
            last_is: 0,
            ctx: Context::default(),
            is64: false,
            addr: 0,
            isa: Isa::Unknown,
            ret: ReturnStack {
                // TRCCONFIGR.RS is RES0 where TRCIDR0.RETSTACK says there is none.
                enabled: c.return_stack_enabled() && c.has_return_stack(),
                ..ReturnStack::default()
            },
            last_index: 0,
            time: 0,
            hi: 0,
            window: false,
            code_window: Window { lo: 0, hi: 0 },
            pick: Picker::default(),
            misfit: false,
            addr_due: false,
            wfx_p0: c.wfx_is_p0(),
            ts_with_cc: c.cycle_counting_enabled(),
            m_profile: c.profile == crate::config::Profile::M,
            out_mark: 0,
        }
    }

    #[inline]
    fn emit(&self, out: &mut Vec<Element>, index: u64, kind: ElemKind) {
        out.push(Element { trace_id: self.trace_id, index, kind });
    }

    pub fn packet(&mut self, p: &TracePacket<'_>, code: &mut Code<'_, impl CodeSource>, out: &mut Vec<Element>) {
        self.last_index = p.index;
        if let Packet::Timestamp(ts) = p.packet {
            self.time = ts.value;
            self.update_code_window(code.clock);
        }
        loop {
            match self.state {
                State::NoSync => {
                    self.emit(out, p.index, ElemKind::NoSync(self.unsync));
                    self.state = State::WaitSync;
                }
                State::WaitSync => {
                    if p.packet.packet_type() == PacketType::Async {
                        self.state = State::WaitInfo;
                    }
                    return;
                }
                State::WaitInfo => {
                    self.need_ctxt = true;
                    self.need_addr = true;
                    if let Packet::TraceInfo(ti) = p.packet {
                        self.spec_depth = ti.spec_depth as i64;
                        self.state = State::Decode;
                        self.ret.flush();
                    }
                    return;
                }
                State::Decode => {
                    self.decode(p, code, out);
                    return;
                }
            }
        }
    }

    fn push(&mut self, index: u64, e: Pending) {
        self.stack.push_back(Stacked { index, e });
    }

    fn push_atoms(&mut self, index: u64, bits: u32, count: u8) {
        if count > 0 {
            self.push(index, Pending::Atoms { bits, count });
            self.spec_depth += count as i64;
        }
    }

    fn decode(&mut self, p: &TracePacket<'_>, code: &mut Code<'_, impl CodeSource>, out: &mut Vec<Element>) {
        let idx = p.index;
        self.out_mark = out.len();
        let mut is_addr = false;
        match p.packet {
            Packet::Async | Packet::Ignore => {}
            Packet::FunctionReturn => {
                if self.m_profile {
                    self.push(idx, Pending::FunctionReturn);
                    self.spec_depth += 1;
                }
            }
            Packet::TraceInfo(_) => self.ret.flush(),
            Packet::TraceOn => self.push(idx, Pending::TraceOn),
            Packet::Atom { atoms, .. } => self.push_atoms(idx, atoms.bits, atoms.count),
            Packet::Context(c) => {
                if let Some(c) = c {
                    self.update_ctx(&c);
                }
                self.push(idx, Pending::Ctxt { ctx: self.ctx, updated: c.is_some(), is: self.last_is });
            }
            Packet::AddressContext(a, c) => {
                self.last_is = a.is;
                self.update_ctx(&c);
                self.push(idx, Pending::Ctxt { ctx: self.ctx, updated: true, is: a.is });
                self.push(idx, Pending::Addr { addr: a.value, is: a.is });
                is_addr = true;
            }
            Packet::Address(a) | Packet::ExactMatch { addr: a, .. } => {
                self.last_is = a.is;
                self.push(idx, Pending::Addr { addr: a.value, is: a.is });
                is_addr = true;
            }
            Packet::Exception(e) => {
                self.push(idx, Pending::Exception { number: e.number, ret_is_target: e.addr_interp == 2 });
                self.exception_pending_addr = true;
            }
            Packet::ExceptionReturn => self.push(idx, Pending::ExceptionReturn),
            Packet::Event(n) => self.push(idx, Pending::Event(n)),
            Packet::CycleCount(c) => self.push(idx, Pending::CycleCount(c.count.unwrap_or(0))),
            Packet::Timestamp(ts) => {
                let cycles = self.ts_with_cc.then_some(ts.cycle_count.unwrap_or(0));
                self.push(idx, Pending::Timestamp { value: ts.value, cycles });
            }
            Packet::Commit(n) => self.commit = n,
            // Speculation resolution in the architecture's order: cancel
            // the newest elements, correct the newest remaining atom, then
            // the packet's own atoms.
            Packet::CancelF1 { count, mispredict } => {
                if !self.cancel(count, out) || (mispredict && !self.mispredict(out)) {
                    return;
                }
            }
            Packet::Mispredict(a) => {
                if !self.mispredict(out) {
                    return;
                }
                self.push_atoms(idx, a.bits, a.count);
            }
            Packet::CancelF2(a) => {
                if !self.cancel(1, out) || !self.mispredict(out) {
                    return;
                }
                self.push_atoms(idx, a.bits, a.count);
            }
            Packet::CancelF3 { e_atom, count } => {
                if !self.cancel(count as u32, out) || !self.mispredict(out) {
                    return;
                }
                self.push_atoms(idx, e_atom as u32, e_atom as u8);
            }
            Packet::Overflow => {
                self.prev_overflow = true;
                self.spec_depth = 0;
                self.discard = true;
            }
            Packet::Discard => {
                self.spec_depth = 0;
                self.discard = true;
            }
            Packet::Q(_) | Packet::CondInstr(_) | Packet::CondFlush | Packet::CondResult(_) | Packet::DataSync { .. } => {
                let e = FlowError::UnsupportedPacket(p.packet.packet_type());
                self.fail(idx, e, UnsyncReason::BadPacket, out);
                return;
            }
            Packet::NotSync { .. }
            | Packet::Reserved { .. }
            | Packet::ReservedConfig { .. }
            | Packet::BadSequence { .. }
            | Packet::IncompleteEot { .. } => {
                let e = FlowError::BadPacket(p.packet.packet_type());
                self.fail(idx, e, UnsyncReason::BadPacket, out);
                return;
            }
        }
        if is_addr && self.exception_pending_addr {
            self.spec_depth += 1;
            self.exception_pending_addr = false;
        }
        if self.spec_depth > self.max_spec as i64 {
            self.commit = (self.spec_depth - self.max_spec as i64).min(u32::MAX as i64) as u32;
        }
        if self.commit > 0 {
            self.commit_elements(code, out);
        }
        if self.discard {
            self.discard_elements(idx, out);
        }
        // Sync lost while resolving: the packet itself may be the A-sync to wait for.
        if self.state == State::WaitSync && p.packet.packet_type() == PacketType::Async {
            self.state = State::WaitInfo;
        }
    }

    /// The context a packet describes. VMID and context ID stay once seen:
    /// a packet without them means they did not change.
    fn update_ctx(&mut self, c: &Context) {
        self.ctx = Context { vmid: c.vmid.or(self.ctx.vmid), context_id: c.context_id.or(self.ctx.context_id), ..*c };
    }

    /// A bad packet: an error element, and the source waits for the next
    /// A-sync (NO_SYNC comes with the next packet, as OpenCSD reports it).
    fn fail(&mut self, index: u64, e: FlowError, why: UnsyncReason, out: &mut Vec<Element>) {
        self.emit(out, index, ElemKind::Error(e));
        self.reset(why);
    }

    /// Packets that do not fit together (resolving more elements than the
    /// trace holds): an error element, NO_SYNC at once, and the source
    /// waits for the next A-sync.
    fn fail_resolving(&mut self, e: FlowError, out: &mut Vec<Element>) {
        let index = self.last_index;
        // What this packet's resolution produced is dropped with it (as OpenCSD drops it).
        out.truncate(self.out_mark);
        self.emit(out, index, ElemKind::Error(e));
        self.reset(UnsyncReason::BadPacket);
        self.emit(out, index, ElemKind::NoSync(UnsyncReason::BadPacket));
        self.state = State::WaitSync;
    }

    fn reset(&mut self, why: UnsyncReason) {
        self.state = State::NoSync;
        self.unsync = why;
        self.spec_depth = 0;
        self.commit = 0;
        self.discard = false;
        self.need_ctxt = true;
        self.need_addr = true;
        self.exception_pending_addr = false;
        self.prev_overflow = false;
        self.stack.clear();
        self.last_is = 0;
        self.is64 = false;
    }

    /// A frame-level fault: an error element unless the source has had no
    /// packet since it last lost sync (it reports NO_SYNC at its next one).
    pub fn reset_after_fault(&mut self, out: &mut Vec<Element>) {
        if self.state != State::NoSync {
            self.emit(out, self.last_index, ElemKind::Error(FlowError::Frame));
            self.reset(UnsyncReason::ResetDecoder);
        }
    }

    fn context_elem(&mut self, ctx: &Context, is: u8) -> ElemKind {
        self.is64 = ctx.aarch64;
        self.isa = calc_isa(self.is64, is);
        self.need_ctxt = false;
        ElemKind::PeContext(PeContext {
            isa: self.isa,
            el: ctx.el,
            secure: !ctx.non_secure,
            aarch64: ctx.aarch64,
            vmid: ctx.vmid,
            context_id: ctx.context_id,
        })
    }

    fn trace_on_reason(&mut self) -> TraceOnReason {
        let r = if self.prev_overflow { TraceOnReason::Overflow } else { TraceOnReason::Normal };
        self.prev_overflow = false;
        r
    }

    /// Commits the oldest `self.commit` P0 elements and what precedes them.
    fn commit_elements(&mut self, code: &mut Code<'_, impl CodeSource>, out: &mut Vec<Element>) {
        let requested = self.commit;
        while self.commit > 0 {
            let Some(&Stacked { index, e }) = self.stack.front() else {
                self.fail_resolving(FlowError::CommitOverrun, out);
                return;
            };
            match e {
                Pending::TraceOn => {
                    let r = self.trace_on_reason();
                    self.emit(out, index, ElemKind::TraceOn(r));
                    self.ret.flush();
                }
                Pending::Addr { addr, is } => {
                    // Only a sync repeats where the code went: any other address is a misfit.
                    self.misfit |= !self.need_addr && !self.addr_due && addr != self.addr;
                    self.addr_due = false;
                    self.ret.pop_pending = false;
                    self.addr = addr;
                    self.isa = calc_isa(self.is64, is);
                    self.need_addr = false;
                }
                Pending::Ctxt { ctx, updated, is } => {
                    if updated {
                        let k = self.context_elem(&ctx, is);
                        self.emit(out, index, k);
                        // A new context is reported at once: an error later
                        // in this resolution does not take it back (OpenCSD
                        // sends it before decoding on in the new context).
                        self.out_mark = out.len();
                    }
                }
                Pending::Timestamp { .. } | Pending::CycleCount(_) | Pending::Event(_) => {
                    self.emit_time(index, e, out);
                }
                Pending::ExceptionReturn => self.emit(out, index, ElemKind::ExceptionReturn),
                Pending::FunctionReturn => self.commit -= 1,
                Pending::Atoms { mut bits, mut count } => {
                    while count > 0 && self.commit > 0 {
                        let taken = bits & 1 == 1;
                        bits >>= 1;
                        count -= 1;
                        self.commit -= 1;
                        if !self.pop_return_stack(out) {
                            return;
                        }
                        if !self.need_ctxt && !self.need_addr {
                            self.atom(taken, index, code, out);
                        } else {
                            self.misfit |= !self.need_ctxt;
                        }
                    }
                    if count > 0 {
                        self.stack[0].e = Pending::Atoms { bits, count };
                        continue;
                    }
                }
                Pending::Exception { number, ret_is_target } => {
                    self.commit -= 1;
                    if !self.pop_return_stack(out) {
                        return;
                    }
                    self.stack.pop_front();
                    self.exception(index, number, ret_is_target, code, out);
                    continue;
                }
            }
            self.stack.pop_front();
        }
        if self.state == State::Decode {
            self.spec_depth -= requested as i64;
        }
    }

    fn emit_time(&mut self, index: u64, e: Pending, out: &mut Vec<Element>) {
        let k = match e {
            Pending::Timestamp { value, cycles } => ElemKind::Timestamp { value, cycles },
            Pending::CycleCount(c) => ElemKind::CycleCount(c),
            Pending::Event(n) => ElemKind::Event(n),
            _ => return,
        };
        self.emit(out, index, k);
    }

    /// An indirect branch left its target to the return stack: pop it now
    /// that no address packet came. False (and an error) when it is empty.
    fn pop_return_stack(&mut self, out: &mut Vec<Element>) -> bool {
        if !self.ret.pop_pending {
            return true;
        }
        match self.ret.pop() {
            Some((addr, isa)) => {
                self.addr = addr;
                self.isa = isa;
                self.need_addr = false;
                true
            }
            None => {
                self.fail_resolving(FlowError::ReturnStackEmpty, out);
                false
            }
        }
    }

    /// The range walked by `w` from `start`, with the words its walk picked.
    fn range(&mut self, start: u64, w: &Walk, executed: bool) -> ElemKind {
        let mut range = InstrRange {
            start,
            end: w.end,
            num_i: w.num_i,
            last_size: 4,
            isa: self.isa,
            executed,
            last_type: w.last.ty,
            last_subtype: w.last.sub,
            last_cond: w.last.cond,
            uncertain: false,
            picked: Picked::default(),
        };
        self.pick.give_picked(&mut range);
        ElemKind::InstrRange(range)
    }

    /// Whether the code at the current address can be walked. Code that is
    /// not A64 is an error (the source waits for a new address and
    /// context), unless there is no code there at all: then it is
    /// inaccessible memory, whatever its instruction set.
    #[inline]
    fn check_isa(&mut self, index: u64, code: &Code<'_, impl CodeSource>, out: &mut Vec<Element>) -> Walkable {
        if self.isa == Isa::A64 {
            return Walkable::Yes;
        }
        self.check_other_isa(index, code, out)
    }

    #[cold]
    #[inline(never)]
    fn check_other_isa(&mut self, index: u64, code: &Code<'_, impl CodeSource>, out: &mut Vec<Element>) -> Walkable {
        let at = self.win().lo;
        let filled = match code.src.fetch(self.addr, at, at, 0, &mut [0u8; 16]) {
            Fetch::Exact(n) | Fetch::Candidate { filled: n, .. } => n,
            Fetch::Unmapped => 0,
        };
        if filled < 4 {
            return Walkable::NoCode;
        }
        let e = FlowError::UnsupportedIsa { isa: self.isa, addr: self.addr };
        self.emit(out, index, ElemKind::Error(e));
        self.need_addr = true;
        self.need_ctxt = true;
        Walkable::Unsupported
    }

    /// One committed atom: the code from the current address to the next P0 instruction.
    #[inline]
    fn atom(&mut self, taken: bool, index: u64, code: &mut Code<'_, impl CodeSource>, out: &mut Vec<Element>) {
        match self.check_isa(index, code, out) {
            Walkable::Yes => {}
            Walkable::NoCode => {
                self.need_addr = true;
                self.emit(out, index, ElemKind::AddrNacc(self.addr));
                return;
            }
            Walkable::Unsupported => return,
        }
        let start = self.addr;
        let w = code.cache.walk_to_p0(code.src, start, self.win(), self.wfx_p0, &mut self.pick);
        self.addr = w.end;
        if w.nacc {
            self.need_addr = true;
            if w.num_i > 0 {
                let k = self.range(start, &w, true);
                self.emit(out, index, k);
            }
            self.emit(out, index, ElemKind::AddrNacc(w.end));
            return;
        }
        // Unconditional branches are always taken.
        if !taken && matches!(w.last.ty, InstrType::Branch | InstrType::IndirectBranch) && !w.last.cond {
            self.misfit = true;
        }
        if taken {
            match w.last.ty {
                InstrType::Branch => {
                    self.addr = w.last.target;
                    if w.last.sub == InstrSubtype::Link {
                        self.ret.push(w.end, self.isa);
                    }
                }
                InstrType::IndirectBranch => {
                    self.need_addr = true;
                    self.addr_due = true;
                    if w.last.sub == InstrSubtype::Link {
                        self.ret.push(w.end, self.isa);
                    }
                    if self.ret.enabled {
                        self.ret.pop_pending = true;
                    }
                }
                _ => {}
            }
        }
        let k = self.range(start, &w, taken);
        self.emit(out, index, k);
    }

    /// The trace index of the latest packet.
    pub fn last_index(&self) -> u64 {
        self.last_index
    }

    /// The times code is read for, on the image's clock.
    #[inline]
    fn win(&self) -> Window {
        self.code_window
    }

    /// Works out the window code is read for again, timestamps becoming
    /// image times by `clock`.
    pub fn update_code_window(&mut self, clock: &ImageClock) {
        let lo = clock.time(self.time);
        let hi = if self.window { clock.end(self.hi.max(self.time)) } else { lo };
        self.code_window = Window { lo, hi };
    }

    /// Code is read over windows from each timestamp to the next, the first
    /// timestamp `first` (None: at the latest timestamp alone).
    pub fn set_windows(&mut self, first: Option<u64>, clock: &ImageClock) {
        self.window = first.is_some();
        self.hi = first.unwrap_or(0);
        self.update_code_window(clock);
    }

    /// The timestamp after the latest one (`u64::MAX`: none).
    pub fn set_next_timestamp(&mut self, hi: u64, clock: &ImageClock) {
        self.hi = hi;
        self.update_code_window(clock);
    }

    /// What decides the source's future: two hypotheses equal in it walk
    /// the rest of the trace alike.
    pub fn same_future(&self, o: &Source) -> bool {
        self.state == o.state
            && self.addr == o.addr
            && self.isa == o.isa
            && self.need_addr == o.need_addr
            && self.need_ctxt == o.need_ctxt
            && self.addr_due == o.addr_due
            && self.ret == o.ret
            && self.spec_depth == o.spec_depth
            && self.stack.len() == o.stack.len()
            && self.exception_pending_addr == o.exception_pending_addr
    }

    /// A hypothesis that no longer fits: an error element, and the source
    /// waits for the next A-sync.
    pub fn fail_no_fit(&mut self, index: u64, addr: u64, out: &mut Vec<Element>) {
        self.fail(index, FlowError::NoCandidateFits { addr }, UnsyncReason::BadPacket, out);
    }

    /// A committed exception (already off the stack): its context and
    /// return address follow it on the stack. The code up to the preferred
    /// return address ran before the exception was taken.
    fn exception(&mut self, index: u64, number: u16, ret_is_target: bool, code: &mut Code<'_, impl CodeSource>, out: &mut Vec<Element>) {
        let mut ctxt = None;
        if let Some(&Stacked { e: Pending::Ctxt { ctx, is, .. }, .. }) = self.stack.front() {
            ctxt = Some((ctx, is));
            self.stack.pop_front();
        }
        let Some(&Stacked { e: Pending::Addr { addr: ret_addr, is }, .. }) = self.stack.front() else {
            self.fail_resolving(FlowError::ExceptionWithoutAddress, out);
            return;
        };
        self.stack.pop_front();
        if ret_is_target {
            // The return address is where the previous branch went: no range before the exception.
            let b64 = ctxt.map_or(self.isa == Isa::A64, |(c, _)| c.aarch64);
            self.addr = ret_addr;
            // As OpenCSD does here (unlike for other addresses): IS 1 is T32 even in AArch64.
            self.isa = match (is, b64) {
                (0, true) => Isa::A64,
                (0, false) => Isa::A32,
                _ => Isa::T32,
            };
            self.need_addr = false;
        }
        if let Some((c, is)) = ctxt {
            let k = self.context_elem(&c, is);
            self.emit(out, index, k);
        }
        let mut nacc = None;
        if self.addr != ret_addr {
            match self.check_isa(index, code, out) {
                Walkable::Yes => {
                    let start = self.addr;
                    let win = self.win();
                    let (w, crossed) = walk_to_addr(code.src, start, ret_addr, win, self.wfx_p0, &mut self.pick);
                    self.misfit |= crossed;
                    self.addr = w.end;
                    if w.nacc {
                        self.need_addr = true;
                        nacc = Some(w.end);
                    }
                    if !w.nacc || w.num_i > 0 {
                        let k = self.range(start, &w, true);
                        self.emit(out, index, k);
                    }
                }
                Walkable::NoCode => {
                    self.need_addr = true;
                    nacc = Some(self.addr);
                }
                Walkable::Unsupported => {}
            }
        }
        if let Some(a) = nacc {
            self.emit(out, index, ElemKind::AddrNacc(a));
        }
        // The exception's target address comes next.
        self.addr_due = true;
        self.emit(out, index, ElemKind::Exception { number, ret_addr, ret_addr_is_target: ret_is_target });
    }

    /// Cancels the newest `n` P0 elements (and the addresses and contexts
    /// that came with them; timestamps, cycle counts and events stay).
    fn cancel(&mut self, n: u32, out: &mut Vec<Element>) -> bool {
        let mut left = n;
        let mut i = self.stack.len();
        while left > 0 && i > 0 {
            i -= 1;
            match self.stack[i].e {
                Pending::Atoms { bits, count } => {
                    let c = left.min(count as u32) as u8;
                    left -= c as u32;
                    if c == count {
                        self.stack.remove(i);
                    } else {
                        self.stack[i].e = Pending::Atoms { bits, count: count - c };
                    }
                }
                Pending::Exception { .. } | Pending::FunctionReturn => {
                    left -= 1;
                    self.stack.remove(i);
                }
                Pending::Timestamp { .. } | Pending::CycleCount(_) | Pending::Event(_) => {}
                _ => {
                    self.stack.remove(i);
                }
            }
        }
        self.spec_depth -= (n - left) as i64;
        if left > 0 {
            // Only timestamps, cycle counts and events are left: they were
            // traced and stay to be reported after the resync, as OpenCSD
            // keeps them.
            let kept = std::mem::take(&mut self.stack);
            self.fail_resolving(FlowError::CancelOverrun, out);
            self.stack = kept;
            return false;
        }
        true
    }

    /// The newest atom was predicted wrongly: it flips, and addresses
    /// traced after it are dropped.
    fn mispredict(&mut self, out: &mut Vec<Element>) -> bool {
        let mut i = self.stack.len();
        while i > 0 {
            i -= 1;
            match self.stack[i].e {
                Pending::Atoms { bits, count } => {
                    self.stack[i].e = Pending::Atoms { bits: bits ^ (1 << (count - 1)), count };
                    return true;
                }
                Pending::Addr { .. } => {
                    self.stack.remove(i);
                }
                _ => {}
            }
        }
        self.fail_resolving(FlowError::MispredictWithoutAtom, out);
        false
    }

    /// DISCARD or OVERFLOW: speculative elements are dropped (their
    /// timestamps and counts reported), NO_SYNC says why, and the source
    /// waits for the next A-sync.
    fn discard_elements(&mut self, index: u64, out: &mut Vec<Element>) {
        while let Some(Stacked { index, e }) = self.stack.pop_front() {
            self.emit_time(index, e, out);
        }
        self.commit = 0;
        self.discard = false;
        self.spec_depth = 0;
        self.unsync = if self.prev_overflow { UnsyncReason::Overflow } else { UnsyncReason::Discard };
        self.emit(out, index, ElemKind::NoSync(self.unsync));
        self.state = State::WaitSync;
        self.need_ctxt = true;
        self.need_addr = true;
        self.exception_pending_addr = false;
    }

    /// End of trace: timestamps, cycle counts and events before the first
    /// uncommitted P0 element are reported, then EO_TRACE.
    pub fn finish(&mut self, out: &mut Vec<Element>) {
        while let Some(Stacked { index, e }) = self.stack.pop_front() {
            match e {
                Pending::Atoms { .. } | Pending::TraceOn | Pending::Exception { .. } | Pending::ExceptionReturn => {
                    self.stack.clear();
                }
                Pending::Addr { .. } | Pending::Ctxt { .. } | Pending::FunctionReturn => {}
                _ => self.emit_time(index, e, out),
            }
        }
        let why = if self.prev_overflow { UnsyncReason::Overflow } else { UnsyncReason::EndOfTrace };
        self.emit(out, self.last_index, ElemKind::EoTrace(why));
    }
}
