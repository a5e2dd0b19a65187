//! The sink for `poketrace profile`: a CPU's flow events counted into taken
//! branches and fall-through ranges, no line made. Each instruction counts
//! as the bytes it was decoded from: a jump label's JMP half is a taken
//! jump, its NOP half part of a range; a trap (a kprobe's INT3) ends a range
//! and is no branch.

use intel_pt::flow::{FlowEvent, FlowSink, InsnBlock};
use isa::BranchClass;

use crate::profile::{is_function_branch, Pending, Profile, RangeCounter};

/// The last instruction that ran.
#[derive(Clone, Copy, Debug)]
struct Last {
    ip: u64,
    len: u8,
    class: BranchClass,
    uncertain: bool,
    time: u64,
}

/// What the events do to the count, one step at a time: what a PSB
/// segment keeps until it knows where its first range started.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Execution reached `ip`: the previous instruction's branch, or tracing started.
    Arrive {
        ip: u64,
        time: u64,
    },
    /// The instruction that ran last.
    Ran(Last),
    Uncertain,
    /// The instruction at `from` trapped into `to`.
    Trap {
        from: u64,
        to: u64,
        time: u64,
    },
    /// Tracing stopped, before the instruction at `at` when known.
    End {
        at: Option<u64>,
        time: u64,
    },
    Error,
}

/// One CPU's profile, of a whole buffer or of one of its PSB segments;
/// `keep(time)` tells whether what runs at `time` is counted (the `--tid`
/// and `--time` filters).
pub(super) struct Profiler<K: Fn(u64) -> bool> {
    counter: RangeCounter,
    keep: K,
    prev: Option<Last>,
    /// Whether where the current range started is known: always for a
    /// whole buffer; for a segment, once a range of its own ended.
    known: bool,
    /// A segment's steps before then, for the segment before it to take
    /// ([`Profiler::append`]).
    head: Vec<Step>,
}

impl<K: Fn(u64) -> bool> Profiler<K> {
    /// A whole buffer's profiler: tracing is off at its start.
    pub(super) fn buffer(keep: K) -> Self {
        Profiler { counter: RangeCounter::default(), keep, prev: None, known: true, head: Vec::new() }
    }

    /// A PSB segment's profiler: what it starts in is for the segment
    /// before to tell; its pending pairs in `buffers`.
    pub(super) fn segment(keep: K, buffers: Pending) -> Self {
        Profiler { known: false, counter: RangeCounter::with_buffers(buffers), ..Profiler::buffer(keep) }
    }

    pub(super) fn finish(self) -> Profile {
        self.counter.finish()
    }

    /// Counts the segment that follows what this one counted; gives back
    /// its buffers for another segment.
    pub(super) fn append(&mut self, seg: Profiler<K>) -> Pending {
        for &s in &seg.head {
            self.apply(s);
        }
        if !seg.known {
            return Pending::default();
        }
        self.counter.set_state(seg.counter.state());
        self.prev = seg.prev;
        self.counter.add(seg.counter)
    }

    /// `s`, applied now; in a segment that does not yet know where its
    /// range started, also kept, its counts thrown away once it knows.
    #[inline(always)]
    fn step(&mut self, s: Step) {
        self.apply(s);
        if !self.known {
            self.head.push(s);
            if self.counter.take_closed() {
                self.known = true;
                self.counter.forget_counts();
            }
        }
    }

    #[inline(always)]
    fn apply(&mut self, s: Step) {
        match s {
            Step::Arrive { ip, time } => self.arrive(ip, time),
            Step::Ran(last) => self.prev = Some(last),
            Step::Uncertain => self.counter.saw_uncertain(),
            // The instruction at `from` did not run: the range ends there,
            // and the handler's code starts one.
            Step::Trap { from, to, time } => {
                self.arrive(from, time);
                self.counter.close(from);
                self.counter.not_branch();
                self.counter.start((self.keep)(time).then_some(to));
                self.prev = None;
            }
            // A range ends where execution stopped (the instruction at `at`
            // did not run, as an interrupt's source), else at the last
            // instruction; a branch that left tracing ends none.
            Step::End { at, time } => {
                let last = self.prev;
                let took = at.is_some_and(|at| self.resolve(at, time));
                match (took, at.or(last.map(|l| l.ip))) {
                    (false, Some(end)) => self.counter.close(end),
                    _ => self.counter.stop(),
                }
                self.prev = None;
            }
            Step::Error => {
                self.counter.error();
                self.counter.cut();
                self.prev = None;
            }
        }
    }

    /// Execution reached `ip` at `time`: the previous instruction's
    /// branch, or a range starts where tracing did.
    #[inline(always)]
    fn arrive(&mut self, ip: u64, time: u64) {
        let tracing = self.prev.is_some();
        if !self.resolve(ip, time) && !tracing && !self.counter.open() {
            self.counter.start((self.keep)(time).then_some(ip));
        }
    }

    /// The previous instruction's branch, now that execution went on at
    /// `to` at `time`; whether it was taken.
    #[inline(always)]
    fn resolve(&mut self, to: u64, time: u64) -> bool {
        let Some(p) = self.prev.take() else { return false };
        let taken = p.class.is_branch() && (p.class != BranchClass::CondBranch || to != p.ip.wrapping_add(p.len.into()));
        if !taken {
            return false;
        }
        self.counter.close(p.ip);
        if !is_function_branch(p.class) {
            self.counter.not_branch();
        } else if (self.keep)(p.time) {
            self.counter.branch(p.ip, to, p.uncertain);
        }
        self.counter.start((self.keep)(time).then_some(to));
        true
    }
}

impl<K: Fn(u64) -> bool> Profiler<K> {
    /// The jumps and calls of a block before its last instruction, each
    /// to the next one: the branches it takes and the ranges between them,
    /// as its instructions one by one would count them, none kept aside.
    #[inline(always)]
    fn inner_branches(&mut self, b: &InsnBlock<'_>) {
        let kept = (self.keep)(b.lo);
        b.for_each_inner_branch(|from, to| {
            self.counter.close(from);
            if kept {
                self.counter.branch(from, to, false);
            }
            self.counter.start(kept.then_some(to));
        });
    }
}

impl<K: Fn(u64) -> bool> FlowSink for Profiler<K> {
    /// Where a block starts, its inner jumps and calls and its last
    /// instruction are all that matter.
    #[inline(always)]
    fn block(&mut self, b: InsnBlock<'_>) {
        let last = b.last();
        let last = Last { ip: b.last_ip, len: last.len, class: last.class, uncertain: false, time: b.last_lo };
        if self.known {
            self.arrive(b.ip, b.lo);
            if b.has_inner_branches() {
                self.inner_branches(&b);
            }
            self.prev = Some(last);
        } else if b.has_inner_branches() {
            b.for_each_insn(|e| self.event(e));
        } else {
            self.step(Step::Arrive { ip: b.ip, time: b.lo });
            self.step(Step::Ran(last));
        }
    }

    fn event(&mut self, e: FlowEvent) {
        match e {
            FlowEvent::Insn { ip, len, class, lo, uncertain, .. } => {
                self.step(Step::Arrive { ip, time: lo });
                if uncertain {
                    self.step(Step::Uncertain);
                }
                self.step(Step::Ran(Last { ip, len, class, uncertain, time: lo }));
            }
            FlowEvent::Trap { from, to, time, .. } => self.step(Step::Trap { from, to, time }),
            FlowEvent::End { time, at, .. } => self.step(Step::End { at, time }),
            FlowEvent::Error { .. } => self.step(Step::Error),
            FlowEvent::Enabled { .. } | FlowEvent::State { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intel_pt::flow::InsnCode;

    fn insn(ip: u64, len: u8, class: BranchClass, time: u64) -> FlowEvent {
        FlowEvent::Insn { ip, len, class, lo: time, hi: time, uncertain: false, code: InsnCode::Exact }
    }

    /// A site that is a NOP, then a JMP (a jump label flipped): the NOP run
    /// is inside a range, the JMP run a taken branch ending one.
    #[test]
    fn a_flipped_site_counts_as_what_ran() {
        let mut p = Profiler::buffer(|_| true);
        let (site, target, ret) = (0x1005, 0x1100, 0x100a);
        for (t, class) in [(0, BranchClass::Nop), (10, BranchClass::DirectJump)] {
            p.event(insn(0x1000, 5, BranchClass::None, t));
            p.event(insn(site, 5, class, t + 1));
            let next = if class == BranchClass::Nop { ret } else { target };
            p.event(insn(next, 1, BranchClass::Return, t + 2));
            p.event(insn(0x2000, 1, BranchClass::None, t + 3));
        }
        p.event(FlowEvent::End { time: 20, at: None, disabled: false, to: None, insn: None });
        let prof = p.finish();
        assert_eq!(prof.branches.get(site, target), Some(1));
        assert_eq!(prof.branches.get(ret, 0x2000), Some(1));
        assert_eq!(prof.branches.get(target, 0x2000), Some(1));
        // First run: 0x1000..ret falls through the NOP; second: 0x2000..site.
        assert_eq!(prof.ranges.get(0x1000, ret), Some(1));
        assert_eq!(prof.ranges.get(0x2000, site), Some(1));
        assert_eq!(prof.ranges.get(target, target), Some(1));
        assert_eq!(prof.ranges.get(0x2000, 0x2000), Some(1));
    }

    /// A trap is no branch: the range ends at the trapping instruction and
    /// the handler starts another; an uncertain source is counted apart.
    #[test]
    fn traps_end_ranges_and_uncertain_branches_are_apart() {
        let mut p = Profiler::buffer(|_| true);
        p.event(insn(0x1000, 2, BranchClass::None, 0));
        p.event(FlowEvent::Trap { from: 0x1002, to: 0x9000, time: 1, insn: None });
        p.event(FlowEvent::Insn { ip: 0x9000, len: 2, class: BranchClass::DirectJump, lo: 2, hi: 2, uncertain: true, code: InsnCode::Exact });
        p.event(insn(0x9100, 1, BranchClass::None, 3));
        p.event(FlowEvent::End { time: 4, at: None, disabled: false, to: None, insn: None });
        let prof = p.finish();
        assert_eq!(prof.not_branches, 1);
        assert_eq!(prof.ranges.get(0x1000, 0x1002), Some(1));
        assert!(prof.branches.is_empty());
        assert_eq!(prof.uncertain_branches.get(0x9000, 0x9100), Some(1));
        assert_eq!(prof.uncertain_ranges.get(0x9000, 0x9000), Some(1));
        assert_eq!(prof.ranges.get(0x9100, 0x9100), Some(1));
    }

    /// Tracing stopped before the instruction at `at`: the range ends
    /// there, as at an interrupt's source; without `at`, at the last one.
    #[test]
    fn a_stop_ends_the_range_where_execution_stopped() {
        for (at, end) in [(Some(0x1004), 0x1004), (None, 0x1002)] {
            let mut p = Profiler::buffer(|_| true);
            p.event(insn(0x1000, 2, BranchClass::None, 0));
            p.event(insn(0x1002, 2, BranchClass::None, 1));
            p.event(FlowEvent::End { time: 2, at, disabled: true, to: None, insn: None });
            assert_eq!(p.finish().ranges.iter().collect::<Vec<_>>(), [((0x1000, end), 1)]);
        }
    }

    /// What runs while `keep` says no is not counted.
    #[test]
    fn filtered_times_are_not_counted() {
        let mut p = Profiler::buffer(|t| t >= 10);
        p.event(insn(0x1000, 2, BranchClass::DirectJump, 0));
        p.event(insn(0x2000, 2, BranchClass::DirectJump, 1));
        p.event(insn(0x3000, 2, BranchClass::DirectJump, 10));
        p.event(insn(0x4000, 2, BranchClass::None, 11));
        p.event(FlowEvent::End { time: 12, at: None, disabled: false, to: None, insn: None });
        let prof = p.finish();
        assert_eq!(prof.branches.iter().map(|e| e.0).collect::<Vec<_>>(), [(0x3000, 0x4000)]);
        let mut ranges: Vec<_> = prof.ranges.iter().map(|e| e.0).collect();
        ranges.sort();
        assert_eq!(ranges, [(0x3000, 0x3000), (0x4000, 0x4000)]);
    }

    /// A random run of events: instructions of every class that often go
    /// where their branch points (taken or not), some uncertain; traps,
    /// ends with and without their IP, errors.
    fn events(rng: &mut testkit::Rng, n: usize) -> Vec<FlowEvent> {
        const CLASSES: [BranchClass; 7] = [
            BranchClass::None,
            BranchClass::Nop,
            BranchClass::CondBranch,
            BranchClass::DirectJump,
            BranchClass::DirectCall,
            BranchClass::Return,
            BranchClass::FarTransfer,
        ];
        let (mut out, mut ip, mut time) = (Vec::new(), 0x1000u64, 0u64);
        for _ in 0..n {
            time += rng.below(3);
            let e = match rng.below(24) {
                0 => FlowEvent::Trap { from: ip, to: 0x9000, time, insn: None },
                1 => FlowEvent::End { time, at: (rng.below(2) == 0).then_some(ip), disabled: rng.below(3) != 0, to: None, insn: None },
                2 => FlowEvent::Error { offset: 0, time, ip: None, kind: intel_pt::flow::FlowErrorKind::NoTip },
                _ => {
                    let (len, class) = (1 + rng.below(6) as u8, CLASSES[rng.below(7) as usize]);
                    let uncertain = rng.below(20) == 0;
                    let e = FlowEvent::Insn { ip, len, class, lo: time, hi: time, uncertain, code: InsnCode::Exact };
                    ip = if rng.below(2) == 0 { ip + len as u64 } else { 0x1000 + rng.below(64) * 4 };
                    e
                }
            };
            out.push(e);
        }
        out
    }

    /// Counting a buffer's events cut anywhere, each piece on its own and
    /// appended in order, gives the counts of counting them in one go.
    #[test]
    fn segments_appended_count_as_the_whole() {
        let mut rng = testkit::Rng(0x9f0f);
        for round in 0..400 {
            let n = 1 + rng.below(60) as usize;
            let evs = events(&mut rng, n);
            let keep = |t: u64| t % 7 != 3;
            let mut whole = Profiler::buffer(keep);
            evs.iter().for_each(|&e| whole.event(e));
            let mut cuts: Vec<usize> = (0..rng.below(8)).map(|_| rng.below(evs.len() as u64 + 1) as usize).collect();
            cuts.extend([0, evs.len()]);
            cuts.sort();
            let mut joined = Profiler::buffer(keep);
            for w in cuts.windows(2) {
                let mut seg = Profiler::segment(keep, Pending::default());
                evs[w[0]..w[1]].iter().for_each(|&e| seg.event(e));
                joined.append(seg);
            }
            assert_eq!(whole.finish(), joined.finish(), "round {round}: cut at {cuts:?} of {evs:?}");
        }
    }
}
