//! The walk over cached blocks: a run of instructions that needs no packet
//! is decoded once, kept in the block cache with the window of time its
//! bytes hold for, and run whole where stepping would give the same events.

use std::ops::Range;

use isa::{BranchClass, Insn};

use super::event::{FlowEvent, FlowSink, InsnBlock, InsnCode};
use super::stack::ReturnStack;
use super::state::{Failure, Flow, State};
use super::walk::{Decoded, Walker};
use crate::blocks::{Block, BlockCache, MAX_BLOCK_INSNS};
use codeimage::window::{CodeSource, Time};

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

impl<'a, C: CodeSource> Walker<'a, C> {
    /// A cached block of instructions at once, when the cache has one for
    /// this IP and time (building it if the code allows), else [`Self::step`].
    /// Gives exactly what stepping instruction by instruction gives: the
    /// block's window holds for every fetch those steps would make.
    #[inline(always)]
    pub(super) fn step_cached<const CHAIN: bool>(
        &self,
        st: &mut State<'a>,
        cache: &mut BlockCache,
        sink: &mut impl FlowSink,
    ) -> Result<bool, Failure> {
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
        let (lo, hi) = (st.clock.lo, st.clock.hi);
        let found = cache.get(ip, |b| self.code.admits(&b.window(), lo, hi));
        let mut whole = true;
        if st.tnt_count == 0 {
            match self.peek_before_fetch(st)? {
                Some((_, Flow::Fup(Some(_)) | Flow::Pgd(Some(_)) | Flow::Bind { .. })) | None => whole = false,
                // (After a direct branch out of the filter or a MOV to CR3.)
                Some((_, Flow::Pgd(None))) => whole = false,
                _ => {}
            }
            if st.ip != Some(ip) {
                // A TIP.PGE moved the walk.
                return self.step(st, sink, false);
            }
            // (TRIGs counted in instructions, read just now.)
            if st.pending && !st.counted.is_empty() {
                whole = false;
            }
        }
        let found = found.filter(|b| (st.clock.lo, st.clock.hi) == (lo, hi) || self.code.admits(&b.window(), st.clock.lo, st.clock.hi));
        let b = match found.or_else(|| cache.get(ip, |b| self.code.admits(&b.window(), st.clock.lo, st.clock.hi))) {
            Some(b) => b,
            None => {
                let Some(window) = self.build(cache, ip, st.clock.lo, st.clock.hi) else {
                    return self.step(st, sink, false);
                };
                cache.get(ip, |b| b.window() == window).expect("just built")
            }
        };
        let count = b.count as u64;
        if st.walked + count > self.loop_from {
            return self.step(st, sink, false);
        }
        st.walked += 1;
        if !whole {
            let code = InsnCode::Exact;
            return self.run_insn(st, ip, Decoded { insn: cache.first(b), uncertain: false, code }, sink, false);
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
        let (lo, hi, bits, loop_from) = (st.clock.lo, st.clock.hi, st.tnt_bits, self.loop_from);
        let mut walked = st.walked;
        while left > 0 {
            let Some(b) = cache.get(ip, |b| self.code.admits(&b.window(), lo, hi)) else { break };
            if !b.ends_in_jcc() || walked + b.count as u64 > loop_from {
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
        let times = (st.clock.lo, st.packet_lo(b.last().class), st.clock.hi);
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
            st.last_disable = super::walk::resume_after(at, &b.last());
            if !st.events.is_empty() {
                self.flush(st, sink, false);
            }
            sink.event(FlowEvent::End { time: st.clock.lo, at: None, disabled: true, to: st.pgd_ip, insn: None });
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
}

/// Hands block `b` (run within `(lo, last_lo, hi)`, as [`InsnBlock`] has
/// them) to the sink, pushing the return addresses of its calls.
#[inline(always)]
fn emit_block(stack: &mut ReturnStack, cache: &BlockCache, b: &Block, times: (Time, Time, Time), sink: &mut impl FlowSink) {
    cache.each_push(b, |ret| stack.push(ret));
    sink.block(InsnBlock::new(b, times, cache.insns(b)));
}
