//! Intel PT flow events made into perf's samples, as lines: taken
//! branches (from the instruction before to the one after), instructions,
//! trace ends, traps, errors.

use codeimage::CodeTimeline;
use intel_pt::flow::{AddrFilter, FlowEvent, FlowSink, InsnBlock};
use isa::BranchClass;

use super::error_code::perf_error_code;
use crate::flags::{branch_flags, end_flags};
use crate::itrace::Itrace;
use crate::lanes::{Lanes, BATCH};
use crate::line::{Kind, Out};

/// Turns one CPU's flow events into output lines: taken branches (from the
/// instruction before to the one after), instructions, traps, errors.
pub(super) struct Collector<'a> {
    queue: usize,
    cpu: u32,
    itrace: &'a Itrace,
    tl: &'a CodeTimeline,
    /// Lines not yet handed on.
    lines: Vec<Out>,
    /// Where full batches of lines go.
    lanes: &'a Lanes,
    /// The last instruction: IP, length, class, time.
    prev: Option<(u64, u8, BranchClass, u64)>,
    tracing: bool,
    /// The line of the previous instruction, to note where its branch went.
    prev_line: Option<usize>,
    /// Instructions since the last that got a line (`Itrace::period`).
    insns_seen: u64,
    /// The trace's address filter: a direct branch out of it ends tracing.
    filter: Option<AddrFilter>,
}

impl<'a> Collector<'a> {
    pub(super) fn new(queue: usize, cpu: u32, itrace: &'a Itrace, tl: &'a CodeTimeline, lanes: &'a Lanes, filter: Option<AddrFilter>) -> Self {
        Collector {
            queue,
            cpu,
            itrace,
            tl,
            lines: Vec::with_capacity(BATCH),
            lanes,
            prev: None,
            tracing: false,
            prev_line: None,
            insns_seen: 0,
            filter,
        }
    }

    /// Where the direct branch at `ip` goes (code read at `time`); `None` for other instructions.
    #[cold]
    fn direct_target(&self, ip: u64, time: u64) -> Option<u64> {
        let mut b = [0u8; 16];
        self.tl.read_into(ip, &mut b, time);
        let insn = isa::classify_x86_64(ip, &b, &isa::KernelIdioms::default()).ok()?;
        matches!(insn.class, BranchClass::DirectCall | BranchClass::DirectJump).then_some(insn.target?)
    }

    /// The instruction line `i` (the previous instruction's), now that a
    /// TIP.PGD at `at` (its IP `to`) came after it: when the TIP.PGD took
    /// its branch's place (an indirect branch's TIP, or a direct branch out
    /// of the filter's ranges), perf's instruction sample of it is a trace
    /// end too, to the branch's target, at the TIP.PGD's time.
    fn mark_end(&mut self, i: usize, at: Option<u64>, to: Option<u64>, time: u64) {
        let target = match (at, to) {
            (Some(at), Some(to)) if at == to && self.left_filter(at) => Some(at),
            (None, Some(to)) => Some(to),
            (None, None) => self.prev.and_then(|p| self.direct_target(p.0, p.3)),
            _ => return,
        };
        let line = &mut self.lines[i];
        if let Kind::Insn { to, ends, .. } = &mut line.kind {
            *to = target;
            *ends = true;
            line.time = time;
        }
    }

    /// Whether a TIP.PGD at `at`, where the previous instruction went, took
    /// that branch's place: a direct branch out of the filter's ranges
    /// (perf's "unconditional branch leaving filter region", one `tr end`
    /// line from the branch; an asynchronous stop there has a FUP first,
    /// and the code at `at` is traced).
    fn left_filter(&self, at: u64) -> bool {
        let direct = matches!(self.prev, Some((_, _, BranchClass::DirectCall | BranchClass::DirectJump, _)));
        direct && self.filter.is_some_and(|f| !f.traces(at))
    }

    /// Hands a full batch on; only between events, when no line waits to
    /// learn where its instruction went.
    fn flush(&mut self) {
        if self.lines.len() >= BATCH && self.prev_line.is_none() {
            self.lanes.send(self.queue, std::mem::replace(&mut self.lines, Vec::with_capacity(BATCH)));
        }
    }

    /// Hands the last lines on, at the end of the buffer.
    /// (Only the lines are kept: a queue's last batch may wait in the
    /// merge until every queue has its first line.)
    pub(super) fn finish(&mut self) {
        let mut last = std::mem::take(&mut self.lines);
        if !last.is_empty() {
            last.shrink_to_fit();
            self.lanes.send(self.queue, last);
        }
    }

    fn is_taken(from: u64, len: u8, class: BranchClass, to: u64) -> bool {
        class.is_branch() && (class != BranchClass::CondBranch || to != from + len as u64)
    }

    /// The taken branch of the previous instruction, now that where it went (`to`) is known.
    fn taken(&self, to: u64) -> Option<Out> {
        match self.prev {
            Some((from, len, class, t)) if Self::is_taken(from, len, class, to) => Some(Out {
                time: t,
                queue: self.queue,
                cpu: self.cpu,
                kind: Kind::Branch { from, to, flags: branch_flags(class, from, t, self.tl), from_len: Some(len) },
            }),
            _ => None,
        }
    }

    /// Execution reaches `ip` at `time`: the branch that led there, or the
    /// start of tracing.
    fn arrive(&mut self, ip: u64, time: u64) {
        if self.itrace.branches {
            match self.taken(ip) {
                Some(b) => self.lines.push(b),
                None if !self.tracing => self.lines.push(Out {
                    time,
                    queue: self.queue,
                    cpu: self.cpu,
                    kind: Kind::Branch { from: 0, to: ip, flags: "tr strt", from_len: None },
                }),
                None => {}
            }
        }
        self.tracing = true;
    }
}

impl FlowSink for Collector<'_> {
    /// A straight run of instructions (no jump or call before the last)
    /// holds no branch but the one its last may take: unless instruction
    /// lines are asked for, only where it starts and its last matter.
    fn block(&mut self, b: InsnBlock<'_>) {
        if self.itrace.instructions || b.has_inner_branches() {
            b.for_each_insn(|e| self.event(e));
            return;
        }
        self.flush();
        self.arrive(b.ip, b.lo);
        self.prev = Some((b.last_ip, b.last().len, b.last().class, b.last_lo));
    }

    fn event(&mut self, e: FlowEvent) {
        let (queue, cpu) = (self.queue, self.cpu);
        let prev_line = self.prev_line.take();
        // Where the previous instruction's branch went, for its instruction line.
        if let (Some(i), Some((from, len, class, _))) = (prev_line, self.prev) {
            let next = match e {
                FlowEvent::Insn { ip, .. } => Some(ip),
                FlowEvent::Trap { from, .. } => Some(from),
                FlowEvent::End { at, .. } => at,
                FlowEvent::Error { .. } | FlowEvent::Enabled { .. } | FlowEvent::State { .. } => None,
            };
            if let (Some(to), Kind::Insn { to: slot, .. }) = (next, &mut self.lines[i].kind) {
                *slot = Self::is_taken(from, len, class, to).then_some(to);
            }
        }
        self.flush();
        match e {
            FlowEvent::Insn { ip, len, class, lo, uncertain, .. } => {
                self.arrive(ip, lo);
                if self.itrace.instructions && self.itrace.sampled(&mut self.insns_seen) {
                    self.prev_line = Some(self.lines.len());
                    self.lines.push(Out { time: lo, queue, cpu, kind: Kind::Insn { ip, len, class, to: None, uncertain, ends: false } });
                }
                self.prev = Some((ip, len, class, lo));
            }
            FlowEvent::Trap { from, to, time } => {
                if self.itrace.branches {
                    let b = self.taken(from);
                    self.lines.extend(b);
                    self.lines.push(Out { time, queue, cpu, kind: Kind::Branch { from, to, flags: "hw int", from_len: None } });
                }
                self.prev = None;
            }
            // perf's trace-end samples: an asynchronous stop (FUP + TIP.PGD)
            // goes from the FUP's IP to the TIP.PGD's; a TIP.PGD taking an
            // indirect branch's place goes from that branch. The end of the
            // data is no branch, and gets no line.
            FlowEvent::End { time, at, disabled, to } => {
                if let (true, Some(i)) = (self.tracing && disabled, prev_line) {
                    self.mark_end(i, at, to, time);
                }
                if self.itrace.branches && self.tracing && disabled {
                    let to = to.unwrap_or(0);
                    match at {
                        Some(at) if to == at && self.left_filter(at) => {
                            let (from, len, class, _) = self.prev.unwrap_or((0, 0, BranchClass::None, time));
                            self.lines.push(Out { time, queue, cpu, kind: Kind::Branch { from, to, flags: end_flags(class), from_len: Some(len) } });
                        }
                        Some(at) => {
                            let b = self.taken(at);
                            self.lines.extend(b);
                            let flags = if to != 0 { "tr end  hw int" } else { "tr end" };
                            self.lines.push(Out { time, queue, cpu, kind: Kind::Branch { from: at, to, flags, from_len: None } });
                        }
                        None => {
                            let (from, len, class) = self.prev.map_or((0, None, BranchClass::None), |p| (p.0, Some(p.1), p.2));
                            // Without the TIP.PGD's IP a direct branch still says where it went.
                            let to = if to == 0 && len.is_some() { self.direct_target(from, time).unwrap_or(0) } else { to };
                            self.lines.push(Out { time, queue, cpu, kind: Kind::Branch { from, to, flags: end_flags(class), from_len: len } });
                        }
                    }
                }
                self.tracing = false;
                self.prev = None;
            }
            // Made whether printed or not (`Itrace::errors`): they are counted.
            FlowEvent::Error { offset, time, ip, kind } => {
                self.lines.push(Out { time, queue, cpu, kind: Kind::Error { offset, ip, code: perf_error_code(&kind), reason: kind.describe() } });
                self.tracing = false;
                self.prev = None;
            }
            // Not asked for (no state events).
            FlowEvent::Enabled { .. } | FlowEvent::State { .. } => {}
        }
    }
}
