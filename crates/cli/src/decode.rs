//! `poketrace decode`: Intel PT or CoreSight ETMv4 in a perf.data
//! directory, decoded over the code timeline, printed like `perf script --itrace`.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use codeimage::window::{Interval, PerfStyle, Static};
use codeimage::{BaseImage, CodeTimeline};
use intel_pt::flow::{CycConv, FlowConfig, FlowDecoder, FlowErrorKind, FlowEvent, FlowSink, InsnBlock, MtcConv, SharedBlocks, TimeConv};
use isa::{BranchClass, KernelIdioms};
use perfdata::abi::auxtrace_type;
use perfdata::auxtrace::{CsEtmInfo, IntelPtInfo};
use perfdata::{PerfFile, RecordBody};
use sim::check::Mode as ImageMode;

use crate::lines::{Itrace, Kind, Out, Queue};
use crate::symbols::Symbolizer;
use crate::text::Text;

/// perf script's `-F` fields that `decode` prints, always in perf's own
/// order (comm, pid/tid, cpu, time, flags, ip, sym, dso, addr, insn), with
/// perf's column layout, so the output diffs against `perf script -F`.
#[derive(Clone, Copy, Default)]
pub struct Fields {
    comm: bool,
    pid: bool,
    tid: bool,
    cpu: bool,
    time: bool,
    flags: bool,
    ip: bool,
    sym: bool,
    symoff: bool,
    dso: bool,
    addr: bool,
    insn: bool,
    insnlen: bool,
    /// Nanosecond times (`--ns`); perf's default is microseconds.
    ns: bool,
}

impl Fields {
    pub fn parse(s: &str, ns: bool) -> Result<Fields> {
        let mut f = Fields { ns, ..Fields::default() };
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let field = match name {
                "comm" => &mut f.comm,
                "pid" => &mut f.pid,
                "tid" => &mut f.tid,
                "cpu" => &mut f.cpu,
                "time" => &mut f.time,
                "flags" => &mut f.flags,
                "ip" => &mut f.ip,
                "sym" => &mut f.sym,
                "symoff" => &mut f.symoff,
                "dso" => &mut f.dso,
                "addr" => &mut f.addr,
                "insn" => &mut f.insn,
                "insnlen" => &mut f.insnlen,
                _ => bail!("-F {name}: not a field poketrace prints (comm, pid, tid, cpu, time, flags, ip, sym, symoff, dso, addr, insn, insnlen)"),
            };
            *field = true;
        }
        Ok(f)
    }
}

/// What `decode` prints and from which code image.
pub struct Options {
    pub itrace: Itrace,
    pub image: ImageMode,
    pub json: bool,
    /// perf script's layout with these fields, instead of poketrace's own.
    pub fields: Option<Fields>,
}

/// Which task ran on each CPU when: from ITRACE_START, context switches and
/// COMM records, as perf attributes samples.
#[derive(Default)]
struct Threads {
    /// Per CPU: (from time, pid, tid), in time order once finished.
    runs: std::collections::HashMap<u32, Vec<(u64, i32, i32)>>,
    comms: std::collections::HashMap<i32, String>,
    /// Thread id -> process id, from COMM records (for per-thread buffers).
    pids: std::collections::HashMap<i32, i32>,
}

impl Threads {
    fn observe(&mut self, r: &perfdata::Record<'_>) {
        use perfdata::abi::misc;
        let (Some(cpu), time) = (r.sample_id.cpu, r.sample_id.time.unwrap_or(0)) else {
            if let RecordBody::Comm(c) = &r.body {
                self.comms.insert(c.tid as i32, crate::hex::text(c.comm));
                self.pids.insert(c.tid as i32, c.pid as i32);
            }
            return;
        };
        let run = match &r.body {
            RecordBody::ItraceStart(i) => Some((i.pid as i32, i.tid as i32)),
            RecordBody::SwitchCpuWide(sw) if r.misc & misc::SWITCH_OUT != 0 => Some((sw.next_prev_pid as i32, sw.next_prev_tid as i32)),
            RecordBody::SwitchCpuWide(_) | RecordBody::Switch if r.misc & misc::SWITCH_OUT == 0 => {
                r.sample_id.pid.zip(r.sample_id.tid).map(|(p, t)| (p as i32, t as i32))
            }
            RecordBody::Comm(c) => {
                self.comms.insert(c.tid as i32, crate::hex::text(c.comm));
                self.pids.insert(c.tid as i32, c.pid as i32);
                None
            }
            _ => None,
        };
        if let Some((pid, tid)) = run {
            self.runs.entry(cpu).or_default().push((time, pid, tid));
        }
    }

    fn finish(&mut self) {
        for v in self.runs.values_mut() {
            v.sort_by_key(|r| r.0);
        }
    }

    /// (pid, tid, comm) that produced a line of `queue`: the buffer's own
    /// thread for per-thread buffers, else the task on that CPU at that time.
    fn at(&self, queue: &Queue, cpu: u32, time: u64) -> Option<(i32, i32, &str)> {
        let (pid, tid) = match queue.thread {
            Some(tid) => (self.pids.get(&tid).copied().unwrap_or(-1), tid),
            None => {
                let v = self.runs.get(&cpu)?;
                let i = v.partition_point(|r| r.0 <= time).checked_sub(1)?;
                (v[i].1, v[i].2)
            }
        };
        let comm = self.comms.get(&tid).map_or(if tid == 0 { "swapper" } else { "" }, String::as_str);
        Some((pid, tid, comm))
    }
}

pub fn run(input: &Path, opts: &Options, out: &mut impl Write) -> Result<i32> {
    let (itrace, image, json) = (&opts.itrace, opts.image, opts.json);
    let file = PerfFile::open(input)?;
    let mut info = None;
    let mut time_conv = None;
    let mut aux: Vec<Queue> = Vec::new();
    let mut threads = Threads::default();
    for r in file.records() {
        let r = r?;
        threads.observe(&r);
        match r.body {
            RecordBody::AuxtraceInfo(i) if i.auxtrace_type == auxtrace_type::INTEL_PT => info = Some(Trace::IntelPt(IntelPtInfo::parse(&i)?)),
            RecordBody::AuxtraceInfo(i) if i.auxtrace_type == auxtrace_type::CS_ETM => info = Some(Trace::CoreSight(CsEtmInfo::parse(&i)?)),
            RecordBody::TimeConv(t) => time_conv = Some(t),
            // perf queues AUX data by mmap index: one buffer per CPU, or per thread.
            RecordBody::Auxtrace(a) => match aux.iter_mut().find(|q| q.idx == a.idx) {
                Some(q) => q.trace.extend_from_slice(a.data),
                None => aux.push(Queue { idx: a.idx, cpu: a.cpu, thread: (a.cpu == u32::MAX).then_some(a.tid as i32), trace: a.data.to_vec() }),
            },
            _ => {}
        }
    }
    let info = info.context("no Intel PT or CoreSight AUXTRACE_INFO in the input")?;
    if matches!(info, Trace::CoreSight(_)) && image == ImageMode::PerfStyle {
        bail!("--image perf on CoreSight ETMv4 input: perf's model is decoded for Intel PT only; use --image timeline or --image static");
    }
    let mut symbols = Symbolizer::for_input(&file, None)?;
    symbols.add_user_mappings(&file);
    let built = codeimage::from_perf_data(&file, BaseImage::new())?;
    for e in &built.errors {
        eprintln!("poketrace decode: {e}");
    }
    let tl: &CodeTimeline = &built.timeline;
    let bare = if image == ImageMode::Static {
        let mut base = BaseImage::new();
        codeimage::add_base(&file, &mut base)?;
        Some(codeimage::TimelineBuilder::new(base).build())
    } else {
        None
    };
    let code = bare.as_ref().unwrap_or(tl);
    aux.sort_by_key(|q| (q.cpu, q.thread, q.idx));
    threads.finish();
    let (mut lines, mut errors) = (0usize, 0usize);
    let mut text = Text::with_capacity(2 * TEXT_FLUSH);
    let mut emit = |l: &Out| -> Result<()> {
        lines += 1;
        if matches!(l.kind, Kind::Error { .. }) {
            errors += 1;
        }
        let who = threads.at(&aux[l.queue], l.cpu, l.time);
        if let Some(fields) = &opts.fields {
            write_perf_line(&mut text, fields, l, l.cpu, who, &symbols, tl);
        } else if json {
            write_json_line(&mut text, l, l.cpu, who, &symbols, tl);
        } else {
            write_line(&mut text, l, l.cpu, who, &symbols);
        }
        if text.as_bytes().len() >= TEXT_FLUSH {
            out.write_all(text.as_bytes())?;
            text.clear();
        }
        Ok(())
    };
    // All buffers in time order, as perf merges its queues.
    match &info {
        Trace::IntelPt(info) => pt_lines(&file, info, &aux, itrace, image, tl, code, &mut emit)?,
        Trace::CoreSight(info) => {
            let mut all: Vec<Out> = crate::decode_cs::lines(info, time_conv.as_ref(), &aux, itrace, code)?.into_iter().flatten().collect();
            all.sort_by_key(|l| (l.time, l.queue));
            all.iter().try_for_each(&mut emit)?;
        }
    }
    out.write_all(text.as_bytes())?;
    eprintln!("poketrace decode: {} trace buffers, {lines} lines, {errors} decode errors, image {}", aux.len(), image_name(image));
    Ok(0)
}

/// The `--image` name of a mode.
fn image_name(image: ImageMode) -> String {
    image.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
}

/// Bytes of lines kept before they are written out.
const TEXT_FLUSH: usize = 1 << 16;

/// The input's hardware trace.
enum Trace {
    IntelPt(IntelPtInfo),
    CoreSight(CsEtmInfo),
}

/// Intel PT: each buffer decoded on a thread of its own over the chosen
/// image, its lines handed in batches (a few per buffer at most, so memory
/// stays bounded whatever the trace's length) to `emit`, all buffers merged
/// in time order (ties in buffer order) as they come.
#[allow(clippy::too_many_arguments)]
fn pt_lines(
    file: &PerfFile,
    info: &IntelPtInfo,
    aux: &[Queue],
    itrace: &Itrace,
    image: ImageMode,
    tl: &CodeTimeline,
    code: &CodeTimeline,
    emit: &mut impl FnMut(&Out) -> Result<()>,
) -> Result<()> {
    let pt_attr = file.attrs().iter().find(|a| a.attr.type_ as u64 == info.pmu_type);
    let idioms = match file.kcore_dir() {
        Some(d) if d.join("kallsyms").is_file() => {
            let (ks, _) = perfdata::kcore::Kallsyms::load(&d.join("kallsyms"))?;
            KernelIdioms::from_symbols(ks.symbols().iter().map(|s| (s.name.as_str(), s.addr)))
        }
        _ => KernelIdioms::default(),
    };
    // MTC packets time what runs between TSCs when the event enabled them.
    let mtc = pt_attr.and_then(|a| MtcConv::from_perf(a.attr.config, info.mtc_bit, info.mtc_freq_bits, info.tsc_ctc_ratio_n, info.tsc_ctc_ratio_d));
    // CYC packets (cycle-accurate mode), converted by the trace's CBR and the max non-turbo ratio.
    let cyc = pt_attr.and_then(|a| CycConv::from_perf(a.attr.config, info.cyc_bit, info.max_nonturbo_ratio));
    let cfg = FlowConfig {
        time: TimeConv { shift: info.time_shift as u32, mult: info.time_mult, zero: info.time_zero },
        noretcomp: pt_attr.is_some_and(|a| a.attr.config & info.noretcomp_bit != 0),
        idioms,
        max_walk: 1 << 20,
        trial_insns: 256,
    };
    // The buffers' decoders build each block once between them (one table
    // for all: they decode over the same image).
    let blocks = Arc::new(SharedBlocks::default());
    std::thread::scope(|s| {
        let mut heads = Vec::with_capacity(aux.len());
        for (queue, q) in aux.iter().enumerate() {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Out>>(BATCHES_AHEAD);
            let (cfg, blocks) = (cfg.clone(), blocks.clone());
            s.spawn(move || {
                let sink = &mut Collector::new(queue, q.cpu, itrace, tl, &tx);
                match image {
                    ImageMode::Timeline => {
                        FlowDecoder::new(&q.trace, &Interval(tl), cfg).with_mtc(mtc).with_cyc(cyc).with_shared_blocks(blocks).run_with(sink)
                    }
                    // The lines show no instruction's latest time: none is worked out.
                    ImageMode::PerfStyle => FlowDecoder::new(&q.trace, &PerfStyle(tl), cfg)
                        .with_mtc(mtc)
                        .with_cyc(cyc)
                        .with_upper_bounds(false)
                        .with_shared_blocks(blocks)
                        .run_with(sink),
                    ImageMode::Static => FlowDecoder::new(&q.trace, &Static(code), cfg)
                        .with_mtc(mtc)
                        .with_cyc(cyc)
                        .with_upper_bounds(false)
                        .with_shared_blocks(blocks)
                        .run_with(sink),
                }
                sink.finish();
            });
            heads.push(Head { rx, batch: Vec::new().into_iter() });
        }
        merge(&mut heads, emit)
    })
}

/// Lines a buffer's decoder hands over at once.
const BATCH: usize = 4096;
/// Batches a buffer's decoder may be ahead of the output by.
const BATCHES_AHEAD: usize = 2;

/// One buffer's lines as they come: the batch being taken apart, and where
/// the next ones come from.
struct Head {
    rx: std::sync::mpsc::Receiver<Vec<Out>>,
    batch: std::vec::IntoIter<Out>,
}

impl Head {
    /// The buffer's next line; `None` once its decoder is done.
    fn next(&mut self) -> Option<Out> {
        loop {
            if let Some(l) = self.batch.next() {
                return Some(l);
            }
            self.batch = self.rx.recv().ok()?.into_iter();
        }
    }
}

/// Every buffer's lines to `emit` in (time, buffer) order: each buffer's
/// lines come in its own order, the earliest of the buffers' next lines
/// first (so, lines in time order within each buffer, what sorting all of
/// them by time and buffer gives). A buffer's lines that come before every
/// other buffer's next line go out in a run, without the heap: lines
/// between two timing packets share a time, so runs are long.
fn merge(heads: &mut [Head], emit: &mut impl FnMut(&Out) -> Result<()>) -> Result<()> {
    use std::cmp::Reverse;
    let mut next: Vec<Option<Out>> = heads.iter_mut().map(Head::next).collect();
    let mut order: std::collections::BinaryHeap<Reverse<(u64, usize)>> =
        next.iter().enumerate().filter_map(|(i, l)| l.as_ref().map(|l| Reverse((l.time, i)))).collect();
    while let Some(Reverse((_, i))) = order.pop() {
        let mut line = next[i].take().expect("a line where the order has one");
        // The next line of the other buffers, which this run stops before.
        let bound = order.peek().map_or((u64::MAX, usize::MAX), |r| r.0);
        loop {
            emit(&line)?;
            match heads[i].next() {
                Some(l) if (l.time, i) < bound => line = l,
                Some(l) => {
                    order.push(Reverse((l.time, i)));
                    next[i] = Some(l);
                    break;
                }
                None => break,
            }
        }
    }
    Ok(())
}

/// Turns one CPU's flow events into output lines: taken branches (from the
/// instruction before to the one after), instructions, traps, errors.
struct Collector<'a> {
    queue: usize,
    cpu: u32,
    itrace: &'a Itrace,
    tl: &'a CodeTimeline,
    /// Lines not yet handed on.
    lines: Vec<Out>,
    /// Where full batches of lines go.
    tx: &'a std::sync::mpsc::SyncSender<Vec<Out>>,
    /// The last instruction: IP, length, class, time.
    prev: Option<(u64, u8, BranchClass, u64)>,
    tracing: bool,
    /// The line of the previous instruction, to note where its branch went.
    prev_line: Option<usize>,
    /// Instructions since the last that got a line (`Itrace::period`).
    insns_seen: u64,
}

impl<'a> Collector<'a> {
    fn new(queue: usize, cpu: u32, itrace: &'a Itrace, tl: &'a CodeTimeline, tx: &'a std::sync::mpsc::SyncSender<Vec<Out>>) -> Self {
        Collector { queue, cpu, itrace, tl, lines: Vec::with_capacity(BATCH), tx, prev: None, tracing: false, prev_line: None, insns_seen: 0 }
    }

    /// Hands a full batch on; only between events, when no line waits to
    /// learn where its instruction went.
    fn flush(&mut self) {
        if self.lines.len() >= BATCH && self.prev_line.is_none() {
            // (A receiver gone means the output failed: the lines go nowhere.)
            let _ = self.tx.send(std::mem::replace(&mut self.lines, Vec::with_capacity(BATCH)));
        }
    }

    /// Hands the last lines on, at the end of the buffer.
    fn finish(&mut self) {
        let _ = self.tx.send(std::mem::take(&mut self.lines));
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
                kind: Kind::Branch { from, to, flags: flags_of(class, from, t, self.tl), from_len: Some(len) },
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
        // Where the previous instruction's branch went, for its instruction line.
        if let (Some(i), Some((from, len, class, _))) = (self.prev_line.take(), self.prev) {
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
                    self.lines.push(Out { time: lo, queue, cpu, kind: Kind::Insn { ip, len, class, to: None, uncertain } });
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
                if self.itrace.branches && self.tracing && disabled {
                    let to = to.unwrap_or(0);
                    match at {
                        Some(at) => {
                            let b = self.taken(at);
                            self.lines.extend(b);
                            let flags = if to != 0 { "tr end  hw int" } else { "tr end" };
                            self.lines.push(Out { time, queue, cpu, kind: Kind::Branch { from: at, to, flags, from_len: None } });
                        }
                        None => {
                            let (from, len, class) = self.prev.map_or((0, None, BranchClass::None), |p| (p.0, Some(p.1), p.2));
                            self.lines.push(Out { time, queue, cpu, kind: Kind::Branch { from, to, flags: end_flags(class), from_len: len } });
                        }
                    }
                }
                self.tracing = false;
                self.prev = None;
            }
            FlowEvent::Error { offset, time, ip, kind } => {
                if self.itrace.errors {
                    self.lines.push(Out {
                        time,
                        queue,
                        cpu,
                        kind: Kind::Error { offset, ip, code: perf_error_code(&kind), reason: kind.describe() },
                    });
                }
                self.tracing = false;
                self.prev = None;
            }
            // Not asked for (no state events).
            FlowEvent::Enabled { .. } | FlowEvent::State { .. } => {}
        }
    }
}

/// perf's flags for a branch of this class that a TIP.PGD ended tracing at.
fn end_flags(class: BranchClass) -> &'static str {
    match class {
        BranchClass::CondBranch => "tr end  jcc",
        BranchClass::DirectJump | BranchClass::IndirectJump => "tr end  jmp",
        BranchClass::DirectCall | BranchClass::IndirectCall => "tr end  call",
        BranchClass::Return => "tr end  return",
        BranchClass::FarTransfer => "tr end  far",
        _ => "tr end",
    }
}

/// perf's flag words for a branch from an instruction of this class at `ip`.
fn flags_of(class: BranchClass, ip: u64, t: u64, tl: &CodeTimeline) -> &'static str {
    match class {
        BranchClass::CondBranch => "jcc",
        BranchClass::DirectJump | BranchClass::IndirectJump => "jmp",
        BranchClass::DirectCall | BranchClass::IndirectCall => "call",
        BranchClass::Return => "return",
        BranchClass::FarTransfer => {
            let mut b = [0u8; 3];
            tl.read_into(ip, &mut b, t);
            match b {
                [0xcf, ..] | [0x48, 0xcf, _] => "iret",
                [0x0f, 0x05, _] => "syscall",
                [0x0f, 0x07, _] | [0x48, 0x0f, 0x07] => "sysret",
                _ => "far",
            }
        }
        BranchClass::Trap => "int",
        BranchClass::None | BranchClass::Nop => "",
    }
}

/// `seconds.nanoseconds`, as perf prints a time with `--ns`.
fn put_seconds(t: &mut Text, time: u64) {
    t.dec(time / 1_000_000_000).byte(b'.').zeros(time % 1_000_000_000, 9);
}

/// `[CPU]`, three digits at least (`-01` for a per-thread buffer's).
fn put_cpu(t: &mut Text, cpu: u32) {
    t.byte(b'[').int_zeros(i64::from(cpu as i32), 3).byte(b']');
}

/// `name+0xoff` of the symbol covering `addr` (nothing when none does), in
/// a column of `width`.
fn put_symbol(t: &mut Text, symbols: &Symbolizer, addr: u64, width: usize) {
    let from = t.mark();
    if let Some((name, off)) = symbols.lookup(addr) {
        t.str(name).byte(b'+').hex_0x(off);
    }
    t.left(from, width);
}

/// One line in poketrace's own layout.
fn write_line(t: &mut Text, l: &Out, cpu: u32, who: Option<(i32, i32, &str)>, symbols: &Symbolizer) {
    if let Some((_, tid, comm)) = who {
        let from = t.mark();
        t.str(comm).right(from, 16).byte(b' ');
        let from = t.mark();
        t.int(i64::from(tid)).right(from, 6).byte(b' ');
    }
    put_cpu(t, cpu);
    t.byte(b' ');
    let from = t.mark();
    put_seconds(t, l.time);
    t.right(from, 20).str(":   ");
    match &l.kind {
        Kind::Branch { from, to, flags, .. } => {
            t.str_left(flags, 8).byte(b' ').hex_right(*from, 16).byte(b' ');
            put_symbol(t, symbols, *from, 32);
            t.str(" => ").hex_right(*to, 16).byte(b' ');
            put_symbol(t, symbols, *to, 0);
        }
        Kind::Insn { ip, len, uncertain, .. } => {
            t.hex_right(*ip, 16).byte(b' ');
            put_symbol(t, symbols, *ip, 32);
            t.str(" len ").dec(u64::from(*len));
            if *uncertain {
                t.str("  (uncertain: several code versions fit)");
            }
        }
        Kind::Error { offset, ip, reason, .. } => {
            t.str("instruction trace error at offset ").hex_0x(*offset as u64);
            if let Some(ip) = ip {
                t.str(" ip ").hex_0x(*ip);
            }
            t.str(": ").str(reason);
        }
    }
    t.byte(b'\n');
}

/// perf's error code for an Intel PT decode error.
fn perf_error_code(kind: &FlowErrorKind) -> u32 {
    match kind {
        FlowErrorKind::Packet(_) => 3,
        FlowErrorKind::EndOfTrace => 4,
        FlowErrorKind::Unmapped | FlowErrorKind::BadInsn => 5,
        FlowErrorKind::NoTnt | FlowErrorKind::NoTip | FlowErrorKind::NoTrapPackets | FlowErrorKind::PsbMismatch { .. } => 6,
        FlowErrorKind::Overflow => 7,
        FlowErrorKind::NoProgress => 10,
    }
}

/// perf's message for its decode error code (its intel-pt decoder's numbering).
pub(crate) fn perf_error_message(code: u32) -> &'static str {
    match code {
        3 => "Bad packet",
        4 => "No more data",
        5 => "Failed to get instruction",
        6 => "Trace doesn't match instruction",
        7 => "Overflow packet",
        8 => "Lost trace data",
        10 => "Never-ending loop",
        _ => "Unknown error!",
    }
}

/// One line in `perf script -F`'s layout (the fields in perf's order and widths).
fn write_perf_line(t: &mut Text, f: &Fields, l: &Out, cpu: u32, who: Option<(i32, i32, &str)>, symbols: &Symbolizer, tl: &CodeTimeline) {
    let (pid, tid, comm) = who.unwrap_or((-1, -1, ":-1"));
    if let Kind::Error { ip, code, .. } = &l.kind {
        t.str(" instruction trace error type 1 time ");
        put_seconds(t, l.time);
        t.str(" cpu ").int(i64::from(cpu as i32)).str(" pid ").int(pid.into()).str(" tid ").int(tid.into());
        t.str(" ip ").hex_0x(ip.unwrap_or(0)).str(" code ").dec(u64::from(*code)).str(": ").str(perf_error_message(*code)).byte(b'\n');
        return;
    }
    if f.comm {
        let from = t.mark();
        t.str(comm).right(from, 16).byte(b' ');
    }
    let number = |t: &mut Text, v: i32, width: usize, right: bool| {
        let from = t.mark();
        t.int(v.into());
        if right {
            t.right(from, width);
        } else {
            t.left(from, width);
        }
    };
    match (f.pid, f.tid) {
        (true, true) => {
            number(t, pid, 5, true);
            t.byte(b'/');
            number(t, tid, 5, false);
            t.byte(b' ');
        }
        (true, false) => {
            number(t, pid, 5, true);
            t.byte(b' ');
        }
        (false, true) => {
            number(t, tid, 5, true);
            t.byte(b' ');
        }
        (false, false) => {}
    }
    if f.cpu {
        put_cpu(t, cpu);
        t.byte(b' ');
    }
    if f.time {
        let from = t.mark();
        t.dec(l.time / 1_000_000_000).right(from, 5).byte(b'.');
        match f.ns {
            true => t.zeros(l.time % 1_000_000_000, 9),
            false => t.zeros(l.time % 1_000_000_000 / 1000, 6),
        };
        t.str(": ");
    }
    let sym = |t: &mut Text, addr: u64| {
        if f.sym {
            match symbols.lookup(addr) {
                Some((name, off)) if f.symoff => t.byte(b' ').str(name).byte(b'+').hex_0x(off),
                Some((name, _)) => t.byte(b' ').str(name),
                None => t.str(" [unknown]"),
            };
        }
        if f.dso {
            t.str(" (").str(if addr == 0 { "[unknown]" } else { symbols.dso(addr) }).byte(b')');
        }
    };
    let (ip, len, flags, addr, branch) = match &l.kind {
        Kind::Branch { from, to, flags, from_len } => (*from, *from_len, *flags, *to, true),
        Kind::Insn { ip, len, class, to, .. } => (*ip, Some(*len), flags_of(*class, *ip, l.time, tl), to.unwrap_or(0), false),
        Kind::Error { .. } => unreachable!("written above"),
    };
    if f.flags {
        t.str("  ").str_left(flags, 21).byte(b' ');
    }
    // perf prints an instruction sample's addr before its ip, a branch's after.
    if f.addr && !branch {
        t.hex_right(addr, 16);
    }
    if f.ip {
        t.byte(b' ').hex_right(ip, 16);
        sym(t, ip);
    }
    if f.addr && branch {
        t.str(" => ").hex_right(addr, 16);
        sym(t, addr);
    }
    if f.insnlen || f.insn {
        // A branch sample's instruction is the branch itself.
        let len = match len {
            Some(n) => n as usize,
            None => insn_len(tl, ip, l.time),
        };
        let mut bytes = [0u8; 16];
        let bytes = &mut bytes[..len];
        tl.read_into(ip, bytes, l.time);
        if f.insnlen {
            t.str(" ilen: ").dec(len as u64);
        }
        if f.insn && !bytes.is_empty() {
            t.str(" insn:");
            for &b in bytes.iter() {
                t.byte(b' ').hex_byte(b);
            }
        }
    }
    t.byte(b'\n');
}

/// Length of the instruction at `ip` at time `t` (0 when there is none).
fn insn_len(tl: &CodeTimeline, ip: u64, t: u64) -> usize {
    if ip == 0 {
        return 0;
    }
    let mut b = [0u8; 16];
    tl.read_into(ip, &mut b, t);
    isa::classify_x86_64(ip, &b, &KernelIdioms::default()).map_or(0, |i| i.len as usize)
}

/// One line as a JSON object, its keys in sorted order (as `serde_json`
/// writes a map): `addr`, `addr_sym`, `code`, `comm`, `cpu`, `error`,
/// `flags`, `insn`, `ip`, `offset`, `pid`, `sym`, `tid`, `time`, `uncertain`,
/// those the line has.
fn write_json_line(t: &mut Text, l: &Out, cpu: u32, who: Option<(i32, i32, &str)>, symbols: &Symbolizer, tl: &CodeTimeline) {
    let cpu = i64::from(cpu as i32);
    let sym = |t: &mut Text, addr: u64| {
        t.byte(b'"');
        if let Some((name, off)) = symbols.lookup(addr) {
            t.json_chars(name).byte(b'+').hex_0x(off);
        }
        t.byte(b'"');
    };
    let (pid, tid, comm) = match who {
        Some((pid, tid, comm)) => (Some(pid), Some(tid), Some(comm)),
        None => (None, None, None),
    };
    let task = |t: &mut Text, from_pid: bool| {
        if from_pid {
            if let Some(pid) = pid {
                t.str(",\"pid\":").int(pid.into());
            }
        } else if let Some(tid) = tid {
            t.str(",\"tid\":").int(tid.into());
        }
    };
    let put_comm = |t: &mut Text| {
        if let Some(c) = comm {
            t.str(",\"comm\":\"").json_chars(c).byte(b'"');
        }
    };
    match &l.kind {
        Kind::Branch { from, to, flags, .. } => {
            t.str("{\"addr\":").dec(*to).str(",\"addr_sym\":");
            sym(t, *to);
            put_comm(t);
            t.str(",\"cpu\":").int(cpu).str(",\"flags\":[");
            for (i, f) in flags.split(' ').filter(|f| !f.is_empty()).enumerate() {
                if i > 0 {
                    t.byte(b',');
                }
                t.byte(b'"').json_chars(f).byte(b'"');
            }
            t.str("],\"ip\":").dec(*from);
            task(t, true);
            t.str(",\"sym\":");
            sym(t, *from);
        }
        Kind::Insn { ip, len, .. } => {
            t.byte(b'{');
            let mut bytes = [0u8; 16];
            let bytes = &mut bytes[..usize::from(*len).min(16)];
            tl.read_into(*ip, bytes, l.time);
            if let Some(c) = comm {
                t.str("\"comm\":\"").json_chars(c).str("\",");
            }
            t.str("\"cpu\":").int(cpu).str(",\"insn\":\"");
            for &b in bytes.iter() {
                t.hex_byte(b);
            }
            t.str("\",\"ip\":").dec(*ip);
            task(t, true);
            t.str(",\"sym\":");
            sym(t, *ip);
        }
        Kind::Error { offset, ip, code, reason } => {
            t.str("{\"code\":").dec(u64::from(*code));
            put_comm(t);
            t.str(",\"cpu\":").int(cpu).str(",\"error\":\"").json_chars(reason).str("\",\"ip\":");
            match ip {
                Some(ip) => t.dec(*ip),
                None => t.str("null"),
            };
            t.str(",\"offset\":").dec(*offset as u64);
            task(t, true);
        }
    }
    task(t, false);
    t.str(",\"time\":").dec(l.time);
    if let Kind::Insn { uncertain, .. } = &l.kind {
        t.str(",\"uncertain\":").str(if *uncertain { "true" } else { "false" });
    }
    t.str("}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// perf's `--itrace` periods: counts of instructions taken, zero
    /// anything meaning each one, other periods refused by name.
    #[test]
    fn itrace_periods_are_counts_of_instructions() {
        let parsed = |s: &str| Itrace::parse(s).map(|t| (t.branches, t.instructions, t.errors, t.period));
        assert_eq!(parsed("be").unwrap(), (true, false, true, 1));
        assert_eq!(parsed("i").unwrap(), (false, true, false, 1));
        assert_eq!(parsed("i1000ib").unwrap(), (true, true, false, 1000));
        assert_eq!(parsed("bi0i").unwrap(), (true, true, false, 1));
        assert_eq!(parsed("i0nse").unwrap(), (false, true, true, 1));
        assert_eq!(parsed("i0us").unwrap().3, 1);
        assert_eq!(parsed("i0").unwrap().3, 1);
        for (bad, says) in [
            ("i100us", "100us"),
            ("i10", "10ns"),
            ("i5t", "5t"),
            ("i2ms", "2ms"),
            ("ib99999999999999999999i", "too large"),
            ("bx", "'x'"),
            ("is", "'s'"),
        ] {
            let e = parsed(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let every = Itrace::parse("i3i").unwrap();
        let mut seen = 0;
        let got: Vec<bool> = (0..7).map(|_| every.sampled(&mut seen)).collect();
        assert_eq!(got, [false, false, true, false, false, true, false]);
    }

    /// JSON lines hold what `serde_json` writes for the same values (its
    /// maps sorted by key), with and without the task, for each kind of line.
    #[test]
    fn json_lines_are_what_serde_json_writes() {
        use serde_json::json;
        let tl = codeimage::TimelineBuilder::new(BaseImage::new()).build();
        let symbols = Symbolizer::default();
        let line = |time, kind| Out { time, queue: 0, cpu: 3, kind };
        let lines = [
            line(1_000_000_123, Kind::Branch { from: u64::MAX, to: 0x1234, flags: "tr end  call", from_len: Some(5) }),
            line(7, Kind::Insn { ip: 0xffff_ffff_8100_0000, len: 3, class: BranchClass::None, to: None, uncertain: true }),
            line(0, Kind::Error { offset: 99, ip: None, code: 6, reason: "no \"TIP\"\there".into() }),
            line(u64::MAX, Kind::Error { offset: 0, ip: Some(1), code: 3, reason: String::new() }),
        ];
        for l in &lines {
            for who in [None, Some((-1, 42, "perf\\exec\u{1}")), Some((7, 8, "naïve"))] {
                let mut v = match &l.kind {
                    Kind::Branch { from, to, flags, .. } => json!({
                        "time": l.time, "cpu": 3, "ip": from, "addr": to, "sym": "", "addr_sym": "",
                        "flags": flags.split(' ').filter(|f| !f.is_empty()).collect::<Vec<_>>(),
                    }),
                    Kind::Insn { ip, uncertain, .. } => {
                        json!({"time": l.time, "cpu": 3, "ip": ip, "sym": "", "insn": "000000", "uncertain": uncertain})
                    }
                    Kind::Error { offset, ip, code, reason } => {
                        json!({"time": l.time, "cpu": 3, "ip": ip, "offset": offset, "error": reason, "code": code})
                    }
                };
                if let (Some((pid, tid, comm)), Some(m)) = (who, v.as_object_mut()) {
                    m.insert("pid".into(), json!(pid));
                    m.insert("tid".into(), json!(tid));
                    m.insert("comm".into(), json!(comm));
                }
                let mut t = Text::default();
                write_json_line(&mut t, l, 3, who, &symbols, &tl);
                assert_eq!(std::str::from_utf8(t.as_bytes()).unwrap(), format!("{v}\n"));
            }
        }
    }

    /// The streaming merge gives what sorting all lines by (time, buffer)
    /// gives, for buffers whose lines come in time order, in batches of any
    /// size (empty ones too), from decoders on other threads.
    #[test]
    fn merge_is_a_stable_sort_by_time_and_buffer() {
        let mut rng = testkit::Rng(0x5eed);
        for round in 0..50 {
            let buffers = 1 + rng.below(6) as usize;
            let mut all: Vec<(u64, usize, u64)> = Vec::new();
            let mut heads = Vec::new();
            std::thread::scope(|s| {
                for queue in 0..buffers {
                    let (mut time, n) = (rng.below(10), rng.below(300) as usize);
                    let mut lines = Vec::new();
                    for k in 0..n {
                        time += rng.below(3); // ties within and across buffers
                        lines.push((time, queue, k as u64));
                    }
                    all.extend(&lines);
                    let cuts: Vec<usize> = (0..rng.below(5)).map(|_| rng.below(n as u64 + 1) as usize).collect();
                    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Out>>(1);
                    s.spawn(move || {
                        let mut cuts = cuts;
                        cuts.push(0);
                        cuts.push(lines.len());
                        cuts.sort();
                        for w in cuts.windows(2) {
                            let batch = lines[w[0]..w[1]].iter().map(|&(time, queue, k)| Out {
                                time,
                                queue,
                                cpu: k as u32,
                                kind: Kind::Branch { from: k, to: 0, flags: "jcc", from_len: None },
                            });
                            tx.send(batch.collect()).unwrap();
                        }
                    });
                    heads.push(Head { rx, batch: Vec::new().into_iter() });
                }
                let mut got = Vec::new();
                merge(&mut heads, &mut |l| {
                    got.push((l.time, l.queue, u64::from(l.cpu)));
                    Ok(())
                })
                .unwrap();
                all.sort_by_key(|&(time, queue, _)| (time, queue));
                assert_eq!(got, all, "round {round}");
            });
        }
    }
}
