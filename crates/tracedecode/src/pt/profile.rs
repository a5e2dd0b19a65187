//! The sink for `poketrace profile`: a CPU's flow events counted into taken
//! branches and fall-through ranges, no line made. Each instruction counts
//! as the bytes it was decoded from: a jump label's JMP half is a taken
//! jump, its NOP half part of a range; a trap (a kprobe's INT3) ends a range
//! and is no branch.

use intel_pt::flow::{FlowEvent, FlowSink, InsnBlock};
use isa::BranchClass;

use crate::profile::{is_function_branch, Profile, RangeCounter};

/// The last instruction that ran.
#[derive(Clone, Copy)]
struct Last {
    ip: u64,
    len: u8,
    class: BranchClass,
    uncertain: bool,
    time: u64,
}

/// One CPU's profile; `keep(time)` tells whether what runs at `time` is
/// counted (the `--tid` and `--time` filters).
pub(super) struct Profiler<K: Fn(u64) -> bool> {
    counter: RangeCounter,
    keep: K,
    prev: Option<Last>,
}

impl<K: Fn(u64) -> bool> Profiler<K> {
    pub(super) fn new(keep: K) -> Self {
        Profiler { counter: RangeCounter::default(), keep, prev: None }
    }

    pub(super) fn finish(self) -> Profile {
        self.counter.profile
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
            self.counter.profile.not_branches += 1;
        } else if (self.keep)(p.time) {
            self.counter.branch(p.ip, to, p.uncertain);
        }
        self.counter.start((self.keep)(time).then_some(to));
        true
    }

    /// Execution reaches `ip` at `time`: by the previous instruction's
    /// branch, by falling through, or tracing starts there.
    #[inline(always)]
    fn arrive(&mut self, ip: u64, time: u64) {
        let tracing = self.prev.is_some();
        if !self.resolve(ip, time) && !tracing {
            self.counter.start((self.keep)(time).then_some(ip));
        }
    }
}

impl<K: Fn(u64) -> bool> FlowSink for Profiler<K> {
    /// A straight run without inner jumps or calls: only where it starts
    /// and its last instruction matter.
    #[inline(always)]
    fn block(&mut self, b: InsnBlock<'_>) {
        if b.has_inner_branches() {
            b.for_each_insn(|e| self.event(e));
            return;
        }
        self.arrive(b.ip, b.lo);
        let last = b.last();
        self.prev = Some(Last { ip: b.last_ip, len: last.len, class: last.class, uncertain: false, time: b.last_lo });
    }

    fn event(&mut self, e: FlowEvent) {
        match e {
            FlowEvent::Insn { ip, len, class, lo, uncertain, .. } => {
                self.arrive(ip, lo);
                if uncertain {
                    self.counter.saw_uncertain();
                }
                self.prev = Some(Last { ip, len, class, uncertain, time: lo });
            }
            // The instruction at `from` did not run: the range ends there,
            // and the handler's code starts one.
            FlowEvent::Trap { from, to, time } => {
                self.arrive(from, time);
                self.counter.close(from);
                self.counter.profile.not_branches += 1;
                self.counter.start((self.keep)(time).then_some(to));
                self.prev = None;
            }
            // A range ends where execution stopped (the instruction at `at`
            // did not run, as an interrupt's source), else at the last
            // instruction; a branch that left tracing ends none.
            FlowEvent::End { time, at, .. } => {
                let last = self.prev;
                let took = at.is_some_and(|at| self.resolve(at, time));
                match (took, at.or(last.map(|l| l.ip))) {
                    (false, Some(end)) => self.counter.close(end),
                    _ => self.counter.start(None),
                }
                self.prev = None;
            }
            FlowEvent::Error { .. } => {
                self.counter.profile.errors += 1;
                self.counter.cut();
                self.prev = None;
            }
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
        let mut p = Profiler::new(|_| true);
        let (site, target, ret) = (0x1005, 0x1100, 0x100a);
        for (t, class) in [(0, BranchClass::Nop), (10, BranchClass::DirectJump)] {
            p.event(insn(0x1000, 5, BranchClass::None, t));
            p.event(insn(site, 5, class, t + 1));
            let next = if class == BranchClass::Nop { ret } else { target };
            p.event(insn(next, 1, BranchClass::Return, t + 2));
            p.event(insn(0x2000, 1, BranchClass::None, t + 3));
        }
        p.event(FlowEvent::End { time: 20, at: None, disabled: false, to: None });
        let prof = p.finish();
        assert_eq!(prof.branches.get(&(site, target)), Some(&1));
        assert_eq!(prof.branches.get(&(ret, 0x2000)), Some(&1));
        assert_eq!(prof.branches.get(&(target, 0x2000)), Some(&1));
        // First run: 0x1000..ret falls through the NOP; second: 0x2000..site.
        assert_eq!(prof.ranges.get(&(0x1000, ret)), Some(&1));
        assert_eq!(prof.ranges.get(&(0x2000, site)), Some(&1));
        assert_eq!(prof.ranges.get(&(target, target)), Some(&1));
        assert_eq!(prof.ranges.get(&(0x2000, 0x2000)), Some(&1));
    }

    /// A trap is no branch: the range ends at the trapping instruction and
    /// the handler starts another; an uncertain source is counted apart.
    #[test]
    fn traps_end_ranges_and_uncertain_branches_are_apart() {
        let mut p = Profiler::new(|_| true);
        p.event(insn(0x1000, 2, BranchClass::None, 0));
        p.event(FlowEvent::Trap { from: 0x1002, to: 0x9000, time: 1 });
        p.event(FlowEvent::Insn { ip: 0x9000, len: 2, class: BranchClass::DirectJump, lo: 2, hi: 2, uncertain: true, code: InsnCode::Exact });
        p.event(insn(0x9100, 1, BranchClass::None, 3));
        p.event(FlowEvent::End { time: 4, at: None, disabled: false, to: None });
        let prof = p.finish();
        assert_eq!(prof.not_branches, 1);
        assert_eq!(prof.ranges.get(&(0x1000, 0x1002)), Some(&1));
        assert!(prof.branches.is_empty());
        assert_eq!(prof.uncertain_branches.get(&(0x9000, 0x9100)), Some(&1));
        assert_eq!(prof.uncertain_ranges.get(&(0x9000, 0x9000)), Some(&1));
        assert_eq!(prof.ranges.get(&(0x9100, 0x9100)), Some(&1));
    }

    /// Tracing stopped before the instruction at `at`: the range ends
    /// there, as at an interrupt's source; without `at`, at the last one.
    #[test]
    fn a_stop_ends_the_range_where_execution_stopped() {
        for (at, end) in [(Some(0x1004), 0x1004), (None, 0x1002)] {
            let mut p = Profiler::new(|_| true);
            p.event(insn(0x1000, 2, BranchClass::None, 0));
            p.event(insn(0x1002, 2, BranchClass::None, 1));
            p.event(FlowEvent::End { time: 2, at, disabled: true, to: None });
            assert_eq!(p.finish().ranges.into_iter().collect::<Vec<_>>(), [((0x1000, end), 1)]);
        }
    }

    /// What runs while `keep` says no is not counted.
    #[test]
    fn filtered_times_are_not_counted() {
        let mut p = Profiler::new(|t| t >= 10);
        p.event(insn(0x1000, 2, BranchClass::DirectJump, 0));
        p.event(insn(0x2000, 2, BranchClass::DirectJump, 1));
        p.event(insn(0x3000, 2, BranchClass::DirectJump, 10));
        p.event(insn(0x4000, 2, BranchClass::None, 11));
        p.event(FlowEvent::End { time: 12, at: None, disabled: false, to: None });
        let prof = p.finish();
        assert_eq!(prof.branches.keys().copied().collect::<Vec<_>>(), [(0x3000, 0x4000)]);
        let mut ranges: Vec<_> = prof.ranges.keys().copied().collect();
        ranges.sort();
        assert_eq!(ranges, [(0x3000, 0x3000), (0x4000, 0x4000)]);
    }
}
