//! Intel PT flow events made into perf's samples, as lines: taken
//! branches (from the instruction before to the one after), instructions,
//! trace ends, traps, errors.

use codeimage::window::{CodeSource, Fetch};
use codeimage::CodeTimeline;
use intel_pt::flow::{AddrFilter, EventInsn, FlowEvent, FlowSink, InsnBlock, InsnCode};
use isa::BranchClass;

use super::error_code::perf_error_code;
use crate::flags::{branch_flags, end_flags};
use crate::itrace::Itrace;
use crate::lanes::{Lanes, BATCH};
use crate::line::{InsnBytes, Kind, Out};

/// An instruction that ran: where, how long, its class, within which
/// times, and the bytes it was decoded from.
#[derive(Clone, Copy)]
struct Ran {
    ip: u64,
    len: u8,
    class: BranchClass,
    lo: u64,
    hi: u64,
    code: InsnCode,
}

/// Turns one CPU's flow events into output lines: taken branches (from the
/// instruction before to the one after), instructions, traps, errors;
/// their instructions' bytes from `code`, the source the decoder read.
pub(super) struct Collector<'a, C: CodeSource> {
    queue: usize,
    cpu: u32,
    itrace: &'a Itrace,
    code: &'a C,
    tl: &'a CodeTimeline,
    /// Lines not yet handed on.
    lines: Vec<Out>,
    /// Where full batches of lines go.
    lanes: &'a Lanes,
    /// The last instruction.
    prev: Option<Ran>,
    tracing: bool,
    /// The line of the previous instruction, to note where its branch went.
    prev_line: Option<usize>,
    /// Instructions since the last that got a line (`Itrace::period`).
    insns_seen: u64,
    /// The trace's address filter: a direct branch out of it ends tracing.
    filter: Option<AddrFilter>,
    /// New lines are kept (else only the state they leave is: the segments
    /// before or after a unit, decoded for what crosses its edges).
    keep: bool,
    /// An instruction or the end of tracing came: `prev` and `tracing` no
    /// longer depend on what came before this sink's first event.
    settled: bool,
    /// Instructions since the last branch line (its `insns`).
    ran: u64,
    /// A branch line or an error came: `ran` no longer depends on
    /// what came before this sink's first event.
    counted: bool,
}

impl<'a, C: CodeSource> Collector<'a, C> {
    /// Lines of queue `queue` on `cpu`, decoded over `code`; `tl` is the
    /// code timeline (where a direct branch went when the trace does not say).
    pub(super) fn new(
        queue: usize,
        cpu: u32,
        itrace: &'a Itrace,
        (code, tl): (&'a C, &'a CodeTimeline),
        lanes: &'a Lanes,
        filter: Option<AddrFilter>,
    ) -> Self {
        Collector {
            queue,
            cpu,
            itrace,
            code,
            tl,
            lines: Vec::with_capacity(BATCH),
            lanes,
            prev: None,
            tracing: false,
            prev_line: None,
            insns_seen: 0,
            filter,
            keep: true,
            settled: false,
            ran: 0,
            counted: false,
        }
    }

    /// Whether new lines are kept from now on (they all are at first). A
    /// line waiting to learn where its branch went still learns it.
    pub(super) fn keep_lines(&mut self, keep: bool) {
        self.keep = keep;
    }

    /// Whether an instruction or an end of tracing came: from then on, the
    /// state lines depend on is what the events since made it.
    pub(super) fn settled(&self) -> bool {
        self.settled && (self.counted || !self.itrace.branches)
    }

    /// Counts the instructions of the step that made the lines from `made`
    /// on (`step` of them after its lines; `stops`: an error, after which
    /// none have run), then drops those lines unless they are kept
    /// ([`Self::keep_lines`]).
    #[inline(always)]
    fn step_done(&mut self, made: usize, step: u64, stops: bool) {
        let (ran, branched) = crate::line::count_insns(&mut self.lines[made..], self.ran, step);
        self.ran = ran;
        self.counted |= stops || branched;
        if stops {
            self.ran = 0;
        }
        if !self.keep {
            self.lines.truncate(made);
            self.prev_line = None;
        }
    }

    /// The bytes instruction `r` was decoded from, when the line shows
    /// them or its flags need them.
    fn bytes(&self, r: &Ran) -> InsnBytes {
        if !self.itrace.insn_bytes && r.class != BranchClass::FarTransfer {
            return InsnBytes::default();
        }
        match r.code {
            InsnCode::Chosen(b) => InsnBytes::new(&b, r.len.into()),
            InsnCode::Exact => Self::fetched(self.code, r.ip, r.len, r.lo, r.hi),
        }
    }

    #[cold]
    fn fetched(code: &C, ip: u64, len: u8, lo: u64, hi: u64) -> InsnBytes {
        let mut b = [0u8; 16];
        match code.fetch(ip, lo, hi, 0, &mut b) {
            Fetch::Exact(n) | Fetch::Candidate { filled: n, .. } => InsnBytes::new(&b[..n], len.into()),
            Fetch::Unmapped => InsnBytes::default(),
        }
    }

    /// The length and bytes of the instruction at `ip` an event stopped at
    /// `time`: as the walk decoded it (`insn`), else as the decoder's code
    /// source has it then (perf reads the instruction at a sample's IP);
    /// no length for IP 0 (where tracing starts).
    #[cold]
    fn event_insn(&self, ip: u64, insn: Option<EventInsn>, time: u64) -> (Option<u8>, InsnBytes) {
        match insn {
            Some(EventInsn { len, code: InsnCode::Chosen(b) }) => (Some(len), InsnBytes::new(&b, len.into())),
            Some(EventInsn { len, code: InsnCode::Exact }) => (Some(len), Self::fetched(self.code, ip, len, time, time)),
            None if ip == 0 => (None, InsnBytes::default()),
            None => {
                let mut b = [0u8; 16];
                let _ = self.code.fetch(ip, time, time, 0, &mut b);
                let len = isa::classify_x86_64(ip, &b, &isa::KernelIdioms::default()).map_or(0, |i| i.len);
                (Some(len), InsnBytes::new(&b, len.into()))
            }
        }
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
            (None, None) => self.prev.and_then(|p| direct_target(self.tl, p.ip, p.lo)),
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
        let direct = matches!(self.prev, Some(Ran { class: BranchClass::DirectCall | BranchClass::DirectJump, .. }));
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
            Some(r) if Self::is_taken(r.ip, r.len, r.class, to) => {
                let from_bytes = self.bytes(&r);
                let flags = branch_flags(r.class, from_bytes.as_slice());
                let kind = Kind::Branch { from: r.ip, to, flags, from_len: Some(r.len), from_bytes, insns: 0 };
                Some(Out { time: r.lo, queue: self.queue, cpu: self.cpu, kind })
            }
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
                    kind: Kind::Branch { from: 0, to: ip, flags: "tr strt", from_len: None, from_bytes: InsnBytes::default(), insns: 0 },
                }),
                None => {}
            }
        }
        self.tracing = true;
    }
}

impl<C: CodeSource> FlowSink for Collector<'_, C> {
    /// A straight run of instructions (no jump or call before the last)
    /// holds no branch but the one its last may take: unless instruction
    /// lines are asked for, only where it starts and its last matter.
    fn block(&mut self, b: InsnBlock<'_>) {
        if self.itrace.instructions || b.has_inner_branches() {
            b.for_each_insn(|e| self.event(e));
            return;
        }
        self.flush();
        let made = self.lines.len();
        self.arrive(b.ip, b.lo);
        self.step_done(made, b.len() as u64, false);
        let last = b.last();
        self.prev = Some(Ran { ip: b.last_ip, len: last.len, class: last.class, lo: b.last_lo, hi: b.hi, code: InsnCode::Exact });
        self.settled = true;
    }

    fn event(&mut self, e: FlowEvent) {
        let (queue, cpu) = (self.queue, self.cpu);
        let prev_line = self.prev_line.take();
        // Where the previous instruction's branch went, for its instruction line.
        if let (Some(i), Some(Ran { ip: from, len, class, .. })) = (prev_line, self.prev) {
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
        let made = self.lines.len();
        self.settled |= matches!(e, FlowEvent::Insn { .. } | FlowEvent::End { .. } | FlowEvent::Error { .. });
        match e {
            FlowEvent::Insn { ip, len, class, lo, hi, uncertain, code } => {
                self.arrive(ip, lo);
                let ran = Ran { ip, len, class, lo, hi, code };
                if self.itrace.instructions && self.itrace.sampled(&mut self.insns_seen) {
                    self.prev_line = Some(self.lines.len());
                    let bytes = self.bytes(&ran);
                    self.lines.push(Out { time: lo, queue, cpu, kind: Kind::Insn { ip, len, class, to: None, uncertain, ends: false, bytes } });
                }
                self.prev = Some(ran);
            }
            FlowEvent::Trap { from, to, time, insn } => {
                if self.itrace.branches {
                    let b = self.taken(from);
                    self.lines.extend(b);
                    let (from_len, from_bytes) = self.event_insn(from, insn, time);
                    self.lines.push(Out { time, queue, cpu, kind: Kind::Branch { from, to, flags: "hw int", from_len, from_bytes, insns: 0 } });
                }
                self.prev = None;
            }
            // perf's trace-end samples: an asynchronous stop (FUP + TIP.PGD)
            // goes from the FUP's IP to the TIP.PGD's; a TIP.PGD taking an
            // indirect branch's place goes from that branch. The end of the
            // data is no branch, and gets no line.
            FlowEvent::End { time, at, disabled, to, insn } => {
                if let (true, Some(i)) = (self.tracing && disabled, prev_line) {
                    self.mark_end(i, at, to, time);
                }
                if self.itrace.branches && self.tracing && disabled {
                    let to = to.unwrap_or(0);
                    match at {
                        Some(at) if to == at && self.left_filter(at) => {
                            let (from, len, class) = self.prev.map_or((0, 0, BranchClass::None), |p| (p.ip, p.len, p.class));
                            let from_bytes = self.prev.map_or(InsnBytes::default(), |p| self.bytes(&p));
                            let kind = Kind::Branch { from, to, flags: end_flags(class), from_len: Some(len), from_bytes, insns: 0 };
                            self.lines.push(Out { time, queue, cpu, kind });
                        }
                        Some(at) => {
                            let b = self.taken(at);
                            self.lines.extend(b);
                            let flags = if to != 0 { "tr end  hw int" } else { "tr end" };
                            let (from_len, from_bytes) = self.event_insn(at, insn, time);
                            let kind = Kind::Branch { from: at, to, flags, from_len, from_bytes, insns: 0 };
                            self.lines.push(Out { time, queue, cpu, kind });
                        }
                        None => {
                            let (from, len, class) = self.prev.map_or((0, None, BranchClass::None), |p| (p.ip, Some(p.len), p.class));
                            let from_bytes = self.prev.map_or(InsnBytes::default(), |p| self.bytes(&p));
                            // Without the TIP.PGD's IP a direct branch still says where it went.
                            let to = if to == 0 && len.is_some() { direct_target(self.tl, from, time).unwrap_or(0) } else { to };
                            let kind = Kind::Branch { from, to, flags: end_flags(class), from_len: len, from_bytes, insns: 0 };
                            self.lines.push(Out { time, queue, cpu, kind });
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
        let step = matches!(e, FlowEvent::Insn { .. }) as u64;
        self.step_done(made, step, matches!(e, FlowEvent::Error { .. }));
    }
}

/// Where the direct branch at `ip` goes (code read from `tl` at `time`);
/// `None` for other instructions.
#[cold]
pub(super) fn direct_target(tl: &CodeTimeline, ip: u64, time: u64) -> Option<u64> {
    let mut b = [0u8; 16];
    tl.read_into(ip, &mut b, time);
    let insn = isa::classify_x86_64(ip, &b, &isa::KernelIdioms::default()).ok()?;
    matches!(insn.class, BranchClass::DirectCall | BranchClass::DirectJump).then_some(insn.target?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use codeimage::window::{Interval, Static};
    use codeimage::{BaseImage, Poke, TimelineBuilder};

    const K: u64 = 0x1000;

    /// `nop2; ret` at K, the NOP poked into `jmp +0` at time 100.
    fn code() -> CodeTimeline {
        let mut base = BaseImage::new();
        base.add_bytes(K, vec![0x66, 0x90, 0xc3, 0x90], "f");
        let mut b = TimelineBuilder::new(base);
        b.poke(Poke { time: 100, settled: None, addr: K, old: &[0x66, 0x90], new: &[0xeb, 0x00], cpu: None });
        b.build()
    }

    /// The instruction lines made of `events` over `src`, with bytes.
    fn insn_bytes<C: CodeSource>(src: &C, tl: &CodeTimeline, events: &[FlowEvent]) -> Vec<Vec<u8>> {
        let itrace = Itrace { branches: false, instructions: true, errors: false, period: 1, insn_bytes: true };
        let lanes = Lanes::new(1);
        let mut c = Collector::new(0, 0, &itrace, (src, tl), &lanes, None);
        events.iter().for_each(|&e| c.event(e));
        c.lines.iter().map(|l| if let Kind::Insn { bytes, .. } = &l.kind { bytes.as_slice().to_vec() } else { vec![] }).collect()
    }

    /// A line's bytes are those the decoder decoded: the content it chose,
    /// or the one content its source has over the instruction's window,
    /// not the timeline's at the line's time.
    #[test]
    fn lines_carry_the_bytes_decoded_not_the_code_at_their_time() {
        let tl = code();
        let insn = |lo, hi, code| FlowEvent::Insn { ip: K, len: 2, class: BranchClass::None, lo, hi, uncertain: true, code };
        let old = InsnCode::Chosen([0x66, 0x90, 0xc3, 0x90, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        // Chosen: the old content, though the line's time (150) is past the poke.
        assert_eq!(insn_bytes(&Interval(&tl), &tl, &[insn(150, 150, old)]), [vec![0x66, 0x90]]);
        // Exact over the static image: the code before the poke, at any time.
        assert_eq!(insn_bytes(&Static(&tl), &tl, &[insn(150, 150, InsnCode::Exact)]), [vec![0x66, 0x90]]);
        // Exact over the timeline: the content over the window, each side of the poke.
        let both = insn_bytes(&Interval(&tl), &tl, &[insn(50, 60, InsnCode::Exact), insn(150, 160, InsnCode::Exact)]);
        assert_eq!(both, [vec![0x66, 0x90], vec![0xeb, 0x00]]);
        // Not asked for: no bytes.
        let itrace = Itrace { branches: false, instructions: true, errors: false, period: 1, insn_bytes: false };
        let lanes = Lanes::new(1);
        let before = Static(&tl);
        let mut c = Collector::new(0, 0, &itrace, (&before, &tl), &lanes, None);
        c.event(insn(150, 150, InsnCode::Exact));
        assert!(matches!(&c.lines[0].kind, Kind::Insn { bytes, .. } if bytes.as_slice().is_empty()));
    }

    /// The bytes of the trap lines made of `events` over `src`.
    fn trap_bytes<C: CodeSource>(src: &C, tl: &CodeTimeline, events: &[FlowEvent]) -> Vec<(Option<u8>, Vec<u8>)> {
        let itrace = Itrace { branches: true, instructions: false, errors: false, period: 1, insn_bytes: true };
        let lanes = Lanes::new(1);
        let mut c = Collector::new(0, 0, &itrace, (src, tl), &lanes, None);
        events.iter().for_each(|&e| c.event(e));
        c.lines
            .iter()
            .map(
                |l| {
                    if let Kind::Branch { from_len, from_bytes, .. } = &l.kind {
                        (*from_len, from_bytes.as_slice().to_vec())
                    } else {
                        (None, vec![])
                    }
                },
            )
            .collect()
    }

    /// A trap line's instruction is the one the walk decoded where the
    /// trap stopped it; without one, the decoder's source has it at the
    /// trap's time: never the timeline's unless the decoder read that.
    #[test]
    fn trap_lines_carry_the_bytes_decoded() {
        let tl = code();
        let trap = |insn| FlowEvent::Trap { from: K, to: 0x9000, time: 150, insn };
        let old = InsnCode::Chosen([0x66, 0x90, 0xc3, 0x90, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let chosen = trap_bytes(&Interval(&tl), &tl, &[trap(Some(EventInsn { len: 2, code: old }))]);
        assert_eq!(chosen, [(Some(2), vec![0x66, 0x90])], "the content chosen, not the poked one at 150");
        let exact = [trap(Some(EventInsn { len: 2, code: InsnCode::Exact })), trap(None)];
        assert_eq!(trap_bytes(&Static(&tl), &tl, &exact), [(Some(2), vec![0x66, 0x90]), (Some(2), vec![0x66, 0x90])], "the static image's");
        assert_eq!(trap_bytes(&Interval(&tl), &tl, &exact), [(Some(2), vec![0xeb, 0x00]), (Some(2), vec![0xeb, 0x00])], "the timeline's at 150");
    }
}
