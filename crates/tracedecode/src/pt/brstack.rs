//! The sink for `perf inject --itrace=il64` style samples: the last
//! [`DEPTH`] taken branches of a CPU in a ring (those `--itrace=b` would
//! print, `tr strt` and `tr end` ones too), and a sample every `period`
//! instructions with the ring as its branch stack. Streamed: no line is
//! made, memory is the ring.

use codeimage::CodeTimeline;
use intel_pt::flow::{AddrFilter, FlowEvent, FlowSink, InsnBlock};
use isa::BranchClass;

use super::lines::direct_target;

/// Branches a stack holds at most, as perf's `l64` and the deepest LBRs.
pub const DEPTH: usize = 64;

/// One taken branch: from (0 for a trace start), to (0 for a trace end
/// that says nowhere).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Branch {
    pub from: u64,
    pub to: u64,
}

/// The last [`DEPTH`] branches, oldest overwritten.
#[derive(Clone)]
pub struct Ring {
    slots: [Branch; DEPTH],
    /// Bit i: slot i's branch was decoded in an uncertain window (the code
    /// there may have been either version). Emptied slots have it clear.
    uncertain: u64,
    /// Where the next branch goes.
    next: usize,
    len: usize,
}

impl Default for Ring {
    fn default() -> Ring {
        Ring { slots: [Branch::default(); DEPTH], uncertain: 0, next: 0, len: 0 }
    }
}

impl Ring {
    #[inline(always)]
    fn push(&mut self, from: u64, to: u64, uncertain: bool) {
        self.slots[self.next] = Branch { from, to };
        self.uncertain = (self.uncertain & !(1 << self.next)) | (u64::from(uncertain) << self.next);
        self.next = (self.next + 1) % DEPTH;
        self.len = (self.len + 1).min(DEPTH);
    }

    fn clear(&mut self) {
        self.len = 0;
        self.uncertain = 0;
    }

    /// How many of the branches were decoded in uncertain windows.
    pub fn uncertain(&self) -> u32 {
        self.uncertain.count_ones()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The branches, newest first (a branch stack's order).
    pub fn newest_first(&self) -> impl ExactSizeIterator<Item = Branch> + '_ {
        (0..self.len).map(move |k| self.slots[(self.next + DEPTH - 1 - k) % DEPTH])
    }
}

/// A sample: the instruction that completed the period, and the branches
/// taken before it.
pub struct BranchSample<'a> {
    pub queue: usize,
    pub cpu: u32,
    pub ip: u64,
    /// The instruction's time (the earliest it can have run).
    pub time: u64,
    /// Instructions since the sample before (the period, but at the first).
    pub period: u64,
    pub branches: &'a Ring,
}

/// What the instruction before did, whose branch the next place execution reaches tells.
#[derive(Clone, Copy)]
struct Prev {
    ip: u64,
    len: u8,
    class: BranchClass,
    uncertain: bool,
}

/// One queue's ring and sampling; samples go to `emit` as they are made.
pub(super) struct BranchStacks<'a, F: FnMut(&BranchSample<'_>)> {
    queue: usize,
    cpu: u32,
    period: u64,
    /// Instructions since the last sample.
    seen: u64,
    ring: Ring,
    prev: Option<Prev>,
    tracing: bool,
    tl: &'a CodeTimeline,
    /// The trace's address filter: a direct branch out of it ends tracing.
    filter: Option<AddrFilter>,
    emit: F,
    /// Decode errors met (each empties the ring).
    pub(super) errors: u64,
    pub(super) instructions: u64,
    pub(super) samples: u64,
    /// Samples whose stack holds a branch decoded in an uncertain window.
    pub(super) uncertain_samples: u64,
}

impl<'a, F: FnMut(&BranchSample<'_>)> BranchStacks<'a, F> {
    /// Samples of queue `queue` on `cpu`, one every `period` (at least 1)
    /// instructions; `tl` tells where a direct branch went when the trace does not.
    pub(super) fn new(queue: usize, cpu: u32, period: u64, tl: &'a CodeTimeline, filter: Option<AddrFilter>, emit: F) -> Self {
        let period = period.max(1);
        BranchStacks {
            queue,
            cpu,
            period,
            seen: 0,
            ring: Ring::default(),
            prev: None,
            tracing: false,
            tl,
            filter,
            emit,
            errors: 0,
            instructions: 0,
            samples: 0,
            uncertain_samples: 0,
        }
    }

    /// Starts over where the trace does not follow on from what came
    /// before (a gap in the AUX data): no branch is known.
    pub(super) fn restart(&mut self) {
        self.ring.clear();
        self.tracing = false;
        self.prev = None;
    }

    /// The previous instruction's branch, if it was taken to `to`.
    #[inline(always)]
    fn resolve(&mut self, to: u64) {
        if let Some(p) = self.prev.take() {
            if p.class.is_branch() && (p.class != BranchClass::CondBranch || to != p.ip.wrapping_add(p.len as u64)) {
                self.ring.push(p.ip, to, p.uncertain);
            }
        }
    }

    /// Execution reaches `ip`: the branch that led there, or the start of tracing.
    #[inline(always)]
    fn arrive(&mut self, ip: u64) {
        if self.prev.is_some() {
            self.resolve(ip);
        } else if !self.tracing {
            self.ring.push(0, ip, false);
        }
        self.tracing = true;
    }

    /// One instruction ran (its branch resolved already): a sample when it completes the period.
    #[inline(always)]
    fn count(&mut self, ip: u64, lo: u64) {
        self.instructions += 1;
        self.seen += 1;
        if self.seen >= self.period {
            let s = BranchSample { queue: self.queue, cpu: self.cpu, ip, time: lo, period: self.seen, branches: &self.ring };
            (self.emit)(&s);
            self.seen = 0;
            self.samples += 1;
            self.uncertain_samples += u64::from(self.ring.uncertain() > 0);
        }
    }

    /// Whether tracing stopped at `at` because the previous instruction, a
    /// direct branch, left the address filter's ranges.
    fn left_filter(&self, at: u64) -> bool {
        let direct = matches!(self.prev, Some(Prev { class: BranchClass::DirectCall | BranchClass::DirectJump, .. }));
        direct && self.filter.is_some_and(|f| !f.traces(at))
    }

    /// Tracing stopped (TIP.PGD when `disabled`): the branch perf's trace-end sample shows.
    fn end(&mut self, at: Option<u64>, to: Option<u64>, time: u64) {
        let to = to.unwrap_or(0);
        match at {
            Some(at) if to == at && self.left_filter(at) => {
                let (from, uncertain) = self.prev.map_or((0, false), |p| (p.ip, p.uncertain));
                self.ring.push(from, to, uncertain);
            }
            Some(at) => {
                self.resolve(at);
                self.ring.push(at, to, false);
            }
            None => {
                // Without the TIP.PGD's IP a direct branch still says where it went.
                let (from, uncertain) = self.prev.map_or((0, false), |p| (p.ip, p.uncertain));
                let to = if to == 0 && self.prev.is_some() { direct_target(self.tl, from, time).unwrap_or(0) } else { to };
                self.ring.push(from, to, uncertain);
            }
        }
    }
}

impl<F: FnMut(&BranchSample<'_>)> FlowSink for BranchStacks<'_, F> {
    /// A block that completes no period: only its taken branches matter,
    /// those of its jumps and calls (each taken) and of its last
    /// instruction, which the next place reached tells.
    #[inline(always)]
    fn block(&mut self, b: InsnBlock<'_>) {
        let n = b.len() as u64;
        if self.seen + n >= self.period {
            b.for_each_insn(|e| self.event(e));
            return;
        }
        if b.has_inner_branches() {
            b.for_each_insn(|e| {
                if let FlowEvent::Insn { ip, len, class, uncertain, .. } = e {
                    self.arrive(ip);
                    self.prev = Some(Prev { ip, len, class, uncertain });
                }
            });
        } else {
            self.arrive(b.ip);
            let last = b.last();
            self.prev = Some(Prev { ip: b.last_ip, len: last.len, class: last.class, uncertain: false });
        }
        self.seen += n;
        self.instructions += n;
    }

    fn event(&mut self, e: FlowEvent) {
        match e {
            FlowEvent::Insn { ip, len, class, lo, uncertain, .. } => {
                self.arrive(ip);
                self.count(ip, lo);
                self.prev = Some(Prev { ip, len, class, uncertain });
            }
            FlowEvent::Trap { from, to, .. } => {
                self.resolve(from);
                self.ring.push(from, to, false);
                self.prev = None;
            }
            FlowEvent::End { at, disabled, to, time, .. } => {
                if self.tracing && disabled {
                    self.end(at, to, time);
                }
                self.tracing = false;
                self.prev = None;
            }
            // The branches before an error and after it are not one run:
            // a stack across it would show branches next to each other that were not.
            FlowEvent::Error { .. } => {
                self.errors += 1;
                self.restart();
            }
            FlowEvent::Enabled { .. } | FlowEvent::State { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codeimage::{BaseImage, TimelineBuilder};
    use intel_pt::flow::{FlowErrorKind, InsnCode};

    fn insn(ip: u64, len: u8, class: BranchClass) -> FlowEvent {
        FlowEvent::Insn { ip, len, class, lo: ip, hi: ip, uncertain: false, code: InsnCode::Exact }
    }

    /// A sample's instruction, period and stack (from, to; newest first).
    type Made = (u64, u64, Vec<(u64, u64)>);

    /// The samples of `events`, every `period` instructions.
    fn samples(events: &[FlowEvent], period: u64) -> Vec<Made> {
        let tl = TimelineBuilder::new(BaseImage::new()).build();
        let mut out = Vec::new();
        let mut s = BranchStacks::new(0, 0, period, &tl, None, |s: &BranchSample<'_>| {
            out.push((s.ip, s.period, s.branches.newest_first().map(|b| (b.from, b.to)).collect()))
        });
        events.iter().for_each(|&e| s.event(e));
        out
    }

    /// A sample's stack holds the branches taken before its instruction,
    /// newest first: a trace start, taken jumps and calls, not a
    /// conditional branch that fell through, nor the sampled one's own.
    #[test]
    fn stack_holds_the_taken_branches_before_the_sample() {
        let evs = [
            insn(0x10, 2, BranchClass::CondBranch), // falls through
            insn(0x12, 2, BranchClass::CondBranch), // taken to 0x40
            insn(0x40, 5, BranchClass::DirectCall),
            insn(0x80, 1, BranchClass::Return),
            insn(0x45, 2, BranchClass::DirectJump), // sampled: its jump is not in its stack
            insn(0x10, 2, BranchClass::None),
        ];
        let got = samples(&evs, 5);
        assert_eq!(got, [(0x45, 5, vec![(0x80, 0x45), (0x40, 0x80), (0x12, 0x40), (0, 0x10)])]);
        let got = samples(&evs, 6);
        assert_eq!(got[0].2[0], (0x45, 0x10));
    }

    /// The ring keeps the newest DEPTH branches; an error empties it.
    #[test]
    fn ring_keeps_the_newest_and_an_error_empties_it() {
        let mut evs: Vec<FlowEvent> = (0..100).map(|i| insn(0x1000 + 0x10 * i, 2, BranchClass::DirectJump)).collect();
        evs.push(FlowEvent::Error { offset: 0, time: 0, ip: None, kind: FlowErrorKind::NoTip });
        evs.extend([insn(0x20, 1, BranchClass::None), insn(0x21, 1, BranchClass::None)]);
        let got = samples(&evs, 100);
        assert_eq!(got[0].2.len(), DEPTH);
        assert_eq!(got[0].2[0], (0x1000 + 0x10 * 98, 0x1000 + 0x10 * 99));
        assert_eq!(got[0].2[DEPTH - 1], (0x1000 + 0x10 * 35, 0x1000 + 0x10 * 36));
        let after = samples(&evs, 102);
        assert_eq!(after[0], (0x21, 102, vec![(0, 0x20)]));
    }

    /// A branch from an instruction decoded in an uncertain window is
    /// counted while it stays in the stack, and no longer once pushed out.
    #[test]
    fn uncertain_branches_are_counted_while_in_the_stack() {
        let tl = TimelineBuilder::new(BaseImage::new()).build();
        let mut out = Vec::new();
        let mut s = BranchStacks::new(0, 0, 1, &tl, None, |s: &BranchSample<'_>| out.push(s.branches.uncertain()));
        s.event(FlowEvent::Insn { ip: 0x10, len: 2, class: BranchClass::DirectJump, lo: 0, hi: 9, uncertain: true, code: InsnCode::Exact });
        for i in 0..=DEPTH as u64 {
            s.event(insn(0x100 + 0x10 * i, 2, BranchClass::DirectJump));
        }
        // Behind the trace start, the uncertain jump stays until DEPTH more branches push it out.
        let counted = s.uncertain_samples;
        assert_eq!(out[..3], [0, 1, 1]);
        assert_eq!(out[DEPTH..], [1, 0]);
        assert_eq!(counted, DEPTH as u64);
    }

    /// After a restart (a gap in the AUX data) the stack starts empty, with the trace's start.
    #[test]
    fn restart_forgets_the_branches_before() {
        let tl = TimelineBuilder::new(BaseImage::new()).build();
        let mut out = Vec::new();
        let mut s = BranchStacks::new(0, 0, 3, &tl, None, |s: &BranchSample<'_>| out.push(s.branches.newest_first().collect::<Vec<_>>()));
        for e in [insn(0x10, 2, BranchClass::DirectJump), insn(0x40, 2, BranchClass::DirectJump)] {
            s.event(e);
        }
        s.restart();
        s.event(insn(0x80, 1, BranchClass::None));
        assert_eq!(out, [vec![Branch { from: 0, to: 0x80 }]]);
    }
}
