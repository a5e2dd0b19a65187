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
//! (`crate::blocks`), each with the window of time its bytes hold for, as the
//! code source reports it ([`CodeSource::fetch_window`]); a cached block is
//! used only where stepping instruction by instruction would give the same
//! events, so the cache changes speed, not output.
//!
//! # After an error
//!
//! A bad packet: the walk resumes at the next PSB (only there are packet
//! boundaries known again); an overflow: at the FUP after it (SDM); a PSB+
//! whose FUP the walk does not reach (or reaches only past missing code):
//! at that FUP; a PSB+ that restates another execution mode: at its FUP
//! with [`Recovery::NextTip`], else at the next PSB. Otherwise the packets
//! are whole and the walk and the trace disagree (a TNT bit flipped, a TIP's
//! IP damaged, code other than what ran): the walk resumes at the next
//! TIP's target ([`Recovery::NextTip`], as perf does; a FUP and TIP there
//! are an event from the FUP's IP, as libipt takes them), or at the next
//! PSB if that target has no code (its compressed IP built on a damaged
//! last IP); [`Recovery::EachTip`] resumes at each TIP even then, as
//! libipt's ptxed --resync-on-error does; [`Recovery::NextPsb`] always
//! waits for the next PSB, as libipt does. Errors are placed where libipt
//! places them: at a TIP the walk has yet to take, past a TNT, FUP or
//! TIP.PGD read ahead.
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
//!
//! # Layout
//!
//! `code` is the code-source API and `event` what the decoder reports;
//! inside, the walk (`walk`, over cached blocks in `cached`) reads the
//! packets up to each flow packet (`read`), times what it walks by the
//! timing packets (`clock`), tries candidate contents (`trial`) and meets
//! PSB+ and errors (`psb`). Parallel decoding is [`crate::parallel`].

mod cached;
mod clock;
mod config;
mod event;
mod loops;
mod packets;
mod psb;
mod read;
mod report;
mod special;
mod stack;
pub(crate) mod state;
mod stop;
mod trial;
pub(crate) mod walk;

use std::sync::Arc;

pub use self::clock::{CycConv, MtcConv, TimeConv};
pub use self::config::{AddrFilter, Errata, FlowConfig, Recovery};
pub use self::event::{EventInsn, FlowErrorKind, FlowEvent, FlowSink, InsnBlock, InsnCode};
use self::state::State;
use self::walk::Walker;
use crate::blocks::BlockCache;
pub use crate::blocks::SharedBlocks;
pub use codeimage::window::{CodeSource, Content, Fetch, Time};

/// Decodes one AUX buffer's packets into instruction flow.
///
/// Blocks of decoded code are cached across calls to [`FlowDecoder::run`]
/// and buffers given to [`FlowDecoder::reset`] (the code source and config
/// stay the same), so decoding several buffers with one decoder decodes each
/// piece of code once.
pub struct FlowDecoder<'a, C: CodeSource> {
    buf: &'a [u8],
    st: State<'a>,
    pub(crate) cache: BlockCache,
    /// Offset of `buf` in the whole trace, for error offsets.
    base: usize,
    pub(crate) walker: Walker<'a, C>,
}

impl<'a, C: CodeSource> FlowDecoder<'a, C> {
    pub fn new(buf: &'a [u8], code: &'a C, cfg: FlowConfig) -> Self {
        Self::with_walker(buf, Walker::new(code, cfg))
    }

    /// A decoder over `buf` that walks as `walker` says, with a block cache
    /// of its own.
    pub(crate) fn with_walker(buf: &'a [u8], walker: Walker<'a, C>) -> Self {
        let mut cache = BlockCache::default();
        cache.size_for_code(walker.code.code_bytes());
        FlowDecoder { buf, st: State::new(buf, usize::MAX), cache, base: 0, walker }
    }

    /// Times what runs between TSCs by the MTC packets too (after a TMA):
    /// each MTC raises the start of the interval instructions are known to
    /// run in. Without it (or with `None`: the event had MTC off) MTC and
    /// TMA packets are ignored.
    pub fn with_mtc(mut self, mtc: impl Into<Option<MtcConv>>) -> Self {
        self.walker.timing.mtc = mtc.into().map(MtcConv::clamped);
        self
    }

    /// Times what runs between flow packets by the CYC packets (cycle-
    /// accurate mode), converted with the last CBR packet's core:bus ratio:
    /// instructions after the flow packet that follows a CYC ran no earlier
    /// than that CYC, those before it no later. Without it (or with `None`:
    /// the event had CYC off, or the max non-turbo ratio is unknown), and
    /// until the first CBR, CYC packets change nothing.
    pub fn with_cyc(mut self, cyc: impl Into<Option<CycConv>>) -> Self {
        self.walker.timing.cyc = cyc.into().filter(|c| c.max_non_turbo_ratio != 0);
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
        self.walker.upper_bounds = on;
        self
    }

    /// Where the walk goes on after an error that leaves the packets whole
    /// ([`Recovery::NextTip`] unless told).
    pub fn with_recovery(mut self, recovery: Recovery) -> Self {
        self.walker.recovery = recovery;
        self
    }

    /// Reports the trace's state packets and where tracing starts
    /// ([`FlowEvent::State`], [`FlowEvent::Enabled`]), as libipt reports
    /// its events; off unless told.
    pub fn with_state_events(mut self, on: bool) -> Self {
        self.walker.state_events = on;
        self
    }

    /// With state events on, reports the timing packets too (TSC, TMA, MTC,
    /// CYC, and a PSB and the CBR of a PSB+, `restated`) as
    /// [`FlowEvent::State`], where they fall among the instructions, so that
    /// a sink can keep its own estimate of the time (libipt's, say); off
    /// unless told.
    pub fn with_timing_events(mut self, on: bool) -> Self {
        self.walker.timing_events = on;
        self
    }

    /// Reads deferred TIPs (SDM): the processor may hold an indirect jump's
    /// or call's TIP (or a far transfer's) while the TNT goes on filling
    /// with the conditional branches after it, then send the TNT and the
    /// TIPs it held. The TIP such a transfer needs is then the flow packet
    /// after the TNT whose bits it is among, or after the one TNT met where
    /// it needs the TIP (its bits: of the branches after it), as perf and
    /// libipt take them. Off unless told: then such a TNT, or bits left at
    /// the transfer, are an error (the walk and the trace disagree).
    pub fn with_deferred_tips(mut self, on: bool) -> Self {
        self.walker.deferred_tips = on;
        self
    }

    /// The address filter the trace was made with: a TIP.PGD without an IP
    /// right after a direct branch out of it stops tracing at that branch.
    pub fn with_addr_filter(mut self, filter: AddrFilter) -> Self {
        self.walker.filter = Some(filter);
        self
    }

    /// Works around the errata of the processor the trace comes from.
    pub fn with_errata(mut self, errata: Errata) -> Self {
        self.walker.errata = errata;
        self
    }

    /// Shares the decoded-block cache with the other decoders given `home`
    /// (on other threads, say, for the other CPUs' buffers of one trace), so
    /// each block is built once for all of them. Every decoder sharing one
    /// must read the same code source with the same configuration: a block
    /// is kept for the window of time that source gave for its bytes.
    pub fn with_shared_blocks(mut self, home: Arc<SharedBlocks>) -> Self {
        self.cache = BlockCache::shared(home);
        self.cache.size_for_code(self.walker.code.code_bytes());
        self
    }

    /// Starts over on another buffer (another CPU's, another PSB segment),
    /// over the same code, keeping the decoded-block cache.
    pub fn reset(&mut self, buf: &'a [u8]) {
        self.buf = buf;
        self.st = State::new(buf, usize::MAX);
        self.base = 0;
    }

    /// Starts over on `buf`, found at `base` in the whole trace (where
    /// error offsets count from): a piece of it that does not follow on
    /// from the one before (a gap in the AUX data), decoded from its first PSB.
    pub fn reset_at(&mut self, buf: &'a [u8], base: usize) {
        self.reset(buf);
        self.base = base;
    }

    /// Starts over on one PSB segment of `whole`, `start..end` (`start` at a
    /// PSB, `end` at the next, or the end): the run stops where the walk
    /// would read the packet at `end`, and error offsets are `whole`'s
    /// from `base` (where `whole` is in the trace). Decoding each segment
    /// of a buffer so, one after the other into one sink, gives the events
    /// of [`Self::run`] over the whole buffer when each PSB+ carries a TSC
    /// (see [`crate::parallel`]), and reads nothing of `whole` before `start`.
    pub fn reset_segment(&mut self, whole: &'a [u8], base: usize, start: usize, end: usize) {
        self.buf = &whole[start..];
        self.st = State::new(self.buf, if end >= whole.len() { usize::MAX } else { end - start });
        self.base = base + start;
        self.cache.refresh();
    }

    /// Runs to the end of the buffer, reporting every event, each
    /// instruction as a [`FlowEvent::Insn`].
    pub fn run(&mut self, mut emit: impl FnMut(FlowEvent)) {
        self.run_with(&mut emit);
    }

    /// Runs to the end of the buffer, reporting every event to `sink`, the
    /// instructions of cached blocks a block at a time ([`FlowSink::block`]).
    pub fn run_with(&mut self, sink: &mut impl FlowSink) {
        self.walker.run_to_end(&mut self.st, &mut self.cache, self.buf, self.base, sink);
    }
}
