//! ETMv4 instruction flow: follows each source's atoms through the code and
//! produces generic trace elements, the ones OpenCSD's decoder produces
//! (NO_SYNC, TRACE_ON, PE_CONTEXT, INSTR_RANGE, EXCEPTION, ...).
//!
//! Per trace ID a state machine (`flow/source.rs`) waits for an A-sync and a
//! TRACE_INFO, then keeps the packets' P0 elements (atoms, exceptions) and
//! what comes with them (addresses, contexts, timestamps) on a speculation
//! stack, oldest first. Elements leave it when they are committed (a COMMIT
//! packet, or the speculation depth exceeding the source's maximum), are
//! cancelled, mispredicted (the newest atom flips) or discarded, as the ETMv4
//! architecture defines. Committed atoms walk the code from the current
//! address to the next P0 instruction (`flow/code.rs`), asking a
//! [`CodeSource`] (`codeimage::window`) for the code as it was at the latest
//! timestamp seen. The image's time is the trace's timestamps, or the perf
//! time they convert to ([`FlowDecoder::with_perf_clock`]).
//!
//! Given the trace's timestamps ([`FlowDecoder::window_timestamps`]), the
//! code is read over the window from the latest timestamp to the next one
//! instead. Where a word changes inside its window and its contents are
//! different instructions, each is tried: the source forks into hypotheses
//! that decode the following packets alike, and a hypothesis the trace
//! contradicts (an unconditional branch not taken, an address packet where
//! none is due, an exception's return address past a P0 instruction, code
//! not mapped) is dropped. One left: its elements are reported. Several
//! left that walk on alike (or after [`MAX_FORK_PACKETS`] packets): the one
//! that took the oldest content (the window's start) at each choice is
//! reported, its ranges from the first element where the hypotheses differ
//! up to where they walk on alike marked uncertain. None left: an error
//! element.
//!
//! Only AArch64 code is walked: A32/T32 state gives an
//! [`FlowError::UnsupportedIsa`] element and waits for a new address and
//! context. Bad packets give an error element; the source then waits for the
//! next A-sync (a NO_SYNC element says so), never a panic.
//!
//! The elements, their order and their trace indices are OpenCSD's
//! (`trc_pkt_lister -decode` 1.3.3 agrees line for line on real and
//! synthetic traces, tests/decode_oracle.rs), with one deliberate
//! difference: the atoms a Mispredict or Cancel (formats 2 and 3) packet
//! carries are added after its cancel and mispredict, as the architecture
//! orders them; OpenCSD adds them first, and so cancels or flips the
//! packet's own atoms.

mod code;
mod source;

use codeimage::window::CodeSource;
use perfdata::TimeConv;

use crate::config::EtmV4Config;
use crate::frame::{FrameError, FrameErrorKind, Framing};
use crate::packet::PacketType;
use crate::TracePacket;
use code::{ImageClock, Picker, RunCache, MAX_CHOICES};
use source::{Code, Source};

/// Instruction set of the traced PE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Isa {
    A32,
    T32,
    A64,
    /// Not known yet (no context seen).
    #[default]
    Unknown,
}

impl Isa {
    /// OpenCSD's short name (`A64`, `T32`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Isa::A32 => "A32",
            Isa::T32 => "T32",
            Isa::A64 => "A64",
            Isa::Unknown => "Unk",
        }
    }
}

/// Kind of the last instruction of a range (the P0 instruction it ends at).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InstrType {
    /// Not a P0 instruction (a range cut short, or walked to an exception's return address).
    Other,
    /// Direct branch.
    Branch,
    /// Indirect branch (register target, returns, ERET).
    IndirectBranch,
    /// Instruction barrier (a P0 instruction in ETMv4).
    Isb,
    /// WFI/WFE, P0 when TRCIDR2.WFXMODE says so.
    WfiWfe,
}

/// Finer kind of the last instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InstrSubtype {
    None,
    /// BL, BLR: a call that sets the link register.
    Link,
    /// A64 RET.
    Ret,
    /// A64 ERET.
    Eret,
}

/// Instructions executed from `start` up to `end` (exclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InstrRange {
    pub start: u64,
    pub end: u64,
    pub num_i: u32,
    /// Size in bytes of the last instruction.
    pub last_size: u8,
    pub isa: Isa,
    /// The last instruction's atom: E (true, taken / executed) or N.
    pub executed: bool,
    pub last_type: InstrType,
    pub last_subtype: InstrSubtype,
    /// The last instruction is conditional (B.cond, CBZ, TBZ, ...).
    pub last_cond: bool,
    /// Code in the range changed between the timestamps around it, and the
    /// trace could not tell which content ran: this range is the one
    /// walked over the oldest content, others fit the trace too.
    pub uncertain: bool,
    /// The words of the range decoded from a content newer than the one at
    /// its window's start (where the code changed inside the window); every
    /// other word is the code at the window's start.
    pub picked: Picked,
}

/// Words a walk decoded from a content other than the oldest in its window,
/// each at its byte offset from its range's start: at most [`MAX_CHOICES`],
/// as only a hypothesis's script of choices takes such a content. Offsets,
/// not addresses, keep ranges (copied often) small.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Picked {
    len: u8,
    offsets: [u32; MAX_CHOICES],
    words: [u32; MAX_CHOICES],
}

impl Picked {
    /// The word decoded at `offset` from the range's start, when it was picked.
    pub fn word_at(&self, offset: u32) -> Option<u32> {
        let n = self.len as usize;
        self.offsets[..n].iter().rposition(|&o| o == offset).map(|i| self.words[i])
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Notes `word` decoded at `offset` (a full list keeps what it has: a
    /// script makes at most [`MAX_CHOICES`] choices).
    pub fn push(&mut self, offset: u32, word: u32) {
        let n = self.len as usize;
        if n < MAX_CHOICES {
            self.offsets[n] = offset;
            self.words[n] = word;
            self.len += 1;
        }
    }
}

impl InstrRange {
    /// The word the range's walk decoded at `addr`, when it was picked.
    pub fn picked_word(&self, addr: u64) -> Option<u32> {
        self.picked.word_at(u32::try_from(addr.wrapping_sub(self.start)).ok()?)
    }

    /// Notes `word` picked at `addr`. A word 4 GiB or more past the start
    /// is not in the range (a walk is at most `MAX_WALK` words): none is
    /// noted, as no address of the range could read it.
    pub fn note_picked(&mut self, addr: u64, word: u32) {
        if let Ok(offset) = u32::try_from(addr.wrapping_sub(self.start)) {
            self.picked.push(offset, word);
        }
    }
}

/// The PE's state from a context packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeContext {
    pub isa: Isa,
    pub el: u8,
    pub secure: bool,
    pub aarch64: bool,
    /// Present when the packet carried it.
    pub vmid: Option<u32>,
    pub context_id: Option<u32>,
}

/// Why a source is not synchronised, or why its trace ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnsyncReason {
    /// Start of the trace.
    InitDecoder,
    /// The decoder was reset (a frame-level fault).
    ResetDecoder,
    Overflow,
    Discard,
    /// A bad packet; waiting for the next A-sync.
    BadPacket,
    EndOfTrace,
}

impl UnsyncReason {
    pub fn name(self) -> &'static str {
        match self {
            UnsyncReason::InitDecoder => "init-decoder",
            UnsyncReason::ResetDecoder => "reset-decoder",
            UnsyncReason::Overflow => "overflow",
            UnsyncReason::Discard => "discard",
            UnsyncReason::BadPacket => "bad-packet",
            UnsyncReason::EndOfTrace => "end-of-trace",
        }
    }
}

/// Why tracing (re)starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceOnReason {
    /// Start of trace or the trace filter turning on again.
    Normal,
    /// After a trace unit overflow.
    Overflow,
}

/// Bad or undecodable trace found by the flow decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum FlowError {
    #[error("bad packet {}: waiting for the next A-sync", .0.name())]
    BadPacket(PacketType),
    #[error("packet {} is not supported by the flow decoder (data, Q or conditional trace): waiting for the next A-sync", .0.name())]
    UnsupportedPacket(PacketType),
    #[error("{isa:?} code at {addr:#x}: only AArch64 code is followed; waiting for a new address and context")]
    UnsupportedIsa { isa: Isa, addr: u64 },
    #[error("commit of more P0 elements than the trace holds")]
    CommitOverrun,
    #[error("cancel of more P0 elements than the trace holds")]
    CancelOverrun,
    #[error("mispredict with no atom to correct")]
    MispredictWithoutAtom,
    #[error("exception without its return address")]
    ExceptionWithoutAddress,
    #[error("return stack empty at an indirect branch")]
    ReturnStackEmpty,
    #[error("frame-level fault in the trace buffer: decoder reset")]
    Frame,
    #[error("code at {addr:#x} changes between two timestamps and no content it had fits the trace: waiting for the next A-sync")]
    NoCandidateFits { addr: u64 },
}

/// What an element says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemKind {
    NoSync(UnsyncReason),
    TraceOn(TraceOnReason),
    PeContext(PeContext),
    InstrRange(InstrRange),
    /// The code at this address is not in the image.
    AddrNacc(u64),
    Exception {
        number: u16,
        /// Preferred return address.
        ret_addr: u64,
        /// The return address is also the target of the previous branch.
        ret_addr_is_target: bool,
    },
    ExceptionReturn,
    Timestamp {
        value: u64,
        cycles: Option<u32>,
    },
    CycleCount(u32),
    Event(u8),
    EoTrace(UnsyncReason),
    Error(FlowError),
}

/// One generic trace element: which source, the trace index of the packet
/// that produced it, and what it says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Element {
    pub trace_id: u8,
    pub index: u64,
    pub kind: ElemKind,
}

/// The flow decoders of a buffer's sources, by trace ID. Feed it every
/// packet in buffer order ([`FlowDecoder::packet`]), frame errors
/// ([`FlowDecoder::frame_error`]) and the end of each source's trace
/// ([`FlowDecoder::finish`]); elements are appended to the caller's vector.
pub struct FlowDecoder<C: CodeSource> {
    code: C,
    clock: ImageClock,
    sources: Vec<Slot>,
    route: [u8; 128],
}

/// Packets a fork of hypotheses lasts at most: then the oldest content wins, uncertain.
pub const MAX_FORK_PACKETS: u32 = 64;

/// Hypotheses kept at most per source.
const MAX_ALTS: usize = 8;

/// One trace ID's decoder.
struct Slot {
    source: Source,
    cache: RunCache,
    /// The trace's timestamps, ascending; empty: code is read at one time.
    stamps: Vec<u64>,
    /// After a choice among candidates: the hypotheses that still fit, in
    /// the order of their choices (oldest content first), each with the
    /// elements it produced since the fork.
    alts: Vec<Alt>,
    /// Packets since the fork.
    since_fork: u32,
    /// Hypotheses were dropped for the bound: the one reported is uncertain.
    truncated: bool,
    /// Where the walk that forked started.
    fork_addr: u64,
    /// The source before the packet being decoded (its allocation reused).
    before: Source,
}

struct Alt {
    source: Source,
    out: Vec<Element>,
}

const NONE: u8 = u8::MAX;

impl<C: CodeSource> FlowDecoder<C> {
    /// Decoders for `configs` (by trace ID) reading code from `code`.
    pub fn new(code: C, configs: &[EtmV4Config]) -> FlowDecoder<C> {
        let mut route = [NONE; 128];
        let mut sources = Vec::new();
        for c in configs {
            let id = c.trace_id() as usize;
            if route[id] == NONE {
                route[id] = sources.len() as u8;
                sources.push(Slot {
                    source: Source::new(c),
                    before: Source::new(c),
                    cache: RunCache::new(),
                    stamps: Vec::new(),
                    alts: Vec::new(),
                    since_fork: 0,
                    truncated: false,
                    fork_addr: 0,
                });
            }
        }
        FlowDecoder { code, clock: ImageClock::default(), sources, route }
    }

    /// Decoders for a buffer with `framing`: unframed data is one source's
    /// (the first config's), reported under the framing's trace ID as
    /// [`crate::PacketStream`] reports it.
    pub fn for_buffer(code: C, framing: Framing, configs: &[EtmV4Config]) -> FlowDecoder<C> {
        match (framing, configs.first()) {
            (Framing::Raw { trace_id }, Some(c)) => {
                let c = EtmV4Config { traceidr: trace_id as u32, ..*c };
                FlowDecoder::new(code, &[c])
            }
            _ => FlowDecoder::new(code, configs),
        }
    }

    /// Reads code at the perf time of the trace's timestamps, for an image
    /// keyed by perf time: the timestamps are the clock counter `conv`
    /// converts (CoreSight with the kernel's counter as timestamp source).
    pub fn with_perf_clock(mut self, conv: TimeConv) -> FlowDecoder<C> {
        self.clock = ImageClock(Some(conv));
        for s in &mut self.sources {
            s.source.update_code_window(&self.clock);
        }
        self
    }

    /// The code source.
    pub fn code(&self) -> &C {
        &self.code
    }

    /// Trace IDs with a decoder, ascending.
    pub fn trace_ids(&self) -> impl Iterator<Item = u8> + '_ {
        (0..128u8).filter(|&id| self.route[id as usize] != NONE)
    }

    /// Reads code over windows between timestamps: the timestamps of every
    /// source in `reader` (a copy of the reader about to be decoded, at the
    /// same position) are collected first.
    pub fn window_timestamps(&mut self, reader: crate::PacketReader<'_>) {
        self.window_timestamps_scanned(reader, |_| {});
    }

    /// As [`FlowDecoder::window_timestamps`], telling `scanned` the trace
    /// index of each packet read (a caller may let go of the bytes behind).
    pub fn window_timestamps_scanned(&mut self, mut reader: crate::PacketReader<'_>, mut scanned: impl FnMut(u64)) {
        let mut all = vec![Vec::new(); 128];
        while let Some(item) = reader.next() {
            if let Ok(p) = &item {
                scanned(p.index);
            }
            if let Ok(TracePacket { trace_id, packet: crate::Packet::Timestamp(t), .. }) = item {
                all[(trace_id & 0x7F) as usize].push(t.value);
            }
        }
        for (id, stamps) in all.into_iter().enumerate() {
            self.set_timestamps(id as u8, stamps);
        }
    }

    /// Reads the code of `trace_id` over windows between these timestamps
    /// (any order); none: at the latest timestamp alone.
    pub fn set_timestamps(&mut self, trace_id: u8, mut stamps: Vec<u64>) {
        let slot = self.route[(trace_id & 0x7F) as usize];
        if let Some(s) = self.sources.get_mut(slot as usize) {
            stamps.sort_unstable();
            s.source.set_windows(stamps.first().copied(), &self.clock);
            s.stamps = stamps;
        }
    }

    /// Decodes one packet; packets of trace IDs without a decoder are ignored.
    #[inline]
    pub fn packet(&mut self, p: &TracePacket<'_>, out: &mut Vec<Element>) {
        let slot = self.route[(p.trace_id & 0x7F) as usize];
        let Some(s) = self.sources.get_mut(slot as usize) else {
            return;
        };
        if s.stamps.is_empty() {
            let mut code = Code { src: &self.code, cache: &mut s.cache, clock: &self.clock };
            s.source.packet(p, &mut code, out);
            return;
        }
        s.window_packet(p, &self.code, &self.clock, out);
    }

    /// A frame-level fault: every source loses sync (as their packet
    /// decoders do). A frame cut short by the end of the buffer is not a
    /// fault in the trace before it: nothing changes.
    pub fn frame_error(&mut self, e: &FrameError, out: &mut Vec<Element>) {
        if matches!(e.kind, FrameErrorKind::PartialFrame(_)) {
            return;
        }
        for s in &mut self.sources {
            s.settle(out);
            s.source.reset_after_fault(out);
        }
    }

    /// End of the trace of `trace_id`: pending timestamps and the EO_TRACE element.
    pub fn finish(&mut self, trace_id: u8, out: &mut Vec<Element>) {
        let slot = self.route[(trace_id & 0x7F) as usize];
        if let Some(s) = self.sources.get_mut(slot as usize) {
            s.settle(out);
            s.source.finish(out);
        }
    }
}

impl Slot {
    /// One packet over windows: forks where a walk chose among candidates,
    /// and settles the hypotheses the trace decides. Kept out of line: the
    /// decode at one time stays as small as it was.
    #[inline(never)]
    fn window_packet<C: CodeSource>(&mut self, p: &TracePacket<'_>, src: &C, clock: &ImageClock, out: &mut Vec<Element>) {
        if let crate::Packet::Timestamp(t) = p.packet {
            let next = self.stamps.partition_point(|&s| s <= t.value);
            let hi = self.stamps.get(next).copied().unwrap_or(u64::MAX);
            self.source.set_next_timestamp(hi, clock);
            for a in &mut self.alts {
                a.source.set_next_timestamp(hi, clock);
            }
        }
        let mut code = Code { src, cache: &mut self.cache, clock };
        if self.alts.is_empty() {
            self.before.clone_from(&self.source);
            let mark = out.len();
            self.source.pick = Picker::default();
            self.source.packet(p, &mut code, out);
            if self.source.pick.fresh.is_none() {
                return;
            }
            out.truncate(mark);
            self.fork_addr = self.source.pick.fresh_addr;
            self.since_fork = 0;
            self.truncated = false;
            let mut alts = Vec::new();
            self.truncated |= expand(&self.before, p, &mut code, Vec::new(), &mut alts);
            self.alts = alts;
        } else {
            self.since_fork += 1;
            let old = std::mem::take(&mut self.alts);
            let mut alts = Vec::with_capacity(old.len());
            for mut a in old {
                if alts.len() >= MAX_ALTS {
                    self.truncated = true;
                    break;
                }
                let before = a.source.clone();
                let mark = a.out.len();
                a.source.pick = Picker::default();
                a.source.packet(p, &mut code, &mut a.out);
                if a.source.pick.fresh.is_none() {
                    alts.push(a);
                } else {
                    a.out.truncate(mark);
                    self.truncated |= expand(&before, p, &mut code, a.out, &mut alts);
                }
            }
            self.alts = alts;
        }
        self.resolve(p.index, false, out);
    }

    /// Drops the hypotheses the trace contradicts; reports one when it is
    /// the only one left, or when the rest walk on alike, or `force`.
    fn resolve(&mut self, index: u64, force: bool, out: &mut Vec<Element>) {
        if self.alts.is_empty() {
            return;
        }
        for a in &mut self.alts {
            a.source.misfit |= a.out.iter().any(|e| matches!(e.kind, ElemKind::Error(_) | ElemKind::AddrNacc(_)));
        }
        let fits = self.alts.iter().filter(|a| !a.source.misfit).count();
        if fits == 0 {
            let mut a = self.alts.swap_remove(0);
            self.alts.clear();
            a.source.misfit = false;
            a.source.fail_no_fit(index, self.fork_addr, out);
            self.source = a.source;
            return;
        }
        self.alts.retain(|a| !a.source.misfit);
        let alike = self.alts[1..].iter().all(|a| a.source.same_future(&self.alts[0].source));
        if self.alts.len() > 1 && !alike && !force && self.since_fork < MAX_FORK_PACKETS {
            return;
        }
        let alts = std::mem::take(&mut self.alts);
        let mut first = alts.into_iter();
        let mut a = first.next().expect("one hypothesis fits");
        let others: Vec<Alt> = first.collect();
        // Certain: what every hypothesis produced alike, up to the first difference.
        let same = others.iter().map(|o| o.out.iter().zip(&a.out).take_while(|(x, y)| same_walk(x, y)).count()).min().unwrap_or(a.out.len());
        let from = if self.truncated { 0 } else { same };
        for e in &mut a.out[from..] {
            if let ElemKind::InstrRange(r) = &mut e.kind {
                r.uncertain = true;
            }
        }
        out.append(&mut a.out);
        a.source.misfit = false;
        self.source = a.source;
    }

    /// Reports the hypothesis at the window's start when several are still open.
    fn settle(&mut self, out: &mut Vec<Element>) {
        let index = self.source.last_index();
        self.resolve(index, true, out);
    }
}

/// Whether two hypotheses' elements say the same, whatever words their
/// ranges picked: alike walks over different contents are not certain, but
/// [`resolve`](Slot::resolve) marks them uncertain only from where the walks differ.
fn same_walk(x: &Element, y: &Element) -> bool {
    let unpicked = |e: &Element| {
        let mut e = *e;
        if let ElemKind::InstrRange(r) = &mut e.kind {
            r.picked = Picked::default();
        }
        e
    };
    unpicked(x) == unpicked(y)
}

/// Decodes packet `p` from the state `before` once per choice among the
/// candidates its walks meet (depth first, oldest content first), onto
/// `alts`; true when the bound dropped some.
fn expand<C: CodeSource>(before: &Source, p: &TracePacket<'_>, code: &mut Code<'_, C>, out: Vec<Element>, alts: &mut Vec<Alt>) -> bool {
    let mut todo: Vec<Vec<u8>> = vec![Vec::new()];
    let mut truncated = false;
    while let Some(script) = todo.pop() {
        if alts.len() >= MAX_ALTS {
            return true;
        }
        let mut s = before.clone();
        s.pick = Picker::with(&script);
        s.misfit = false;
        let mut o = out.clone();
        s.packet(p, code, &mut o);
        match s.pick.fresh {
            Some(n) if script.len() < MAX_CHOICES => {
                for c in (0..n).rev() {
                    let mut next = script.clone();
                    next.push(c);
                    todo.push(next);
                }
            }
            Some(_) => {
                alts.push(Alt { source: s, out: o });
                truncated = true;
            }
            None => alts.push(Alt { source: s, out: o }),
        }
    }
    truncated
}

/// What [`run`] reports, in the order `trc_pkt_lister -decode` prints it.
#[derive(Clone, Copy, Debug)]
pub enum Item<'a> {
    Packet(&'a TracePacket<'a>),
    Frame(&'a FrameError),
    /// An element, after the packet that produced it.
    Element(&'a Element),
    /// The end of a source's trace, after its EO_TRACE element.
    End(u8),
}

/// Decodes a whole buffer: every packet of `reader`, then the elements it
/// produced; at the end each source's EO_TRACE, in trace ID order (a
/// source's cut-off last packet comes just before its own end).
pub fn run<C: CodeSource>(reader: &mut crate::PacketReader<'_>, flow: &mut FlowDecoder<C>, mut f: impl FnMut(Item<'_>)) {
    let mut elems = Vec::with_capacity(256);
    let ids: Vec<u8> = flow.trace_ids().collect();
    let mut ended = 0;
    let mut end = |flow: &mut FlowDecoder<C>, upto: u16, elems: &mut Vec<Element>, f: &mut dyn FnMut(Item<'_>)| {
        while ended < ids.len() && (ids[ended] as u16) < upto {
            flow.finish(ids[ended], elems);
            for e in elems.drain(..) {
                f(Item::Element(&e));
            }
            f(Item::End(ids[ended]));
            ended += 1;
        }
    };
    while let Some((finishing, item)) = reader.next_item() {
        match item {
            Ok(p) => {
                if finishing {
                    end(flow, p.trace_id as u16, &mut elems, &mut f);
                }
                f(Item::Packet(&p));
                flow.packet(&p, &mut elems);
            }
            Err(e) => {
                f(Item::Frame(&e));
                flow.frame_error(&e, &mut elems);
            }
        }
        for e in elems.drain(..) {
            f(Item::Element(&e));
        }
    }
    end(flow, u16::MAX, &mut elems, &mut f);
}
