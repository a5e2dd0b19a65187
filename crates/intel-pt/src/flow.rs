//! Instruction flow: rebuilds every executed instruction from the packets
//! and the code, asking the code at the trace's own time.
//!
//! The decoder walks the code from the last known IP. A conditional branch
//! takes the next TNT bit, an indirect branch, far transfer or uncompressed
//! return the next TIP, a trap the FUP at its address and the TIP of its
//! handler. TSC packets bound the time of what is walked: what runs between
//! two flow packets ran after the last TSC before the first, `a`, and
//! before the first TSC after the second, `b` (the walk cannot tell on
//! which side of a timing packet between them an instruction that needs no
//! packet ran), and the code is asked for `[a, b]`. When a change lands
//! inside it, the candidates are tried in turn against the packets that
//! follow; the one that fits is taken, and if several fit the instruction
//! is reported as uncertain.
//! With [`FlowDecoder::with_mtc`], MTC packets (after a TSC and its TMA)
//! raise the start of that interval between TSCs; with
//! [`FlowDecoder::with_cyc`], CYC packets (after a CBR) narrow it to the
//! cycles between two flow packets. A PSB+ met while walking
//! restates where execution is: its FUP must lie ahead on the walk's path,
//! before the next instruction that needs a packet; else that is an error
//! and the walk goes on from the FUP.
//!
//! Runs of instructions that need no packet are decoded once and cached
//! (`block_cache`), each with the window of time its bytes hold for, as the
//! code source reports it ([`CodeSource::fetch_window`]); a cached block is
//! used only where stepping instruction by instruction would give the same
//! events, so the cache changes speed, not output.
//!
//! # After an error
//!
//! A bad packet: the walk resumes at the next PSB (only there are packet
//! boundaries known again); an overflow: at the FUP after it (SDM); a PSB+
//! whose FUP the walk does not reach: at that FUP. Otherwise the packets
//! are whole and the walk and the trace disagree (a TNT bit flipped, a TIP's
//! IP damaged, code other than what ran): the walk resumes at the next
//! TIP's target ([`Recovery::NextTip`], as perf does), or at the next PSB if
//! that target has no code (its compressed IP built on a damaged last IP);
//! [`Recovery::NextPsb`] always waits for the next PSB, as libipt does.
//! Measured on the simulator's int3 run (4 CPUs, 200,000 instructions each,
//! TSC every 20 ns), 64 bits flipped per CPU, 3 seeds, timeline mode,
//! instructions right / wrong / missing of 2,400,000, and errors
//! (`cargo test --release -p sim --test recovery -- --ignored --nocapture`):
//!
//! | bits flipped in | next PSB | next TIP |
//! |---|---|---|
//! | TNT payloads | 1,778,238 / 4,068 / 617,824, 414 | 2,390,497 / 5,040 / 4,703, 552 |
//! | TIP IPs | 1,788,233 / 1,248 / 610,633, 438 | 2,392,301 / 1,728 / 6,295, 603 |
//! | any byte of a flow packet | 1,709,541 / 1,759 / 688,867, 462 | 2,196,113 / 1,998 / 202,169, 638 |
//!
//! Without the fallback to the PSB the last row has the same instructions
//! and 4,087 errors (every compressed TIP after a damaged last IP misses
//! the code). Where the code is wrong rather than the trace (no poke
//! awareness: `poketrace demo`'s static mode, on the run with no events),
//! resuming at the TIP decodes 404,012 right of 800,000 instead of 26,972,
//! but 224,920 wrong instead of 6,876, with 8,248 errors instead of 296
//! (perf, which resumes at the next packet with an IP, reports 15,203 on
//! the same data: `perf script --itrace=e`).

use std::cell::Cell;
use std::ops::Range;

use isa::{BranchClass, Insn, KernelIdioms};

pub use crate::block_cache::SharedBlocks;
use crate::block_cache::{Block, BlockCache, CALL, CLASSES, JUMP, MAX_BLOCK_INSNS};
use crate::decode::Quick;
use crate::{Packet, PacketDecoder, PacketError};

/// perf time in nanoseconds.
pub type Time = u64;

/// What the code source found at an address for a time interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// These bytes (count filled), the same over the whole interval.
    Exact(usize),
    /// Several contents are possible; this is candidate `which` of `count`.
    Candidate { filled: usize, count: usize },
    /// Nothing mapped there.
    Unmapped,
}

/// One content a code source finds possible at an address for `[lo, hi]`:
/// its bytes (`len` filled) and the first and last times within `[lo, hi]`
/// it holds, so that an instruction read from it ran within `from..=to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Content {
    pub bytes: [u8; 16],
    pub len: usize,
    pub from: Time,
    pub to: Time,
}

/// Code bytes at an address for a time interval (a time-versioned image).
pub trait CodeSource {
    /// Fills `buf` with candidate `which` of the code at `addr` for `[lo, hi]`.
    fn fetch(&self, addr: u64, lo: Time, hi: Time, which: usize, buf: &mut [u8; 16]) -> Fetch;

    /// What [`CodeSource::fetch`] gives for `which` in `0..count`, into
    /// `out` (those it finds unmapped left out), with when each holds. The
    /// default calls `fetch` for each and says each may hold over all of
    /// `[lo, hi]`; a source that works out all its candidates at once gives
    /// them in one go, with their times. (The times steer the choice, so a
    /// source that wraps another forwards this too.)
    fn candidates(&self, addr: u64, lo: Time, hi: Time, count: usize, out: &mut Vec<Content>) {
        for which in 0..count {
            let mut bytes = [0u8; 16];
            match self.fetch(addr, lo, hi, which, &mut bytes) {
                Fetch::Exact(len) | Fetch::Candidate { filled: len, .. } => out.push(Content { bytes, len, from: lo, to: hi }),
                Fetch::Unmapped => {}
            }
        }
    }

    /// For the decoded-block cache: what [`CodeSource::fetch`] gives as
    /// `Exact` at `addr` for `[lo, hi]` (bytes filled), and a window of time
    /// such that `fetch` gives the same bytes, exactly, for every `[lo', hi']`
    /// that [`CodeSource::admits`] with it. `None` (the default) when the code
    /// there is not exact, or the source does not say: no block is cached.
    fn fetch_window(&self, _addr: u64, _lo: Time, _hi: Time, _buf: &mut [u8; 16]) -> Option<(usize, Range<Time>)> {
        None
    }

    /// For building cached blocks without a fetch per instruction: bytes at
    /// `addr` such that `fetch` of any 16 of them gives those 16 for every
    /// `[lo', hi']` [`CodeSource::admits`] with the window. `None` (the
    /// default): [`CodeSource::fetch_window`] instruction by instruction.
    fn code_run(&self, _addr: u64, _lo: Time, _hi: Time) -> Option<(&[u8], Range<Time>)> {
        None
    }

    /// Whether bytes read with `window` (from [`CodeSource::fetch_window`])
    /// are what `fetch` gives for `[lo, hi]`.
    fn admits(&self, _window: &Range<Time>, _lo: Time, _hi: Time) -> bool {
        false
    }

    /// Whether what the source gives depends on `hi`, so the decoder must
    /// work it out (true, the default, unless the source says otherwise).
    fn reads_hi(&self) -> bool {
        true
    }

    /// Bytes of code there are to walk, at most (0, the default: not
    /// known): the decoded-block cache makes its first table big enough for
    /// their blocks instead of growing to it.
    fn code_bytes(&self) -> u64 {
        0
    }
}

/// TSC to perf time, as perf converts it (AUXTRACE_INFO time_shift, time_mult, time_zero).
#[derive(Clone, Copy, Debug)]
pub struct TimeConv {
    pub shift: u32,
    pub mult: u64,
    pub zero: u64,
}

impl TimeConv {
    pub fn perf_time(&self, tsc: u64) -> Time {
        let shift = self.shift.min(63);
        let quot = tsc >> shift;
        let rem = tsc & ((1u64 << shift) - 1);
        self.zero.wrapping_add(quot.wrapping_mul(self.mult)).wrapping_add(rem.wrapping_mul(self.mult) >> shift)
    }
}

/// How the trace was configured.
#[derive(Clone, Debug)]
pub struct FlowConfig {
    pub time: TimeConv,
    /// Return compression off (`noretcomp`): every RET has a TIP.
    pub noretcomp: bool,
    pub idioms: KernelIdioms,
    /// Instructions walked without a packet before giving up (a loop in the image).
    pub max_walk: u64,
    /// Instructions a candidate is tried for before it counts as fitting.
    pub trial_insns: u64,
}

/// What the decoder reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowEvent {
    /// An executed instruction, run within `[lo, hi]`; `uncertain` when
    /// several code contents fit the trace.
    Insn { ip: u64, len: u8, class: BranchClass, lo: Time, hi: Time, uncertain: bool },
    /// The instruction at `from` trapped (INT3, a kprobe or a site being
    /// poked) or was interrupted, into the handler at `to`. The trapping
    /// instruction is reported here, not as an [`FlowEvent::Insn`].
    Trap { from: u64, to: u64, time: Time },
    /// Tracing stopped before the instruction at `at` (when known): by a
    /// TIP.PGD when `disabled` (`to` is its IP, when the packet carries one),
    /// else because the trace data ended.
    End { time: Time, at: Option<u64>, disabled: bool, to: Option<u64> },
    /// The trace and the code disagree; decoding resumes at the next TIP's
    /// target (after a bad packet, at the next PSB; after an overflow, at
    /// the FUP that follows it; after a PSB+ whose FUP the walk does not
    /// reach, at that FUP).
    Error { offset: usize, time: Time, ip: Option<u64>, kind: FlowErrorKind },
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
    /// is above (`block_cache`'s encoding).
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

    /// How many instructions.
    pub fn len(&self) -> usize {
        self.lens.len() + 1
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

    /// Each instruction in order, as the [`FlowEvent::Insn`] stepping
    /// would give.
    #[inline(always)]
    pub fn for_each_insn(&self, mut f: impl FnMut(FlowEvent)) {
        let (lo, hi) = (self.lo, self.hi);
        let mut at = self.ip;
        if self.targets.is_empty() {
            // One straight run: no jump or call before the last instruction.
            for &l in self.lens {
                let len = l & 15;
                f(FlowEvent::Insn { ip: at, len, class: CLASSES[(l >> 4) as usize & 1], lo, hi, uncertain: false });
                at = at.wrapping_add(len as u64);
            }
        } else {
            let mut targets = self.targets.iter();
            for &l in self.lens {
                let len = l & 15;
                f(FlowEvent::Insn { ip: at, len, class: CLASSES[(l >> 4) as usize & 3], lo, hi, uncertain: false });
                at = match l & !15 {
                    JUMP | CALL => *targets.next().expect("a target per jump or call"),
                    _ => at.wrapping_add(len as u64),
                };
            }
        }
        f(FlowEvent::Insn { ip: self.last_ip, len: self.last.len, class: self.last.class, lo: self.last_lo, hi, uncertain: false });
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
    /// Too many instructions without using a packet.
    NoProgress,
    /// The trace ended while the decoder needed more.
    EndOfTrace,
    /// An overflow packet: the processor lost trace.
    Overflow,
    /// A PSB+ met while walking says execution is at `fup` (`None`: tracing
    /// off), which the walk does not reach before it needs a packet.
    PsbMismatch {
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
            FlowErrorKind::NoProgress => "no packet consumed for too long".into(),
            FlowErrorKind::EndOfTrace => "trace ended".into(),
            FlowErrorKind::Overflow => "overflow: trace lost".into(),
            FlowErrorKind::PsbMismatch { fup: Some(ip) } => format!("PSB+ says execution is at {ip:#x}, off the walk's path"),
            FlowErrorKind::PsbMismatch { fup: None } => "PSB+ says tracing is off, but the walk is tracing".into(),
        }
    }
}

/// A flow packet, the next one the walk will consume.
#[derive(Clone, Copy, Debug)]
enum Flow {
    Tnt { bits: u64, count: u8 },
    Tip(Option<u64>),
    Pgd(Option<u64>),
    Fup(Option<u64>),
}

/// Everything the walk changes: cheap to copy for trials.
#[derive(Clone)]
struct State<'a> {
    packets: Packets<'a>,
    /// A scan ahead of the walk (up to [`AHEAD`] bytes), which asks the
    /// block cache to bring in the entries of the TIPs' targets before the
    /// walk reaches them.
    ahead: PacketDecoder<'a>,
    ip: Option<u64>,
    tnt_bits: u64,
    tnt_count: u8,
    stack: ReturnStack,
    /// The earliest the instructions from here ran: the time known at the
    /// last flow packet taken. What runs up to the next flow packet may
    /// have run before the timing packets ahead of it, so those raise this
    /// only once that packet is taken (to `now`).
    lo: Time,
    /// The time the packets read so far give (what the timing packets
    /// set): `lo` once the walk takes the peeked packet. Not below `lo`,
    /// nor above `hi`.
    now: Time,
    /// The latest the instructions from here ran: the next TSC's time, or
    /// sooner the end of the period the next MTC names.
    hi: Time,
    /// The next TSC's time, and its offset (re-scan when passed).
    tsc_hi: Time,
    hi_at: usize,
    /// The end of the next MTC's period (MTC timing), and its offset.
    mtc_hi: Time,
    mtc_hi_at: usize,
    /// MTC timing (with [`FlowDecoder::with_mtc`]): the last TSC, and the
    /// CTC count it is converted from.
    mtc: MtcState,
    /// CYC timing (with [`FlowDecoder::with_cyc`]).
    cyc: CycState,
    peeked: Option<(usize, Flow)>,
    walked: u64,
    /// The IP of the last TIP.PGD taken (None when it had none).
    pgd_ip: Option<u64>,
    /// An overflow was met: the next FUP says where tracing resumed.
    after_ovf: bool,
    /// A decode error left the packets whole: the next TIP's target says
    /// where execution is.
    after_error: bool,
    /// Where the walk last resumed after an error (a TIP's target, a PSB+'s FUP).
    resumed_at: Option<u64>,
    /// Where this decoder's segment ends (the next segment's PSB): reaching
    /// it ends the run, without an event. Trials look past it.
    stop_at: usize,
    /// Where the next segment's walk starts (its PSB+'s FUP), ahead on this
    /// walk's path: the run walks up to it before it ends.
    tail_to: Option<u64>,
    /// In a trial, while its first instruction runs: that instruction and
    /// its IP, the content the PSB+ check follows there.
    tried: Option<(u64, Insn)>,
}

struct Failure {
    offset: usize,
    kind: FlowErrorKind,
}

/// Bytes of trace the scan for TIP targets keeps ahead of the walk.
const AHEAD: usize = 256;

/// Moves the scan ahead of the walk to [`AHEAD`] bytes past it, asking
/// `cache` to bring in each TIP target's entry.
#[inline(never)]
fn prefetch_ahead(st: &mut State<'_>, cache: &BlockCache) {
    let walk = st.packets.offset();
    if st.ahead.offset() < walk {
        st.ahead = st.packets.dec.clone();
    }
    let limit = walk + AHEAD;
    loop {
        st.ahead.scan_tips(limit, |ip| cache.prefetch(ip));
        if st.ahead.offset() >= limit {
            break;
        }
        match st.ahead.next_packet() {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(_) => {
                st.ahead.sync_forward();
            }
        }
    }
}

/// Turns one walk of [`FlowDecoder::run_interleaved`] takes in a row at most
/// while its blocks were looked up recently.
const MAX_RUN: usize = 64;

/// The blocks [`FlowDecoder::run_interleaved`]'s walks looked up lately (a
/// tag per slot, the newest block in it), to tell which entries are likely
/// still near the core: a walk goes on to such a block at once, and waits
/// its turn (its entry asked for) only for the others.
struct Recent {
    tags: Box<[u16; RECENT]>,
}

/// Slots of [`Recent`]: 8 KB of tags, far fewer blocks than L2 holds
/// the entries of (1K to 64K slots measured the same on vmlinux).
const RECENT: usize = 1 << 12;

impl Recent {
    fn new() -> Self {
        Recent { tags: Box::new([0; RECENT]) }
    }

    /// Whether `ip` was looked up lately; it is noted as looked up now.
    #[inline(always)]
    fn check(&mut self, ip: u64) -> bool {
        let (slot, tag) = Self::place(ip);
        std::mem::replace(&mut self.tags[slot], tag) == tag
    }

    /// `ip`'s slot, and its tag there (never 0, the empty slot's).
    #[inline(always)]
    fn place(ip: u64) -> (usize, u16) {
        let h = ip.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((h >> (64 - RECENT.trailing_zeros())) as usize, (h >> 32) as u16 | 1)
    }
}

/// A [`Failure`]'s offset when the walk reached the end of its segment.
const SEGMENT_END: usize = usize::MAX;

/// Decodes one AUX buffer's packets into instruction flow.
///
/// Blocks of decoded code are cached across calls to [`FlowDecoder::run`]
/// and buffers given to [`FlowDecoder::reset`] (the code source and config
/// stay the same), so decoding several buffers with one decoder decodes each
/// piece of code once.
pub struct FlowDecoder<'a, C: CodeSource> {
    buf: &'a [u8],
    code: &'a C,
    cfg: FlowConfig,
    st: State<'a>,
    cache: BlockCache,
    /// Offset of `buf` in the whole trace, for error offsets.
    base: usize,
    mtc: Option<MtcConv>,
    cyc: Option<CycConv>,
    recovery: Recovery,
    /// Whether to find each instruction's `hi`, unless told otherwise.
    upper_bounds: bool,
    /// The last run of code [`CodeSource::code_run`] gave (its start, bytes
    /// and window), which the next block built reads from if it can.
    last_run: Cell<(u64, &'a [u8], Time, Time)>,
}

/// Where the walk goes on after a decode error that leaves the packets
/// whole: the walk and the trace disagree (not a bad packet, after which
/// only the next PSB finds packet boundaries again, nor an overflow, after
/// which the next FUP says where tracing resumed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Recovery {
    /// At the next TIP's target (or TIP.PGE, or PSB+), as perf does; at
    /// the next PSB when that target has no code (its IP was built on a
    /// bad last IP).
    #[default]
    NextTip,
    /// At the next PSB, as libipt does.
    NextPsb,
}

/// MTC packets to time, from perf's AUXTRACE_INFO and the PT event's config:
/// an MTC carries CTC bits `shift + 7 .. shift` (`shift`: the `mtc_period`
/// field of the config), and a CTC tick is `ratio_n / ratio_d` TSC ticks
/// (`tsc_ctc_ratio_n`, `tsc_ctc_ratio_d`: CPUID leaf 0x15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtcConv {
    pub shift: u32,
    pub ratio_n: u32,
    pub ratio_d: u32,
}

impl MtcConv {
    /// From perf's AUXTRACE_INFO words (`mtc_bit`, `mtc_freq_bits`: masks
    /// of the PT event's config; `tsc_ctc_ratio_n`, `tsc_ctc_ratio_d`) and
    /// the event's config: `None` when MTC is off or the ratio unknown.
    pub fn from_perf(config: u64, mtc_bit: u64, mtc_freq_bits: u64, ratio_n: u64, ratio_d: u64) -> Option<MtcConv> {
        if config & mtc_bit == 0 || mtc_bit == 0 || mtc_freq_bits == 0 || ratio_n == 0 || ratio_d == 0 {
            return None;
        }
        let shift = ((config & mtc_freq_bits) >> mtc_freq_bits.trailing_zeros()) as u32;
        Some(MtcConv { shift, ratio_n: u32::try_from(ratio_n).ok()?, ratio_d: u32::try_from(ratio_d).ok()? }.clamped())
    }

    /// At most 15 (the SDM's largest MTC period), so that shifts stay in range.
    fn clamped(self) -> MtcConv {
        MtcConv { shift: self.shift.min(15), ..self }
    }

    fn ctc_to_tsc(&self, ctc: u64) -> u64 {
        (u128::from(ctc) * u128::from(self.ratio_n) / u128::from(self.ratio_d.max(1))) as u64
    }
}

/// Where MTCs count from.
#[derive(Clone, Copy, Default)]
struct MtcState {
    /// The last TSC.
    tsc: u64,
    /// The TSC at CTC 0 of the last TMA's count (perf's `ctc_timestamp`).
    base: u64,
    /// CTC ticks since then, from MTCs.
    delta: u64,
    /// The last MTC's payload (or the TMA's CTC bits in its place).
    last: u8,
    /// A TMA has been seen: MTCs can be placed.
    based: bool,
}

/// CYC packets to time, from perf's AUXTRACE_INFO (`max_non_turbo_ratio`)
/// and the CBR packets of the trace: the TSC runs at the max non-turbo
/// ratio times the bus clock and the core at CBR times it, so a core cycle
/// is `max_non_turbo_ratio / CBR` TSC ticks (perf's conversion when it has
/// not calibrated against MTC or TSC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CycConv {
    pub max_non_turbo_ratio: u32,
}

impl CycConv {
    /// From the PT event's config, perf's `cyc_bit` (a mask of the config)
    /// and `max_non_turbo_ratio` (AUXTRACE_INFO words 14 and 15): `None`
    /// when CYC is off or the ratio unknown.
    pub fn from_perf(config: u64, cyc_bit: u64, max_non_turbo_ratio: u64) -> Option<CycConv> {
        if cyc_bit == 0 || config & cyc_bit == 0 {
            return None;
        }
        let max_non_turbo_ratio = u32::try_from(max_non_turbo_ratio).ok().filter(|&r| r != 0)?;
        Some(CycConv { max_non_turbo_ratio })
    }
}

/// What CYC packets have told of the time. The last CYC's time lies in
/// `[lo + lo_cycles * step_lo, hi + hi_cycles * step_hi]`: each bound is
/// the last one that was firmer, plus the cycles counted since (counted
/// from a base rather than added up, so that rounding does not build up).
#[derive(Clone, Copy, Default)]
struct CycState {
    /// perf time per core cycle in 32.32 fixed point, rounded down and up,
    /// from the last CBR; 0 before one (or for a CBR that cannot convert).
    /// Right after a change of ratio, the smaller and the larger of the old
    /// and the new: the next CYC counts cycles at both.
    step_lo: u64,
    step_hi: u64,
    /// The new ratio's steps, once the next CYC has been counted.
    next_steps: Option<(u64, u64)>,
    cbr: u8,
    lo: Time,
    lo_cycles: u64,
    /// `lo` holds: a CYC has been seen since the count was lost.
    lo_known: bool,
    hi: Time,
    hi_cycles: u64,
    /// `hi` holds: a CYC, TSC or MTC has bounded it since the count was lost.
    hi_known: bool,
    /// A CYC's lower bound, for what follows the flow packet after it: set
    /// when the CYC is read, taken into `lo` with that packet.
    pending: Option<Time>,
    /// An upper bound on what runs before the next flow packet is taken
    /// (its CYC's), or `Time::MAX`.
    bound: Time,
}

impl CycState {
    /// The count is lost (a PSB, an overflow, a CYC without a CBR): both
    /// bounds start again, keeping the ratio.
    fn lose(&mut self) {
        *self = CycState { step_lo: self.step_lo, step_hi: self.step_hi, next_steps: self.next_steps, cbr: self.cbr, ..CycState::default() };
        self.bound = Time::MAX;
    }

    /// Both bounds start again from where they stand (before the steps change).
    fn rebase(&mut self) {
        if let Some(t) = self.last_lo() {
            self.lo = t;
        }
        self.hi = self.last_hi(0);
        (self.lo_cycles, self.hi_cycles) = (0, 0);
    }

    fn last_lo(&self) -> Option<Time> {
        self.lo_known.then(|| self.lo.saturating_add(scale(self.lo_cycles, self.step_lo, false)))
    }

    fn last_hi(&self, more: u64) -> Time {
        if self.hi_known {
            self.hi.saturating_add(scale(self.hi_cycles.saturating_add(more), self.step_hi, true))
        } else {
            Time::MAX
        }
    }

    /// The last CYC ran no later than `t` (a TSC or MTC after it says so).
    fn cap_hi(&mut self, t: Time) {
        if t < self.last_hi(0) {
            self.hi = t;
            self.hi_cycles = 0;
            self.hi_known = true;
        }
    }
}

/// `cycles` times a 32.32 fixed-point step, rounded down or up, saturating.
fn scale(cycles: u64, step: u64, up: bool) -> Time {
    let p = u128::from(cycles) * u128::from(step);
    let p = if up { p + 0xffff_ffff } else { p };
    u64::try_from(p >> 32).unwrap_or(Time::MAX)
}

impl<'a, C: CodeSource> FlowDecoder<'a, C> {
    pub fn new(buf: &'a [u8], code: &'a C, cfg: FlowConfig) -> Self {
        let mut cache = BlockCache::default();
        cache.size_for_code(code.code_bytes());
        FlowDecoder {
            buf,
            code,
            cfg,
            st: State::new(buf),
            cache,
            base: 0,
            mtc: None,
            cyc: None,
            recovery: Recovery::default(),
            upper_bounds: true,
            last_run: Cell::new((0, &[], 0, 0)),
        }
    }

    /// Times what runs between TSCs by the MTC packets too (after a TMA):
    /// each MTC raises the start of the interval instructions are known to
    /// run in. Without it (or with `None`: the event had MTC off) MTC and
    /// TMA packets are ignored.
    pub fn with_mtc(mut self, mtc: impl Into<Option<MtcConv>>) -> Self {
        self.mtc = mtc.into().map(MtcConv::clamped);
        self
    }

    /// Times what runs between flow packets by the CYC packets (cycle-
    /// accurate mode), converted with the last CBR packet's core:bus ratio:
    /// instructions after the flow packet that follows a CYC ran no earlier
    /// than that CYC, those before it no later. Without it (or with `None`:
    /// the event had CYC off, or the max non-turbo ratio is unknown), and
    /// until the first CBR, CYC packets change nothing.
    pub fn with_cyc(mut self, cyc: impl Into<Option<CycConv>>) -> Self {
        self.cyc = cyc.into().filter(|c| c.max_non_turbo_ratio != 0);
        self
    }

    /// Whether events carry an upper bound on their time (`hi`: the next
    /// TSC's, found by scanning the packets ahead at each TSC: a second pass
    /// over them). On unless told. Off, `hi` is `Time::MAX` and the scan is
    /// not made, when that changes nothing else: only TSC timing (no MTC or
    /// CYC, whose times the next TSC caps) over a source that does not
    /// read `hi` ([`CodeSource::reads_hi`]). libipt and perf give no such
    /// bound.
    pub fn with_upper_bounds(mut self, on: bool) -> Self {
        self.upper_bounds = on;
        self
    }

    /// Where the walk goes on after an error that leaves the packets whole
    /// ([`Recovery::NextTip`] unless told).
    pub fn with_recovery(mut self, recovery: Recovery) -> Self {
        self.recovery = recovery;
        self
    }

    /// Starts over on another buffer (another CPU's, another PSB segment),
    /// over the same code, keeping the decoded-block cache.
    pub fn reset(&mut self, buf: &'a [u8]) {
        self.buf = buf;
        self.st = State::new(buf);
        self.base = 0;
    }

    /// Takes the shared block table in use now ([`BlockCache::refresh`]).
    pub(crate) fn refresh_blocks(&mut self) {
        self.cache.refresh();
    }

    /// Whether the block table has outgrown the caches near the core.
    pub(crate) fn blocks_large(&self) -> bool {
        self.cache.large()
    }

    /// Starts over on one PSB segment of `whole`, `start..end` (`start` at a
    /// PSB, `end` at the next, or the end): the run stops where the walk
    /// would read the packet at `end`, and error offsets are `whole`'s.
    pub(crate) fn reset_segment(&mut self, whole: &'a [u8], start: usize, end: usize) {
        self.buf = &whole[start..];
        self.st = State::new(self.buf);
        self.st.stop_at = if end >= whole.len() { usize::MAX } else { end - start };
        self.base = start;
        self.cache.refresh();
    }

    /// Shares the decoded-block cache with the other decoders given `home`
    /// (on other threads, say, for the other CPUs' buffers of one trace), so
    /// each block is built once for all of them. Every decoder sharing one
    /// must read the same code source with the same configuration: a block
    /// is kept for the window of time that source gave for its bytes.
    pub fn with_shared_blocks(mut self, home: std::sync::Arc<SharedBlocks>) -> Self {
        self.cache = BlockCache::shared(home);
        self.cache.size_for_code(self.code.code_bytes());
        self
    }
}

impl<'a> State<'a> {
    /// Takes the peeked flow packet: what follows it ran after the timing
    /// packets before it.
    #[inline(always)]
    fn take_peeked(&mut self) -> Option<(usize, Flow)> {
        let p = self.peeked.take();
        if p.is_some() {
            self.lo = self.now;
        }
        p
    }

    /// The earliest an instruction of `class` at the walk's position ran:
    /// with no TNT bit left, after the timing packets before the peeked
    /// flow packet when it takes that packet.
    #[inline(always)]
    fn packet_lo(&self, class: BranchClass) -> Time {
        let takes = matches!(
            class,
            BranchClass::CondBranch | BranchClass::IndirectJump | BranchClass::IndirectCall | BranchClass::Return | BranchClass::FarTransfer
        );
        if takes && self.tnt_count == 0 && self.peeked.is_some() {
            self.now
        } else {
            self.lo
        }
    }

    fn new(buf: &'a [u8]) -> Self {
        State {
            packets: Packets { dec: PacketDecoder::new(buf) },
            ahead: PacketDecoder::new(buf),
            ip: None,
            tnt_bits: 0,
            tnt_count: 0,
            stack: ReturnStack::default(),
            lo: 0,
            now: 0,
            hi: Time::MAX,
            tsc_hi: Time::MAX,
            hi_at: 0,
            mtc_hi: Time::MAX,
            mtc_hi_at: usize::MAX,
            peeked: None,
            walked: 0,
            mtc: MtcState::default(),
            cyc: CycState { bound: Time::MAX, ..CycState::default() },
            pgd_ip: None,
            after_ovf: false,
            after_error: false,
            resumed_at: None,
            stop_at: usize::MAX,
            tail_to: None,
            tried: None,
        }
    }
}

impl<'a, C: CodeSource> FlowDecoder<'a, C> {
    /// Runs to the end of the buffer, reporting every event, each
    /// instruction as a [`FlowEvent::Insn`].
    pub fn run(&mut self, mut emit: impl FnMut(FlowEvent)) {
        self.run_with(&mut emit);
    }

    /// Runs to the end of the buffer, reporting every event to `sink`, the
    /// instructions of cached blocks a block at a time ([`FlowSink::block`]).
    pub fn run_with(&mut self, sink: &mut impl FlowSink) {
        let mut st = self.st.clone();
        self.start(&mut st, self.buf);
        let mut cache = std::mem::take(&mut self.cache);
        while self.turn::<true>(&mut st, &mut cache, self.base, sink) {}
        self.st = st;
        self.cache = cache;
    }

    /// Decodes `buf` cut at its PSBs ([`crate::parallel::segments`]) on this
    /// thread, up to `lanes` segments at once: a walk goes on while its
    /// next block was looked up lately (among the last few thousand), and
    /// at one that was not it asks for the block's entry and gives the next
    /// walk its turn, so that a walk over code too large for the caches
    /// near the core waits for memory while the others run, not alone, and
    /// a walk over code that fits them runs as if alone. Each segment's
    /// events go to a sink of its own from `make` (the same
    /// events as [`crate::parallel::ParallelFlow::run_segments`]), handed
    /// to `done` in trace order. The block cache is this decoder's, kept.
    pub fn run_interleaved<S: FlowSink>(&mut self, buf: &'a [u8], lanes: usize, make: impl FnMut() -> S, done: impl FnMut(S)) {
        self.cache.refresh();
        self.interleave(buf, &crate::parallel::segments(buf), lanes, make, done);
    }

    /// [`Self::run_interleaved`] over the segments of `buf` that `cuts`
    /// gives (from one PSB to the next, or the end; in order), over the
    /// shared block table this decoder took last ([`Self::refresh_blocks`]).
    pub(crate) fn interleave<S: FlowSink>(
        &mut self,
        buf: &'a [u8],
        cuts: &[(usize, usize)],
        lanes: usize,
        mut make: impl FnMut() -> S,
        mut done: impl FnMut(S),
    ) {
        let lanes = lanes.clamp(1, cuts.len().max(1));
        // Segments from the next to hand out on, finished or not: started
        // only this far ahead of it, so that a long segment holds back a
        // bounded number of finished ones.
        let window = lanes * 4;
        let mut cache = std::mem::take(&mut self.cache);
        let mut walks: Vec<(State<'a>, usize, usize, S)> = Vec::with_capacity(lanes);
        let mut finished: std::collections::VecDeque<Option<S>> = std::collections::VecDeque::with_capacity(window);
        let (mut started, mut handed) = (0, 0);
        let mut recent = Recent::new();
        loop {
            while walks.len() < lanes && started < cuts.len() && started < handed + window {
                let (start, end) = cuts[started];
                let mut st = State::new(&buf[start..]);
                st.stop_at = if end >= buf.len() { usize::MAX } else { end - start };
                self.start(&mut st, &buf[start..]);
                walks.push((st, start, started, make()));
                finished.push_back(None);
                started += 1;
            }
            if walks.is_empty() {
                break;
            }
            let mut i = 0;
            while i < walks.len() {
                let (st, base, _, sink) = &mut walks[i];
                let mut going = true;
                for _ in 0..MAX_RUN {
                    going = self.turn::<false>(st, &mut cache, *base, sink);
                    if !going {
                        break;
                    }
                    if let Some(ip) = st.ip.filter(|&ip| !recent.check(ip)) {
                        cache.prefetch(ip);
                        break;
                    }
                }
                if going {
                    i += 1;
                    continue;
                }
                let (_, _, index, sink) = walks.swap_remove(i);
                finished[index - handed] = Some(sink);
                while let Some(Some(_)) = finished.front() {
                    done(finished.pop_front().flatten().expect("finished"));
                    handed += 1;
                }
                if started < cuts.len() && walks.len() < lanes {
                    break;
                }
            }
        }
        self.cache = cache;
    }

    /// Readies `st` over `buf` for its first turn: past any bytes before the
    /// first PSB, and without the scan for the next TSC when nothing reads it.
    fn start(&self, st: &mut State<'a>, buf: &[u8]) {
        if let Some(at) = crate::find_psb(buf) {
            if at > 0 {
                st.packets.sync_forward();
            }
        }
        if !self.upper_bounds && self.mtc.is_none() && self.cyc.is_none() && !self.code.reads_hi() {
            // No scan for the next TSC (`hi` stays unbounded).
            st.hi_at = usize::MAX;
        }
    }

    /// One step of the walk (with `CHAIN`, the blocks its TNT bits chain
    /// too), an error reported and recovered from; whether the run goes on.
    /// `base` is the offset of `st`'s packets in the whole trace.
    #[inline(always)]
    fn turn<const CHAIN: bool>(&self, st: &mut State<'a>, cache: &mut BlockCache, base: usize, sink: &mut impl FlowSink) -> bool {
        match self.step_cached::<CHAIN>(st, cache, sink) {
            Ok(going) => going,
            Err(f) => self.recover(st, f, base, sink),
        }
    }

    /// After a failure of the walk: the end of its segment (walking on to
    /// the next segment's start), or an error event and where the walk goes
    /// on from. Whether the run goes on.
    #[cold]
    #[inline(never)]
    fn recover(&self, st: &mut State<'a>, f: Failure, base: usize, sink: &mut impl FlowSink) -> bool {
        if f.offset == SEGMENT_END {
            if let Some(to) = st.tail_to.take() {
                self.walk_tail(st, to, sink);
            }
            return false;
        }
        sink.event(FlowEvent::Error { offset: base + f.offset, time: st.lo, ip: st.ip, kind: f.kind });
        if f.kind == FlowErrorKind::EndOfTrace {
            return false;
        }
        if f.kind == FlowErrorKind::Overflow {
            // The packets go on: tracing resumes at the FUP that
            // follows (or a TIP.PGE, or a PSB+), as the SDM says
            // and libipt and perf do. What was pending is lost.
            st.ip = None;
            st.tnt_count = 0;
            st.stack.clear();
            st.peeked = None;
            st.walked = 0;
            st.after_ovf = true;
            return true;
        }
        if let FlowErrorKind::PsbMismatch { fup } = f.kind {
            // The PSB+ says where execution is: the walk goes on
            // from there (a segment's run ends at its next PSB).
            if f.offset >= st.stop_at {
                return false;
            }
            st.ip = fup;
            st.resumed_at = fup;
            st.peeked = None;
            st.walked = 0;
            return true;
        }
        // The walk and the trace disagree, but the packets are
        // whole: the next TIP (or TIP.PGE, or PSB+) says where
        // execution went, as perf resumes. A bad packet needs
        // the next PSB to find packets again; so does no code
        // where the walk had just resumed (a TIP's target, a
        // PSB+'s FUP): the last IP that compressed IPs build on
        // is bad too.
        let resumed_into_nothing = matches!(f.kind, FlowErrorKind::Unmapped | FlowErrorKind::BadInsn) && st.ip.is_some() && st.ip == st.resumed_at;
        st.resumed_at = None;
        if self.recovery == Recovery::NextTip && !matches!(f.kind, FlowErrorKind::Packet(_)) && !resumed_into_nothing {
            st.ip = None;
            st.tnt_count = 0;
            st.stack.clear();
            st.walked = 0;
            st.after_error = true;
            return true;
        }
        let resync = st.packets.sync_forward();
        st.ip = None;
        st.tnt_count = 0;
        st.stack.clear();
        st.peeked = None;
        // The walk starts afresh: a NoProgress count carried over
        // would fail the next PSB segment at its first instruction.
        st.walked = 0;
        if !resync.psb_found || resync.end >= st.stop_at {
            return false;
        }
        true
    }

    /// The next flow packet, processing timing and sync packets on the way.
    #[inline(always)]
    fn peek_flow(&self, st: &mut State<'a>) -> Result<Option<(usize, Flow)>, Failure> {
        match st.peeked {
            Some(p) => Ok(Some(p)),
            None => self.next_flow::<false>(st),
        }
    }

    /// [`Self::peek_flow`] before the walk reads the code at its IP, so that
    /// the code is read for the time up to the next flow packet (the timing
    /// packets before it raise `hi`). Stops before a PSB whose FUP is not
    /// the walk's IP (also at the segment's end), with `None`: its PSB+ is
    /// read where the walk would read it, so that its FUP is checked in the
    /// trial of each candidate content.
    #[inline(always)]
    fn peek_before_fetch(&self, st: &mut State<'a>) -> Result<Option<(usize, Flow)>, Failure> {
        match st.peeked {
            Some(p) => Ok(Some(p)),
            None => self.next_flow::<true>(st),
        }
    }

    /// [`Self::peek_flow`] with nothing peeked yet; with `BEFORE_PSB`,
    /// [`Self::peek_before_fetch`]. The timing packets on the way move
    /// `now`, not `lo` (see [`State::lo`]); a TIP.PGE or a PSB+ moves `lo`
    /// too, since what follows them ran after them, and so does an error.
    fn next_flow<const BEFORE_PSB: bool>(&self, st: &mut State<'a>) -> Result<Option<(usize, Flow)>, Failure> {
        loop {
            // (`stop_at` is usize::MAX when there is no segment end.)
            if st.packets.offset() >= st.stop_at {
                if BEFORE_PSB {
                    return Ok(None);
                }
                let f = self.segment_end(st);
                st.lo = st.now;
                return Err(f);
            }
            // The common packets without building a `Packet` (the same
            // handling as the arms below).
            if let Some((offset, quick)) = st.packets.dec.next_quick() {
                let flow = match quick {
                    Quick::Tnt { bits, count } => Flow::Tnt { bits, count },
                    Quick::Tip(ip) => Flow::Tip(ip),
                    Quick::TipPgd(ip) => Flow::Pgd(ip),
                    Quick::Fup(ip) => Flow::Fup(ip),
                    Quick::TipPge(ip) => {
                        self.tip_pge(st, ip);
                        st.lo = st.now;
                        continue;
                    }
                    Quick::Tsc(tsc) => {
                        self.tsc(st, offset, tsc);
                        continue;
                    }
                    Quick::Mtc(payload) => {
                        self.mtc(st, offset, payload);
                        continue;
                    }
                    Quick::Cyc(cycles) => {
                        self.cyc(st, cycles);
                        continue;
                    }
                    Quick::Pad => continue,
                };
                st.peeked = Some((offset, flow));
                return Ok(st.peeked);
            }
            let before = BEFORE_PSB.then(|| st.packets.clone());
            let packet = match st.packets.next_packet() {
                Ok(p) => p,
                Err(e) => {
                    st.lo = st.now;
                    return Err(packet_failure(e));
                }
            };
            let Some((offset, packet)) = packet else {
                return Ok(None);
            };
            let flow = match packet {
                Packet::TntShort(t) | Packet::TntLong(t) => Flow::Tnt { bits: t.bits, count: t.count },
                Packet::Tip(ip) => Flow::Tip(ip.ip),
                Packet::TipPgd(ip) => Flow::Pgd(ip.ip),
                Packet::TipPge(ip) => {
                    self.tip_pge(st, ip.ip);
                    st.lo = st.now;
                    continue;
                }
                Packet::Fup(ip) => Flow::Fup(ip.ip),
                Packet::Tsc(tsc) => {
                    self.tsc(st, offset, tsc);
                    continue;
                }
                Packet::Tma { ctc, fast_counter } => {
                    self.tma(st, offset, ctc, fast_counter);
                    continue;
                }
                Packet::Mtc(payload) => {
                    self.mtc(st, offset, payload);
                    continue;
                }
                Packet::Cyc(cycles) => {
                    self.cyc(st, cycles);
                    continue;
                }
                Packet::Cbr(ratio) => {
                    self.cbr(st, ratio);
                    continue;
                }
                Packet::Psb => {
                    // At its FUP the walk reads the PSB+ first: what runs
                    // from there ran after it (as a decode starting there
                    // reads it).
                    if let Some(before) = before.filter(|_| psb_fup(st.packets.clone()) != st.ip) {
                        st.packets = before;
                        return Ok(None);
                    }
                    let r = self.psb_plus(st, offset);
                    st.lo = st.now;
                    r?;
                    continue;
                }
                Packet::Ovf => {
                    if self.cyc.is_some() {
                        // CYC packets may be lost with the rest.
                        self.lose_cyc(st);
                    }
                    st.lo = st.now;
                    return Err(Failure { offset, kind: FlowErrorKind::Overflow });
                }
                _ => continue,
            };
            st.peeked = Some((offset, flow));
            return Ok(st.peeked);
        }
    }

    /// A TIP.PGE: tracing (re)starts at `ip`, a flow packet taken.
    #[inline(always)]
    fn tip_pge(&self, st: &mut State<'a>, ip: Option<u64>) {
        st.ip = ip;
        st.walked = 0;
        if st.cyc.pending.is_some() {
            self.cyc_taken(st);
        }
    }

    /// A TSC: the time of what follows, until the next timing packet.
    fn tsc(&self, st: &mut State<'a>, offset: usize, tsc: u64) {
        st.now = self.cfg.time.perf_time(tsc);
        // (A TSC behind the walk's time, in a bad trace, takes it back too.)
        st.lo = st.lo.min(st.now);
        st.mtc.tsc = tsc;
        if self.cyc.is_some() {
            // The last CYC came before this TSC.
            self.cyc_before(st, st.now);
        }
        if offset >= st.hi_at {
            self.next_tsc(st, offset);
        }
        self.next_mtc(st, offset);
    }

    /// A TMA after a TSC: the CTC and fast counter at that TSC, the base
    /// MTCs count from (perf's conversion).
    fn tma(&self, st: &mut State<'a>, offset: usize, ctc: u16, fast_counter: u16) {
        let Some(m) = self.mtc else { return };
        let ctc = u64::from(ctc);
        let rem = ctc & ((1u64 << m.shift) - 1);
        st.mtc.last = (ctc >> m.shift) as u8;
        st.mtc.delta = 0;
        st.mtc.base = st.mtc.tsc.wrapping_sub(u64::from(fast_counter)).wrapping_sub(m.ctc_to_tsc(rem));
        st.mtc.based = true;
        self.next_mtc(st, offset);
    }

    /// The perf time of the CTC tick an MTC with `payload` names, after the
    /// last MTC's; `ahead` periods later (1: the end of that tick's period).
    fn mtc_time(&self, m: &MtcConv, st: &State<'a>, payload: u8, ahead: u64) -> Time {
        let ticks = (u64::from(payload.wrapping_sub(st.mtc.last)) + ahead) << m.shift;
        self.cfg.time.perf_time(st.mtc.base.wrapping_add(m.ctc_to_tsc(st.mtc.delta.wrapping_add(ticks))))
    }

    /// An MTC: CTC bits `shift + 7 .. shift` now, so the time has moved on
    /// by the CTC ticks since the last one. The time never goes back, nor
    /// past the next TSC's.
    fn mtc(&self, st: &mut State<'a>, offset: usize, payload: u8) {
        let Some(m) = self.mtc else { return };
        if !st.mtc.based {
            return;
        }
        let t = self.mtc_time(&m, st, payload, 0);
        if self.cyc.is_some() {
            self.cyc_before_mtc(st, &m, payload);
        }
        st.mtc.delta = st.mtc.delta.wrapping_add(u64::from(payload.wrapping_sub(st.mtc.last)) << m.shift);
        st.mtc.last = payload;
        st.now = st.now.max(t.min(st.tsc_hi));
        if offset >= st.mtc_hi_at {
            self.next_mtc(st, offset);
        } else {
            st.hi = st.tsc_hi.min(st.mtc_hi).min(st.cyc.bound).max(st.now);
        }
    }

    /// Finds the TSC after `from` to bound the time of what comes next.
    fn next_tsc(&self, st: &mut State<'a>, from: usize) {
        st.tsc_hi = Time::MAX;
        st.hi_at = usize::MAX;
        // Too far, or a bad packet: unbounded for now, and scan again at the
        // first TSC past here (after a resync, say), so that one corrupt
        // packet does not leave the rest of the buffer unbounded.
        match st.packets.scan_to_tsc(from.saturating_add(1 << 20), false) {
            Scan::Tsc(off, tsc) => {
                st.tsc_hi = self.cfg.time.perf_time(tsc);
                st.hi_at = off;
            }
            Scan::Stop(off) => st.hi_at = off,
            Scan::Mtc(..) | Scan::End => {}
        }
        st.hi = st.tsc_hi.min(st.mtc_hi).min(st.cyc.bound).max(st.now);
    }

    /// With MTC timing: finds the MTC after `from`, before the next TSC;
    /// what comes before it ran before the end of the CTC period it names
    /// (the MTC says the count has reached that tick, not yet the next).
    fn next_mtc(&self, st: &mut State<'a>, from: usize) {
        st.mtc_hi = Time::MAX;
        st.mtc_hi_at = usize::MAX;
        if let Some(m) = self.mtc.filter(|_| st.mtc.based) {
            match st.packets.scan_to_tsc(from.saturating_add(1 << 20), true) {
                Scan::Mtc(off, payload) => {
                    st.mtc_hi = self.mtc_time(&m, st, payload, 1);
                    st.mtc_hi_at = off;
                }
                Scan::Stop(off) => st.mtc_hi_at = off,
                Scan::Tsc(..) | Scan::End => {}
            }
        }
        st.hi = st.tsc_hi.min(st.mtc_hi).min(st.cyc.bound).max(st.now);
    }

    /// A TSC or MTC says the last CYC ran no later than `t`. Apart (as all
    /// of CYC timing) so that the timing functions stay small without it.
    #[inline(never)]
    fn cyc_before(&self, st: &mut State<'a>, t: Time) {
        st.cyc.cap_hi(t);
    }

    /// An MTC with `payload` says the last CYC ran before the end of the
    /// CTC period it names.
    #[inline(never)]
    fn cyc_before_mtc(&self, st: &mut State<'a>, m: &MtcConv, payload: u8) {
        st.cyc.cap_hi(self.mtc_time(m, st, payload, 1));
    }

    /// A CBR: the core:bus ratio from here on, so the perf time a core
    /// cycle takes. A ratio of 0, or one that does not convert, stops CYC
    /// timing until the next CBR.
    #[inline(never)]
    fn cbr(&self, st: &mut State<'a>, ratio: u8) {
        let Some(c) = self.cyc else { return };
        if ratio == st.cyc.cbr && st.cyc.step_lo != 0 {
            return;
        }
        // A cycle is max_non_turbo_ratio / CBR TSC ticks, a TSC tick
        // mult / 2^shift ns.
        let t = &self.cfg.time;
        let num = u128::from(c.max_non_turbo_ratio) * u128::from(t.mult);
        let den = u128::from(ratio) << t.shift.min(63);
        let (lo, hi) = match num.checked_mul(1 << 32) {
            Some(n) if den != 0 => (n / den, n.div_ceil(den)),
            _ => (0, 0),
        };
        let (step_lo, step_hi) = match (u64::try_from(lo), u64::try_from(hi)) {
            (Ok(lo), Ok(hi)) if lo != 0 => (lo, hi),
            _ => (0, 0),
        };
        // Cycles counted so far convert at the old ratio; the next CYC
        // counts some at the old and some at the new (the change came
        // between the last CYC and it), so it converts at both, the slower
        // for the upper bound and the faster for the lower.
        let c = &mut st.cyc;
        c.rebase();
        c.cbr = ratio;
        // (After another change with no CYC since, the steps span both already.)
        let (old_lo, old_hi) = (c.step_lo, c.step_hi);
        c.next_steps = None;
        if old_lo != 0 && step_lo != 0 {
            (c.step_lo, c.step_hi) = (old_lo.min(step_lo), old_hi.max(step_hi));
            c.next_steps = Some((step_lo, step_hi));
        } else {
            (c.step_lo, c.step_hi) = (step_lo, step_hi);
        }
    }

    /// A CYC: `cycles` core cycles since the last CYC. Its time is at
    /// least the last one's plus those cycles (and what is known of the
    /// time already), and at most the last one's upper bound plus them (and
    /// the next TSC's or MTC's bound). What runs from here to the flow packet
    /// after it ran no later than that; what follows that packet no earlier
    /// than the lower bound, taken in then ([`Self::cyc_taken`]).
    #[inline(never)]
    fn cyc(&self, st: &mut State<'a>, cycles: u64) {
        if self.cyc.is_none() {
            return;
        }
        if st.cyc.step_lo == 0 {
            self.lose_cyc(st);
            return;
        }
        let c = &mut st.cyc;
        let next = st.tsc_hi.min(st.mtc_hi);
        c.lo_cycles = c.lo_cycles.saturating_add(cycles);
        let known = st.now.max(c.pending.unwrap_or(0));
        let lo = match c.last_lo() {
            Some(t) if t >= known => t,
            _ => {
                c.lo = known;
                c.lo_cycles = 0;
                c.lo_known = true;
                known
            }
        };
        c.hi_cycles = c.hi_cycles.saturating_add(cycles);
        if next < c.last_hi(0) {
            c.hi = next;
            c.hi_cycles = 0;
            c.hi_known = next != Time::MAX;
        }
        c.pending = Some(lo.min(next));
        c.bound = c.last_hi(0);
        st.hi = next.min(c.bound).max(st.now);
        if let Some((lo, hi)) = c.next_steps.take() {
            // Counted: the new ratio alone from here.
            c.rebase();
            (c.step_lo, c.step_hi) = (lo, hi);
        }
    }

    /// The flow packet after a CYC is taken: what follows ran no earlier
    /// than that CYC, and no later than the next CYC's upper bound when the
    /// next packet is a CYC (else the next TSC's or MTC's, until one is
    /// read).
    #[inline(never)]
    fn cyc_taken(&self, st: &mut State<'a>) {
        if let Some(t) = st.cyc.pending.take() {
            st.now = st.now.max(t);
            st.lo = st.lo.max(t);
        }
        st.cyc.bound = match st.packets.decoded_next() {
            Some(Packet::Cyc(cycles)) => st.cyc.last_hi(cycles),
            _ => Time::MAX,
        };
        st.hi = st.tsc_hi.min(st.mtc_hi).min(st.cyc.bound).max(st.now);
    }

    /// The CYC count is lost: CYC timing starts again at the next CYC.
    #[inline(never)]
    fn lose_cyc(&self, st: &mut State<'a>) {
        st.cyc.lose();
        st.hi = st.tsc_hi.min(st.mtc_hi).max(st.now);
    }

    /// PSB+: status up to PSBEND. Its FUP is where execution is: a walk not
    /// in sync starts there; a walk in sync must reach it before it needs a
    /// packet (the processor sends pending TNT bits before a PSB, and the walk
    /// reads packets only once it has used up those it holds), else the
    /// trace and the walk disagree ([`FlowErrorKind::PsbMismatch`]).
    /// Returns the FUP's IP.
    fn psb_plus(&self, st: &mut State<'a>, psb_at: usize) -> Result<Option<u64>, Failure> {
        // What runs up to the FUP ran before the PSB's own TSC.
        let (lo, hi) = (st.now, st.hi);
        st.tnt_count = 0;
        // No RET is compressed whose CALL came before a PSB (SDM).
        st.stack.clear();
        let mut fup = None;
        if self.cyc.is_some() {
            // A PSB segment decodes on its own: CYC timing starts again from
            // its TSC (the cycle count goes on across it, but the count of
            // the last CYC before it is not known to a decoder starting here).
            self.lose_cyc(st);
        }
        loop {
            let Some((offset, packet)) = st.packets.next_packet().map_err(packet_failure)? else {
                // Cut short: no PSBEND to say the status is complete.
                st.ip = st.ip.or(fup);
                return Ok(fup);
            };
            match packet {
                Packet::PsbEnd => break,
                Packet::Tsc(tsc) => self.tsc(st, offset, tsc),
                Packet::Tma { ctc, fast_counter } => self.tma(st, offset, ctc, fast_counter),
                Packet::Mtc(payload) => self.mtc(st, offset, payload),
                Packet::Cbr(ratio) => self.cbr(st, ratio),
                Packet::Cyc(cycles) => self.cyc(st, cycles),
                Packet::Fup(ip) if ip.ip.is_some() => fup = ip.ip,
                Packet::Ovf => return Err(Failure { offset, kind: FlowErrorKind::Overflow }),
                _ => {}
            }
        }
        match (st.ip, fup) {
            (None, _) => st.ip = fup,
            (Some(at), Some(to)) if self.reaches(at, to, lo, hi, st.tried.filter(|t| t.0 == at).map(|t| t.1)) => {}
            (Some(_), fup) => return Err(Failure { offset: psb_at, kind: FlowErrorKind::PsbMismatch { fup } }),
        }
        Ok(fup)
    }

    /// Whether the walk from `at` reaches `to` before an instruction that
    /// needs a packet: through code that runs without one (direct jumps and
    /// calls followed), along every candidate content (at `at`, `tried`
    /// alone when given), at most `max_walk` instructions in all.
    #[cold]
    fn reaches(&self, at: u64, to: u64, lo: Time, hi: Time, tried: Option<Insn>) -> bool {
        let start = match tried {
            Some(insn) if at != to => match next_without_packet(at, &insn) {
                Some(next) => next,
                None => return false,
            },
            _ => at,
        };
        let mut todo = vec![start];
        let mut left = self.cfg.max_walk;
        let mut contents = Vec::new();
        while let Some(mut ip) = todo.pop() {
            while ip != to {
                if left == 0 {
                    return false;
                }
                left -= 1;
                contents.clear();
                let mut buf = [0u8; 16];
                match self.code.fetch(ip, lo, hi, 0, &mut buf) {
                    Fetch::Exact(len) => contents.push(Content { bytes: buf, len, from: lo, to: hi }),
                    Fetch::Candidate { count, .. } => self.code.candidates(ip, lo, hi, count.min(8), &mut contents),
                    Fetch::Unmapped => {}
                }
                let mut next = contents.iter().filter_map(|c| {
                    let insn = isa::classify_x86_64(ip, &c.bytes[..c.len], &self.cfg.idioms).ok()?;
                    next_without_packet(ip, &insn)
                });
                let Some(first) = next.next() else { break };
                todo.extend(next.filter(|&n| n != first));
                // Back where it started: a loop without packets, `to` not on it.
                if first == at {
                    break;
                }
                ip = first;
            }
            if ip == to {
                return true;
            }
        }
        false
    }

    /// Where a segment's walk reads the next segment's PSB: the end of its
    /// run. A walk in sync checks that PSB+'s FUP first, as the walk over
    /// the whole buffer does there, so that both report the same; and when
    /// the FUP is ahead, the run walks up to it ([`Self::walk_tail`]).
    #[cold]
    fn segment_end(&self, st: &mut State<'a>) -> Failure {
        let end = Failure { offset: SEGMENT_END, kind: FlowErrorKind::EndOfTrace };
        let Some(at) = st.ip else { return end };
        let Ok(Some((offset, Packet::Psb))) = st.packets.next_packet() else { return end };
        match self.psb_plus(st, offset) {
            Err(f @ Failure { kind: FlowErrorKind::PsbMismatch { .. }, .. }) => f,
            Err(_) => end,
            Ok(fup) => {
                st.tail_to = fup.filter(|&to| to != at);
                end
            }
        }
    }

    /// A segment's last instructions: from where its walk read the next
    /// segment's PSB up to that PSB+'s FUP, `to` (reached without a packet),
    /// where the next segment starts. Stops early at anything else.
    #[cold]
    fn walk_tail(&self, st: &mut State<'a>, to: u64, sink: &mut impl FlowSink) {
        st.stop_at = usize::MAX;
        for _ in 0..self.cfg.max_walk {
            if st.ip == Some(to) || !matches!(self.step(st, sink, false), Ok(true)) || st.peeked.is_none() {
                break;
            }
        }
    }

    #[inline(always)]
    fn take(&self, st: &mut State<'a>) -> Result<(usize, Flow), Failure> {
        // Mostly peeked already (at the start of a block).
        if st.cyc.pending.is_none() {
            if let Some(p) = st.take_peeked() {
                return Ok(p);
            }
        }
        self.take_next(st)
    }

    fn take_next(&self, st: &mut State<'a>) -> Result<(usize, Flow), Failure> {
        let p = self.peek_flow(st)?;
        st.take_peeked();
        if st.cyc.pending.is_some() {
            self.cyc_taken(st);
        }
        p.ok_or_else(|| Failure { offset: st.packets.offset(), kind: FlowErrorKind::EndOfTrace })
    }

    fn take_tnt(&self, st: &mut State<'a>) -> Result<bool, Failure> {
        if st.tnt_count == 0 {
            match self.take(st)? {
                (_, Flow::Tnt { bits, count }) => {
                    st.tnt_bits = bits;
                    st.tnt_count = count;
                }
                (offset, _) => return Err(Failure { offset, kind: FlowErrorKind::NoTnt }),
            }
        }
        st.tnt_count -= 1;
        st.walked = 0;
        Ok(st.tnt_bits >> st.tnt_count & 1 == 1)
    }

    /// The target of an indirect transfer; `None` when tracing stops there.
    #[inline(always)]
    fn take_tip(&self, st: &mut State<'a>) -> Result<Option<u64>, Failure> {
        if st.tnt_count != 0 {
            return Err(Failure { offset: st.packets.offset(), kind: FlowErrorKind::NoTip });
        }
        st.walked = 0;
        match self.take(st)? {
            (_, Flow::Tip(Some(ip))) => Ok(Some(ip)),
            (_, Flow::Pgd(ip)) => {
                st.pgd_ip = ip;
                Ok(None)
            }
            (offset, _) => Err(Failure { offset, kind: FlowErrorKind::NoTip }),
        }
    }

    /// A cached block of instructions at once, when the cache has one for
    /// this IP and time (building it if the code allows), else [`Self::step`].
    /// Gives exactly what stepping instruction by instruction gives: the
    /// block's window holds for every fetch those steps would make.
    #[inline(always)]
    fn step_cached<const CHAIN: bool>(&self, st: &mut State<'a>, cache: &mut BlockCache, sink: &mut impl FlowSink) -> Result<bool, Failure> {
        if CHAIN && st.tnt_count > 0 && self.chain(st, cache, sink) {
            return Ok(true);
        }
        let Some(ip) = st.ip else { return self.step(st, sink, false) };
        // The block is looked up before the packets are read, so that its
        // entry is on its way from memory meanwhile; it stands if the time
        // they give still admits it. As in `step`, the timing packets before
        // the next flow packet are read before the code. An event that may
        // be at one of the block's instructions (a FUP or TIP.PGD with an
        // IP: rare) is left to stepping.
        if CHAIN && cache.large() && st.ahead.offset() < st.packets.offset() + AHEAD / 2 {
            prefetch_ahead(st, cache);
        }
        let (lo, hi) = (st.lo, st.hi);
        let found = cache.get(ip, |b| self.code.admits(&b.window(), lo, hi));
        let mut whole = true;
        if st.tnt_count == 0 {
            match self.peek_before_fetch(st)? {
                Some((_, Flow::Fup(Some(_)) | Flow::Pgd(Some(_)))) | None => whole = false,
                _ => {}
            }
            if st.ip != Some(ip) {
                // A TIP.PGE moved the walk.
                return self.step(st, sink, false);
            }
        }
        let found = found.filter(|b| (st.lo, st.hi) == (lo, hi) || self.code.admits(&b.window(), st.lo, st.hi));
        let b = match found.or_else(|| cache.get(ip, |b| self.code.admits(&b.window(), st.lo, st.hi))) {
            Some(b) => b,
            None => {
                let Some(window) = self.build(cache, ip, st.lo, st.hi) else {
                    return self.step(st, sink, false);
                };
                cache.get(ip, |b| b.window() == window).expect("just built")
            }
        };
        let count = b.count as u64;
        if st.walked + count > self.cfg.max_walk {
            return self.step(st, sink, false);
        }
        st.walked += 1;
        if !whole {
            return self.run_insn(st, ip, b.first(cache), false, sink, false);
        }
        st.walked += count - 1;
        self.run_block(st, cache, b, sink)?;
        if CHAIN {
            self.chain(st, cache, sink);
        }
        Ok(true)
    }

    /// Chained blocks: while TNT bits are left, the next block needs no
    /// packet to start, so while it is cached, valid and ends in a
    /// conditional branch it runs here, the walk's state in locals (what
    /// `run_block` and `execute` do, without a call). The block it stops
    /// before is left to the next step, in the same state. Whether it ran one.
    #[inline(always)]
    fn chain(&self, st: &mut State<'a>, cache: &BlockCache, sink: &mut impl FlowSink) -> bool {
        let (Some(mut ip), mut left) = (st.ip, st.tnt_count) else { return false };
        let (lo, hi, bits, max_walk) = (st.lo, st.hi, st.tnt_bits, self.cfg.max_walk);
        let mut walked = st.walked;
        while left > 0 {
            let Some(b) = cache.get(ip, |b| self.code.admits(&b.window(), lo, hi)) else { break };
            if !b.ends_in_jcc() || walked + b.count as u64 > max_walk {
                break;
            }
            emit_block(&mut st.stack, cache, b, (lo, lo, hi), sink);
            left -= 1;
            walked = 0;
            ip = if bits >> left & 1 == 1 { b.target() } else { b.fall };
        }
        let ran = left != st.tnt_count;
        st.ip = Some(ip);
        st.tnt_count = left;
        st.walked = walked;
        ran
    }

    /// Emits the instructions of block `b`, and executes its last.
    #[inline(always)]
    fn run_block(&self, st: &mut State<'a>, cache: &BlockCache, b: &Block, sink: &mut impl FlowSink) -> Result<(), Failure> {
        let times = (st.lo, st.packet_lo(b.last().class), st.hi);
        emit_block(&mut st.stack, cache, b, times, sink);
        // Where an error in taking the branch's packets is reported.
        let at = b.last_ip();
        st.ip = Some(at);
        if b.ends_in_jcc() {
            // `execute`'s conditional branch, without its dispatch on the
            // class (most blocks end in one).
            st.ip = Some(if self.take_tnt(st)? { b.target() } else { b.fall });
            return Ok(());
        }
        self.execute(st, at, b.last())?;
        if st.ip.is_none() {
            sink.event(FlowEvent::End { time: st.lo, at: None, disabled: true, to: st.pgd_ip });
        }
        Ok(())
    }

    /// Decodes and caches the block at `ip` for `[lo, hi]`, and gives its
    /// window; `None` when its first instruction's code is not exact or not
    /// an instruction, or the cache did not take it.
    #[cold]
    #[inline(never)]
    fn build(&self, cache: &mut BlockCache, ip: u64, lo: Time, hi: Time) -> Option<Range<Time>> {
        let mut window = 0..Time::MAX;
        let mut at = ip;
        let mut last: Option<Insn> = None;
        let mut last_ip = ip;
        let code: &'a C = self.code;
        // The last block's run of code, while its window holds.
        let (start, bytes, from, to) = self.last_run.get();
        let mut run = if code.admits(&(from..to), lo, hi) { (start, bytes, from..to) } else { (ip, &[][..], 0..Time::MAX) };
        let mut buf = [0u8; 16];
        for _ in 0..MAX_BLOCK_INSNS {
            // 16 bytes at `at`, as `fetch` would give them: from a borrowed
            // run of code while it lasts, else fetched.
            let off = at.wrapping_sub(run.0) as usize;
            let (bytes, w) = if off.checked_add(16).is_some_and(|end| end <= run.1.len()) {
                (&run.1[off..off + 16], run.2.clone())
            } else if let Some((r, w)) = code.code_run(at, lo, hi).filter(|(r, _)| r.len() >= 16) {
                self.last_run.set((at, r, w.start, w.end));
                run = (at, r, w.clone());
                (&r[..16], w)
            } else {
                let Some((n, w)) = code.fetch_window(at, lo, hi, &mut buf) else { break };
                (&buf[..n], w)
            };
            let Ok(insn) = isa::classify_x86_64(at, bytes, &self.cfg.idioms) else { break };
            window = window.start.max(w.start)..window.end.min(w.end);
            if let Some(prev) = last {
                cache.push(last_ip, &prev);
            }
            last = Some(insn);
            last_ip = at;
            // Direct jumps and calls are followed: they need no trace.
            at = match (insn.class, insn.target) {
                (BranchClass::None | BranchClass::Nop, _) => at.wrapping_add(insn.len as u64),
                (BranchClass::DirectJump | BranchClass::DirectCall, Some(to)) => to,
                _ => break,
            };
        }
        let Some(last) = last else {
            cache.discard();
            return None;
        };
        cache.insert(ip, window.clone(), last_ip, last).then_some(window)
    }

    /// One instruction (or one event). `Ok(false)` at the end of the trace.
    /// In a trial nothing is emitted and candidates are not tried again.
    fn step(&self, st: &mut State<'a>, sink: &mut impl FlowSink, trial: bool) -> Result<bool, Failure> {
        // The code is read for the time up to the next flow packet: the
        // timing packets before it are read first (they raise `hi`, not
        // `lo`). A TIP.PGE among them moves the walk to its IP.
        if st.ip.is_some() && st.tnt_count == 0 {
            self.peek_before_fetch(st)?;
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
                Some((_, Flow::Fup(Some(at)))) if st.after_ovf => {
                    st.take_peeked();
                    st.after_ovf = false;
                    st.ip = Some(at);
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
        if st.walked > self.cfg.max_walk {
            return Err(Failure { offset: st.packets.offset(), kind: FlowErrorKind::NoProgress });
        }
        let mut buf = [0u8; 16];
        let (insn, uncertain) = match self.code.fetch(ip, st.lo, st.hi, 0, &mut buf) {
            Fetch::Unmapped => return Err(Failure { offset: st.packets.offset(), kind: FlowErrorKind::Unmapped }),
            Fetch::Exact(n) => (self.classify(ip, &buf[..n], st)?, false),
            Fetch::Candidate { count, .. } => {
                // Contents may differ beyond this instruction (a read covers
                // 16 bytes): only distinct instructions make a choice.
                let options = self.options(st, ip, count)?;
                let ((insn, from), uncertain) = match options.as_slice() {
                    [only] => (*only, false),
                    [first, ..] if trial => (*first, true),
                    _ => self.choose(st, ip, &options)?,
                };
                // Time has reached the start of the content that ran (when
                // the trace says which did).
                if !uncertain {
                    st.lo = st.lo.max(from);
                    st.now = st.now.max(st.lo);
                }
                (insn, uncertain)
            }
        };
        self.run_insn(st, ip, insn, uncertain, sink, trial)
    }

    /// Runs `insn` at `ip`: first an asynchronous event or the end of tracing
    /// at this IP, if the trace has one here, else the instruction itself.
    fn run_insn(&self, st: &mut State<'a>, ip: u64, insn: Insn, uncertain: bool, sink: &mut impl FlowSink, trial: bool) -> Result<bool, Failure> {
        // An event at this instruction (FUP at this IP, then the handler's
        // TIP): a trap it raises (INT3) or an interrupt before it; or the end
        // of tracing here (TIP.PGD at this IP, maybe after a FUP). Reported
        // as [`FlowEvent::Trap`] or [`FlowEvent::End`], not as an instruction.
        if st.tnt_count == 0 {
            match self.peek_flow(st)? {
                Some((_, Flow::Fup(Some(f)))) if f == ip => {
                    st.take_peeked();
                    // FUP + TIP: an event into a handler; FUP + TIP.PGD: tracing stops here.
                    let to = self.take_tip(st)?;
                    if !trial {
                        sink.event(match to {
                            Some(to) => FlowEvent::Trap { from: ip, to, time: st.lo },
                            None => FlowEvent::End { time: st.lo, at: Some(ip), disabled: true, to: st.pgd_ip },
                        });
                    }
                    st.ip = to;
                    return Ok(true);
                }
                Some((_, Flow::Pgd(Some(f)))) if f == ip => {
                    st.take_peeked();
                    st.walked = 0;
                    if !trial {
                        sink.event(FlowEvent::End { time: st.lo, at: Some(ip), disabled: true, to: Some(ip) });
                    }
                    st.ip = None;
                    return Ok(true);
                }
                None => {
                    if !trial {
                        sink.event(FlowEvent::End { time: st.lo, at: Some(ip), disabled: false, to: None });
                    }
                    return Ok(false);
                }
                _ => {}
            }
        }
        if !trial {
            sink.event(FlowEvent::Insn { ip, len: insn.len, class: insn.class, lo: st.packet_lo(insn.class), hi: st.hi, uncertain });
        }
        // An error taking its packets is reported at this instruction, also
        // when a packet read on the way moved the IP (a TIP.PGE while
        // tracing), as a cached block's last instruction reports it.
        st.ip = Some(ip);
        self.execute(st, ip, insn)?;
        // An indirect branch whose TIP was a TIP.PGD: tracing stopped there.
        if st.ip.is_none() && !trial {
            sink.event(FlowEvent::End { time: st.lo, at: None, disabled: true, to: st.pgd_ip });
        }
        Ok(true)
    }

    fn classify(&self, ip: u64, bytes: &[u8], st: &State<'a>) -> Result<Insn, Failure> {
        isa::classify_x86_64(ip, bytes, &self.cfg.idioms).map_err(|_| Failure { offset: st.packets.offset(), kind: FlowErrorKind::BadInsn })
    }

    /// The distinct instructions the candidate contents at `ip` decode to
    /// (as far as control flow goes: length, class, target), each with the
    /// earliest time one of its contents holds (the instruction ran no
    /// earlier). In candidate order, except that those that hold at or after
    /// the time of the timing packets read so far come first: an instruction
    /// right after a flow packet ran after the timing packets that follow it
    /// when the processor sends them there (as it sends a TSC after a
    /// branch), so among contents that fit the trace alike that one is taken.
    fn options(&self, st: &State<'a>, ip: u64, count: usize) -> Result<Vec<(Insn, Time)>, Failure> {
        let mut options: Vec<(Insn, Time)> = Vec::with_capacity(2);
        let mut first_err = None;
        let mut contents = Vec::with_capacity(count.min(8));
        self.code.candidates(ip, st.lo, st.hi, count.min(8), &mut contents);
        let read_to = if st.peeked.is_some() { st.now } else { st.lo };
        // (A stable sort: each group stays in candidate order.)
        contents.sort_by_key(|c| c.to < read_to);
        for c in contents {
            match self.classify(ip, &c.bytes[..c.len], st) {
                Ok(i) => match options.iter_mut().find(|o| o.0 == i) {
                    Some(o) => o.1 = o.1.min(c.from),
                    None => options.push((i, c.from)),
                },
                Err(f) => {
                    first_err.get_or_insert(f);
                }
            }
        }
        if options.is_empty() {
            return Err(first_err.unwrap_or(Failure { offset: st.packets.offset(), kind: FlowErrorKind::Unmapped }));
        }
        Ok(options)
    }

    /// Tries each option at `ip` against the packets that follow; returns
    /// the first that fits, and whether another fits too.
    fn choose(&self, st: &State<'a>, ip: u64, options: &[(Insn, Time)]) -> Result<((Insn, Time), bool), Failure> {
        let mut fits: Vec<(Insn, Time)> = Vec::new();
        for &(insn, from) in options {
            let mut trial = st.clone();
            trial.lo = trial.lo.max(from);
            trial.now = trial.now.max(trial.lo);
            trial.stop_at = usize::MAX;
            let mut sink = |_e: FlowEvent| {};
            trial.tried = Some((ip, insn));
            let first = self.run_insn(&mut trial, ip, insn, true, &mut sink, true);
            trial.tried = None;
            let ok = first.is_ok() && {
                let mut left = self.cfg.trial_insns;
                loop {
                    if left == 0 {
                        break true;
                    }
                    left -= 1;
                    match self.step(&mut trial, &mut sink, true) {
                        Ok(true) => {}
                        Ok(false) => break true,
                        Err(_) => break false,
                    }
                }
            };
            if ok {
                fits.push((insn, from));
            }
        }
        match fits.first() {
            Some(&i) => Ok((i, fits.len() > 1)),
            // None fits: take the first, and let the error show where.
            None => Ok((options[0], true)),
        }
    }

    /// Moves past `insn` at `ip`, consuming the packets it needs.
    fn execute(&self, st: &mut State<'a>, ip: u64, insn: Insn) -> Result<(), Failure> {
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
            BranchClass::IndirectJump | BranchClass::FarTransfer => self.take_tip(st)?,
            BranchClass::IndirectCall => {
                st.stack.push(next);
                self.take_tip(st)?
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
                    self.take_tip(st)?
                }
            }
            // A trap is handled before it runs, when its FUP is next (run_insn).
            BranchClass::Trap => return Err(Failure { offset: st.packets.offset(), kind: FlowErrorKind::NoTrapPackets }),
        };
        Ok(())
    }
}

/// The walk's packet decoder. The scans for the next TSC (or MTC) look
/// ahead on a copy that only finds packet boundaries
/// ([`PacketDecoder::skip_packet`]); the walk decodes each packet once.
#[derive(Clone)]
struct Packets<'a> {
    dec: PacketDecoder<'a>,
}

/// How a scan for the next TSC ended.
enum Scan {
    Tsc(usize, u64),
    Mtc(usize, u8),
    /// Past the limit (at the packet there), or a bad packet there.
    Stop(usize),
    End,
}

impl Packets<'_> {
    /// Where the walk is: the offset of the next packet it takes.
    fn offset(&self) -> usize {
        self.dec.offset()
    }

    /// The walk's one copy of the full packet decoder (the common packets
    /// come through `next_quick`): out of line, so that the walk stays
    /// small while other callers inline `PacketDecoder::next_packet`.
    #[inline(never)]
    fn next_packet(&mut self) -> Result<Option<(usize, Packet)>, PacketError> {
        self.dec.next_packet()
    }

    /// The next packet, decoded on a copy (the walk's position stays);
    /// `None` at the end or at a bad packet.
    #[inline(never)]
    fn decoded_next(&self) -> Option<Packet> {
        self.dec.clone().next_packet().ok().flatten().map(|p| p.1)
    }

    fn sync_forward(&mut self) -> crate::Resync {
        self.dec.sync_forward()
    }

    /// The first TSC (or MTC, with `mtc`) from the walk's position; a packet
    /// past `limit`, or a bad one, stops the scan there.
    fn scan_to_tsc(&self, limit: usize, mtc: bool) -> Scan {
        let mut dec = self.dec.clone();
        let stop = [0x19, if mtc { 0x59 } else { 0x19 }];
        loop {
            dec.skip_until(stop, limit);
            match dec.skip_packet() {
                Ok(Some((off, bytes))) => match bytes[0] {
                    0x19 => return Scan::Tsc(off, crate::decode::le(&bytes[1..8])),
                    0x59 if mtc => return Scan::Mtc(off, bytes[1]),
                    _ if off > limit => return Scan::Stop(off),
                    _ => {}
                },
                Ok(None) => return Scan::End,
                Err(e) => return Scan::Stop(e.offset),
            }
        }
    }
}

/// Hands block `b` (run within `(lo, last_lo, hi)`, as [`InsnBlock`] has
/// them) to the sink, pushing the return addresses of its calls.
#[inline(always)]
fn emit_block(stack: &mut ReturnStack, cache: &BlockCache, b: &Block, times: (Time, Time, Time), sink: &mut impl FlowSink) {
    cache.each_push(b, |ret| stack.push(ret));
    sink.block(InsnBlock::new(b, times, cache.insns(b)));
}

/// The IP of the FUP in the PSB+ whose PSB `dec` has just read (`None`
/// without one, or at a bad packet before its PSBEND).
#[cold]
fn psb_fup(mut dec: Packets<'_>) -> Option<u64> {
    let mut fup = None;
    loop {
        match dec.next_packet() {
            Ok(Some((_, Packet::PsbEnd))) => return fup,
            Ok(Some((_, Packet::Fup(ip)))) => fup = ip.ip.or(fup),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return None,
        }
    }
}

/// Return addresses kept for return compression: the SDM's decoder keeps
/// the youngest 64 (the processor compresses no deeper), which also bounds
/// what a trial copies.
const RETURN_STACK: usize = 64;

/// The youngest [`RETURN_STACK`] return addresses, in a ring: a push onto a
/// full stack drops the oldest.
#[derive(Clone, Copy)]
struct ReturnStack {
    addrs: [u64; RETURN_STACK],
    /// Where the next push goes.
    top: usize,
    len: usize,
}

impl Default for ReturnStack {
    fn default() -> Self {
        ReturnStack { addrs: [0; RETURN_STACK], top: 0, len: 0 }
    }
}

impl ReturnStack {
    #[inline(always)]
    fn push(&mut self, ip: u64) {
        self.addrs[self.top] = ip;
        self.top = (self.top + 1) % RETURN_STACK;
        self.len = (self.len + 1).min(RETURN_STACK);
    }

    fn pop(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        self.top = (self.top + RETURN_STACK - 1) % RETURN_STACK;
        Some(self.addrs[self.top])
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn clear(&mut self) {
        self.len = 0;
    }
}

/// Where `insn` at `ip` goes when it needs no packet (`None` when it does).
fn next_without_packet(ip: u64, insn: &Insn) -> Option<u64> {
    match insn.class {
        BranchClass::None | BranchClass::Nop => Some(ip.wrapping_add(insn.len as u64)),
        BranchClass::DirectJump | BranchClass::DirectCall => insn.target,
        _ => None,
    }
}

fn packet_failure(e: PacketError) -> Failure {
    Failure { offset: e.offset, kind: FlowErrorKind::Packet(e.kind) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_blocks_are_the_ones_looked_up_last_in_their_slot() {
        let mut recent = Recent::new();
        assert!(!recent.check(0xffff_ffff_8100_0000), "never looked up");
        assert!(recent.check(0xffff_ffff_8100_0000), "looked up just now");
        // Another block in the same slot takes it over.
        let slot = |ip: u64| Recent::place(ip).0;
        let rival = (0xffff_ffff_8100_0001..).find(|&ip| slot(ip) == slot(0xffff_ffff_8100_0000)).unwrap();
        assert!(!recent.check(rival));
        assert!(!recent.check(0xffff_ffff_8100_0000), "its slot went to another block");
        // Blocks in other slots stay.
        let other = (0xffff_ffff_8100_0001..).find(|&ip| slot(ip) != slot(rival)).unwrap();
        assert!(!recent.check(other));
        assert!(recent.check(0xffff_ffff_8100_0000) && recent.check(other));
    }
}
