//! The sink for `--stat`: a CPU's flow events counted as the lines of
//! `--itrace=bie` would count them, and no line made; a buffer's PSB
//! segments counted apart and added up in order.

use intel_pt::flow::{FlowEvent, FlowSink, InsnBlock};
use isa::BranchClass;

use crate::summary::Summary;

/// One CPU's counts, of a whole buffer or of one of its PSB segments.
/// A branch is counted by its instruction's class once the next place
/// execution reaches is known, the conditional ones that fell through
/// apart; [`Count::finish`] sorts them into the summary's kinds.
pub(super) struct Count {
    counts: Summary,
    /// Branches whose next place is known, by class ([`NO_PREV`]: none).
    ended: [u64; CLASS_SLOTS],
    /// The conditional branches among them that fell through.
    fell: u64,
    /// The last instruction's class ([`NO_PREV`] when none waits to
    /// learn where its branch went) and where it falls through to.
    prev: u8,
    prev_fall: u64,
    tracing: bool,
    /// Whether `prev` and `tracing` are known: always for a whole buffer;
    /// for a segment, once it met an instruction, an end or an error.
    known: bool,
    /// `known`, `tracing` and `first` set: a block's arrival only resolves
    /// the branch before it.
    steady: bool,
    /// A segment's steps before then, which need the state the segment
    /// before it leaves ([`Count::append`]).
    head: Vec<Step>,
    /// The first and last instruction's time.
    first: Option<u64>,
    last: u64,
}

/// Slots of [`Count::ended`]: one per branch class, and [`NO_PREV`].
const CLASS_SLOTS: usize = 16;
/// No previous instruction.
const NO_PREV: u8 = CLASS_SLOTS as u8 - 1;
const COND: u8 = BranchClass::CondBranch as u8;
const _: () = assert!(BranchClass::ALL.len() < NO_PREV as usize);

/// What a segment met before it knew the state it started in.
#[derive(Clone, Copy)]
enum Step {
    /// Execution reached this IP: the previous instruction's branch, or the start of tracing.
    Arrive(u64),
    /// A trap at this IP: the previous instruction's branch.
    Trap(u64),
    /// Tracing stopped (perf's trace-end sample when it was on and `disabled`).
    End { at: Option<u64>, disabled: bool },
}

impl Count {
    fn new(known: bool) -> Count {
        Count {
            counts: Summary::default(),
            ended: [0; CLASS_SLOTS],
            fell: 0,
            prev: NO_PREV,
            prev_fall: 0,
            tracing: false,
            known,
            steady: false,
            head: Vec::new(),
            first: None,
            last: 0,
        }
    }

    /// A whole buffer's counter: tracing is off at its start.
    pub(super) fn buffer() -> Count {
        Count::new(true)
    }

    /// A PSB segment's counter: what it starts in is for the segment before to tell.
    pub(super) fn segment() -> Count {
        Count::new(false)
    }

    /// The previous instruction's branch, now that execution went on at `to`.
    #[inline(always)]
    fn resolve(&mut self, to: u64) {
        let c = self.prev;
        self.ended[usize::from(c)] += 1;
        self.fell += u64::from(c == COND && to == self.prev_fall);
        self.prev = NO_PREV;
    }

    /// The instruction of `class` ran, falling through to `fall`.
    #[inline(always)]
    fn ran(&mut self, class: BranchClass, fall: u64) {
        self.prev = class as u8;
        self.prev_fall = fall;
    }

    fn settle(&mut self) {
        self.steady = self.known && self.tracing && self.first.is_some();
    }

    /// Execution reaches `ip` at `time`: the branch that led there, or the start of tracing.
    #[inline(always)]
    fn arrive(&mut self, ip: u64, time: u64) {
        if self.steady {
            self.resolve(ip);
            self.last = time;
        } else {
            self.arrive_unsteady(ip, time);
        }
    }

    #[inline(never)]
    fn arrive_unsteady(&mut self, ip: u64, time: u64) {
        if self.known {
            self.step(Step::Arrive(ip));
        } else {
            self.head.push(Step::Arrive(ip));
            self.known = true;
        }
        self.tracing = true;
        self.first.get_or_insert(time);
        self.last = time;
        self.settle();
    }

    /// `step` over the state: the counts it makes, and the state after it.
    fn step(&mut self, step: Step) {
        match step {
            Step::Arrive(ip) => {
                self.resolve(ip);
                if !self.tracing {
                    self.counts.trace_starts += 1;
                    self.tracing = true;
                }
            }
            Step::Trap(from) => self.resolve(from),
            Step::End { at, disabled } => {
                // (perf's trace-end samples: only where tracing was turned off.)
                if self.tracing && disabled {
                    if let Some(at) = at {
                        self.resolve(at);
                    }
                    self.counts.trace_ends += 1;
                }
                self.tracing = false;
                self.prev = NO_PREV;
            }
        }
    }

    /// Adds the counts of the segment that follows what this one counted.
    pub(super) fn append(&mut self, mut seg: Count) {
        for &step in &seg.head {
            self.step(step);
        }
        if seg.known {
            (self.prev, self.prev_fall, self.tracing) = (seg.prev, seg.prev_fall, seg.tracing);
        }
        seg.sort_branches();
        self.counts.add(&seg.counts);
        if let Some(first) = seg.first {
            self.first.get_or_insert(first);
            self.last = seg.last;
        }
        self.settle();
    }

    /// Moves the branches counted by class into the summary's kinds.
    fn sort_branches(&mut self) {
        for class in BranchClass::ALL {
            let n = std::mem::take(&mut self.ended[class as usize]);
            if class == BranchClass::CondBranch {
                self.counts.add_branches(class, true, n - self.fell);
                self.counts.add_branches(class, false, self.fell);
            } else {
                self.counts.add_branches(class, true, n);
            }
        }
        self.fell = 0;
        self.ended[usize::from(NO_PREV)] = 0;
    }

    /// The counts of the whole buffer.
    pub(super) fn finish(mut self) -> Summary {
        self.sort_branches();
        if let Some(first) = self.first {
            self.counts.saw_times(first, self.last);
        }
        self.counts.buffers = 1;
        self.counts
    }
}

impl FlowSink for Count {
    #[inline(always)]
    fn block(&mut self, b: InsnBlock<'_>) {
        self.arrive(b.ip, b.lo);
        self.counts.instructions += b.len() as u64;
        let (jumps, calls) = b.inner_jumps_and_calls();
        self.counts.jumps += jumps as u64;
        self.counts.calls += calls as u64;
        self.ran(b.last().class, b.fall());
        self.last = b.last_lo;
    }

    fn event(&mut self, e: FlowEvent) {
        match e {
            FlowEvent::Insn { ip, len, class, lo, uncertain, .. } => {
                self.arrive(ip, lo);
                self.counts.instructions += 1;
                self.counts.uncertain += uncertain as u64;
                self.ran(class, ip.wrapping_add(len as u64));
            }
            FlowEvent::Trap { from, .. } => {
                if self.known {
                    self.step(Step::Trap(from));
                } else {
                    self.head.push(Step::Trap(from));
                }
                self.prev = NO_PREV;
                self.counts.traps += 1;
            }
            FlowEvent::End { at, disabled, .. } => {
                if self.known {
                    self.step(Step::End { at, disabled });
                } else {
                    self.head.push(Step::End { at, disabled });
                    self.known = true;
                }
                (self.tracing, self.prev) = (false, NO_PREV);
            }
            FlowEvent::Error { .. } => {
                self.counts.errors += 1;
                (self.known, self.tracing, self.prev) = (true, false, NO_PREV);
            }
            FlowEvent::Enabled { .. } | FlowEvent::State { .. } => {}
        }
        self.settle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intel_pt::flow::{FlowErrorKind, InsnCode};

    /// A random run of events: instructions of every class that often go
    /// where their branch points (taken or not), traps, ends (with and
    /// without the IP and TIP.PGD), errors.
    fn events(rng: &mut testkit::Rng, n: usize) -> Vec<FlowEvent> {
        const CLASSES: [BranchClass; 6] =
            [BranchClass::None, BranchClass::CondBranch, BranchClass::DirectJump, BranchClass::Return, BranchClass::FarTransfer, BranchClass::Trap];
        let (mut out, mut ip, mut time) = (Vec::new(), 0x1000u64, 0u64);
        for _ in 0..n {
            time += rng.below(3);
            let e = match rng.below(20) {
                0 => FlowEvent::Trap { from: ip, to: 0x9000, time, insn: None },
                1 => FlowEvent::End { time, at: (rng.below(2) == 0).then_some(ip), disabled: rng.below(3) != 0, to: None, insn: None },
                2 => FlowEvent::Error { offset: 0, time, ip: None, kind: FlowErrorKind::NoTip },
                _ => {
                    let (len, class) = (1 + rng.below(6) as u8, CLASSES[rng.below(6) as usize]);
                    let code = InsnCode::Exact;
                    let e = FlowEvent::Insn { ip, len, class, lo: time, hi: time, uncertain: rng.below(50) == 0, code };
                    // Falls through, or goes elsewhere.
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
        let mut rng = testkit::Rng(0x57a7);
        for round in 0..300 {
            let n = 1 + rng.below(60) as usize;
            let evs = events(&mut rng, n);
            let mut whole = Count::buffer();
            evs.iter().for_each(|&e| whole.event(e));
            let mut cuts: Vec<usize> = (0..rng.below(8)).map(|_| rng.below(evs.len() as u64 + 1) as usize).collect();
            cuts.extend([0, evs.len()]);
            cuts.sort();
            let mut joined = Count::buffer();
            for w in cuts.windows(2) {
                let mut seg = Count::segment();
                evs[w[0]..w[1]].iter().for_each(|&e| seg.event(e));
                joined.append(seg);
            }
            let (whole, joined) = (whole.finish(), joined.finish());
            assert_eq!(whole, joined, "round {round}: cut at {cuts:?} of {evs:?}");
        }
    }
}
